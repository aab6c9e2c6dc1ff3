"""`python -m soakgate.mockserver [flags]`: the same server and flags as `soakgate mock-server`."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from soakgate.errors import SoakgateError
from soakgate.mockserver.config import add_arguments, config_from_args
from soakgate.mockserver.serve import run_server


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line and exit 2, like the `soakgate` command's."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the server; one-line error and exit 2 on bad input."""
    parser = _Parser(
        prog="python -m soakgate.mockserver", description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_server(config_from_args(args))
    except SoakgateError as exc:
        print(f"soakgate-mock: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
