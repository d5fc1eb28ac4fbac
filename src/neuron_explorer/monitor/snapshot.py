"""Reading an application's stats snapshot without trusting it.

A snapshot (``<pid>.json`` in the stats directory, written by ``recorders.app_stats``) is checked field
by field before the monitor uses any of it: types, ranges and sizes, so that a damaged or hostile
file costs only its own application, never the monitor.
"""

from __future__ import annotations

import builtins
import math
from pathlib import Path
from typing import Any

from neuron_explorer.contracts import stats_histogram
from neuron_explorer.contracts.stats_files import SNAPSHOT_FORMAT
from neuron_explorer.util import files, jsonfast as _json


class SnapshotError(Exception):
    """A snapshot file that cannot be used (unreadable, foreign format)."""


#: Larger snapshot files are refused: a real one is a few kB per loaded graph.
MAX_SNAPSHOT_BYTES = 64 << 20
#: Bounds on what a snapshot may list; a real application stays far below them.
MAX_ITEMS = 1 << 16
MAX_CORES = 4096
MAX_SUBGRAPHS = 4096


#: Counters and nanoseconds stay below 2^62 and byte figures below 2^48 (256 TiB), so that the sums
#: a report makes of them (categories x cores) still fit the 64-bit integers of its JSON.
_MAX_INT = 1 << 62
MAX_BYTES = 1 << 48


def read_snapshot(path: Path) -> dict[str, Any]:
    """Load one snapshot file; raises FileNotFoundError when the app removed it meanwhile, and
    SnapshotError (naming the file and the field) for anything but a valid snapshot."""
    try:
        raw = files.read_regular(path, MAX_SNAPSHOT_BYTES)
    except files.NotRegularFile:
        raise SnapshotError(f"{path}: not a regular file") from None
    except files.FileTooLarge as exc:
        raise SnapshotError(f"{path}: {exc.size} bytes, larger than a stats snapshot can be "
                            f"({MAX_SNAPSHOT_BYTES} bytes)") from None
    try:
        snap = _json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SnapshotError(f"{path}: not a stats snapshot ({str(exc)[:200]})") from None
    if not isinstance(snap, dict) or snap.get("format") != SNAPSHOT_FORMAT:
        fmt = snap.get("format") if isinstance(snap, dict) else None
        raise SnapshotError(f"{path}: unknown snapshot format {str(fmt)[:80]!r}")
    latency = snap.get("latency")
    layout = latency.get("layout") if isinstance(latency, dict) else None
    if layout != [stats_histogram.MIN_NS, stats_histogram.BUCKETS_PER_DECADE, stats_histogram.DECADES]:
        raise SnapshotError(f"{path}: histogram layout {str(layout)[:80]} differs from this monitor's")
    _Check(path).snapshot(snap)
    return snap


