"""Seeded byte-mutation fuzzing of one capture file kind, run by ``test_fuzz_capture.py`` in a
subprocess whose address space is capped.

Each iteration copies a pristine two-profile capture, mutates one file of the first profile (bit
flips, random or extreme bytes, int64 limits, truncation, insertion, duplication), then runs
``view`` in every format and ``check`` on it, in this process, through the CLI's ``main``.  A run
fails when an exception escapes (what a user sees as a traceback), the exit status is not 0 or 1,
a skip or warning is printed with status 0 (or status 1 without one), ``view`` blames itself
("internal error"), ``view`` and ``check`` disagree, or the intact second profile is missing from
an output.  Failures are printed as JSON lines; before each iteration its identity is written to
``--progress`` so that one that kills the process (a signal, the memory cap) can still be named.

``--foreign`` replaces the mutations by foreign files (``foreign_mutate``): zeros, sparse tails,
newer format versions, cut headers, counts the columns cannot hold.

Replay one iteration: ``python tests/view/fuzz_driver.py --capture DIR --kind ntrace.pb --seed S --only I``
(with ``--foreign`` for an iteration of the foreign-file test).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

FORMATS = ("parquet", "json", "perfetto", "summary-json")
KINDS = ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb", ".ntff", ".neff", "segment")
EXTREMES = [(1 << 63) - 1, -(1 << 63), (1 << 62) + 1, -1, 0, 1 << 31, (1 << 32) - 1, 200_000_000]
PER_RUN_SECONDS = 30  # a run that takes longer is taken for a hang


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One to three random edits of ``data``; returns the result and a description of the edits."""
    b = bytearray(data)
    done = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        if not b:
            b += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
            done.append("filled")
            continue
        op = rng.choice(("flip", "byte", "extreme", "varint", "truncate", "insert", "duplicate", "zero"))
        i = rng.randrange(len(b))
        if op == "flip":
            b[i] ^= 1 << rng.randrange(8)
        elif op == "byte":
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == "extreme":
            v = rng.choice(EXTREMES)
            b[i:i + 8] = v.to_bytes(8, "little", signed=v < 0)
        elif op == "varint":  # a length or id that claims to go on (protobuf varint continuation)
            b[i:i + 1] = bytes([0xFF] * rng.randrange(1, 10))
        elif op == "truncate":
            del b[i:]
        elif op == "insert":
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        elif op == "duplicate":
            j = min(len(b), i + rng.randrange(1, 256))
            b[j:j] = b[i:j]
        else:
            del b[i:min(len(b), i + rng.randrange(1, 64))]
            b[i:i] = bytes(rng.randrange(1, 64))
        done.append(f"{op}@{i}")
    return bytes(b), ",".join(done)


MESSAGES = {"ntrace.pb": "SystemTrace", "trace_info.pb": "TraceInfo", "cpu_util.pb": "CpuUtil",
            "host_mem.pb": "HostMem", ".ntff": "DeviceTrace", ".neff": "NeffFile", "segment": "EventSegment"}
COLUMN_DTYPES = {  # packed columns (bytes fields) by message and field name
    "EventColumns": dict(type="<u2", start_ns="<i8", end_ns="<i8", nc_idx="<i4", thread_id="<i8",
                         **{c: "<i8" for c in "abcde"}),
    "DeviceOpColumns": dict(start_ns="<i8", end_ns="<i8", name="<i4", track="<i4", exec_idx="<i4", flops="<f8",
                            nbytes="<i8", detail="<i4", source="<i4"),
    "CpuUtil": dict(ts_ns="<i8", cpu_percent="<f4", process_percent="<f4"),
    "HostMem": {c: "<i8" for c in ("ts_ns", "process_rss", "process_vms", "host_total", "host_used",
                                   "host_available")},
}
STRINGS = ["", "\x00", "a\x00b", "../../x", "x/../../y", "\n", "\u00e9\u4e2d", "a" * 5000, "%s%n", "'; drop table"]


def _extreme(rng: random.Random, kind: str, bits: int) -> int:
    lo, hi = (0, (1 << bits) - 1) if kind == "u" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return max(lo, min(hi, rng.choice([lo, hi, hi - 1, lo + 1, -1, 0, 1, 200_000_000, 1 << 40, (1 << 62) + 7,
                                       -(1 << 62), rng.randrange(-1000, 1000)])))


