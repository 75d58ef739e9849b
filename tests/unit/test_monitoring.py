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
from typing import Any, cast

from opentelemetry.metrics import Observation

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
    bridge = instruments.Metrics(
        tel.meter, caches, queue, lambda: True, clock=lambda: T0, registry=tel.registry
    )
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


# -- docs/operations.md names every metric, and only metrics that exist ------------------------

INSTRUMENTED = {  # every product module that creates instruments, and how the test builds them
    "kontinue/kube/watch_metrics.py",
    "queue_bridge/instruments.py",
    "webhook/freshness.py",
    "webhook/metrics.py",
}
CREATES = re.compile(r"\bcreate_(counter|histogram|gauge|up_down_counter|observable_\w+)\b")
NOT_METRICS = {"kontinue_sdk"}  # the SDK package's name, not a metric


class _EveryInstrument:
    """A meter that hands out the real meter's instruments and gives each one a value (an
    observable one that observes nothing yet, one observation), so the exposition shows every
    family the code defines, whatever the callers have done so far."""

    def __init__(self, meter: Any) -> None:
        self._meter = meter
        self.created: list[str] = []

    def __getattr__(self, attr: str) -> Any:
        create = getattr(self._meter, attr)
        if not attr.startswith("create_"):
            return create

        def created(name: str, *args: Any, **kwargs: Any) -> Any:
            self.created.append(name)
            if attr.startswith("create_observable_"):
                callbacks = list(kwargs.get("callbacks") or ())

                def at_least_one(options: Any) -> list[Any]:
                    seen = [o for callback in callbacks for o in callback(options)]
                    return seen or [Observation(1)]

                kwargs["callbacks"] = [at_least_one]
                return create(name, *args, **kwargs)
            instrument = create(name, *args, **kwargs)
            for use in ("add", "record", "set"):
                if hasattr(instrument, use):
                    getattr(instrument, use)(1)
                    break
            return instrument

        return created


def every_family() -> tuple[dict[str, promlint.Family], list[str]]:
    """Every family both deployables export, by its exposition name, and the instruments'
    OpenTelemetry names; read back through a real telemetry setup's Prometheus exporter."""
    from kontinue.kube import watch_metrics
    from webhook import freshness

    tel = telemetry.setup("kontinue-test", environ={})
    meter: Any = _EveryInstrument(tel.meter)
    queue: queueing.WorkQueue[Any] = queueing.WorkQueue()
    caches: Any = _Caches()
    bridge = instruments.Metrics(
        meter, caches, queue, lambda: True, clock=lambda: T0, registry=tel.registry
    )
    # counted in the bridge and registered on the registry, not made by the meter
    # (kontinue.telemetry.Histogram): given a value and counted as an instrument here
    bridge.reconciles.record(1.0, {"kind": "Pod"})
    meter.created.append(bridge.reconciles.name)
    webhook_metrics.Metrics(meter, expiry=lambda: 1.0e9)
    freshness.Reader(cast(Any, None), seconds=1.0, meter=meter)  # only its counter is read
    watch_metrics.Instruments(meter)
    text = telemetry.exposition(tel.registry).decode()
    assert promlint.problems(text) == []
    return promlint.families(text), meter.created


def test_the_instrumented_modules_are_the_ones_the_docs_test_builds() -> None:
    """A new module with instruments must be added to :func:`every_family`, or its metrics
    escape the docs check below."""
    found = {
        str(path.relative_to(fixtures.ROOT))
        for package in ("kontinue", "webhook", "queue_bridge", "kubectl_kontinue")
        for path in (fixtures.ROOT / package).rglob("*.py")
        if CREATES.search(path.read_text())
    }
    assert found == INSTRUMENTED


def test_docs_name_every_exported_metric_and_no_other() -> None:
    families, created = every_family()
    assert len(created) >= 24  # the proxy saw the instruments being made (24 today)
    ours = {name for name in families if name.startswith("kontinue_")}
    assert len(ours) == len(created)  # one family per instrument, none lost
    operations = (fixtures.ROOT / "docs" / "operations.md").read_text()
    undocumented = sorted(name for name in ours if f"`{name}`" not in operations)
    assert undocumented == []
    samples = {name for name in ours for name, _, _ in families[name].samples} | ours
    texts = [fixtures.ROOT / "README.md", *sorted((fixtures.ROOT / "docs").glob("*.md"))]
    texts += sorted(MONITORING.glob("*"))
    unknown = sorted(
        f"{path.name}: {name}"
        for path in texts
        for name in NAME.findall(path.read_text())
        if not name.endswith("_") and name not in NOT_METRICS and name not in samples
    )
    assert unknown == []
