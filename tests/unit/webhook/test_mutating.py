"""Mutation rules, pure: recorded AdmissionReviews + a cache snapshot -> patch, applied and
validated the way the apiserver would. Over-HTTPS coverage is in tests/integration/webhook/.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kontinue import keys, lineage, optin
from kontinue import restore as restore_program
from tests import fixtures
from tests.unit.webhook import support
from webhook import admission, job_plumbing, plumbing, review, settings, state

CONFIG = settings.Settings(image="registry.example/kontinue:test")
Obj = dict[str, Any]


def _snapshot(**extra: Any) -> state.Snapshot:
    return state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-gpu"), support.cluster_queue("cq-plain")],
        **extra,
    )


def _mutate(pod: Obj, snap: state.Snapshot, **kwargs: Any) -> review.Verdict:
    request = support.parsed(support.request_for(pod, **kwargs))
    return admission.mutate(request, state=snap, config=CONFIG)


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


def test_opted_in_pod_gets_checkpoint_plumbing_and_stays_valid() -> None:
    pod = support.kueue_pod()
    verdict = _mutate(pod, _snapshot())
    assert verdict.allowed
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []

    meta, spec = out["metadata"], out["spec"]
    expected_lineage = lineage.annotation_value(support.lineage_of(pod))
    assert meta["annotations"][keys.LINEAGE_ANNOTATION] == expected_lineage
    # the label the bridge's pod watch selects on, beside the pod's own labels
    assert meta["labels"][keys.PLUMBED_LABEL] == keys.PLUMBED_VALUE
    assert set(pod["metadata"]["labels"].items()) <= set(meta["labels"].items())
    assert keys.RESTORE_FROM_ANNOTATION not in meta["annotations"]
    assert "no checkpoint" in meta["annotations"][keys.COLD_START_REASON_ANNOTATION]
    assert meta["finalizers"] == ["batch.kubernetes.io/job-tracking", keys.CHECKPOINT_FINALIZER]
    # default policy: 120 s minimum, the recorded pod already had 120 -> unchanged
    assert spec["terminationGracePeriodSeconds"] == 120
    volume = next(v for v in spec["volumes"] if v["name"] == keys.CHECKPOINT_VOLUME)
    assert volume == {
        "name": keys.CHECKPOINT_VOLUME,
        "persistentVolumeClaim": {"claimName": "kontinue"},
    }
    container = spec["containers"][0]
    env = container["env"]
    # The pod UID comes first so the kubelet can expand $(KONTINUE_POD_UID) in what follows.
    assert env[0] == {
        "name": keys.ENV_POD_UID,
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}},
    }
    lineage_dir = lineage.lineage_dir(support.lineage_of(pod))
    assert env[1] == {
        "name": keys.ENV_CHECKPOINT_DIR,
        "value": f"/kontinue/checkpoints/{lineage_dir}/$(KONTINUE_POD_UID)",
    }
    assert keys.ENV_RESTORE_FROM not in _env(container)
    assert {"name": keys.CHECKPOINT_VOLUME, "mountPath": "/kontinue/checkpoints"} in container[
        "volumeMounts"
    ]
    assert "initContainers" not in spec


def test_label_ops_create_the_map_or_add_to_it() -> None:
    wanted = {keys.PLUMBED_LABEL: "true"}
    assert plumbing.label_ops({}, wanted) == [
        {"op": "add", "path": "/metadata/labels", "value": wanted}
    ]
    assert plumbing.label_ops({"labels": {"a": "b"}}, wanted) == [
        {"op": "add", "path": "/metadata/labels/kontinue.dev~1plumbed", "value": "true"}
    ]
    assert plumbing.label_ops({"labels": {keys.PLUMBED_LABEL: "no"}}, wanted)[0]["op"] == "replace"
    assert plumbing.label_ops({"labels": dict(wanted)}, wanted) == []


def test_pod_of_a_queue_that_did_not_opt_in_gets_no_patch() -> None:
    pod = support.kueue_pod(cluster_queue="cq-plain")
    verdict = _mutate(pod, _snapshot())
    assert verdict == review.allow()


@pytest.mark.parametrize(
    "stem", ["03-", "12-", "23-", "35-"], ids=["job-pod", "dry-run", "preemptor", "bare-pod"]
)
def test_recorded_pods_without_a_queue_get_no_patch(stem: str) -> None:
    request = support.parsed(support.recorded(stem))
    verdict = admission.mutate(request, state=_snapshot(), config=CONFIG)
    assert verdict == review.allow()


@pytest.mark.parametrize("stem", ["06-", "07-", "31-"], ids=["update", "delete", "eviction"])
def test_non_create_requests_are_never_patched(stem: str) -> None:
    body = support.recorded(stem)
    if body["request"].get("object"):
        body["request"]["object"]["metadata"].setdefault("labels", {})[
            keys.KUEUE_CLUSTER_QUEUE_LABEL
        ] = "cq-gpu"
    verdict = admission.mutate(support.parsed(body), state=_snapshot(), config=CONFIG)
    assert verdict == review.allow()


def test_opt_out_annotation_on_the_pod_leaves_it_alone() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    assert _mutate(pod, _snapshot()) == review.allow()


def test_bare_pod_in_an_opted_in_queue_is_left_alone_with_a_warning() -> None:
    pod = support.recorded_object("35-")
    pod["metadata"]["labels"] = {keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-gpu"}
    verdict = _mutate(pod, _snapshot())
    assert verdict.patch == ()
    assert "no controller" in verdict.warnings[0]


def test_grace_period_is_raised_to_the_policy_minimum_but_never_lowered() -> None:
    snap = _snapshot(policies=[support.checkpoint_policy("default", support.HOSTPATH_POLICY)])
    pod = support.kueue_pod()
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert out["spec"]["terminationGracePeriodSeconds"] == 300

    pod["spec"]["terminationGracePeriodSeconds"] = 900
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert out["spec"]["terminationGracePeriodSeconds"] == 900

    del pod["spec"]["terminationGracePeriodSeconds"]  # defaulted to 30 by the apiserver later
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert out["spec"]["terminationGracePeriodSeconds"] == 300


def test_host_path_policy_named_by_the_queue() -> None:
    snap = state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-gpu", policy="dev")],
        policies=[support.checkpoint_policy("dev", support.HOSTPATH_POLICY)],
    )
    pod = support.kueue_pod()
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    volume = next(v for v in out["spec"]["volumes"] if v["name"] == keys.CHECKPOINT_VOLUME)
    assert volume["hostPath"] == {"path": "/var/lib/kontinue", "type": "DirectoryOrCreate"}
    assert _env(out["spec"]["containers"][0])[keys.ENV_CHECKPOINT_DIR]["value"].startswith("/ckpt/")


def test_missing_named_policy_leaves_the_pod_alone_with_a_warning() -> None:
    snap = state.Snapshot.of(cluster_queues=[support.opted_in_cq("cq-gpu", policy="gone")])
    verdict = _mutate(support.kueue_pod(), snap)
    assert verdict.patch == ()
    assert "'gone'" in verdict.warnings[0]


def test_user_values_of_reserved_env_are_replaced_not_duplicated() -> None:
    pod = support.kueue_pod()
    pod["spec"]["containers"][0]["env"] = [
        {"name": "A", "value": "1"},
        {"name": keys.ENV_RESTORE_FROM, "value": "/elsewhere"},
        {"name": keys.ENV_CHECKPOINT_DIR, "value": "/mine"},
    ]
    verdict = _mutate(pod, _snapshot())
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    env = _env(out["spec"]["containers"][0])
    assert env["A"] == {"name": "A", "value": "1"}
    assert keys.ENV_RESTORE_FROM not in env
    assert env[keys.ENV_CHECKPOINT_DIR]["value"] != "/mine"
    assert any("was replaced" in w for w in verdict.warnings)


def test_mount_path_clash_leaves_the_pod_unplumbed() -> None:
    pod = support.kueue_pod()
    pod["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    pod["spec"]["containers"][0]["volumeMounts"].append(
        {"name": "scratch", "mountPath": "/kontinue/checkpoints"}
    )
    verdict = _mutate(pod, _snapshot())
    assert verdict.patch == ()
    assert "already mounts scratch at /kontinue/checkpoints" in verdict.warnings[0]


@pytest.mark.parametrize("restoring", [False, True], ids=["cold", "restoring"])
@pytest.mark.parametrize(
    "mount",
    [
        {"name": "scratch", "mountPath": plumbing.RESTORE_DIR},
        {"name": plumbing.RESTORE_VOLUME, "mountPath": "/elsewhere"},
    ],
    ids=["another-volume-at-the-link-dir", "the-link-volume-elsewhere"],
)
def test_a_clash_with_the_restore_link_mount_leaves_the_pod_unplumbed(
    mount: Obj, restoring: bool
) -> None:
    """Found by the fuzz suite (make fuzz, seed 2966141008): a user's volume at
    /var/run/kontinue got our restore-link mount beside it, a duplicate mountPath the
    apiserver refuses, so the pod could not be created at all."""
    pod = support.kueue_pod()
    pod["spec"]["volumes"].append({"name": mount["name"], "emptyDir": {}})
    pod["spec"]["containers"][0]["volumeMounts"].append(mount)
    checkpoints = [support.make_checkpoint("cp-1", lineage=support.lineage_of(pod))]
    verdict = _mutate(pod, _snapshot(checkpoints=checkpoints if restoring else []))
    assert verdict.patch == ()
    assert f"already mounts {mount['name']} at {mount['mountPath']}" in verdict.warnings[0]
    assert support.pod_errors(support.apply_patch(pod, verdict.patch)) == []


def test_our_volume_name_mounted_elsewhere_leaves_the_pod_unplumbed() -> None:
    pod = support.kueue_pod()
    pod["spec"]["volumes"].append({"name": keys.CHECKPOINT_VOLUME, "emptyDir": {}})
    pod["spec"]["containers"][0]["volumeMounts"].append(
        {"name": keys.CHECKPOINT_VOLUME, "mountPath": "/elsewhere"}
    )
    verdict = _mutate(pod, _snapshot())
    assert verdict.patch == ()
    assert "at /elsewhere" in verdict.warnings[0]


def test_checkpoint_recording_a_path_outside_its_lineage_is_not_restored() -> None:
    pod = support.kueue_pod()
    cp = support.make_checkpoint(
        "cp", lineage=support.lineage_of(pod), status_path="/kontinue/checkpoints/other-ns/x/y"
    )
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    annotations = out["metadata"]["annotations"]
    assert keys.RESTORE_FROM_ANNOTATION not in annotations
    assert "outside lineage" in annotations[keys.COLD_START_REASON_ANNOTATION]
    assert "initContainers" not in out["spec"]


def test_reserved_annotations_forged_before_us_are_overwritten() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {
        keys.RESTORE_FROM_ANNOTATION: "someone-elses",
        keys.LINEAGE_ANNOTATION: "other/Job/x/uid",
    }
    out = support.apply_patch(pod, _mutate(pod, _snapshot()).patch)
    annotations = out["metadata"]["annotations"]
    assert keys.RESTORE_FROM_ANNOTATION not in annotations
    assert annotations[keys.LINEAGE_ANNOTATION] == lineage.annotation_value(support.lineage_of(pod))


# --- restore ------------------------------------------------------------------------------


def _with_checkpoints(pod: Obj, *checkpoints: Any, nodes: Any = ()) -> state.Snapshot:
    return _snapshot(checkpoints=checkpoints, nodes=nodes)


def test_the_job_templates_stand_in_is_replaced_by_a_restore_and_removed_on_a_cold_start() -> None:
    """A pod of a plumbed Job carries the restore container's stand-in from its template
    (kontinue.restore.stand_in): a restore replaces it, a cold start removes it."""
    user_init = {"name": "fetch", "image": "busybox"}
    cold = support.kueue_pod()
    cold["spec"]["initContainers"] = [restore_program.stand_in(CONFIG.image), user_init]
    out = support.apply_patch(cold, _mutate(cold, _snapshot()).patch)
    assert support.pod_errors(out) == []
    assert [c["name"] for c in out["spec"]["initContainers"]] == ["fetch"]

    pod = support.kueue_pod()
    pod["spec"]["initContainers"] = [restore_program.stand_in(CONFIG.image), user_init]
    cp = support.make_checkpoint(
        "train-a-1",
        lineage=support.lineage_of(pod),
        fingerprint={"gpuProduct": "NVIDIA-A100-SXM4-80GB", "cudaDriverMajor": "550"},
    )
    snap = _with_checkpoints(
        pod, cp, nodes=[support.gpu_node("n1", product="NVIDIA-A100-SXM4-80GB")]
    )
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert support.pod_errors(out) == []
    inits = out["spec"]["initContainers"]
    assert [c["name"] for c in inits] == [keys.RESTORE_INIT_CONTAINER, "fetch"]
    assert inits[0]["command"] == ["kontinue-restore"]
    assert not restore_program.is_stand_in(inits[0])


def test_restore_injects_init_container_env_annotation_and_affinity() -> None:
    pod = support.kueue_pod()
    pod_lineage = support.lineage_of(pod)
    cp = support.make_checkpoint(
        "train-a-1",
        lineage=pod_lineage,
        fingerprint={
            "gpuProduct": "NVIDIA-A100-SXM4-80GB",
            "cudaDriverMajor": "550",
            "gpuCount": 1,
        },
    )
    snap = _with_checkpoints(
        pod, cp, nodes=[support.gpu_node("n1", product="NVIDIA-A100-SXM4-80GB")]
    )
    verdict = _mutate(pod, snap)
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    meta, spec = out["metadata"], out["spec"]
    assert meta["annotations"][keys.RESTORE_FROM_ANNOTATION] == "train-a-1"
    assert keys.COLD_START_REASON_ANNOTATION not in meta["annotations"]

    init = spec["initContainers"][0]
    assert init["name"] == keys.RESTORE_INIT_CONTAINER
    assert init["image"] == CONFIG.image
    assert init["command"] == ["kontinue-restore"]  # a console script, never `python`
    init_env = _env(init)
    member_dir = (
        f"/kontinue/checkpoints/{lineage.lineage_dir(pod_lineage)}/"
        "11111111-2222-3333-4444-555555555555"
    )
    assert init_env[plumbing.ENV_RESTORE_SOURCE]["value"] == member_dir
    # the identity restored (the pod's own here), which the restore container checks
    assert init_env[keys.ENV_RESTORE_MEMBER]["value"] == init_env[keys.ENV_MEMBER]["value"]
    assert init_env[keys.ENV_WAIT_FOR]["value"] == ""
    assert init_env[keys.ENV_RESTORE_FROM]["value"] == plumbing.RESTORE_LINK
    assert {
        "name": keys.CHECKPOINT_VOLUME,
        "mountPath": "/kontinue/checkpoints",
        "readOnly": True,
    } in init["volumeMounts"]

    main = spec["containers"][0]
    assert _env(main)[keys.ENV_RESTORE_FROM]["value"] == plumbing.RESTORE_LINK
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": keys.CUDA_DRIVER_MAJOR_LABEL, "operator": "In", "values": ["550"]},
                {
                    "key": keys.GPU_PRODUCT_LABEL,
                    "operator": "In",
                    "values": ["NVIDIA-A100-SXM4-80GB"],
                },
            ]
        }
    ]


def test_restore_affinity_is_anded_into_every_existing_term() -> None:
    pod = support.kueue_pod()
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    cp = support.make_checkpoint(
        "cp", lineage=support.lineage_of(pod), fingerprint={"gpuProduct": "H100"}
    )
    snap = _with_checkpoints(pod, cp, nodes=[support.gpu_node("n", product="H100")])
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    for zone, term in zip("ab", terms, strict=True):
        assert term["matchExpressions"] == [
            {"key": "zone", "operator": "In", "values": [zone]},
            {"key": keys.GPU_PRODUCT_LABEL, "operator": "In", "values": ["H100"]},
        ]


def test_node_selector_with_the_same_value_needs_no_affinity() -> None:
    pod = support.kueue_pod()
    pod["spec"]["nodeSelector"] = {keys.GPU_PRODUCT_LABEL: "H100"}
    cp = support.make_checkpoint(
        "cp", lineage=support.lineage_of(pod), fingerprint={"gpuProduct": "H100"}
    )
    snap = _with_checkpoints(pod, cp, nodes=[support.gpu_node("n", product="H100")])
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert "affinity" not in out["spec"]
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "cp"


def test_node_selector_conflict_means_cold_start_never_a_conflicting_pod() -> None:
    pod = support.kueue_pod()
    pod["spec"]["nodeSelector"] = {keys.GPU_PRODUCT_LABEL: "L4"}  # Kueue's flavor, say
    cp = support.make_checkpoint(
        "cp", lineage=support.lineage_of(pod), fingerprint={"gpuProduct": "H100"}
    )
    snap = _with_checkpoints(
        pod, cp, nodes=[support.gpu_node("n", product="H100"), support.gpu_node("m", product="L4")]
    )
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    annotations = out["metadata"]["annotations"]
    assert keys.RESTORE_FROM_ANNOTATION not in annotations
    assert (
        "nodeSelector nvidia.com/gpu.product=L4" in annotations[keys.COLD_START_REASON_ANNOTATION]
    )
    assert "initContainers" not in out["spec"]
    assert "affinity" not in out["spec"]
    assert support.pod_errors(out) == []


def test_incompatible_checkpoint_gives_cold_start_with_the_reason() -> None:
    pod = support.kueue_pod()
    cp = support.make_checkpoint("cp", lineage=support.lineage_of(pod), fingerprint={"gpuCount": 8})
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    assert (
        "gpuCount 8 != pod's 1" in out["metadata"]["annotations"][keys.COLD_START_REASON_ANNOTATION]
    )


def test_checkpoint_of_a_previous_job_with_the_same_name_is_never_used() -> None:
    pod = support.kueue_pod()
    stranger = support.lineage_of(pod).model_copy(update={"owner_uid": "another-uid"})
    cp = support.make_checkpoint("old-job-cp", lineage=stranger)
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    assert keys.RESTORE_FROM_ANNOTATION not in out["metadata"]["annotations"]


def test_previous_incarnation_still_saving_means_wait_for_it_with_fallback() -> None:
    pod = support.kueue_pod()
    pod_lineage = support.lineage_of(pod)
    old = support.make_checkpoint("cp-old", lineage=pod_lineage, minutes_ago=60)
    saving = support.make_checkpoint(
        "cp-new",
        lineage=pod_lineage,
        phase="InProgress",
        minutes_ago=1,
        members=[("prev-pod", "99999999-8888-7777-6666-555555555555", 0)],
    )
    snap = _with_checkpoints(pod, old, saving)
    verdict = _mutate(pod, snap)
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "cp-new"
    init_env = _env(out["spec"]["initContainers"][0])
    assert init_env[keys.ENV_WAIT_FOR]["value"].endswith("/99999999-8888-7777-6666-555555555555")
    assert init_env[plumbing.ENV_WAIT_CHECKPOINT]["value"] == "cp-new"
    assert init_env[plumbing.ENV_RESTORE_SOURCE]["value"].endswith(
        "/11111111-2222-3333-4444-555555555555"
    )
    assert init_env[plumbing.ENV_RESTORE_CHECKPOINT]["value"] == "cp-old"
    assert init_env[plumbing.ENV_WAIT_SECONDS]["value"] == "600"


def test_recorded_member_path_and_completion_index_pick_the_directory() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "1"}
    cp = support.make_checkpoint(
        "cp",
        lineage=support.lineage_of(pod),
        members=[("p0", "uid-0", 0), ("p1", "uid-1", 1)],
    )
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    source = _env(out["spec"]["initContainers"][0])[plumbing.ENV_RESTORE_SOURCE]["value"]
    assert source.endswith("/uid-1")

    assert _env(out["spec"]["containers"][0])[keys.ENV_MEMBER]["value"] == "index=1"
    assert _env(out["spec"]["initContainers"][0])[keys.ENV_MEMBER]["value"] == "index=1"

    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "0"}
    own = lineage.lineage_dir(support.lineage_of(pod))
    recorded_path = support.make_checkpoint(
        "cp2",
        lineage=support.lineage_of(pod),
        status_path=f"/kontinue/checkpoints/{own}/recorded",
        minutes_ago=1,
    )
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, recorded_path)).patch)
    source = _env(out["spec"]["initContainers"][0])[plumbing.ENV_RESTORE_SOURCE]["value"]
    assert source == f"/kontinue/checkpoints/{own}/recorded"


def test_existing_init_containers_run_after_the_restore() -> None:
    pod = support.kueue_pod()
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox"}]
    cp = support.make_checkpoint("cp", lineage=support.lineage_of(pod))
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    assert [c["name"] for c in out["spec"]["initContainers"]] == [
        keys.RESTORE_INIT_CONTAINER,
        "setup",
    ]
    assert support.pod_errors(out) == []


def test_restore_runs_as_the_workload_user() -> None:
    pod = support.kueue_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 1000, "runAsNonRoot": True}
    cp = support.make_checkpoint("cp", lineage=support.lineage_of(pod))
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    assert out["spec"]["initContainers"][0]["securityContext"] == {
        "runAsUser": 1000,
        "runAsNonRoot": True,
    }


def test_multi_container_pod_plumbs_every_main_container() -> None:
    pod = support.kueue_pod()
    sidecar = copy.deepcopy(pod["spec"]["containers"][0])
    sidecar["name"] = "logger"
    del sidecar["volumeMounts"]
    pod["spec"]["containers"].append(sidecar)
    cp = support.make_checkpoint("cp", lineage=support.lineage_of(pod))
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, cp)).patch)
    assert support.pod_errors(out) == []
    for container in out["spec"]["containers"]:
        assert _env(container)[keys.ENV_RESTORE_FROM]["value"] == plumbing.RESTORE_LINK
        assert keys.CHECKPOINT_VOLUME in {m["name"] for m in container["volumeMounts"]}


def test_pod_without_volumes_env_or_annotations_gets_them_created() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "j-",
            "labels": {keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-gpu"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": "u-1",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    cp = support.make_checkpoint("cp", lineage=support.lineage_of(pod))
    verdict = _mutate(pod, _with_checkpoints(pod, cp))
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    assert out["metadata"]["finalizers"] == [keys.CHECKPOINT_FINALIZER]
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "cp"


# --- opt-in lookups -------------------------------------------------------------------------


def _decide(
    labels: dict[str, str], annotations: dict[str, str], snap: state.Snapshot
) -> optin.Decision:

    return optin.decide(optin.Marks(labels, annotations), namespace="team", state=snap)


OPT_IN = state.Snapshot.of(
    cluster_queues=[support.opted_in_cq("cq-on"), support.cluster_queue("cq-off")],
    local_queues=[
        support.local_queue("team", "lq-on", "cq-on"),
        support.local_queue("team", "lq-off", "cq-off"),
    ],
    volcano_queues=[
        support.volcano_queue("vq-on", **{keys.ENABLED_LABEL: "true"}),
        support.volcano_queue("vq-off"),
    ],
    pod_groups=[
        support.pod_group("team", "pg-on", "vq-on"),
        support.pod_group("team", "pg-off", "vq-off"),
    ],
)


@pytest.mark.parametrize(
    ("labels", "annotations", "opted_in", "queue"),
    [
        ({keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-on"}, {}, True, "cq-on"),
        ({keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-off"}, {}, False, ""),
        ({keys.KUEUE_LOCAL_QUEUE_LABEL: "lq-on"}, {}, True, "cq-on"),
        ({keys.KUEUE_QUEUE_NAME_LABEL: "lq-on"}, {}, True, "cq-on"),
        ({keys.KUEUE_QUEUE_NAME_LABEL: "lq-off"}, {}, False, ""),
        ({keys.KUEUE_QUEUE_NAME_LABEL: "lq-missing"}, {}, False, ""),
        ({keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-missing"}, {}, False, ""),
        ({}, {keys.VOLCANO_PODGROUP_ANNOTATION: "pg-on"}, True, "vq-on"),
        ({}, {keys.VOLCANO_PODGROUP_ANNOTATION: "pg-off"}, False, ""),
        (
            {},
            {
                keys.VOLCANO_PODGROUP_ANNOTATION: "pg-later",
                keys.VOLCANO_POD_QUEUE_ANNOTATION: "vq-on",
            },
            True,
            "vq-on",
        ),
        ({}, {keys.VOLCANO_QUEUE_NAME_ANNOTATION: "vq-on"}, True, "vq-on"),
        ({}, {}, False, ""),
        (
            {keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-on"},
            {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"},
            False,
            "",
        ),
        (
            {},
            {
                keys.VOLCANO_PODGROUP_ANNOTATION: "pg-on",
                keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false",
            },
            False,
            "",
        ),
    ],
)
def test_opt_in_lookup(
    labels: dict[str, str], annotations: dict[str, str], opted_in: bool, queue: str
) -> None:
    decision = _decide(labels, annotations, OPT_IN)
    assert decision.opted_in is opted_in, decision.reason
    assert decision.queue == queue
    assert (decision.policy is not None) is opted_in


def test_opt_in_uses_the_cluster_default_policy_when_defined() -> None:
    custom_default = support.checkpoint_policy("default", support.HOSTPATH_POLICY)
    snap = state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-on")], policies=[custom_default]
    )
    decision = _decide({keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-on"}, {}, snap)
    assert decision.policy is custom_default


# --- Jobs ---------------------------------------------------------------------------------


def _job(**spec_changes: Any) -> Obj:
    job = support.recorded_object("01-")
    job["metadata"]["labels"] = {keys.KUEUE_QUEUE_NAME_LABEL: "lq-on"}
    job["metadata"]["namespace"] = "team"
    for key, value in spec_changes.items():
        if value is None:
            job["spec"].pop(key, None)
        else:
            job["spec"][key] = value
    return job


def _mutate_job(job: Obj, snap: state.Snapshot = OPT_IN) -> review.Verdict:
    body = support.request_for(
        job, group="batch", kind="Job", resource="jobs", namespace="team", username="admin"
    )
    return admission.mutate(support.parsed(body), state=snap, config=CONFIG)


OURS = [job_plumbing.DISRUPTION_RULE, restore_program.POD_FAILURE_RULE]


def _container_names_valid(job: Obj) -> None:
    """kubernetes/kubernetes pkg/apis/batch/validation/validation.go
    ``validatePodFailurePolicyRuleOnExitCodes``: a rule's ``containerName`` must be one of the
    template's container or init container names."""
    template = job["spec"]["template"]["spec"]
    names = {c["name"] for c in [*template["containers"], *template.get("initContainers", [])]}
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        name = (rule.get("onExitCodes") or {}).get("containerName")
        assert name is None or name in names, rule