_INT_BITS = {"TYPE_INT32": ("i", 32), "TYPE_SINT32": ("i", 32), "TYPE_SFIXED32": ("i", 32), "TYPE_INT64": ("i", 64),
             "TYPE_SINT64": ("i", 64), "TYPE_SFIXED64": ("i", 64), "TYPE_UINT32": ("u", 32), "TYPE_FIXED32": ("u", 32),
             "TYPE_UINT64": ("u", 64), "TYPE_FIXED64": ("u", 64)}


def _type_names() -> dict[int, str]:
    from google.protobuf.descriptor import FieldDescriptor

    return {getattr(FieldDescriptor, n): n for n in dir(FieldDescriptor) if n.startswith("TYPE_")}


_TYPE_NAMES = _type_names()


def _scalars(msg, out: list) -> list:
    """(message, field, index or None) of every set scalar field, nested messages included."""
    for fd, value in msg.ListFields():
        if fd.type == fd.TYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                continue
            for m in (value if fd.is_repeated else [value]):
                _scalars(m, out)
        elif fd.is_repeated:
            out += [(msg, fd, i) for i in range(len(value))] + [(msg, fd, "all")]
        else:
            out.append((msg, fd, None))
    return out


def semantic_mutate(data: bytes, kind: str, rng: random.Random) -> tuple[bytes, str]:
    """Rewrite one field of a well-formed file through its schema: an int at its type's limits, a
    hostile string, a non-finite float, or one element of a packed column (a type id, a string id,
    a timestamp near INT64_MAX, ...).  Byte flips mostly break the framing and are caught early;
    these reach the checks behind it."""
    from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

    m = getattr(pb, MESSAGES[kind])()
    try:
        m.ParseFromString(data)
    except Exception:  # noqa: BLE001 - not parseable (a 0-byte file): fall back to bytes
        return mutate(data, rng)
    fields = _scalars(m, [])
    if not fields:
        return mutate(data, rng)
    msg, fd, i = rng.choice(fields)
    name = f"{msg.DESCRIPTOR.name}.{fd.name}"
    if i == "all":
        getattr(msg, fd.name)[:] = [] if rng.random() < 0.5 else list(getattr(msg, fd.name)) * 3
        return m.SerializeToString(), f"{name}:{'cleared' if not getattr(msg, fd.name) else 'tripled'}"
    get = (lambda: getattr(msg, fd.name)[i]) if i is not None else (lambda: getattr(msg, fd.name))

    def put(v):
        if i is None:
            setattr(msg, fd.name, v)
        else:
            getattr(msg, fd.name)[i] = v

    tname = _TYPE_NAMES.get(fd.type)
    if tname in _INT_BITS:
        v = _extreme(rng, *_INT_BITS[tname])
        put(v)
        how = f"{name}={v}"
    elif tname == "TYPE_BOOL":
        put(not get())
        how = f"{name} flipped"
    elif tname in ("TYPE_DOUBLE", "TYPE_FLOAT"):
        v = rng.choice([float("nan"), float("inf"), float("-inf"), 1e308, -1.0, 0.0])
        put(v)
        how = f"{name}={v}"
    elif tname == "TYPE_STRING":
        v = rng.choice(STRINGS)
        put(v)
        how = f"{name}={v[:20]!r}"
    elif tname == "TYPE_BYTES" and fd.name in COLUMN_DTYPES.get(msg.DESCRIPTOR.name, {}):
        import numpy as np

        dt = np.dtype(COLUMN_DTYPES[msg.DESCRIPTOR.name][fd.name])
        a = np.frombuffer(get(), dtype=dt).copy() if len(get()) % dt.itemsize == 0 else None
        if a is None or not len(a) or rng.random() < 0.15:
            cut = rng.randrange(len(get()) + 1)
            put(get()[:cut])
            how = f"{name} cut to {cut} bytes"
        else:
            k = rng.randrange(len(a))
            if dt.kind == "f":
                a[k] = rng.choice([np.nan, np.inf, -np.inf, 1e38])
            else:
                a[k] = _extreme(rng, dt.kind, dt.itemsize * 8)
            put(a.tobytes())
            how = f"{name}[{k}]={a[k]}"
    else:
        return mutate(data, rng)
    return m.SerializeToString(), how


FOREIGN_GROWTH = (1 << 20, 64 << 20, 256 << 20)  # sparse tails: no disk, and mappable under the 2 GB cap


