"""Issue 19 on the real control-plane tier: each pod restores its own member.

Real kube-apiserver, job controller, garbage collector and kube-scheduler v1.36.2; the project's
emulated kubelet (real processes, real SIGTERM) and emulated Kueue drive them (the flow of
tests/realcp/test_kueue_flow.py, ``running_flow``). The workload is the reference trainer
(reference_workload/trainer.py): every save's manifest records its member identity
(``KONTINUE_MEMBER``) and its step; a restore verifies both (the manifest's ``member`` against
``KONTINUE_RESTORE_MEMBER``, kontinue/checkpoint_format.py ``check_member``; the step against its
own ``trainer.json``) and prints ``RESTORED step=<n> from=<dir> member=<saver> as=<self>``. The
restore init container refuses another identity's directory the same way (exit 7,
kontinue/restore/__init__.py ``OTHER_MEMBER``).

Which test proves which of the issue's cases:

- ``test_preempt_one_then_evict_all_each_index_restores_its_own``: 2- and 4-pod Indexed Jobs
  under each consistency choice (all six combinations): kube-scheduler preempts one pod, Kueue
  evicts the Workload, readmission; every pod resumes from its own identity's newest state (under
  ``shared``: rank 0's), and no restore ever loads another identity's directory except rank 0's
  under ``shared``.
- ``test_a_member_unschedulable_at_eviction_is_carried_forward``: a 3-pod Indexed Job, one pod
  unschedulable (the real kube-scheduler leaves it Pending) when Kueue evicts: the set Succeeds
  with that member carried forward; the next incarnation resumes each index from its own newest
  state.
- ``test_a_jobset_evicted_and_readmitted_restores_four_identities``: a JobSet of 2 replicated
  Jobs x 2 pods, plumbed at its CREATE: one pod preempted by kube-scheduler (its child Job does
  not count it, its replacement restores it), then evicted by Kueue and readmitted: 4 distinct
  identities, each restores its own.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.kueue import jobsets as kueue_jobsets
from kontinue import keys
from kontinue import restore as restore_program
from kontinue.kube import api, resources
from kontinue.models import checkpoint
from tests.realcp import controlplane, jobset, processes
from tests.realcp.test_kueue_flow import PROGRESS, Flow, restore_member, running_flow
from tests.soak import shapes
from webhook import job_plumbing

Obj = dict[str, Any]
RESTORED = re.compile(r"^RESTORED step=(\d+) from=\S+ member=(\S+) as=(\S+)", re.MULTILINE)
pytestmark = pytest.mark.timeout(900)
OURS = [job_plumbing.DISRUPTION_RULE, restore_program.POD_FAILURE_RULE]
Pods = Callable[[], Awaitable[list[Obj]]]


def identity_of(pod: Obj) -> str:
    """The member identity docs/api.md gives the pod (tests/soak/shapes.py: not the product's)."""
    meta = pod["metadata"]
    return shapes.identity(meta.get("labels") or {}, meta.get("annotations") or {})


def last_step(flow: Flow, pod: Obj) -> int:
    """The last step the pod's trainer reported (it saves at that step on SIGTERM)."""
    return max(int(s) for s in PROGRESS.findall(flow.log(pod)))


async def running_members(
    flow: Flow, pods: Pods, *, count: int, exclude: set[str], min_step: int = 3
) -> dict[str, Obj]:
    """One pod per identity, ``count`` identities, each trainer past ``min_step``."""
    found: dict[str, Obj] = {}

    async def all_running() -> bool:
        for pod in await pods():
            if pod["metadata"]["uid"] in exclude or pod["metadata"].get("deletionTimestamp"):
                continue
            steps = [int(s) for s in PROGRESS.findall(flow.log(pod))]
            if steps and max(steps) >= min_step:
                found.setdefault(identity_of(pod), pod)
        return len(found) == count

    await flow.until(all_running, f"{count} members running past step {min_step}")
    return found


async def restored_members(
    flow: Flow, pods: Pods, expected: dict[str, tuple[str, int]], *, exclude: set[str]
) -> dict[str, Obj]:
    """For each identity, a new pod whose trainer restored ``expected[identity]``: (the member
    that saved it, the step). Returns the pods as the apiserver has them now."""
    found: dict[str, Obj] = {}

    async def all_restored() -> bool:
        for pod in await pods():
            who = identity_of(pod)
            if pod["metadata"]["uid"] in exclude or who in found or who not in expected:
                continue
            saver, step = expected[who]
            if (str(step), saver, who) in RESTORED.findall(flow.log(pod)):
                found[who] = pod
        return len(found) == len(expected)

    wanted = ", ".join(f"{who} <- {saver}@{step}" for who, (saver, step) in expected.items())
    await flow.until(all_restored, f"every member restored ({wanted})")
    return {
        who: await flow.admin.get(resources.PODS, pod["metadata"]["name"], namespace=flow.namespace)
        for who, pod in found.items()
    }


def assert_no_foreign_restore(flow: Flow, pods: list[Obj], *, shared_from: str | None) -> None:
    """Every restore any of ``pods`` made loaded its own identity's directory (or, under
    ``shared``, rank 0's: ``shared_from``)."""
    for pod in pods:
        for _, saver, who in RESTORED.findall(flow.log(pod)):
            assert saver in (who, shared_from), (pod["metadata"]["name"], saver, who)


@pytest.mark.parametrize("consistency", ["coupled", "independent", "shared"])
@pytest.mark.parametrize("members", [2, 4])
async def test_preempt_one_then_evict_all_each_index_restores_its_own(
    scheduler: controlplane.ControlPlane,
    kontinue: processes.Installed,
    admin: api.Api,
    namespace: str,
    tmp_path: Path,
    members: int,
    consistency: str,
) -> None:
    """Issue 19's timeline for an Indexed Job of ``members`` pods under ``consistency``:
    kube-scheduler preempts one index (a set of that identity only, which its replacement
    restores), later Kueue evicts the Workload (one set of every identity), then readmission:
    every pod resumes from its own identity's newest state; under ``shared`` from rank 0's
    (``index=0``) member of the newest set. No restore loads another identity's directory."""
    async with running_flow(
        scheduler,
        kontinue,
        admin,
        namespace,
        tmp_path,
        gpus_per_node=members,
        consistency=consistency,
    ) as flow:
        low = flow.job(flow.low, priority=f"low-{flow.tag}", steps=100000, pods=members)
        await admin.create(resources.JOBS, low, namespace=namespace)

        async def pods() -> list[Obj]:
            return await flow.pods_of(flow.low)

        first = await running_members(flow, pods, count=members, exclude=set())
        seen = {p["metadata"]["uid"]: p for p in first.values()}

        # 1. kube-scheduler preempts one index for a pod outside Kueue.
        await flow.run_urgent_pod()
        (partial,) = await flow.checkpoints()
        (victim,) = partial.spec.members
        hit = next(who for who, p in first.items() if p["metadata"]["uid"] == victim.pod_uid)
        assert victim.identity == hit
        saved_hit = last_step(flow, first[hit])
        # the partial set holds only ``hit``: it is rank 0 of the lineage's sets, even shared
        replaced = await restored_members(flow, pods, {hit: (hit, saved_hit)}, exclude=set(seen))
        assert restore_member(replaced[hit]) == hit
        assert replaced[hit]["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == (
            partial.name
        )
        seen.update({p["metadata"]["uid"]: p for p in replaced.values()})

        # 2. Kueue evicts the whole Workload for a higher-priority Job: one set of every identity.
        running = {**first, hit: replaced[hit]}
        high = flow.job(f"{flow.high}-job", priority=f"high-{flow.tag}", steps=5)
        await admin.create(resources.JOBS, high, namespace=namespace)

        async def whole_set() -> bool:
            found = [cp for cp in await flow.checkpoints() if cp.name != partial.name]
            return bool(found) and found[0].status.phase.terminal

        await flow.until(whole_set, "the eviction's set terminal")
        (evicted,) = [cp for cp in await flow.checkpoints() if cp.name != partial.name]
        assert evicted.status.phase is checkpoint.Phase.SUCCEEDED, evicted.status
        everyone = sorted(running, key=shapes_order)
        assert sorted((m.identity for m in evicted.spec.members), key=shapes_order) == everyone
        saved = {who: last_step(flow, pod) for who, pod in running.items()}

        # 3. Readmission: each index restores its own member of the newest set (shared: rank 0's).
        rank0 = everyone[0]
        expected = {
            who: (rank0, saved[rank0]) if consistency == "shared" else (who, saved[who])
            for who in everyone
        }
        successors = await restored_members(flow, pods, expected, exclude=set(seen))
        for who, pod in successors.items():
            assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == evicted.name
            assert restore_member(pod) == expected[who][0]
        seen.update({p["metadata"]["uid"]: p for p in successors.values()})
        assert_no_foreign_restore(
            flow, list(seen.values()), shared_from=rank0 if consistency == "shared" else None
        )
        job = await admin.get(resources.JOBS, flow.low, namespace=namespace)
        assert not (job.get("status") or {}).get("failed"), job["status"]


def shapes_order(who: str) -> tuple[int, ...]:
    """Natural order of ``index=<i>`` identities (rank 0 first)."""
    return tuple(int(n) for n in re.findall(r"\d+", who))


async def _set_after(flow: Flow, older: set[str]) -> checkpoint.Checkpoint:
    """The one Checkpoint not named in ``older``, once it is terminal."""

    async def terminal() -> bool:
        found = [cp for cp in await flow.checkpoints() if cp.name not in older]
        return len(found) == 1 and found[0].status.phase.terminal

    await flow.until(terminal, "the eviction's set terminal")
    (found,) = [cp for cp in await flow.checkpoints() if cp.name not in older]
    return found


async def _evict(flow: Flow, name: str, older: set[str]) -> checkpoint.Checkpoint:
    """Kueue evicts the low Job's Workload for a 1-pod higher-priority Job ``name``; returns the
    eviction's set once terminal."""
    high = flow.job(name, priority=f"high-{flow.tag}", steps=5)
    await flow.admin.create(resources.JOBS, high, namespace=flow.namespace)
    return await _set_after(flow, older)


async def test_a_member_unschedulable_at_eviction_is_carried_forward(
    scheduler: controlplane.ControlPlane,
    kontinue: processes.Installed,
    admin: api.Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Issue 19: a 3-pod Indexed Job (``coupled``) on two nodes, 2 GPUs and 1. All three run, and
    a Kueue eviction saves a set of all three. The 1-GPU node is cordoned, so on readmission the
    real kube-scheduler places two pods and the third stays Pending; the second eviction finds it
    unscheduled: the set Succeeds with that member ``CarriedForward``. The node is uncordoned and
    on the next readmission each index resumes from its own newest state: the two that ran from
    the second set, the carried-forward one from the first (the plan looks through)."""
    async with running_flow(
        scheduler, kontinue, admin, namespace, tmp_path, gpus_of_nodes=(2, 1)
    ) as flow:
        low = flow.job(flow.low, priority=f"low-{flow.tag}", steps=100000, pods=3)
        await admin.create(resources.JOBS, low, namespace=namespace)

        async def pods() -> list[Obj]:
            return await flow.pods_of(flow.low)

        first = await running_members(flow, pods, count=3, exclude=set())
        seen = {p["metadata"]["uid"]: p for p in first.values()}
        small = flow.nodes[1]
        await admin.merge_patch(resources.NODES, small, {"spec": {"unschedulable": True}})

        # 1. Kueue evicts all three: a set of three saved members.
        whole = await _evict(flow, f"{flow.high}-1", set())
        assert whole.status.phase is checkpoint.Phase.SUCCEEDED, whole.status
        assert sorted(m.identity for m in whole.spec.members) == sorted(first)
        saved = {who: last_step(flow, pod) for who, pod in first.items()}

        # 2. Readmission with the small node cordoned: two restore and run on, one stays Pending.
        placed: dict[str, Obj] = {}
        stuck: dict[str, Obj] = {}

        async def two_run_one_pending() -> bool:
            placed.clear()
            stuck.clear()
            for pod in await pods():
                who = identity_of(pod)
                if pod["metadata"]["uid"] in seen or pod["metadata"].get("deletionTimestamp"):
                    continue
                log = flow.log(pod)
                steps = [int(s) for s in PROGRESS.findall(log)]
                if (str(saved[who]), who, who) in RESTORED.findall(log) and max(
                    steps, default=0
                ) >= saved[who] + 3:
                    placed[who] = pod
                elif not pod["spec"].get("nodeName"):
                    stuck[who] = pod
            return len(placed) == 2 and len(stuck) == 1

        await flow.until(two_run_one_pending, "two members restored and running, one Pending")
        (unscheduled,) = stuck
        seen.update({p["metadata"]["uid"]: p for p in [*placed.values(), *stuck.values()]})

        # 3. Kueue evicts again: the Pending member is carried forward, the set Succeeds.
        second = await _evict(flow, f"{flow.high}-2", {whole.name})
        assert second.status.phase is checkpoint.Phase.SUCCEEDED, second.status
        states = {
            m.identity: next(r.state for r in second.status.members if r.pod_name == m.pod_name)
            for m in second.spec.members
        }
        assert states == {
            **dict.fromkeys(placed, checkpoint.MemberState.SAVED),
            unscheduled: checkpoint.MemberState.CARRIED_FORWARD,
        }, states
        newer = {who: last_step(flow, pod) for who, pod in placed.items()}
        await admin.merge_patch(resources.NODES, small, {"spec": {"unschedulable": False}})

        # 4. Readmission where all three fit: each index from its own newest state.
        expected = {who: (who, step) for who, step in newer.items()}
        expected[unscheduled] = (unscheduled, saved[unscheduled])
        successors = await restored_members(flow, pods, expected, exclude=set(seen))
        for who, pod in successors.items():
            source = whole.name if who == unscheduled else second.name
            assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == source
            assert restore_member(pod) == who
        assert_no_foreign_restore(flow, [*seen.values(), *successors.values()], shared_from=None)
        job = await admin.get(resources.JOBS, flow.low, namespace=namespace)
        assert not (job.get("status") or {}).get("failed"), job["status"]


async def test_a_jobset_evicted_and_readmitted_restores_four_identities(
    scheduler: controlplane.ControlPlane,
    kontinue: processes.Installed,
    admin: api.Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Issue 19: a JobSet of 2 replicated Jobs (``driver``, ``workers``) x 2 pods in an opted-in
    ClusterQueue. The JobSet object is real (the upstream CRD), plumbed at its CREATE by the
    webhook the real apiserver calls (jobsets.mutate); its controller is played
    (tests/realcp/jobset.py: child Jobs with the JobSet's owner reference, labels and
    annotations, their spec the template's), so the real job controller creates the pods, and
    each child Job carries the podFailurePolicy rules. The real kube-scheduler preempts one pod
    for a pod outside Kueue: a set of that identity, which the child Job's replacement restores
    (its backoffLimit is 0: the preemption is not counted). The emulated Kueue admits the
    JobSet's Workload (its JobSet integration, emulator/kueue/jobsets.py), then evicts it for a
    higher-priority Job: Kueue suspends the JobSet, the JobSet controller its child Jobs, the
    job controller deletes the pods, every trainer saves. On readmission the 4 pods have 4
    distinct identities (``replicatedJob=<name>,jobIndex=0,index=<i>``) and each restores its own
    member of the JobSet's set. No child Job ever counts a failed pod."""
    async with (
        running_flow(
            scheduler, kontinue, admin, namespace, tmp_path, gpus_per_node=4, jobsets=True
        ) as flow,
        jobset.Controller(admin, namespace),
    ):
        name = f"js-{flow.tag}"
        template = flow.job(name, priority=f"low-{flow.tag}", steps=100000, pods=2)["spec"]
        body = {
            "apiVersion": kueue_jobsets.API_VERSION,
            "kind": "JobSet",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {keys.KUEUE_QUEUE_NAME_LABEL: flow.queue},
            },
            # suspended at creation, as Kueue's JobSet webhook defaults it
            # (jobframework.ApplyDefaultForSuspend)
            "spec": {
                "suspend": True,
                "replicatedJobs": [
                    {"name": rj, "replicas": 1, "template": {"spec": template}}
                    for rj in shapes.REPLICATED
                ],
            },
        }
        created = await admin.create(kueue_jobsets.JOBSETS, body, namespace=namespace)

        async def pods() -> list[Obj]:
            return await flow.cluster.pods(namespace, labels={keys.JOBSET_NAME_LABEL: name})

        identities = [
            f"replicatedJob={rj},jobIndex=0,index={i}" for rj in shapes.REPLICATED for i in (0, 1)
        ]
        first = await running_members(flow, pods, count=4, exclude=set())
        assert sorted(first) == identities, sorted(first)
        for pod in first.values():  # made by the real job controller for the played child Job
            (owner,) = pod["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"][: len(name) + 1]) == ("Job", f"{name}-"), owner

        async def children() -> list[Obj]:
            selector = {keys.JOBSET_NAME_LABEL: name}
            listed = await admin.list(resources.JOBS, namespace=namespace, label_selector=selector)
            return list(listed["items"])

        # The webhook plumbed the JobSet at CREATE; each child Job copied its template.
        for child in await children():
            assert child["spec"]["podReplacementPolicy"] == "Failed"
            assert child["spec"]["podFailurePolicy"]["rules"][:2] == OURS, child["spec"]

        # 1. kube-scheduler preempts one pod for a pod outside Kueue. Its child Job has
        # backoffLimit 0: counted as a failure, that one preemption would fail the Job and no
        # replacement would come; the DisruptionTarget rule ignores it, the replacement restores.
        await flow.run_urgent_pod()
        (partial,) = await flow.checkpoints()
        (victim,) = partial.spec.members
        hit = next(who for who, p in first.items() if p["metadata"]["uid"] == victim.pod_uid)
        assert victim.identity == hit
        replaced = await restored_members(
            flow, pods, {hit: (hit, last_step(flow, first[hit]))}, exclude=set(seen_uids(first))
        )
        assert restore_member(replaced[hit]) == hit
        running = {**first, hit: replaced[hit]}
        seen = {*seen_uids(first), *seen_uids(replaced)}

        # 2. Kueue evicts the JobSet's Workload for a higher-priority Job: one set of all four.
        evicted = await _evict(flow, f"{flow.high}-job", {partial.name})
        assert evicted.status.phase is checkpoint.Phase.SUCCEEDED, evicted.status
        assert (evicted.spec.lineage.owner_kind, evicted.spec.lineage.owner_uid) == (
            f"JobSet.{keys.JOBSET_GROUP}",
            created["metadata"]["uid"],
        )
        assert sorted(m.identity for m in evicted.spec.members) == identities
        saved = {who: last_step(flow, pod) for who, pod in running.items()}

        # 3. Readmission: four new pods, four distinct identities, each restores its own member.
        expected = {who: (who, step) for who, step in saved.items()}
        successors = await restored_members(flow, pods, expected, exclude=seen)
        for who, pod in successors.items():
            assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == evicted.name
            assert restore_member(pod) == who
        every = [*first.values(), *replaced.values(), *successors.values()]
        assert_no_foreign_restore(flow, every, shared_from=None)
        for child in await children():  # no preemption was counted as a failed pod
            status = child.get("status") or {}
            assert not status.get("failed"), (child["metadata"]["name"], status)


def seen_uids(pods: dict[str, Obj]) -> list[str]:
    return [p["metadata"]["uid"] for p in pods.values()]
