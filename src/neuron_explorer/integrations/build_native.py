"""``python -m neuron_explorer.integrations.build_native build|status``: build, or report, the
extension compiled against the installed torch (``integrations/torch/native.py``, decision 0221).
``make setup`` runs ``build``.  (A module of its own: ``-m`` on ``native`` itself would import it
twice, once through the torch integration's package.)"""

from __future__ import annotations

import sys

from neuron_explorer.integrations.torch.native import main

if __name__ == "__main__":
    sys.exit(main())