def test_job_without_failure_policy_gets_replacement_policy_and_our_rules() -> None:
    job = _job(podFailurePolicy=None, podReplacementPolicy="TerminatingOrFailed")
    out = support.apply_patch(job, _mutate_job(job).patch)
    assert out["spec"]["podReplacementPolicy"] == "Failed"
    assert out["spec"]["podFailurePolicy"] == {"rules": OURS}
    (stand_in,) = out["spec"]["template"]["spec"]["initContainers"]
    assert stand_in["name"] == keys.RESTORE_INIT_CONTAINER
    assert stand_in["image"] == CONFIG.image
    assert stand_in["command"] == ["kontinue-restore", "--unplumbed"]
    _container_names_valid(out)


def test_job_rules_go_ahead_of_the_users_rules_and_the_stand_in_ahead_of_their_inits() -> None:
    user_rule = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    job = _job(podFailurePolicy={"rules": [user_rule]})
    job["spec"]["template"]["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"runAsUser": 1000}
    out = support.apply_patch(job, _mutate_job(job).patch)
    assert out["spec"]["podFailurePolicy"]["rules"] == [*OURS, user_rule]
    inits = out["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in inits] == [keys.RESTORE_INIT_CONTAINER, "fetch"]
    assert inits[0]["securityContext"] == {"runAsUser": 1000}
    _container_names_valid(out)


def test_recorded_job_with_the_disruption_rule_gains_the_restore_rule_once() -> None:
    job = _job()  # recorded: podFailurePolicy Ignore DisruptionTarget, podReplacementPolicy Failed
    out = support.apply_patch(job, _mutate_job(job).patch)
    assert out["spec"]["podFailurePolicy"]["rules"] == OURS
    _container_names_valid(out)
    assert _mutate_job(out) == review.allow()  # plumbed already: nothing more to do


def test_job_with_restart_on_failure_is_admitted_unchanged_with_a_warning() -> None:
    job = _job(podFailurePolicy=None)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    verdict = _mutate_job(job)
    assert verdict.allowed
    assert verdict.patch == ()
    assert "OnFailure" in verdict.warnings[0]


def test_job_of_a_queue_that_did_not_opt_in_is_not_patched() -> None:
    job = _job(podFailurePolicy=None)
    job["metadata"]["labels"] = {keys.KUEUE_QUEUE_NAME_LABEL: "lq-off"}
    assert _mutate_job(job) == review.allow()


def test_opted_out_job_passes_its_opt_out_to_its_pods() -> None:
    job = _job(podFailurePolicy=None)
    job["metadata"]["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    out = support.apply_patch(job, _mutate_job(job).patch)
    assert out["spec"]["template"]["metadata"]["annotations"] == {
        keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"
    }
    assert "podFailurePolicy" not in out["spec"]


def test_full_rule_list_is_left_alone_with_a_warning() -> None:
    rules = [
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [i + 1]}} for i in range(19)
    ]
    job = _job(podFailurePolicy={"rules": rules})
    verdict = _mutate_job(job)
    out = support.apply_patch(job, verdict.patch)
    assert out["spec"]["podFailurePolicy"]["rules"] == rules
    assert "maximum" in verdict.warnings[0]


def test_pod_whose_labels_are_not_a_map_is_left_alone_with_a_warning() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["labels"] = ["not", "a", "map"]
    verdict = _mutate(pod, _snapshot())
    assert verdict.patch == ()
    assert "metadata.labels is not a map" in verdict.warnings[0]


def test_a_pod_never_restores_another_identitys_member() -> None:
    """Issue 19 item 1: kube-scheduler preempted only index 0 of a 2-pod Indexed Job; the
    newest set holds index 0 alone. A new pod of index 1 restores index 1's own member from the
    older whole-Job set, never index 0's directory (main fell back to "the lowest index")."""
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "1"}
    owner = support.lineage_of(pod)
    whole = support.make_checkpoint(
        "whole", lineage=owner, minutes_ago=10, members=[("a0", "uid-a0", 0), ("a1", "uid-a1", 1)]
    )
    partial = support.make_checkpoint(
        "partial", lineage=owner, minutes_ago=1, members=[("b0", "uid-b0", 0)]
    )
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, whole, partial)).patch)
    init_env = _env(out["spec"]["initContainers"][0])
    assert init_env[plumbing.ENV_RESTORE_SOURCE]["value"].endswith("/uid-a1")
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "whole"

    # Only the partial set: index 1 has nothing of its own, so it starts cold.
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, partial)).patch)
    assert "initContainers" not in out["spec"]
    reason = out["metadata"]["annotations"][keys.COLD_START_REASON_ANNOTATION]
    assert "holds member index=1" in reason

    # Index 0 restores its own newest member from the partial set.
    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "0"}
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, whole, partial)).patch)
    assert _env(out["spec"]["initContainers"][0])[plumbing.ENV_RESTORE_SOURCE]["value"].endswith(
        "/uid-b0"
    )


