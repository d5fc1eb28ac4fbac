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
``ProfileModels``: the step detector reads them) and the runs of rows; pages carry checksums
(verified on read), and the rows must be those runs. Anything else raises ``Unusable`` with one
line, and the caller reads the events file instead.
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
from neuron_explorer.contracts.env import parquet_writer
from neuron_explorer.util.arrays import numeric

try:
    from neuron_explorer.exporters import parquet_file as own
except ImportError:  # the C encoders are not built: Arrow's writer
    own = None  # type: ignore[assignment]

# Three row groups, each read with its own columns only: the occurrences of graphs, model loads and
# regions (``piece`` to ``id``), the collectives' (and ``bytes``, ``seq``, ``rank``), then the steps
# (``start``, ``end``, ``id``: span and number, and ``STEP_COLUMNS``). A column a group does not
# read is null there. ``piece``: the row's run, listed in the header.
COLUMNS = ("piece", "start", "end", "id", "bytes", "seq", "rank") + occ.STEP_COLUMNS
GROUP_COLUMNS = (COLUMNS[:4], COLUMNS[:7], COLUMNS[:4] + occ.STEP_COLUMNS)
_KINDS = ("graphs", "loads", "regions", "colls")


class Unusable(Exception):
    """The items cannot be used (one line: what is wrong with them)."""


def _kinds(kinds: dict[str, str], names: list[str]) -> list[list]:
    """The kind the step detector was given for each model name of the file (None: not a model)."""
    return [[n, str(kinds[n] or "") if n in kinds else None] for n in names]


def model_args(kinds: dict[str, str]) -> tuple[dict[str, int], list]:
    """``read_file``'s model ids and models from {name: kind}, as ``diff.dataset`` makes them."""
    ids = {n: i for i, n in enumerate(sorted(kinds))}
    return ids, [(i, n, str(kinds[n] or ""), 0.0) for n, i in ids.items()]


def build(events_path: str, kinds: dict[str, str]) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]] | None:
    """The items of one events file (per row group, its columns as numpy arrays; the header), or
    None when it cannot be read."""
    facts = events_file_facts(events_path)
    ids, models = model_args(kinds)
    part = occ.read_file(events_path, ids, models)
    if part.error is not None:
        return None
    groups: list[dict[str, list[np.ndarray]]] = [{c: [] for c in g} for g in GROUP_COLUMNS]
    pieces: list[list] = []

    def add(g: int, **given: np.ndarray) -> None:
        n = len(given["start"])
        for c in GROUP_COLUMNS[g][1:]:
            groups[g][c].append(np.asarray(given[c], dtype=np.int64))
        groups[g]["piece"].append(np.full(n, len(pieces), dtype=np.int32))

    for kinds_of in (_KINDS[:3], _KINDS[3:]):
        for kind in kinds_of:
            for key, chunks in getattr(part, kind).items():
                for chunk in chunks:
                    if kind == "colls":
                        nb, seq, rank, start, end, _proc, ids_ = chunk
                        add(1, start=start, end=end, id=ids_, bytes=nb, seq=seq, rank=rank)
                    else:
                        start, end, _proc, ids_ = chunk
                        add(0, start=start, end=end, id=ids_)
                    pieces.append([kind, list(key) if isinstance(key, tuple) else key, len(start)])
    for proc, st in part.steps.items():
        figures = {c: st.columns.get(c, np.zeros(len(st), np.int64)) for c in occ.STEP_COLUMNS}
        add(2, start=st.start_ns, end=st.end_ns, id=st.number, **figures)
        pieces.append(["steps", [int(proc), st.method, st.boundary, sorted(st.columns)], len(st)])
    out = [{c: np.concatenate(v) if v else np.zeros(0, np.int32 if c == "piece" else np.int64) for c, v in g.items()}
           for g in groups]
    header = {"format": DIFF_ITEMS_FORMAT, "events_file": list(facts), "events": part.events,
              "groups": [len(g["piece"]) for g in out], "models": _kinds(kinds, part.model_names), "pieces": pieces,
              "region_links": [[k, sorted(v, key=lambda x: (x is None, x or ""))]
                               for k, v in part.region_links.items()]}
    return out, header


