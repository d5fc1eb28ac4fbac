"""``neuron-monitor-prometheus.py``: serve neuron-monitor's JSON stream as Prometheus metrics.

The exporter reads reports from stdin and keeps only the latest state in
memory; a scrape renders that state through a custom collector, so scrape
cost depends on the number of series, never on how many reports arrived.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Iterable, Iterator, Sequence, TextIO

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from neuron_explorer.monitor.metrics import BASE_LABELS, METRICS, ReportTracker, Sample

DEFAULT_PORT = 8000


class ReportState(Collector):
    """Latest gauges and running counters built from the report stream; a prometheus_client collector."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracker = ReportTracker()
        # name -> {label values tuple: value}
        self._gauges: dict[str, dict[tuple[str, ...], float]] = {}
        self._counters: dict[str, dict[tuple[str, ...], float]] = {}
        self.reports = 0

    @staticmethod
    def _key(s: Sample) -> tuple[str, ...]:
        return tuple(s.labels.get(k, "") for k in BASE_LABELS + s.definition.labels)

    def update(self, report: dict) -> None:
        """Fold one report in: gauges take the new values, counters add fresh increments."""
        samples = self._tracker.samples(report)
        gauges: dict[str, dict[tuple[str, ...], float]] = {}
        counters: dict[str, dict[tuple[str, ...], float]] = {}
        with self._lock:
            for s in samples:
                key = self._key(s)
                if s.definition.kind == "counter":
                    # applications sharing a tag share a series: their increments add up
                    cur = counters.setdefault(s.name, {})
                    if key not in cur:
                        cur[key] = self._counters.get(s.name, {}).get(key, 0.0)
                    if s.fresh:
                        cur[key] += s.value
                else:
                    gauges.setdefault(s.name, {})[key] = s.value
            # series of applications that left disappear with them
            self._gauges, self._counters = gauges, counters
            self.reports += 1

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            gauges = {k: dict(v) for k, v in self._gauges.items()}
            counters = {k: dict(v) for k, v in self._counters.items()}
        for name, d in METRICS.items():
            labels = list(BASE_LABELS + d.labels)
            if d.kind == "counter":
                fam: Metric = CounterMetricFamily(name, d.help, labels=labels)
                for key, v in counters.get(name, {}).items():
                    fam.add_metric(list(key), v)
            else:
                fam = GaugeMetricFamily(name, d.help, labels=labels)
                for key, v in gauges.get(name, {}).items():
                    fam.add_metric(list(key), v)
            yield fam


def consume(stream: Iterable[str], state: ReportState, err: TextIO = sys.stderr) -> int:
    """Feed every JSON line of ``stream`` into ``state``; returns the number of bad lines."""
    bad = 0
    for line in stream:
        line = line.strip()
        if not line:
            continue
        try:
            report = json.loads(line)
            if not isinstance(report, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            bad += 1
            print(f"neuron-monitor-prometheus: skipping a line that is not a neuron-monitor report ({exc})", file=err, flush=True)
            continue
        state.update(report)
    return bad


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neuron-monitor-prometheus.py",
        description="Read neuron-monitor's JSON reports on stdin and serve them for Prometheus to scrape.",
        epilog=(
            "examples:\n"
            "  neuron-monitor | neuron-monitor-prometheus.py --port 8000\n"
            "  neuron-monitor | neuron-monitor-prometheus.py --host 0.0.0.0 --cert-file tls.crt --key-file tls.key\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--cert-file", help="PEM certificate: serve HTTPS (needs --key-file)")
    p.add_argument("--key-file", help="PEM private key for --cert-file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``neuron-monitor-prometheus.py``; exits when stdin ends (the monitor stopped)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.cert_file) != bool(args.key_file):
        parser.error("--cert-file and --key-file must be given together")
    state = ReportState()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(state)
    try:
        server, _thread = start_http_server(
            args.port, addr=args.host, registry=registry, certfile=args.cert_file, keyfile=args.key_file
        )
    except OSError as exc:
        print(f"neuron-monitor-prometheus: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    scheme = "https" if args.cert_file else "http"
    print(f"neuron-monitor-prometheus: serving {scheme}://{args.host}:{args.port}/metrics", file=sys.stderr, flush=True)
    try:
        consume(sys.stdin, state)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
