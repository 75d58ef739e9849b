"""What the soak saw: every write to pods and Checkpoints, in the emulated store's own order.

A tap on the emulated apiserver's store (emulator/apiserver/store.py) receives every event of a
kind in the same synchronous step that stores it, and is not a watch: ``drop_watches`` and
``compact`` (two of the soak's faults) do not end it, so the record has no gaps. Its order is the
store's resourceVersion, one counter for every kind, so "this pod was created before that
Checkpoint" is exact. The records here are plain data for :mod:`tests.soak.invariants`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import time
from typing import Any

from emulator.apiserver import server, store
from kontinue import keys
from kontinue.models import base
from tests.soak import shapes

Obj = dict[str, Any]
PODS = ("", "pods")
CHECKPOINTS = (keys.GROUP, "checkpoints")


class _Tap(store.Watcher):
    def drop(self) -> None:  # a watch drop cuts clients' watches, not the record
        return


@dataclasses.dataclass
class Set:
    """One Checkpoint (a set of members), as the store held it over time."""

    namespace: str
    name: str
    added: int
    lineage_namespace: str
    owner_uid: str
    trigger_time: str
    members: dict[str, str]
    """identity -> the saving pod's uid (members that joined after its creation included)"""
    member_pods: dict[str, str]
    """pod name -> identity"""
    verdict: str = ""
    """The first terminal phase it reached: Succeeded or Failed (Expired only after one)."""
    verdict_at: int = 0
    states: dict[str, str] = dataclasses.field(default_factory=dict)
    """identity -> member state recorded with the verdict (Saved, Failed, CarriedForward, ...)"""
    expired_at: int = 0
    failed_restores: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    """(resourceVersion, status.failedRestores) each time it changed"""
    deleted_at: int = 0

    def failed_restores_at(self, rv: int) -> int:
        count = 0
        for at, value in self.failed_restores:
            if at < rv:
                count = value
        return count


@dataclasses.dataclass
class Pod:
    namespace: str
    name: str
    uid: str
    added: int
    workload: str
    """The Job, JobSet or vcjob it belongs to (tests/soak/shapes.py ``workload_of``)."""
    owner_uid: str
    identity: str
    plumbed: bool
    """Created with the lineage annotation (the webhook plumbed it)."""
    planned: str
    """What the webhook wrote at its CREATE: ``restore-from=<set>`` (``+wait`` when gated for
    the set's verdict) or ``cold: <reason>``."""
    last: Obj
    deletion_deadline: float = 0.0
    """The latest ``deletionTimestamp`` seen, in seconds since the epoch."""
    finalizer_released_at: float = 0.0
    deleted_at: int = 0