def test_a_malformed_completion_index_leaves_the_pod_unplumbed_with_a_warning() -> None:
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "\u00b2"}
    verdict = _mutate(pod, _with_checkpoints(pod))
    assert not verdict.patch
    assert any("no member identity" in w for w in verdict.warnings)


def test_a_multi_member_set_still_saving_gates_the_pod_on_the_bridges_verdict() -> None:
    """Issue 11 item 1, wait mode: a pod's own member being complete proves nothing about its
    siblings, so under coupled consistency the pod waits behind the set-verdict gate and its
    restore reads the directory to use from the annotation the bridge writes before ungating."""
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {
        keys.JOB_COMPLETION_INDEX_ANNOTATION: "0",
        keys.RESTORE_MEMBER_ANNOTATION: "forged",
    }
    owner = support.lineage_of(pod)
    old = support.make_checkpoint(
        "cp-old", lineage=owner, minutes_ago=60, members=[("a0", "uid-a0", 0), ("a1", "uid-a1", 1)]
    )
    saving = support.make_checkpoint(
        "cp-new",
        lineage=owner,
        phase="InProgress",
        minutes_ago=1,
        members=[("b0", "uid-b0", 0), ("b1", "uid-b1", 1)],
    )
    verdict = _mutate(pod, _with_checkpoints(pod, old, saving))
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    assert out["spec"]["schedulingGates"] == [{"name": keys.SET_VERDICT_GATE}]
    assert keys.RESTORE_MEMBER_ANNOTATION not in out["metadata"]["annotations"]
    init = out["spec"]["initContainers"][0]
    names = [e["name"] for e in init["env"]]
    # the downward-API variables come before the values that expand them
    assert names.index(keys.ENV_VERDICT_MEMBER) < names.index(keys.ENV_WAIT_FOR)
    assert names.index(keys.ENV_VERDICT_WAIT) < names.index(keys.ENV_WAIT_SECONDS)
    env = _env(init)
    member_ref = env[keys.ENV_VERDICT_MEMBER]["valueFrom"]["fieldRef"]["fieldPath"]
    assert member_ref == f"metadata.annotations['{keys.RESTORE_MEMBER_ANNOTATION}']"
    own = lineage.lineage_dir(owner)
    assert env[keys.ENV_WAIT_FOR]["value"].endswith(f"{own}/$({keys.ENV_VERDICT_MEMBER})")
    assert env[plumbing.ENV_WAIT_SECONDS]["value"] == f"$({keys.ENV_VERDICT_WAIT})"
    assert env[plumbing.ENV_RESTORE_SOURCE]["value"].endswith("/uid-a0")

    # independent consistency trusts the member alone: no gate
    snap = _with_checkpoints(pod, old, saving)
    snap.policies["default"] = support.checkpoint_policy(
        "default", {"restore": {"consistency": "independent"}}
    )
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    assert "schedulingGates" not in out["spec"]


