"""Issue 11 items 2, 7 and 8 and issue 20 item 4, each as found: tenant boundaries, malformed
objects, checks weaker than the docs, and answers that grew with the input.

Every case goes through :func:`webhook.app.answer`, the function the HTTP handler serves (bytes
in, status and bytes out), so what is asserted is what the apiserver would receive.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from kontinue import catalog, keys, lineage
from kontinue.models import policy as policy_model
from tests.unit.webhook import support
from webhook import admission, review, settings, state, validation
from webhook import app as app_module

Obj = dict[str, Any]
CONFIG = settings.Settings(image="registry.example/kontinue:test")


def _answer(body: Obj, path: str, snap: state.Snapshot | None = None) -> app_module.Answer:
    decide = admission.mutate if path == "/mutate" else admission.validate
    return app_module.answer(
        json.dumps(body).encode(),
        decide,
        path=path,
        state=snap if snap is not None else _snapshot(),
        config=CONFIG,
    )


def _response(body: Obj, path: str, snap: state.Snapshot | None = None) -> Obj:
    result = _answer(body, path, snap)
    assert result.status == 200, result.body
    answer: Obj = json.loads(result.body)["response"]
    assert answer["uid"] == body["request"]["uid"]
    return answer


def _snapshot(**extra: Any) -> state.Snapshot:
    return state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu")], **extra)


def _checkpoint_body(cp: Obj, namespace: str) -> Obj:
    return support.request_for(
        cp,
        group=keys.GROUP,
        version="v1alpha1",
        kind="Checkpoint",
        resource="checkpoints",
        namespace=namespace,
    )


def _dump(cp: Any) -> Obj:
    data: Obj = cp.model_dump(by_alias=True, mode="json", exclude_none=True)
    return data


# --- item 2: a Checkpoint may not claim another namespace's lineage -------------------------


def test_a_checkpoint_naming_another_namespaces_lineage_is_refused() -> None:
    team_b = support.lineage_of(support.kueue_pod(), namespace="default")
    forged = _dump(support.make_checkpoint("cp-evil", lineage=team_b))
    forged["metadata"]["namespace"] = "evil"
    answer = _response(_checkpoint_body(forged, "evil"), "/validate")
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    assert "spec.lineage.namespace" in answer["status"]["message"]
    assert "'evil'" in answer["status"]["message"]


def test_a_checkpoint_of_its_own_namespace_is_allowed() -> None:
    own = support.lineage_of(support.kueue_pod())
    good = _dump(support.make_checkpoint("cp", lineage=own))
    assert _response(_checkpoint_body(good, "default"), "/validate")["allowed"] is True


def _forged_elsewhere(pod_lineage: Any) -> Any:
    """A newer Succeeded Checkpoint stored in ``evil/`` that names ``pod_lineage``."""
    forged = support.make_checkpoint("cp-evil", lineage=pod_lineage, minutes_ago=1)
    forged.metadata.namespace = "evil"
    return forged


def test_a_checkpoint_in_another_namespace_is_never_offered_to_the_lineages_pods() -> None:
    """Before: the webhook chose evil/cp-evil (newest) and the pod's own validation then
    denied every new pod of the Job with 403 "no Checkpoint 'cp-evil' in namespace default"."""
    pod = support.kueue_pod()
    pod_lineage = support.lineage_of(pod)
    own = support.make_checkpoint("cp-own", lineage=pod_lineage, minutes_ago=30)
    snap = _snapshot(checkpoints=[own, _forged_elsewhere(pod_lineage)])
    assert [c.name for c in snap.checkpoints_of(pod_lineage)] == ["cp-own"]
    answer = _response(support.request_for(pod), "/mutate", snap)
    patched = support.apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    assert patched["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "cp-own"
    again = _response(support.request_for(patched), "/validate", snap)
    assert again["allowed"] is True, again


def test_retention_and_lookups_are_keyed_by_the_objects_own_namespace() -> None:
    """Before: retention grouped by ``spec.lineage`` and expired the good default/cp-own
    (keep: 1) because evil/cp-evil, newer, claimed the same lineage."""
    pod_lineage = support.lineage_of(support.kueue_pod())
    own = support.make_checkpoint("cp-own", lineage=pod_lineage, minutes_ago=30)
    forged = _forged_elsewhere(pod_lineage)
    keep_one = policy_model.load({"metadata": {"name": "p"}, "spec": {"retention": {"keep": 1}}})
    doomed = catalog.retention([own, forged], policy=keep_one)
    assert own not in doomed
    assert [c.name for c in catalog.of_lineage([own, forged], pod_lineage)] == ["cp-own"]


# --- item 8: checks as strong as the docs ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/ckpt/{own}/pod-uid", True),
        ("/ckpt/{own}", True),
        ("/ckpt//{own}/./pod-uid/", True),
        ("/etc/{own}/pod-uid", False),  # the directory's name elsewhere: was allowed
        ("/ckpt/x/../{own}/p", True),  # normalises into the lineage
        ("/ckpt/{own}/../../other/p", False),
        ("/ckpt/{own}-evil/p", False),  # a sibling sharing the prefix
        ("ckpt/{own}/p", False),  # relative
        ("/ckpt/{own}/p\0x", False),
    ],
)
def test_inside_lineage_compares_normalised_path_prefixes(path: str, inside: bool) -> None:
    pod_lineage = support.lineage_of(support.kueue_pod())
    own = lineage.lineage_dir(pod_lineage)
    found = validation.inside_lineage(path.format(own=own), pod_lineage, mount_path="/ckpt/")
    assert found is inside


def test_restore_env_under_the_lineage_name_but_outside_the_mount_is_denied() -> None:
    pod = support.kueue_pod()
    own = lineage.lineage_dir(support.lineage_of(pod))
    pod["spec"]["containers"][0]["env"] = [
        {"name": keys.ENV_RESTORE_FROM, "value": f"/etc/{own}/prev-uid"}
    ]
    answer = _response(support.request_for(pod), "/validate")
    assert answer["status"]["code"] == 403
    assert "outside lineage" in answer["status"]["message"]


def test_a_bare_pod_created_with_the_checkpoint_finalizer_is_refused() -> None:
    """Recorded: an admin created a bare pod carrying ``kontinue.dev/checkpoint`` (fixture 35);
    docs/api.md says users may not set it."""
    body = support.recorded("35-")
    assert keys.CHECKPOINT_FINALIZER in body["request"]["object"]["metadata"]["finalizers"]
    answer = _response(body, "/validate")
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    assert "metadata.finalizers" in answer["status"]["message"]


def test_the_finalizer_without_our_lineage_annotation_is_refused_on_a_job_pod() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["finalizers"] = [keys.CHECKPOINT_FINALIZER]
    answer = _response(support.request_for(pod, username="alice"), "/validate")
    assert answer["status"]["code"] == 403


def test_a_pod_the_webhook_plumbed_passes_validation_with_its_finalizer() -> None:
    pod = support.kueue_pod()
    mutated = _response(support.request_for(pod), "/mutate")
    plumbed = support.apply_patch(pod, json.loads(base64.b64decode(mutated["patch"])))
    assert keys.CHECKPOINT_FINALIZER in plumbed["metadata"]["finalizers"]
    assert _response(support.request_for(plumbed), "/validate")["allowed"] is True


def test_adding_the_finalizer_on_update_is_refused_and_removing_it_is_not() -> None:
    old = support.recorded_object("03-")
    new = copy.deepcopy(old)
    finalizers = new["metadata"].get("finalizers", [])
    new["metadata"]["finalizers"] = [*finalizers, keys.CHECKPOINT_FINALIZER]
    added = support.request_for(new, operation="UPDATE", old=old, username="alice")
    assert _response(added, "/validate")["status"]["code"] == 403
    removed = support.request_for(old, operation="UPDATE", old=new, username="alice")
    assert _response(removed, "/validate")["allowed"] is True


# --- item 7: malformed input is a clear 400 or allowed-with-warning, never a 500 -------------


def _malformed_pods() -> list[tuple[str, Obj]]:
    base = support.kueue_pod()
    cases: list[tuple[str, Obj]] = []
    edits: list[tuple[str, Callable[[Obj], object]]] = [
        ("metadata is a list", lambda p: p.__setitem__("metadata", ["x"])),
        ("annotations is a list", lambda p: p["metadata"].__setitem__("annotations", ["x"])),
        ("labels is a string", lambda p: p["metadata"].__setitem__("labels", "x")),
        ("a label value is a number", lambda p: p["metadata"]["labels"].__setitem__("a", 1)),
        ("finalizers holds a map", lambda p: p["metadata"].__setitem__("finalizers", [{}])),
        ("no spec", lambda p: p.pop("spec")),
        ("spec is a list", lambda p: p.__setitem__("spec", [])),
        ("a container is null", lambda p: p["spec"]["containers"].append(None)),
        ("env is a map", lambda p: p["spec"]["containers"][0].__setitem__("env", {})),
        # found by make fuzz: the GPU count read limits raw ("float is not iterable")
        (
            "resource limits is a number",
            lambda p: p["spec"]["containers"][0].__setitem__("resources", {"limits": 1.5}),
        ),
    ]
    for name, edit in edits:
        pod = copy.deepcopy(base)
        edit(pod)
        cases.append((name, pod))
    return cases


@pytest.mark.parametrize(("name", "pod"), _malformed_pods(), ids=[c[0] for c in _malformed_pods()])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_malformed_pod_is_denied_400_by_validation_and_admitted_untouched_by_mutation(
    name: str, pod: Obj, operation: str
) -> None:
    old = support.kueue_pod() if operation == "UPDATE" else None
    body = support.request_for(pod, operation=operation, old=old, username="alice")
    denied = _response(body, "/validate")
    assert denied["allowed"] is False, name
    assert denied["status"]["code"] == 400
    assert "malformed object" in denied["status"]["message"]
    admitted = _response(body, "/mutate")
    assert admitted["allowed"] is True
    assert "patch" not in admitted
    if operation == "CREATE":
        assert any("not plumbed" in w for w in admitted["warnings"])


def test_a_job_template_without_spec_gets_no_patch_that_cannot_apply() -> None:
    """Found by make fuzz: a patch adding ``/spec/template/spec/initContainers``."""
    job = support.recorded_object("01-")
    job["metadata"]["labels"][keys.KUEUE_CLUSTER_QUEUE_LABEL] = "cq-gpu"
    del job["spec"]["template"]["spec"]
    body = support.request_for(job, group="batch", kind="Job", resource="jobs")
    answer = _response(body, "/mutate")
    assert answer["allowed"] is True
    assert "patch" not in answer


def test_a_job_without_spec_gets_no_patch_that_cannot_apply() -> None:
    """Before: /mutate answered a patch adding ``/spec/podReplacementPolicy`` to a Job with no
    ``spec``; the apiserver cannot apply it."""
    job = support.recorded_object("01-")
    job["metadata"]["labels"][keys.KUEUE_CLUSTER_QUEUE_LABEL] = "cq-gpu"
    del job["spec"]
    body = support.request_for(job, group="batch", kind="Job", resource="jobs")
    answer = _response(body, "/mutate")
    assert answer["allowed"] is True
    assert "patch" not in answer


def test_a_completion_index_that_is_a_superscript_digit_is_a_clear_warning() -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: the pod was admitted unplumbed with
    "internal error" (a traceback in the log). Indices are now ASCII digits only
    (kontinue/identity.py): the pod is admitted with a warning that names the annotation."""
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "²"}
    pod_lineage = support.lineage_of(pod)
    snap = _snapshot(checkpoints=[support.make_checkpoint("cp", lineage=pod_lineage)])
    answer = _response(support.request_for(pod), "/mutate", snap)
    assert answer["allowed"] is True
    assert not any("internal error" in w for w in answer["warnings"])
    assert any(keys.JOB_COMPLETION_INDEX_ANNOTATION in w for w in answer["warnings"])


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[]", b'{"apiVersion": "admission.k8s.io/v1"}', b"\xff\xfe"],
)
def test_an_unreadable_review_is_a_plain_400(body: bytes) -> None:
    result = app_module.answer(
        body, admission.validate, path="/validate", state=_snapshot(), config=CONFIG
    )
    assert result.status == 400
    assert result.content_type == "text/plain"
    assert result.body


