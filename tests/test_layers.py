"""The import rule of docs/architecture.md, checked on every run.

Every ``import`` in ``src/neuron_explorer`` (function-level ones included) is resolved to the module
it names and checked against the layer table below: a module may import its own package and the
packages its layer allows, never a higher layer, never another package's underscore names;
packages never import each other in a cycle, and neither do files, within a package too.  Each
layer is a top-level package or module of its own, so the tree shows the layers.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"
ROOT = "neuron_explorer"

# top-level package (or module) -> layer: the layer of everything under it
LAYER_OF = {
    "neuron_explorer": "util",  # the package root holds only __version__
    "neuron_explorer.util": "util",
    "neuron_explorer.contracts": "contracts",
    "neuron_explorer.proto": "contracts",
    "neuron_explorer.runtime": "runtime",
    "neuron_explorer.capture": "consumers",
    "neuron_explorer.recorders": "consumers",
    "neuron_explorer.integrations": "integrations",
    "neuron_explorer.boot": "composition",
    "neuron_explorer.torch": "composition",
    "neuron_explorer.discovery": "composition",
    "neuron_explorer.ondemand": "composition",
    "neuron_explorer.analysis": "analysis",
    "neuron_explorer.exporters": "exporters",
    "neuron_explorer.view": "tools",
    "neuron_explorer.diff": "tools",
    "neuron_explorer.attach": "tools",
    "neuron_explorer.ndet": "tools",
    "neuron_explorer.monitor": "tools",
    "neuron_explorer.ui": "ui",
    "neuron_explorer.cli": "entry",
    "neuron_explorer.__main__": "entry",
    "neuron_explorer.notebook": "entry",
}

# what each layer may import besides itself
ALLOWED = {
    "util": set(),
    "contracts": {"util", "contracts"},  # the contracts share their vocabulary and the protobuf schema
    "runtime": {"util", "contracts"},
    "consumers": {"util", "contracts", "runtime"},
    "integrations": {"util", "contracts", "runtime", "consumers"},
    "composition": {"util", "contracts", "runtime", "consumers", "integrations", "composition"},
    "analysis": {"util", "contracts"},
    "exporters": {"util", "contracts", "analysis"},
    "tools": {"util", "contracts", "analysis", "exporters"},
    "ui": {"util", "contracts"},
    "entry": {"util", "contracts", "runtime", "consumers", "integrations", "composition", "analysis",
              "exporters", "tools", "ui", "entry"},
}

# imports the layers alone would refuse (importer package -> imported package)
EXCEPTIONS = {
    ("neuron_explorer.view", "neuron_explorer.ui"),  # `view` with no output format serves the UI
    ("neuron_explorer.diff", "neuron_explorer.view"),  # `diff` converts captures through view's one flow
    # `%load_ext neuron_explorer`: IPython calls the package's load_ipython_extension, which imports
    # the notebook module only when called
    ("neuron_explorer", "neuron_explorer.notebook"),
}

# import paths that 0.1.0's user documentation gave, kept as aliases of the module that replaced
# them (docs/decisions/0100-layers-named-by-the-tree.md): shim -> the one module it may import.
# Nothing in the package imports a shim.
SHIMS = {
    "neuron_explorer.ndet.format": "neuron_explorer.contracts.ndet_log",  # docs/ndet.md, read_log
    "neuron_explorer.monitor.app_stats": "neuron_explorer.recorders.app_stats",  # docs/monitor.md, AppStats
}


def layer(module: str) -> str:
    best = max((p for p in LAYER_OF if module == p or module.startswith(p + ".")), key=len)
    return LAYER_OF[best]


def package(module: str) -> str:
    """The unit that may import itself freely: a top-level subpackage (or module)."""
    return ".".join(module.split(".")[:2])


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted((SRC / ROOT).rglob("*.py")):
        rel = p.relative_to(SRC).with_suffix("")
        name = ".".join(rel.parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import of our package in the file."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == ROOT]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != ROOT:
                continue
            for a in node.names:
                found.append((mod, a.name, node.lineno))
    return found


def resolve(mod: str, name: str | None, known: dict[str, Path]) -> str:
    """``from pkg import sub`` imports the module ``pkg.sub`` when that module exists."""
    if name is not None and f"{mod}.{name}" in known:
        return f"{mod}.{name}"
    return mod


def violations(known: dict[str, Path], edges: list[tuple[str, str, str | None, int]]) -> list[str]:
    out = []
    for src, dst, name, line in edges:
        where = f"{known[src].relative_to(SRC)}:{line}" if src in known else f"{src}:{line}"
        if dst in SHIMS:
            out.append(f"{where}: {src} imports {dst}, kept only for users: import {SHIMS[dst]}")
            continue
        ls, ld = layer(src), layer(dst)
        ps, pd = package(src), package(dst)
        if ps != pd:
            if (ps, pd) in EXCEPTIONS or SHIMS.get(src) == dst:
                pass
            elif ld == ls:
                if ls not in ALLOWED[ls]:
                    out.append(f"{where}: {src} ({ls}) imports {dst}, another package of the same layer")
            elif ld not in ALLOWED[ls]:
                out.append(f"{where}: {src} ({ls}) imports {dst} ({ld}): not allowed by docs/architecture.md")
            if name is not None and name.startswith("_") and not name.startswith("__"):
                out.append(f"{where}: {src} imports the private name {name} of {dst}")
    return out


def package_cycles(edges) -> list[list[str]]:
    """Cycles of imports between packages."""
    return cycles(edges, package)


def file_cycles(edges) -> list[list[str]]:
    """Cycles of imports between files, within a package too: a module-level import or one inside
    a function alike (a deferred import hides a circle, it does not break it)."""
    return cycles(edges, lambda m: m)


def cycles(edges, unit) -> list[list[str]]:
    """Each cycle of the graph of imports between ``unit(module)`` nodes, found by a depth-first
    search (one cycle per back edge, so every circle has at least one)."""
    graph = defaultdict(set)
    for src, dst, _, _ in edges:
        if unit(src) != unit(dst):
            graph[unit(src)].add(unit(dst))
    found, state = [], {}

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    return found


def all_edges(known):
    edges = []
    for name, path in known.items():
        for mod, imported, line in imports(name, path):
            edges.append((name, resolve(mod, imported, known), imported, line))
    return edges


def test_every_module_has_a_layer():
    known = modules()
    assert all(layer(m) for m in known)


def test_imports_follow_the_layers():
    known = modules()
    assert violations(known, all_edges(known)) == []


# Imports made only when a host program calls in, after the package is loaded: IPython's
# `%load_ext neuron_explorer` calls the package root's load_ipython_extension, which imports the
# notebook module (entry layer).  The root is imported by every layer for __version__, so this one
# function-level edge would close a circle through any of them; it is left out of the circle checks
# (and only it: the root holds nothing else).
CALL_TIME = {("neuron_explorer", "neuron_explorer.notebook")}


def _load_time_edges(known):
    return [e for e in all_edges(known) if (e[0], e[1]) not in CALL_TIME]


def test_no_import_cycles_between_packages():
    known = modules()
    assert package_cycles(_load_time_edges(known)) == []


def test_no_import_cycles_between_files():
    known = modules()
    assert file_cycles(_load_time_edges(known)) == []


@pytest.mark.parametrize("circle", [
    ["neuron_explorer.exporters.perfetto.lanes", "neuron_explorer.exporters.perfetto.writer"],
    ["neuron_explorer.integrations.jax.convert", "neuron_explorer.integrations.jax.xplane",
     "neuron_explorer.integrations.jax.plugin"],
])
def test_the_checker_catches_a_circle_of_files_in_one_package(circle):
    """Two and three files of one package importing each other in a ring (the two circles the tree
    had), next to an import that closes no ring: each ring is reported, the rest is not."""
    ring = [(a, b, None, 1) for a, b in zip(circle, circle[1:] + circle[:1])]
    bystander = [("neuron_explorer.view.pipeline", circle[0], None, 1)]
    (found,) = file_cycles(bystander + ring)
    assert found[0] == found[-1] and set(found) == set(circle)
    assert file_cycles(bystander + ring[:-1]) == []
    assert package_cycles(ring) == []  # one package: only the file check sees it


def test_every_layer_is_a_top_level_package_or_module():
    """The tree shows the layers: no module inside a package belongs to another layer."""
    assert [p for p in LAYER_OF if len(p.split(".")) > 2] == []


def test_shims_are_aliases_nothing_of_ours_imports():
    known = modules()
    edges = all_edges(known)
    for shim, target in SHIMS.items():
        assert shim in known, shim
        assert {d for s, d, _, _ in edges if s == shim} == {target}
    assert [e for e in edges if e[1] in SHIMS] == []


@pytest.mark.parametrize("src,dst,name,expect", [
    ("neuron_explorer.runtime.core", "neuron_explorer.capture.sink", "CaptureSink", "not allowed"),
    ("neuron_explorer.analysis.reader", "neuron_explorer.exporters.parquet", "ParquetWriter", "not allowed"),
    ("neuron_explorer.ui.store", "neuron_explorer.analysis.reader", "Session", "not allowed"),
    ("neuron_explorer.capture.sink", "neuron_explorer.recorders.ndet", "NdetRecorder", "same layer"),
    ("neuron_explorer.view.pipeline", "neuron_explorer.analysis.reader", "_arr", "private name"),
    ("neuron_explorer.ndet.cli", "neuron_explorer.ndet.format", "read_log", "kept only for users"),
])
def test_the_checker_catches_an_upward_or_sideways_import(src, dst, name, expect):
    (msg,) = violations({}, [(src, dst, name, 1)])
    assert expect in msg


def public_surface(known: dict[str, Path]) -> dict[str, set[str]]:
    """{package: the names its ``__init__`` lists in ``__all__``} for every package of ours."""
    out = {}
    for name, path in known.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                out[name] = set(ast.literal_eval(node.value))
    return out


def surface_violations(known, edges, surface) -> list[str]:
    """Imports from another package of a module or name its ``__all__`` does not list."""
    out = []
    for src, dst, name, line in edges:
        pd = package(dst)
        if package(src) == pd or pd not in surface:
            continue
        first = dst[len(pd) + 1:].split(".")[0] if dst != pd else name
        if first and first not in surface[pd]:
            where = f"{known[src].relative_to(SRC)}:{line}" if src in known else f"{src}:{line}"
            out.append(f"{where}: {src} imports {dst}{'.' + name if name else ''}, outside {pd}.__all__")
    return out


def test_every_package_declares_its_public_surface():
    known = modules()
    surface = public_surface(known)
    missing = [m for m, p in known.items() if p.name == "__init__.py" and m not in surface]
    assert missing == []
    for pkg, names in surface.items():
        for n in names:
            assert n == "__version__" or f"{pkg}.{n}" in known or n.isidentifier(), (pkg, n)


def test_packages_are_used_through_their_public_surface():
    known = modules()
    assert surface_violations(known, all_edges(known), public_surface(known)) == []


def test_the_surface_check_catches_an_unlisted_module():
    surface = {"neuron_explorer.exporters": {"interface"}}
    (msg,) = surface_violations({}, [("neuron_explorer.view.pipeline", "neuron_explorer.exporters.parquet", "X", 1)],
                                surface)
    assert "outside neuron_explorer.exporters.__all__" in msg


def test_the_documented_import_paths_still_import():
    """docs/ndet.md and docs/monitor.md of 0.1.0 showed these imports: they give the same objects."""
    from neuron_explorer.contracts import ndet_log
    from neuron_explorer.monitor.app_stats import AppStats
    from neuron_explorer.ndet.format import KIND_EXEC, read_log
    from neuron_explorer.recorders import app_stats

    assert read_log is ndet_log.read_log and KIND_EXEC == ndet_log.KIND_EXEC
    assert AppStats is app_stats.AppStats


def module_index(text: str) -> set[str]:
    """The modules the "Every module" section of docs/architecture.md lists (``- `name`: ...``)."""
    section = text.split("\n## Every module", 1)[1].split("\n## ", 1)[0]
    return {f"{ROOT}.{m}" for m in re.findall(r"^- `([\w.]+)`:", section, flags=re.M)}


def index_mismatch(listed: set[str], known: dict[str, Path]) -> list[str]:
    """Modules of the tree the index leaves out, and names it lists that are no module."""
    files = {m for m, p in known.items() if p.name != "__init__.py"}
    return [f"not in docs/architecture.md: {m}" for m in sorted(files - listed)] + \
           [f"listed in docs/architecture.md, not in src: {m}" for m in sorted(listed - files)]


def test_architecture_lists_every_module():
    assert index_mismatch(module_index(ARCHITECTURE.read_text()), modules()) == []


def test_the_index_check_catches_a_missing_and_a_stale_module():
    known = {"neuron_explorer.util.atomic": Path("atomic.py"), "neuron_explorer.util.alloc": Path("alloc.py"),
             "neuron_explorer.util": Path("__init__.py")}
    listed = module_index("# Architecture\n## Every module\n- `util.atomic`: files\n- `util.stragglers`: gone\n"
                          "## Decisions\n- `util.alloc`: outside the section\n")
    assert index_mismatch(listed, known) == ["not in docs/architecture.md: neuron_explorer.util.alloc",
                                             "listed in docs/architecture.md, not in src: "
                                             "neuron_explorer.util.stragglers"]
