"""One soak run: the plan of a seed played against the whole system, then the invariants.

A workload of one shape (tests/soak/shapes.py: a 2-pod Indexed Job, a JobSet of 2 replicated
Jobs x 2 pods, a Volcano Job of 2 tasks x 2 pods) of the member workload (tests/integration/
workloads/member_trainer.py: it prints the step it restored and the step it saved, refuses
another identity's directory) runs in an opted-in queue. Each round evicts it from the round's
source with the round's faults around the eviction, then waits — within a bound, past which the
cluster counts as blocked — until the faults are over and every member runs again. After every
round the step invariants are checked on the record so far; at the end the workload is told to
finish, it must complete and every finalizer be released, and the restore invariants (among
them: no pod restores state saved by another identity) are checked over every pod the run
created (:mod:`tests.soak.invariants`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import random
import time
from pathlib import Path
from typing import Any

from emulator import cluster as cluster_module
from emulator.apiserver import faults as emulated_faults
from kontinue import keys
from kontinue.kube import errors, resources
from tests.integration.bridge.conftest import BRIDGE_USER
from tests.soak import history, invariants, plan, shapes, stack

Obj = dict[str, Any]
JOB = shapes.NAME
ROUND_BOUND = 150.0
"""Seconds a round may take before the cluster counts as blocked (generous: a loaded 2-core
machine, a bridge replica restarting, a webhook outage)."""
FINALIZER_SLACK = 20.0


@dataclasses.dataclass
class Report:
    seed: int
    rounds: list[plan.Round]
    shape: str = shapes.INDEXED.name
    evictions: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    api_errors_fired: int = 0
    checks: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violations: list[invariants.Violation] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    pods: int = 0
    sets: int = 0
    identities: set[str] = dataclasses.field(default_factory=set)
    """The member identities the run's sets recorded."""
    restored: set[str] = dataclasses.field(default_factory=set)
    """The identities of the pods that restored a member (each its own, or a violation)."""
    round_seconds: list[float] = dataclasses.field(default_factory=list)
    trace: list[str] = dataclasses.field(default_factory=list)
    """Every pod's outcome and every set's record, oldest first (printed with ``--trace``)."""

    findings: list[invariants.Violation] = dataclasses.field(default_factory=list)
    """Counted, printed, not failures (``invariants.UNRECORDED``)."""

    def add(self, found: list[invariants.Violation]) -> None:
        known = {str(v) for v in [*self.violations, *self.findings]}
        for v in found:
            if str(v) in known:
                continue
            known.add(str(v))
            (self.findings if v.invariant == invariants.UNRECORDED else self.violations).append(v)

    def summary(self) -> str:
        lines = [
            f"seed {self.seed} {self.shape}: {len(self.rounds)} rounds in {self.seconds:.0f} s; "
            f"{sum(self.evictions.values())} evictions {dict(sorted(self.evictions.items()))}; "
            f"{self.pods} pods, {self.sets} checkpoint sets of {len(self.identities)} identities, "
            f"{len(self.restored)} of them restored; rounds took "
            f"{', '.join(f'{t:.0f}' for t in self.round_seconds)} s",
            f"  faults {dict(sorted(self.faults.items()))}, API errors answered "
            f"{self.api_errors_fired}",
            f"  invariant checks {sum(self.checks.values())} {dict(sorted(self.checks.items()))}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  finding: {v}" for v in self.findings]
        if self.violations:
            lines.append(f"  {len(self.violations)} VIOLATIONS:")
            lines += [f"    {v}" for v in self.violations]
            lines.append(plan.describe(self.seed, self.rounds))
            lines.append(
                f"  replay: make soak SEED={self.seed} ROUNDS={len(self.rounds)} SHAPE={self.shape}"
            )
        else:
            lines.append("  0 violations")
        return "\n".join(lines)


