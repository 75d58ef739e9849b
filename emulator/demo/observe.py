"""Record one run's pod lifecycles from the API (a watch) and the workloads' own output.

Times are this process's monotonic clock relative to the run start, taken when the watch
delivers the change — the same view a controller has. Steps come from the trainers' own
``PROGRESS step=N`` lines (``STEP N`` from reference_workload/torch_trainer.py) and their
termination messages, never from the demo's settings; a finished trainer's last ``DONE`` line
is kept (the torch trainer's names its parameters' sha256).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from typing import Any

from emulator import cluster, informer
from emulator.demo import timeline
from kontinue import identity, keys
from kontinue.kube import resources

ROLE_LABEL = "demo.kontinue.dev/role"
CONTAINER = "trainer"
PROGRESS = re.compile(r"^(?:PROGRESS step=|STEP )(\d+)", re.MULTILINE)
DONE = re.compile(r"^DONE (.*)$", re.MULTILINE)
RESTORED = re.compile(r"^RESTORED step=\d+ from=\S+ member=(\S+) as=(\S+)$", re.MULTILINE)
"""reference_workload/trainer.py's restore line: the member identity its manifest says saved the
directory, and the restoring pod's own (``-``: not known)."""

Obj = dict[str, Any]


@dataclasses.dataclass
class _Pod:
    job: str
    pod: str
    uid: str
    role: timeline.Role
    gpus: int
    created: float
    identity: str = identity.SINGLE
    node: str | None = None
    started: float | None = None
    running: float | None = None
    terminating: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    message: str | None = None
    restored_from: str | None = None
    restore_exit: int | None = None
    cold_start: bool = False
    last: Obj = dataclasses.field(default_factory=dict)


def _gpus(pod: Obj) -> int:
    total = 0
    for container in pod["spec"].get("containers", []):
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(keys.GPU_RESOURCE, 0))
    return total


def _identity(pod: Obj) -> str:
    """The pod's member identity (kontinue/identity.py); a malformed one counts as single."""
    meta = pod["metadata"]
    try:
        return identity.of(meta.get("labels"), meta.get("annotations"))
    except ValueError:
        return identity.SINGLE


def _statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )


