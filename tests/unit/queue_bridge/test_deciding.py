"""The bridge's multi-object decisions (queue_bridge.deciding) over a State of plain objects.

No cache, no API: :class:`FakeState` answers :class:`queue_bridge.state.State` from lists, which
is the point of the Protocol (the production answer is :class:`queue_bridge.caches.Caches`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from kontinue import keys, lineage
from kontinue.models import base, checkpoint, core, kueue, volcano
from kontinue.models import policy as policy_model
from queue_bridge import deciding

OWNER = checkpoint.Lineage(
    namespace="team-a", owner_kind="Job", owner_name="train", owner_uid="u-1"
)
T0 = datetime.datetime(2026, 12, 2, 10, 0, 0, tzinfo=datetime.UTC)
KEEP_2 = policy_model.CheckpointPolicy.model_validate(
    {"metadata": {"name": "keep-2"}, "spec": {"retention": {"keep": 2}}}
)


Checkpoint = checkpoint.Checkpoint
Lineage = checkpoint.Lineage


@dataclasses.dataclass
class FakeState:
    checkpoints: list[checkpoint.Checkpoint] = dataclasses.field(default_factory=list)
    pods: list[core.Pod] = dataclasses.field(default_factory=list)
    jobs: list[core.Job] = dataclasses.field(default_factory=list)
    jobs_synced: bool = True

    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None:
        return None

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None:
        return None

    def volcano_queue(self, name: str) -> volcano.Queue | None:
        return None

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None:
        return None

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None:
        return None

    def checkpoint(self, namespace: str, name: str) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.name == name), None)

    def checkpoints_of_pod(self, uid: str) -> Sequence[Checkpoint]:
        return [c for c in self.checkpoints if any(m.pod_uid == uid for m in c.spec.members)]

    def checkpoints_of_owner(self, uid: str) -> Sequence[Checkpoint]:
        return [c for c in self.checkpoints if c.spec.lineage.owner_uid == uid]

    def workloads_of_owner(self, uid: str) -> Sequence[kueue.Workload]:
        return []

    def lineage_pods(self, owner: Lineage) -> Sequence[core.Pod]:
        value = lineage.annotation_value(owner)
        return [p for p in self.pods if p.metadata.annotation(keys.LINEAGE_ANNOTATION) == value]

    def job(self, namespace: str, name: str) -> core.Job | None:
        return next((j for j in self.jobs if j.metadata.name == name), None)


def _cp(name: str, minutes: int, phase: checkpoint.Phase, *pods: str) -> checkpoint.Checkpoint:
    at = T0 + datetime.timedelta(minutes=minutes)
    return checkpoint.Checkpoint(
        metadata=base.ObjectMeta(name=name, namespace="team-a", creation_timestamp=at),
        spec=checkpoint.CheckpointSpec(
            lineage=OWNER,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE, reason="Preempted", time=at
            ),
            members=[checkpoint.Member(pod_name=p, pod_uid=f"uid-{p}") for p in pods or ("p",)],
        ),
        status=checkpoint.CheckpointStatus(phase=phase),
    )


def _restoring_pod(name: str, restore_from: str) -> core.Pod:
    return core.Pod.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "team-a",
                "uid": f"uid-{name}",
                "annotations": {
                    keys.LINEAGE_ANNOTATION: lineage.annotation_value(OWNER),
                    keys.RESTORE_FROM_ANNOTATION: restore_from,
                },
            },
            "status": {"phase": "Running"},
        }
    )


def _job(*, uid: str, finished: bool) -> core.Job:
    conditions = [{"type": "Complete", "status": "True"}] if finished else []
    return core.Job.model_validate(
        {
            "metadata": {"name": "train", "namespace": "team-a", "uid": uid},
            "status": {"conditions": conditions},
        }
    )


SUCCEEDED = checkpoint.Phase.SUCCEEDED


def test_taken_counts_members_of_unexpired_checkpoints_only() -> None:
    state = FakeState(
        checkpoints=[
            _cp("old", 0, checkpoint.Phase.EXPIRED, "a"),
            _cp("new", 1, checkpoint.Phase.IN_PROGRESS, "b", "c"),
        ]
    )
    assert deciding.taken(state, OWNER) == {"uid-b", "uid-c"}


def test_retention_keeps_the_newest_and_those_a_live_pod_restores_from() -> None:
    cps = [_cp(f"cp-{i}", i, SUCCEEDED) for i in range(4)]
    live_job = _job(uid="u-1", finished=False)
    state = FakeState(checkpoints=cps, jobs=[live_job])
    assert set(deciding.doomed(state, cps[3], policy=KEEP_2)) == {"cp-0", "cp-1"}
    state.pods = [_restoring_pod("p0", "cp-0")]
    doomed = deciding.doomed(state, cps[3], policy=KEEP_2)
    assert doomed == {"cp-1": "retention: more than 2 newer checkpoints kept"}


def test_a_finished_or_deleted_owner_expires_the_checkpoint_once_jobs_are_known() -> None:
    cp = _cp("cp-0", 0, SUCCEEDED)
    finished = FakeState(checkpoints=[cp], jobs=[_job(uid="u-1", finished=True)])
    assert deciding.doomed(finished, cp, policy=KEEP_2) == {"cp-0": "owner Job train finished"}
    deleted = FakeState(checkpoints=[cp])
    assert deciding.doomed(deleted, cp, policy=KEEP_2) == {"cp-0": "owner Job train was deleted"}
    replaced = FakeState(checkpoints=[cp], jobs=[_job(uid="u-2", finished=False)])
    assert deciding.doomed(replaced, cp, policy=KEEP_2) == {"cp-0": "owner Job train was deleted"}
    unknown = FakeState(checkpoints=[cp], jobs_synced=False)
    assert deciding.doomed(unknown, cp, policy=KEEP_2) == {}


def test_a_pod_without_disruption_or_lineage_is_no_pod_path_victim() -> None:
    pod = _restoring_pod("p0", "cp-0")
    assert deciding.disrupted(FakeState(), pod, taken=set()) is None
    assert not deciding.disruption_pending(FakeState(), pod)
    assert not deciding.eviction_pending(FakeState(), pod)
    assert deciding.owner_uid(lineage.annotation_value(OWNER)) == "u-1"
    assert deciding.owner_uid("not-a-lineage") is None