def test_under_shared_every_container_is_told_the_member_it_restores() -> None:
    """Consistency ``shared``: index 1 restores rank 0's member. The restore init-container and
    every main container get ``KONTINUE_RESTORE_MEMBER=index=0`` (what the workload SDK checks
    the manifest against, kontinue_sdk/environment.py) beside ``KONTINUE_MEMBER=index=1`` (what
    its next save records); a user's own value of it is replaced, with a warning."""
    pod = support.kueue_pod()
    pod["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "1"}
    pod["spec"]["containers"][0]["env"] = [{"name": keys.ENV_RESTORE_MEMBER, "value": "mine"}]
    owner = support.lineage_of(pod)
    whole = support.make_checkpoint(
        "cp", lineage=owner, minutes_ago=5, members=[("a0", "uid-a0", 0), ("a1", "uid-a1", 1)]
    )
    snap = _with_checkpoints(pod, whole)
    snap.policies["default"] = support.checkpoint_policy(
        "default", {"restore": {"consistency": "shared"}}
    )
    verdict = _mutate(pod, snap)
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    init = _env(out["spec"]["initContainers"][0])
    assert init[plumbing.ENV_RESTORE_SOURCE]["value"].endswith("/uid-a0")
    for env in (init, _env(out["spec"]["containers"][0])):
        assert env[keys.ENV_MEMBER]["value"] == "index=1"
        assert env[keys.ENV_RESTORE_MEMBER]["value"] == "index=0"
    names = [e["name"] for e in out["spec"]["containers"][0]["env"]]
    assert names.count(keys.ENV_RESTORE_MEMBER) == 1
    assert any(keys.ENV_RESTORE_MEMBER in w and "replaced" in w for w in verdict.warnings)

    # coupled (the default): its own member, and a cold start has no restore variables at all
    out = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod, whole)).patch)
    assert _env(out["spec"]["containers"][0])[keys.ENV_RESTORE_MEMBER]["value"] == "index=1"
    cold = support.apply_patch(pod, _mutate(pod, _with_checkpoints(pod)).patch)
    assert keys.ENV_RESTORE_MEMBER not in _env(cold["spec"]["containers"][0])


