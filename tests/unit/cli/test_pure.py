"""The pure parts of ``kubectl kontinue``: printing, owner names, the status checks."""

from __future__ import annotations

import base64
import datetime

import pytest

from kontinue import keys
from kontinue.models import base, kueue
from kontinue.models import policy as policy_model
from kubectl_kontinue import gathering, health, lineages, printing

NOW = datetime.datetime(2026, 12, 3, 10, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400, "3d"),
        (-5, "0s"),
    ],
)
def test_age_is_kubectls_human_duration(seconds: int, text: str) -> None:
    assert printing.age(NOW - datetime.timedelta(seconds=seconds), now=NOW) == text


def test_table_aligns_and_marks_empty_cells_and_hides_wide_columns() -> None:
    columns = [
        printing.Column("A", "a"),
        printing.Column("LONG B", "b"),
        printing.Column("W", "w", wide=True),
    ]
    rows: list[dict[str, object]] = [
        {"a": "x", "b": "", "w": 1},
        {"a": "yyyy", "b": ["p", "q"], "w": None},
    ]
    assert printing.table(rows, columns, wide=False).splitlines() == [
        "A      LONG B",
        "x      <none>",
        "yyyy   p,q",
    ]
    assert printing.table(rows, columns, wide=True).splitlines()[2] == "yyyy   p,q      <none>"


@pytest.mark.parametrize(
    ("typed", "owner"),
    [
        ("job/train", "job/train"),
        ("Job/train", "job/train"),
        ("jobs/train", "job/train"),
        ("train", "job/train"),
        ("job.batch.volcano.sh/x", "job.batch.volcano.sh/x"),
    ],
)
def test_owner_names_as_typed(typed: str, owner: str) -> None:
    assert lineages.normalize_owner(typed) == owner


def _lease(holder: str | None, renewed_ago: float, duration: int = 15) -> dict[str, object]:
    renew = base.format_time(NOW - datetime.timedelta(seconds=renewed_ago))
    return {
        "spec": {
            "holderIdentity": holder,
            "renewTime": renew,
            "acquireTime": renew,
            "leaseDurationSeconds": duration,
        }
    }


def test_leader_lines() -> None:
    (ok,) = health.leader_lines(_lease("bridge-0", 3), now=NOW)
    assert ok.ok
    assert ok.text.startswith("bridge-0 leads since 3s ago")
    (expired,) = health.leader_lines(_lease("bridge-0", 60), now=NOW)
    assert not expired.ok
    assert "expired Lease (renewed 60s ago, duration 15s)" in expired.text
    (nobody,) = health.leader_lines(_lease("", 1), now=NOW)
    assert not nobody.ok
    assert "no replica leads" in nobody.text
    (missing,) = health.leader_lines(None, now=NOW)
    assert not missing.ok
    assert missing.fix


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_ca_bundle_lines_name_the_stale_webhooks() -> None:
    secret = {"data": {"ca.crt": _b64(b"CA-2")}}
    current = {"webhooks": [{"name": "a", "clientConfig": {"caBundle": _b64(b"CA-2")}}]}
    stale = {
        "webhooks": [
            {"name": "a", "clientConfig": {"caBundle": _b64(b"CA-2")}},
            {"name": "b", "clientConfig": {"caBundle": _b64(b"CA-1")}},
        ]
    }
    lines = health.ca_bundle_lines({"Mutating": current, "Validating": stale}, secret)
    assert [line.ok for line in lines] == [True, False]
    assert "b do not trust" in lines[1].text
    assert "a," not in lines[1].text
    (absent,) = health.ca_bundle_lines({"Mutating": current}, {"data": {}})
    assert not absent.ok
    assert "has no ca.crt" in absent.text
    lines = health.ca_bundle_lines({"Mutating": None}, secret)
    assert not lines[0].ok
    assert "does not exist" in lines[0].text


