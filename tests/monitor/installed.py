"""An interpreter with this checkout installed the way a wheel installs it.

What a user's install puts in site-packages decides what an unmodified program runs: the autostart
``.pth`` and the entry points (``torch.backends``, ``jax_plugins``).  The shared interpreter has some
other checkout's copies of them, so tests of "no variable set" behaviour run a virtual environment
that sees the system's packages (torch, jax) but takes ours from this repository: its
``site-packages`` holds the repository's ``.pth``, a path file for ``src/`` and a dist-info whose
``entry_points.txt`` is made from ``pyproject.toml``.  It comes first on ``sys.path``, so
``importlib.metadata`` finds our distribution before the system's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def _entry_points_txt() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    out = []
    for group, entries in groups.items():
        out.append(f"[{group}]")
        out += [f"{name} = {target}" for name, target in entries.items()]
        out.append("")
    return "\n".join(out)


def make_installed_python(where: Path) -> str:
    """Create the environment under ``where``; returns its ``python``."""
    venv = where / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    shutil.copy(REPO / "src" / "neuron_explorer_autostart.pth", site / "neuron_explorer_autostart.pth")
    (site / "_neuron_explorer_checkout.pth").write_text(str(REPO / "src") + "\n")
    # the one place the version is written (pyproject.toml reads it as a dynamic field)
    version = re.search(r'^__version__ = "([^"]+)"', (REPO / "src" / "neuron_explorer" / "__init__.py").read_text(),
                        re.M).group(1)
    dist = site / f"neuron_explorer-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: neuron-explorer\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(_entry_points_txt())
    return str(py)
