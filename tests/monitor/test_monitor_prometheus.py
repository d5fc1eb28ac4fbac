"""The Prometheus companion: metric names and labels, counters, TLS, and a real Prometheus scrape."""

import http.client
import json
import os
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from monitor_helpers import (
    FULL_RUNTIME_METRICS,
    FULL_SYSTEM_METRICS,
    Apps,
    bin_path,
    free_port,
    make_cert,
    write_config,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from neuron_explorer.monitor.metrics import BASE_LABELS, METRICS
from neuron_explorer.monitor.prometheus_exporter import ReportState, consume

PROMETHEUS = "/usr/bin/prometheus"
PERCENTILES = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")


def sample_report(completed: int, period: float, util: float = 42.0, tag: str = "train_a") -> dict:
    return {
        "neuron_runtime_data": [{
            "pid": 10, "address": "", "neuron_runtime_tag": tag, "error": "",
            "report": {
                "neuroncore_counters": {"period": period, "error": "",
                                        "neuroncores_in_use": {"0": {"neuroncore_utilization": util, "flops": 5}}},
                "execution_stats": {
                    "period": period, "error": "",
                    "error_summary": {"generic": 0, "numerical": 1, "transient": 0, "model": 0, "runtime": 0,
                                      "hardware": 0},
                    "execution_summary": {"completed": completed, "completed_with_err": 0, "completed_with_num_err": 1,
                                          "timed_out": 0, "incorrect_input": 0, "failed_to_queue": 0},
                    "latency_stats": {"total_latency": dict.fromkeys(PERCENTILES, 0.01), "device_latency": None},
                },
            },
        }],
        "system_data": {"memory_info": {"period": period, "error": "", "memory_total_bytes": 100,
                                        "memory_used_bytes": 40, "swap_total_bytes": 0, "swap_used_bytes": 0},
                        "neuron_hw_counters": {"period": period, "error": "", "neuron_devices": [
                            {"neuron_device_index": 0, "mem_ecc_corrected": 2, "mem_ecc_uncorrected": 0,
                             "sram_ecc_uncorrected": None, "sram_ecc_corrected": None}]}},
        "instance_info": {"instance_name": "host", "instance_id": "i-1", "instance_type": "trn1.2xlarge",
                          "instance_availability_zone": None, "instance_availability_zone_id": None,
                          "instance_region": "us-west-2", "ami_id": None, "subnet_id": None, "error": ""},
        "neuron_hardware_info": {"neuron_device_type": "cpu", "neuroncore_version": "x86_64", "neuron_device_count": 1,
                                 "neuron_device_memory_size": 100, "neuroncore_per_device_count": None, "error": ""},
    }


def _parse(text: str) -> dict:
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def scrape(state: ReportState) -> dict:
    """What the HTTP endpoint serves, parsed by prometheus_client's own parser."""
    return _parse(state.render().decode())


def test_served_text_matches_prometheus_client_exposition() -> None:
    state = ReportState()
    rep = sample_report(7, 1.0, tag='odd "tag"\\x')
    state.update(rep)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(state)
    ours = {(n, tuple(sorted(s.labels.items())), s.value) for n, ss in scrape(state).items() for s in ss}
    theirs = {(n, tuple(sorted(s.labels.items())), s.value)
              for n, ss in _parse(generate_latest(reg).decode()).items() for s in ss}
    assert ours == theirs and len(ours) > 20
    assert any(dict(lbl).get("runtime_tag") == 'odd "tag"\\x' for _, lbl, _ in ours)


def test_real_metric_names_and_labels() -> None:
    state = ReportState()
    state.update(sample_report(10, 1.0))
    m = scrape(state)
    (u,) = m["neuroncore_utilization_ratio"]
    assert u.value == pytest.approx(0.42)
    assert set(u.labels) == set(BASE_LABELS) | {"runtime_tag", "neuroncore"}
    assert u.labels["region"] == "us-west-2" and u.labels["instance_type"] == "trn1.2xlarge"
    status = {s.labels["status_type"]: s.value for s in m["execution_status_total"]}
    assert status["completed"] == 10 and status["completed_with_num_err"] == 1
    assert {s.labels["percentile"] for s in m["execution_latency_seconds"]} == set(PERCENTILES)
    ecc = {s.labels["event_type"]: s.value for s in m["hardware_ecc_events_total"]}
    assert ecc == {"mem_ecc_corrected": 2, "mem_ecc_uncorrected": 0}  # null counters are not exported
    assert m["system_memory_used_bytes"][0].value == 40
    assert m["instance_info"][0].labels["instance_id"] == "i-1"
    assert m["neuron_hardware_info"][0].labels["neuron_device_type"] == "cpu"
    for name in m:
        base = name[:-len("_total")] if name.endswith("_total") else name
        assert name in METRICS or base + "_total" in METRICS


def test_counters_add_each_collected_period_once() -> None:
    state = ReportState()
    r1 = sample_report(10, 1.0)
    state.update(r1)
    state.update(r1)  # same group repeated in a report where only other groups were due
    state.update(sample_report(5, 1.01))
    status = {s.labels["status_type"]: s.value for s in scrape(state)["execution_status_total"]}
    assert status["completed"] == 15
    state.update(sample_report(5, 1.02, tag="other"))  # train_a left: its series go away
    tags = {s.labels["runtime_tag"] for s in scrape(state)["execution_status_total"]}
    assert tags == {"other"}


def test_bad_lines_are_skipped(capsys: pytest.CaptureFixture) -> None:
    state = ReportState()
    bad = consume(["not json\n", "\n", json.dumps(sample_report(1, 1.0)) + "\n", "[1]\n"], state)
    assert bad == 2 and state.reports == 1


def _wait_http(url: str, context: ssl.SSLContext | None = None, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                return r.read().decode()
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_tls_with_key_and_cert(tmp_path: Path) -> None:
    key, cert = make_cert(tmp_path)
    port = free_port()
    p = subprocess.Popen([bin_path("neuron-monitor-prometheus.py"), "--port", str(port), "--cert-file", str(cert),
                          "--key-file", str(key)], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write(json.dumps(sample_report(3, 1.0)) + "\n")
        p.stdin.flush()
        ctx = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 20
        while True:
            body = _wait_http(f"https://127.0.0.1:{port}/metrics", ctx)
            if "neuroncore_utilization_ratio{" in body or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "neuroncore_utilization_ratio{" in body
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=5, context=ctx) as r:
            assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        with pytest.raises((OSError, http.client.HTTPException)):  # (URLError, a reset, a bad status line)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
    finally:
        p.stdin.close()
        p.wait(timeout=10)
    assert p.returncode == 0


def _prom_query(port: int, q: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    data = json.loads(_wait_http(url))
    assert data["status"] == "success"
    return data["data"]["result"]


@pytest.mark.slow
def test_real_prometheus_scrapes_the_companion(apps: Apps, stats_dir: Path, tmp_path: Path) -> None:
    if not os.path.exists(PROMETHEUS):
        pytest.skip(f"{PROMETHEUS} not installed (Debian package 'prometheus'; .ci/run installs it)")
    apps.start("train_prom", 60.0, "--numpy")
    apps.wait_ready()
    conf = write_config(tmp_path / "monitor.conf", {
        "period": "1s", "neuron_runtimes": [{"tag_filter": "^train_", "metrics": FULL_RUNTIME_METRICS}],
        "system_metrics": FULL_SYSTEM_METRICS})
    exp_port, prom_port = free_port(), free_port()
    mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE)
    exp = subprocess.Popen([bin_path("neuron-monitor-prometheus.py"), "--port", str(exp_port)], stdin=mon.stdout,
                           stderr=subprocess.DEVNULL)
    mon.stdout.close()
    prom_conf = tmp_path / "prometheus.yml"
    prom_conf.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: neuron-monitor\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exp_port}']\n"
    )
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={prom_conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        util = status = []
        while time.monotonic() < deadline:
            if prom.poll() is not None:
                pytest.fail(f"prometheus exited: {prom.stderr.read().decode()[-2000:]}")
            try:
                util = _prom_query(prom_port, 'neuroncore_utilization_ratio{runtime_tag="train_prom"}')
                status = _prom_query(prom_port,
                                     'execution_status_total{status_type="completed",runtime_tag="train_prom"}')
            except OSError:
                util = status = []
            if util and status and float(status[0]["value"][1]) > 0 and float(util[0]["value"][1]) > 0:
                break
            time.sleep(0.5)
        assert util and float(util[0]["value"][1]) > 0, util
        assert util[0]["metric"]["neuroncore"] == "0" and util[0]["metric"]["job"] == "neuron-monitor"
        assert status and float(status[0]["value"][1]) > 0, status
        up = _prom_query(prom_port, 'up{job="neuron-monitor"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        for p in (prom, mon):
            p.terminate()
        for p in (prom, mon, exp):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
