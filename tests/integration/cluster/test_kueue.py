"""Emulated Kueue on the API emulator, with the test acting as the job controller the way
Kueue's own envtest suites do (test/integration/singlecluster/controller/jobs/job): it sets
``status.active``/``startTime`` by hand. The full cluster run is in test_kueue_cluster.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from emulator.apiserver import server
from emulator.kueue import controller, workloads
from kontinue.kube import resources
from tests import fixtures
from tests.waiting import eventually as eventually  # re-exported for the tests here

Obj = dict[str, Any]
NS = "default"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
ACC = "example.com/restore-check"
COMPLETE: Obj = {
    "conditions": [
        {
            "type": "Complete",
            "status": "True",
            "reason": "CompletionsReached",
            "message": "Reached expected number of succeeded pods",
            "lastTransitionTime": "2026-01-01T00:00:01Z",
            "lastProbeTime": "2026-01-01T00:00:01Z",
        }
    ],
    "succeeded": 1,
    "completionTime": "2026-01-01T00:00:01Z",
    "startTime": "2026-01-01T00:00:00Z",
}


def find_cond(obj: Obj, type_: str) -> Obj | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None
    )


def cond(obj: Obj, type_: str) -> Obj:
    found = find_cond(obj, type_)
    assert found is not None, f"no {type_} condition"
    return found


def cond_is(obj: Obj, type_: str, status: str, reason: str | None = None) -> bool:
    found = find_cond(obj, type_)
    return (
        found is not None
        and found["status"] == status
        and (reason is None or found["reason"] == reason)
    )


class Env:
    def __init__(self, api: server.ApiServer) -> None:
        self.api = api
        self.admin = api.client("admin")

    async def setup_queues(self, *, gpus: int = 4, checks: list[str] | None = None) -> None:
        for name, value in (("low", 100), ("high", 1000)):
            await self.admin.create(
                resources.PRIORITY_CLASSES,
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        await self.admin.create(
            resources.RESOURCE_FLAVORS,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "h100"},
                "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            },
        )
        spec: Obj = {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 32},
                                {"name": "memory", "nominalQuota": "128Gi"},
                                {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                            ],
                        }
                    ],
                }
            ],
        }
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
            for check in checks:
                created = await self.admin.create(
                    resources.ADMISSION_CHECKS,
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "AdmissionCheck",
                        "metadata": {"name": check},
                        "spec": {"controllerName": ACC},
                    },
                )
                created["status"] = {
                    "conditions": [
                        {
                            "type": "Active",
                            "status": "True",
                            "reason": "Active",
                            "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                            "observedGeneration": 1,
                        }
                    ]
                }
                await self.admin.replace(resources.ADMISSION_CHECKS, created, subresource="status")
        await self.admin.create(
            resources.CLUSTER_QUEUES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "gpu-cq"},
                "spec": spec,
            },
        )
        await self.admin.create(
            resources.LOCAL_QUEUES,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team", "namespace": NS},
                "spec": {"clusterQueue": "gpu-cq"},
            },
        )

    async def job(self, name: str, *, gpus: int, priority: str = "low") -> Obj:
        job: Obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"kueue.x-k8s.io/queue-name": "team"},
            },
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "restartPolicy": "Never",
                        "priorityClassName": priority,
                        "containers": [
                            {
                                "name": "train",
                                "image": "registry.example/train:v1",
                                "resources": {
                                    "requests": {"cpu": "1", "memory": "1Gi"},
                                    "limits": {"nvidia.com/gpu": str(gpus)},
                                },
                            }
                        ],
                    },
                }
            },
        }
        created: Obj = await self.admin.create(resources.JOBS, job)
        return created

    async def get_job(self, name: str) -> Obj:
        found: Obj = await self.admin.get(resources.JOBS, name, namespace=NS)
        return found

    async def workload(self, job: Obj) -> Obj:
        name = workloads.name_for(job["metadata"]["name"], job["metadata"]["uid"])
        found: Obj = await self.admin.get(resources.WORKLOADS, name, namespace=NS)
        return found

    async def set_job_status(self, name: str, status: Obj) -> None:
        await self.admin.patch(
            resources.JOBS,
            name,
            {"status": status},
            content_type=MERGE,
            namespace=NS,
            subresource="status",
        )

    async def events_for(self, name: str) -> list[Obj]:
        items = (await self.admin.list(resources.EVENTS, namespace=NS))["items"]
        mine = [e for e in items if e["involvedObject"]["name"] == name]
        return sorted(mine, key=lambda e: e["eventTime"])


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with server.ApiServer(bookmark_interval=0.2) as api:
        controller.install_crds(api, fixtures.UPSTREAM / "kueue" / "crds")
        controller.install_crds(api, fixtures.FIXTURES / "kueue-emulation")
        async with controller.Kueue(api, stop_wait=2.0):
            yield Env(api)


async def test_job_is_created_suspended_and_admitted_within_quota(env: Env) -> None:
    await env.setup_queues()
    job = await env.job("small", gpus=2)
    assert job["spec"]["suspend"] is True  # mjob.kb.io defaulting, before any pod exists

    async def admitted() -> bool:
        return (await env.get_job("small"))["spec"]["suspend"] is False

    await eventually(admitted)
    wl = await env.workload(job)
    assert wl["metadata"]["name"].startswith("job-small-")
    assert len(wl["metadata"]["name"]) == len("job-small-") + 5
    assert wl["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "small",
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert wl["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]}
    assert wl["spec"]["queueName"] == "team"
    assert wl["spec"]["priority"] == 100
    assert wl["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "low",
    }
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 1)]
    assert cond_is(wl, "QuotaReserved", "True", "QuotaReserved")
    assert cond(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue gpu-cq"
    assert cond_is(wl, "Admitted", "True", "Admitted")
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert wl["status"]["admission"]["clusterQueue"] == "gpu-cq"
    assert assignment["flavors"] == {"cpu": "h100", "memory": "h100", "nvidia.com/gpu": "h100"}
    assert assignment["resourceUsage"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}
    template = (await env.get_job("small"))["spec"]["template"]
    stamped = {k: v for k, v in template["metadata"]["labels"].items() if "kueue" in k}
    assert stamped == {
        "kueue.x-k8s.io/podset": "main",
        "kueue.x-k8s.io/local-queue-name": "team",
        "kueue.x-k8s.io/cluster-queue-name": "gpu-cq",
    }
    assert template["metadata"]["labels"]["app"] == "small"
    assert template["metadata"]["annotations"] == {
        "kueue.x-k8s.io/workload": wl["metadata"]["name"]
    }
    assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    reasons = [e["reason"] for e in await env.events_for("small")]
    assert reasons == ["CreatedWorkload", "Started"]


async def test_a_job_over_quota_waits_unsuspended_never(env: Env) -> None:
    await env.setup_queues(gpus=4)
    job = await env.job("big", gpus=8)

    async def waiting() -> bool:
        with contextlib.suppress(Exception):
            return cond_is(await env.workload(job), "QuotaReserved", "False", "WaitingForQuota")
        return False

    await eventually(waiting)
    wl = await env.workload(job)
    assert (
        "insufficient quota for nvidia.com/gpu in flavor h100"
        in cond(wl, "QuotaReserved")["message"]
    )
    assert (await env.get_job("big"))["spec"]["suspend"] is True


class Recorder:
    """Every watch event of Workloads, Jobs and Pods, merged in resourceVersion (= write)
    order."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.events: list[tuple[int, str, Obj]] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for resource in (resources.WORKLOADS, resources.JOBS, resources.PODS):
            rv = (await self.env.admin.list(resource, namespace=NS))["metadata"]["resourceVersion"]
            self._tasks.append(asyncio.create_task(self._watch(resource, rv)))

    async def _watch(self, resource: resources.Resource, rv: str) -> None:
        async for event in self.env.admin.watch(resource, namespace=NS, resource_version=rv):
            if event["type"] in ("ADDED", "MODIFIED"):
                obj = event["object"]
                self.events.append((int(obj["metadata"]["resourceVersion"]), obj["kind"], obj))

    async def stop(self) -> None:
        await controller.cancel_all(self._tasks)

    def of(self, kind: str, name: str) -> list[tuple[int, Obj]]:
        return sorted(
            (rv, o) for rv, k, o in self.events if k == kind and o["metadata"]["name"] == name
        )