def _world(*, policy_label: str | None, policies: list[str]) -> gathering.World:
    labels = {keys.ENABLED_LABEL: "true"}
    if policy_label:
        labels[keys.POLICY_LABEL] = policy_label
    cq = base.parse(kueue.ClusterQueue, {"metadata": {"name": "cq", "labels": labels}})
    lq = base.parse(
        kueue.LocalQueue,
        {"metadata": {"name": "lq", "namespace": "ns1"}, "spec": {"clusterQueue": "cq"}},
    )
    made = [
        policy_model.load(
            {"metadata": {"name": n}, "spec": {"storage": {"pvc": {"claimName": "c"}}}}
        )
        for n in policies
    ]
    return gathering.World(namespace=None, cluster_queues=[cq], local_queues=[lq], policies=made)


def test_queue_lines_follow_queue_policy_namespace_claim() -> None:
    queues = health.opted_in_queues(_world(policy_label="p", policies=["p"]))
    assert health.claims_needed(queues) == [("ns1", "c")]
    assert health.probe_target(queues) == health.Feed("Kueue", "cq", "ns1", "lq")
    rwx = {"spec": {"accessModes": ["ReadWriteMany"]}, "status": {"phase": "Bound"}}
    lines = health.queue_lines(queues, {("ns1", "c"): rwx})
    assert [line.ok for line in lines] == [True, True]
    assert lines[1].text == "PersistentVolumeClaim c (ReadWriteMany, Bound)"
    (_, missing) = health.queue_lines(queues, {("ns1", "c"): None})
    assert not missing.ok
    assert "does not exist" in missing.text
    assert "leaves opted-in pods there untouched" in missing.text
    assert "create a ReadWriteMany PVC c in ns1" in missing.fix
    # the webhook rightly leaves pods alone where the claim is missing: no probe there
    assert health.probe_target(queues, {("ns1", "c"): rwx}) == health.Feed(
        "Kueue", "cq", "ns1", "lq"
    )
    assert health.probe_target(queues, {("ns1", "c"): None}) is None


def test_a_missing_policy_is_one_failing_line_and_no_probe() -> None:
    queues = health.opted_in_queues(_world(policy_label="gone", policies=[]))
    (line,) = health.queue_lines(queues, {})
    assert not line.ok
    assert "policy gone does not exist" in line.text
    assert health.probe_target(queues) is None
    (probe_line,) = health.webhook_lines(None)
    assert not probe_line.ok
    assert "not probed" in probe_line.text
    # no label and no "default" policy: the built-in default applies (it wants PVC "kontinue")
    builtin = health.opted_in_queues(_world(policy_label=None, policies=[]))
    assert builtin[0].policy is policy_model.DEFAULT
    assert health.claims_needed(builtin) == [("ns1", "kontinue")]


def test_webhook_lines() -> None:
    plumbed = health.Probe("ns1", "cq", plumbed=True)
    assert health.webhook_lines(plumbed)[0].ok
    unplumbed = health.webhook_lines(health.Probe("ns1", "cq", plumbed=False))[0]
    assert not unplumbed.ok
    assert "came back unplumbed" in unplumbed.text
    refused = health.webhook_lines(health.Probe("ns1", "cq", plumbed=False, error="x509"))[0]
    assert not refused.ok
    assert "was refused: x509" in refused.text
    assert health.is_plumbed(
        {"metadata": {"annotations": {keys.LINEAGE_ANNOTATION: "ns1/Job/x/uid"}}}
    )
    pod = health.probe_pod(health.Feed("Kueue", "cq", "ns1", "lq"))
    assert pod["metadata"]["labels"] == {keys.KUEUE_QUEUE_NAME_LABEL: "lq"}
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True


@pytest.mark.parametrize(
    "command",
    ["status", "list", "describe", "enable", "disable", "move", "drain", "defrag"],
)
def test_every_command_has_a_help_page_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kubectl_kontinue import cli

    with pytest.raises(SystemExit) as exited:
        cli.parser().parse_args([command, "--help"])
    assert exited.value.code == 0
    page = capsys.readouterr().out
    assert page.startswith(f"usage: kubectl kontinue {command}")
    assert "Example" in page
    assert "--kubeconfig" in page


