"""JAX: turn a ``jax.profiler.trace`` into a neuron-explorer profile.

The spec's JAX pattern sets ``NEURON_RT_INSPECT_DEVICE_PROFILE`` and ``NEURON_RT_INSPECT_OUTPUT_DIR``
inside the script and wraps the work in ``with jax.profiler.trace(dir):``.  The variables are set
after start-up, so the ``.pth`` hook cannot see them; instead JAX itself loads us through its plugin
discovery (``jax_plugins.neuron_explorer_profiler.initialize`` calls ``install()``), and we wrap
``start_trace``/``stop_trace``.  When the trace stops and the variables ask for a profile, the trace
JAX just wrote (``<dir>/plugins/profile/<run>/<host>.xplane.pb``) is converted:

- each ``TraceAnnotation`` -> ``framework_op`` (timed directly on the host clock by our wrapper);
- each execution of a jitted computation on a device -> ``nrt_execute`` + ``nc_exec_running``
  (the host call and the device span), one ``Model`` per computation and core;
- each compilation seen in the trace -> ``model_load``;
- the XLA ops inside each execution -> a device profile (``.ntff``), one per computation and core
  in ``model`` mode (first execution only) or one per core in ``session`` mode;
- each computation's optimized HLO -> ``neff_<hash>_vnc_<nc>.neff``; JAX's Chrome trace ->
  ``trace.json``.

Clocks: XLA's profiler stamps events with its own clock.  Right after the trace starts and right
before it stops we emit a marker ``TraceMe`` bracketed by two ``perf_counter_ns`` reads; the
marker's position in the trace gives the offset to the host monotonic clock (uncertainty: half the
bracket, typically < 2 us).  Without markers we fall back to the trace's wall-clock start time and
our wall/monotonic anchors.  The offset used and its uncertainty are written to ``trace_info.pb``'s
note.

This module is imported by JAX's plugin initialization: keep its top level cheap.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from neuron_explorer.util.pbwire import decode_varint, iter_fields

_MARK_START = "neuron_explorer_clock_sync_start"
_MARK_STOP = "neuron_explorer_clock_sync_stop"
_installed = False
_warned: set[str] = set()
_active: "_Trace | None" = None
_orig: dict[str, object] = {}


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"neuron-explorer: warning: {msg}", file=sys.stderr)
        sys.stderr.flush()


def _requested(env=None) -> bool:
    """A neuron-explorer profile is wanted from this jax trace."""
    env = os.environ if env is None else env
    dev = env.get("NEURON_RT_INSPECT_DEVICE_PROFILE", "").strip().lower()
    return dev not in ("", "0") or _enabled(env)


def _enabled(env) -> bool:
    """NEURON_RT_INSPECT_ENABLE as the runtime reads it ('false'/'off' are off; a bad value was
    already refused at start-up)."""
    from neuron_explorer.contracts.env import ConfigError, capture_requested

    try:
        return capture_requested(env)
    except ConfigError:
        return False


def _check_conflict() -> None:
    if _enabled(os.environ):
        _warn_once("enable", "NEURON_RT_INSPECT_ENABLE=1 conflicts with jax.profiler; use one or the other "
                             "(for JAX, set only NEURON_RT_INSPECT_DEVICE_PROFILE and NEURON_RT_INSPECT_OUTPUT_DIR)")


# -- installing --------------------------------------------------------------------------------

def install() -> None:
    """Wrap ``jax.profiler.start_trace``/``stop_trace`` (idempotent; called by the JAX plugin)."""
    global _installed
    if _installed:
        return
    _installed = True
    from jax._src import profiler as jp

    _orig["start"] = jp.start_trace
    _orig["stop"] = jp.stop_trace
    jp.start_trace = start_trace
    jp.stop_trace = stop_trace
    pub = sys.modules.get("jax.profiler")
    if pub is not None:
        if getattr(pub, "start_trace", None) is _orig["start"]:
            pub.start_trace = start_trace
        if getattr(pub, "stop_trace", None) is _orig["stop"]:
            pub.stop_trace = stop_trace
    # Plugins are initialized with the first backend; when that happens inside start_trace (a
    # program whose first JAX call is the trace), start_trace is already running: begin now.
    state = getattr(jp, "_profile_state", None)
    lock = getattr(state, "lock", None)
    if lock is not None and lock.locked() and getattr(state, "profile_session", None) is None and _requested():
        _check_conflict()
        try:
            _begin(in_start=True)
        except Exception as e:
            _warn_once("begin", f"JAX profile conversion disabled: {e}")


def start_trace(log_dir, *args, **kwargs):
    want = _requested()
    if want:
        _check_conflict()
        from neuron_explorer.runtime.config import CaptureConfig

        CaptureConfig.from_env()  # a bad value fails here, before the work, naming the variable
    _orig["start"](log_dir, *args, **kwargs)
    if want and _active is None:
        try:
            _begin(in_start=False)
        except Exception as e:
            _warn_once("begin", f"JAX profile conversion disabled: {e}")


def stop_trace():
    global _active
    t = _active
    if t is not None:
        try:
            from jax._src import profiler as jp

            t.log_dir = getattr(jp._profile_state, "log_dir", None)
        except Exception:
            pass
        t.mark(_MARK_STOP)
    try:
        return _orig["stop"]()
    finally:
        if t is not None:
            _active = None
            t.finish()


# -- one trace ---------------------------------------------------------------------------------

class _Trace:
    """What we record while a jax trace runs: clock markers, annotations, host samples."""

    def __init__(self) -> None:
        from neuron_explorer.runtime import clock

        self.clock = clock
        self.anchors = [clock.anchor("start")]
        self.marks: dict[str, tuple[int, int]] = {}
        self.annotations: list[tuple[int, int, int, str]] = []
        self.log_dir: str | None = None
        self.start_wall = time.time_ns()
        self.pid = os.getpid()
        self.sampler = None
        self._restore: list = []

    def mark(self, name: str) -> None:
        """A marker event in the trace, bracketed by host monotonic reads."""
        try:
            from jax._src.lib import _profiler

            now = time.perf_counter_ns
            tm = _profiler.TraceMe(name)  # constructed outside the bracket
            t0 = now()
            with tm:
                pass
            t1 = now()
            self.marks[name] = (t0, t1)
        except Exception:
            pass

    def patch_annotations(self) -> None:
        import jax.profiler as jprof

        cls = jprof.TraceAnnotation
        orig_init = cls.__init__
        orig_enter = cls.__enter__
        orig_exit = cls.__exit__
        rec = self.annotations.append
        now = time.perf_counter_ns
        tid = threading.get_native_id

        def __init__(self_, name, *a, **kw):
            orig_init(self_, name, *a, **kw)
            self_._nx_name = str(name)

        def __enter__(self_):
            r = orig_enter(self_)
            self_._nx_t0 = now()
            return r

        def __exit__(self_, *exc):
            t1 = now()
            r = orig_exit(self_, *exc)
            t0 = getattr(self_, "_nx_t0", None)
            if t0 is not None:
                rec((t0, t1, tid(), getattr(self_, "_nx_name", "")))
            return r

        cls.__init__, cls.__enter__, cls.__exit__ = __init__, __enter__, __exit__
        self._restore.append((cls, orig_init, orig_enter, orig_exit))

    def unpatch(self) -> None:
        for cls, i, en, ex in self._restore:
            cls.__init__, cls.__enter__, cls.__exit__ = i, en, ex
        self._restore.clear()

    def start_sampler(self) -> None:
        from neuron_explorer.runtime.config import CaptureConfig

        try:
            cfg = CaptureConfig.from_env()
        except Exception:
            return
        if cfg.cpu_util or cfg.host_memory:
            from neuron_explorer.capture.samplers import HostSampler

            self.sampler = HostSampler(self.pid, cfg.sample_period_s, cfg.cpu_util, cfg.host_memory,
                                       max_samples=cfg.max_samples)
            self.sampler.start()

    def finish(self) -> None:
        self.anchors.append(self.clock.anchor("stop"))
        self.unpatch()
        if self.sampler is not None:
            self.sampler.stop()
        try:
            d = convert_trace(self)
            if d and os.environ.get("NEURON_EXPLORER_QUIET", "") in ("", "0"):
                print(f"neuron-explorer: profile written to {d}", file=sys.stderr)
        except Exception as e:  # a profile must never take the workload down
            print(f"neuron-explorer: warning: JAX profile not converted: {e}", file=sys.stderr)


def _begin(in_start: bool) -> None:
    global _active
    t = _Trace()
    t.patch_annotations()
    t.start_sampler()
    if not in_start:
        t.mark(_MARK_START)
    _active = t


# -- HLO: per-instruction facts from the optimized module text ---------------------------------

_DTYPE_BYTES = {"pred": 1, "s2": 1, "u2": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
                "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ELEMENTWISE = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "exp", "log",
                "tanh", "logistic", "sqrt", "rsqrt", "power", "negate", "abs", "sine", "cosine", "tan",
                "exponential-minus-one", "log-plus-one", "atan2", "remainder", "erf", "cbrt", "select",
                "compare", "clamp", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "sign"}


def _shape_list(s: str) -> list[tuple[str, list[int]]]:
    import re

    return [(m.group(1), [int(x) for x in m.group(2).split(",") if x.strip().lstrip("<=").isdigit()]
             if m.group(2) else [])
            for m in re.finditer(r"\b([a-z]+[0-9]*)\[([^\]]*)\]", s) if m.group(1) in _DTYPE_BYTES or
            m.group(1).startswith("f8")]


def _nelem(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _shape_bytes(s: str) -> int:
    return sum(_nelem(d) * _DTYPE_BYTES.get(t, 1) for t, d in _shape_list(s))


class Hlo:
    """The instructions of an optimized HLO module (text form), enough for op costs and sources."""

    def __init__(self, text: str) -> None:
        import re

        self.text = text
        self.comps: dict[str, dict[str, tuple[str, str, list[str], str]]] = {}
        self.entry = ""
        self.signature = ""
        m = re.search(r"entry_computation_layout=\{(.*?)\}(?:, |\n|$)", text)
        if m:
            self.signature = m.group(1)
        files, funcs, locs, frames = {}, {}, {}, {}
        section = ""
        cur = None
        inst_re = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([\w\-]+)\((.*?)\)(.*)$")
        for line in text.splitlines():
            st = line.strip()
            if st in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
                section = st
                continue
            if section and st and st[0].isdigit():
                k, _, v = st.partition(" ")
                if section == "FileNames":
                    files[int(k)] = v.strip('"')
                elif section == "FunctionNames":
                    funcs[int(k)] = v.strip('"')
                elif section == "FileLocations":
                    f = re.search(r"file_name_id=(\d+)", v)
                    ln = re.search(r"\bline=(\d+)", v)
                    locs[int(k)] = (int(f.group(1)) if f else 0, int(ln.group(1)) if ln else 0)
                elif section == "StackFrames":
                    f = re.search(r"file_location_id=(\d+)", v)
                    frames[int(k)] = int(f.group(1)) if f else 0
                continue
            if not st:
                section = "" if section and not st else section
                continue
            hm = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{$", st)
            if hm and not line.startswith(" "):
                section = ""
                cur = self.comps.setdefault(hm.group(2), {})
                if hm.group(1):
                    self.entry = hm.group(2)
                continue
            if st == "}":
                cur = None
                continue
            if cur is not None:
                im = inst_re.match(line)
                if im:
                    name, shape, opcode, operands, attrs = im.groups()
                    ops = re.findall(r"%([\w.\-]+)", operands)
                    cur[name] = (shape, opcode, ops, attrs)
        self._files, self._locs, self._frames = files, locs, frames

    def entry_instructions(self) -> dict[str, tuple[str, str, list[str], str]]:
        return self.comps.get(self.entry, {})

    def source_of(self, attrs: str) -> str:
        import re

        m = re.search(r'source_file="([^"]*)"\s+source_line=(\d+)', attrs)
        if m:
            return f"{m.group(1)}:{m.group(2)}"
        m = re.search(r"stack_frame_id=(\d+)", attrs)
        if m:
            loc = self._locs.get(self._frames.get(int(m.group(1)), 0))
            if loc and loc[0] in self._files:
                return f"{self._files[loc[0]]}:{loc[1]}"
        return ""

    @staticmethod
    def op_name_of(attrs: str) -> str:
        import re

        m = re.search(r'op_name="([^"]*)"', attrs)
        return m.group(1) if m else ""

    def _comp_flops(self, comp: str, seen: set[str]) -> float:
        if comp in seen:
            return 0.0
        seen = seen | {comp}
        total = 0.0
        insts = self.comps.get(comp, {})
        for name, (shape, opcode, ops, attrs) in insts.items():
            total += self._inst_flops(insts, shape, opcode, ops, attrs, seen)
        return total

    def _inst_flops(self, insts, shape, opcode, ops, attrs, seen) -> float:
        import re

        out = _shape_list(shape)
        n_out = sum(_nelem(d) for _, d in out)
        if opcode == "dot":
            lhs = insts.get(ops[0]) if ops else None
            m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", attrs)
            k = 1
            if lhs is not None and m and m.group(1):
                dims = _shape_list(lhs[0])
                if dims:
                    for i in m.group(1).split(","):
                        if int(i) < len(dims[0][1]):
                            k *= dims[0][1][int(i)]
            return 2.0 * n_out * k
        if opcode == "convolution":
            rhs = insts.get(ops[1]) if len(ops) > 1 else None
            if rhs is not None:
                kd = _shape_list(rhs[0])
                m = re.search(r"dim_labels=\w+_(\w+)->", attrs)
                if kd and m and len(m.group(1)) == len(kd[0][1]):
                    o_pos = m.group(1).find("o")
                    k = _nelem(kd[0][1]) // max(kd[0][1][o_pos], 1) if o_pos >= 0 else _nelem(kd[0][1])
                    return 2.0 * n_out * k
            return float("nan")
        if opcode in _ELEMENTWISE:
            return float(n_out)
        if opcode in ("reduce", "reduce-window", "all-reduce", "reduce-scatter"):
            src = insts.get(ops[0]) if ops else None
            return float(sum(_nelem(d) for _, d in _shape_list(src[0]))) if src else float(n_out)
        called = re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", attrs)
        if opcode in ("fusion", "call", "custom-call", "async-start") and called:
            return sum(self._comp_flops(c, seen) for c in called)
        return 0.0

    def op_facts(self) -> dict[str, tuple[float | None, int | None, str, str]]:
        """Per entry instruction: (flops, bytes read + written, detail, source location)."""
        facts = {}
        insts = self.entry_instructions()
        for name, (shape, opcode, ops, attrs) in insts.items():
            if opcode in ("parameter", "constant", "get-tuple-element", "tuple", "bitcast"):
                continue
            try:
                fl = self._inst_flops(insts, shape, opcode, ops, attrs, set())
            except Exception:
                fl = float("nan")
            nbytes = _shape_bytes(shape) + sum(_shape_bytes(insts[o][0]) for o in ops if o in insts)
            detail = f"{shape.split('{')[0]} {opcode}"
            opn = self.op_name_of(attrs)
            if opn:
                detail += f" [{opn}]"
            facts[name] = (None if fl != fl else fl, nbytes, detail, self.source_of(attrs))
        return facts


def _module_id(hlo_module) -> int | None:
    """HloModuleProto.id (field 5), which the profiler reports as ``program_id``."""
    try:
        raw = hlo_module.as_serialized_hlo_module_proto()
    except Exception:
        return None
    try:
        for fn, wt, a, _b, _tag in iter_fields(raw, 0, len(raw)):
            if fn == 5 and wt == 0:
                return decode_varint(raw, a)[0]
    except (ValueError, IndexError):
        return None
    return 0


def _executables(names: set[str]) -> dict[tuple[str, int | None], object]:
    """Live compiled executables of the process by (module name, module id)."""
    out = {}
    try:
        from jax._src import xla_bridge

        backends = xla_bridge.backends()
    except Exception:
        return out
    for b in backends.values():
        try:
            exes = b.live_executables()
        except Exception:
            continue
        for e in exes:
            try:
                mods = e.hlo_modules()
            except Exception:
                continue
            if mods and mods[0].name in names:
                out[(mods[0].name, _module_id(mods[0]))] = e
                out.setdefault((mods[0].name, None), e)
    return out


# -- the trace ---------------------------------------------------------------------------------

def _find_xplane(t: _Trace) -> tuple[str | None, str | None]:
    """This process's xplane.pb (and trace.json.gz) written by the trace that just stopped."""
    import glob

    if not t.log_dir:
        return None, None
    runs = os.path.join(t.log_dir, "plugins", "profile")
    cands = []
    for p in glob.glob(os.path.join(runs, "*", "*.xplane.pb")):
        try:
            m = os.stat(p).st_mtime_ns
        except OSError:
            continue
        if m >= t.start_wall - 2_000_000_000:
            cands.append((m, p))
    from jax.profiler import ProfileData

    for _, p in sorted(cands, reverse=True):
        try:
            pd = ProfileData.from_file(p)
        except Exception:
            continue
        meta = pd.find_plane_with_name("/host:metadata")
        pid = dict(meta.stats).get("process_id") if meta is not None else None
        if pid in (None, t.pid):
            tj = p[: -len(".xplane.pb")] + ".trace.json.gz"
            return p, tj if os.path.exists(tj) else None
    return None, None


