"""Admission webhooks called by the emulator over real HTTPS, checked against recorded reviews.

The webhook is a small aiohttp HTTPS server inside the test, with a certificate made by
``cryptography``. Requests are compared field by field with AdmissionReviews a real
kube-apiserver v1.36.2 sent (tests/fixtures/admission, see its README).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from emulator.apiserver import server, tls
from kontinue.kube import api, client, errors, resources
from tests.integration.emulator.conftest import pod

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "admission"
Answer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]] | dict[str, Any]]


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / name).read_text())
    return data


class Webhook:
    """An HTTPS admission webhook that records each AdmissionReview and answers via ``answer``."""

    def __init__(self, *, hosts: list[str]) -> None:
        self.ca = tls.make_ca("webhook-ca")
        self.pair = tls.issue(self.ca, hosts=hosts)
        self.reviews: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.answer: Answer = lambda review: {}
        self.runner: web.AppRunner | None = None
        self.port = 0
        self._handling: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem).decode()

    async def handle(self, request: web.Request) -> web.Response:
        task = asyncio.current_task()
        assert task is not None
        self._handling.add(task)
        try:
            return await self._answer(request)
        finally:
            self._handling.discard(task)

    async def _answer(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append(review)
        self.paths.append(request.path_qs)
        extra = self.answer(review)
        if asyncio.iscoroutine(extra):
            extra = await extra
        assert isinstance(extra, dict)
        response = {"uid": review["request"]["uid"], "allowed": True, **extra}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=tls.server_context(self.pair))
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        """Stop serving; an answer still pending (a deliberately slow one) is cancelled."""
        for task in list(self._handling):
            task.cancel()
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def webhook() -> AsyncIterator[Webhook]:
    hook = Webhook(hosts=["127.0.0.1", "webhook.kontinue-system.svc"])
    await hook.start()
    try:
        yield hook
    finally:
        await hook.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# The rules the recording rig registered (tests/fixtures/admission/README.md).
RECORDED_RULES = [
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE", "DELETE"],
        "resources": ["pods"],
        "scope": "Namespaced",
    },
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["UPDATE"],
        "resources": ["pods/status"],
        "scope": "Namespaced",
    },
]


def configuration(
    kind: str, name: str, client_config: dict[str, Any], **hook: Any
) -> dict[str, Any]:
    webhook = {
        "name": f"{name}.test.local",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "clientConfig": client_config,
        "rules": RECORDED_RULES,
        **hook,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [webhook],
    }


def mutating(name: str, client_config: dict[str, Any], **hook: Any) -> dict[str, Any]:
    return configuration("MutatingWebhookConfiguration", name, client_config, **hook)


# --- field-by-field comparison with the recordings -----------------------------------------------

_VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields")


def _normalize(review: dict[str, Any], *, recorded_side: bool) -> dict[str, Any]:
    """Drop what differs by nature (uids, times, versions) and, from the recording, what the
    emulator documents it does not emulate (managedFields, the service-account token volume)."""
    result = copy.deepcopy(review)
    request = result["request"]
    request.pop("uid")
    request["userInfo"].pop("extra", None)  # the authenticator's credential id
    request["userInfo"].pop("uid", None)
    for key in ("object", "oldObject"):
        obj = request.get(key)
        if not obj:
            continue
        for field in _VOLATILE_META:
            obj["metadata"].pop(field, None)
        if recorded_side:
            obj["spec"].pop("volumes", None)
            for container in obj["spec"]["containers"]:
                container.pop("volumeMounts", None)
    return result


def _differences(sent: Any, want: Any, path: str = "") -> list[str]:
    if isinstance(sent, dict) and isinstance(want, dict):
        found = []
        if list(sent) != list(want) and set(sent) == set(want) and path.count(".") < 1:
            found.append(f"{path or 'request'}: key order {list(sent)} != {list(want)}")
        for key in sorted(set(sent) | set(want)):
            if key not in sent:
                found.append(f"{path}.{key}: missing (recorded {want[key]!r})")
            elif key not in want:
                found.append(f"{path}.{key}: unexpected {sent[key]!r}")
            else:
                found += _differences(sent[key], want[key], f"{path}.{key}")
        return found
    if isinstance(sent, list) and isinstance(want, list) and len(sent) == len(want):
        return [
            d
            for i, (s, w) in enumerate(zip(sent, want, strict=True))
            for d in _differences(s, w, f"{path}[{i}]")
        ]
    return [] if sent == want else [f"{path}: {sent!r} != recorded {want!r}"]


def assert_shaped_like(sent: dict[str, Any], recorded_name: str) -> None:
    want = _normalize(recorded(recorded_name), recorded_side=True)
    got = _normalize(sent, recorded_side=False)
    assert _differences(got, want) == []


async def test_pod_create_status_update_delete_reviews_match_the_recorded_ones(
    apiserver: server.ApiServer, kube: api.Api, webhook: Webhook
) -> None:
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("capture", {"url": f"{webhook.url}/mutate", "caBundle": webhook.ca_bundle}),
    )
    create = recorded("35-finalizer-create-pod-by-admin.json")["request"]["object"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            k: create["metadata"][k]
            for k in ("name", "namespace", "labels", "annotations", "finalizers")
        },
        "spec": {
            "containers": [{"name": "main", "image": "registry.example/trainer:v1"}],
            "nodeName": "fake-gpu-node-1",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 60,
        },
    }
    # kubectl apply sends these two query parameters; kubernetes-asyncio sends what it is given
    await kube.api_client.call_api(
        "/api/v1/namespaces/default/pods",
        "POST",
        query_params=[("fieldManager", "kubectl-client-side-apply"), ("fieldValidation", "Strict")],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    kubelet_client = await client.api_client_from_dict(
        apiserver.kubeconfig("system:node:fake-gpu-node-1")
    )
    try:
        kubelet = api.Api(kubelet_client)
        status = recorded("36-finalizer-update-pod-status-by-kubelet.json")["request"]["object"][
            "status"
        ]
        await kubelet.patch(
            resources.PODS,
            "finalizer-pod",
            {"status": status},
            content_type=api.STRATEGIC_MERGE_PATCH,
            namespace="default",
            subresource="status",
        )
    finally:
        await kubelet_client.close()
    await kube.delete(
        resources.PODS,
        "finalizer-pod",
        namespace="default",
        grace_period_seconds=60,
        propagation_policy="Background",
    )

    assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE", "UPDATE", "DELETE"]
    assert all(p.startswith("/mutate?timeout=5s") for p in webhook.paths)
    assert_shaped_like(webhook.reviews[0], "35-finalizer-create-pod-by-admin.json")
    assert_shaped_like(webhook.reviews[1], "36-finalizer-update-pod-status-by-kubelet.json")
    assert_shaped_like(webhook.reviews[2], "37-finalizer-delete-pod-by-admin.json")


async def test_in_process_controller_is_named_in_user_info_and_generate_name_is_unresolved(
    apiserver: server.ApiServer, kube: api.Api, webhook: Webhook
) -> None:
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("capture", {"url": webhook.url, "caBundle": webhook.ca_bundle}),
    )
    job_controller = apiserver.client("system:serviceaccount:kube-system:job-controller")
    body = pod("", node=None)
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "train-a-"
    created = await job_controller.create(resources.PODS, body)

    assert created["metadata"]["name"].startswith("train-a-")
    assert len(created["metadata"]["name"]) == len("train-a-") + 5
    want = recorded("03-job-unsuspend-create-pod-by-job-controller.json")["request"]
    (review,) = webhook.reviews
    sent = review["request"]
    assert "name" not in sent  # as recorded: the name is generated after mutating admission
    assert "name" not in sent["object"]["metadata"]
    assert sent["userInfo"]["username"] == want["userInfo"]["username"]
    assert sent["userInfo"]["groups"] == want["userInfo"]["groups"]
    assert sent["options"] == want["options"]
    assert list(sent) == list(want)


async def test_mutating_patch_is_applied_and_validating_sees_the_result(
    kube: api.Api, webhook: Webhook
) -> None:
    def answer(review: dict[str, Any]) -> dict[str, Any]:
        request = review["request"]
        if request["operation"] != "CREATE" or webhook.paths[-1].startswith("/validate"):
            return {}
        patch = [
            {"op": "add", "path": "/metadata/annotations", "value": {"kontinue.dev/lineage": "x"}},
            {
                "op": "add",
                "path": "/spec/containers/0/env",
                "value": [{"name": "KONTINUE_CHECKPOINT_DIR", "value": "/ckpt"}],
            },
        ]
        return {
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }

    webhook.answer = answer
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("plumb", {"url": f"{webhook.url}/mutate", "caBundle": webhook.ca_bundle}),
    )
    await kube.create(
        resources.VALIDATING_WEBHOOKS,
        configuration(
            "ValidatingWebhookConfiguration",
            "check",
            {"url": f"{webhook.url}/validate", "caBundle": webhook.ca_bundle},
        ),
    )
    created = await kube.create(resources.PODS, pod("p"))

    assert created["metadata"]["annotations"] == {"kontinue.dev/lineage": "x"}
    assert created["spec"]["containers"][0]["env"] == [
        {"name": "KONTINUE_CHECKPOINT_DIR", "value": "/ckpt"}
    ]
    assert [p.split("?")[0] for p in webhook.paths] == ["/mutate", "/validate"]
    validated = webhook.reviews[1]["request"]["object"]
    assert validated["metadata"]["annotations"] == {"kontinue.dev/lineage": "x"}
    assert validated["metadata"]["uid"] == created["metadata"]["uid"]


async def test_validating_webhook_denial_is_a_403_with_its_message(
    kube: api.Api, webhook: Webhook
) -> None:
    webhook.answer = lambda review: {
        "allowed": False,
        "status": {"message": "forged key", "code": 403},
    }
    await kube.create(
        resources.VALIDATING_WEBHOOKS,
        configuration(
            "ValidatingWebhookConfiguration",
            "deny",
            {"url": webhook.url, "caBundle": webhook.ca_bundle},
        ),
    )
    with pytest.raises(
        errors.Forbidden, match='admission webhook "deny.test.local" denied the request: forged key'
    ):
        await kube.create(resources.PODS, pod("p"))
    with pytest.raises(errors.NotFound):
        await kube.get(resources.PODS, "p", namespace="default")


@pytest.mark.parametrize(("policy", "allowed"), [("Fail", False), ("Ignore", True)])
async def test_failure_policy_when_the_webhook_is_down(
    kube: api.Api, webhook: Webhook, policy: str, allowed: bool
) -> None:
    dead = f"https://127.0.0.1:{_free_port()}/mutate"
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("down", {"url": dead, "caBundle": webhook.ca_bundle}, failurePolicy=policy),
    )
    if allowed:
        assert (await kube.create(resources.PODS, pod("p")))["metadata"]["name"] == "p"
    else:
        with pytest.raises(errors.ServerError, match='failed calling webhook "down.test.local"'):
            await kube.create(resources.PODS, pod("p"))


@pytest.mark.parametrize(("policy", "allowed"), [("Fail", False), ("Ignore", True)])
async def test_timeout_seconds_is_honoured(
    kube: api.Api, webhook: Webhook, policy: str, allowed: bool
) -> None:
    async def slow(review: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(3)
        return {}

    webhook.answer = slow
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating(
            "slow",
            {"url": webhook.url, "caBundle": webhook.ca_bundle},
            failurePolicy=policy,
            timeoutSeconds=1,
        ),
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    if allowed:
        await kube.create(resources.PODS, pod("p"))
    else:
        with pytest.raises(errors.ServerError, match="failed calling webhook"):
            await kube.create(resources.PODS, pod("p"))
    assert loop.time() - started < 2.5
    assert webhook.paths == ["/?timeout=1s"]


async def test_ca_bundle_is_verified(kube: api.Api, webhook: Webhook) -> None:
    stranger = base64.b64encode(tls.make_ca("someone-else").cert_pem).decode()
    await kube.create(
        resources.MUTATING_WEBHOOKS, mutating("tls", {"url": webhook.url, "caBundle": stranger})
    )
    with pytest.raises(errors.ServerError, match="CERTIFICATE_VERIFY_FAILED"):
        await kube.create(resources.PODS, pod("p"))
    assert webhook.reviews == []


async def test_service_reference_resolves_through_the_test_hook_and_checks_the_service_name(
    apiserver: server.ApiServer, kube: api.Api, webhook: Webhook
) -> None:
    apiserver.service_urls[("kontinue-system", "webhook", 443)] = webhook.url
    service = {"namespace": "kontinue-system", "name": "webhook", "path": "/mutate"}
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("svc", {"service": service, "caBundle": webhook.ca_bundle}),
    )
    await kube.create(resources.PODS, pod("p"))
    assert webhook.paths == ["/mutate?timeout=5s"]

    # a certificate not valid for <service>.<namespace>.svc is refused, as by kube-apiserver
    other = Webhook(hosts=["127.0.0.1"])
    await other.start()
    try:
        apiserver.service_urls[("kontinue-system", "other", 443)] = other.url
        await kube.create(
            resources.MUTATING_WEBHOOKS,
            mutating(
                "svc2", {"service": {**service, "name": "other"}, "caBundle": other.ca_bundle}
            ),
        )
        with pytest.raises(errors.ServerError, match="failed calling webhook"):
            await kube.create(resources.PODS, pod("q"))
        assert other.reviews == []
    finally:
        await other.stop()


async def test_namespace_and_object_selectors_scope_the_webhook(
    kube: api.Api, webhook: Webhook
) -> None:
    await kube.create(
        resources.NAMESPACES,
        {"metadata": {"name": "team-a", "labels": {"kontinue.dev/enabled": "true"}}},
    )
    await kube.create(resources.NAMESPACES, {"metadata": {"name": "team-b"}})
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating(
            "scoped",
            {"url": webhook.url, "caBundle": webhook.ca_bundle},
            namespaceSelector={"matchLabels": {"kontinue.dev/enabled": "true"}},
            objectSelector={"matchExpressions": [{"key": "opt-out", "operator": "DoesNotExist"}]},
        ),
    )
    await kube.create(resources.PODS, pod("in-scope", namespace="team-a"))
    await kube.create(resources.PODS, pod("other-namespace", namespace="team-b"))
    await kube.create(resources.PODS, pod("opted-out", namespace="team-a", labels={"opt-out": "x"}))
    called = [r["request"]["object"]["metadata"]["name"] for r in webhook.reviews]
    assert called == ["in-scope"]


async def test_dry_run_reaches_the_webhook_and_stores_nothing(
    kube: api.Api, webhook: Webhook
) -> None:
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("dry", {"url": webhook.url, "caBundle": webhook.ca_bundle}),
    )
    await kube.api_client.call_api(
        "/api/v1/namespaces/default/pods",
        "POST",
        query_params=[("dryRun", "All")],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=pod("dry-run-pod"),
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    (review,) = webhook.reviews
    want = (
        recorded("12-dry-run-create-pod-by-admin.json")["request"]
        if (RECORDED / "12-dry-run-create-pod-by-admin.json").exists()
        else None
    )
    assert review["request"]["dryRun"] is True
    assert review["request"]["options"]["dryRun"] == ["All"]
    if want is not None:
        assert want["dryRun"] is True
    with pytest.raises(errors.NotFound):
        await kube.get(resources.PODS, "dry-run-pod", namespace="default")


async def test_the_kubelets_final_delete_review_matches_the_recorded_one(
    apiserver: server.ApiServer, kube: api.Api, webhook: Webhook
) -> None:
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("capture", {"url": webhook.url, "caBundle": webhook.ca_bundle}),
    )
    body = pod("finalizer-pod", node="fake-gpu-node-1", finalizers=["kontinue.dev/checkpoint"])
    created = await kube.create(resources.PODS, body)
    await kube.delete(resources.PODS, "finalizer-pod", namespace="default", grace_period_seconds=60)
    kubelet = apiserver.client("system:node:fake-gpu-node-1")
    uid = created["metadata"]["uid"]
    await kubelet.delete(
        resources.PODS,
        "finalizer-pod",
        namespace="default",
        grace_period_seconds=0,
        preconditions={"uid": uid},
    )
    sent = webhook.reviews[-1]["request"]
    want = recorded("39-finalizer-delete-pod-by-kubelet.json")["request"]
    assert list(sent) == list(want)
    assert sent["operation"] == want["operation"] == "DELETE"
    assert sent["object"] is None
    assert want["object"] is None
    assert sent["userInfo"]["groups"] == want["userInfo"]["groups"]
    recorded_uid = want["options"]["preconditions"]["uid"]
    assert sent["options"] == {**want["options"], "preconditions": {"uid": uid}}
    assert recorded_uid == want["oldObject"]["metadata"]["uid"]
    old_meta = sent["oldObject"]["metadata"]
    assert old_meta["deletionGracePeriodSeconds"] == 60  # as recorded: before it drops to 0
    assert (
        old_meta["deletionGracePeriodSeconds"]
        == want["oldObject"]["metadata"]["deletionGracePeriodSeconds"]
    )
    # the finalizer holds the pod, now with grace 0, as on the real server
    held = await kube.get(resources.PODS, "finalizer-pod", namespace="default")
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0


async def test_eviction_reaches_webhooks_only_as_a_create_of_pods_eviction(
    kube: api.Api, webhook: Webhook
) -> None:
    rules = [
        *RECORDED_RULES,
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods/eviction"],
            "scope": "Namespaced",
        },
    ]
    await kube.create(
        resources.MUTATING_WEBHOOKS,
        mutating("capture", {"url": webhook.url, "caBundle": webhook.ca_bundle}, rules=rules),
    )
    body = pod("low-job-8gr99")
    body["spec"]["terminationGracePeriodSeconds"] = 120
    await kube.create(resources.PODS, body)
    answer = await kube.api_client.call_api(
        "/api/v1/namespaces/default/pods/low-job-8gr99/eviction",
        "POST",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body={
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "low-job-8gr99", "namespace": "default"},
            "deleteOptions": {},
        },
        response_types_map={201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    assert answer["status"] == "Success"

    assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE", "CREATE"]
    sent = webhook.reviews[1]
    want = recorded("31-eviction-create-pod-eviction-by-admin.json")
    for review in (sent, want):
        review["request"]["object"]["metadata"].pop("managedFields", None)
    assert (
        _differences(_normalize(sent, recorded_side=False), _normalize(want, recorded_side=False))
        == []
    )
    evicted = await kube.get(resources.PODS, "low-job-8gr99", namespace="default")
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 120
    (target,) = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "EvictionByEvictionAPI")