# --- issue 20 item 4: answers stay small whatever the input ---------------------------------


def test_100k_null_owner_references_get_a_short_answer() -> None:
    """Before: 100,003 field errors in a 9.9 MB message."""
    pod = support.kueue_pod()
    pod["metadata"]["ownerReferences"] = [None] * 100_000
    result = _answer(support.request_for(pod, username="alice"), "/validate")
    assert result.status == 200
    assert len(result.body) < 4096
    message = json.loads(result.body)["response"]["status"]["message"]
    assert "100000 items" in message


def test_many_field_errors_are_named_a_few_and_counted() -> None:
    pod = support.kueue_pod()
    bad = {"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u", "controller": "maybe"}
    pod["metadata"]["ownerReferences"] = [bad] * 1000  # well-shaped, each one invalid
    answer = _response(support.request_for(pod, username="alice"), "/validate")
    message = answer["status"]["message"]
    assert message.count("metadata.ownerReferences[") == validation.MAX_ERRORS
    assert "and 995 more errors" in message
    assert len(message) <= review.MAX_MESSAGE


def test_a_verdict_with_a_huge_message_and_many_warnings_is_sent_bounded() -> None:
    verdict = review.Verdict(
        allowed=False, code=422, reason="Invalid", message="x" * 10**6, warnings=("w" * 999,) * 50
    )
    sent = review.response("uid-1", verdict)["response"]
    assert len(sent["status"]["message"]) == review.MAX_MESSAGE
    assert sent["status"]["message"].endswith("more characters)")
    assert len(sent["warnings"]) == review.MAX_WARNINGS
    assert all(len(w) <= review.MAX_WARNING for w in sent["warnings"])
    assert "43 more warnings" in sent["warnings"][-1]


