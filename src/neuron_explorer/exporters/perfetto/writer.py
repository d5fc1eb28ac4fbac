"""``system_profile.pftrace``: a Perfetto protobuf trace, streamed one process at a time.

Each instance/process becomes a Perfetto process; cores and threads become tracks under it
(hardware events on ``nc_<n>/neuron_hw``, runtime events on ``<tid>/neuron_rt``, collectives on
``nc_<n>/cc``; overlapping events get extra lanes ``... #2``); flows link a host call to its core
execution and the ranks of one collective; CPU and memory samples are counter tracks.  Events are
encoded column-wise (``util.pbwire``), not one protobuf object per event; ``lanes`` places them on
tracks and sequence clocks, ``compress`` deflates the packets.

Absolute times are nanoseconds since ``origin_ns`` (a wall-clock instant written in the trace's
first process name and in the view metadata).  Event names, argument names and string values are
interned per sequence.
"""

from __future__ import annotations

import mmap
import os
import shutil
import stat
import time
from dataclasses import replace
from typing import Iterator

import numpy as np

from neuron_explorer.analysis.counters import process_counters
from neuron_explorer.analysis.device import DeviceProfileView
from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.analysis.reader import Session
from neuron_explorer.contracts.tracks import (
    COLLECTIVE,
    HOST,
    TRACK_NAMES,
    kinds_of_types,
    process_label,
    secondary_labels,
)
from neuron_explorer.exporters.interface import Piece, ProcessTarget, ProcessWriter, RunInfo
from neuron_explorer.exporters.perfetto.compress import CompressedSink
from neuron_explorer.exporters.perfetto.lanes import Stream, distinct
from neuron_explorer.exporters.perfetto.wire import (
    ANNOTATION_IID,
    COUNTER,
    DA_INT,
    DA_STRING_IID,
    MARK_PACKET,
    P_SEQ_ID,
    P_TIMESTAMP,
    P_TRACK_EVENT,
    TE_DOUBLE_COUNTER,
    TE_TRACK_UUID,
    TE_TYPE,
    TRACE_PACKET,
    sequence_id,
    track_descriptor,
)
from neuron_explorer.util.alloc import keep_freed_memory
from neuron_explorer.util.atomic import AtomicFile
from neuron_explorer.util.pbwire import Rows

# events read from a capture at a time: memory stays flat, and a quarter of the Parquet writer's
# chunk halves the page faults of a fresh worker (its temporaries are reused, not faulted in) for
# little overhead
READ_EVENTS = 65_536
MAX_RUNS = 64  # core runs read side by side; beyond, the capture is read in file order
_STRING_ARGS = ("op", "group", "dtype")


class _SystemAnnotations:
    """The debug annotations of a process's system events; the model names and strings they show
    are interned on the stream as first seen (``intern``)."""

    def __init__(self, pe: ProcessEvents) -> None:
        self.kind_of_type = np.r_[kinds_of_types(pe.type_names, pe.type_groups), HOST]
        self.str_iid = np.zeros(len(pe.strings) + 1, dtype=np.int64)  # string id -> iid (0: none yet)
        self.model_iid = np.zeros(1, dtype=np.int64)  # model id -> iid of its name

    def intern(self, st: Stream, pe: ProcessEvents) -> None:
        """Intern on ``st`` the model names and strings that a piece of events shows."""
        c = pe.cols
        mid = c["model_id"]
        if int(mid.max()) >= 0:
            ids = distinct(mid[mid >= 0])
            if int(ids[-1]) >= len(self.model_iid):
                self.model_iid = np.r_[self.model_iid, np.zeros(int(ids[-1]) + 1 - len(self.model_iid), dtype=np.int64)]
            for u in ids[self.model_iid[ids] == 0].tolist():
                self.model_iid[u] = st.sval(pe.model_names.get(u, f"model_{u}"))
        for col in _STRING_ARGS:
            ids = c[col]
            if int(ids.max()) > 0:
                ids = distinct(ids[ids > 0])
                for u in ids[self.str_iid[ids] == 0].tolist():
                    self.str_iid[u] = st.sval(pe.strings[u])

    def __call__(self, ev: dict, e: np.ndarray) -> list:
        """(name iid, value field, present, values) of the rows ``e`` that have any, in
        ANNOTATIONS' order."""
        iid = ANNOTATION_IID
        out = []
        mid = ev["model_id"][e]
        pr = mid >= 0
        if pr.any():
            out.append((iid["model_name"], DA_STRING_IID, pr, self.model_iid[np.maximum(mid, 0)]))
        x = ev["exec_id"][e]
        pr = x >= 0
        if pr.any():
            out.append((iid["exec_id"], DA_INT, pr, x))
        for name in ("op", "seq", "bytes", "group", "dtype", "ret"):
            v = ev[name][e]
            if name == "seq":
                pr = (v >= 0) & (self.kind_of_type[ev["typ"][e]] == COLLECTIVE)
            else:
                pr = v > 0 if name != "bytes" else v >= 0
            if pr.any():
                string = name in _STRING_ARGS
                out.append((iid[name], DA_STRING_IID if string else DA_INT, pr,
                            self.str_iid[np.maximum(v, 0)] if string else v))
        return out


