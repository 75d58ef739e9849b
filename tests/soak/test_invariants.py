"""The soak's checks catch what they are meant to catch: each invariant on a record made of
the store events a run would produce, once as it should be and once broken (issue 11's
defects: a half-and-half restore, a torn member in a Succeeded set, another namespace's
lineage, the newest good set expired, a finalizer held past its deadline)."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.apiserver import store
from kontinue import keys
from tests.soak import history, invariants, plan, shapes

Obj = dict[str, Any]
JOB_UID = "job-uid"


class Builder:
    def __init__(self) -> None:
        self.record = history.Record()
        self.rv = 1
        self.clock = 0.0

    def _put(self, key: tuple[str, str], obj: Obj, kind: str = "ADDED") -> None:
        self.rv += 1
        self.record.take(store.Event(self.rv, kind, key, obj, None), at=self.clock)
        self.clock += 1.0  # a second between writes, unless a test says otherwise

    def pod(
        self,
        uid: str,
        index: int,
        *,
        plumbed: bool = True,
        ns: str = "default",
        labels: dict[str, str] | None = None,
    ) -> None:
        """``index`` -1: no completion index (a vcjob's pod)."""
        annotations = {keys.JOB_COMPLETION_INDEX_ANNOTATION: str(index)} if index >= 0 else {}
        if plumbed:
            annotations[keys.LINEAGE_ANNOTATION] = "x"
        self._put(
            history.PODS,
            {
                "metadata": {
                    "name": f"par-{uid}",
                    "namespace": ns,
                    "uid": uid,
                    "labels": {keys.JOB_NAME_LABEL: "par", **(labels or {})},
                    "annotations": annotations,
                    "ownerReferences": [{"uid": JOB_UID, "controller": True}],
                }
            },
        )

    def deleting(self, uid: str, *, deadline: str, held: bool) -> None:
        pod = self.record.pods[uid]
        obj = {
            "metadata": {
                **pod.last["metadata"],
                "deletionTimestamp": deadline,
                "finalizers": [keys.CHECKPOINT_FINALIZER] if held else [],
            }
        }
        self._put(history.PODS, obj, "MODIFIED")

    def set_(
        self,
        name: str,
        members: dict[str, str],
        *,
        minute: int,
        ns: str = "default",
        lineage_ns: str = "default",
    ) -> None:
        self._put(history.CHECKPOINTS, self._cp(name, members, minute, ns, lineage_ns))

    def verdict(self, name: str, phase: str, states: dict[str, str], ns: str = "default") -> None:
        found = self.record.sets[(ns, name)]
        obj = self._cp(name, found.members, 0, ns, found.lineage_namespace)
        obj["spec"]["trigger"]["time"] = found.trigger_time
        obj["status"] = {
            "phase": phase,
            "members": [
                {"podName": f"par-{found.members[i]}", "state": s} for i, s in states.items()
            ],
        }
        self._put(history.CHECKPOINTS, obj, "MODIFIED")

    @staticmethod
    def _cp(name: str, members: dict[str, str], minute: int, ns: str, lineage_ns: str) -> Obj:
        return {
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "lineage": {"namespace": lineage_ns, "ownerUid": JOB_UID},
                "trigger": {"time": f"2026-12-03T10:{minute:02}:00Z"},
                "members": [
                    {"podName": f"par-{uid}", "podUid": uid, "identity": who}
                    for who, uid in members.items()
                ],
            },
        }


def restored(uid: str, step: int) -> invariants.Outcome:
    return invariants.Outcome(started=True, restored_from=uid, restored_step=step)


def saved(step: int | None) -> invariants.Outcome:
    """A pod of the first incarnation: started cold, saved ``step`` (None: torn)."""
    return invariants.Outcome(started=True, saved_step=step)


def timeline() -> Builder:
    """W {0,1} Succeeded, then T {0 Saved, 1 torn} Failed."""
    b = Builder()
    b.pod("w0", 0)
    b.pod("w1", 1)
    b.set_("w", {"index=0": "w0", "index=1": "w1"}, minute=1)
    b.verdict("w", "Succeeded", {"index=0": "Saved", "index=1": "Saved"})
    b.pod("t0", 0)
    b.pod("t1", 1)
    b.set_("t", {"index=0": "t0", "index=1": "t1"}, minute=2)
    b.verdict("t", "Failed", {"index=0": "Saved", "index=1": "Failed"})
    b.pod("n0", 0)
    b.pod("n1", 1)
    return b


BASE = {
    "w0": saved(10),
    "w1": saved(11),
    "t0": invariants.Outcome(started=True, restored_from="w0", restored_step=10, saved_step=20),
    "t1": invariants.Outcome(started=True, restored_from="w1", restored_step=11),
}