def test_a_non_indexed_job_with_parallelism_is_warned_it_can_only_share_state() -> None:
    job = _job(podFailurePolicy=None)
    job["spec"]["parallelism"] = 3
    verdict = _mutate_job(job)
    assert any("NonIndexed Job with parallelism 3" in w for w in verdict.warnings)
    job["spec"]["completionMode"] = "Indexed"
    assert not any("NonIndexed" in w for w in _mutate_job(job).warnings)
    job["spec"].pop("completionMode")
    job["spec"]["parallelism"] = 1
    assert not any("NonIndexed" in w for w in _mutate_job(job).warnings)


def test_a_workload_containers_annotation_naming_no_container_is_a_warning() -> None:
    pod = support.kueue_pod()
    pod["metadata"].setdefault("annotations", {})[keys.WORKLOAD_CONTAINERS_ANNOTATION] = "trainr"
    verdict = _mutate(pod, _snapshot())
    assert verdict.patch
    assert any("'trainr', which match no container" in w for w in verdict.warnings)


def test_the_restore_container_takes_the_workload_containers_security_context() -> None:
    """Not the first container's: an injected proxy listed first must not lend its identity."""
    pod = support.kueue_pod()
    trainer = pod["spec"]["containers"][0]
    trainer["securityContext"] = {"runAsUser": 1000}
    trainer["resources"] = {"limits": {keys.GPU_RESOURCE: "1"}}
    proxy = {"name": "istio-proxy", "image": "proxy:1", "securityContext": {"runAsUser": 1337}}
    pod["spec"]["containers"] = [proxy, trainer]
    cp = support.make_checkpoint(
        "train-a-1",
        lineage=support.lineage_of(pod),
        fingerprint={"gpuProduct": "NVIDIA-A100-SXM4-80GB", "cudaDriverMajor": "550"},
    )
    snap = _with_checkpoints(
        pod, cp, nodes=[support.gpu_node("n1", product="NVIDIA-A100-SXM4-80GB")]
    )
    out = support.apply_patch(pod, _mutate(pod, snap).patch)
    (init,) = out["spec"]["initContainers"]
    assert init["securityContext"] == {"runAsUser": 1000}