def _type(c: str) -> pa.DataType:
    return pa.int32() if c == "piece" else pa.int64()


SCHEMA = pa.schema([(c, _type(c)) for c in COLUMNS])


def _table(cols: dict[str, np.ndarray]) -> pa.Table:
    """A row group as an Arrow table: a column the group does not read is nulls (they cost nothing
    to write)."""
    n = len(cols["piece"])
    return pa.Table.from_arrays([numeric(cols[c], _type(c)) if c in cols else pa.nulls(n, _type(c)) for c in COLUMNS],
                                schema=SCHEMA)


def header_text(header: dict[str, Any]) -> str:
    body = json.dumps(header, separators=(",", ":"), sort_keys=True)
    return f"{body}\n{zlib.crc32(body.encode()):08x}"


def write(events_path: str, items_path: str, kinds: dict[str, str]) -> bool:
    """Write the items of ``events_path`` to ``items_path`` (False: none could be made)."""
    got = build(events_path, kinds)
    if got is None:
        return False
    groups, header = got
    meta = {DIFF_ITEMS_KEY.encode(): header_text(header).encode()}
    if own is not None and parquet_writer() == "own":  # (NEURON_EXPLORER_PARQUET_WRITER, as for the events)
        _write_own(items_path, groups, meta)
        return True
    schema = SCHEMA.with_metadata(meta)
    # delta-coded, uncompressed: spans, ids and step figures vary slowly, so this is smaller than the
    # events (12.8 MB against 22 at 2M events) and cheaper to write and read than zstd or Snappy
    # (0.26 and 0.09 CPU-s against 0.48 and 0.25 with zstd, 64 files of the 2M-event bench profile)
    with pq.ParquetWriter(items_path, schema, compression="none", write_page_checksum=True, use_dictionary=False,
                          column_encoding={c: "DELTA_BINARY_PACKED" for c in COLUMNS}) as w:
        for g in groups:  # (one row group each, empty ones too)
            t = _table(g)
            w.write_table(t.cast(schema), row_group_size=max(t.num_rows, 1))
    return True


def _write_own(items_path: str, groups: list[dict[str, np.ndarray]], meta: dict[bytes, bytes]) -> None:
    """The same file through our encoder (``exporters.parquet_file``: delta-coded, uncompressed, a
    checksum on every page), from the numpy columns: a fifth of the CPU of Arrow's writer here
    (docs/decisions/0167-diff-items-cost.md)."""
    leaves = [own.Leaf(c, "int", own.INT32 if c == "piece" else own.INT64, delta=True, snappy=False, crc=True)
              for c in COLUMNS]
    w = own.ParquetFileWriter(items_path, leaves, SCHEMA, "neuron-explorer (own Parquet writer)", meta)
    try:
        for g in groups:  # (one row group each, empty ones too)
            n = len(g["piece"])
            w.write_row_group(n, [own.encode_int(leaf, g[leaf.name]) if leaf.name in g else own.encode_nulls(leaf, n)
                                  for leaf in leaves])
    finally:
        w.close()


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
        md = pf.metadata
        h = _header((md.metadata or {}).get(DIFF_ITEMS_KEY.encode()))
        try:
            facts = list(events_file_facts(events_path))
        except Exception as e:  # noqa: BLE001 - pyarrow's errors have no common base but Exception
            raise Unusable(f"its events file cannot be read ({type(e).__name__})") from None
        if h.get("events_file") != facts or h.get("events") != facts[1]:
            raise Unusable("its events file changed since they were written (stale)")
        if h.get("models") != _kinds(kinds, [m[0] for m in h.get("models") or [] if isinstance(m, list) and m]):
            raise Unusable("the profile's model kinds are not those its steps were found with")
        sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        # (at most one row per event and one per step: nothing is read past what the events hold)
        if h.get("groups") != sizes or len(sizes) != 3 or sum(sizes) > 2 * int(facts[1] or 0):
            raise Unusable("its row groups disagree with its header")
        if pf.schema_arrow.names != list(COLUMNS) or pf.schema_arrow.types != [pa.int32()] + [pa.int64()] * 16:
            raise Unusable("its columns are not the items' columns")
        groups = [pf.read_row_group(g, columns=list(cols), use_threads=False) for g, cols in enumerate(GROUP_COLUMNS)]
    except Unusable:
        raise
    except (OSError, pa.ArrowException, ValueError) as e:
        raise Unusable(f"they cannot be read ({type(e).__name__})") from None
    try:
        return _part(groups, h, events_path)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, pa.ArrowException) as e:
        raise Unusable(f"their rows are damaged ({type(e).__name__})") from None


