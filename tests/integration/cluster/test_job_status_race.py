"""The readmission race (docs/testing.md, "emulator vs real apiserver"): Kueue's template patch
of a Job it stopped was sometimes refused ``spec.template: field is immutable``.

Root cause: the emulated job controller wrote ``jobs/status`` as a merge patch without a
resourceVersion, from the copy its sync started with, and kept ``startTime`` across a
suspension. A sync that began before Kueue cleared ``startTime`` wrote it back, and the
pre-1.36 rule the API emulator applied (template mutable only while ``startTime`` is empty)
refused the readmission. The real v1.36 controller writes status with ``UpdateStatus`` (409 on
a stale copy), clears ``startTime`` itself when it suspends, and the v1.36 apiserver also lets a
fully suspended Job (``Suspended=True``, ``active == 0``) change its scheduling directives —
each measured on a real v1.36.2 control plane (tests/realcp/test_emulator_agreement.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from emulator.apiserver import server
from emulator.jobs import controller as job_controller
from emulator.jobs import planning
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources
from tests.waiting import eventually

Object = dict[str, Any]
NS = "default"
STEER = {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}}


def _job(name: str) -> Object:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.example/app:v1"}],
                }
            }
        },
    }


async def _merge(api: server.ApiServer, name: str, body: Object, **kw: Any) -> Object:
    return await api.client().patch(
        resources.JOBS, name, body, content_type=kube_api.MERGE_PATCH, namespace=NS, **kw
    )


async def _get(api: server.ApiServer, name: str) -> Object:
    return await api.client().get(resources.JOBS, name, namespace=NS)


async def test_a_stale_status_write_cannot_bring_start_time_back() -> None:
    async with server.ApiServer() as api:
        jobs = job_controller.JobController(api)
        await jobs.start()
        try:
            await api.client().create(resources.JOBS, _job("j"), namespace=NS)

            async def started() -> Object | None:
                job = await _get(api, "j")
                return job if (job.get("status") or {}).get("active") == 1 else None

            await eventually(started, within=60, what="the Job's pod counted active")
            running = await _get(api, "j")
            assert running["status"]["startTime"]
            stale = copy.deepcopy(running)

            # Kueue's Stop: suspend. The controller deletes the (Pending) pod and, in the write
            # that adds Suspended=True, clears startTime.
            await _merge(api, "j", {"spec": {"suspend": True}})

            async def suspended() -> Object | None:
                job = await _get(api, "j")
                status = job.get("status") or {}
                done = any(c["type"] == "Suspended" for c in status.get("conditions") or [])
                return job if done and not status.get("active") else None

            await eventually(suspended, within=60, what="Suspended=True and active 0")
            after = await _get(api, "j")
            assert "startTime" not in after["status"]

            # A sync that started from the running copy and writes now: 409, nothing written.
            status = planning.next_status(
                stale, [], planning.decide(stale, []), now="2026-12-03T00:00:00Z"
            )
            assert status["startTime"] == running["status"]["startTime"]
            assert await jobs.write_status(stale, status) is False
            assert "startTime" not in (await _get(api, "j"))["status"]

            # Kueue's readmission patch (scheduling directives + unsuspend) is accepted.
            patched = await _merge(api, "j", {"spec": {"suspend": False, **STEER["spec"]}})
            assert patched["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
        finally:
            await jobs.stop()


async def test_fully_suspended_job_accepts_new_scheduling_directives() -> None:
    """v1.36 ``strategy.go``: suspended and (never started, or Suspended=True and active 0)."""
    async with server.ApiServer() as api:
        body = _job("k")
        body["spec"]["suspend"] = True
        await api.client().create(resources.JOBS, body, namespace=NS)
        started = {"startTime": "2026-12-03T10:00:00Z"}
        await _merge(api, "k", {"status": started}, subresource="status")
        # startTime set, no Suspended condition yet: refused (the controller has not acted)
        with pytest.raises(
            errors.Invalid, match=r"spec\.template: Invalid value: field is immutable"
        ):
            await _merge(api, "k", STEER)
        condition = {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
        await _merge(api, "k", {"status": {"conditions": [condition]}}, subresource="status")
        patched = await _merge(api, "k", STEER)
        assert patched["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
        # a pod still active: refused again
        await _merge(api, "k", {"status": {"active": 1}}, subresource="status")
        with pytest.raises(errors.Invalid, match=r"spec\.template"):
            await _merge(
                api, "k", {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "h100"}}}}}
            )
        # never more than labels, annotations and scheduling directives
        await _merge(api, "k", {"status": {"active": None}}, subresource="status")
        image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x:2"}]}}}}
        with pytest.raises(errors.Invalid, match=r"spec\.template"):
            await _merge(api, "k", image)
