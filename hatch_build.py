"""Hatchling build hook: compiles the C hot path (``src/neuron_explorer/runtime/_fastpath.c``) and
the Parquet value encoders of ``view`` (``src/neuron_explorer/exporters/_pqenc.c``).

Both extensions are optional at run time (the Python wrapper takes over when it cannot be imported),
so a machine without a C compiler or Python headers still installs, with a warning.  An editable
install (``pip install -e .``) builds the module next to its source, where the editable import
path finds it; a wheel gets it as a platform-specific file.  ``NEURON_EXPLORER_NO_EXT=1`` skips the
build.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = os.path.join("src", "neuron_explorer", "runtime", "_fastpath.c")
MODULE = "neuron_explorer/runtime/_fastpath"
# (source, module) of every extension; the first is the capture hot path
EXTENSIONS = [(SOURCE, MODULE),
              (os.path.join("src", "neuron_explorer", "exporters", "_pqenc.c"), "neuron_explorer/exporters/_pqenc")]


def compile_extension(root: str, out_path: str, source: str = SOURCE) -> str | None:
    """Compile the extension ``source`` to ``out_path``; returns None, or why it could not be built."""
    if not sys.platform.startswith("linux"):
        return f"the C hot path is built on Linux only (this is {sys.platform})"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python.h in {include} (install the Python development headers, e.g. python3-dev)"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    cmd = cc + ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", f"-I{include}",
                os.path.join(root, source), "-o", out_path]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not run the C compiler ({' '.join(cc)}): {e}"
    if p.returncode != 0:
        return f"the C compiler failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}"
    return None


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or os.environ.get("NEURON_EXPLORER_NO_EXT", "0") not in ("", "0"):
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        if version != "editable":
            self._tmp = tempfile.mkdtemp(prefix="neuron-explorer-build-")
        for source, module in EXTENSIONS:
            if version == "editable":
                out = os.path.join(self.root, "src", module + suffix)
            else:
                out = os.path.join(self._tmp, os.path.basename(module) + suffix)
            why = compile_extension(self.root, out, source)
            if why is not None:
                print(f"neuron-explorer: warning: {module} not built, its Python fallback is used: {why}",
                      file=sys.stderr)
                continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            if version != "editable":
                build_data["force_include"][out] = module + suffix