def _runs_are(col: pa.ChunkedArray, k0: int, lengths: list[int]) -> bool:
    """Whether the ``piece`` column (int32, no nulls) is run ``k0`` repeated ``lengths[0]`` times,
    then ``k0 + 1``, and so on: it never decreases and each non-empty run starts and ends with its
    own number.  Read as int32 where it lies, with no expected column made (at 20M events these
    were two int64 copies of 19M rows a side)."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n = len(arr)
    if sum(lengths) != n or not pa.types.is_int32(arr.type):
        return False
    if not n:
        return True
    v = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=arr.offset + n)[arr.offset:]
    ends = np.cumsum(lengths)
    runs = np.arange(k0, k0 + len(lengths))
    full = np.asarray(lengths) > 0
    return bool((v[ends[full] - np.asarray(lengths)[full]] == runs[full]).all()
                and (v[ends[full] - 1] == runs[full]).all() and (v[1:] >= v[:-1]).all())


def _part(groups: list[pa.Table], h: dict[str, Any], events_path: str) -> occ.FilePart:
    part = occ.FilePart(events_path, events=int(h["events"]), model_names=[str(m[0]) for m in h["models"]],
                        from_items=True)
    pieces = h["pieces"]
    group_of = [2 if p[0] == "steps" else 1 if p[0] == "colls" else 0 for p in pieces]
    if group_of != sorted(group_of) or any(type(p[2]) is not int or p[2] < 0 for p in pieces):
        raise Unusable("their header's runs are damaged")
    k0 = 0
    for g, t in enumerate(groups):
        if any(t.column(c).null_count for c in t.column_names):
            raise Unusable("their rows are damaged (nulls)")
        a = {c: occ.int_column(t.column(c)) for c in t.column_names if c != "piece"}  # (no nulls: checked above)
        mine = [p for p, gg in zip(pieces, group_of) if gg == g]
        lengths = [p[2] for p in mine]
        if not _runs_are(t.column("piece"), k0, lengths):
            raise Unusable("their rows are not the runs their header lists")
        k0 += len(mine)
        lo = 0
        for kind, key, n in mine:
            hi = lo + n
            s, e, i = a["start"][lo:hi], a["end"][lo:hi], a["id"][lo:hi]
            if kind == "colls":
                chunk: tuple = (a["bytes"][lo:hi], a["seq"][lo:hi], a["rank"][lo:hi], s, e, i >> 32, i)
                part.colls.setdefault((str(key[0]), str(key[1])), []).append(chunk)
            elif kind in _KINDS:
                getattr(part, kind).setdefault(str(key), []).append((s, e, i >> 32, i))
            elif kind == "steps":
                proc, method, boundary, names = key
                part.steps[int(proc)] = steps_mod.Steps(str(method), str(boundary), i, s, e, {
                    str(c): a[str(c)][lo:hi] for c in names if c in occ.STEP_COLUMNS})
            else:
                raise ValueError(kind)
            lo = hi
    for name, links in h["region_links"]:
        part.region_links[str(name)] = {None if x is None else str(x) for x in links}
    return part
