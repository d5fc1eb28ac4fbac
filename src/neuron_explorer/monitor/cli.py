# PYTHON_ARGCOMPLETE_OK (shell completion: docs/commands.md)
"""``neuron-monitor``: stream JSON reports of running applications and the host to stdout."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from typing import Sequence

from neuron_explorer import __version__
from neuron_explorer.contracts.stats_files import STATS_DIR_ENV, default_stats_dir
from neuron_explorer.monitor.config import ConfigError, default_config, load_config
from neuron_explorer.monitor.monitor import Logger, Monitor
from neuron_explorer.util.cliargs import add_version, complete
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.stopflag import StopFlag

EPILOG = f"""\
examples:
  neuron-monitor                          all metric groups, every application, every 5 s
  neuron-monitor -c monitor.conf          groups, periods and tag filters from a JSON config
  neuron-monitor | neuron-monitor-prometheus.py --port 8000
  neuron-monitor | neuron-monitor-cloudwatch.py --namespace my_ns --region us-west-2

config example (monitor.conf):
  {{"period": "1s",
   "neuron_runtimes": [{{"tag_filter": "^train_",
                        "metrics": [{{"type": "neuroncore_counters"}}, {{"type": "execution_stats"}},
                                    {{"type": "memory_used"}}, {{"type": "neuron_runtime_vcpu_usage"}}]}}],
   "system_metrics": [{{"type": "vcpu_usage"}}, {{"type": "memory_info"}},
                      {{"type": "neuron_hw_counters", "period": "2s"}}]}}

Applications are found through the stats snapshots they publish in
{default_stats_dir()} (override with {STATS_DIR_ENV}); tag them with NEURON_PROCESS_TAG.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    p = argparse.ArgumentParser(
        prog="neuron-monitor",
        description="Collect metric groups from running applications and the system; print one JSON report per line.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(p, "neuron-monitor", __version__)
    p.add_argument("-c", "--config-file", metavar="CONFIG", help="path to a neuron-monitor JSON configuration file")
    p.add_argument(
        "--verbose", type=int, default=0, choices=range(0, 5), metavar="{0..4}",
        help="diagnostics on stderr: 0 none (default), 1 errors, 2 warnings, 3 info, 4 debug",
    )
    p.add_argument("--control-port", type=int, default=None, metavar="PORT",
                   help="relay `neuron-explorer attach` requests to this host's processes on PORT (off by default)")
    p.add_argument("--control-host", default="127.0.0.1", metavar="ADDR",
                   help="address the control endpoint listens on (default 127.0.0.1)")
    p.add_argument("--control-token-file", metavar="FILE",
                   help="the token callers must present (a file of this user, mode 600); required with --control-port")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neuron-monitor`` console script."""
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config_file) if args.config_file else default_config()
    except ConfigError as exc:
        get_logger(__name__).error(f"neuron-monitor: configuration error: {exc}")
        return 2
    for w in cfg.warnings():  # (whatever --verbose says: it is about the file the user wrote)
        get_logger(__name__).warning(f"neuron-monitor: warning: {args.config_file}: {w}")
    log = Logger(args.verbose)
    stop = StopFlag()  # not a threading.Event: its set() in a signal handler can hang (util/stopflag.py)

    def _stop(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    control = None
    if args.control_port is not None:
        from neuron_explorer.contracts import ondemand as od

        from .control import ControlServer

        try:
            if not args.control_token_file:
                raise od.RequestError("--control-port needs --control-token-file")
            control = ControlServer(args.control_host, args.control_port, od.read_token(args.control_token_file))
        except (OSError, od.RequestError, od.EndpointError) as exc:
            get_logger(__name__).warning(f"neuron-monitor: control endpoint: {exc}")
            return 2
        control.start()
        log(3, f"relaying attach requests on {args.control_host}:{control.port}")
    monitor = Monitor(cfg, log=log, exclude_pids=(os.getpid(),))
    # start-up objects (imports, config) never die: keep the cyclic GC from rescanning them every period
    gc.freeze()
    log(3, f"reading application stats from {monitor.stats_dir}")
    try:
        return monitor.run(sys.stdout, stop)
    except BrokenPipeError:
        return 0
    finally:
        if control is not None:
            control.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