def test_the_right_restores_pass_and_half_and_half_is_caught() -> None:
    b = timeline()
    good = {**BASE, "n0": restored("w0", 10), "n1": restored("w1", 11)}
    assert invariants.check_restores(b.record, good, owner_uid=JOB_UID) == []
    incarnation = [b.record.pods["n0"], b.record.pods["n1"]]
    assert invariants.check_incarnation(b.record, good, incarnation, owner_uid=JOB_UID) == []
    # issue 11 item 1: pod 0 restores the Failed set's member 0, pod 1 the older set
    half = {**BASE, "n0": restored("t0", 20), "n1": restored("w1", 11)}
    found = {v.invariant for v in invariants.check_restores(b.record, half, owner_uid=JOB_UID)}
    assert found == {"restores-only-whole-sets", "restores-the-planned-member"}
    cut = invariants.check_incarnation(b.record, half, incarnation, owner_uid=JOB_UID)
    assert [v.invariant for v in cut] == ["one-cut-per-incarnation"]


def test_a_cold_start_when_a_restore_was_due_and_a_wrong_step_are_caught() -> None:
    b = timeline()
    cold = {**BASE, "n0": invariants.Outcome(started=True), "n1": restored("w1", 11)}
    found = invariants.check_restores(b.record, cold, owner_uid=JOB_UID)
    assert [v.invariant for v in found] == ["restores-the-planned-member"]
    wrong_step = {**BASE, "n0": restored("w0", 9), "n1": restored("w1", 11)}
    found = invariants.check_restores(b.record, wrong_step, owner_uid=JOB_UID)
    assert [v.invariant for v in found] == ["saved-data-unchanged"]


def test_an_unplumbed_pod_is_expected_to_start_cold() -> None:
    b = timeline()
    b.pod("u0", 0, plumbed=False)
    outcomes = {**BASE, "u0": invariants.Outcome(started=True)}
    assert invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID) == []


def test_a_restore_of_a_set_in_another_namespace_is_caught() -> None:
    b = timeline()
    b.set_("forged", {"index=0": "f0"}, minute=3, ns="evil")
    b.verdict("forged", "Succeeded", {"index=0": "Saved"}, ns="evil")
    b.pod("n2", 0)
    outcomes = {**BASE, "n2": restored("f0", 5)}
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert "restores-the-planned-member" in {v.invariant for v in found}
    assert (
        invariants.expected_source(
            b.record.sets.values(),
            namespace="default",
            owner_uid=JOB_UID,
            identity="index=0",
            at=b.rv,
        )
        == "w0"
    )


def test_a_torn_member_in_a_succeeded_set_and_a_foreign_lineage_are_caught() -> None:
    b = Builder()
    b.pod("a0", 0)
    b.set_("a", {"index=0": "a0"}, minute=1)
    b.verdict("a", "Succeeded", {"index=0": "Saved"})
    assert invariants.check_sets(b.record, {"a0": saved(3)}) == []
    found = invariants.check_sets(b.record, {"a0": saved(None)})
    assert [v.invariant for v in found] == ["succeeded-sets-are-whole"]
    b.set_("b", {"index=0": "a0"}, minute=2, ns="evil", lineage_ns="default")
    found = invariants.check_sets(b.record, {"a0": saved(3)})
    assert [v.invariant for v in found] == ["namespace-own"]


def test_expiring_the_newest_good_set_is_caught() -> None:
    b = timeline()
    b.verdict("w", "Expired", {"index=0": "Saved", "index=1": "Saved"})
    found = invariants.check_retention(b.record, before=b.rv + 1)
    # T is Failed: W holds both identities' newest saved members, and was needed for each
    assert [v.invariant for v in found] == ["newest-good-kept"] * 2
    assert {v.detail.rsplit(" ", 1)[1] for v in found} == {"index=0", "index=1"}
    assert invariants.check_retention(b.record, before=b.rv) == []  # after the Job ended


def test_a_finalizer_held_past_its_deadline_is_caught() -> None:
    b = timeline()
    b.deleting("n0", deadline="2026-12-03T10:00:00Z", held=True)
    deadline = history._seconds("2026-12-03T10:00:00Z")
    assert invariants.check_finalizers(b.record, margin=2, slack=20, now=deadline + 10) == []
    found = invariants.check_finalizers(b.record, margin=2, slack=20, now=deadline + 60)
    assert [v.invariant for v in found] == ["finalizer-within-deadline"]