def _device_annotations(ev: dict, e: np.ndarray) -> list:
    """A device op's annotations: its execution and the bytes it moved."""
    return [(ANNOTATION_IID["exec_id"], DA_INT, True, ev["exec_id"][e]),
            (ANNOTATION_IID["bytes"], DA_INT, ev["bytes"][e] >= 0, ev["bytes"][e])]


class PerfettoWriter:
    """One Perfetto trace file (or a piece of one): processes, their streams and counters."""

    def __init__(self, path: str, origin_ns: int, uuid_base: int = 0, first: bool = True,
                 output: bool = False) -> None:
        """``uuid_base`` keeps track ids unique when pieces written separately are concatenated
        (Perfetto traces concatenate); ``first`` marks the piece that names the time origin;
        ``output``: ``path`` is a user-facing output (see ``AtomicFile``), not a piece."""
        self.path = path
        self.origin_ns = origin_ns
        self.file = AtomicFile(path, output=output)
        if output:  # a whole trace of ours: its mark first (a piece gets it from ``assemble``)
            self.file.f.write(MARK_PACKET)
        self.sink = CompressedSink(self.file.f)
        self.next_uuid = uuid_base + 1
        self.events_written = 0
        self._first = first
        self.shown_pid: int | None = None  # the process's pid in the trace (None: index + 1)
        self.label: str = ""  # the process's name in the trace ("": its own label)
        self.secondary: tuple[str, ...] | None = None  # custom secondary grouping of the tracks

    def new_track(self, name: str, parent: int | None = None, **kw) -> int:
        """Declare a track (``track_descriptor``'s keywords: a process, a counter); returns its uuid."""
        u = self.next_uuid
        self.next_uuid += 1
        self.sink.write(track_descriptor(u, name, parent=parent, **kw))
        return u

    # ---- system events
    def open_process(self, pe: ProcessEvents) -> Stream:
        """Declare the process and return the stream its events are pushed to."""
        pname = self.label or process_label(pe.pid, pe.rank, pe.instance_id)
        if self._first:
            pname += f" [t0 {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(self.origin_ns / 1e9))}Z]"
            self._first = False
        pid = self.shown_pid if self.shown_pid is not None else pe.index + 1
        pid_uuid = self.new_track(pname, pid=pid, pname=pname)
        return Stream(self, pe.index, pid_uuid, list(pe.type_names), _SystemAnnotations(pe))

    def push(self, st: Stream, pe: ProcessEvents) -> None:
        """One piece of a process's events: the track group of each, the strings its annotations
        name (interned as first seen), and the columns the stream holds."""
        n = pe.n
        if not n:
            return
        c = pe.cols
        ann: _SystemAnnotations = st.annotate  # type: ignore[assignment]
        typ = c["type"]
        if self.secondary is not None:
            gid = self._custom_groups(st, pe, self.secondary)
        else:
            gid = self._kind_groups(st, ann.kind_of_type[typ], c, n)
        ann.intern(st, pe)
        cols = {k: c[k] for k in ("model_id", "exec_id", "op", "seq", "bytes", "group", "dtype", "ret")}
        cols.update(start=c["start_ts"] - self.origin_ns, end=c["end_ts"] - self.origin_ns, gid=gid, typ=typ,
                    flow=c["flow_id"], flow2=c["flow_id2"] if "flow_id2" in c else np.zeros(n, dtype=np.int64))
        st.push(cols)

    def _custom_groups(self, st: Stream, pe: ProcessEvents, secondary: tuple[str, ...]) -> np.ndarray:
        """The track group of each event under a custom secondary grouping (one per label)."""
        c = pe.cols
        srcs = np.array(pe.type_sources, dtype=object)[c["type"]].tolist()
        idx, labels = secondary_labels(secondary, pe.instance_id, pe.pid, c["thread_id"], c["nc_idx"], srcs)
        return np.array([st.group(("custom", lb), lb) for lb in labels], dtype=np.int64)[idx]

    def _kind_groups(self, st: Stream, kind: np.ndarray, c: dict, n: int) -> np.ndarray:
        """The track group of each event by default: host thread, core, core collectives."""
        kk = np.where(kind == HOST, c["thread_id"], c["nc_idx"]) * 4 + kind
        names = TRACK_NAMES
        lo, hi = int(kk.min()), int(kk.max())
        if hi - lo < 4 * n + 4096:  # few groups: a table over the key's range
            uk = np.flatnonzero(np.bincount(kk - lo)) + lo
            lut = np.zeros(hi - lo + 1, dtype=np.int64)
            lut[uk - lo] = [st.group(k, names[k & 3].format(k >> 2)) for k in uk.tolist()]
            gid = lut[kk - lo]
        else:
            uk, inv = np.unique(kk, return_inverse=True)
            gid = np.array([st.group(k, names[k & 3].format(k >> 2)) for k in uk.tolist()], dtype=np.int64)[inv]
        return gid

    def close_process(self, st: Stream, pe: ProcessEvents) -> None:
        """Write what the stream still holds, then the process's counters."""
        st.release(None)
        self._counters(pe, sequence_id(pe.index, 0), st.pid_uuid)

    def add(self, pe: ProcessEvents) -> None:
        """A whole process's events."""
        st = self.open_process(pe)
        self.push(st, pe)
        self.close_process(st, pe)

    def add_session(self, s: Session, build, chunk: int = READ_EVENTS) -> int:
        """A process read ``chunk`` events at a time (see ``SessionFeed``): ``build(session
        restricted to [lo, hi), lo)`` gives each piece's ProcessEvents.  Returns the number of
        events written."""
        feed = SessionFeed(self, chunk)
        done = 0
        for lo, part in feed.chunks(s):
            pe = build(part, lo)
            feed.add(pe)
            done += pe.n
        feed.finish()
        return done

    # ---- device profiles
    def add_device(self, v: DeviceProfileView) -> None:
        """One device profile: a process whose tracks are the engines/streams of its ops."""
        t = v.dp.trace
        ops = v.dp.ops
        strings = list(t.strings)
        pname = f"device profile {v.profile_id} ({t.device_kind})"
        pid_uuid = self.new_track(pname, pid=1, pname=pname)
        n = v.n
        st = Stream(self, 0, pid_uuid, strings, _device_annotations)
        if n:
            uk, inv = np.unique(np.asarray(ops["track"], dtype=np.int64), return_inverse=True)
            gid = np.array([st.group(k, strings[k]) for k in uk.tolist()], dtype=np.int64)[inv]
            st.push({"start": v.start_ts - self.origin_ns, "end": v.end_ts - self.origin_ns, "gid": gid,
                     "typ": np.asarray(ops["name"], dtype=np.int64), "flow": np.zeros(n, dtype=np.int64),
                     "exec_id": np.asarray(v.exec_ids, dtype=np.int64),
                     "bytes": np.asarray(ops["nbytes"], dtype=np.int64)})
        st.release(None)

    def _counters(self, pe: ProcessEvents, seq: int, parent: int) -> None:
        """Counter samples on the process's slot-0 sequence, with absolute trace-clock timestamps."""
        for name, (ts, vals, unit) in process_counters(pe).items():
            if not len(ts):
                continue
            u = self.new_track(name, parent=parent, counter_unit=2 if unit == "bytes" else 0,
                               unit_name="%" if unit == "percent" else None)
            m = len(ts)
            te = Rows(m).field_varint(TE_TYPE, COUNTER).field_varint(TE_TRACK_UUID, u)
            te.field_fixed64(TE_DOUBLE_COUNTER, np.asarray(vals, dtype=np.float64).view(np.uint64))
            pk = Rows(m).field_varint(P_TIMESTAMP, ts - self.origin_ns).field_varint(P_SEQ_ID, seq)
            pk.message(P_TRACK_EVENT, te)
            self.sink.write(Rows(m).message(TRACE_PACKET, pk).encode().data)

    def close(self) -> None:
        self.sink.close()
        self.file.commit()

    def abort(self) -> None:
        """Stop the compression threads and remove the unfinished file."""
        self.sink.discard()
        self.file.abort()