async def fake_job_controller(env: Env, name: str) -> None:
    """What the kube job controller does to a Job Kueue suspends (k8s pkg/controller/job):
    the pods get deleted, so ``active`` drops to 0, and ``startTime`` is cleared."""
    rv = (await env.admin.list(resources.JOBS, namespace=NS))["metadata"]["resourceVersion"]
    async for event in env.admin.watch(resources.JOBS, namespace=NS, resource_version=rv):
        job = event["object"]
        if job["metadata"]["name"] != name or not job["spec"].get("suspend"):
            continue
        if (job.get("status") or {}).get("startTime"):
            await env.set_job_status(name, {"startTime": None, "active": 0})


def summary(wl: Obj) -> tuple[Any, ...]:
    def c(t: str) -> tuple[str, str] | None:
        found = find_cond(wl, t)
        return (found["status"], found["reason"]) if found else None

    return (
        c("Preempted"),
        c("Evicted"),
        c("QuotaReserved"),
        c("Admitted"),
        c("Requeued"),
        "admission" in (wl.get("status") or {}),
    )


async def test_preemption_release_and_readmission_follow_the_upstream_order(env: Env) -> None:
    await env.setup_queues(gpus=4)
    low = await env.job("low", gpus=4, priority="low")

    async def running(name: str) -> bool:
        return (await env.get_job(name))["spec"]["suspend"] is False

    await eventually(lambda: running("low"))
    await env.set_job_status("low", {"active": 1, "startTime": "2026-01-01T00:00:00Z"})
    low_wl = await env.workload(low)
    recorder = Recorder(env)
    await recorder.start()
    reacting = asyncio.create_task(fake_job_controller(env, "low"))
    try:
        high = await env.job("high", gpus=4, priority="high")
        await eventually(lambda: running("high"))
        high_wl = await env.workload(high)
        # the preemptor finishes, the victim is readmitted
        await env.set_job_status("high", COMPLETE)
        await eventually(lambda: running("low"))
    finally:
        await controller.cancel_all([reacting])
        await recorder.stop()

    message = (
        f"Preempted to accommodate a workload (UID: {high_wl['metadata']['uid']}, "
        f"JobUID: {high['metadata']['uid']}) due to prioritization in the ClusterQueue; "
        "preemptor path: /gpu-cq; preemptee path: /gpu-cq"
    )
    victim = low_wl["metadata"]["name"]
    states = [(rv, summary(o)) for rv, o in recorder.of("Workload", victim)]
    distinct = [s for i, (_, s) in enumerate(states) if i == 0 or s != states[i - 1][1]]
    T, F = "True", "False"
    assert distinct == [
        # A: one status apply, admission untouched
        (
            (T, "InClusterQueue"),
            (T, "Preempted"),
            (T, "QuotaReserved"),
            (T, "Admitted"),
            None,
            True,
        ),
        # D: quota released once active == 0, in one apply
        (
            (T, "InClusterQueue"),
            (T, "Preempted"),
            (F, "PendingEvaluation"),
            (F, "NoReservation"),
            (T, "Preempted"),
            False,
        ),
        # the preemptor holds the quota now
        (
            (T, "InClusterQueue"),
            (T, "Preempted"),
            (F, "WaitingForQuota"),
            (F, "NoReservation"),
            (T, "Preempted"),
            False,
        ),
        # readmission flips Evicted/Preempted, Requeued stays True
        (
            (F, "QuotaReserved"),
            (F, "QuotaReserved"),
            (T, "QuotaReserved"),
            (T, "Admitted"),
            (T, "Preempted"),
            True,
        ),
    ]
    by_rv = dict(recorder.of("Workload", victim))
    evicted_rv = next(rv for rv, s in states if s[1] == (T, "Preempted"))
    evicted = by_rv[evicted_rv]
    for type_ in ("Evicted", "Preempted"):
        assert cond(evicted, type_)["message"] == message
    assert evicted["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Preempted", "underlyingCause": "", "count": 1}
    ]
    released_rv = next(rv for rv, s in states if s[2] == (F, "PendingEvaluation"))
    assert cond(by_rv[released_rv], "Requeued")["message"] == message
    assert cond(by_rv[released_rv], "QuotaReserved")["message"] == message
    readmitted = recorder.of("Workload", victim)[-1][1]
    for type_ in ("Evicted", "Preempted"):
        assert cond(readmitted, type_)["message"] == f"Previously: {message}"

    # B and C on the Job, between A and D
    jobs = recorder.of("Job", "low")
    suspend_rv = next(rv for rv, j in jobs if j["spec"].get("suspend"))
    inactive_rv = next(
        rv
        for rv, j in jobs
        if j["spec"].get("suspend") and not (j.get("status") or {}).get("active")
    )
    assert evicted_rv < suspend_rv < inactive_rv < released_rv
    first_suspend = dict(jobs)[suspend_rv]
    assert first_suspend["metadata"]["annotations"]["kueue.x-k8s.io/stopping"] == "true"
    # the restore dropped Kueue's stamps and the stopping annotation before readmission
    stopped = [j for rv, j in jobs if released_rv > rv > inactive_rv]
    assert stopped
    assert "kueue.x-k8s.io/stopping" not in (stopped[-1]["metadata"].get("annotations") or {})
    assert "kueue.x-k8s.io/podset" not in stopped[-1]["spec"]["template"]["metadata"]["labels"]
    assert "nodeSelector" not in stopped[-1]["spec"]["template"]["spec"]

    assert [e["reason"] for e in await env.events_for(victim)] == [
        "QuotaReserved",
        "Admitted",
        "EvictedDueToPreempted",
        "Preempted",
        "QuotaReserved",
        "Admitted",
    ]
    preempted_event = [e for e in await env.events_for(victim) if e["reason"] == "Preempted"][0]
    assert preempted_event["message"] == (
        f"{message}; preemptor effective priority: 1000 (base: 1000, boost: 0); "
        "preemptee effective priority: 100 (base: 100, boost: 0)"
    )
    # the status patch clearing startTime lost to the job controller's update: Stop ran twice
    assert [e["reason"] for e in await env.events_for("low")] == [
        "CreatedWorkload",
        "Started",
        "Stopped",
        "Stopped",
        "Started",
    ]
    assert "PreemptedWorkload" in [
        e["reason"] for e in await env.events_for(high_wl["metadata"]["name"])
    ]


