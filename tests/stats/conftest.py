"""Make the shared simulators importable as `sim` from the statistics tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
