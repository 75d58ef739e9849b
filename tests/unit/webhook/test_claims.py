"""The checkpoint claim rule (webhook/claims.py), pure: an opted-in pod, Job or Volcano Job whose
namespace is known to lack its policy's PersistentVolumeClaim is left untouched with a warning;
a claim that exists, a hostPath policy, or claims not known yet: plumbed as before."""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import keys
from kontinue.models import policy as policy_model
from tests import fixtures
from tests.unit.webhook import support
from webhook import admission, claims, metrics, review, settings, state

CONFIG = settings.Settings(image="registry.example/kontinue:test")
Obj = dict[str, Any]
HOST_PATH = support.checkpoint_policy("local", support.HOSTPATH_POLICY)
OWN_CLAIM = support.checkpoint_policy("team", {"storage": {"pvc": {"claimName": "team-ckpt"}}})


def _snapshot(claims_known: list[tuple[str, str]] | None, **extra: Any) -> state.Snapshot:
    return state.Snapshot.of(
        cluster_queues=[
            support.opted_in_cq("cq-gpu"),
            support.opted_in_cq("cq-local", policy="local"),
            support.opted_in_cq("cq-team", policy="team"),
        ],
        local_queues=[support.local_queue("default", "lq", "cq-gpu")],
        volcano_queues=[support.volcano_queue("research", **{keys.ENABLED_LABEL: "true"})],
        policies=[HOST_PATH, OWN_CLAIM],
        claims=claims_known,
        **extra,
    )


@pytest.mark.parametrize(
    ("policy", "claims_known", "expected"),
    [
        (policy_model.DEFAULT, [], claims.Missing("ns", "kontinue", "default")),
        (
            policy_model.DEFAULT,
            [("other", "kontinue"), ("ns", "else")],
            claims.Missing("ns", "kontinue", "default"),
        ),
        (policy_model.DEFAULT, [("ns", "kontinue")], None),
        (policy_model.DEFAULT, None, None),  # not synced: not known, so plumb as before
        (OWN_CLAIM, [("ns", "kontinue")], claims.Missing("ns", "team-ckpt", "team")),
        (OWN_CLAIM, [("ns", "team-ckpt")], None),
        (HOST_PATH, [], None),  # no claim to miss
    ],
)
def test_missing_is_known_absence_of_the_policys_own_claim(
    policy: policy_model.CheckpointPolicy,
    claims_known: list[tuple[str, str]] | None,
    expected: claims.Missing | None,
) -> None:
    snap = state.Snapshot.of(claims=claims_known)
    assert claims.missing(policy, namespace="ns", state=snap) == expected


def _mutate(obj: Obj, snap: state.Snapshot, **kwargs: Any) -> review.Verdict:
    request = support.parsed(support.request_for(obj, **kwargs))
    return admission.mutate(request, state=snap, config=CONFIG)


def test_opted_in_pod_without_its_claim_is_left_untouched_with_a_warning_naming_it() -> None:
    pod = support.kueue_pod()  # namespace "default", default policy: claim "kontinue"
    verdict = _mutate(pod, _snapshot([("other", "kontinue")]))
    assert verdict.allowed
    assert verdict.patch == ()  # no volume, env, restore container, finalizer or label
    assert verdict.decision == metrics.CLAIM_MISSING
    assert verdict.claim == "kontinue"
    (warning,) = verdict.warnings
    for named in ('"kontinue"', 'namespace "default"', 'CheckpointPolicy "default"'):
        assert named in warning
    assert len(warning) <= review.MAX_WARNING
    assert 'namespace "default" has no PersistentVolumeClaim "kontinue"' in verdict.why


def test_the_same_pod_is_plumbed_once_the_claim_exists_or_while_claims_are_unknown() -> None:
    pod = support.kueue_pod()
    for snap in (_snapshot([("default", "kontinue")]), _snapshot(None)):
        verdict = _mutate(pod, snap)
        assert verdict.decision == metrics.COLD_START
        out = support.apply_patch(pod, verdict.patch)
        assert out["metadata"]["labels"][keys.PLUMBED_LABEL] == keys.PLUMBED_VALUE
        volume = next(v for v in out["spec"]["volumes"] if v["name"] == keys.CHECKPOINT_VOLUME)
        assert volume["persistentVolumeClaim"] == {"claimName": "kontinue"}


def test_the_queues_own_policy_decides_which_claim_and_host_path_needs_none() -> None:
    team = support.kueue_pod(cluster_queue="cq-team")
    verdict = _mutate(team, _snapshot([("default", "kontinue")]))
    assert verdict.patch == ()
    assert verdict.claim == "team-ckpt"
    assert _mutate(team, _snapshot([("default", "team-ckpt")])).patch
    local = support.kueue_pod(cluster_queue="cq-local")
    assert _mutate(local, _snapshot([])).decision == metrics.COLD_START


def test_pods_not_opted_in_are_not_asked_about_claims() -> None:
    pod = support.kueue_pod(cluster_queue="cq-nowhere")
    verdict = _mutate(pod, _snapshot([]))
    assert verdict.decision == metrics.NOT_OPTED_IN
    assert verdict.warnings == ()


def _job() -> Obj:
    job = support.recorded_object("01-")
    job["metadata"]["labels"] = {keys.KUEUE_QUEUE_NAME_LABEL: "lq"}
    job["metadata"]["namespace"] = "default"
    job["spec"].pop("podFailurePolicy", None)
    return job


JOB_REQUEST: dict[str, Any] = {
    "group": "batch",
    "kind": "Job",
    "resource": "jobs",
    "username": "admin",
}


def test_an_opted_in_job_follows_the_same_rule() -> None:
    job = _job()
    verdict = _mutate(job, _snapshot([]), **JOB_REQUEST)
    assert verdict.patch == ()
    assert verdict.decision == metrics.CLAIM_MISSING
    assert verdict.warnings[0].startswith("kontinue: Job not plumbed:")
    plumbed = _mutate(job, _snapshot([("default", "kontinue")]), **JOB_REQUEST)
    assert support.apply_patch(job, plumbed.patch)["spec"]["podReplacementPolicy"] == "Failed"


def test_an_opted_out_job_still_passes_its_opt_out_to_its_pods_without_a_claim() -> None:
    job = _job()
    job["metadata"]["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    verdict = _mutate(job, _snapshot([]), **JOB_REQUEST)
    out = support.apply_patch(job, verdict.patch)
    assert out["spec"]["template"]["metadata"]["annotations"] == {
        keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"
    }
    assert verdict.decision == metrics.NOT_OPTED_IN


def test_an_opted_in_volcano_job_follows_the_same_rule() -> None:
    job = fixtures.load_one(fixtures.UPSTREAM / "volcano/examples/vcjob-gpu-ckpt-train.yaml")
    job["metadata"]["namespace"] = "team"
    job["spec"]["queue"] = "research"
    request = {
        "group": "batch.volcano.sh",
        "version": "v1alpha1",
        "kind": "Job",
        "resource": "jobs",
        "namespace": "team",
        "username": "admin",
    }
    verdict = _mutate(job, _snapshot([("default", "kontinue")]), **request)
    assert verdict.patch == ()
    assert verdict.decision == metrics.CLAIM_MISSING
    assert 'namespace "team"' in verdict.warnings[0]
    assert _mutate(job, _snapshot([("team", "kontinue")]), **request).patch