def _clock_map(t: _Trace, pd) -> tuple[int, str]:
    """(offset, note): host monotonic ns = trace ns + offset."""
    found = {}
    for plane in pd.planes:
        if not plane.name.startswith("/host"):
            continue
        for line in plane.lines:
            for e in line.events:
                if e.name in (_MARK_START, _MARK_STOP) and e.name in t.marks:
                    found[e.name] = (e.start_ns + e.end_ns) / 2
    offs = []
    for name, mid in found.items():
        t0, t1 = t.marks[name]
        offs.append(((t0 + t1) / 2 - mid, (t1 - t0) / 2))
    if offs:
        off = sum(o for o, _ in offs) / len(offs)
        unc = max(u for _, u in offs) + (abs(offs[0][0] - offs[-1][0]) / 2 if len(offs) > 1 else 0)
        return int(round(off)), (f"clock: trace mapped to the host monotonic clock by {len(offs)} marker(s), "
                                 f"offset {int(off)} ns, uncertainty +-{int(unc) + 1} ns")
    env = None
    for plane in pd.planes:
        if plane.name == "Task Environment":
            env = dict(plane.stats)
    start = env.get("profile_start_time") if env else None
    a = t.anchors[0]
    if start:
        # relative trace time + profile start (wall ns) -> monotonic through our wall/monotonic anchor
        return int(start) - (a[1] - a[0]), ("clock: no marker in the trace; mapped through the trace's wall-clock "
                                            "start and a wall/monotonic anchor (uncertainty: a few microseconds "
                                            "plus any wall-clock step during the trace)")
    return a[0], "clock: no marker and no trace start time; trace times assumed to start at the trace start"


