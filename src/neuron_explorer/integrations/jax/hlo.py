"""HLO: per-instruction facts (flops, bytes, detail, source) from an optimized module's text.

The XPlane trace names each XLA op it ran but says nothing about its cost or where in the user's
code it came from; the optimized HLO of the computation does.  JAX keeps the compiled executables
of the process alive (``live_executables()``), so at conversion time we read their HLO text and
cost analysis here, keyed the way the trace names them: module name and ``HloModuleProto.id``
(which the profiler reports as ``program_id``).

Only the text form is parsed (no protobuf schema of XLA's is needed), and only as far as the
device profile and the ``.neff`` need: the instructions of each computation, the entry
computation's signature, and the stack-frame tables that map an instruction to a file and line.
"""

from __future__ import annotations

import re

from neuron_explorer.util.pbwire import decode_varint, iter_fields

_DTYPE_BYTES = {"pred": 1, "s2": 1, "u2": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
                "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ELEMENTWISE = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "exp", "log",
                "tanh", "logistic", "sqrt", "rsqrt", "power", "negate", "abs", "sine", "cosine", "tan",
                "exponential-minus-one", "log-plus-one", "atan2", "remainder", "erf", "cbrt", "select",
                "compare", "clamp", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "sign"}
# instructions that move or name data without computing: no op of their own in the device profile
_NOT_OPS = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast")
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_INST_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([\w\-]+)\((.*?)\)(.*)$")
_COMP_RE = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{$")

# one instruction: (shape, opcode, operand names, attributes text)
Instruction = tuple[str, str, list[str], str]
# per entry instruction: (flops or None when unknown, bytes read + written, detail, source location)
OpFacts = tuple[float | None, int, str, str]


def _shape_list(s: str) -> list[tuple[str, list[int]]]:
    """The array shapes in a shape text (``f32[128,128]{1,0}`` or a tuple of them)."""
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
        self.text = text
        self.comps: dict[str, dict[str, Instruction]] = {}
        self.entry = ""
        self.signature = ""
        m = re.search(r"entry_computation_layout=\{(.*?)\}(?:, |\n|$)", text)
        if m:
            self.signature = m.group(1)
        self._files: dict[int, str] = {}
        self._locs: dict[int, tuple[int, int]] = {}
        self._frames: dict[int, int] = {}
        self._parse(text)

    def _parse(self, text: str) -> None:
        """One pass over the lines: computations and their instructions, and the stack-frame
        tables (sections of ``<id> <value>`` lines after a header line, ended by a blank line;
        function names are skipped, a location is a file and a line)."""
        section = ""
        cur = None
        for line in text.splitlines():
            st = line.strip()
            if st in _SECTIONS:
                section = st
                continue
            if section and st and st[0].isdigit():
                self._table_row(section, st)
                continue
            if not st:
                section = ""
                continue
            hm = _COMP_RE.match(st)
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
                im = _INST_RE.match(line)
                if im:
                    name, shape, opcode, operands, attrs = im.groups()
                    cur[name] = (shape, opcode, re.findall(r"%([\w.\-]+)", operands), attrs)

    def _table_row(self, section: str, st: str) -> None:
        k, _, v = st.partition(" ")
        if section == "FileNames":
            self._files[int(k)] = v.strip('"')
        elif section == "FileLocations":
            f = re.search(r"file_name_id=(\d+)", v)
            ln = re.search(r"\bline=(\d+)", v)
            self._locs[int(k)] = (int(f.group(1)) if f else 0, int(ln.group(1)) if ln else 0)
        elif section == "StackFrames":
            f = re.search(r"file_location_id=(\d+)", v)
            self._frames[int(k)] = int(f.group(1)) if f else 0

    def entry_instructions(self) -> dict[str, Instruction]:
        return self.comps.get(self.entry, {})

    def source_of(self, attrs: str) -> str:
        """``file:line`` of an instruction: from its ``source_file``/``source_line`` metadata, else
        through its stack frame; empty when neither is there."""
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
        """The JAX-level op name in an instruction's metadata (``jit(layer)/dot_general``)."""
        m = re.search(r'op_name="([^"]*)"', attrs)
        return m.group(1) if m else ""

    def _comp_flops(self, comp: str, seen: set[str]) -> float:
        if comp in seen:
            return 0.0
        seen = seen | {comp}
        total = 0.0
        insts = self.comps.get(comp, {})
        for shape, opcode, ops, attrs in insts.values():
            total += self._inst_flops(insts, shape, opcode, ops, attrs, seen)
        return total

    def _inst_flops(self, insts, shape, opcode, ops, attrs, seen) -> float:
        """Estimated flops of one instruction (see docs/jax.md, Limits); NaN when unknown."""
        n_out = sum(_nelem(d) for _, d in _shape_list(shape))
        if opcode == "dot":
            return _dot_flops(insts, n_out, ops, attrs)
        if opcode == "convolution":
            return _conv_flops(insts, n_out, ops, attrs)
        if opcode in _ELEMENTWISE:
            return float(n_out)
        if opcode in ("reduce", "reduce-window", "all-reduce", "reduce-scatter"):
            src = insts.get(ops[0]) if ops else None
            return float(sum(_nelem(d) for _, d in _shape_list(src[0]))) if src else float(n_out)
        called = re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", attrs)
        if opcode in ("fusion", "call", "custom-call", "async-start") and called:
            return sum(self._comp_flops(c, seen) for c in called)
        return 0.0

    def op_facts(self) -> dict[str, OpFacts]:
        """Per entry instruction: (flops, bytes read + written, detail, source location)."""
        facts = {}
        insts = self.entry_instructions()
        for name, (shape, opcode, ops, attrs) in insts.items():
            if opcode in _NOT_OPS:
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

    def neff_nodes(self) -> list[tuple[str, str, str, str, str]]:
        """The entry computation as ``.neff`` nodes: (name, opcode, shape, source, op name)."""
        return [(name, opcode, shape.split("{")[0], self.source_of(attrs), self.op_name_of(attrs))
                for name, (shape, opcode, _ops, attrs) in self.entry_instructions().items()]


def _dot_flops(insts: dict[str, Instruction], n_out: int, ops: list[str], attrs: str) -> float:
    """2 x outputs x the product of the left operand's contracting dimensions."""
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


def _conv_flops(insts: dict[str, Instruction], n_out: int, ops: list[str], attrs: str) -> float:
    """2 x outputs x the kernel's elements per output feature; NaN without a kernel layout."""
    rhs = insts.get(ops[1]) if len(ops) > 1 else None
    if rhs is not None:
        kd = _shape_list(rhs[0])
        m = re.search(r"dim_labels=\w+_(\w+)->", attrs)
        if kd and m and len(m.group(1)) == len(kd[0][1]):
            o_pos = m.group(1).find("o")
            k = _nelem(kd[0][1]) // max(kd[0][1][o_pos], 1) if o_pos >= 0 else _nelem(kd[0][1])
            return 2.0 * n_out * k
    return float("nan")


# -- the process's compiled computations -------------------------------------------------------

def module_id(hlo_module) -> int | None:
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


def _live_executables():
    """(first HLO module, executable) of every live compiled executable of the process's backends."""
    try:
        from jax._src import xla_bridge

        backends = xla_bridge.backends()
    except Exception:
        return
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
            if mods:
                yield mods[0], e


def executables(names: set[str]) -> dict[tuple[str, int | None], object]:
    """Live compiled executables of the process by (module name, module id); each is also listed
    under (module name, None) for a trace that gives no ``program_id``."""
    out = {}
    for mod, e in _live_executables():
        if mod.name in names:
            out[(mod.name, module_id(mod))] = e
            out.setdefault((mod.name, None), e)
    return out


def hlo_text_and_flops(exe) -> tuple[str, float]:
    """An executable's optimized HLO text and XLA's flops estimate ('' and 0.0 when unavailable)."""
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
    return text, flops


def _plain(name: str) -> str:
    """A computation name as both JAX's compile events (``jit(<lambda>)``) and the HLO module
    (``jit__lambda``) can be compared."""
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")


def newest_executable(module: str):
    """The most recently compiled live executable whose HLO module is named ``module`` (None when
    the backend does not list its executables)."""
    module = _plain(module)
    found = None
    for mod, e in _live_executables():
        if _plain(mod.name) == module:
            found = e
    return found
