"""The matrix as data: the programs (tests/programs/), the settings they run under, and the cells
known to be broken (issue 29), each a line.

A new program is one ``Program`` line, a new setting one ``Setting`` line; the checks that apply
to a cell follow from the setting's fields (``checks.CHECKS``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

PROGRAMS_DIR = Path(__file__).resolve().parent.parent / "programs"


@dataclass(frozen=True)
class Program:
    """One program of the corpus and how it is launched."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    ranks: int = 0  # >0: launched by ``torchrun --nproc_per_node ranks``
    raises: bool = False  # dies of the user's own exception: its traceback is compared
    mask: str | None = None  # a regex for what may differ between runs in stdout (timings); best: print none
    # event types whose count depends on how the program's threads interleave (two threads' executions
    # on one core: where the graph switches), compared between two runs by presence only
    scheduled: tuple[str, ...] = ()
    timeout: float = 300.0
    # the settings it runs under (empty: every one a setting's ``programs`` allows)
    settings: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return PROGRAMS_DIR / self.script


@dataclass(frozen=True)
class Setting:
    """Environment variables a user sets (``{out}``, ``{ndet}``: the cell's directories) and
    whether a real neuron-monitor runs beside the program."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    monitor: bool = False
    # the programs it runs (empty: every one); a type filter needs only the programs whose events
    # span every kind of recording (eager and compiled graphs, collectives, threads, JAX)
    programs: tuple[str, ...] = ()

    def runs(self, program: "Program") -> bool:
        return ((not self.programs or program.name in self.programs)
                and (not program.settings or self.name in program.settings))

    @property
    def capture(self) -> bool:
        return self.env.get("NEURON_RT_INSPECT_ENABLE") == "1"

    @property
    def type_filter(self) -> str | None:
        return self.env.get("NEURON_RT_INSPECT_EVENT_FILTER_TYPE")

    @property
    def device(self) -> str | None:
        return self.env.get("NEURON_RT_INSPECT_DEVICE_PROFILE")

    @property
    def ndet(self) -> bool:
        return "NEURON_RT_DBG_NDET_FLUSH_USEC" in self.env


# the settings under which an eager model's structure (modules, autocast, a schedule) changes what is
# recorded: the capture by the C and the Python path, and every tool at once.  Nothing set, the
# untagged monitor's discovery and NDET alone take the same path for every single-process eager
# program, so they run on cnn (and on the programs whose processes differ) only (decision 0150).
_MODEL_SETTINGS = ("system", "all", "pure_python")

PROGRAMS = [
    Program("cnn", "cnn_adadelta.py"),
    # eager single-process models like cnn's: where the model's structure is recorded (decision 0150)
    Program("lstm", "lstm_lm.py", settings=_MODEL_SETTINGS),
    Program("transformer", "transformer_amp.py", settings=_MODEL_SETTINGS),
    Program("ddp", "ddp_sampler.py", ranks=2),
    Program("compiled_inductor", "compiled.py", ("inductor",)),
    # compiled_inductor stands for torch.compile under each tool alone (decision 0150)
    Program("compiled_aot_eager", "compiled.py", ("aot_eager",),
            settings=("system", "all", "all_model", "pure_python", "filter_hardware", "filter_software")),
    Program("own_profiler", "own_profiler.py"),
    Program("jax", "jax_train.py"),
    # the same program with no worker: the one JAX row whose discovery by an untagged monitor is
    # counted (jax's spawn worker is a documented limit); its other cells are jax's (decision 0150)
    Program("jax_in_process", "jax_train.py", ("--in-process",), settings=("monitor_untagged",)),
    Program("fork", "fork_child.py"),
    Program("threads", "threads.py", scheduled=("nrt_model_switch",)),
    Program("nan", "nan_diverge.py", settings=(*_MODEL_SETTINGS, "ndet")),  # NaN reports with and without capture
    Program("raise", "raise_in_forward.py", raises=True),
]

#: the one program whose every cell runs in the default (not slow) suite
DEFAULT_PROGRAM = "cnn"

_CAPTURE = {"NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_OUTPUT_DIR": "{out}"}
_NDET = {"NEURON_RT_DBG_NDET_FLUSH_USEC": "200000", "NEURON_RT_DBG_NDET_LOG_LOCATION": "{ndet}",
         "NEURON_EXPLORER_NAN_CHECK": "1"}
_TAG = {"NEURON_PROCESS_TAG": "matrix"}

# the programs whose events span every kind of recording (eager and compiled graphs, collectives,
# threads, JAX): what a type filter splits
_FILTERED = ("cnn", "ddp", "compiled_aot_eager", "threads", "jax")
# the programs whose graphs a device profile records differently (eager, Inductor, aot_eager, DDP,
# JAX, under the program's own torch.profiler)
_DEVICE = ("cnn", "ddp", "compiled_inductor", "compiled_aot_eager", "own_profiler", "jax")
# a device profile alone: on the default program, and on the program whose profile it changes (a
# documented limit); every _DEVICE program has each mode under all/all_model (decision 0150)
_DEVICE_ALONE = ("cnn", "own_profiler")
# 'hardware,^cc_exec' differs from 'hardware' only where there are collectives: ddp (and cnn, whose
# row runs whole in the default suite)
_FILTERED_CC = ("cnn", "ddp")

# A covering design (decision 0150): every program runs the capture (C and pure-Python paths) and
# all tools at once in each device mode it records differently; each tool alone where it takes a
# path of its own (nothing set, NDET without a capture, the monitor found by discovery) runs on
# every program whose processes differ (cnn stands for the single-process eager models).  A device
# profile alone and the type filters run where they record something different; the tagged
# monitor alone is part of ``all``/``all_model`` (decision 0087's amendment).
SETTINGS = [
    Setting("off"),
    Setting("system", _CAPTURE),
    Setting("device_model", {**_CAPTURE, "NEURON_RT_INSPECT_DEVICE_PROFILE": "model"}, programs=_DEVICE_ALONE),
    Setting("device_session", {**_CAPTURE, "NEURON_RT_INSPECT_DEVICE_PROFILE": "session"}, programs=_DEVICE_ALONE),
    Setting("ndet", _NDET),
    Setting("monitor_untagged", {}, monitor=True),  # nothing set: found by discovery alone
    Setting("all", {**_CAPTURE, "NEURON_RT_INSPECT_DEVICE_PROFILE": "session", **_NDET, **_TAG}, monitor=True),
    Setting("all_model", {**_CAPTURE, "NEURON_RT_INSPECT_DEVICE_PROFILE": "model", **_NDET, **_TAG}, monitor=True,
            programs=_DEVICE),
    Setting("filter_hardware", {**_CAPTURE, "NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "hardware"}, programs=_FILTERED),
    Setting("filter_software", {**_CAPTURE, "NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "software"}, programs=_FILTERED),
    Setting("filter_hardware_not_cc", {**_CAPTURE, "NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "hardware,^cc_exec"},
            programs=_FILTERED_CC),
    Setting("pure_python", {**_CAPTURE, "NEURON_EXPLORER_PURE_PYTHON": "1"}),
]

#: the unfiltered capture a filtered one is compared with
REFERENCE_SETTING = "system"


@dataclass(frozen=True)
class Known:
    """Cells expected to fail until an item of issue 29 is fixed (glob patterns over program,
    setting and check names). Marked ``xfail(strict=True)``: a fix makes them pass, and the
    unexpected pass tells the lead to delete the line.  ``item`` is the issue 29 item number, or a
    short tag for a problem found by the matrix beyond the issue's list."""

    programs: str
    settings: str
    checks: str
    item: int | str
    why: str
    strict: bool = True  # False only where the failure is a race that sometimes passes

    @property
    def reason(self) -> str:
        if isinstance(self.item, int):
            return f"issue 29 item {self.item}: {self.why}"
        return f"found by the matrix, not in issue 29 ({self.item}): {self.why}"

    def matches(self, program: str, setting: str, check: str) -> bool:
        """Each field is a space-separated list of glob patterns."""
        return all(any(fnmatchcase(v, p) for p in pats.split())
                   for v, pats in ((program, self.programs), (setting, self.settings), (check, self.checks)))


KNOWN: list[Known] = [
    Known("own_profiler", "device_* all all_model", "stdout", "own-profiler-device-profile",
          "documented limit (decision 0069): a device profile asked for while the program's own torch.profiler "
          "records is recorded by a dispatch mode, which that profiler sees (PythonDispatchMode and each op "
          "of the profiled executions twice); without a device profile the program's profile is unchanged"),
    Known("jax", "monitor_untagged", "monitor", "jax-late-start",
          "documented limit (decision 0076, docs/jax.md): with no variable set, JAX starts our runtime only at "
          "its backend's first use, so the spawn worker's jitted function, made before that and held in a "
          "local variable, is never counted (its first call is the one that starts the backend)"),
]


def known_failures(program: str, setting: str, check: str) -> list[Known]:
    return [k for k in KNOWN if k.matches(program, setting, check)]