def preemptor_pod(name: str) -> Obj:
    """A bare higher-priority pod (no queue: Kueue ignores it) that fits on no node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": stack.NS},
        "spec": {
            "restartPolicy": "Never",
            "priorityClassName": "high",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/preemptor:v1",
                    "command": ["python", "-c", "import time; time.sleep(2)"],
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {keys.GPU_RESOURCE: "1"},
                    },
                }
            ],
        },
    }


class Runner:
    def __init__(
        self, s: stack.Stack, record: history.History, report: Report, *, shape: shapes.Shape
    ):
        self.s = s
        self.record = record
        self.report = report
        self.shape = shape
        self.members = shape.members
        self.control = s.cluster.workdir / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.job_uid = ""

    # -- reading ------------------------------------------------------------------------------

    async def pods(self) -> list[Obj]:
        return await self.s.cluster.pods(stack.NS, labels=shapes.selector(self.shape))

    def log(self, pod: Obj) -> str | None:
        container = self.s.cluster.container(pod, "trainer")
        if container is None or not container.spec.log_path.exists():
            return None
        return container.spec.log_path.read_text()

    async def all_running(self) -> list[Obj] | None:
        """The workload's live pods when every member runs (past 3 steps) and none is
        terminating."""
        pods = await self.pods()
        live = []
        for pod in pods:
            meta = pod["metadata"]
            phase = (pod.get("status") or {}).get("phase")
            if meta.get("deletionTimestamp"):
                return None
            if phase in ("Succeeded", "Failed"):
                continue
            text = self.log(pod)
            if phase != "Running" or text is None or text.count("PROGRESS step=") < 3:
                return None
            live.append(pod)
        return live if len(live) == self.members else None

    async def sets_settled(self) -> bool:
        listed = await self.s.admin.list(resources.CHECKPOINTS, namespace=stack.NS)
        return all(
            (item.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Expired")
            for item in listed["items"]
        )

    async def until(self, check: Any, *, what: str, within: float = ROUND_BOUND) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            if await check():
                return True
            await asyncio.sleep(0.1)
        late = invariants.Violation("never-blocked", f"{what} not within {within:.0f} s")
        self.report.add([late])
        await self.diagnose()
        return False

    async def diagnose(self) -> None:
        """What a blocked round looked like: the Job's and its Workload's conditions (the
        vcjob's status, the pods' phases)."""
        with contextlib.suppress(errors.ApiError):
            for pod in await self.pods():
                meta = pod["metadata"]
                self.report.notes.append(
                    f"blocked: pod {meta['name']} {(pod.get('status') or {}).get('phase')} "
                    f"deleting={bool(meta.get('deletionTimestamp'))} "
                    f"gates={(pod.get('spec') or {}).get('schedulingGates')}"
                )
            if self.shape is shapes.VCJOB:
                job = await self.s.admin.get(resources.VOLCANO_JOBS, JOB, namespace=stack.NS)
                self.report.notes.append(f"blocked: vcjob {JOB} status {job.get('status')}")
                return
            if self.shape is shapes.JOBSET:
                return
            job = await self.s.admin.get(resources.JOBS, JOB, namespace=stack.NS)
            self.report.notes.append(f"blocked: Job {JOB} status {job.get('status')}")
            listed = await self.s.admin.list(resources.WORKLOADS, namespace=stack.NS)
            for wl in listed["items"]:
                owners = [o.get("name") for o in wl["metadata"].get("ownerReferences") or []]
                if JOB in owners:
                    conditions = [
                        (c.get("type"), c.get("status"), c.get("reason"))
                        for c in (wl.get("status") or {}).get("conditions") or []
                    ]
                    self.report.notes.append(
                        f"blocked: Workload {wl['metadata']['name']} {conditions}"
                    )

    # -- the run ------------------------------------------------------------------------------

    async def start(self) -> bool:
        resource, probe = shapes.probe(self.shape, control=self.control, grace=stack.GRACE)

        async def plumbed() -> bool:
            dry = await self.s.admin.create(resource, probe, dry_run=True)
            return shapes.plumbed(self.shape, dry)

        if not await self.until(plumbed, what="the webhook plumbing the workload", within=60):
            return False
        for resource, body in shapes.workload(self.shape, control=self.control, grace=stack.GRACE):
            created = await self.s.admin.create(resource, body)
            self.job_uid = created["metadata"]["uid"]
        if self.shape is shapes.JOBSET:
            self.job_uid = shapes.JOBSET_UID
        return await self.until(self._running, what="the workload's first pods running")

    async def _running(self) -> bool:
        return await self.all_running() is not None

    async def round(self, r: plan.Round) -> None:
        began = time.monotonic()
        before = {p["metadata"]["uid"] for p in (await self.all_running() or [])}
        timed: list[asyncio.Task[None]] = []
        added: list[emulated_faults.Fault] = []
        for fault in r.faults:
            self.report.faults[fault.kind] += 1
            if fault.kind in ("torn", "volume-full"):
                prefix = "torn" if fault.kind == "torn" else "full"
                (self.control / f"{prefix}-{fault.member}").touch()
            elif fault.kind == "api-error":
                verb, resource, sub = fault.target
                added.append(
                    self.s.api.faults.add(
                        verb=verb,
                        resource=resource,
                        subresource=sub or None,
                        user=BRIDGE_USER,
                        status=fault.status,
                        count=fault.count,
                    )
                )
            else:  # the rest at their moment, so that they can overlap (a forgery mid-outage)
                timed.append(asyncio.create_task(self.act(fault, max(fault.delay, 0.0), r)))
        try:
            await asyncio.sleep(0.5)  # faults scheduled before the eviction take hold first
            await self.evict(r)
            await asyncio.gather(*timed)
            timed.clear()
            await self.until(self._running, what=f"round {r.number}: every index running again")
            await self.until(self.sets_settled, what=f"round {r.number}: every set recorded")
        finally:
            for task in timed:
                task.cancel()
            for injected in added:
                self.report.api_errors_fired += injected.fired
                self.s.api.faults.remove(injected)
            for marker in [*self.control.glob("torn-*"), *self.control.glob("full-*")]:
                marker.unlink()
            if self.s.hook is None:
                await self.s.start_webhook()
            while len(self.s.replicas) < 2:
                await self.s.start_replica()
        await self.record.settle()
        after = [p for p in (await self.all_running() or []) if p["metadata"]["uid"] not in before]
        if r.whole and after:
            uids = {p["metadata"]["uid"] for p in after}
            incarnation = [p for p in self.record.pods.values() if p.uid in uids]
            self.report.checks["one-cut-per-incarnation"] += 1
            self.report.add(
                invariants.check_incarnation(
                    self.record, self.outcomes(), incarnation, owner_uid=self.job_uid
                )
            )
            if any(not p.plumbed for p in incarnation) and any(p.plumbed for p in incarnation):
                self.report.notes.append(
                    f"round {r.number}: a webhook outage left part of an incarnation unplumbed "
                    "(cold by design: mutation fails open)"
                )
        self.step_checks()
        self.report.round_seconds.append(time.monotonic() - began)

    def step_checks(self) -> None:
        outcomes = self.outcomes()
        self.report.checks["succeeded-sets-are-whole"] += len(self.record.sets)
        self.report.add(invariants.check_sets(self.record, outcomes))
        self.report.checks["finalizer-within-deadline"] += len(self.record.pods)
        self.report.add(
            invariants.check_finalizers(
                self.record, margin=stack.MARGIN, slack=FINALIZER_SLACK, now=time.time()
            )
        )
        self.report.checks["newest-good-kept"] += len(self.record.sets)
        self.report.add(invariants.check_retention(self.record, before=self.record.events_rv))

    def outcomes(self) -> dict[str, invariants.Outcome]:
        return {
            pod.uid: invariants.outcome(self.log(pod.last))
            for pod in self.record.pods.values()
            if pod.workload == JOB
        }

    async def evict(self, r: plan.Round) -> None:
        self.report.evictions[r.source] += 1
        if r.source in ("kueue", "volcano"):
            name = f"high-{r.number}"
            resource, body = shapes.preemptor(
                self.shape, name, control=self.control, grace=stack.GRACE
            )
            await self.create_retrying(resource, body)
            await self.until(
                lambda: self._finished(resource, name),
                what=f"round {r.number}: the preempting {body['kind']} complete",
            )
        elif r.source in ("eviction-api", "drain"):
            live = await self.all_running() or await self.pods()
            wanted = self.shape.identities[r.victim]
            victims = (
                live
                if r.source == "drain"
                else [next((p for p in live if _identity(p) == wanted), live[0] if live else {})]
            )
            for victim in victims:
                if victim:
                    with contextlib.suppress(errors.ApiError):
                        await self.s.admin.evict(
                            resources.PODS, victim["metadata"]["name"], namespace=stack.NS
                        )
        else:
            name = f"preemptor-{r.number}"
            await self.create_retrying(resources.PODS, preemptor_pod(name))
            await self.until(
                lambda: self._finished(resources.PODS, name),
                what=f"round {r.number}: the preemptor pod done",
            )
            with contextlib.suppress(errors.NotFound):
                await self.s.admin.delete(resources.PODS, name, namespace=stack.NS)

    async def create_retrying(self, resource: Any, body: Obj) -> None:
        """Create, retrying while a webhook outage refuses it: the emulator does not evaluate
        ``matchConditions``, so the pods webhook (failurePolicy Fail) is called for pods that
        carry no Kontinue key too, which a real apiserver would not (docs/testing.md)."""
        created = False

        async def attempt() -> bool:
            nonlocal created
            try:
                await self.s.admin.create(resource, body)
            except errors.Conflict as exc:
                if not exc.already_exists:
                    raise
            except errors.ServerError:
                return False
            created = True
            return created

        await self.until(attempt, what=f"creating {body['metadata']['name']}", within=60)

    async def _finished(self, resource: Any, name: str) -> bool:
        try:
            obj = await self.s.admin.get(resource, name, namespace=stack.NS)
        except errors.NotFound:
            return False
        if resource == resources.JOBS:
            return cluster_module.job_finished(obj)
        if resource == resources.VOLCANO_JOBS:
            return _vcjob_phase(obj) in VCJOB_FINISHED
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    async def act(self, fault: plan.Fault, delay: float, r: plan.Round) -> None:
        await asyncio.sleep(delay)
        if fault.kind == "forge":
            await self.forge(r)
        elif fault.kind == "watch-drop":
            self.s.api.drop_watches()
        elif fault.kind == "compact":
            self.s.api.compact()
            self.s.api.drop_watches()
        elif fault.kind == "leader-kill":
            leader = await self.s.leader()
            if leader is not None:
                await self.s.kill(leader)
            await self.s.start_replica()
        elif fault.kind == "bridges-down":
            for replica in list(self.s.replicas):
                await self.s.kill(replica)
            await asyncio.sleep(fault.seconds)
            for _ in range(2):
                await self.s.start_replica()
        elif fault.kind == "webhook-outage":
            await self.s.stop_webhook()
            await asyncio.sleep(fault.seconds)
            await self.s.start_webhook()

    async def forge(self, r: plan.Round) -> None:
        """Another namespace claims this Job's lineage; a pod forges a restore. Both refused
        while the webhook serves; the first is admitted during an outage (its failurePolicy is
        Ignore), so the restore invariants must then show it was never used."""
        listed = await self.s.admin.list(resources.CHECKPOINTS, namespace=stack.NS)
        if not listed["items"]:
            return
        own = listed["items"][0]
        forged = {
            "apiVersion": keys.API_VERSION,
            "kind": "Checkpoint",
            "metadata": {
                "name": f"{invariants.FORGED_PREFIX}{r.number}",
                "namespace": stack.OTHER_NS,
            },
            "spec": own["spec"],
        }
        try:
            await self.s.admin.create(resources.CHECKPOINTS, forged)
        except errors.ApiError:
            pass
        else:
            self.report.notes.append(
                f"round {r.number}: a forged Checkpoint in {stack.OTHER_NS} was admitted "
                "(webhook unreachable; failurePolicy Ignore for Checkpoints)"
            )
        pod = preemptor_pod(f"forged-{r.number}")
        pod["metadata"]["annotations"] = {keys.RESTORE_FROM_ANNOTATION: own["metadata"]["name"]}
        try:
            await self.s.admin.create(resources.PODS, pod)
        except errors.ApiError:
            return
        self.report.add(
            [invariants.Violation("namespace-own", f"round {r.number}: a forged restore admitted")]
        )
        with contextlib.suppress(errors.NotFound):
            await self.s.admin.delete(resources.PODS, pod["metadata"]["name"], namespace=stack.NS)

    async def finish(self) -> None:
        await self.record.settle()
        finishing = self.record.events_rv
        self.step_checks()
        (self.control / "finish").touch()
        for resource, body in shapes.workload(self.shape, control=self.control, grace=stack.GRACE):
            name = body["metadata"]["name"]
            await self.until(
                lambda resource=resource, name=name: self._finished(resource, name),
                what=f"{name} complete after finish",
            )
            obj = await self.s.admin.get(resource, name, namespace=stack.NS)
            done = (
                _vcjob_phase(obj) == "Completed"
                if resource == resources.VOLCANO_JOBS
                else cluster_module.job_condition("Complete")(obj)
            )
            if not done:
                self.report.add(
                    [invariants.Violation("never-blocked", f"{name} ended {obj.get('status')}")]
                )

        async def released() -> bool:
            for pod in await self.s.cluster.pods(stack.NS):
                if keys.CHECKPOINT_FINALIZER in (pod["metadata"].get("finalizers") or []):
                    phase = (pod.get("status") or {}).get("phase")
                    if pod["metadata"].get("deletionTimestamp") or phase in ("Succeeded",):
                        return False
            return True

        await self.until(released, what="every finalizer released", within=60)
        await self.record.settle()
        outcomes = self.outcomes()
        self.report.checks["restores-the-planned-member"] += sum(
            1 for o in outcomes.values() if o.started
        )
        self.report.checks[invariants.OWN_IDENTITY] += sum(
            1 for o in outcomes.values() if o.restored_from or o.wrong_member
        )
        self.report.add(invariants.check_restores(self.record, outcomes, owner_uid=self.job_uid))
        self.report.checks["newest-good-kept"] += len(self.record.sets)
        self.report.add(invariants.check_retention(self.record, before=finishing))
        self.report.pods = len(outcomes)
        self.report.trace = [
            f"pod {p.name} {p.identity} r{p.added} {p.planned} "
            f"-> {outcomes[p.uid].restored_from or 'cold'} step {outcomes[p.uid].restored_step}"
            f" saved {outcomes[p.uid].saved_step}"
            for p in sorted(self.record.pods.values(), key=lambda p: p.added)
            if p.uid in outcomes
        ] + [
            f"set {s.name} r{s.added} {s.trigger_time} {s.verdict}@r{s.verdict_at} "
            f"expired@r{s.expired_at} {s.states} {s.members}"
            for s in sorted(self.record.sets.values(), key=lambda s: s.added)
        ]
        own = [
            s
            for s in self.record.sets.values()
            if s.owner_uid == self.job_uid and s.namespace == stack.NS
        ]
        self.report.sets = len(own)
        self.report.identities = {who for s in own for who in s.members}
        self.report.restored = {
            p.identity
            for p in self.record.pods.values()
            if p.uid in outcomes and outcomes[p.uid].restored_from
        }


VCJOB_FINISHED = ("Completed", "Failed", "Terminated", "Aborted")


def _vcjob_phase(job: Obj) -> str:
    return str(((job.get("status") or {}).get("state") or {}).get("phase") or "")


def _identity(pod: Obj) -> str:
    meta = pod["metadata"]
    return shapes.identity(meta.get("labels") or {}, meta.get("annotations") or {})


async def soak(
    seed: int, rounds: int, workdir: Path, *, shape: shapes.Shape = shapes.INDEXED
) -> Report:
    """Play ``rounds`` rounds of ``seed``'s plan for ``shape``; the report lists any violation."""
    started = time.monotonic()
    report = Report(seed=seed, rounds=plan.plan(seed, rounds, shape=shape), shape=shape.name)
    rng = random.Random(seed)
    async with (
        stack.running(
            workdir, members=shape.members, rng=rng, queue_system=shape.queue_system
        ) as s,
        history.History(s.api) as record,
    ):
        runner = Runner(s, record, report, shape=shape)
        if await runner.start():
            for r in report.rounds:
                await runner.round(r)
                if any(v.invariant == "never-blocked" for v in report.violations):
                    break
            await runner.finish()
    report.seconds = time.monotonic() - started
    return report