class Recorder:
    def __init__(self, c: cluster.Cluster, *, namespace: str, started_at: float) -> None:
        self.cluster = c
        self.namespace = namespace
        self.t0 = started_at
        self.pods: dict[str, _Pod] = {}
        self.checkpoint_seen: dict[str, float] = {}
        """Checkpoint name -> when its watch first delivered it (Kontinue's runs only)."""
        self._task: asyncio.Task[None] | None = None
        self._checkpoints: asyncio.Task[None] | None = None

    def now(self) -> float:
        return asyncio.get_running_loop().time() - self.t0

    async def start(self) -> None:
        listed = await self.cluster.client().list(resources.PODS, namespace=self.namespace)
        version = listed["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._watch(version), name="demo-recorder")
        with contextlib.suppress(Exception):  # no Checkpoint CRD without Kontinue
            cps = await self.cluster.client().list(resources.CHECKPOINTS, namespace=self.namespace)
            self._checkpoints = asyncio.create_task(
                self._watch_checkpoints(cps["metadata"]["resourceVersion"]),
                name="demo-recorder-checkpoints",
            )

    async def stop(self) -> None:
        # informer.stop re-cancels: a single cancel of an emulator watch can be swallowed on
        # Python 3.11 (its wait_for), and awaiting the task would then hang the run.
        if self._task is not None:
            await informer.stop([self._task])
        if self._checkpoints is not None:
            await informer.stop([self._checkpoints])

    async def _watch_checkpoints(self, version: str) -> None:
        watcher = self.cluster.client().watch(
            resources.CHECKPOINTS, namespace=self.namespace, resource_version=version
        )
        async for event in watcher:
            name = (event.get("object") or {}).get("metadata", {}).get("name")
            if name and event["type"] == "ADDED":
                self.checkpoint_seen.setdefault(name, self.now())

    async def _watch(self, version: str) -> None:
        watcher = self.cluster.client().watch(
            resources.PODS, namespace=self.namespace, resource_version=version
        )
        async for event in watcher:
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self.observe(event["type"], event["object"])

    def observe(self, kind: str, pod: Obj) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        role = labels.get(ROLE_LABEL)
        if role is None:
            return
        now = self.now()
        record = self.pods.get(meta["uid"])
        if record is None:
            record = self.pods[meta["uid"]] = _Pod(
                job=labels.get(keys.JOB_NAME_LABEL)
                or labels.get(keys.VOLCANO_JOB_NAME_LABEL, meta["name"]),
                pod=meta["name"],
                uid=meta["uid"],
                role=timeline.Role(role),
                gpus=_gpus(pod),
                created=now,
                identity=_identity(pod),
            )
        record.last = pod
        record.node = record.node or pod["spec"].get("nodeName")
        record.restored_from = (meta.get("annotations") or {}).get(
            keys.RESTORE_FROM_ANNOTATION, record.restored_from
        )
        record.cold_start = keys.COLD_START_REASON_ANNOTATION in (meta.get("annotations") or {})
        statuses = _statuses(pod)
        if record.started is None and any(
            "running" in (s.get("state") or {}) or "terminated" in (s.get("state") or {})
            for s in statuses
        ):
            record.started = now
        for status in statuses:
            done = (status.get("state") or {}).get("terminated")
            if status.get("name") == keys.RESTORE_INIT_CONTAINER and done:
                record.restore_exit = done.get("exitCode")
            if status.get("name") != CONTAINER:
                continue
            state = status.get("state") or {}
            if record.running is None and ("running" in state or "terminated" in state):
                record.running = now
            if "terminated" in state and record.ended is None:
                record.ended = now
                record.exit_code = state["terminated"].get("exitCode")
                record.message = state["terminated"].get("message")
        if meta.get("deletionTimestamp") and record.terminating is None:
            record.terminating = now
        if kind == "DELETED" and record.ended is None:
            record.ended = now

    def _log(self, record: _Pod) -> str:
        if not record.last:
            return ""
        container = self.cluster.container(record.last, CONTAINER)
        if container is None or not container.spec.log_path.exists():
            return ""
        return container.spec.log_path.read_text()

    def newest_good(self, record: _Pod, checkpoints: list[Obj]) -> str | None:
        """The newest good checkpoint of ``record``'s job when ``record`` was created.

        That is the one taken from the most recent earlier incarnation that has a Succeeded
        checkpoint (by its member pod UID) — what an incarnation should restore from.
        """
        by_member: dict[str, str] = {}
        for cp in checkpoints:
            # Failed sets are never restorable. Anything else counts: Expired ones were good
            # when they were the newest, and one still saving when the run stopped is what a
            # restore waits for. A member CarriedForward (its pod never started its main
            # container) holds the state its pod restored from: the incarnation before decides
            # (kontinue/restore_plan.py looks through it the same way).
            status = cp.get("status") or {}
            if status.get("phase") == "Failed":
                continue
            # by pod UID: a Volcano pod reuses its predecessor's name (results recorded before
            # ``podUid`` existed carry only the name)
            carried = {
                m.get("podUid") or m.get("podName")
                for m in status.get("members") or []
                if m.get("state") == "CarriedForward"
            }
            for member in cp["spec"]["members"]:
                if not {member["podUid"], member.get("podName")} & carried:
                    by_member[member["podUid"]] = cp["metadata"]["name"]
        earlier = sorted(
            (
                p
                for p in self.pods.values()
                if p.job == record.job
                and p.identity == record.identity
                and p.created < record.created
            ),
            key=lambda p: p.created,
            reverse=True,
        )
        return next((by_member[p.uid] for p in earlier if p.uid in by_member), None)

    def records(self, *, checkpoints: list[Obj]) -> list[timeline.PodRecord]:
        """Freeze what was seen, judged against the run's Checkpoint objects."""
        by_name = {cp["metadata"]["name"]: cp for cp in checkpoints}
        frozen = []
        for record in self.pods.values():
            log = self._log(record)
            steps = [int(s) for s in PROGRESS.findall(log)]
            done = DONE.findall(log)
            restored = RESTORED.findall(log)
            newest = self.newest_good(record, checkpoints)
            saved = None
            if record.message:
                with contextlib.suppress(ValueError, AttributeError):
                    parsed = json.loads(record.message.strip().splitlines()[-1])
                    if parsed.get(keys.SAVED_MARKER_KEY) == keys.SAVED_MARKER_VALUE:
                        saved = int(parsed["step"])
            source = by_name.get(record.restored_from or "")
            members = (source or {}).get("spec", {}).get("members") or [{}]
            frozen.append(
                timeline.PodRecord(
                    job=record.job,
                    pod=record.pod,
                    role=record.role,
                    gpus=record.gpus,
                    node=record.node,
                    created=record.created,
                    started=record.started,
                    running=record.running,
                    terminating=record.terminating,
                    ended=record.ended,
                    exit_code=record.exit_code,
                    first_step=steps[0] if steps else None,
                    last_step=steps[-1] if steps else None,
                    saved_step=saved,
                    restored_from=record.restored_from,
                    restore_exit=record.restore_exit,
                    cold_start=record.cold_start,
                    restored_from_newest=(
                        None if record.restored_from is None else record.restored_from == newest
                    ),
                    newest_checkpoint=newest,
                    newest_existed=(
                        None
                        if newest is None or newest not in self.checkpoint_seen
                        else self.checkpoint_seen[newest] <= record.created
                    ),
                    checkpoint_node=members[0].get("node"),
                    done=done[-1] if done else None,
                    identity=record.identity,
                    restored_member=(
                        None if not restored or restored[-1][0] == "-" else restored[-1][0]
                    ),
                )
            )
        return sorted(frozen, key=lambda r: r.created)
