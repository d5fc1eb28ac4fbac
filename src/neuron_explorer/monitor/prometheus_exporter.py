"""``neuron-monitor-prometheus.py``: serve neuron-monitor's JSON stream as Prometheus metrics.

The exporter reads reports from stdin and keeps only the latest state in
memory.  The state is a prometheus_client collector (so it can be registered
in any registry), but the HTTP endpoint serves text exposition rendered by
this module once per report and cached: prometheus_client's generic
formatter needs about 17 us per sample, which for a node with 32 applications
(~1100 series) would put a scrape near 20 ms; a cached body makes a scrape a
memory copy whatever the series count.
"""

from __future__ import annotations

import argparse
import gzip
import math
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterable, Iterator, Sequence, TextIO

from neuron_explorer import __version__
from neuron_explorer.monitor.metrics import BASE_LABELS, METRICS, ReportTracker, Sample, consume_reports
from neuron_explorer.util.cliargs import add_version, complete, missing_extra, port_number
from neuron_explorer.util.log import get_logger

if __name__ == "__main__":  # `python -m` without the 'monitor' extra: one line, not a traceback
    _why = missing_extra("monitor", ("prometheus_client",), "neuron-monitor-prometheus.py")
    if _why is not None:
        get_logger(__name__).error(f"neuron-monitor-prometheus.py: error: {_why}")
        sys.exit(2)

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

DEFAULT_PORT = 8000
#: What ``render`` produces: the classic text format every Prometheus version understands.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ReportState(Collector):
    """Latest gauges and running counters built from the report stream; a prometheus_client collector."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracker = ReportTracker()
        # name -> {label values tuple: value}
        self._gauges: dict[str, dict[tuple[str, ...], float]] = {}
        self._counters: dict[str, dict[tuple[str, ...], float]] = {}
        self.reports = 0
        self._body: bytes | None = None

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
            self._body = None

    def render(self) -> bytes:
        """Text exposition format 0.0.4 of the current state, cached until the next report."""
        with self._lock:
            body = self._body
            if body is None:
                body = self._body = self._render_locked()
            return body

    def _render_locked(self) -> bytes:
        parts: list[str] = []
        for name, d in METRICS.items():
            parts.append(f"# HELP {name} {d.help}\n# TYPE {name} {d.kind}\n")
            series = (self._counters if d.kind == "counter" else self._gauges).get(name)
            if not series:
                continue
            names = BASE_LABELS + d.labels
            for key, v in series.items():
                labels = ",".join(f'{k}="{_escape(val)}"' for k, val in zip(names, key))
                parts.append(f"{name}{{{labels}}} {_fmt(v)}\n")
        return "".join(parts).encode()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            gauges = {k: dict(v) for k, v in self._gauges.items()}
            counters = {k: dict(v) for k, v in self._counters.items()}
        for name, d in METRICS.items():
            labels = list(BASE_LABELS + d.labels)
            fam: CounterMetricFamily | GaugeMetricFamily
            if d.kind == "counter":
                fam = CounterMetricFamily(name, d.help, labels=labels)
                for key, v in counters.get(name, {}).items():
                    fam.add_metric(list(key), v)
            else:
                fam = GaugeMetricFamily(name, d.help, labels=labels)
                for key, v in gauges.get(name, {}).items():
                    fam.add_metric(list(key), v)
            yield fam


def _escape(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class _Handler(BaseHTTPRequestHandler):
    state: ReportState  # set on the subclass made by serve()
    timeout = 30  # a connection that sends nothing is closed (it holds only its own thread meanwhile)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.split("?", 1)[0] not in ("/", "/metrics"):
            self.send_error(404, "only /metrics is served")
            return
        body = self.state.render()
        headers = {"Content-Type": CONTENT_TYPE}
        if "gzip" in (self.headers.get("Accept-Encoding") or "") and len(body) > 4096:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


#: Seconds a client gets to complete the TLS handshake.
HANDSHAKE_TIMEOUT_S = 10.0


class _MetricsServer(ThreadingHTTPServer):
    """One thread per connection; with TLS the handshake happens in that thread, under a timeout.

    Wrapping the listening socket instead would run every handshake inside ``accept`` on the serving
    thread: one client that connects and sends nothing would stall every scrape behind it."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address) -> None:  # runs in the connection's thread
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            conn = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError):  # timeout, not TLS, bad certificate, reset: this client only
            return
        try:
            super().finish_request(conn, client_address)  # (the handler, on the TLS connection)
        finally:
            conn.close()


def serve(state: ReportState, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          certfile: str | None = None, keyfile: str | None = None) -> ThreadingHTTPServer:
    """Serve ``state`` on ``/metrics`` from a daemon thread (HTTPS when a certificate is given)."""
    handler = type("MetricsHandler", (_Handler,), {"state": state})
    ctx = None
    if certfile:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(certfile, keyfile)
    server = _MetricsServer((host, port), handler)
    server.tls = ctx
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def consume(stream: Iterable[str], state: ReportState, err: TextIO | None = None) -> int:
    """Feed every JSON line of ``stream`` into ``state``; returns the number of bad lines."""
    return consume_reports(stream, state.update, "neuron-monitor-prometheus", err)



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
    add_version(p, "neuron-monitor-prometheus.py", __version__)
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--cert-file", help="PEM certificate: serve HTTPS (needs --key-file)")
    p.add_argument("--key-file", help="PEM private key for --cert-file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``neuron-monitor-prometheus.py``; exits when stdin ends (the monitor stopped)."""
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    if bool(args.cert_file) != bool(args.key_file):
        parser.error("--cert-file and --key-file must be given together")
    state = ReportState()
    try:
        server = serve(state, args.host, args.port, args.cert_file, args.key_file)
    except (OSError, ssl.SSLError, OverflowError) as exc:
        get_logger(__name__).error(f"neuron-monitor-prometheus: cannot serve on {args.host}:{args.port}: {exc}")
        return 1
    scheme = "https" if args.cert_file else "http"
    get_logger(__name__).info(f"neuron-monitor-prometheus: serving {scheme}://{args.host}:{args.port}/metrics")
    try:
        consume(sys.stdin, state)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
