"""Issues 19 and 11 item 1 on the emulated cluster: multi-pod sets restore member by member.

The real webhook and bridge against the emulated apiserver, job controller, scheduler, kubelets
(real processes, real files) and Kueue. The workload (tests/integration/workloads/
member_trainer.py) records its identity and step in every save and refuses a directory saved by
another identity, so a wrong-identity restore ends its pod with exit 7.

Proved on the emulator; on a real kube-apiserver, job controller and scheduler,
tests/realcp/test_member_identity.py runs the timeline for 2- and 4-pod Indexed Jobs under each
consistency choice, the carried-forward member and a JobSet, tests/realcp/test_volcano_identity.py
a Volcano Job, and tests/realcp/test_member_sets.py the gated wait for a set's verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path
from typing import Any

import pytest

from emulator import cluster
from kontinue import keys, restore_plan
from kontinue.kube import api, resources
from kontinue.models import checkpoint
from tests.integration.bridge.conftest import BRIDGE_USER, SYSTEM, eventually
from tests.integration.bridge.test_end_to_end import GRACE, NS, System, system
from tests.integration.workloads import member_trainer

Obj = dict[str, Any]
RESTORED = re.compile(r"^RESTORED member=(\S+) step=(\d+) dir=(\S+)$", re.MULTILINE)
SAVED = re.compile(r"^SAVED member=(\S+) step=(\d+)$", re.MULTILINE)


def _job(name: str, *, priority: str, pods: int, control: Path, steps: int = 0) -> Obj:
    """``steps``: a short high-priority Job that runs a few seconds and completes."""
    return member_trainer.job(
        name,
        namespace=NS,
        priority=priority,
        members=pods,
        control=control,
        grace=GRACE,
        backoff_limit=1,
        short=bool(steps),
    )


async def _live_pods(s: System, job: str, *, exclude: set[str]) -> list[Obj]:
    return [
        p
        for p in await s.pods_of(job)
        if p["metadata"]["uid"] not in exclude and not p["metadata"].get("deletionTimestamp")
    ]


async def _running_all(s: System, job: str, count: int, *, exclude: set[str]) -> list[Obj]:
    found: list[Obj] = []

    async def progressing() -> bool:
        found.clear()
        for pod in await _live_pods(s, job, exclude=exclude):
            container = s.cluster.container(pod, "trainer")
            if container is None or not container.spec.log_path.exists():
                continue
            if container.spec.log_path.read_text().count("PROGRESS step=") >= 5:
                found.append(pod)
        return len(found) == count

    try:
        await eventually(progressing, within=180, what=f"{count} {job} pods 5 steps in")
    except BaseException:
        for pod in await s.pods_of(job):
            print(
                "POD",
                pod["metadata"]["name"],
                pod["metadata"].get("deletionTimestamp"),
                pod.get("status"),
                pod["metadata"].get("annotations"),
            )
            for kind in ("trainer", keys.RESTORE_INIT_CONTAINER):
                c = s.cluster.container(pod, kind)
                if c is not None and c.spec.log_path.exists():
                    print("LOG", kind, c.spec.log_path.read_text()[-2000:])
        for cp in await s.checkpoints():
            print("CP", cp.name, cp.status)
        raise
    return sorted(
        found, key=lambda p: p["metadata"]["annotations"][keys.JOB_COMPLETION_INDEX_ANNOTATION]
    )


async def _preempt(s: System, name: str, control: Path, pods: int = 2) -> None:
    await s.admin.create(
        resources.JOBS, _job(name, priority="high", pods=pods, control=control, steps=1)
    )
    await s.cluster.wait_for(
        resources.JOBS, name, NS, cluster.job_condition("Complete"), timeout=90
    )


def _restores(s: System, pods: list[Obj]) -> dict[str, tuple[int, str]]:
    """identity -> (restored step, saver pod uid) for each pod that restored."""
    found = {}
    for pod in pods:
        for member, step, saver in RESTORED.findall(s.log(pod)):
            found[member] = (int(step), saver)
    return found


def _index(pod: Obj) -> str:
    return f"index={pod['metadata']['annotations'][keys.JOB_COMPLETION_INDEX_ANNOTATION]}"


async def _gated_then_leader_change(s: System, pods: int, seen: set[str], stall: Any) -> None:
    """Every new pod waits, gated and unscheduled, for the set's verdict; then the leading bridge
    dies and the bridge can write again: the other replica must record the set and ungate."""

    async def gated() -> bool:
        found = await _live_pods(s, "par", exclude=seen)
        return len(found) == pods and all(
            {"name": keys.SET_VERDICT_GATE} in (p["spec"].get("schedulingGates") or [])
            for p in found
        )

    await eventually(gated, within=60, what="every new pod gated on the set's verdict")
    await asyncio.sleep(1.0)
    for pod in await _live_pods(s, "par", exclude=seen):
        assert not pod["spec"].get("nodeName"), "a gated pod was scheduled"
    lease = await s.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
    holder = lease["spec"]["holderIdentity"]
    s.bridges[holder].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await s.bridges[holder]
    s.cluster.api.faults.remove(stall)


@pytest.mark.parametrize("pods", [2, 4])
@pytest.mark.parametrize("mode", ["wait-and-leader-change", "no-wait"])
async def test_preempt_one_then_evict_all_with_a_torn_member(
    tmp_path: Path, pods: int, mode: str
) -> None:
    """The timeline of docs/restore-timeline.md, for 2- and 4-pod Indexed Jobs (coupled):

    1. Kueue evicts the Job: set W (every member saves); every new pod restores its own member.
    2. The Eviction API evicts index 0 alone: partial set P holds only index 0; its replacement
       restores P's member, the other pods run on.
    3. Kueue evicts the Job again; the last index is SIGKILLed mid-save (set T Failed), and the
       new pods are created while the bridge cannot yet record T (its status writes fail), so they
       wait, gated, for T's verdict; the leading bridge is then killed and the other replica
       records T and gives the verdict (``wait-and-leader-change``). Without the stall the new
       pods may come before or after T is recorded (``no-wait``); the outcome must not depend on
       it. Then: index 0 resumes from P, every other index from W —
       never from T, never from another identity's directory (issue 19 item 1: on main the
       index-1 pod restored P's index-0 directory; issue 11 item 1: pod 0 restored T's member 0
       while the others fell back).
    """
    control = tmp_path / "control"
    control.mkdir()
    everyone = [f"index={i}" for i in range(pods)]
    waiting = mode == "wait-and-leader-change"
    async with system(
        tmp_path,
        opted_in=True,
        wait_seconds=3,
        gpus_quota=pods,
        node_count=pods,
        replicas=2 if waiting else 1,
    ) as s:
        await s.admin.create(
            resources.JOBS, _job("par", priority="low", pods=pods, control=control)
        )
        first = await _running_all(s, "par", pods, exclude=set())
        await _preempt(s, "high-1", control, pods)
        seen = {p["metadata"]["uid"] for p in first}
        second = await _running_all(s, "par", pods, exclude=seen)
        (whole,) = await s.checkpoints()
        assert whole.status.phase is checkpoint.Phase.SUCCEEDED, whole.status
        in_whole = {m.identity: m.pod_uid for m in whole.spec.members}
        assert sorted(in_whole) == sorted(everyone)
        saved = {m: int(step) for p in first for m, step in SAVED.findall(s.log(p))}
        assert _restores(s, second) == {who: (saved[who], in_whole[who]) for who in everyone}

        # 2. one pod evicted through the Eviction API (a drain): a partial set of index 0 only
        (zero,) = [p for p in second if _index(p) == "index=0"]
        await s.admin.evict(resources.PODS, zero["metadata"]["name"], namespace=NS)
        seen.add(zero["metadata"]["uid"])

        async def partial_done() -> bool:
            cps = [cp for cp in await s.checkpoints() if cp.name != whole.name]
            return len(cps) == 1 and cps[0].status.phase is checkpoint.Phase.SUCCEEDED

        await eventually(partial_done, within=60, what="the partial set Succeeded")
        (partial,) = [cp for cp in await s.checkpoints() if cp.name != whole.name]
        assert [m.identity for m in partial.spec.members] == ["index=0"]
        (replacement,) = await _running_all(
            s, "par", 1, exclude=seen | {p["metadata"]["uid"] for p in second}
        )
        (zero_step,) = [int(step) for _, step in SAVED.findall(s.log(zero))]
        assert _restores(s, [replacement]) == {
            "index=0": (zero_step, partial.spec.members[0].pod_uid)
        }

        # 3. evict all again with the last index torn, the bridge unable to record results
        (control / f"torn-{pods - 1}").write_text("")
        stall = s.cluster.api.faults.add(
            verb="patch", resource="checkpoints", subresource="status", user=BRIDGE_USER, count=None
        )
        if not waiting:
            s.cluster.api.faults.remove(stall)
        await _preempt(s, "high-2", control, pods)
        seen |= {p["metadata"]["uid"] for p in [*second, replacement]}
        if waiting:
            await _gated_then_leader_change(s, pods, seen, stall)

        third = await _running_all(s, "par", pods, exclude=seen)
        torn = [cp for cp in await s.checkpoints() if cp.name not in (whole.name, partial.name)]
        job = await s.admin.get(resources.JOBS, "par", namespace=NS)
        assert [cp.status.phase for cp in torn] == [checkpoint.Phase.FAILED], (
            [cp.status for cp in torn],
            job.get("status"),
        )
        # ordered by the bridge's clock, not by second-resolution trigger times: the whole Job
        # evicted in the second of the partial set is still the newer set (restore_plan.py)
        assert all(cp.metadata.annotation(keys.CREATED_AT_ANNOTATION) for cp in [partial, *torn])
        assert restore_plan.created_at(torn[0]) > restore_plan.created_at(partial)
        expected = {who: (saved[who], in_whole[who]) for who in everyone[1:]}
        expected["index=0"] = (zero_step, partial.spec.members[0].pod_uid)
        assert _restores(s, third) == expected
        for pod in [*first, *second, replacement, *third]:
            assert "WRONG-MEMBER" not in s.log(pod)


async def _cordon(s: System, node: str, *, on: bool) -> None:
    await s.admin.patch(
        resources.NODES, node, {"spec": {"unschedulable": on}}, content_type=api.MERGE_PATCH
    )


async def test_a_pod_unschedulable_at_eviction_is_carried_forward_and_resumes_its_own_state(
    tmp_path: Path,
) -> None:
    """Issue 19 item 2 with a 3-pod Indexed Job: one pod is still Pending (its node cordoned)
    when Kueue evicts the Job. The set Succeeds with that member carried forward, and the next
    incarnation resumes the two that ran from the new set and the third from its own older state.
    On main the Pending pod failed the set, and every pod fell back to the older set."""
    control = tmp_path / "control"
    control.mkdir()
    everyone = ["index=0", "index=1", "index=2"]
    async with system(tmp_path, opted_in=True, wait_seconds=3, gpus_quota=3, node_count=3) as s:
        await s.admin.create(resources.JOBS, _job("par", priority="low", pods=3, control=control))
        first = await _running_all(s, "par", 3, exclude=set())
        seen = {p["metadata"]["uid"] for p in first}
        await _preempt(s, "high-1", control, 1)
        await _cordon(s, "gpu-c", on=True)  # one of the next incarnation's pods cannot schedule
        second = await _running_all(s, "par", 2, exclude=seen)
        (whole,) = await s.checkpoints()
        assert whole.status.phase is checkpoint.Phase.SUCCEEDED, whole.status
        in_whole = {m.identity: m.pod_uid for m in whole.spec.members}
        saved_first = {m: int(step) for p in first for m, step in SAVED.findall(s.log(p))}
        (pending,) = [
            p
            for p in await _live_pods(s, "par", exclude=seen)
            if p["metadata"]["uid"] not in {q["metadata"]["uid"] for q in second}
        ]
        assert not pending["spec"].get("nodeName")
        never_ran = _index(pending)

        await _preempt(s, "high-2", control, 1)
        seen |= {p["metadata"]["uid"] for p in [*second, pending]}

        async def recorded() -> bool:
            cps = [cp for cp in await s.checkpoints() if cp.name != whole.name]
            return len(cps) == 1 and cps[0].status.phase.terminal

        await eventually(recorded, within=60, what="the second set recorded")
        (carried,) = [cp for cp in await s.checkpoints() if cp.name != whole.name]
        assert carried.status.phase is checkpoint.Phase.SUCCEEDED, carried.status
        states = {
            m.identity: r.state
            for m in carried.spec.members
            for r in carried.status.members
            if r.pod_name == m.pod_name
        }
        assert states == {
            who: (
                checkpoint.MemberState.CARRIED_FORWARD
                if who == never_ran
                else checkpoint.MemberState.SAVED
            )
            for who in everyone
        }
        assert "1 carried forward" in (carried.status.message or "")
        await _cordon(s, "gpu-c", on=False)

        third = await _running_all(s, "par", 3, exclude=seen)
        in_carried = {m.identity: m.pod_uid for m in carried.spec.members}
        saved_second = {m: int(step) for p in second for m, step in SAVED.findall(s.log(p))}
        expected = {
            who: (saved_second[who], in_carried[who]) for who in everyone if who != never_ran
        }
        expected[never_ran] = (saved_first[never_ran], in_whole[never_ran])
        assert _restores(s, third) == expected

        async def told() -> bool:  # the Job's Restored Event names the rule
            events = (await s.admin.list(resources.EVENTS, namespace=NS))["items"]
            return any(
                e.get("reason") == keys.EVENT_RESTORED
                and "(each its own member, consistency coupled)" in e.get("message", "")
                for e in events
            )

        await eventually(told, within=30, what="a Restored Event naming the consistency rule")


def _jobset_child(jobset: str, uid: str, replicated: str, job_index: int, control: Path) -> Obj:
    """A JobSet's child Job as its controller creates it: Indexed, 2 pods, the JobSet labels and
    annotations on the Job and its pod template (kubernetes-sigs/jobset
    pkg/controllers/jobset_controller.go ``labelAndAnnotateObject``). No JobSet controller runs:
    the test plays it."""
    job = _job(f"{jobset}-{replicated}-{job_index}", priority="low", pods=2, control=control)
    marks = {
        keys.JOBSET_NAME_LABEL: jobset,
        keys.JOBSET_UID_LABEL: uid,
        keys.JOBSET_REPLICATED_JOB_LABEL: replicated,
        keys.JOBSET_JOB_INDEX_LABEL: str(job_index),
    }
    job["metadata"]["labels"].update(marks)
    job["metadata"]["annotations"] = dict(marks)
    job["spec"]["template"]["metadata"] = {"labels": dict(marks), "annotations": dict(marks)}
    return job


async def test_jobset_members_do_not_collide_each_pod_restores_its_own(tmp_path: Path) -> None:
    """Issue 19 item 3: a JobSet of 2 replicated Jobs x 2 pods has two pods of each completion
    index; drained together (Eviction API), the set records 4 distinct identities and every
    replacement pod restores its own (on main both pods of an index got the first one's)."""
    control = tmp_path / "control"
    control.mkdir()
    uid = "5b0c1f9e-7d1a-4f57-9a53-1e2d3c4b5a69"
    children = [_jobset_child("js", uid, rj, 0, control) for rj in ("driver", "workers")]
    async with system(tmp_path, opted_in=True, wait_seconds=3, gpus_quota=4, node_count=4) as s:
        for child in children:
            await s.admin.create(resources.JOBS, child)
        names = [c["metadata"]["name"] for c in children]
        first = [p for name in names for p in await _running_all(s, name, 2, exclude=set())]
        for pod in first:
            await s.admin.evict(resources.PODS, pod["metadata"]["name"], namespace=NS)
        seen = {p["metadata"]["uid"] for p in first}

        async def recorded() -> bool:
            cps = await s.checkpoints()
            return len(cps) == 1 and cps[0].status.phase.terminal

        await eventually(recorded, within=60, what="the JobSet's set recorded")
        (cp,) = await s.checkpoints()
        assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status
        assert cp.spec.lineage.owner_kind == f"JobSet.{keys.JOBSET_GROUP}"
        by_identity = {m.identity: m.pod_uid for m in cp.spec.members}
        everyone = [
            f"replicatedJob={rj},jobIndex=0,index={i}"
            for rj in ("driver", "workers")
            for i in (0, 1)
        ]
        assert sorted(by_identity) == sorted(everyone)
        saved = {m: int(step) for p in first for m, step in SAVED.findall(s.log(p))}
        second = [p for name in names for p in await _running_all(s, name, 2, exclude=seen)]
        assert _restores(s, second) == {who: (saved[who], by_identity[who]) for who in everyone}


@pytest.mark.timeout(300)  # three incarnations of two pods: slower under load
@pytest.mark.parametrize("consistency", ["independent", "shared"])
async def test_a_failed_set_is_used_as_the_consistency_choice_says(
    tmp_path: Path, consistency: str
) -> None:
    """docs/api.md, "Consistency", end to end for the two choices besides ``coupled`` (the
    default, which test_preempt_one_then_evict_all_with_a_torn_member runs): a 2-pod Indexed Job
    evicted whole (set W, both saved), then evicted whole again with index 1 SIGKILLed mid-save
    (set T ``Failed``, index 0 saved). Under ``independent`` index 0 resumes from T's member and
    index 1 from W's (each its own newest saved member); under ``shared`` both resume from T's
    index-0 member (rank 0's newest saved state: the only way one identity's state reaches
    another, named in ``KONTINUE_RESTORE_MEMBER``)."""
    control = tmp_path / "control"
    control.mkdir()
    everyone = ["index=0", "index=1"]
    async with system(
        tmp_path, opted_in=True, wait_seconds=3, gpus_quota=2, node_count=2, consistency=consistency
    ) as s:
        await s.admin.create(resources.JOBS, _job("par", priority="low", pods=2, control=control))
        first = await _running_all(s, "par", 2, exclude=set())
        await _preempt(s, "high-1", control)
        seen = {p["metadata"]["uid"] for p in first}
        second = await _running_all(s, "par", 2, exclude=seen)
        (whole,) = await s.checkpoints()
        assert whole.status.phase is checkpoint.Phase.SUCCEEDED, whole.status
        in_whole = {m.identity: m.pod_uid for m in whole.spec.members}
        saved_first = {m: int(step) for p in first for m, step in SAVED.findall(s.log(p))}
        if consistency == "shared":  # rank 0's member for both
            assert _restores(s, second) == dict.fromkeys(
                everyone, (saved_first["index=0"], in_whole["index=0"])
            )
        else:
            assert _restores(s, second) == {
                who: (saved_first[who], in_whole[who]) for who in everyone
            }

        (control / "torn-1").write_text("")
        await _preempt(s, "high-2", control)
        seen |= {p["metadata"]["uid"] for p in second}
        third = await _running_all(s, "par", 2, exclude=seen)
        (torn,) = [cp for cp in await s.checkpoints() if cp.name != whole.name]

        async def recorded() -> bool:
            (cp,) = [cp for cp in await s.checkpoints() if cp.name == torn.name]
            return cp.status.phase.terminal

        await eventually(recorded, within=60, what="the torn set recorded")
        (torn,) = [cp for cp in await s.checkpoints() if cp.name == torn.name]
        assert torn.status.phase is checkpoint.Phase.FAILED, torn.status
        in_torn = {m.identity: m.pod_uid for m in torn.spec.members}
        saved_second = {m: int(step) for p in second for m, step in SAVED.findall(s.log(p))}
        assert "index=1" not in saved_second  # SIGKILLed mid-save
        t0 = (saved_second["index=0"], in_torn["index=0"])
        if consistency == "shared":
            assert _restores(s, third) == dict.fromkeys(everyone, t0)
        else:
            assert _restores(s, third) == {
                "index=0": t0,
                "index=1": (saved_first["index=1"], in_whole["index=1"]),
            }
        for pod in [*first, *second, *third]:
            assert "WRONG-MEMBER" not in s.log(pod)
