"""Validation rules, pure: every denial path (with its code and the field it names) and the
allowed paths next to each, so a rule that denies everything cannot pass.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kontinue import keys, lineage
from tests.unit.webhook import support
from webhook import admission, plumbing, review, settings, state

CONFIG = settings.Settings(image="registry.example/kontinue:test")
Obj = dict[str, Any]


def _validate(body: Obj, snap: state.Snapshot | None = None) -> review.Verdict:
    return admission.validate(support.parsed(body), state=snap or state.Snapshot(), config=CONFIG)


# --- our CRDs -------------------------------------------------------------------------------


def _policy_body(spec: Obj, operation: str = "CREATE") -> Obj:
    obj = {
        "apiVersion": "kontinue.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    }
    return support.request_for(
        obj,
        group="kontinue.dev",
        version="v1alpha1",
        kind="CheckpointPolicy",
        resource="checkpointpolicies",
        namespace=None,
        operation=operation,
        old=obj if operation == "UPDATE" else None,
        username="admin",
    )


def test_valid_policy_is_allowed() -> None:
    assert _validate(_policy_body(support.HOSTPATH_POLICY)) == review.allow()
    assert _validate(_policy_body({})) == review.allow()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minGracePeriodSeconds": 0}, "spec.minGracePeriodSeconds"),
        ({"storage": {"pvc": {"claimName": "x"}, "hostPath": {"path": "/x"}}}, "spec.storage"),
        ({"storage": {"pvc": {"claimName": "Bad_Name"}}}, "spec.storage.pvc.claimName"),
        ({"engine": "magic"}, "spec.engine"),
        ({"retention": {"keep": 0}}, "spec.retention.keep"),
        ({"retentoin": {}}, "spec.retentoin"),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_invalid_policy_is_denied_422_naming_the_field(
    spec: Obj, field: str, operation: str
) -> None:
    verdict = _validate(_policy_body(spec, operation))
    assert not verdict.allowed
    assert verdict.code == 422
    assert verdict.reason == "Invalid"
    assert verdict.message.startswith("CheckpointPolicy: ")
    assert f"{field}:" in verdict.message


def _checkpoint_body(obj: Obj) -> Obj:
    return support.request_for(
        obj,
        group="kontinue.dev",
        version="v1alpha1",
        kind="Checkpoint",
        resource="checkpoints",
        namespace="team",
        username="system:serviceaccount:kontinue-system:kontinue-bridge",
    )


def _checkpoint_obj() -> Obj:
    pod = support.kueue_pod()
    cp = support.make_checkpoint("cp", lineage=support.lineage_of(pod))
    return cp.model_dump(mode="json", by_alias=True, exclude_none=True)


def test_valid_checkpoint_is_allowed() -> None:
    assert _validate(_checkpoint_body(_checkpoint_obj())) == review.allow()


def test_invalid_checkpoint_is_denied_naming_every_bad_field() -> None:
    obj = _checkpoint_obj()
    obj["spec"]["members"] = []
    obj["status"]["phase"] = "Done"
    verdict = _validate(_checkpoint_body(obj))
    assert verdict.code == 422
    assert "spec.members:" in verdict.message
    assert "status.phase:" in verdict.message


# --- queue opt-in labels ------------------------------------------------------------------


def _queue_body(kind: str, labels: Obj, old_labels: Obj | None = None) -> Obj:
    group = keys.KUEUE_GROUP if kind == "ClusterQueue" else keys.VOLCANO_SCHEDULING_GROUP
    version = keys.KUEUE_VERSION if kind == "ClusterQueue" else "v1beta1"
    obj = {"metadata": {"name": "q", "labels": labels}, "spec": {}}
    old = None if old_labels is None else {"metadata": {"name": "q", "labels": old_labels}}
    return support.request_for(
        obj,
        group=group,
        version=version,
        kind=kind,
        resource="clusterqueues" if kind == "ClusterQueue" else "queues",
        namespace=None,
        operation="CREATE" if old is None else "UPDATE",
        old=old,
        username="admin",
    )


POLICIES = state.Snapshot.of(policies=[support.checkpoint_policy("gpu")])


@pytest.mark.parametrize("kind", ["ClusterQueue", "Queue"])
@pytest.mark.parametrize(
    "labels",
    [
        {keys.ENABLED_LABEL: "true"},
        {keys.ENABLED_LABEL: "false"},
        {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "gpu"},
        {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "default"},
        {"unrelated": "x"},
    ],
)
def test_valid_opt_in_labels_are_allowed(kind: str, labels: Obj) -> None:
    assert _validate(_queue_body(kind, labels), POLICIES) == review.allow()


@pytest.mark.parametrize("kind", ["ClusterQueue", "Queue"])
@pytest.mark.parametrize(
    ("labels", "field", "says"),
    [
        ({keys.ENABLED_LABEL: "yes"}, keys.ENABLED_LABEL, "'yes'"),
        ({keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "nope"}, keys.POLICY_LABEL, "'nope'"),
    ],
)
def test_bad_opt_in_labels_are_denied(kind: str, labels: Obj, field: str, says: str) -> None:
    verdict = _validate(_queue_body(kind, labels), POLICIES)
    assert verdict.code == 422
    assert f"metadata.labels[{field}]" in verdict.message
    assert says in verdict.message


def test_unchanged_label_naming_a_deleted_policy_does_not_block_other_updates() -> None:
    labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "deleted-since"}
    assert _validate(_queue_body("ClusterQueue", labels, old_labels=labels), POLICIES) == (
        review.allow()
    )


# --- pods: reserved keys ------------------------------------------------------------------


def _pod_update(old: Obj, new: Obj, username: str = "alice") -> Obj:
    return support.request_for(new, operation="UPDATE", old=old, username=username)


def _annotated(pod: Obj, **annotations: str) -> Obj:
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("annotations", {}).update(annotations)
    return pod


@pytest.mark.parametrize("key", sorted(keys.RESERVED_POD_ANNOTATIONS))
@pytest.mark.parametrize("change", ["add", "change", "remove"])
def test_user_may_not_change_reserved_annotations(key: str, change: str) -> None:
    pod = support.recorded_object("06-")
    old = _annotated(pod, **{key: "v1"}) if change != "add" else pod
    new = {"add": _annotated(pod, **{key: "v1"}), "change": _annotated(pod, **{key: "v2"})}.get(
        change, pod
    )
    verdict = _validate(_pod_update(old, new))
    assert verdict.code == 403
    assert verdict.reason == "Forbidden"
    assert f"metadata.annotations[{key}]" in verdict.message


def test_user_update_that_leaves_reserved_annotations_alone_is_allowed() -> None:
    pod = _annotated(support.recorded_object("06-"), **{keys.RESTORE_FROM_ANNOTATION: "cp"})
    new = _annotated(pod, **{"team": "x"})
    assert _validate(_pod_update(pod, new)) == review.allow()


@pytest.mark.parametrize(
    "username",
    [
        "system:serviceaccount:kontinue-system:kontinue-webhook",
        "system:serviceaccount:kontinue-system:kontinue-bridge",
    ],
)
def test_kontinue_itself_may_change_reserved_annotations(username: str) -> None:
    pod = support.recorded_object("06-")
    new = _annotated(pod, **{keys.RESTORE_FROM_ANNOTATION: "cp"})
    assert _validate(_pod_update(pod, new, username=username)) == review.allow()


def test_recorded_job_controller_update_is_allowed() -> None:
    assert _validate(support.recorded("06-")) == review.allow()


def _snapshot_with_checkpoint(pod: Obj) -> state.Snapshot:
    return state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-gpu")],
        checkpoints=[support.make_checkpoint("cp", lineage=support.lineage_of(pod))],
    )


def test_what_our_mutation_produces_passes_validation() -> None:
    """The validating webhook sees the mutated pod: our own keys must be consistent."""
    pod = support.kueue_pod()
    snap = _snapshot_with_checkpoint(pod)
    mutated = admission.mutate(support.parsed(support.request_for(pod)), state=snap, config=CONFIG)
    out = support.apply_patch(pod, mutated.patch)
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "cp"
    assert _validate(support.request_for(out), snap) == review.allow()


def test_forged_lineage_annotation_on_create_is_denied() -> None:
    pod = _annotated(support.kueue_pod(), **{keys.LINEAGE_ANNOTATION: "default/Job/victim/uid-x"})
    verdict = _validate(support.request_for(pod), _snapshot_with_checkpoint(pod))
    assert verdict.code == 403
    assert "is not this pod's lineage" in verdict.message


def test_restore_from_a_checkpoint_of_another_lineage_is_denied() -> None:
    pod = support.kueue_pod()
    victim = support.lineage_of(pod).model_copy(update={"owner_name": "victim", "owner_uid": "v"})
    snap = state.Snapshot.of(checkpoints=[support.make_checkpoint("theirs", lineage=victim)])
    forged = _annotated(pod, **{keys.RESTORE_FROM_ANNOTATION: "theirs"})
    verdict = _validate(support.request_for(forged), snap)
    assert verdict.code == 403
    assert "belongs to lineage default/Job/victim" in verdict.message


def test_restore_from_an_unknown_checkpoint_is_denied() -> None:
    pod = _annotated(support.kueue_pod(), **{keys.RESTORE_FROM_ANNOTATION: "made-up"})
    verdict = _validate(support.request_for(pod), state.Snapshot())
    assert verdict.code == 403
    assert "no Checkpoint 'made-up' in namespace default" in verdict.message


def test_restore_env_pointing_at_another_namespace_is_denied() -> None:
    pod = support.kueue_pod()
    other = support.lineage_of(pod).model_copy(update={"namespace": "other-team"})
    path = f"/kontinue/checkpoints/{lineage.lineage_dir(other)}/some-uid"
    pod["spec"]["containers"][0]["env"] = [{"name": keys.ENV_RESTORE_FROM, "value": path}]
    verdict = _validate(support.request_for(pod))
    assert verdict.code == 403
    assert "spec.containers[0].env[0]" in verdict.message
    assert "outside lineage default/Job/train-a" in verdict.message


def test_restore_env_escaping_with_dotdot_is_denied() -> None:
    pod = support.kueue_pod()
    own = lineage.lineage_dir(support.lineage_of(pod))
    path = f"/kontinue/checkpoints/{own}/../../other-team/x"
    pod["spec"]["containers"][0]["env"] = [{"name": keys.ENV_RESTORE_FROM, "value": path}]
    assert _validate(support.request_for(pod)).code == 403


def test_restore_env_inside_the_pods_own_lineage_is_allowed() -> None:
    pod = support.kueue_pod()
    own = lineage.lineage_dir(support.lineage_of(pod))
    pod["spec"]["containers"][0]["env"] = [
        {"name": keys.ENV_RESTORE_FROM, "value": f"/kontinue/checkpoints/{own}/prev-uid"}
    ]
    assert _validate(support.request_for(pod)) == review.allow()


def test_restore_env_from_a_reference_is_denied() -> None:
    pod = support.kueue_pod()
    pod["spec"]["initContainers"] = [
        {
            "name": "x",
            "image": "busybox",
            "env": [
                {
                    "name": plumbing.ENV_RESTORE_SOURCE,
                    "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
                }
            ],
        }
    ]
    verdict = _validate(support.request_for(pod))
    assert verdict.code == 403
    assert "spec.initContainers[0].env[0]" in verdict.message


def test_restore_env_on_a_bare_pod_is_denied() -> None:
    pod = support.recorded_object("35-")
    pod["spec"]["containers"][0]["env"] = [{"name": keys.ENV_RESTORE_FROM, "value": "/x/y"}]
    verdict = _validate(support.request_for(pod, username="admin"))
    assert verdict.code == 403
    assert "without a lineage" in verdict.message


@pytest.mark.parametrize("stem", ["03-", "12-", "23-"])
def test_recorded_pod_creates_are_allowed(stem: str) -> None:
    assert _validate(support.recorded(stem)) == review.allow()


@pytest.mark.parametrize("stem", ["07-", "31-"])
def test_deletes_and_evictions_are_never_validated(stem: str) -> None:
    assert _validate(support.recorded(stem)) == review.allow()