async def answer(env: Env, wl: Obj, *, state: str, updates: list[Obj] | None) -> None:
    """An external admission check controller's answer: SSA on workloads/status, own manager."""
    entry: Obj = {
        "name": "restore",
        "state": state,
        "message": "answered",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    if updates is not None:
        entry["podSetUpdates"] = updates
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": wl["metadata"]["name"], "namespace": NS},
        "status": {"admissionChecks": [entry]},
    }
    await env.admin.patch(
        resources.WORKLOADS,
        wl["metadata"]["name"],
        body,
        content_type=APPLY,
        namespace=NS,
        subresource="status",
        field_manager="restore-acc",
        force=True,
    )


async def test_admission_checks_gate_start_and_are_reset_on_eviction(env: Env) -> None:
    await env.setup_queues(gpus=4, checks=["restore"])
    low = await env.job("low", gpus=4)

    await eventually(lambda: quota_reserved(env, low))
    wl = await env.workload(low)
    assert cond_is(wl, "Admitted", "False", "UnsatisfiedAdmissionChecks")
    (check,) = wl["status"]["admissionChecks"]
    assert (check["name"], check["state"]) == ("restore", "Pending")
    await asyncio.sleep(0.3)
    assert (await env.get_job("low"))["spec"]["suspend"] is True  # gated

    update = {
        "name": "main",
        "annotations": {"example.com/restore-from": "ckpt-1"},
        "nodeSelector": {"topology.kubernetes.io/zone": "a"},
    }
    await answer(env, wl, state="Ready", updates=[update])

    async def running() -> bool:
        return (await env.get_job("low"))["spec"]["suspend"] is False

    await eventually(running)
    template = (await env.get_job("low"))["spec"]["template"]
    assert template["metadata"]["annotations"]["example.com/restore-from"] == "ckpt-1"
    assert template["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "topology.kubernetes.io/zone": "a",
    }
    assert cond_is(await env.workload(low), "Admitted", "True", "Admitted")
    await env.set_job_status("low", {"active": 1})

    # a preemption resets the check; the podSetUpdates the controller applied survive the reset
    high = await env.job("high", gpus=4, priority="high")

    async def reset() -> bool:
        checks = (await env.workload(low))["status"]["admissionChecks"]
        return bool(checks[0]["state"] == "Pending")

    await eventually(reset)
    (check,) = (await env.workload(low))["status"]["admissionChecks"]
    assert check["message"] == "Reset to Pending after eviction. Previously: Ready"
    assert check["podSetUpdates"] == [update]  # SSA: another manager's entries stay

    async def stopped() -> bool:
        job = await env.get_job("low")
        return bool(job["spec"]["suspend"]) and "kueue.x-k8s.io/stopping" not in (
            job["metadata"].get("annotations") or {}
        )

    await eventually(stopped)
    restored = (await env.get_job("low"))["spec"]["template"]
    assert "example.com/restore-from" not in (restored["metadata"].get("annotations") or {})
    await env.set_job_status("low", {"active": 0})

    await eventually(lambda: quota_reserved(env, high))
    await answer(env, await env.workload(high), state="Ready", updates=[])
    await eventually(lambda: running_job(env, "high"))
    await env.set_job_status("high", COMPLETE)

    # readmitted; the controller answers Ready without podSetUpdates: the stale ones are stamped
    await eventually(lambda: quota_reserved(env, low))
    await answer(env, wl, state="Ready", updates=None)
    await eventually(running)
    stale = (await env.get_job("low"))["spec"]["template"]
    assert stale["metadata"]["annotations"]["example.com/restore-from"] == "ckpt-1"
    assert high["metadata"]["name"] == "high"