def test_the_story_of_a_set_save_time_bytes_and_step() -> None:
    from kontinue.models import checkpoint
    from kubectl_kontinue import story

    cp = checkpoint.load(
        {
            "metadata": {"name": "t-1", "namespace": "ns1"},
            "spec": {
                "lineage": {
                    "namespace": "ns1",
                    "ownerKind": "Job",
                    "ownerName": "t",
                    "ownerUid": "u",
                },
                "trigger": {
                    "source": "Manual",
                    "reason": "Move",
                    "message": "kubectl kontinue move: to node b",
                    "time": "2026-12-03T10:00:00Z",
                },
                "members": [
                    {"podName": "p0", "podUid": "u0", "node": "a"},
                    {"podName": "p1", "podUid": "u1", "node": "a", "index": 1},
                ],
            },
            "status": {
                "phase": "Succeeded",
                "members": [
                    {
                        "podName": "p0",
                        "state": "Saved",
                        "bytes": 1024,
                        "step": 7,
                        "startedAt": "2026-12-03T09:00:00Z",
                        "finishedAt": "2026-12-03T10:00:02Z",
                    },
                    {
                        "podName": "p1",
                        "state": "Saved",
                        "bytes": 1024,
                        "step": 7,
                        "startedAt": "2026-12-03T09:00:00Z",
                        "finishedAt": "2026-12-03T10:00:03Z",
                    },
                ],
            },
        }
    )
    assert story.save_seconds(cp) == 3.0  # from the eviction, not from the container's start
    assert story.saved_bytes(cp) == 2048
    item = lineages.Lineage(lineage=cp.spec.lineage, checkpoints=[cp])
    evicted, saved = story.timeline(item, [])
    assert evicted.detail == ("Manual Move: kubectl kontinue move: to node b (p0 on a, p1 on a)")
    assert saved.detail == "set t-1 Succeeded: 2/2 members saved, 2.0Ki, save 3.0s, step 7"
    assert lineages.row(item, now=NOW)["newest_good"] == "step 7, 0s ago"
    assert (
        lineages.row(item, now=NOW + datetime.timedelta(hours=2))["newest_good"]
        == "step 7, 120m ago"  # kubectl: minutes up to 3h
    )


def test_a_volcano_queue_is_fed_by_the_namespaces_of_its_podgroups() -> None:
    from kontinue.models import volcano

    queue = base.parse(
        volcano.Queue,
        {"metadata": {"name": "research", "labels": {keys.ENABLED_LABEL: "true"}}},
    )
    groups = [
        base.parse(
            volcano.PodGroup,
            {"metadata": {"name": f"pg-{ns}", "namespace": ns}, "spec": {"queue": q}},
        )
        for ns, q in (("lab", "research"), ("lab", "research"), ("other", "elsewhere"))
    ]
    world = gathering.World(namespace=None, volcano_queues=[queue], pod_groups=groups)
    (opted,) = health.opted_in_queues(world)
    assert (opted.system, opted.queue, opted.policy_name) == ("Volcano", "research", "default")
    assert opted.feeds == (health.Feed("Volcano", "research", "lab"),)
    target = health.probe_target([opted])
    assert target is not None
    pod = health.probe_pod(target)
    assert pod["metadata"]["annotations"] == {keys.VOLCANO_POD_QUEUE_ANNOTATION: "research"}
    (line, storage) = health.queue_lines([opted], {("lab", "kontinue"): None})
    assert line.subject == "queue/research"
    assert not storage.ok


@pytest.mark.parametrize(
    ("retry_after", "delay"), [(None, 5.0), (0, 5.0), (1, 1.0), (0.1, 0.5), (30, 5.0)]
)
def test_a_refused_eviction_is_retried_as_kubectl_drain_retries(
    retry_after: float | None, delay: float
) -> None:
    """A budget's 429 has no Retry-After: wait kubectl drain's 5 s (k8s.io/kubectl
    pkg/drain/drain.go), not a tight loop against the apiserver."""
    from kubectl_kontinue import evicting

    assert evicting.retry_delay(retry_after) == delay
