"""soakgate: find silent output corruption in LLM inference servers."""

from soakgate.errors import SoakgateError

__version__ = "0.1.0"
__all__ = ["SoakgateError", "__version__"]
