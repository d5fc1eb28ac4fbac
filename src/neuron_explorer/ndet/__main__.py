"""``python -m neuron_explorer.ndet``: ``neuron-det``."""

import sys

from neuron_explorer.ndet.cli import main

sys.exit(main())
