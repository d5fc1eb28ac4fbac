"""The diff items ``view`` writes beside each events file (``contracts.dataset.DIFF_ITEMS``), and their reader.

Why: ``neuron-explorer diff`` of two ``view`` outputs read every events file of both and ran the step
detector on every step of every process, more CPU than ``view`` took to convert one of them (issue
34 item 6). What a diff takes from a file is a pure function of it
(``analysis.occurrences.read_file``: the occurrences of graphs, model loads, collectives and
regions, the regions' graphs, the steps' figures). ``view`` runs that function on each events file
once it is written, while the file is in the page cache, and keeps the answer here; a diff reads
this instead (docs/decisions/0163-diff-items-written-by-view.md).

Never a wrong diff: the items are used only when every check passes. The footer header (JSON and a
CRC-32 of its text, ``DIFF_ITEMS_KEY``) names the events file's size, rows and extent (compared
with that file's footer), the model kinds the steps were found with (compared with the reader's
``ProfileModels``: the step detector reads them), the runs of rows and a digest of every column;
pages carry checksums. Anything else raises ``Unusable`` with one line, and the caller reads the
events file instead.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neuron_explorer.analysis import occurrences as occ, steps as steps_mod
from neuron_explorer.contracts.dataset import DIFF_ITEMS_FORMAT, DIFF_ITEMS_KEY, events_file_facts
from neuron_explorer.util.arrays import numeric

# one row per occurrence (``piece``: its run in the header), then one per step; columns a kind does
# not have hold 0
COLUMNS = ("piece", "start", "end", "id", "bytes", "seq", "rank") + occ.STEP_COLUMNS
_KINDS = ("graphs", "loads", "regions", "colls")
_M64 = (1 << 64) - 1


class Unusable(Exception):
    """The items cannot be used (one line: what is wrong with them)."""


def _digest(a: np.ndarray) -> list[int]:
    """Two wrapping sums of a column (plain, and weighted by position): any changed value or two
    swapped ones change them; a cheap check of what the page checksums do not cover."""
    a = np.ascontiguousarray(a, dtype=np.int64).view(np.uint64)
    w = np.arange(1, len(a) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return [int(a.sum(dtype=np.uint64)) & _M64, int((a * w).sum(dtype=np.uint64)) & _M64]


def _kinds(kinds: dict[str, str], names: list[str]) -> list[list]:
    """The kind the step detector was given for each model name of the file (None: not a model)."""
    return [[n, str(kinds[n] or "") if n in kinds else None] for n in names]


def model_args(kinds: dict[str, str]) -> tuple[dict[str, int], list]:
    """``read_file``'s model ids and models from {name: kind}, as ``diff.dataset`` makes them."""
    ids = {n: i for i, n in enumerate(sorted(kinds))}
    return ids, [(i, n, str(kinds[n] or ""), 0.0) for n, i in ids.items()]


def build(events_path: str, kinds: dict[str, str]) -> tuple[pa.Table, dict[str, Any]] | None:
    """The items of one events file (table, header), or None when it cannot be read."""
    facts = events_file_facts(events_path)
    ids, models = model_args(kinds)
    part = occ.read_file(events_path, ids, models)
    if part.error is not None:
        return None
    cols: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    pieces: list[list] = []
    n = 0

    def add(k: int, length: int, **given: np.ndarray) -> None:
        for c in COLUMNS[1:]:
            cols[c].append(np.asarray(given[c], dtype=np.int64) if c in given else np.zeros(length, np.int64))
        cols["piece"].append(np.full(length, k, dtype=np.int32))

    for kind, got in zip(_KINDS, (part.graphs, part.loads, part.regions, part.colls)):
        for key, chunks in got.items():
            for chunk in chunks:
                if kind == "colls":
                    nb, seq, rank, start, end, _proc, ids_ = chunk
                    add(len(pieces), len(start), start=start, end=end, id=ids_, bytes=nb, seq=seq, rank=rank)
                else:
                    start, end, _proc, ids_ = chunk
                    add(len(pieces), len(start), start=start, end=end, id=ids_)
                pieces.append([kind, list(key) if isinstance(key, tuple) else key, len(start)])
                n += len(start)
    steps = []
    for proc, st in part.steps.items():
        add(len(pieces) + len(steps), len(st), start=st.start_ns, end=st.end_ns, id=st.number, **st.columns)
        steps.append([int(proc), st.method, st.boundary, len(st), sorted(st.columns)])
        n += len(st)
    arrays = {c: np.concatenate(v) if v else np.zeros(0, np.int32 if c == "piece" else np.int64)
              for c, v in cols.items()}
    header = {"format": DIFF_ITEMS_FORMAT, "events_file": list(facts), "events": part.events, "rows": n,
              "models": _kinds(kinds, part.model_names), "pieces": pieces, "steps": steps,
              "region_links": [[k, sorted(v, key=lambda x: (x is None, x or ""))]
                               for k, v in part.region_links.items()],
              "digest": {c: _digest(a) for c, a in arrays.items()}}
    t = pa.Table.from_arrays([numeric(arrays[c], pa.int32() if c == "piece" else pa.int64()) for c in COLUMNS],
                             names=list(COLUMNS))
    return t, header


