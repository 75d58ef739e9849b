"""Where the API emulator and the real kube-apiserver v1.36.2 must agree (docs/testing.md lists
every difference found and its fix). Each case writes the same object to both and compares what
comes back."""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

from emulator.apiserver import server
from emulator.jobs import controller as job_controller
from kontinue.kube import api, errors, interface, resources
from tests import fixtures
from tests.realcp import controlplane
from tests.waiting import eventually

Object = dict[str, Any]


async def _namespace(emulated: server.ApiServer, name: str) -> None:
    await emulated.client().create(
        resources.NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )


def _webhook_service() -> dict[str, Any]:
    (service,) = fixtures.load_all(fixtures.MANIFESTS / "webhook" / "service.yaml")
    return service


async def test_service_defaults_and_cluster_ip(admin: api.Api, namespace: str) -> None:
    """Found with the Service-link fix: the emulator allocated no cluster IP (so a kubelet
    could add no link variables) and defaulted nothing."""
    body = _webhook_service()
    body["metadata"]["namespace"] = namespace
    real = await admin.create(resources.SERVICES, copy.deepcopy(body), namespace=namespace)
    async with server.ApiServer() as emulated:
        await emulated.client().create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        fake = await emulated.client().create(
            resources.SERVICES, copy.deepcopy(body), namespace=namespace
        )
    keys = (
        "type",
        "sessionAffinity",
        "internalTrafficPolicy",
        "ipFamilies",
        "ipFamilyPolicy",
        "ports",
    )
    assert {k: fake["spec"].get(k) for k in keys} == {k: real["spec"].get(k) for k in keys}
    for spec, service_range in (
        (real["spec"], controlplane.SERVICE_CIDR),
        (fake["spec"], "10.96.0.0/12"),
    ):
        assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network(service_range)
        assert spec["clusterIPs"] == [spec["clusterIP"]]


def _job(namespace: str, name: str, *, suspend: bool, managed_by: str | None = None) -> Object:
    spec: Object = {
        "suspend": suspend,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example/app:v1"}],
            }
        },
    }
    if managed_by:
        spec["managedBy"] = managed_by  # the real job controller leaves the Job alone
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


async def _template_outcomes(kube: interface.Client, namespace: str) -> list[str]:
    """Template patches of a suspended Job across the status states that decide mutability."""
    name = "mutable"
    await kube.create(
        resources.JOBS,
        _job(namespace, name, suspend=True, managed_by="example.com/not-the-job-controller"),
        namespace=namespace,
    )

    async def status(body: Object) -> None:
        await kube.patch(
            resources.JOBS,
            name,
            {"status": body},
            content_type=api.MERGE_PATCH,
            namespace=namespace,
            subresource="status",
        )

    async def steer(spec: Object) -> str:
        try:
            await kube.patch(
                resources.JOBS,
                name,
                {"spec": {"template": {"spec": spec}}},
                content_type=api.MERGE_PATCH,
                namespace=namespace,
            )
        except errors.Invalid as exc:
            return "refused" if "spec.template" in str(exc) else f"other: {exc}"
        return "accepted"

    suspended = {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
    outcomes = [await steer({"nodeSelector": {"gpu": "a"}})]  # never started
    await status({"startTime": "2026-12-03T10:00:00Z"})
    outcomes.append(await steer({"nodeSelector": {"gpu": "b"}}))  # started, not yet Suspended
    await status({"conditions": [{**suspended, "message": "Job suspended"}]})
    outcomes.append(await steer({"nodeSelector": {"gpu": "c"}}))  # fully suspended
    await status({"active": 1})
    outcomes.append(await steer({"nodeSelector": {"gpu": "d"}}))  # a pod still active
    await status({"active": None})
    outcomes.append(await steer({"containers": [{"name": "main", "image": "x:2"}]}))
    return outcomes


async def test_job_template_mutability_while_suspended(admin: api.Api, namespace: str) -> None:
    """Found with the readmission race (tests/integration/cluster/test_job_status_race.py): the
    emulator applied the pre-1.36 rule (template mutable only while ``startTime`` is empty)."""
    real = await _template_outcomes(admin, namespace)
    async with server.ApiServer() as emulated:
        await _namespace(emulated, namespace)
        fake = await _template_outcomes(emulated.client(), namespace)
    assert real == ["accepted", "refused", "accepted", "refused", "refused"]
    assert fake == real


async def _suspended_status(kube: interface.Client, namespace: str) -> Object:
    """A running Job (its pod stays Pending: no kubelet), then suspended: the settled status."""
    await kube.create(resources.JOBS, _job(namespace, "stop", suspend=False), namespace=namespace)

    async def get() -> Object:
        return await kube.get(resources.JOBS, "stop", namespace=namespace)

    async def running() -> bool:
        return bool(((await get()).get("status") or {}).get("active"))

    await eventually(running, within=120, what="the Job's pod counted active")
    assert (await get())["status"]["startTime"]
    await kube.patch(
        resources.JOBS,
        "stop",
        {"spec": {"suspend": True}},
        content_type=api.MERGE_PATCH,
        namespace=namespace,
    )

    async def settled() -> bool:
        status = (await get()).get("status") or {}
        flagged = any(c.get("type") == "Suspended" for c in status.get("conditions") or [])
        return flagged and not status.get("active") and not status.get("terminating")

    await eventually(settled, within=120, what="Suspended=True, no pod active or terminating")
    status: Object = (await get())["status"]
    return status


async def test_job_controller_clears_start_time_when_it_suspends(
    admin: api.Api, namespace: str
) -> None:
    """The same discovery: the emulated job controller kept ``startTime`` across a suspension."""
    real = await _suspended_status(admin, namespace)
    async with server.ApiServer() as emulated:
        await _namespace(emulated, namespace)
        jobs = job_controller.JobController(emulated)
        await jobs.start()
        try:
            fake = await _suspended_status(emulated.client(), namespace)
        finally:
            await jobs.stop()
    for status in (real, fake):
        assert "startTime" not in status
        (condition,) = status["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "Suspended",
            "True",
            "JobSuspended",
        )
