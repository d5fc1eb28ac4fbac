"""A process converted a few events at a time (``PerfettoWriter.add_session``) gives back exactly the
events of the same process converted whole: nearly sorted captures, events that arrive after their
track's clock has moved past them (the ring drains by end time, cores one after the other), and
slices that span many chunks.  Chunks are made small so that every case crosses many of them."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.analysis.events import build
from neuron_explorer.analysis.reader import load_session, wall_offset_ns
from neuron_explorer.exporters import perfetto as ep
from neuron_explorer.exporters.perfetto import PerfettoWriter, lanes, writer

from .test_perfetto_semantics import _packets, decode

CHUNK = 1_000


@pytest.fixture(scope="module")
def session_dir(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.synth_capture import write_process

    root = tmp_path_factory.mktemp("chunked")
    return write_process(str(root / "cap"), "i-0000000000000000c", 0, 2, 31_000, 12_000, 0, seed=4)


def _load(path, edit=None):
    s = load_session(path)
    if edit is not None:
        s.events = edit({k: np.array(v) for k, v in s.events.items()})
        s.mapped = None  # (the edited events are not the file's)
    return s


def _origin(s):
    return int(s.events["start_ns"].min()) + wall_offset_ns(s) - 1_000_000_000


def _convert(tmp_path, s, name, chunk=None):
    """Decoded trace of the process, whole (chunk None) or ``chunk`` events at a time."""
    origin = _origin(s)
    w = PerfettoWriter(str(tmp_path / name), origin, uuid_base=1 << 16)
    if chunk is None:
        w.add(build(s, 0, 0, 0, {}, with_extra=False))
    else:
        assert w.add_session(s, lambda part, lo: build(part, 0, 0, lo, {}, with_extra=False), chunk) == s.num_events
    w.close()
    data = (tmp_path / name).read_bytes()
    late = sum(1 for pk in _packets(data) if pk.timestamp_clock_id == ep.CLOCK_BOOTTIME)
    return decode(data), late


def _events(d):
    return Counter((d.track_name(s.track).split(" #")[0], s.name, s.start, s.end, tuple(sorted(s.args.items())),
                    s.flows) for s in d.slices)


def _lanes_never_overlap(d):
    spans = defaultdict(list)
    for s in d.slices:
        if not s.instant:
            spans[s.track].append((s.start, s.end))
    for v in spans.values():
        v.sort()
        assert all(a[1] <= b[0] for a, b in zip(v, v[1:]))


def _check(tmp_path, s, chunk=CHUNK):
    whole, late_whole = _convert(tmp_path, s, "whole.pftrace")
    parts, late = _convert(tmp_path, s, "chunked.pftrace", chunk)
    assert late_whole == 0
    assert len(parts.slices) == s.num_events
    assert _events(parts) == _events(whole)
    _lanes_never_overlap(parts)
    return late


def test_a_process_of_many_chunks_gives_the_same_events_as_converting_it_whole(tmp_path, session_dir):
    held = []
    orig = lanes.Stream.release

    def spy(self, before=None):
        if before is not None:  # (chunked conversion only)
            held.append(sum(len(p["start"]) for p in self.parts) + len(self.end_t))
        orig(self, before)

    lanes.Stream.release = spy
    try:
        late = _check(tmp_path, _load(session_dir))
    finally:
        lanes.Stream.release = orig
    assert late == 0
    assert len(held) > 10 and max(held) <= 2 * CHUNK  # a chunk and what it holds back, not the process


def test_events_in_ring_drain_order_and_very_late_ones(tmp_path, session_dir):
    """Events ordered by end time (as a ring drains), plus some moved thousands of events later:
    those arrive after their track's clock has passed them and are written with absolute times."""

    def edit(e):
        order = np.argsort(e["end_ns"], kind="stable")
        rng = np.random.default_rng(1)
        move = rng.choice(len(order) - 5_000, 40, replace=False)
        rest = np.setdiff1d(np.arange(len(order)), move)
        order = np.insert(order[rest], np.minimum(move + 5_000, len(rest)), order[move])
        return {k: v[order] for k, v in e.items()}

    assert _check(tmp_path, _load(session_dir, edit)) > 0