def header_text(header: dict[str, Any]) -> str:
    body = json.dumps(header, separators=(",", ":"), sort_keys=True)
    return f"{body}\n{zlib.crc32(body.encode()):08x}"


def write(events_path: str, items_path: str, kinds: dict[str, str]) -> bool:
    """Write the items of ``events_path`` to ``items_path`` (False: none could be made)."""
    got = build(events_path, kinds)
    if got is None:
        return False
    t, header = got
    t = t.replace_schema_metadata({DIFF_ITEMS_KEY.encode(): header_text(header).encode()})
    pq.write_table(t, items_path, compression="zstd", row_group_size=1 << 20, write_page_checksum=True,
                   use_dictionary=False)
    return True


def _header(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        raise Unusable("its footer has no header")
    try:
        body, crc = raw.decode().rsplit("\n", 1)
        h = json.loads(body) if int(crc, 16) == zlib.crc32(body.encode()) else None
    except (UnicodeDecodeError, ValueError):
        raise Unusable("its header is damaged") from None
    if not isinstance(h, dict):
        raise Unusable("its header does not match its checksum")
    if h.get("format") != DIFF_ITEMS_FORMAT:
        raise Unusable(f"format {h.get('format')!r} (this diff reads {DIFF_ITEMS_FORMAT})")
    return h


def read(items_path: str, events_path: str, kinds: dict[str, str]) -> occ.FilePart:
    """The ``FilePart`` that ``read_file(events_path, *model_args(kinds))`` gives, from the items at
    ``items_path``. Raises ``Unusable``."""
    try:
        pf = pq.ParquetFile(items_path, page_checksum_verification=True)
        h = _header((pf.metadata.metadata or {}).get(DIFF_ITEMS_KEY.encode()))
        try:
            facts = list(events_file_facts(events_path))
        except Exception as e:  # noqa: BLE001 - pyarrow's errors have no common base but Exception
            raise Unusable(f"its events file cannot be read ({type(e).__name__})") from None
        if h.get("events_file") != facts or h.get("events") != facts[1]:
            raise Unusable("its events file changed since they were written (stale)")
        if h.get("models") != _kinds(kinds, [m[0] for m in h.get("models") or [] if isinstance(m, list) and m]):
            raise Unusable("the profile's model kinds are not those its steps were found with")
        # (at most one row per event and one per step: nothing is read past what the events hold)
        if not (type(h.get("rows")) is int and 0 <= pf.metadata.num_rows == h["rows"] <= 2 * facts[1]):
            raise Unusable("its row count disagrees with its header")
        if pf.schema_arrow.names != list(COLUMNS):
            raise Unusable("its columns are not the items' columns")
        t = pf.read(use_threads=False)
    except Unusable:
        raise
    except (OSError, pa.ArrowException, ValueError) as e:
        raise Unusable(f"they cannot be read ({type(e).__name__})") from None
    try:
        return _part(t, h, events_path)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, pa.ArrowException) as e:
        raise Unusable(f"their rows are damaged ({type(e).__name__})") from None


def _part(t: pa.Table, h: dict[str, Any], events_path: str) -> occ.FilePart:
    if any(t.column(c).null_count for c in COLUMNS):
        raise Unusable("their rows are damaged (nulls)")
    a = {c: np.asarray(t.column(c).to_numpy(), dtype=np.int64) for c in COLUMNS}
    if {c: _digest(v) for c, v in a.items()} != {c: list(v) for c, v in h["digest"].items()}:
        raise Unusable("their rows do not match their digest")
    pieces, steps = h["pieces"], h["steps"]
    lengths = [int(p[2]) for p in pieces] + [int(s[3]) for s in steps]
    if any(x < 0 for x in lengths) or sum(lengths) != len(a["piece"]) or \
            not np.array_equal(a["piece"], np.repeat(np.arange(len(lengths)), lengths)):
        raise Unusable("their rows are not the runs their header lists")
    cut = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).tolist()
    part = occ.FilePart(events_path, events=int(h["events"]),
                        model_names=[str(m[0]) for m in h["models"]])
    for k, (kind, key, _n) in enumerate(pieces):
        lo, hi = cut[k], cut[k + 1]
        s, e, i = a["start"][lo:hi], a["end"][lo:hi], a["id"][lo:hi]
        if kind == "colls":
            key = (str(key[0]), str(key[1]))
            chunk = (a["bytes"][lo:hi], a["seq"][lo:hi], a["rank"][lo:hi], s, e, i >> 32, i)
        elif kind in _KINDS:
            key = str(key)
            chunk = (s, e, i >> 32, i)
        else:
            raise ValueError(kind)
        getattr(part, kind).setdefault(key, []).append(chunk)
    for j, (proc, method, boundary, _n, names) in enumerate(steps):
        lo, hi = cut[len(pieces) + j], cut[len(pieces) + j + 1]
        part.steps[int(proc)] = steps_mod.Steps(str(method), str(boundary), a["id"][lo:hi], a["start"][lo:hi],
                                                a["end"][lo:hi], {str(c): a[str(c)][lo:hi] for c in names
                                                                  if c in occ.STEP_COLUMNS})
    for name, links in h["region_links"]:
        part.region_links[str(name)] = {None if x is None else str(x) for x in links}
    return part
