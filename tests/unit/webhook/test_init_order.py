"""Issue 20 item 3: the restore container among native sidecars and the user's init containers.

The pods are the recorded job-controller pod (tests/fixtures/webhook/admission/03-...) carrying
the init containers of the pod a real kubelet v1.36.2 ran with an ordinary init container and a
native sidecar (tests/fixtures/kubelet/manifests/06-init-and-native-sidecar.yaml; how it was
recorded: tests/fixtures/kubelet/RECORDING.md), in the recorded order and the other one.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kontinue import keys
from kontinue import restore as restore_program
from tests import fixtures
from tests.unit.webhook import support
from webhook import admission, init_order, job_plumbing, plumbing, review, settings, state

CONFIG = settings.Settings(image="registry.example/kontinue:test")
Obj = dict[str, Any]
RECORDED = fixtures.load_one(
    fixtures.FIXTURES / "kubelet" / "manifests" / "06-init-and-native-sidecar.yaml"
)
INIT, SIDECAR = copy.deepcopy(RECORDED["spec"]["initContainers"])
assert (INIT["name"], SIDECAR["name"]) == ("init", "sidecar")
assert SIDECAR["restartPolicy"] == "Always"
assert "restartPolicy" not in INIT
MOUNT = "/kontinue/checkpoints"  # the default policy's mountPath


def _pod(*inits: Obj) -> Obj:
    pod = support.kueue_pod()
    pod["spec"]["initContainers"] = [copy.deepcopy(c) for c in inits]
    return pod


def _snapshot(pod: Obj, *, restore: bool) -> state.Snapshot:
    checkpoints = (
        [support.make_checkpoint("cp", lineage=support.lineage_of(pod))] if restore else []
    )
    return state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-gpu")], checkpoints=checkpoints
    )


def _mutated(pod: Obj, *, restore: bool) -> tuple[Obj, review.Verdict]:
    request = support.parsed(support.request_for(pod))
    verdict = admission.mutate(request, state=_snapshot(pod, restore=restore), config=CONFIG)
    out = support.apply_patch(pod, verdict.patch)
    assert support.pod_errors(out) == []
    return out, verdict


def _names(pod: Obj) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers") or []]


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


def _mounts(container: Obj) -> dict[str, Obj]:
    return {m["name"]: m for m in container.get("volumeMounts") or []}


def _assert_sees_the_restored_state(container: Obj, *, restore: bool) -> None:
    env = _env(container)
    assert env[keys.ENV_POD_UID]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env[keys.ENV_MEMBER]["value"] == "index=0"
    assert keys.ENV_CHECKPOINT_DIR not in env  # saving is the main containers' business
    mounts = _mounts(container)
    assert mounts[keys.CHECKPOINT_VOLUME] == {
        "name": keys.CHECKPOINT_VOLUME,
        "mountPath": MOUNT,
        "readOnly": True,
    }
    if restore:
        assert env[keys.ENV_RESTORE_FROM]["value"] == plumbing.RESTORE_LINK
        assert env[keys.ENV_RESTORE_MEMBER]["value"] == "index=0"
        assert mounts[plumbing.RESTORE_VOLUME] == {
            "name": plumbing.RESTORE_VOLUME,
            "mountPath": plumbing.RESTORE_DIR,
            "readOnly": True,
        }
    else:
        assert keys.ENV_RESTORE_FROM not in env
        assert keys.ENV_RESTORE_MEMBER not in env
        assert plumbing.RESTORE_VOLUME not in mounts


def test_sidecar_first_the_restore_goes_after_it_and_the_users_init_sees_the_restore() -> None:
    out, _ = _mutated(_pod(SIDECAR, INIT), restore=True)
    assert _names(out) == ["sidecar", keys.RESTORE_INIT_CONTAINER, "init"]
    sidecar, restore_container, init = out["spec"]["initContainers"]
    assert sidecar == SIDECAR  # a sidecar starts before the restore: left as it is
    assert restore_container["command"] == list(restore_program.COMMAND)
    _assert_sees_the_restored_state(init, restore=True)
    # the user's own fields are kept
    assert (init["command"], init["image"]) == (INIT["command"], INIT["image"])


def test_recorded_order_init_then_sidecar_the_restore_goes_after_the_sidecar() -> None:
    """The recorded pod lists the init container first: it runs before the sidecar has
    started, so before anything a sidecar mounts is readable, and before the restore."""
    out, _ = _mutated(_pod(INIT, SIDECAR), restore=True)
    assert _names(out) == ["init", "sidecar", keys.RESTORE_INIT_CONTAINER]
    assert out["spec"]["initContainers"][:2] == [INIT, SIDECAR]  # both untouched


def test_without_sidecars_the_restore_is_first_and_every_init_sees_it() -> None:
    second = {**copy.deepcopy(INIT), "name": "prepare"}
    out, _ = _mutated(_pod(INIT, second), restore=True)
    assert _names(out) == [keys.RESTORE_INIT_CONTAINER, "init", "prepare"]
    for container in out["spec"]["initContainers"][1:]:
        _assert_sees_the_restored_state(container, restore=True)


def test_a_cold_start_gives_the_users_init_the_same_view_without_the_link() -> None:
    pod = _pod(SIDECAR, restore_program.stand_in(CONFIG.image), INIT)
    out, _ = _mutated(pod, restore=False)
    assert _names(out) == ["sidecar", "init"]  # the template's stand-in is removed
    assert out["spec"]["initContainers"][0] == SIDECAR
    _assert_sees_the_restored_state(out["spec"]["initContainers"][1], restore=False)


def test_either_webhook_order_gives_the_same_pod() -> None:
    """A storage webhook that inserts its sidecar at index 0 (gcs-fuse-csi-driver
    pkg/webhook/injection.go) after Kontinue, or before it: the same order."""
    kontinue_first, _ = _mutated(_pod(INIT), restore=True)
    kontinue_first["spec"]["initContainers"].insert(0, copy.deepcopy(SIDECAR))
    sidecar_first, _ = _mutated(_pod(SIDECAR, INIT), restore=True)
    assert _names(kontinue_first) == _names(sidecar_first)
    assert _names(sidecar_first) == ["sidecar", keys.RESTORE_INIT_CONTAINER, "init"]


def test_the_job_template_puts_the_stand_in_where_the_pod_gets_the_restore() -> None:
    """The Job's template (plumb_job) and then its pod (plumb_pod): the stand-in sits after the
    sidecar, and the pod's restore replaces it at that place."""
    job = support.recorded_object("01-")
    job["metadata"]["labels"] = {keys.KUEUE_QUEUE_NAME_LABEL: "lq-on"}
    template = job["spec"]["template"]["spec"]
    template["initContainers"] = [copy.deepcopy(SIDECAR), copy.deepcopy(INIT)]
    plumbed = support.apply_patch(job, job_plumbing.plumb_job(job, image=CONFIG.image).patch)
    inits = plumbed["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["sidecar", keys.RESTORE_INIT_CONTAINER, "init"]
    assert restore_program.is_stand_in(inits[1])

    out, _ = _mutated(_pod(*inits), restore=True)
    assert _names(out) == ["sidecar", keys.RESTORE_INIT_CONTAINER, "init"]
    assert not restore_program.is_stand_in(out["spec"]["initContainers"][1])
    _assert_sees_the_restored_state(out["spec"]["initContainers"][2], restore=True)


def test_a_users_kontinue_variable_in_an_init_container_is_replaced_with_a_warning() -> None:
    init = {**copy.deepcopy(INIT), "env": [{"name": keys.ENV_MEMBER, "value": "mine"}]}
    out, verdict = _mutated(_pod(SIDECAR, init), restore=True)
    env = out["spec"]["initContainers"][2]["env"]
    assert [e["value"] for e in env if e["name"] == keys.ENV_MEMBER] == ["index=0"]
    assert any("init: KONTINUE_MEMBER is set by Kontinue" in w for w in verdict.warnings)


def test_an_init_container_with_another_volume_at_the_checkpoint_path_stays_unplumbed() -> None:
    pod = _pod(
        SIDECAR, {**copy.deepcopy(INIT), "volumeMounts": [{"name": "data", "mountPath": MOUNT}]}
    )
    pod["spec"]["volumes"].append({"name": "data", "emptyDir": {}})
    request = support.parsed(support.request_for(pod))
    verdict = admission.mutate(request, state=_snapshot(pod, restore=True), config=CONFIG)
    assert verdict.patch == ()
    assert any("container init already mounts data" in w for w in verdict.warnings)


@pytest.mark.parametrize(
    ("inits", "index", "viewers"),
    [
        ([], 0, []),
        ([INIT], 0, [0]),
        ([SIDECAR], 1, []),
        ([SIDECAR, INIT], 1, [1]),
        ([INIT, SIDECAR], 2, []),
        ([SIDECAR, INIT, SIDECAR, INIT], 3, [3]),
    ],
)
def test_the_rule(inits: list[Obj], index: int, viewers: list[int]) -> None:
    assert init_order.restore_index(inits) == index
    assert init_order.after_restore(inits) == viewers