# --- JobSets -----------------------------------------------------------------------------
# The child Jobs of a JobSet carry no queue label (the JobSet does), so their only chance to be
# preemption-safe is the JobSet's CREATE: each replicated Job's template plumbed as a Job.


def _jobset(*templates: Obj, labels: dict[str, str] | None = None) -> Obj:
    """A JobSet whose replicated Jobs ``driver``, ``workers``, ... have ``templates`` (each a
    JobTemplateSpec: the recorded Job's spec unless given)."""
    recorded = _job(podFailurePolicy=None, podReplacementPolicy=None)["spec"]
    return {
        "apiVersion": f"{keys.JOBSET_GROUP}/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "train",
            "namespace": "team",
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "lq-on"} if labels is None else labels,
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": name, "replicas": 1, "template": template}
                for name, template in zip(
                    ["driver", "workers", "extra"],
                    templates or ({"spec": copy.deepcopy(recorded)},),
                    strict=False,
                )
            ],
        },
    }


def _template(**spec_changes: Any) -> Obj:
    """A replicated Job's template: the recorded Job's spec, changed as :func:`_job` changes it."""
    job = _job(**{"podFailurePolicy": None, "podReplacementPolicy": None, **spec_changes})
    return {"spec": job["spec"]}


def _mutate_jobset(jobset: Obj, snap: state.Snapshot = OPT_IN) -> review.Verdict:
    body = support.request_for(
        jobset,
        group=keys.JOBSET_GROUP,
        version="v1alpha2",
        kind="JobSet",
        resource="jobsets",
        namespace="team",
        username="admin",
    )
    return admission.mutate(support.parsed(body), state=snap, config=CONFIG)


