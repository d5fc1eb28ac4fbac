"""The Grafana dashboard, the DaemonSet and the container recipe are consistent with the exporter."""

import json
import re
from pathlib import Path

import pytest

from neuron_explorer.monitor.metrics import METRICS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "neuron-monitor-dashboard.json"
DAEMONSET = ROOT / "deploy" / "k8s" / "neuron-monitor-daemonset.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"

_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "by", "without", "rate", "increase", "irate", "and", "or", "unless",
    "on", "ignoring", "group_left", "group_right", "label_values", "topk", "bottomk", "offset",
}


def _metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that are not functions, keywords, labels or label values."""
    expr = re.sub(r'"[^"]*"', '""', expr)          # label values
    expr = re.sub(r"\{[^}]*\}", "{}", expr)         # label matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)        # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    return {w for w in _IDENT.findall(expr) if w not in _PROMQL_WORDS and not w.startswith("$")}


def _exported() -> set[str]:
    return set(METRICS)


def test_every_panel_queries_an_exported_metric() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    assert len(panels) >= 10
    seen: set[str] = set()
    for p in panels:
        assert p["datasource"]["type"] == "prometheus"
        assert p["targets"], p["title"]
        for t in p["targets"]:
            names = _metric_names(t["expr"])
            assert names, (p["title"], t["expr"])
            assert names <= _exported(), (p["title"], names - _exported())
            seen |= names
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            assert _metric_names(v["definition"].replace("label_values(", "").split(",")[0]) <= _exported()
    # the panels the issue asks for are all there
    for wanted in ("instance_info", "system_vcpu_usage_ratio", "system_memory_used_bytes",
                   "neuroncore_utilization_ratio", "execution_status_total", "execution_errors_total",
                   "execution_latency_seconds", "neuron_runtime_memory_used_bytes", "neuron_runtime_vcpu_usage_ratio"):
        assert wanted in seen, wanted
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))


def test_metric_name_extraction_ignores_labels_and_functions() -> None:
    assert _metric_names('sum by (runtime_tag) (rate(execution_status_total{status_type="completed"}[1m]))') == {
        "execution_status_total"}


def test_daemonset_runs_the_image_with_the_shared_stats_dir() -> None:
    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all(DAEMONSET.read_text())}
    assert {"DaemonSet", "ConfigMap"} <= set(docs)
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert env["NEURON_EXPLORER_STATS_DIR"] == mounts["stats"]
    assert c["ports"][0]["containerPort"] == 8000
    json.loads(docs["ConfigMap"]["data"]["monitor.conf"])  # a valid monitor config
    from neuron_explorer.monitor.config import parse_config

    parse_config(json.loads(docs["ConfigMap"]["data"]["monitor.conf"]))


def test_dockerfile_installs_the_monitor_and_its_entrypoint() -> None:
    text = DOCKERFILE.read_text()
    assert ".[monitor]" in text and "ENTRYPOINT" in text
    entry = (ROOT / "deploy" / "docker" / "entrypoint.sh").read_text()
    assert "neuron-monitor-prometheus.py" in entry and "neuron-monitor " in entry
