"""Fixtures for the neuron-monitor tests (helpers live in monitor_helpers.py)."""

from monitor_helpers import apps, stats_dir  # noqa: F401 - re-exported as fixtures
