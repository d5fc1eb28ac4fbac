"""Capture configuration: the spec's environment variables, parsed and validated once at start-up.

Every parser raises ``ConfigError`` whose message names the variable, the offending value and the
accepted forms, so a typo fails the launch instead of silently capturing the wrong thing.
"""

from __future__ import annotations

import os
from typing import Mapping

from neuron_explorer.contracts import events as ev
from neuron_explorer.util.ranges import IndexRanges


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message is meant for the user."""


ENABLE = "NEURON_RT_INSPECT_ENABLE"
OUTPUT_DIR = "NEURON_RT_INSPECT_OUTPUT_DIR"
SYSTEM_PROFILE = "NEURON_RT_INSPECT_SYSTEM_PROFILE"
DEVICE_PROFILE = "NEURON_RT_INSPECT_DEVICE_PROFILE"
MAX_EVENTS = "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC"
FILTER_NC = "NEURON_RT_INSPECT_EVENT_FILTER_NC"
FILTER_TYPE = "NEURON_RT_INSPECT_EVENT_FILTER_TYPE"
CPU_UTIL = "NEURON_RT_INSPECT_CPU_UTIL"
HOST_MEMORY = "NEURON_RT_INSPECT_HOST_MEMORY"
ON_FAIL = "NEURON_RT_INSPECT_ON_FAIL"
PROCESS_TAG = "NEURON_PROCESS_TAG"
INSTANCE_ID = "NEURON_EXPLORER_INSTANCE_ID"
FLUSH_PERIOD = "NEURON_EXPLORER_FLUSH_PERIOD_MS"
SAMPLE_PERIOD = "NEURON_EXPLORER_SAMPLE_PERIOD_MS"
# the device-memory source reads gradients at least this often (ms, 1000) even between fewer
# than 16 steps: benches under valgrind stretch it (a step there takes ~1 s of wall time)
GRAD_SNAPSHOT_MAX = "NEURON_EXPLORER_GRAD_SNAPSHOT_MAX_MS"
NAN_CHECK = "NEURON_EXPLORER_NAN_CHECK"
# eager PyTorch executions (root modules, their backward, optimizer steps); default on
EAGER = "NEURON_EXPLORER_EAGER"
# torch.profiler.record_function regions as framework events; default on
FRAMEWORK_REGIONS = "NEURON_EXPLORER_FRAMEWORK_REGIONS"
FINAL_WRITE_TIMEOUT = "NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS"
# where the torch-ABI extension (integrations/torch/native.py) is built and looked for; "0": never used
EXT_CACHE = "NEURON_EXPLORER_EXT_CACHE"
# "0": the collectives' kernels in Python, not in C++ (that extension; default on): decision 0223
CPP_KERNELS = "NEURON_EXPLORER_CPP_KERNELS"
MAX_SAMPLES = "NEURON_EXPLORER_MAX_SAMPLES"
QUIET = "NEURON_EXPLORER_QUIET"
PROGRESS_DELAY = "NEURON_EXPLORER_PROGRESS_DELAY_S"  # view: seconds before a progress bar shows (1)
PARQUET_WRITER = "NEURON_EXPLORER_PARQUET_WRITER"  # view: "own" (default) or "arrow" for SystemProfileEvents
DIFF_ITEMS = "NEURON_EXPLORER_DIFF_ITEMS"  # view: "1" writes SystemProfileDiffItems (decision 0164)
NDET_FLUSH_USEC = "NEURON_RT_DBG_NDET_FLUSH_USEC"
NDET_LOG_LOCATION = "NEURON_RT_DBG_NDET_LOG_LOCATION"
NDET_NUM_ENTRIES = "NEURON_RT_DBG_NDET_NUM_ENTRIES"
SOURCE_DEBUG_VARS = ("XLA_IR_DEBUG", "XLA_HLO_DEBUG", "NEURON_FRAMEWORK_DEBUG")
# What launchers put in every rank's environment that names their job: torch.distributed's env://
# rendezvous and torchrun's run id and restart count, Slurm's job and step, PMIx's namespace (Open
# MPI, mpirun), JAX's coordinator.  The capture records them in trace_info.pb's ``job`` map when it
# writes the file (a program may set MASTER_ADDR itself before init_process_group); view tells one
# job's collectives from another's by them (analysis.jobs).
JOB_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                 "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_CLUSTER_NAME", "PMIX_NAMESPACE", "OMPI_MCA_orte_jobid",
                 "JAX_COORDINATOR_ADDRESS")
JOB_VALUE_MAX = 256  # characters of a value recorded (an environment value is not trusted to be short)


def job_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``JOB_VARIABLES`` set in ``env`` (default: this process's environment), each value cut
    to ``JOB_VALUE_MAX`` characters."""
    env = os.environ if env is None else env
    return {k: env[k][:JOB_VALUE_MAX] for k in JOB_VARIABLES if env.get(k)}