async def quota_reserved(env: Env, job: Obj) -> bool:
    with contextlib.suppress(Exception):
        return cond_is(await env.workload(job), "QuotaReserved", "True")
    return False


async def running_job(env: Env, name: str) -> bool:
    return (await env.get_job(name))["spec"]["suspend"] is False


async def test_explicit_empty_podsetupdates_clear_stale_ones(env: Env) -> None:
    await env.setup_queues(gpus=4, checks=["restore"])
    job = await env.job("solo", gpus=2)

    await eventually(lambda: quota_reserved(env, job))
    wl = await env.workload(job)
    await answer(
        env,
        wl,
        state="Ready",
        updates=[{"name": "main", "annotations": {"example.com/restore-from": "old"}}],
    )
    await eventually(lambda: running_job(env, "solo"))
    # later answers that rewrite the list replace it (atomic list, same manager)
    await answer(env, wl, state="Ready", updates=[])
    (check,) = (await env.workload(job))["status"]["admissionChecks"]
    assert not check.get("podSetUpdates")


async def test_a_podsetupdate_conflicting_with_the_flavor_finishes_the_workload(env: Env) -> None:
    await env.setup_queues(gpus=4, checks=["restore"])
    job = await env.job("clash", gpus=2)

    await eventually(lambda: quota_reserved(env, job))
    wl = await env.workload(job)
    await answer(
        env,
        wl,
        state="Ready",
        updates=[
            {"name": "main", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}
        ],
    )

    async def finished() -> bool:
        return cond_is(await env.workload(job), "Finished", "True", "FailedToStart")

    await eventually(finished)
    message = cond(await env.workload(job), "Finished")["message"]
    assert "conflict for nodeSelector" in message
    assert "nvidia.com/gpu.product" in message
    await asyncio.sleep(0.3)
    assert (await env.get_job("clash"))["spec"]["suspend"] is True