@pytest.mark.parametrize("shape", list(shapes.SHAPES.values()), ids=list(shapes.SHAPES))
def test_the_plan_is_the_seeds(shape: shapes.Shape) -> None:
    assert plan.plan(82, 6, shape=shape) == plan.plan(82, 6, shape=shape)
    assert plan.plan(82, 6, shape=shape) != plan.plan(83, 6, shape=shape)
    rounds = plan.plan(7, 400, shape=shape)
    assert {r.source for r in rounds} == set(shape.sources)
    assert {r.victim for r in rounds} == set(range(shape.members))
    assert {f.kind for r in rounds for f in r.faults} == set(plan.FAULT_KINDS)
    for r in rounds:
        assert r.whole == (r.source == shape.whole)
        for f in r.faults:
            if f.kind in ("torn", "volume-full"):
                assert 0 <= f.member < shape.indexes
                if not r.whole:  # only the evicted pod can tear its save
                    assert f.member == shape.index_of(r.victim)


def test_a_restore_of_another_identitys_state_is_caught() -> None:
    """Issue 19: no pod restores state saved by another identity, judged from the saving pod's
    own labels, from the set's record, and from the workload's refusal (WRONG-MEMBER)."""
    b = timeline()
    swapped = {**BASE, "n0": restored("w1", 11), "n1": restored("w0", 10)}
    found = invariants.check_restores(b.record, swapped, owner_uid=JOB_UID)
    own = [v for v in found if v.invariant == invariants.OWN_IDENTITY]
    assert len(own) == 4, found  # each pod: the saving pod's identity and the set's member
    assert "restored the state of pod par-w1 (index=1)" in own[0].detail
    refused = {
        **BASE,
        "n0": invariants.outcome("WRONG-MEMBER mine=index=0 saved-by=index=1\n"),
        "n1": restored("w1", 11),
    }
    found = invariants.check_restores(b.record, refused, owner_uid=JOB_UID)
    assert invariants.OWN_IDENTITY in {v.invariant for v in found}
    assert invariants.OWN_IDENTITY in invariants.INVARIANTS


def test_a_2x2_shapes_identities_come_from_what_its_controllers_stamp() -> None:
    """A JobSet's and a vcjob's pods: 4 distinct identities, named as docs/api.md names them;
    a JobSet pod's lineage owner is the JobSet (its uid label), not its child Job."""
    b = Builder()
    for rj in shapes.REPLICATED:
        for i in (0, 1):
            marks = {
                keys.JOBSET_NAME_LABEL: shapes.NAME,
                keys.JOBSET_UID_LABEL: shapes.JOBSET_UID,
                keys.JOBSET_REPLICATED_JOB_LABEL: rj,
                keys.JOBSET_JOB_INDEX_LABEL: "0",
            }
            b.pod(f"{rj}{i}", i, labels=marks)
    for task in shapes.TASKS:
        for i in (0, 1):
            marks = {
                keys.VOLCANO_JOB_NAME_LABEL: "vc",
                keys.VOLCANO_TASK_SPEC_KEY: task,
                keys.VOLCANO_TASK_INDEX_KEY: str(i),
            }
            b.pod(f"{task}{i}", -1, labels=marks)
    pods = b.record.pods
    assert [pods[f"{rj}{i}"].identity for rj in shapes.REPLICATED for i in (0, 1)] == list(
        shapes.JOBSET.identities
    )
    assert {pods[f"{rj}{i}"].owner_uid for rj in shapes.REPLICATED for i in (0, 1)} == {
        shapes.JOBSET_UID
    }
    assert {pods[f"{rj}{i}"].workload for rj in shapes.REPLICATED for i in (0, 1)} == {"par"}
    assert [pods[f"{t}{i}"].identity for t in shapes.TASKS for i in (0, 1)] == list(
        shapes.VCJOB.identities
    )
    assert {pods[f"{t}{i}"].owner_uid for t in shapes.TASKS for i in (0, 1)} == {JOB_UID}


def test_a_plan_from_an_older_view_is_a_late_plan_violation() -> None:
    """The set recorded just before the pod's creation was missed: the pod starts cold, as the
    rule gave before that set existed. Since the webhook reads a plumbed pod's lineage live
    (webhook/freshness.py) this is a violation, named ``late-plan`` (docs/security.md, "Soak
    findings", item 1)."""
    b = Builder()
    b.pod("a0", 0)
    b.set_("a", {"index=0": "a0"}, minute=1)
    b.verdict("a", "Succeeded", {"index=0": "Saved"})
    b.pod("n0", 0)  # a second after the set was recorded: within LAG
    outcomes = {"a0": saved(5), "n0": invariants.Outcome(started=True)}
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert [v.invariant for v in found] == [invariants.LATE_PLAN]
    assert invariants.LATE_PLAN in invariants.INVARIANTS
    b.clock += 10  # a set recorded long before: the plain rule
    b.pod("p0", 0)
    outcomes |= {"p0": invariants.Outcome(started=True)}
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert [v.invariant for v in found] == [invariants.LATE_PLAN, "restores-the-planned-member"]
    # restoring a set that the rule never gave is still a violation, late or not
    b.set_("b", {"index=0": "n0"}, minute=2)
    b.verdict("b", "Failed", {"index=0": "Failed"})
    b.pod("m0", 0)
    outcomes |= {"m0": restored("n0", 1)}
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert "restores-only-whole-sets" in {v.invariant for v in found}