def test_a_checkpoint_with_thousands_of_bad_members_names_the_first_few() -> None:
    """Before: pydantic listed all 20,000 (220 ms of the event loop, then capped)."""
    own = support.lineage_of(support.kueue_pod())
    cp = _dump(support.make_checkpoint("cp", lineage=own))
    cp["spec"]["members"] = [{"podName": "p", "podUid": "u", "index": i - 5} for i in range(20_000)]
    answer = _response(_checkpoint_body(cp, "default"), "/validate")
    message = answer["status"]["message"]
    assert "spec.members[0].index" in message
    assert "spec.members[5]" not in message  # index 0 onwards is valid
    assert message.count("spec.members[") == 5


def test_a_checkpoint_with_a_long_valid_member_list_is_allowed() -> None:
    own = support.lineage_of(support.kueue_pod())
    cp = _dump(support.make_checkpoint("cp", lineage=own))
    cp["spec"]["members"] = [
        {"podName": f"p{i}", "podUid": f"u{i}", "index": i} for i in range(500)
    ]
    cp["status"]["members"] = [{"podName": f"p{i}", "state": "Saved"} for i in range(500)]
    assert _response(_checkpoint_body(cp, "default"), "/validate")["allowed"] is True
    cp["status"]["members"][300]["state"] = "Bogus"
    message = _response(_checkpoint_body(cp, "default"), "/validate")["status"]["message"]
    assert "status.members[300].state" in message