@pytest.mark.parametrize("verb", ["list", "watch"])
async def test_a_429_on_a_workloads_list_or_watch_is_retried_not_fatal(verb: str) -> None:
    """A real kube-apiserver answers 429 ``storage is (re)initializing`` (retryAfterSeconds 1) to
    a list or watch of a CustomResource whose watch cache is not ready, right after its CRD is
    created or changed (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/storage/cacher/
    cacher.go); Kueue's informers back off and retry (kubernetes/client-go
    tools/cache/reflector.go ``watch``: "returned 429 - backing off"). The emulated Kueue must
    too: before, the 429 ended its Workload watch for good, so after admitting a Workload it
    never woke to start the Job — the real-control-plane tier saw exactly that (an Admitted
    Workload, its Job suspended for 240 s)."""
    async with server.ApiServer(bookmark_interval=0.2) as api:
        controller.install_crds(api, fixtures.UPSTREAM / "kueue" / "crds")
        controller.install_crds(api, fixtures.FIXTURES / "kueue-emulation")
        fault = api.faults.add(verb=verb, resource="workloads", status=429, count=2)
        async with controller.Kueue(api, stop_wait=2.0):
            env = Env(api)
            await env.setup_queues()

            async def answered_429() -> bool:
                return fault.fired == 2

            await eventually(answered_429, within=10.0, what="two 429s answered")
            await env.job("small", gpus=1)

            async def started() -> bool:
                return (await env.get_job("small"))["spec"]["suspend"] is False

            await eventually(started, within=30.0, what="the Job admitted and started")
            wl = await env.workload(await env.get_job("small"))
            assert cond_is(wl, "Admitted", "True", "Admitted")