def _child(jobset: Obj, index: int) -> Obj:
    """The child Job the JobSet controller makes of replicated Job ``index``: its spec is the
    template's, verbatim (kubernetes-sigs/jobset ``constructJob``)."""
    template = jobset["spec"]["replicatedJobs"][index]["template"]
    return {"metadata": copy.deepcopy(template.get("metadata") or {}), "spec": template["spec"]}


def test_each_replicated_job_of_an_opted_in_jobset_is_plumbed_as_a_job() -> None:
    user_rule = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    workers = _template(podFailurePolicy={"rules": [user_rule]})
    workers["spec"]["template"]["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    jobset = _jobset(_template(), workers)
    verdict = _mutate_jobset(jobset)
    out = support.apply_patch(jobset, verdict.patch)
    assert verdict.warnings == ()
    for index, rules in ((0, OURS), (1, [*OURS, user_rule])):
        child = _child(out, index)
        assert child["spec"]["podReplacementPolicy"] == "Failed"
        assert child["spec"]["podFailurePolicy"]["rules"] == rules
        inits = child["spec"]["template"]["spec"]["initContainers"]
        assert inits[0]["name"] == keys.RESTORE_INIT_CONTAINER
        _container_names_valid(child)
        # exactly what the Job webhook would have done to the same Job
        job = {"metadata": {}, "spec": _child(jobset, index)["spec"]}
        assert (
            support.apply_patch(job, job_plumbing.plumb_job(job, image=CONFIG.image).patch)["spec"]
            == child["spec"]
        )
    assert [c["name"] for c in inits] == [keys.RESTORE_INIT_CONTAINER, "fetch"]
    assert out["spec"]["suspend"] is True  # nothing else of the JobSet is touched
    assert {k: v for k, v in out.items() if k != "spec"} == {
        k: v for k, v in jobset.items() if k != "spec"
    }
    assert not _mutate_jobset(out).patch  # plumbed already: nothing more to do


def test_a_jobset_of_a_queue_that_did_not_opt_in_is_not_patched() -> None:
    jobset = _jobset(labels={keys.KUEUE_QUEUE_NAME_LABEL: "lq-off"})
    assert _mutate_jobset(jobset) == review.allow()
    assert _mutate_jobset(_jobset(labels={})) == review.allow()


@pytest.mark.parametrize("policy", ["OnFailure", None])
def test_a_replicated_job_restarting_on_failure_is_unchanged_with_a_warning(
    policy: str | None,
) -> None:
    """Unset is JobSet's default, OnFailure (its defaulting webhook runs before ours): rules
    added to such a template would make every child Job invalid once it is defaulted."""
    driver = _template()
    if policy is None:
        del driver["spec"]["template"]["spec"]["restartPolicy"]
    else:
        driver["spec"]["template"]["spec"]["restartPolicy"] = policy
    jobset = _jobset(driver, _template())
    verdict = _mutate_jobset(jobset)
    out = support.apply_patch(jobset, verdict.patch)
    assert _child(out, 0) == _child(jobset, 0)
    assert _child(out, 1)["spec"]["podFailurePolicy"]["rules"] == OURS
    (warning,) = verdict.warnings
    assert warning.startswith("kontinue: replicatedJob driver: restartPolicy ")
    assert (policy or "unset") in warning


def test_a_replicated_job_with_a_full_rule_list_keeps_it_with_a_warning_naming_it() -> None:
    rules = [
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [i + 1]}} for i in range(19)
    ]
    jobset = _jobset(_template(), _template(podFailurePolicy={"rules": rules}))
    verdict = _mutate_jobset(jobset)
    out = support.apply_patch(jobset, verdict.patch)
    assert _child(out, 1)["spec"]["podFailurePolicy"]["rules"] == rules
    assert _child(out, 0)["spec"]["podFailurePolicy"]["rules"] == OURS
    (warning,) = verdict.warnings
    assert warning.startswith("kontinue: replicatedJob workers: podFailurePolicy already has 19")


