"""``python -m neuron_explorer.monitor``: ``neuron-monitor``."""

import sys

from neuron_explorer.monitor.cli import main

sys.exit(main())