def _line_labels(pd) -> dict[tuple[str, str], tuple[str, int]]:
    """Readable track names and synthetic thread ids per (plane, line)."""
    import re
    import zlib

    out = {}
    counts: dict[str, int] = {}
    for plane in pd.planes:
        for line in plane.lines:
            name = line.name
            base = re.sub(r"/-?\d+$", "", name)
            base = base[3:] if base.startswith("tf_") else base
            if plane.name.startswith("/host"):
                k = counts.get(base, 0)
                counts[base] = k + 1
                label = f"{base} #{k}" if base != name or k else base
            else:
                label = f"{plane.name} {name}"
            out[(plane.name, name)] = (label, zlib.crc32(f"{plane.name}/{name}".encode()) & 0x7FFFFFFF)
    return out


_EXEC_NAME = ("LoadedExecutable::Execute", "LoadedExecutable::ExecuteHelper")


def _collect(pd):
    """Pull XLA ops, host execute calls and compilations out of the trace."""
    import re

    ops = []       # (dev, run_key, module, program_id, name, start, end, plane, line, stats)
    hosts = []     # (start, end, plane, line, run_id, module)
    compiles = []  # (start, end, plane, line)
    module_marks = []  # (start, end, module) events naming a module in "(...)"
    for plane in pd.planes:
        dev_from_plane = None
        m = re.match(r"/device:[A-Z]+:(\d+)", plane.name)
        if m:
            dev_from_plane = int(m.group(1))
        if not (plane.name.startswith("/host") or dev_from_plane is not None):
            continue
        for line in plane.lines:
            for e in line.events:
                nm = e.name
                if nm.startswith("$") or nm.startswith("neuron_explorer_clock_sync"):
                    continue
                st = None
                if "::" in nm or "compile" in nm or "(" in nm:
                    st = dict(e.stats)
                if st is None:
                    # cheap path: most events are ops or python frames; ops carry hlo_op
                    st = dict(e.stats)
                if "hlo_op" in st and "hlo_module" in st:
                    dev = st.get("device_ordinal", dev_from_plane if dev_from_plane is not None else 0)
                    ops.append((int(dev), st.get("run_id"), str(st["hlo_module"]), st.get("program_id"),
                                str(st["hlo_op"]), int(e.start_ns), int(e.end_ns), plane.name, line.name, st))
                    continue
                if plane.name.startswith("/host"):
                    if any(x in nm for x in _EXEC_NAME) and not nm.startswith("[") and "Prepare" not in nm:
                        mm = re.search(r"\(([^()]+)\)$", nm)
                        hosts.append((int(e.start_ns), int(e.end_ns), plane.name, line.name, st.get("run_id"),
                                      st.get("name") or (mm.group(1) if mm else None)))
                    elif nm == "backend_compile_and_load" or nm.endswith("Client::Compile"):
                        compiles.append((int(e.start_ns), int(e.end_ns), plane.name, line.name, nm))
                    else:
                        mm = re.search(r"\((jit_[^()]+|pmap_[^()]+|[\w.\-]+)\)$", nm)
                        if mm:
                            module_marks.append((int(e.start_ns), int(e.end_ns), mm.group(1)))
                    if nm.startswith("ThunkExecutor::Execute") and "run_id" in st:
                        ops.append((int(st.get("device_ordinal", 0)), st.get("run_id"), None, None, None,
                                    int(e.start_ns), int(e.end_ns), plane.name, line.name, st))
    return ops, hosts, compiles, module_marks