def test_cores_one_after_the_other_and_slices_spanning_many_chunks(tmp_path, session_dir):
    """A second core's ring (the same events shifted and on nc 1) after the first's, threads shared
    between them, and a few slices that cover most of the capture (each on its own lane)."""

    def edit(e):
        second = {k: v.copy() for k, v in e.items()}
        second["nc_idx"][:] = 1
        second["start_ns"] += 7_777
        second["end_ns"] += 7_777
        both = {k: np.concatenate([e[k], second[k]]) for k in e}
        n = len(both["start_ns"])
        long_ = np.array([100, n // 3, n // 2, n - 50])
        both["end_ns"][long_] = both["end_ns"].max() - np.arange(4)
        return both

    s = _load(session_dir, edit)
    assert writer.core_runs(s, CHUNK) == [(0, s.num_events // 2), (s.num_events // 2, s.num_events)]
    _check(tmp_path, s)


@pytest.mark.parametrize("chunk", [1, 7, 250])
def test_tiny_chunks_and_shuffled_events(tmp_path, session_dir, chunk):
    def edit(e):
        keep = np.random.default_rng(chunk).permutation(len(e["start_ns"]))[:1_500]
        return {k: v[keep] for k, v in e.items()}  # no order at all

    _check(tmp_path, _load(session_dir, edit), chunk)


def test_more_tracks_than_sequences_pushed_in_pieces_out_of_order(tmp_path):
    """Tracks beyond the last sequence share one (their events name their track): pieces pushed in
    shuffled order and released a few at a time still give every event back, lanes apart."""
    from dataclasses import replace

    from .test_perfetto_encoding import ORIGIN, _got, _process, _want

    rng = np.random.default_rng(9)
    events = []
    for t in range(ep.SHARED_SLOT + 30):
        for _ in range(1 if t < ep.SHARED_SLOT - 5 else 8):
            s = int(rng.integers(0, 40_000))
            events.append(("op", 1000 + t, s, s + int(rng.integers(0, 4_000)), int(rng.integers(-1, 5)), 0))
    events.sort(key=lambda e: e[3])  # by end, then a few swapped far apart
    for a, b in rng.integers(0, len(events), (30, 2)).tolist():
        events[a], events[b] = events[b], events[a]
    pe = _process(events)
    w = PerfettoWriter(str(tmp_path / "t.pftrace"), ORIGIN, uuid_base=1 << 16)
    st = w.open_process(pe)
    for lo in range(0, pe.n, 97):
        part = replace(pe, n=min(97, pe.n - lo), cols={k: v[lo:lo + 97] for k, v in pe.cols.items()})
        w.push(st, part)
        st.release(int(part.cols["start_ts"].max()) - ORIGIN + 1)  # all so far: later ones come late
    w.close_process(st, pe)
    w.close()
    d = decode((tmp_path / "t.pftrace").read_bytes())
    assert _got(d) == _want(events)
    _lanes_never_overlap(d)
    assert len({s.track for s in d.slices if s.seq == ep.sequence_id(0, ep.SHARED_SLOT)}) > 1


def test_a_process_without_events_still_appears(tmp_path, session_dir):
    s = _load(session_dir, lambda e: {k: v[:0] for k, v in e.items()})
    w = PerfettoWriter(str(tmp_path / "empty.pftrace"), 0, uuid_base=1 << 16)
    assert w.add_session(s, lambda part, lo: build(part, 0, 0, lo, {}, with_extra=False), CHUNK) == 0
    w.close()
    d = decode((tmp_path / "empty.pftrace").read_bytes())
    assert not d.slices and [td for td in d.tracks.values() if td.HasField("process")]