DEFAULT_MAX_EVENTS = 1_000_000
# Events kept per core, at most: far beyond any memory (~70 TB of rows), and far below where sizes
# in bytes overflow 64 bits.  Rings are never allocated from this number: they grow by doubling.
MAX_EVENTS_LIMIT = 10**12
DEVICE_PROFILE_MODES = {"0": None, "1": "model", "model": "model", "session": "session"}


def parse_bool(var: str, value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{var}={value!r} is not valid; accepted: 0 or 1")


def parse_flag_leniently(var: str, value: str | None, warnings: list[str]) -> bool:
    """A variable that is not ours to police (another tool reads it too): a value other than a
    boolean is off, with a warning, and never stops the program."""
    try:
        return parse_bool(var, value, False)
    except ConfigError:
        warnings.append(f"{var}={value!r} is not 0 or 1; neuron-explorer takes it as off")
        return False


def parse_positive_int(var: str, value: str | None, default: int) -> int:
    if value is None or value.strip() == "":
        return default
    try:
        n = int(value.strip().replace(",", "").replace("_", ""))
    except ValueError:
        n = -1
    if n <= 0:
        raise ConfigError(f"{var}={value!r} is not valid; accepted: a whole number greater than 0, e.g. 1000000")
    return n


def parse_max_events(var: str, value: str | None, default: int = DEFAULT_MAX_EVENTS) -> int:
    """Events kept per core: a whole number from 1 to MAX_EVENTS_LIMIT."""
    n = parse_positive_int(var, value, default)
    if n > MAX_EVENTS_LIMIT:
        raise ConfigError(f"{var}={value!r} is not valid (too large); accepted: a whole number from 1 to "
                          f"{MAX_EVENTS_LIMIT:,}, e.g. 1000000")
    return n


def parse_nc_filter(value: str | None, var: str = FILTER_NC) -> IndexRanges | None:
    """Parse ``0``, ``0,2,4``, ``0-3`` or mixes such as ``0,1,2-5``; None/empty means every core.

    The result keeps ranges as ranges (``IndexRanges``): its memory does not depend on the numbers."""
    if value is None or value.strip() == "":
        return None
    try:
        return IndexRanges.parse(value)
    except ValueError as e:
        raise ConfigError(
            f"{var}={value!r} is not valid (bad part {str(e)!r}); accepted: a core index (0), "
            "a comma-separated list (0,2,4), an ascending range (0-3), or a mix (0,1,2-5)"
        ) from None


def parse_type_filter(value: str | None, var: str = FILTER_TYPE) -> frozenset[str] | None:
    """Parse the event-type filter; returns the enabled type names, or None for all.

    Items are event names, the groups ``hardware``/``software``, and ``^name`` exclusions.  When
    only exclusions are given they apply to every type.
    """
    if value is None or value.strip() == "":
        return None
    include: set[str] = set()
    exclude: set[str] = set()
    saw_include = False
    for part in value.split(","):
        p = part.strip()
        neg = p.startswith("^")
        name = p[1:].strip() if neg else p
        if name in ev.GROUPS:
            names = set(ev.GROUPS[name])
        elif name in ev.BY_NAME or name in ev.ALIASES:
            names = {ev.ALIASES.get(name, name)}
        else:
            accepted = ", ".join(sorted(list(ev.BY_NAME) + list(ev.ALIASES)))
            raise ConfigError(
                f"{var}={value!r} is not valid (unknown event type {name!r}); accepted: comma-separated "
                f"'hardware', 'software', event names, and '^name' exclusions; event names: {accepted}"
            )
        if neg:
            exclude |= names
        else:
            saw_include = True
            include |= names
    base = include if saw_include else set(ev.BY_NAME)
    return frozenset(base - exclude)


def named_types(value: str | None) -> list[str]:
    """The event names a type filter names itself (not through a group, not excluded): what a
    warning about types that cannot be recorded looks at.  Assumes ``parse_type_filter`` accepted it."""
    if not value:
        return []
    return [p.strip() for p in value.split(",")
            if p.strip() and not p.strip().startswith("^") and p.strip() not in ev.GROUPS]


def parse_device_profile(value: str | None) -> str | None:
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if v not in DEVICE_PROFILE_MODES:
        raise ConfigError(f"{DEVICE_PROFILE}={value!r} is not valid; accepted: 0, 1, model, session")
    return DEVICE_PROFILE_MODES[v]


def capture_requested(env: Mapping[str, str] | None = None) -> bool:
    """NEURON_RT_INSPECT_ENABLE as a boolean; any other value raises ConfigError (the .pth hook's
    check is only a cheap pre-filter: it lets 'banana' through to here)."""
    env = os.environ if env is None else env
    return parse_bool(ENABLE, env.get(ENABLE), False)


def quiet(env: Mapping[str, str] | None = None) -> bool:
    """NEURON_EXPLORER_QUIET: leave out the "profile written to" line (any value but empty or 0)."""
    env = os.environ if env is None else env
    return env.get(QUIET, "") not in ("", "0")


def progress_delay(env: Mapping[str, str] | None = None) -> float:
    """NEURON_EXPLORER_PROGRESS_DELAY_S: how long ``view`` runs before its progress bar shows on a
    terminal (default 1 s: a quick run prints no bar); a number of seconds from 0 to 3600."""
    env = os.environ if env is None else env
    raw = env.get(PROGRESS_DELAY, "").strip()
    if not raw:
        return 1.0
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 3600.0:
        raise ConfigError(f"{PROGRESS_DELAY}={raw!r} is not valid; accepted: seconds from 0 to 3600, e.g. 1")
    return v


# object storage (view -d/--output-file s3://, check -d s3://, neuron-det --log-prefix s3://): the AWS
# SDKs' own variables, read here so that every command resolves the endpoint the same way
AWS_ENDPOINT_URL_S3 = "AWS_ENDPOINT_URL_S3"
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"


def s3_endpoint(flag: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint: ``--endpoint-url``, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else
    None (AWS itself).  Only http:// and https:// URLs are accepted."""
    env = os.environ if env is None else env
    for name, value in (("--endpoint-url", flag), (AWS_ENDPOINT_URL_S3, env.get(AWS_ENDPOINT_URL_S3)),
                        (AWS_ENDPOINT_URL, env.get(AWS_ENDPOINT_URL))):
        if value:
            if not value.startswith(("http://", "https://")) or len(value) > 2048 or any(c.isspace() for c in value):
                raise ConfigError(f"{name}={value[:200]!r} is not valid; accepted: http://HOST:PORT or https://HOST")
            return value.rstrip("/")
    return None


def ndet_requested(env: Mapping[str, str] | None = None) -> bool:
    """NDET is on when its flush period is a non-zero number (validated by the recorder)."""
    env = os.environ if env is None else env
    return env.get(NDET_FLUSH_USEC, "0").strip() not in ("", "0")


DEFAULT_NUM_ENTRIES = 20000


MAX_NUM_ENTRIES = 1 << 40  # a bound on the setting, not an allocation


DEFAULT_LOG_LOCATION = "/tmp"


def parse_ndet_flush_usec(value: str | None) -> int:
    raw = (value or "").strip()
    try:
        n = int(raw.replace("_", "").replace(",", "")) if raw else 0
    except ValueError:
        n = -1
    if n <= 0:
        raise ConfigError(
            f"{NDET_FLUSH_USEC}={value!r} is not valid; accepted: a whole number of microseconds greater "
            "than 0 (the flush period, e.g. 5000000), or 0 / unset to turn NDET off"
        )
    return n


def parse_ndet_num_entries(value: str | None) -> int:
    raw = (value or "").strip()
    if not raw:
        return DEFAULT_NUM_ENTRIES
    try:
        n = int(raw.replace("_", "").replace(",", ""))
    except ValueError:
        n = -1
    if n <= 0 or n > MAX_NUM_ENTRIES:
        raise ConfigError(
            f"{NDET_NUM_ENTRIES}={value!r} is not valid; accepted: a whole number of events from 1 to "
            f"{MAX_NUM_ENTRIES} (default {DEFAULT_NUM_ENTRIES})"
        )
    return n


def parse_ndet_log_location(value: str | None) -> str:
    path = (value or "").strip() or DEFAULT_LOG_LOCATION
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.exists(path) else "is not a directory"
        raise ConfigError(
            f"{NDET_LOG_LOCATION}={value!r} is not valid ({what}); accepted: the path of an existing, "
            f"writable directory (default {DEFAULT_LOG_LOCATION})"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{NDET_LOG_LOCATION}={value!r} is not valid (not writable); accepted: the path of an existing, "
            f"writable directory (default {DEFAULT_LOG_LOCATION})"
        )
    return os.path.abspath(path)


def parquet_writer(env: Mapping[str, str] | None = None) -> str:
    """NEURON_EXPLORER_PARQUET_WRITER: which writer ``view`` uses for ``SystemProfileEvents``:
    "own" (the default; docs/decisions/0040-own-parquet-encoder.md) or "arrow" (Arrow's writer, as
    before; also used when the C encoders are not built).  Same columns and values either way."""
    env = os.environ if env is None else env
    raw = env.get(PARQUET_WRITER, "").strip().lower()
    if raw in ("", "own"):
        return "own"
    if raw == "arrow":
        return "arrow"
    raise ConfigError(f"{PARQUET_WRITER}={env.get(PARQUET_WRITER)!r} is not valid; accepted: own, arrow")


def diff_items(env: Mapping[str, str] | None = None) -> bool:
    """NEURON_EXPLORER_DIFF_ITEMS: whether ``view`` writes each events file's diff items beside it
    (``SystemProfileDiffItems``, read by ``neuron-explorer diff`` instead of the events).  Off by
    default: they cost ``view`` as much as a diff's reading of that side (decision 0164)."""
    env = os.environ if env is None else env
    raw = env.get(DIFF_ITEMS, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ConfigError(f"{DIFF_ITEMS}={env.get(DIFF_ITEMS)!r} is not valid; accepted: 0, 1")
