"""Fixtures for the on-demand capture tests: the installed interpreter of the monitor tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitor"))
