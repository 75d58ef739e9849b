"""Every admission rule through the real server over HTTPS: the mutation, the no-op path, each
denial path with its status code, the two error channels, and the probes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kontinue import keys, lineage
from tests.integration.webhook import conftest
from tests.unit.webhook import support
from webhook import app as app_module
from webhook import certs, state

Obj = dict[str, Any]


def _snapshot() -> state.Snapshot:
    pod = support.kueue_pod()
    return state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-gpu"), support.cluster_queue("cq-plain")],
        local_queues=[support.local_queue("default", "team-a", "cq-gpu")],
        policies=[support.checkpoint_policy("gpu")],
        checkpoints=[support.make_checkpoint("cp-1", lineage=support.lineage_of(pod))],
    )


@pytest.fixture
async def server(bundle: certs.Bundle) -> AsyncIterator[conftest.Server]:
    async with conftest.running_webhook(bundle, _snapshot()) as running:
        yield running


async def _post(server: conftest.Server, path: str, body: Obj) -> Obj:
    async with server.session.post(server.url + path, json=body) as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "application/json"
        answer: Obj = await response.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    inner: Obj = answer["response"]
    return inner


async def test_opted_in_pod_is_mutated_with_restore(server: conftest.Server) -> None:
    pod = support.kueue_pod()
    answer = await _post(server, "/mutate", support.request_for(pod))
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    out = support.apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    assert support.pod_errors(out) == []
    assert out["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "cp-1"
    assert out["spec"]["initContainers"][0]["name"] == keys.RESTORE_INIT_CONTAINER
    assert keys.CHECKPOINT_FINALIZER in out["metadata"]["finalizers"]


async def test_recorded_job_pod_through_local_queue_is_plumbed(server: conftest.Server) -> None:
    """Recorded pod CREATE; its Job's queue label reaches the pod as Kueue stamps it."""
    body = support.recorded("03-")
    body["request"]["object"]["metadata"]["labels"][keys.KUEUE_LOCAL_QUEUE_LABEL] = "team-a"
    answer = await _post(server, "/mutate", body)
    out = support.apply_patch(
        body["request"]["object"], json.loads(base64.b64decode(answer["patch"]))
    )
    pod_lineage = support.lineage_of(body["request"]["object"])
    assert out["metadata"]["annotations"][keys.LINEAGE_ANNOTATION] == lineage.annotation_value(
        pod_lineage
    )


@pytest.mark.parametrize("stem", ["03-", "06-", "07-", "12-", "31-"])
async def test_no_op_path_returns_no_patch(server: conftest.Server, stem: str) -> None:
    for path in ("/mutate", "/validate"):
        answer = await _post(server, path, support.recorded(stem))
        assert answer == {"uid": support.recorded(stem)["request"]["uid"], "allowed": True}


async def test_job_is_made_preemption_safe(server: conftest.Server) -> None:
    body = support.recorded("01-")
    job = body["request"]["object"]
    del job["spec"]["podFailurePolicy"]
    job["spec"]["podReplacementPolicy"] = "TerminatingOrFailed"
    answer = await _post(server, "/mutate", body)
    out = support.apply_patch(job, json.loads(base64.b64decode(answer["patch"])))
    assert out["spec"]["podReplacementPolicy"] == "Failed"
    assert out["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == (
        "DisruptionTarget"
    )


async def test_job_with_on_failure_gets_a_warning(server: conftest.Server) -> None:
    body = support.recorded("01-")
    job = body["request"]["object"]
    del job["spec"]["podFailurePolicy"]
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    answer = await _post(server, "/mutate", body)
    assert answer["allowed"] is True
    assert "patch" not in answer
    assert "OnFailure" in answer["warnings"][0]