def _executions(ops):
    """Group op rows into executions: by (device, run_id), else by runs of one module per device."""
    groups: dict[tuple, dict] = {}
    order = []
    by_dev_open: dict[int, tuple] = {}
    for row in sorted(ops, key=lambda r: r[5]):
        dev, run_id, module, prog, name = row[0], row[1], row[2], row[3], row[4]
        if run_id is not None:
            key = (dev, "run", run_id)
        else:
            cur = by_dev_open.get(dev)
            g = groups.get(cur) if cur else None
            if g is None or g["module"] != module or name in g["names"]:
                key = (dev, "seq", len(order))
                by_dev_open[dev] = key
            else:
                key = cur
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"dev": dev, "module": None, "program_id": None, "ops": [], "names": set(),
                               "start": row[5], "end": row[6]}
            order.append(key)
        if module is not None:
            g["module"] = module
            g["program_id"] = row[3]
            g["ops"].append(row)
            g["names"].add(name)
        g["start"] = min(g["start"], row[5])
        g["end"] = max(g["end"], row[6])
    out = [groups[k] for k in order if groups[k]["module"] is not None]
    out.sort(key=lambda g: g["start"])
    return out


def convert_trace(t: _Trace) -> str | None:
    import gzip
    import hashlib
    import shutil

    from neuron_explorer.capture import writer
    from neuron_explorer.contracts.layout import make_session_dir
    from neuron_explorer.util.atomic import atomic_write
    from neuron_explorer.capture.device import OpTable, write_device_trace, write_neff
    from neuron_explorer.contracts.layout import model_ntff_name, neff_file_name, session_ntff_name
    from neuron_explorer.capture.store import CoreStore, enabled_mask
    from neuron_explorer.runtime.ring import records_to_block
    from neuron_explorer.contracts import events as ev
    from neuron_explorer.runtime.config import CaptureConfig
    from neuron_explorer.contracts.env import ConfigError
    from neuron_explorer.runtime.core import Runtime
    from neuron_explorer.runtime.identity import ProcessIdentity

    try:
        cfg = CaptureConfig.from_env()
    except ConfigError as e:
        print(f"neuron-explorer: error: {e}", file=sys.stderr)
        return None
    xp, tj = _find_xplane(t)
    rt = Runtime(cfg, ProcessIdentity.current())
    rt.anchors = list(t.anchors)
    rt.end_reason = "exit"
    platform = "cpu"
    try:
        import jax

        platform = jax.default_backend()
    except Exception:
        pass
    rt.device_kind = f"xla:{platform}"
    note = ["source: jax.profiler.trace"]
    records: dict[int, list[tuple]] = {}
    host_tid = threading.get_native_id()
    default_nc = rt.ident.default_core

    def rec(nc: int, row: tuple) -> None:
        if cfg.nc_enabled(nc):
            records.setdefault(nc, []).append(row)

    for t0, t1, tid, label in t.annotations:
        rec(default_nc, (ev.FRAMEWORK_OP, t0, t1, tid, rt.intern(label), 0, 0, 0, 0))

    tables: dict[tuple, OpTable] = {}
    neffs: list = []
    if xp is None:
        note.append("no xplane.pb from this process found under the trace directory: annotations only")
    else:
        from jax.profiler import ProfileData

        pd = ProfileData.from_file(xp)
        off, cnote = _clock_map(t, pd)
        note.append(cnote)
        labels = _line_labels(pd)
        ops, hosts, compiles, module_marks = _collect(pd)
        execs = _executions(ops)
        names = {g["module"] for g in execs}
        exes = _executables(names)
        models: dict[tuple, object] = {}
        hlos: dict[tuple, Hlo | None] = {}
        facts: dict[tuple, dict] = {}
        hashes: dict[tuple, int] = {}
        mflops: dict[tuple, float] = {}

        def comp_key(g):
            return (g["module"], g["program_id"])

        for g in execs:
            k = comp_key(g)
            if k in hashes:
                continue
            exe = exes.get(k) if k[1] is not None else exes.get((k[0], None))
            text, flops = "", 0.0
            if exe is not None:
                try:
                    text = exe.hlo_modules()[0].to_string()
                except Exception:
                    text = ""
                try:
                    ca = exe.cost_analysis()
                    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
                    flops = float(ca.get("flops", 0.0) or 0.0)
                except Exception:
                    flops = 0.0
            h = Hlo(text) if text else None
            hlos[k] = h
            facts[k] = h.op_facts() if h else {}
            basis = (k[0] + "\0" + (text or str(k[1]))).encode()
            hashes[k] = int.from_bytes(hashlib.blake2b(basis, digest_size=8).digest(), "little")
            mflops[k] = flops

        # compilations: a compile event names its module through nested "(module)" events; the k-th
        # compile of a module name goes with the k-th computation of that name to run
        comp_of: dict[str, list[tuple[int, int]]] = {}
        for c0, c1, _pl, _ln, cname in sorted(compiles):
            if cname != "backend_compile_and_load" and any(c0 >= a and c1 <= b for v in comp_of.values()
                                                           for a, b in v):
                continue  # the client's compile inside a python-level compile already counted
            for m0, m1, mod in module_marks:
                if c0 <= m0 and m1 <= c1 + 1 and mod in names:
                    comp_of.setdefault(mod, []).append((c0, c1))
                    break
        compile_of: dict[tuple, tuple[int, int]] = {}
        firsts: dict[str, list[tuple]] = {}
        for g in execs:
            k = comp_key(g)
            if k not in firsts.setdefault(k[0], []):
                firsts[k[0]].append(k)
        for mod, ks in firsts.items():
            for k, c in zip(ks, comp_of.get(mod, [])):
                compile_of[k] = c

        def model_for(g):
            k = comp_key(g)
            nc = g["dev"]
            m = models.get((k, nc))
            if m is None:
                h = hashes[k]
                hl = hlos[k]
                c = compile_of.get(k)
                m = rt.add_model(name=k[0], neff_name=f"neff_{h}", graph_hash=f"{h:016x}", backend=rt.device_kind,
                                 kind="jit", nc_idx=nc, compile_ns=(c[1] - c[0]) if c else 0,
                                 num_nodes=len(hl.entry_instructions()) if hl else 0,
                                 flops=mflops[k], signature=hl.signature if hl else "",
                                 artifacts={"code": hl.text if hl else "", "hlo": hl})
                models[(k, nc)] = m
                if c and rt.enabled[ev.MODEL_LOAD]:
                    rec(nc, (ev.MODEL_LOAD, c[0] + off, c[1] + off, host_tid, m.id, c[1] - c[0], 0, 0, 0))
            return m

        # host calls: by run_id when the trace has it, else the latest execute call before the device start
        by_run = {}
        plain = []
        for h in sorted(hosts):
            if h[4] is not None:
                by_run.setdefault(h[4], h)
            else:
                plain.append(h)
        used: set[tuple[int, int]] = set()
        exec_ids: dict[int, int] = {}
        mode = cfg.device_profile
        first_done: set[tuple] = set()
        pi = 0
        for g in execs:
            nc = g["dev"]
            if not cfg.nc_enabled(nc):
                continue
            m = model_for(g)
            run_id = g["ops"][0][1]
            host = by_run.get(run_id) if run_id is not None else None
            if host is None:
                while pi + 1 < len(plain) and plain[pi + 1][0] <= g["start"]:
                    pi += 1
                if plain and plain[pi][0] <= g["start"] and (pi, nc) not in used:
                    host = plain[pi]
                    used.add((pi, nc))
            eid = exec_ids.get(nc, 0)
            exec_ids[nc] = eid + 1
            ds, de = g["start"] + off, g["end"] + off
            if host is not None:
                hs, he = host[0] + off, host[1] + off
                htid = labels.get((host[2], host[3]), ("", host_tid))[1]
            else:
                hs, he, htid = ds, de, host_tid
            rec(nc, (ev.EXEC_PAIR, hs, he, htid, m.id, eid, 0, ds, max(de, ds + 1)))
            # device profile
            if mode is None:
                continue
            k = comp_key(g)
            if mode == "session":
                tk = ("session", nc)
            else:
                if (k, nc) in first_done:
                    continue
                first_done.add((k, nc))
                tk = ("model", nc, m.id)
            table = tables.get(tk)
            if table is None:
                table = tables[tk] = OpTable()
            xi = table.add_execution(eid, m.id, m.name, m.neff_name, ds, de)
            f = facts.get(k, {})
            for row in sorted(g["ops"], key=lambda r: r[5]):
                fl, nb, detail, src = f.get(row[4], (None, None, "", ""))
                st = row[9]
                if "flops" in st:
                    fl = float(st["flops"])
                if "bytes_accessed" in st:
                    nb = int(st["bytes_accessed"])
                track = labels.get((row[7], row[8]), (row[8], 0))[0]
                table.add_op(row[5] + off, row[6] + off, row[4], track, xi, flops=fl, nbytes=nb,
                             detail=detail, source=src)
        neffs = list(models.values())
        note.append(f"executions: {len(execs)}, computations: {len(hashes)}, xla ops: "
                    f"{sum(len(g['ops']) for g in execs)}")

    # sync points (both clocks are the host monotonic clock once converted) and the stop marker
    t_sync = t.anchors[-1][0]
    for nc in list(records) or [default_nc]:
        if cfg.nc_enabled(nc):
            records.setdefault(nc, []).append(
                (ev.TIMESTAMP_SYNC_POINT, t_sync, t_sync, host_tid, t_sync, t_sync, exec_ids.get(nc, 0) - 1
                 if xp else -1, 0, 0))
    cores: dict[int, CoreStore] = {}
    mask = enabled_mask(rt.enabled)
    for nc, rows in sorted(records.items()):
        rows.sort(key=lambda r: r[1])
        st = cores[nc] = CoreStore(nc, cfg.max_events_per_nc)
        st.add(records_to_block(rows), mask, len(rows))

    d = make_session_dir(cfg.output_dir, rt.ident.instance_id, rt.ident.pid, rt.anchors[0][1])
    if cfg.system_profile:
        atomic_write(os.path.join(d, "ntrace.pb"), writer.encode_system_trace(rt, cores))
    if t.sampler is not None:
        if t.sampler.cpu:
            atomic_write(os.path.join(d, "cpu_util.pb"), writer.encode_cpu_util(t.sampler))
        if t.sampler.mem:
            atomic_write(os.path.join(d, "host_mem.pb"), writer.encode_host_mem(t.sampler))
    for tk, table in tables.items():
        nc = tk[1]
        if tk[0] == "session":
            name = session_ntff_name(nc, 0)
        else:
            name = model_ntff_name(rt.models[tk[2]].neff_name.replace("neff_", ""), nc)
        sync = [(e.start_ns, e.start_ns, e.exec_id) for e in table.executions]
        write_device_trace(os.path.join(d, name), table, instance_id=rt.ident.instance_id, pid=rt.ident.pid,
                           nc_idx=nc, mode=cfg.device_profile or "", device_kind=rt.device_kind, source="jax",
                           sync=sync)
    if cfg.device_profile is not None:
        for m in neffs:
            hl = m.artifacts.get("hlo")
            nodes = []
            if hl is not None:
                for name, (shape, opcode, ops_, attrs) in hl.entry_instructions().items():
                    nodes.append((name, opcode, shape.split("{")[0], hl.source_of(attrs), Hlo.op_name_of(attrs)))
            write_neff(os.path.join(d, neff_file_name(m.neff_name.replace("neff_", ""), m.nc_idx)),
                       neff_name=m.neff_name, graph_hash=m.graph_hash, model_name=m.name, backend=m.backend,
                       kind=m.kind, signature=m.signature, code=m.artifacts.get("code", ""), framework="jax",
                       compile_ns=m.compile_ns, nodes=nodes)
    if tj:
        tmp = os.path.join(d, ".trace.json.tmp")
        with gzip.open(tj, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, os.path.join(d, "trace.json"))
    atomic_write(os.path.join(d, "trace_info.pb"), writer.encode_trace_info(rt, cores, d, "; ".join(note)))
    return d