def test_a_save_recorded_after_the_pod_was_created_is_a_counted_finding() -> None:
    """The predecessor saved, but its set was created after the replacement: the rule (what
    existed at the pod's creation) gives the older set, so that is no violation; the missed save
    is counted as ``unrecorded-at-creation``, and restoring it is not."""
    b = Builder()
    b.pod("a0", 0)
    b.set_("a", {"index=0": "a0"}, minute=1)
    b.verdict("a", "Succeeded", {"index=0": "Saved"})
    b.pod("b0", 0)  # restores a0's save
    b.clock += 10
    b.pod("c0", 0)  # b0's replacement, created before b0's set
    b.set_("b", {"index=0": "b0"}, minute=2)
    b.verdict("b", "Succeeded", {"index=0": "Saved"})
    outcomes = {"a0": saved(5), "b0": restored("a0", 5), "c0": restored("a0", 5)}
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert [v.invariant for v in found] == [invariants.UNRECORDED]
    assert invariants.UNRECORDED not in invariants.INVARIANTS
    outcomes["c0"] = restored("b0", 9)  # were it restored (not what the rule gives): no finding
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert invariants.UNRECORDED not in {v.invariant for v in found}


def test_an_unreported_member_of_its_own_set_is_verifiable() -> None:
    """docs/api.md, "Late results and unreported members": an ``Unreported`` member of a set
    with no other member is offered to the next pod of its identity, which restores it if its
    save completed, else the older set. Under ``coupled`` a set with other members is not."""
    b = Builder()
    b.pod("a0", 0)
    b.set_("a", {"index=0": "a0"}, minute=1)
    b.verdict("a", "Succeeded", {"index=0": "Saved"})
    b.pod("u0", 0)
    b.set_("u", {"index=0": "u0"}, minute=2)
    b.verdict("u", "Failed", {"index=0": "Unreported"})
    b.clock += 10
    b.pod("n0", 0)
    done = {
        "a0": saved(5),
        "u0": invariants.Outcome(started=True, restored_from="a0", restored_step=5, saved_step=9),
    }
    outcomes = {**done, "n0": restored("u0", 9)}
    assert invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID) == []
    # its save never completed (torn): the rule gives the older set, and restoring it is wrong
    torn = {**done, "u0": invariants.Outcome(started=True, restored_from="a0", restored_step=5)}
    assert (
        invariants.check_restores(b.record, {**torn, "n0": restored("a0", 5)}, owner_uid=JOB_UID)
        == []
    )
    found = invariants.check_restores(
        b.record, {**torn, "n0": restored("u0", 9)}, owner_uid=JOB_UID
    )
    assert "restores-only-whole-sets" in {v.invariant for v in found}


def test_an_unreported_member_of_a_set_with_others_is_not_restored() -> None:
    b = Builder()
    b.pod("a0", 0)
    b.pod("a1", 1)
    b.set_("w", {"index=0": "a0", "index=1": "a1"}, minute=1)
    b.verdict("w", "Failed", {"index=0": "Unreported", "index=1": "Saved"})
    b.clock += 10
    b.pod("n0", 0)
    outcomes = {"a0": saved(5), "a1": saved(5), "n0": restored("a0", 5)}
    found = invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID)
    assert "restores-only-whole-sets" in {v.invariant for v in found}


def test_a_member_that_joined_the_set_later_is_one_of_its_members() -> None:
    """A later victim of the same eviction joins the open set by a patch of ``spec.members``
    (queue_bridge/acting.py): the record holds it, so restoring it is no foreign restore, and
    the rule gives it to the next pod of its identity."""
    b = Builder()
    b.pod("w0", 0)
    b.pod("w1", 1)
    b.set_("w", {"index=0": "w0"}, minute=1)
    b._put(
        history.CHECKPOINTS,
        b._cp("w", {"index=0": "w0", "index=1": "w1"}, 1, "default", "default"),
        "MODIFIED",
    )
    b.verdict("w", "Succeeded", {"index=0": "Saved", "index=1": "Saved"})
    assert b.record.sets[("default", "w")].members == {"index=0": "w0", "index=1": "w1"}
    b.clock += 10
    b.pod("n0", 0)
    b.pod("n1", 1)
    outcomes = {"w0": saved(3), "w1": saved(4), "n0": restored("w0", 3), "n1": restored("w1", 4)}
    assert invariants.check_restores(b.record, outcomes, owner_uid=JOB_UID) == []
