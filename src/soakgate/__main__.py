"""`python -m soakgate` runs the CLI."""

import sys

from soakgate.cli.main import main

sys.exit(main())
