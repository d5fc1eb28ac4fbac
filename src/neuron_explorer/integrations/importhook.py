"""Run a callback right after a module is imported, without importing it ourselves.

Start-up must stay cheap (importing torch takes a second), so hooks into a framework are applied
only when the program imports that framework.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Callable

from neuron_explorer.util.log import get_logger

_pending: dict[str, list[Callable]] = {}
_lock = threading.Lock()


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self.inner = inner
        self.name = name

    def create_module(self, spec):  # noqa: D401 - loader protocol
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.inner  # leave no trace once imported
        _fire(self.name, module)

    def __getattr__(self, item):
        return getattr(self.inner, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_finder = _Finder()


def _fire(name: str, module) -> None:
    with _lock:
        callbacks = _pending.pop(name, [])
    for cb in callbacks:
        try:
            cb(module)
        except Exception as e:  # instrumentation must never break the import
            get_logger(__name__).warning(f"neuron-explorer: warning: could not instrument {name}: {e}")


def when_imported(name: str, callback: Callable) -> None:
    """Call ``callback(module)`` now if ``name`` is imported, else right after it is."""
    mod = sys.modules.get(name)
    if mod is not None:
        callback(mod)
        return
    with _lock:
        _pending.setdefault(name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