def foreign_mutate(data: bytes, kind: str, rng: random.Random) -> tuple[bytes, str, int | None]:
    """What a foreign or hostile file looks like from its first bytes (issue 29, item 9): zeros in
    place of the file, a real start followed by a sparse tail of zeros, a newer format version, a
    header cut short, or a column count the file cannot hold.  Returns (bytes, description, the
    size to extend the file to with a sparse hole, or None)."""
    from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

    op = rng.choice(("zeros", "sparse-tail", "newer", "cut-header", "count"))
    if op == "zeros":
        grow = rng.choice((None,) + FOREIGN_GROWTH)
        return bytes(len(data)), f"zeros{'' if grow is None else f' + sparse to {grow}'}", grow
    if op == "sparse-tail":
        grow = len(data) + rng.choice(FOREIGN_GROWTH)
        return data, f"sparse tail to {grow}", grow
    if op == "cut-header":
        k = rng.randrange(0, 3)
        return data[:k] + b"\xff" * rng.randrange(0, 12), f"header cut to {k} bytes", None
    m = getattr(pb, MESSAGES[kind])()
    m.ParseFromString(data)
    if op == "count" and kind in ("segment", ".ntff"):
        cols = m.blocks[0] if kind == "segment" else m.ops
        cols.count = rng.choice((cols.count + 1, 1 << 31, (1 << 32) - 1))
        return m.SerializeToString(), f"count={cols.count}", None
    m.format_version = rng.choice((3, 99, (1 << 32) - 1))
    return m.SerializeToString(), f"format_version={m.format_version}", None


def victim_file(session: Path, kind: str) -> Path:
    if kind == "segment":  # a core's event segment (ntrace_nc<nc>_<k>.pb, decision 0111)
        return sorted(session.glob("ntrace_nc*_*.pb"))[0]
    if kind.startswith("."):
        return sorted(session.glob("*" + kind))[0]
    return session / kind


def run_cli(argv: list[str]) -> tuple[int, str, str, str | None]:
    """(status, stdout, stderr, traceback or None) of ``neuron-explorer ARGV`` run in this process."""
    from neuron_explorer.cli import main

    out, err = io.StringIO(), io.StringIO()
    tb = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - whatever escapes is what a user would see as a traceback
            tb = traceback.format_exc()
            rc = -1
    return rc, out.getvalue(), err.getvalue(), tb


def intact_converted(fmt: str, out: Path, stdout: str, pid: int) -> bool:
    if fmt == "summary-json":
        return pid in {p["pid"] for p in json.loads(stdout)["profiles"]}
    if fmt == "json":
        names = [e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"]
                 if e.get("name") == "process_name"]
        return any(re.search(rf"\bpid {pid}\b", n) for n in names)
    if fmt == "perfetto":
        return any(re.search(rf"\bpid {pid}\b", n) for n in perfetto_process_names(out.read_bytes()))
    import pyarrow.dataset as ds

    t = ds.dataset(out / "SystemProfileEvents", format="parquet", partitioning="hive").to_table(columns=["process_id"])
    return pid in set(t.column("process_id").to_pylist())


def perfetto_process_names(data: bytes) -> list[str]:
    """Process track names of a Perfetto trace (inside compressed packets too)."""
    import zlib

    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as ppb

    t = ppb.Trace()
    t.ParseFromString(data)
    names = []
    for pk in t.packet:
        if pk.HasField("compressed_packets"):
            names += perfetto_process_names(zlib.decompress(pk.compressed_packets))
        elif pk.HasField("track_descriptor") and pk.track_descriptor.HasField("process"):
            names.append(pk.track_descriptor.process.process_name)
    return names


