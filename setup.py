"""The C extensions, built by setuptools (pyproject.toml holds everything else).

* ``neuron_explorer.runtime._fastpath``: the capture's hot path (execution wrapper, rings, gates).
* ``neuron_explorer.exporters._pqenc``: ``view``'s Parquet value encoders.
* ``neuron_explorer.analysis._sweep``: the step detector's covered time in one pass.

The compiler, ``CFLAGS``, ``CPPFLAGS`` and ``LDFLAGS`` are the user's (setuptools reads them),
so a distribution's hardening flags or a cross compiler apply.  The extensions are optional at run
time (a Python twin takes over), so a machine without a compiler or Python headers still installs:
the build says once which extension is missing and what it costs (docs/install.md, decision 0120).
``NEURON_EXPLORER_NO_EXT=1`` skips them.

In a source tree, ``python setup.py build_ext --inplace`` builds them next to their sources, where
an editable install or ``PYTHONPATH=src`` finds them.  The ``.pth`` start-up line and
``neuron_explorer_autoload.py`` are placed at the root of site-packages (``build_py`` below).
"""

from __future__ import annotations

import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

# (module, source, headers it includes, what its absence costs)
EXTENSIONS = [
    ("neuron_explorer.runtime._fastpath", "src/neuron_explorer/runtime/_fastpath.c",
     ["src/neuron_explorer/runtime/_expand.h", "src/neuron_explorer/runtime/_finite.h",
      "src/neuron_explorer/runtime/_hooks.h", "src/neuron_explorer/runtime/_jit.h",
      "src/neuron_explorer/runtime/_local.h", "src/neuron_explorer/runtime/_procread.h",
      "src/neuron_explorer/runtime/_step.h"],
     "the capture runs its Python hot path: about 3x the overhead per event (~1.6% instead of ~0.5% of a "
     "small training step's instructions, docs/decisions/0006-c-hot-path.md)"),
    ("neuron_explorer.exporters._pqenc", "src/neuron_explorer/exporters/_pqenc.c", [],
     "view writes Parquet with Arrow's writer: same files, slower to write"),
    ("neuron_explorer.analysis._sweep", "src/neuron_explorer/analysis/_sweep.c", [],
     "the step detector's covered time is found by numpy passes: the same figures, a diff reads events slower"),
]
# files placed at the root of site-packages: the .pth start-up line and the module it imports (a
# real file even in an editable install, so that moving the checkout never breaks `import torch`)
ROOT_FILES = ["neuron_explorer_autostart.pth", "neuron_explorer_autoload.py"]


class OptionalBuildExt(build_ext):
    """Builds each extension, or says in one line why not and what that costs, and goes on."""

    def run(self) -> None:
        self._said: set[str] = set()
        if os.environ.get("NEURON_EXPLORER_NO_EXT", "0") not in ("", "0"):
            self._say_all("NEURON_EXPLORER_NO_EXT is set")
            return
        if not sys.platform.startswith("linux"):
            self._say_all(f"the C extensions are built on Linux only (this is {sys.platform})")
            return
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler at all (setuptools raises before any file)
            self._say_all(_short(e))

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - CompileError, LinkError, missing Python.h: install anyway
            self._say(ext.name, _short(e))

    def copy_extensions_to_source(self) -> None:
        """``--inplace``: copy only what was built (the others were already said)."""
        kept = self.extensions
        self.extensions = [e for e in kept if e.name not in self._said]
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = kept

    def _say_all(self, why: str) -> None:
        for ext in self.extensions:
            self._say(ext.name, why)

    def _say(self, name: str, why: str) -> None:
        """Once per extension: what is missing, why, and what that costs."""
        if name in self._said:
            return
        self._said.add(name)
        cost = next(c for m, _s, _d, c in EXTENSIONS if m == name)
        print(f"neuron-explorer: warning: {name} not built ({why}); {cost}", file=sys.stderr)


def _short(e: BaseException) -> str:
    """The error's last line, without the compiler command line setuptools puts in it."""
    text = (str(e).strip().splitlines() or [""])[-1]
    if "returned non-zero exit status" in text:
        text = "the C compiler failed, exit status " + text.rsplit("exit status", 1)[1].strip(" .']\"")
    return f"{type(e).__name__}: {text[:200]}"


class BuildPyWithRootFiles(build_py):
    """Copies ``ROOT_FILES`` from src/ to the root of the build (the wheel's site-packages root)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for name in ROOT_FILES:
            self.mkpath(self.build_lib)
            shutil.copyfile(os.path.join("src", name), os.path.join(self.build_lib, name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, n) for n in ROOT_FILES]


class EditableWithRootFiles(editable_wheel):
    """``pip install -e``: the root files as real files too (a ``.pth`` line runs only from
    site-packages).  setuptools' editable wheel writes whatever is in its staging directory; the
    hook that fills it for namespace packages is the one place to add files there."""

    def _install_namespaces(self, installation_dir, pth_prefix):  # type: ignore[no-untyped-def]
        super()._install_namespaces(installation_dir, pth_prefix)
        here = os.path.dirname(os.path.abspath(__file__))
        for name in ROOT_FILES:
            shutil.copyfile(os.path.join(here, "src", name), os.path.join(installation_dir, name))


setup(
    ext_modules=[Extension(m, [s], depends=d, extra_compile_args=["-fvisibility=hidden"])
                 for m, s, d, _c in EXTENSIONS],
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithRootFiles, "editable_wheel": EditableWithRootFiles},
)