class Record:
    """The sets and pods seen so far; ``take`` one store event at a time."""

    def __init__(self) -> None:
        self.sets: dict[tuple[str, str], Set] = {}
        self.pods: dict[str, Pod] = {}
        self.events = 0
        self.events_rv = 0
        """The revision of the newest event taken in."""
        self.times: dict[int, float] = {}
        """revision -> when it was taken in (monotonic seconds; the tap is read every 20 ms)"""

    def take(self, event: object, *, at: float | None = None) -> None:
        if isinstance(event, store.Event):
            self.times[event.rv] = time.monotonic() if at is None else at
        self._take(event)

    def _take(self, event: object) -> None:
        if not isinstance(event, store.Event):
            return
        self.events += 1
        self.events_rv = max(self.events_rv, event.rv)
        if event.key == PODS:
            self._pod(event)
        else:
            self._set(event)

    def _pod(self, event: store.Event) -> None:
        meta = event.obj["metadata"]
        uid = meta["uid"]
        pod = self.pods.get(uid)
        if pod is None:
            annotations = meta.get("annotations") or {}
            labels = meta.get("labels") or {}
            pod = Pod(
                namespace=meta.get("namespace", ""),
                name=meta["name"],
                uid=uid,
                added=event.rv,
                workload=shapes.workload_of(labels),
                owner_uid=shapes.owner_uid(labels, meta.get("ownerReferences") or []),
                identity=shapes.identity(labels, annotations),
                plumbed=keys.LINEAGE_ANNOTATION in annotations,
                planned=_planned(event.obj),
                last=event.obj,
            )
            self.pods[uid] = pod
        pod.last = event.obj
        deadline = meta.get("deletionTimestamp")
        if deadline:
            pod.deletion_deadline = max(pod.deletion_deadline, _seconds(deadline))
        held = keys.CHECKPOINT_FINALIZER in (meta.get("finalizers") or [])
        if deadline and not held and not pod.finalizer_released_at:
            pod.finalizer_released_at = datetime.datetime.now(datetime.UTC).timestamp()
        if event.type == "DELETED":
            pod.deleted_at = event.rv

    def _set(self, event: store.Event) -> None:
        obj = event.obj
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        found = self.sets.get(key)
        spec = obj.get("spec") or {}
        if found is None:
            lineage = spec.get("lineage") or {}
            members = spec.get("members") or []
            found = Set(
                namespace=key[0],
                name=key[1],
                added=event.rv,
                lineage_namespace=str(lineage.get("namespace", "")),
                owner_uid=str(lineage.get("ownerUid", "")),
                trigger_time=str((spec.get("trigger") or {}).get("time", "")),
                members={_identity(m): str(m.get("podUid", "")) for m in members},
                member_pods={str(m.get("podName", "")): _identity(m) for m in members},
            )
            self.sets[key] = found
        for member in spec.get("members") or []:  # a later victim of one eviction joins it
            who = _identity(member)  # (queue_bridge/acting.py: a patch of spec.members)
            found.members.setdefault(who, str(member.get("podUid", "")))
            found.member_pods.setdefault(str(member.get("podName", "")), who)
        status = obj.get("status") or {}
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed") and not found.verdict:
            found.verdict = phase
            found.verdict_at = event.rv
            found.states = {
                found.member_pods.get(str(m.get("podName")), str(m.get("podName"))): str(
                    m.get("state", "")
                )
                for m in status.get("members") or []
            }
        if phase == "Expired" and not found.expired_at:
            found.expired_at = event.rv
        count = int(status.get("failedRestores") or 0)
        if count != (found.failed_restores[-1][1] if found.failed_restores else 0):
            found.failed_restores.append((event.rv, count))
        if event.type == "DELETED":
            found.deleted_at = event.rv


class History(Record):
    """A :class:`Record` fed by taps on a running emulated apiserver's store."""

    def __init__(self, api: server.ApiServer) -> None:
        super().__init__()
        self._store = api.registry.store
        self._taps = [_Tap(PODS), _Tap(CHECKPOINTS)]
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> History:
        for tap in self._taps:
            self._store.watchers.add(tap)
        self._task = asyncio.create_task(self._follow(), name="soak history")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.settle()
        for tap in self._taps:
            self._store.watchers.discard(tap)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def settle(self) -> None:
        """Take in every event stored so far."""
        for tap in self._taps:
            while not tap.queue.empty():
                self.take(tap.queue.get_nowait())

    async def _follow(self) -> None:
        while True:
            await self.settle()
            await asyncio.sleep(0.02)


def _planned(pod: Obj) -> str:
    annotations = pod["metadata"].get("annotations") or {}
    source = annotations.get(keys.RESTORE_FROM_ANNOTATION)
    if source:
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        gated = any(g.get("name") == keys.SET_VERDICT_GATE for g in gates)
        return f"restore-from={source}{'+wait' if gated else ''}"
    return f"cold: {annotations.get(keys.COLD_START_REASON_ANNOTATION, '?')}"


def _identity(member: Obj) -> str:
    return str(member.get("identity") or member.get("podName") or "")


def _seconds(stamp: str) -> float:
    return base.parse_time(stamp).timestamp()
