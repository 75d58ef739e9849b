"""manifests/components/monitoring: every metric the Grafana dashboard and the alert rules
query is one the bridge or the webhook really exports, and the ServiceMonitors scrape ports the
metrics Services define.

The exported names come from the instruments themselves: each is driven once through a real
telemetry setup and read back from the Prometheus exposition, so renaming an instrument without
the dashboard (or the reverse) fails here.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

from kontinue import telemetry
from kontinue.models import checkpoint, core
from queue_bridge import instruments, queueing
from tests import fixtures, promlint
from webhook import metrics as webhook_metrics

MONITORING = fixtures.MANIFESTS / "components" / "monitoring"
NAME = re.compile(r"\b(kontinue_[a-z0-9_]+)\b")
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class _Checkpoints:
    def items(self) -> list[checkpoint.Checkpoint]:
        return []


class _Caches:
    checkpoints = _Checkpoints()


def _pod(annotations: dict[str, str], **status: Any) -> core.Pod:
    return core.Pod.model_validate(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": f"uid-{len(annotations)}-{len(status)}",
                "creationTimestamp": "2026-01-01T00:00:10Z",
                "annotations": annotations,
                "labels": {"kueue.x-k8s.io/cluster-queue-name": "cq"},
            },
            "spec": {"containers": [{"name": "main", "image": "x"}]},
            "status": status,
        }
    )


def exported() -> set[str]:
    """Every sample name the two components export once each instrument has a value."""
    tel = telemetry.setup("kontinue-test", environ={})
    queue: queueing.WorkQueue[Any] = queueing.WorkQueue()
    caches: Any = _Caches()  # only .checkpoints.items() is read
    bridge = instruments.Metrics(tel.meter, caches, queue, lambda: True, clock=lambda: T0)
    trigger = checkpoint.Trigger(source=checkpoint.TriggerSource.KUEUE, reason="Preempted", time=T0)
    bridge.checkpoint_created(trigger, 0.5)
    bridge.reconcile_failed("Pod", RuntimeError("x"))
    bridge.reconciles.record(0.01, {"kind": "Pod"})
    bridge.finalizer_released("backstop")
    bridge.save_duration.record(1.0, {"result": "Saved"})
    bridge.save_size.record(1024)
    bridge.handover.record(1.0, {"stage": "victims_exited"})
    cold = _pod({"kontinue.dev/cold-start-reason": "no checkpoint of ns/Job/j yet"})
    assert bridge.pod_seen(cold, None) == ("cold_start", "NoCheckpoint")
    webhook = webhook_metrics.Metrics(tel.meter, expiry=lambda: 1.0e9)
    webhook.answered("/mutate", allowed=True, decided="restore", status=200, seconds=0.001)
    text = telemetry.exposition(tel.registry).decode()
    assert promlint.problems(text) == []
    return {name for family in promlint.families(text).values() for name, _, _ in family.samples}


def _queries() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    for panel in dashboard["panels"]:
        found += [(f"panel {panel['title']!r}", t["expr"]) for t in panel["targets"]]
    (rule,) = fixtures.load_all(MONITORING / "prometheusrule.yaml")
    for group in rule["spec"]["groups"]:
        found += [(f"alert {r['alert']}", r["expr"]) for r in group["rules"]]
    return found


def test_every_dashboard_and_alert_query_uses_an_exported_metric() -> None:
    names = exported()
    queries = _queries()
    assert len(queries) >= 20
    missing = [
        f"{where}: {name}"
        for where, expr in queries
        for name in NAME.findall(expr)
        if name not in names
    ]
    assert missing == []


def test_the_dashboard_shows_what_operators_ask_for() -> None:
    exprs = " ".join(expr for _, expr in _queries())
    for needed in (
        "kontinue_restores_total",  # restored vs cold-started, per queue
        "kontinue_bridge_handover_seconds_bucket",  # handover p50/p95
        "kontinue_bridge_member_save_duration_seconds_bucket",
        'kontinue_bridge_checkpoint_transitions_total{phase=~"Succeeded|Failed"}',
    ):
        assert needed in exprs, needed


def test_service_monitors_scrape_ports_the_metrics_services_define() -> None:
    services = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for path in ("bridge/service-metrics.yaml", "webhook/service-metrics.yaml")
        for d in fixtures.load_all(fixtures.MANIFESTS / path)
    }
    for monitor in fixtures.load_all(MONITORING / "servicemonitor.yaml"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        service = services[wanted["app.kubernetes.io/component"]]
        assert wanted.items() <= service["metadata"]["labels"].items(), monitor["metadata"]["name"]
        ports = {p["name"] for p in service["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports
            assert endpoint["path"] == "/metrics"


def test_docs_list_every_alert_rule() -> None:
    text = (fixtures.ROOT / "docs" / "operations.md").read_text()
    (rule,) = fixtures.load_all(MONITORING / "prometheusrule.yaml")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert f"`{alert['alert']}`" in text, alert["alert"]