def one_iteration(pristine: Path, work: Path, kind: str, seed: int, i: int, intact_pid: int,
                  foreign: bool = False) -> list[dict]:
    rng = random.Random(f"{seed}:{kind}:{i}")
    root = work / f"cap{i}"
    shutil.rmtree(root, ignore_errors=True)  # (left by a run that died)
    shutil.copytree(pristine, root, symlinks=True)
    victim_session = sorted(p.parent for p in root.glob("*/*/trace_info.pb"))[0]
    f = victim_file(victim_session, kind)
    raw = f.read_bytes()
    grow = None
    if foreign:
        data, how, grow = foreign_mutate(raw, kind, rng)
    else:
        data, how = semantic_mutate(raw, kind, rng) if rng.random() < 0.5 else mutate(raw, rng)
    f.write_bytes(data)
    if grow is not None:
        os.truncate(f, grow)
    failures = []

    def fail(what: str, detail: str = "") -> None:
        failures.append({"seed": seed, "kind": kind, "iteration": i, "mutation": how, "file": str(f),
                         "problem": what, "detail": detail[-3000:]})

    statuses = {}
    for fmt in FORMATS + ("check",):
        out = work / f"out{i}.{fmt}"
        argv = ["check", "-d", str(root)] if fmt == "check" else \
            ["view", "-d", str(root), "--output-format", fmt, "--no-progress"] + \
            ([] if fmt.startswith("summary") else ["--output-file", str(out)])
        signal.alarm(PER_RUN_SECONDS)
        try:
            rc, stdout, stderr, tb = run_cli(argv)
        finally:
            signal.alarm(0)
        statuses[fmt] = rc
        if tb is not None:
            fail(f"{fmt}: an exception escaped (a traceback for the user)", tb)
            continue
        if rc not in (0, 1):
            fail(f"{fmt}: exit status {rc}", stderr + stdout)
            continue
        if "Traceback" in stderr or "internal error" in stderr:
            fail(f"{fmt}: traceback or internal error reported", stderr)
        if fmt == "check":
            said = any(ln.startswith("error: ") for ln in stdout.splitlines())
            if said != (rc == 1):
                fail(f"check: status {rc} with{'' if said else 'out'} an error line", stdout)
            if f"ok: {pristine_intact_path(root)}:" not in stdout:
                fail("check: the intact profile is not reported ok", stdout)
            continue
        said = "skipped" in stderr or "warning" in stderr
        if said != (rc == 1):
            fail(f"{fmt}: status {rc} with{'' if said else 'out'} a skip or warning", stderr)
        try:
            if not intact_converted(fmt, out, stdout, intact_pid):
                fail(f"{fmt}: the intact profile is missing from the output", stderr)
        except Exception:  # noqa: BLE001 - an unreadable output is a failure of the run
            fail(f"{fmt}: the output cannot be read back", traceback.format_exc())
    views = {statuses[f] for f in FORMATS if statuses.get(f) in (0, 1)}
    if len(views) > 1:
        fail(f"the formats disagree on the exit status: {statuses}")
    elif views and statuses.get("check") in (0, 1) and views != {statuses["check"]}:
        fail(f"view and check disagree: {statuses}")
    shutil.rmtree(root, ignore_errors=True)
    for p in work.glob(f"out{i}.*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for p in work.glob("device_profile_model_*"):
        p.unlink()
    return failures


def pristine_intact_path(root: Path) -> str:
    return str(sorted(p.parent for p in root.glob("*/*/trace_info.pb"))[1])


def _hang(signum, frame):
    raise TimeoutError(f"a run took more than {PER_RUN_SECONDS} s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--capture", required=True, type=Path)
    ap.add_argument("--kind", required=True, choices=KINDS)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--iterations", type=int, default=None, help="run exactly this many (the tests' way)")
    ap.add_argument("--first", type=int, default=0, help="the first iteration's index (continue a sequence)")
    ap.add_argument("--seconds", type=float, default=3.0, help="without --iterations: a hunt of this length")
    ap.add_argument("--min-iterations", type=int, default=3)
    ap.add_argument("--only", type=int, default=None, help="replay this iteration only")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--progress", type=Path, default=None)
    ap.add_argument("--foreign", action="store_true", help="foreign files only (zeros, sparse tails, newer formats)")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _hang)
    work = args.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"fuzz-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

    info = pb.TraceInfo()
    info.ParseFromString((Path(pristine_intact_path(args.capture)) / "trace_info.pb").read_bytes())
    intact_pid = int(info.pid)
    t_end = time.monotonic() + args.seconds
    iterations = [args.only] if args.only is not None else None
    i = args.first
    n = 0
    while True:
        if iterations is not None:
            if not iterations:
                break
            i = iterations.pop()
        elif args.iterations is not None:
            if n >= args.iterations:
                break
        elif n >= args.min_iterations and time.monotonic() >= t_end:
            break
        if args.progress is not None:
            args.progress.write_text(json.dumps({"seed": args.seed, "kind": args.kind, "iteration": i}))
        for f in one_iteration(args.capture, work, args.kind, args.seed, i, intact_pid, args.foreign):
            print(json.dumps(f), flush=True)
        i += 1
        n += 1
    print(json.dumps({"done": n}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
