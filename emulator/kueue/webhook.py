"""Kueue's Job mutating webhook ``mjob.kb.io``, served over HTTPS and registered in the emulator.

Copies ``pkg/controller/jobs/job/job_webhook.go`` ``Default`` →
``jobframework.ApplyDefaultForSuspend``: on CREATE of a ``batch/v1`` Job carrying
``kueue.x-k8s.io/queue-name`` (Kueue's default ``manageJobsWithoutQueueName: false``), set
``spec.suspend=true`` so the job controller creates no pod before Kueue admits the Workload.
Registered like the generated
``config/components/webhook/manifests.yaml``: CREATE on ``batch/v1 jobs``, ``failurePolicy:
Fail``, ``sideEffects: None``, namespaces ``kube-system`` and ``kueue-system`` excluded. Not
copied: LocalQueue defaulting, the default WorkloadPriorityClass, MultiKueue's managedBy.

Running it as a real webhook (not a hook inside the emulator) keeps the apiserver's admission
order honest: other mutating webhooks, e.g. a Job webhook of the system under test, see the Job
after Kueue's defaulting exactly as they would in a cluster with Kueue installed (webhooks run in
configuration-name order).
"""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

from aiohttp import web

from emulator.apiserver import server, tls
from kontinue import keys
from kontinue.kube import errors, resources

Object = dict[str, Any]
CONFIGURATION = "kueue-mutating-webhook-configuration"
WEBHOOK = "mjob.kb.io"


def default_job(job: Object) -> list[Object]:
    """The JSONPatch ``ApplyDefaultForSuspend`` amounts to (empty when nothing changes)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    if not labels.get(keys.KUEUE_QUEUE_NAME_LABEL):
        return []
    spec = job.get("spec") or {}
    if spec.get("suspend") is True:
        return []
    if "spec" not in job:
        return [{"op": "add", "path": "/spec", "value": {"suspend": True}}]
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


async def _review(request: web.Request) -> web.Response:
    review = await request.json()
    req = review["request"]
    patch = default_job(req.get("object") or {}) if req.get("operation") == "CREATE" else []
    response: Object = {"uid": req["uid"], "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return web.json_response(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


class JobWebhook:
    """``async with JobWebhook(api):`` serves the webhook and registers it; removes both on exit."""

    def __init__(self, api: server.ApiServer) -> None:
        self.api = api
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> JobWebhook:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        ca = tls.make_ca("kueue-ca")
        app = web.Application()
        app.router.add_post("/mutate-batch-v1-job", _review)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        context = tls.server_context(tls.issue(ca, hosts=["127.0.0.1"]))
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        port = int(sockets[0].getsockname()[1])
        admin = self.api.client("admin")
        configuration: Object = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": CONFIGURATION},
            "webhooks": [
                {
                    "name": WEBHOOK,
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/mutate-batch-v1-job",
                        "caBundle": base64.b64encode(ca.cert_pem).decode(),
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": ["kube-system", "kueue-system"],
                            }
                        ]
                    },
                    "rules": [
                        {
                            "apiGroups": ["batch"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["jobs"],
                        }
                    ],
                }
            ],
        }
        try:
            await admin.create(resources.MUTATING_WEBHOOKS, configuration)
        except errors.Conflict:
            current = await admin.get(resources.MUTATING_WEBHOOKS, CONFIGURATION)
            configuration["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await admin.replace(resources.MUTATING_WEBHOOKS, configuration)

    async def stop(self) -> None:
        with contextlib.suppress(errors.NotFound):
            await self.api.client("admin").delete(resources.MUTATING_WEBHOOKS, CONFIGURATION)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
