# PYTHON_ARGCOMPLETE_OK (shell completion: docs/commands.md)
"""The ``neuron-explorer`` (alias ``neuron-profile``) command line."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from neuron_explorer.util.cliargs import UsageError, complete, positive_int, prog_name
from neuron_explorer.util.log import get_logger

from . import __version__

EXAMPLES = """\
examples:
  neuron-explorer inspect -o ./inspect-output python train.py
  neuron-explorer inspect -o out -n 5 torchrun --nproc_per_node 2 train.py
  neuron-explorer view -d ./output                      # Parquet: system_profile_parquet/
  neuron-explorer view -d ./output --output-format summary-text
  neuron-explorer view --ui -d ./output                 # the System Trace Viewer (web UI)
  neuron-explorer view -d ./output --output-format summary-json --output-file summary.json
  neuron-explorer check -d ./output
  neuron-explorer attach --all --steps 5 -o ./on-demand   # a running job, on demand
  neuron-explorer diff ./before ./after --fail-if-slower 5   # did my change help? (docs/diff.md)
"""




def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog_name(),
        description="Capture and view system profiles of PyTorch and JAX workloads (Neuron Explorer command set).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--version", action="version", version=f"neuron-explorer {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{inspect,view,check,attach,diff}")

    ins = sub.add_parser(
        "inspect", help="run a command with system profiling on (no code changes)",
        description="Run USERSCRIPT with system profiling enabled in every Python process it starts "
                    "(torchrun children included) and write the profile to OUTPUT_DIR.",
        epilog="example:\n  neuron-explorer inspect -o ./inspect-output -n 100000 python train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ins.add_argument("-o", "--output-dir", default=".", help="output directory for inspection results (default: .)")
    ins.add_argument("-n", "--num-trace-events", type=positive_int, default=None,
                     help="maximum number of trace events per core before old ones are dropped")
    ins.add_argument("userscript", nargs=argparse.REMAINDER, help="command that launches the workload")

    from .view.cli import add_view_parser

    add_view_parser(sub)
    from .diff.cli import add_diff_parser

    add_diff_parser(sub)
    from .attach import add_attach_parser

    chk = sub.add_parser("check", help="check that a capture directory holds a usable profile",
                         description="Report the signs of a failed capture (empty directory, 0-byte NTFF, "
                                     "no NEFF, only .pb files, damaged files) and what to do.",
                         epilog="example:\n  neuron-explorer check -d ./profile_output",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    chk.add_argument("-d", "--directory", required=True, help="capture directory, or s3://bucket/prefix")
    chk.add_argument("--endpoint-url", default=None,
                     help="S3 endpoint for s3:// paths (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS)")
    add_attach_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    try:
        if args.command == "inspect":
            return inspect_command(args)
        if args.command == "check":
            from .view.check import check, render

            text, rc = render(check(args.directory, args.endpoint_url))
            sys.stdout.write(text)
            return rc
        if args.command == "diff":
            from .diff.cli import diff_command

            return diff_command(args)
        if args.command == "attach":
            from .attach import attach_command

            return attach_command(args)
        if args.command == "view":
            from .view.cli import view_command

            return view_command(args)
        parser.print_help()
        return 2
    except UsageError as e:
        get_logger(__name__).error(f"{parser.prog}: error: {e}")
        return 2


def inspect_command(args: argparse.Namespace) -> int:
    from neuron_explorer.contracts import env as cfgmod
    from neuron_explorer.runtime.config import CaptureConfig

    from .capture.sink import CaptureSink
    from .runtime.core import Runtime
    from .runtime.identity import ProcessIdentity

    cmd = list(args.userscript)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("inspect needs a command to run, e.g. 'neuron-explorer inspect -o out python train.py'")
    out = os.path.abspath(args.output_dir)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create output directory {out}: {e.strerror}") from None
    env = dict(os.environ)
    env[cfgmod.ENABLE] = "1"
    env[cfgmod.OUTPUT_DIR] = out
    if args.num_trace_events is not None:
        env[cfgmod.MAX_EVENTS] = str(args.num_trace_events)
    try:
        cfg = CaptureConfig.from_env(env)
    except cfgmod.ConfigError as e:
        raise UsageError(str(e)) from None
    before = _session_dirs(out)
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as e:
        raise UsageError(f"cannot run {cmd[0]!r}: {e.strerror}") from None

    # Sample the child's CPU and memory from here: a non-Python workload gets them too.
    base = ProcessIdentity.current()
    ident = ProcessIdentity(base.instance_id, base.hostname, child.pid, -1, 0, 1, 0,
                            env.get(cfgmod.PROCESS_TAG) or str(child.pid))
    rt = Runtime(cfg, ident)
    sink = CaptureSink(rt, sampler_pid=child.pid)
    rt.add_sink(sink)
    sink.sampler.start()

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = child.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sink.sampler.stop()
    new = sorted(_session_dirs(out) - before)
    if new:
        get_logger(__name__).info(f"neuron-explorer: {len(new)} profile(s) written under {out}")
    else:
        rt.end_reason = "exit" if rc == 0 else f"exit:{rc}"
        sink.end_reason = rt.end_reason
        sink.note = ("no runtime events were seen: the command ran no framework (torch, jax) in a Python "
                     "process with neuron-explorer installed (only CPU and memory samples were captured)")
        rt.flush(final=True, reason=rt.end_reason)
        get_logger(__name__).info(f"neuron-explorer: note: {sink.note}")
        get_logger(__name__).info(f"neuron-explorer: profile written to {sink.session_dir}")
    return rc if rc >= 0 else 128 - rc


def _session_dirs(root: str) -> set[str]:
    from neuron_explorer.analysis.reader import discover

    return set(discover(root)) if os.path.isdir(root) else set()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