def _denials() -> list[tuple[str, Obj, int, str]]:
    pod = support.kueue_pod()
    cases: list[tuple[str, Obj, int, str]] = []
    policy = {"metadata": {"name": "p"}, "spec": {"minGracePeriodSeconds": -1}}
    cases.append(
        (
            "policy",
            support.request_for(
                policy,
                group="kontinue.dev",
                version="v1alpha1",
                kind="CheckpointPolicy",
                resource="checkpointpolicies",
                namespace=None,
            ),
            422,
            "spec.minGracePeriodSeconds",
        )
    )
    cp = support.make_checkpoint("x", lineage=support.lineage_of(pod)).model_dump(
        mode="json", by_alias=True
    )
    cp["spec"]["trigger"]["source"] = "Cosmic-ray"
    cases.append(
        (
            "checkpoint",
            support.request_for(
                cp,
                group="kontinue.dev",
                version="v1alpha1",
                kind="Checkpoint",
                resource="checkpoints",
            ),
            422,
            "spec.trigger.source",
        )
    )
    for kind, group, version, resource in (
        ("ClusterQueue", keys.KUEUE_GROUP, keys.KUEUE_VERSION, "clusterqueues"),
        ("Queue", keys.VOLCANO_SCHEDULING_GROUP, "v1beta1", "queues"),
    ):
        for labels, field in (
            ({keys.ENABLED_LABEL: "True"}, keys.ENABLED_LABEL),
            ({keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "unknown"}, keys.POLICY_LABEL),
        ):
            cases.append(
                (
                    f"{kind}-{field}",
                    support.request_for(
                        {"metadata": {"name": "q", "labels": labels}},
                        group=group,
                        version=version,
                        kind=kind,
                        resource=resource,
                        namespace=None,
                    ),
                    422,
                    f"metadata.labels[{field}]",
                )
            )
    changed = json.loads(json.dumps(pod))
    changed["metadata"]["annotations"] = {keys.RESTORE_FROM_ANNOTATION: "cp-1"}
    cases.append(
        (
            "pod-update-reserved",
            support.request_for(changed, operation="UPDATE", old=pod, username="alice"),
            403,
            keys.RESTORE_FROM_ANNOTATION,
        )
    )
    forged = json.loads(json.dumps(pod))
    forged["metadata"]["annotations"] = {keys.LINEAGE_ANNOTATION: "default/Job/x/y"}
    cases.append(("pod-forged-lineage", support.request_for(forged), 403, "lineage"))
    other = support.lineage_of(pod).model_copy(update={"namespace": "other"})
    stolen = json.loads(json.dumps(pod))
    stolen["spec"]["containers"][0]["env"] = [
        {"name": keys.ENV_RESTORE_FROM, "value": f"/c/{lineage.lineage_dir(other)}/u"}
    ]
    cases.append(("pod-env-other-namespace", support.request_for(stolen), 403, "outside lineage"))
    return cases


@pytest.mark.parametrize(
    ("name", "body", "code", "says"), _denials(), ids=lambda v: v if isinstance(v, str) else ""
)
async def test_denials_over_https(
    server: conftest.Server, name: str, body: Obj, code: int, says: str
) -> None:
    answer = await _post(server, "/validate", body)
    assert answer["allowed"] is False, name
    assert answer["status"]["code"] == code
    assert says in answer["status"]["message"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<xml/>", "not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "uid"),
    ],
)
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
async def test_malformed_review_is_http_400_with_the_cause(
    server: conftest.Server, path: str, body: bytes, says: str
) -> None:
    async with server.session.post(server.url + path, data=body) as response:
        assert response.status == 400
        assert says in await response.text()


class _Broken(state.Snapshot):
    def cluster_queue(self, name: str) -> Any:
        raise RuntimeError("cache bug")

    def policy(self, name: str) -> Any:
        raise RuntimeError("cache bug")


async def test_a_bug_fails_open_on_mutate_and_is_500_on_validate(bundle: certs.Bundle) -> None:
    async with conftest.running_webhook(bundle, _Broken()) as broken:
        answer = await _post(broken, "/mutate", support.request_for(support.kueue_pod()))
        assert answer["allowed"] is True
        assert "patch" not in answer
        assert "internal error" in answer["warnings"][0]
        body = support.request_for(
            {"metadata": {"name": "q", "labels": {keys.POLICY_LABEL: "x"}}},
            group=keys.KUEUE_GROUP,
            version=keys.KUEUE_VERSION,
            kind="ClusterQueue",
            resource="clusterqueues",
            namespace=None,
        )
        async with broken.session.post(broken.url + "/validate", json=body) as response:
            assert response.status == 500


async def test_probes(bundle: certs.Bundle) -> None:
    synced = {"caches": False}
    readiness = app_module.Readiness({"caches": lambda: synced["caches"]})
    async with conftest.running_webhook(bundle, _snapshot(), readiness=readiness) as server:
        async with server.session.get(server.url + "/healthz") as response:
            assert response.status == 200
        async with server.session.get(server.url + "/readyz") as response:
            assert response.status == 503
            assert "caches" in await response.text()
        synced["caches"] = True
        async with server.session.get(server.url + "/readyz") as response:
            assert response.status == 200
        readiness.draining = True
        async with server.session.get(server.url + "/readyz") as response:
            assert response.status == 503
            assert "draining" in await response.text()


async def test_client_without_our_ca_is_refused(server: conftest.Server) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as stranger:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await stranger.get(server.url + "/healthz")