class SessionFeed:
    """One process of a ``PerfettoWriter`` read a piece at a time in the order that keeps the
    writer's windows small: a capture holds each core's ring after the other's, each nearly in time
    order, so the cores' runs are read side by side, the next piece from the run that is furthest
    behind, and events are released once every run has read past them.

    ``chunks(s)`` yields (first event, session restricted to the piece); ``add`` takes the
    ProcessEvents of the piece just yielded (the next piece depends on it); ``finish`` closes the
    process."""

    def __init__(self, w: PerfettoWriter, chunk: int = READ_EVENTS) -> None:
        self.w = w
        self.chunk = chunk
        self.stream: Stream | None = None
        self.first: ProcessEvents | None = None
        self.s: Session | None = None
        self.run: tuple[int, int, int, bool] | None = None  # (run, lo, hi, its last piece) just yielded
        self.frontier: list[int] = []  # a run's next events start after this (as far as we know)

    def chunks(self, s: Session) -> Iterator[tuple[int, Session]]:
        keep_freed_memory()  # also set at the worker's start (view.process.convert_process)
        self.s = s
        runs = core_runs(s, self.chunk)
        if not runs:  # no events: the process and its counters still appear
            yield 0, s
            return
        piece = max(self.chunk // len(runs), 1)
        pos = [a for a, _ in runs]
        self.frontier = [-(1 << 62)] * len(runs)
        while live := [i for i, (_, b) in enumerate(runs) if pos[i] < b]:
            i = min(live, key=self.frontier.__getitem__)
            a = pos[i]
            b = pos[i] = min(a + piece, runs[i][1])
            self.run = (i, a, b, b >= runs[i][1])
            yield a, (s if (a, b) == (0, s.num_events) else replace(s, events={k: v[a:b] for k, v in s.events.items()}))

    def add(self, pe: ProcessEvents) -> None:
        if self.stream is None:
            self.stream, self.first = self.w.open_process(pe), pe
        self.w.push(self.stream, pe)
        if self.run is None or self.s is None:  # (chunks() sets both)
            return
        i, a, b, last = self.run
        if last:
            self.frontier[i] = 1 << 62
        else:
            tail = pe.cols["start_ts"][-max(1, pe.n // 64):]  # (a ring drains by end time)
            self.frontier[i] = int(tail.min()) - self.w.origin_ns
        self.stream.release(min(self.frontier))
        drop_pages(self.s, a, b)

    def finish(self) -> None:
        if self.stream is not None and self.first is not None:  # (add() sets both)
            self.w.close_process(self.stream, self.first)


def core_runs(s: Session, chunk: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of events recorded on one core (a capture writes the cores' rings one after
    the other); one range when there are more than MAX_RUNS."""
    n = s.num_events
    if not n:
        return []
    nc = s.events["nc_idx"]
    cuts: list[int] = []
    for lo in range(0, n, chunk):
        c = nc[lo:lo + chunk + 1]
        cuts.extend((np.flatnonzero(c[1:] != c[:-1]) + lo + 1).tolist())
        if len(cuts) >= MAX_RUNS:
            cuts = []
            break
    drop_pages(s, 0, n)
    b = [0] + cuts + [n]
    return list(zip(b[:-1], b[1:]))


def drop_pages(s: Session, lo: int, hi: int) -> None:
    """Drop the pages of events [lo, hi) of a memory-mapped process from resident memory (they stay
    in the page cache), as Session.release does for a prefix."""
    mapped = getattr(s, "mapped", None)
    if mapped is None or hi <= lo:
        return
    mm, layout = mapped
    page = mmap.PAGESIZE
    for off, size in layout.values():
        a = -(-(off + lo * size) // page) * page
        b = (off + hi * size) // page * page
        if b > a:
            try:
                mm.madvise(mmap.MADV_DONTNEED, a, b - a)
            except (OSError, ValueError, AttributeError):
                return


def ours(path: str) -> bool:
    """Whether ``path`` is a regular file opening with the mark every trace ``view`` writes
    (``wire.MARK_PACKET``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, len(MARK_PACKET), 0) == MARK_PACKET
    except OSError:
        return False
    finally:
        os.close(fd)


def open_process(target: ProcessTarget) -> "PerfettoProcess":
    return PerfettoProcess(target)


def assemble(path: str, pieces: list[Piece], run: RunInfo) -> None:
    """Concatenate the processes' pieces into one trace (a Perfetto trace is a sequence of packets);
    ``path`` is the user's output (see ``AtomicFile(output=True)``)."""
    f = AtomicFile(path, output=True)
    try:
        f.f.write(MARK_PACKET)
        for p in pieces:
            if p.path is not None:
                with open(p.path, "rb") as src:
                    shutil.copyfileobj(src, f.f, 1 << 20)
        f.commit()
    except BaseException:
        f.abort()
        raise


class PerfettoProcess(ProcessWriter):
    """One process as a piece of the trace, read in the core-runs order (``SessionFeed``); its
    device profiles become traces of their own (``device_profile_model_<id>.pftrace``).  The
    Perfetto trace shows no extra_attributes_json."""

    chunk = READ_EVENTS
    with_extra = False

    def __init__(self, target: ProcessTarget) -> None:
        super().__init__(target)
        self.path = self.piece_path()
        # 2**16 track ids per process keeps uuids at 3-4 bytes on the wire
        self.w = PerfettoWriter(self.path, target.origin_ns, uuid_base=(target.index + 1) << 16,
                                first=target.index == 0)
        self.w.shown_pid = target.shown_pid
        self.w.label = target.group_label
        self.w.secondary = target.grouping.secondary
        self.feed = SessionFeed(self.w, self.chunk)

    def add_devices(self, views: list[DeviceProfileView]) -> None:
        for v in views:
            f = self.device_path(v, "pftrace")
            dw = PerfettoWriter(f, self.target.origin_ns, output=True)
            try:
                dw.add_device(v)
                dw.close()
            except BaseException:
                dw.abort()
                raise
            self.device_files.append(f)

    def chunks(self, s: Session) -> Iterator[tuple[int, Session]]:
        return self.feed.chunks(s)

    def add(self, pe: ProcessEvents) -> None:
        self.feed.add(pe)

    def close(self) -> Piece:
        self.feed.finish()
        self.w.close()
        return Piece(path=self.path, device_files=self.device_files)

    def abort(self) -> None:
        self.w.abort()