class _Check:
    """Types and ranges of every snapshot field the monitor computes with: a file with a wrong type
    must become a one-line SnapshotError naming the field, not an exception in the report loop (or
    a loop sized by a number from the file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def bad(self, key: str, value: Any, accepted: str) -> SnapshotError:
        shown = repr(value)
        return SnapshotError(f"{self.path}: bad field {key}={shown[:60]}{'...' if len(shown) > 60 else ''}; "
                             f"accepted: {accepted}")

    def int(self, key: str, v: Any, lo: int = 0, hi: int = _MAX_INT) -> None:
        if type(v) is not int or not lo <= v <= hi:
            raise self.bad(key, v, f"a whole number from {lo} to {hi}")

    def num(self, key: str, v: Any, none: bool = False) -> None:
        if v is None and none:
            return
        if type(v) not in (int, float) or not math.isfinite(v) or abs(v) > 1e300:
            raise self.bad(key, v, "a finite number" + (" or null" if none else ""))

    def dict(self, key: str, v: Any, none: bool = False) -> bool:
        if v is None and none:
            return False
        if not isinstance(v, dict) or len(v) > MAX_ITEMS:
            raise self.bad(key, v, f"an object of at most {MAX_ITEMS} entries")
        return True

    def list(self, key: str, v: Any) -> None:
        if not isinstance(v, list) or len(v) > MAX_ITEMS:
            raise self.bad(key, v, f"an array of at most {MAX_ITEMS} entries")

    def counts(self, key: str, v: Any, hi: builtins.int = _MAX_INT) -> None:
        """A str -> count object (executions, errors, memory categories)."""
        self.dict(key, v)
        for k, n in v.items():
            self.int(f"{key}.{k}", n, 0, hi)

    def core_key(self, key: str, k: Any) -> None:
        if not (isinstance(k, str) and k.isdigit() and len(k) <= 6):
            raise self.bad(key, k, "a core index (digits)")

    def run(self, key: str, v: Any) -> None:
        """A histogram run ``[first_index, [counts...]]`` inside the shared bucket layout."""
        ok = isinstance(v, list) and len(v) == 2 and type(v[0]) is int and isinstance(v[1], list) and \
            0 <= v[0] and v[0] + len(v[1]) <= stats_histogram.NUM_BUCKETS
        if not ok:
            raise self.bad(key, v, f"[first bucket, [counts...]] within {stats_histogram.NUM_BUCKETS} buckets")
        for i, c in enumerate(v[1]):
            self.int(f"{key}[1][{i}]", c)

    def snapshot(self, snap: builtins.dict[str, Any]) -> None:
        self.int("pid", snap.get("pid"), 0, (1 << 31) - 1)
        if not isinstance(snap.get("tag", ""), str):
            raise self.bad("tag", snap.get("tag"), "a string")
        self.num("start_time", snap.get("start_time"), none=True)
        self.int("created_mono_ns", snap.get("created_mono_ns"))
        self.int("mono_ns", snap.get("mono_ns"))
        if not isinstance(snap.get("device_kind", "cpu"), str):
            raise self.bad("device_kind", snap.get("device_kind"), "a string")
        self.list("nc_indices", snap.get("nc_indices", []))
        for i, nc in enumerate(snap.get("nc_indices", [])):
            self.int(f"nc_indices[{i}]", nc, 0, 65535)
        self.counts("executions", snap.get("executions"))
        self.counts("errors", snap.get("errors"))
        cores = snap.get("cores")
        self.dict("cores", cores)
        assert isinstance(cores, dict)  # (checked just above)
        if len(cores) > MAX_CORES:
            raise self.bad("cores", f"{len(cores)} entries", f"at most {MAX_CORES} cores")
        for k, c in cores.items():
            self.core_key("cores", k)
            self.dict(f"cores.{k}", c)
            self.int(f"cores.{k}.busy_ns", c.get("busy_ns"))
            self.num(f"cores.{k}.flops", c.get("flops"))
            if not isinstance(c.get("flops_known", False), bool):
                raise self.bad(f"cores.{k}.flops_known", c.get("flops_known"), "true or false")
        for h in ("total", "device"):
            self.run(f"latency.{h}", snap["latency"].get(h))
        mem = snap.get("memory", {})
        self.dict("memory", mem)
        if self.dict("memory.host", mem.get("host"), none=True):
            self.counts("memory.host", mem["host"], MAX_BYTES)
        per_core = mem.get("per_core", {})
        self.dict("memory.per_core", per_core)
        if len(per_core) > MAX_CORES:
            raise self.bad("memory.per_core", f"{len(per_core)} entries", f"at most {MAX_CORES} cores")
        for k, cats in per_core.items():
            self.core_key("memory.per_core", k)
            self.counts(f"memory.per_core.{k}", cats, MAX_BYTES)
        self.list("models", snap.get("models", []))
        for i, m in enumerate(snap.get("models", [])):
            key = f"models[{i}]"
            self.dict(key, m)
            for f in ("name", "uuid"):
                if not isinstance(m.get(f), str):
                    raise self.bad(f"{key}.{f}", m.get(f), "a string")
            self.int(f"{key}.model_id", m.get("model_id"), -(1 << 62), 1 << 62)
            self.int(f"{key}.nc_idx", m.get("nc_idx"), 0, 65535)
            self.int(f"{key}.executions", m.get("executions", 0))
            self.int(f"{key}.subgraphs", m.get("subgraphs", 1), 1, MAX_SUBGRAPHS)
            self.int(f"{key}.code_bytes", m.get("code_bytes"), 0, MAX_BYTES)
            self.int(f"{key}.constants_bytes", m.get("constants_bytes"), 0, MAX_BYTES)
            self.num(f"{key}.flops", m.get("flops"), none=True)
        # a final snapshot (left by a process as it exited): its own CPU times and resident memory
        if not isinstance(snap.get("final", False), bool):
            raise self.bad("final", snap.get("final"), "true or false")
        if "cpu_times" in snap:
            ct = snap["cpu_times"]
            if not (isinstance(ct, list) and len(ct) == 2):
                raise self.bad("cpu_times", ct, "[user seconds, system seconds]")
            for i, v in enumerate(ct):
                self.num(f"cpu_times[{i}]", v)
                if v < 0:
                    raise self.bad(f"cpu_times[{i}]", v, "a number of seconds, at least 0")
        if "rss_bytes" in snap:
            self.int("rss_bytes", snap["rss_bytes"], 0, MAX_BYTES)


def zero_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """The state of an application at its start: the baseline for one discovered mid-run."""
    return {
        "mono_ns": snap["created_mono_ns"],
        "executions": {},
        "errors": {},
        "cores": {},
        "latency": {"total": [0, []], "device": [0, []]},
        "models": [],
    }