def test_annotations_over_the_kubernetes_total_are_malformed() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {f"k{i}": "v" * 100 for i in range(3000)}  # ~300 KiB
    answer = _response(support.request_for(pod, username="alice"), "/validate")
    assert answer["status"]["code"] == 400
    assert "may not exceed 262144 bytes" in answer["status"]["message"]


def test_an_object_whose_namespace_is_not_the_requests_is_malformed() -> None:
    """Found by the fuzz suite: the mutation looked checkpoints up by the pod's namespace and
    the validation by the request's, so our own mutation was denied. kube-apiserver never sends
    such a review (it refuses the mismatch before admission)."""
    pod = support.kueue_pod()
    pod["metadata"]["namespace"] = "default"
    body = support.request_for(pod, namespace="other")
    denied = _response(body, "/validate")
    assert denied["status"]["code"] == 400
    assert (
        "metadata.namespace: 'default' is not the request's 'other'" in denied["status"]["message"]
    )
    admitted = _response(body, "/mutate")
    assert "patch" not in admitted


def _opted_in_jobset(spec: Any) -> Obj:
    return {
        "apiVersion": f"{keys.JOBSET_GROUP}/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-gpu"}},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (None, "spec"),
        ({"replicatedJobs": {"name": "w"}}, "spec.replicatedJobs"),
        ({"replicatedJobs": [{"name": "w"}]}, "spec.replicatedJobs[0].template"),
        ({"replicatedJobs": [{"template": {"spec": {}}}]}, "spec.replicatedJobs[0].name"),
        (
            {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {}}}}]},
            "spec.replicatedJobs[0].template.spec.template.spec",
        ),
        (
            {
                "replicatedJobs": [
                    {"name": "w", "template": {"metadata": {"annotations": []}, "spec": {}}}
                ]
            },
            "spec.replicatedJobs[0].template.metadata.annotations",
        ),
    ],
)
def test_a_malformed_jobset_is_admitted_untouched_naming_the_field(spec: Any, named: str) -> None:
    """A custom resource reaches the mutating webhooks before its schema is checked (the
    apiserver validates after mutating admission), so these can come from a real apiserver; the
    rules, which patch paths under each template, must not read them."""
    body = support.request_for(
        _opted_in_jobset(spec),
        group=keys.JOBSET_GROUP,
        version="v1alpha2",
        kind="JobSet",
        resource="jobsets",
    )
    answer = _response(body, "/mutate")
    assert answer["allowed"] is True
    assert "patch" not in answer
    (warning,) = answer["warnings"]
    assert f"{named}:" in warning, warning