def test_a_non_indexed_replicated_job_with_parallelism_is_warned_by_name() -> None:
    jobset = _jobset(_template(parallelism=2), _template(parallelism=2, completionMode="Indexed"))
    (warning,) = _mutate_jobset(jobset).warnings
    assert warning.startswith("kontinue: replicatedJob driver: a NonIndexed Job with parallelism 2")


def test_an_opted_out_jobset_passes_its_opt_out_to_every_pod_template() -> None:
    """The JobSet controller copies none of the JobSet's annotations to its Jobs or pods."""
    jobset = _jobset(_template(), _template())
    jobset["metadata"]["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    verdict = _mutate_jobset(jobset)
    out = support.apply_patch(jobset, verdict.patch)
    for index in (0, 1):
        child = _child(out, index)
        assert "podFailurePolicy" not in child["spec"]
        annotations = child["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}


def test_one_opted_out_replicated_job_is_left_to_itself_and_its_pods_carry_it() -> None:
    driver = _template()
    driver["metadata"] = {"annotations": {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}}
    jobset = _jobset(driver, _template())
    out = support.apply_patch(jobset, _mutate_jobset(jobset).patch)
    driven = _child(out, 0)
    assert "podFailurePolicy" not in driven["spec"]
    assert driven["spec"]["template"]["metadata"]["annotations"] == {
        keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"
    }
    assert _child(out, 1)["spec"]["podFailurePolicy"]["rules"] == OURS


def test_a_jobset_in_a_namespace_without_the_claim_is_unchanged_with_a_warning() -> None:
    snap = state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-on")],
        local_queues=[support.local_queue("team", "lq-on", "cq-on")],
        claims=[],
    )
    verdict = _mutate_jobset(_jobset(), snap)
    assert verdict.patch == ()
    assert any("JobSet" in w for w in verdict.warnings), verdict.warnings


# --- Volcano Jobs -------------------------------------------------------------------------

VOLCANO = state.Snapshot.of(
    volcano_queues=[
        support.volcano_queue("research", **{keys.ENABLED_LABEL: "true"}),
        support.volcano_queue("plain"),
    ]
)


def _vcjob(queue: str | None = "research", **extra: Any) -> Obj:
    """The example vcjob of tests/fixtures/upstream/volcano/examples (a gang of 3, GPUs), with
    the #5885 shape of policies (``PodFailed -> TerminateJob``) next to its own."""
    job = fixtures.load_one(fixtures.UPSTREAM / "volcano/examples/vcjob-gpu-ckpt-train.yaml")
    job["metadata"]["namespace"] = "team"
    if queue is None:
        job["spec"].pop("queue")
    else:
        job["spec"]["queue"] = queue
    job["spec"]["policies"].append({"event": "PodFailed", "action": "TerminateJob"})
    job["spec"].update(extra)
    return job


def _mutate_vcjob(job: Obj, snap: state.Snapshot = VOLCANO) -> review.Verdict:
    body = support.request_for(
        job,
        group="batch.volcano.sh",
        version="v1alpha1",
        kind="Job",
        resource="jobs",
        namespace="team",
        username="admin",
    )
    return admission.mutate(support.parsed(body), state=snap, config=CONFIG)


def test_vcjob_in_an_opted_in_queue_gets_preemption_safe_policies() -> None:
    job = _vcjob()
    verdict = _mutate_vcjob(job)
    out = support.apply_patch(job, verdict.patch)
    # the job's list loses PodEvicted; each task's list gets the exit-143 rule first (a task's
    # list is tried before the job's, and Volcano's admission policy checks only the job's)
    assert out["spec"]["policies"] == [{"event": "PodFailed", "action": "TerminateJob"}]
    for task, before in zip(out["spec"]["tasks"], job["spec"]["tasks"], strict=True):
        assert task["policies"] == [{"exitCode": 143, "action": "SyncJob"}]
        assert {k: v for k, v in task.items() if k != "policies"} == before
    assert out["spec"]["maxRetry"] == job["spec"]["maxRetry"]  # never touched
    assert any("PodEvicted -> RestartJob" in w for w in verdict.warnings)
    assert not _mutate_vcjob(out).patch  # plumbed already: nothing more to do


def test_vcjob_task_policies_are_made_safe_too() -> None:
    job = _vcjob()
    del job["spec"]["policies"]
    job["spec"]["tasks"][1]["policies"] = [
        {"events": ["PodEvicted", "PodFailed"], "action": "RestartTask"}
    ]
    out = support.apply_patch(job, _mutate_vcjob(job).patch)
    assert "policies" not in out["spec"]
    assert out["spec"]["tasks"][1]["policies"] == [
        {"exitCode": 143, "action": "SyncJob"},
        {"events": ["PodFailed"], "action": "RestartTask"},
    ]


def test_vcjob_outside_an_opted_in_queue_is_untouched() -> None:
    assert _mutate_vcjob(_vcjob("plain")) == review.allow()
    assert _mutate_vcjob(_vcjob(None)) == review.allow()  # "default", not opted in here
    assert not _mutate_vcjob(_vcjob(), state.Snapshot.of()).patch


def test_opted_out_vcjob_keeps_its_policies_and_its_pods_carry_the_opt_out() -> None:
    job = _vcjob()
    job["metadata"]["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    out = support.apply_patch(job, _mutate_vcjob(job).patch)
    assert out["spec"]["policies"] == job["spec"]["policies"]
    for task in out["spec"]["tasks"]:
        annotations = task["template"]["metadata"]["annotations"]
        assert annotations[keys.CHECKPOINT_OPT_OUT_ANNOTATION] == "false"


@pytest.mark.parametrize("spec", [None, [], {"tasks": "x", "policies": 3}, {"queue": 7}])
def test_malformed_vcjob_is_admitted_untouched(spec: Any) -> None:
    job = {"metadata": {"name": "x"}, "spec": spec}
    assert not _mutate_vcjob(job).patch
