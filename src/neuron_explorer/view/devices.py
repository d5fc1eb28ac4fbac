"""The ids of device profiles in a ``view`` output: ``device_profile_model_<model_id>`` as the spec
names the files, unique across the processes of the run.

A model-mode ``.ntff`` (``<hash>_instid_0_vnc_<nc>.ntff``) holds the first execution of one graph
on one core; its model id is the id that ``nc_exec_running`` and ``ProfileModels`` carry for that
graph (the runtime numbers a process's graphs 0, 1, ... in load order, so ids repeat across
processes).  A session-mode ``.ntff`` (``profile_nc_<nc>_session_<k>.ntff``) holds every execution
on a core and is named ``session<k>``.  Where two profiles of the run would get the same name, the
names of that model id are made distinct with the least that tells them apart: the core
(``0_nc1``), then the pid (``0_pid4242_nc1``), then the instance (``0_i-abc_pid4242_nc1``); a name
still shared gets ``_2``, ``_3``...  See docs/decisions/0033-device-profile-names.md.
"""

from __future__ import annotations

import os
import re

_MODEL = re.compile(r"^(.+)_instid_\d+_vnc_(\d+)\.ntff$")
_SESSION = re.compile(r"^profile_nc_(\d+)_session_(\d+)\.ntff$")


def _token(path: str, models: list[tuple[int, str]]) -> tuple[str, int | None]:
    """(model id or session<k> or the file's stem, core) of one .ntff, from its name and the
    process's model table ((model id, neff name) pairs)."""
    name = os.path.basename(path)
    m = _MODEL.match(name)
    if m:
        neff = "neff_" + m.group(1)
        ids = [int(i) for i, n in models if n == neff]
        return (str(min(ids)) if ids else m.group(1)), int(m.group(2))
    m = _SESSION.match(name)
    if m:
        return f"session{int(m.group(2))}", int(m.group(1))
    stem = name[:-len(".ntff")] if name.endswith(".ntff") else name
    return stem or "unnamed", None


def _names(token: str, nc: int | None, instance: str, pid: int) -> list[str]:
    """The candidate names of one profile, from the shortest."""
    core = f"_nc{nc}" if nc is not None else ""
    return [token, f"{token}{core}", f"{token}_pid{pid}{core}", f"{token}_{instance}_pid{pid}{core}"]


def profile_ids(processes: list[tuple[str, int, list[str], list]], keep_nc=None) -> dict[str, str]:
    """Device-profile id of every .ntff path, for processes given as (instance id, pid, .ntff
    paths, (model id, neff name) pairs); ids are unique in the run.  ``keep_nc(nc)``: the core
    filter (profiles of other cores are not written, so they take no name)."""
    cands: dict[str, list[str]] = {}
    by_token: dict[str, list[str]] = {}
    for instance, pid, paths, models in processes:
        for p in paths:
            token, nc = _token(p, models)
            if nc is not None and keep_nc is not None and not keep_nc(nc):
                continue
            cands[p] = _names(token, nc, instance, pid)
            by_token.setdefault(token, []).append(p)
    ids: dict[str, str] = {}
    for paths in by_token.values():
        for level in range(4):
            names = [cands[p][level] for p in paths]
            if len(set(names)) == len(names) or level == 3:
                ids.update(zip(paths, names))
                break
    seen: dict[str, int] = {}
    for p in sorted(ids, key=lambda q: (ids[q], q)):  # a name still shared: _2, _3, ...
        n = seen.get(ids[p], 0) + 1
        seen[ids[p]] = n
        if n > 1:
            ids[p] = f"{ids[p]}_{n}"
    return ids
