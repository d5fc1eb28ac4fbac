"""The CloudWatch companion against moto's CloudWatch server on 127.0.0.1."""

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
from monitor_helpers import FULL_RUNTIME_METRICS, FULL_SYSTEM_METRICS, Apps, bin_path, free_port, write_config

from neuron_explorer.monitor.cloudwatch_exporter import MAX_DATUMS_PER_REQUEST, batches

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture
def moto_endpoint(monkeypatch: pytest.MonkeyPatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                 "AWS_DEFAULT_REGION": "us-west-2"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_batches_respect_count_and_payload_limits() -> None:
    datums = [{"MetricName": f"m{i}", "Dimensions": [{"Name": "d", "Value": "x" * 200}], "Value": 1.0, "Unit": "Count"}
              for i in range(2500)]
    out = list(batches(datums))
    assert sum(len(b) for b in out) == 2500
    assert all(len(b) <= MAX_DATUMS_PER_REQUEST for b in out)
    assert all(len(json.dumps(b)) < 1_000_000 for b in out)
    assert [len(b) for b in batches(datums[:45], 20)] == [20, 20, 5]


@pytest.mark.slow
def test_companion_publishes_monitor_stream_to_cloudwatch(moto_endpoint: str, apps: Apps, stats_dir: Path,
                                                          tmp_path: Path) -> None:
    apps.start("train_cw", 60.0, "--numpy")
    apps.wait_ready()
    conf = write_config(tmp_path / "monitor.conf", {
        "period": "1s", "neuron_runtimes": [{"tag_filter": "^train_", "metrics": FULL_RUNTIME_METRICS}],
        "system_metrics": FULL_SYSTEM_METRICS})
    mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE, text=True)
    cw = subprocess.Popen([bin_path("neuron-monitor-cloudwatch.py"), "--namespace", "nx_test", "--region", "us-west-2",
                           "--endpoint-url", moto_endpoint, "--max-datums", "20"],
                          stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3):
            cw.stdin.write(mon.stdout.readline())
            cw.stdin.flush()
    finally:
        mon.terminate()
        mon.wait(timeout=10)
        cw.stdin.close()
        err = cw.stderr.read()
        cw.wait(timeout=30)
    assert cw.returncode == 0, err
    assert "failed" not in err

    client = boto3.client("cloudwatch", region_name="us-west-2", endpoint_url=moto_endpoint)
    names = set()
    for page in client.get_paginator("list_metrics").paginate(Namespace="nx_test"):
        names.update(m["MetricName"] for m in page["Metrics"])
    assert {"neuroncore_utilization_ratio", "execution_status_total", "execution_latency_seconds",
            "system_memory_used_bytes", "system_vcpu_usage_ratio", "neuron_runtime_memory_used_bytes"} <= names

    metrics = client.list_metrics(Namespace="nx_test", MetricName="execution_status_total")["Metrics"]
    completed = [m for m in metrics if {"Name": "status_type", "Value": "completed"} in m["Dimensions"]]
    assert completed and {"Name": "runtime_tag", "Value": "train_cw"} in completed[0]["Dimensions"]
    now = dt.datetime.now(dt.timezone.utc)
    stats = client.get_metric_statistics(
        Namespace="nx_test", MetricName="execution_status_total", Dimensions=completed[0]["Dimensions"],
        StartTime=now - dt.timedelta(minutes=10), EndTime=now + dt.timedelta(minutes=1), Period=60,
        Statistics=["Sum", "SampleCount"])
    assert sum(p["Sum"] for p in stats["Datapoints"]) > 0
    assert sum(p["SampleCount"] for p in stats["Datapoints"]) >= 2  # one datum per collected period
    util = client.list_metrics(Namespace="nx_test", MetricName="neuroncore_utilization_ratio")["Metrics"]
    s = client.get_metric_statistics(
        Namespace="nx_test", MetricName="neuroncore_utilization_ratio", Dimensions=util[0]["Dimensions"],
        StartTime=now - dt.timedelta(minutes=10), EndTime=now + dt.timedelta(minutes=1), Period=60,
        Statistics=["Maximum"])
    assert max(p["Maximum"] for p in s["Datapoints"]) > 0
