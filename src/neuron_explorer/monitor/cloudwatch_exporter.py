"""``neuron-monitor-cloudwatch.py``: publish neuron-monitor's JSON stream to Amazon CloudWatch.

Metric names and dimensions are those of the Prometheus companion.  Each
report contributes only the groups collected since the previous one; counter
metrics carry the count for that period (CloudWatch sums them per statistic
period itself).  Datapoints are sent in PutMetricData batches that respect
the service's per-request limits on datum count and payload size.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from typing import Any, Iterable, Sequence, TextIO, cast

from neuron_explorer import __version__
from neuron_explorer.monitor.metrics import ReportTracker, Sample, consume_reports
from neuron_explorer.util.cliargs import add_version, complete, missing_extra
from neuron_explorer.util.log import LineLogger, get_logger

#: PutMetricData accepts at most this many MetricDatum items per request.
MAX_DATUMS_PER_REQUEST = 1000
#: ... and this many bytes of request payload; keep a safety margin for encoding overhead.
MAX_PAYLOAD_BYTES = 1_000_000
_PAYLOAD_BUDGET = int(MAX_PAYLOAD_BYTES * 0.6)
#: ... and this many dimensions per metric.
MAX_DIMENSIONS = 30

_UNITS = {"Bytes": "Bytes", "Count": "Count", "Seconds": "Seconds", "None": "None"}
#: CloudWatch refuses a whole PutMetricData request for one value of magnitude outside 2^-360..2^360.
_MAX_MAGNITUDE = 2.0 ** 360
_MIN_MAGNITUDE = 2.0 ** -360


def accepted_value(v: float) -> bool:
    """Whether CloudWatch accepts ``v`` (0, or a finite magnitude inside its range)."""
    return v == 0 or _MIN_MAGNITUDE <= abs(v) <= _MAX_MAGNITUDE


def to_datum(sample: Sample, timestamp: _dt.datetime) -> dict[str, Any]:
    """A PutMetricData MetricDatum; empty label values are left out (CloudWatch rejects them)."""
    dims = [{"Name": k, "Value": v[:1024]} for k, v in sample.labels.items() if v][:MAX_DIMENSIONS]
    return {
        "MetricName": sample.name,
        "Dimensions": dims,
        "Timestamp": timestamp,
        "Value": sample.value,
        "Unit": _UNITS.get(sample.definition.unit, "None"),
    }


def batches(datums: list[dict[str, Any]], max_datums: int = MAX_DATUMS_PER_REQUEST) -> Iterable[list[dict[str, Any]]]:
    """Split datums into requests within the count and (estimated) payload limits."""
    batch: list[dict[str, Any]] = []
    size = 0
    for d in datums:
        est = len(json.dumps(d, default=str)) * 2  # form/CBOR encoding overhead, generously
        if batch and (len(batch) >= max_datums or size + est > _PAYLOAD_BUDGET):
            yield batch
            batch, size = [], 0
        batch.append(d)
        size += est
    if batch:
        yield batch


class CloudWatchPublisher:
    """Turns reports into PutMetricData calls."""

    def __init__(self, client: Any, namespace: str, max_datums: int = MAX_DATUMS_PER_REQUEST,
                 err: TextIO | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.max_datums = max(1, min(max_datums, MAX_DATUMS_PER_REQUEST))
        self.tracker = ReportTracker()
        self.err = err or cast(TextIO, LineLogger(__name__))  # (the neuron_explorer logger tree)
        self.requests = 0
        self.datums_sent = 0
        self.failures = 0

    def publish(self, report: dict[str, Any]) -> int:
        """Send the fresh samples of one report; returns how many datums were accepted."""
        now = _dt.datetime.now(_dt.timezone.utc)
        fresh = [s for s in self.tracker.samples(report) if s.fresh]
        datums = [to_datum(s, now) for s in fresh if accepted_value(s.value)]
        if len(datums) < len(fresh):
            print(f"neuron-monitor-cloudwatch: {len(fresh) - len(datums)} value(s) outside CloudWatch's range "
                  "(magnitude 2^-360 to 2^360) left out of this report", file=self.err, flush=True)
        sent = 0
        for batch in batches(datums, self.max_datums):
            try:
                self.client.put_metric_data(Namespace=self.namespace, MetricData=batch)
            except Exception as exc:  # noqa: BLE001 - keep streaming; the next period may succeed
                self.failures += 1
                why = " ".join(str(exc).split())  # one line, even when the service answers with a page
                print(f"neuron-monitor-cloudwatch: PutMetricData failed ({len(batch)} datums): "
                      f"{why[:300]}{'...' if len(why) > 300 else ''}", file=self.err, flush=True)
                continue
            self.requests += 1
            sent += len(batch)
        self.datums_sent += sent
        return sent


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neuron-monitor-cloudwatch.py",
        description="Read neuron-monitor's JSON reports on stdin and publish them as CloudWatch metrics.",
        epilog=(
            "examples:\n"
            "  neuron-monitor | neuron-monitor-cloudwatch.py --namespace neuron_monitor --region us-west-2\n"
            "  neuron-monitor | neuron-monitor-cloudwatch.py --namespace test --region us-east-1 \\\n"
            "      --endpoint-url http://127.0.0.1:5000\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(p, "neuron-monitor-cloudwatch.py", __version__)
    p.add_argument("--namespace", required=True, help="CloudWatch namespace for the metrics")
    p.add_argument("--region", required=True, help="AWS region, e.g. us-west-2")
    p.add_argument("--endpoint-url", help="CloudWatch endpoint (a local test server, a VPC endpoint)")
    p.add_argument("--max-datums", type=int, default=MAX_DATUMS_PER_REQUEST,
                   help=f"datums per PutMetricData request (1..{MAX_DATUMS_PER_REQUEST}, "
                        f"default {MAX_DATUMS_PER_REQUEST})")
    return p


def consume(stream: Iterable[str], publisher: CloudWatchPublisher) -> int:
    """Publish every report line of ``stream``; returns the number of lines skipped as invalid."""
    return consume_reports(stream, publisher.publish, "neuron-monitor-cloudwatch", publisher.err)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``neuron-monitor-cloudwatch.py``; runs until stdin ends."""
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    why = missing_extra("monitor", ("boto3",), "neuron-monitor-cloudwatch.py")
    if why is not None:
        get_logger(__name__).error(f"neuron-monitor-cloudwatch.py: error: {why}")
        return 2
    import boto3

    client = boto3.client("cloudwatch", region_name=args.region, endpoint_url=args.endpoint_url)
    publisher = CloudWatchPublisher(client, args.namespace, args.max_datums)
    try:
        consume(sys.stdin, publisher)
    except KeyboardInterrupt:
        pass
    return 1 if publisher.failures and not publisher.requests else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
