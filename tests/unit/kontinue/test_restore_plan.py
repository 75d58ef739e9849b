"""The one restore plan (kontinue/restore_plan.py) and member identity (kontinue/identity.py).

Multi-pod shapes of issue 19: every pod restores its own identity's member; the consistency
choice decides which sets qualify; partial sets serve only the identities they hold; members that
never ran are looked through; retention keeps every set some identity still needs.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kontinue import catalog, identity, keys, restore_plan
from kontinue.models import checkpoint, policy

T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)
OWNER = checkpoint.Lineage(namespace="ns", owner_kind="Job", owner_name="train", owner_uid="u-1")
SAVED = checkpoint.MemberState.SAVED
FAILED = checkpoint.MemberState.FAILED
SAVING = checkpoint.MemberState.SAVING
CARRIED = checkpoint.MemberState.CARRIED_FORWARD
UNREPORTED = checkpoint.MemberState.UNREPORTED


def _set(
    name: str, minute: int, members: dict[str, checkpoint.MemberState], phase: str | None = None
) -> checkpoint.Checkpoint:
    """A set of ``members`` (identity -> state); the phase follows the members unless given."""
    if phase is None:
        states = list(members.values())
        if not all(s.terminal for s in states):
            phase = "InProgress"
        else:
            phase = "Succeeded" if all(s.good for s in states) else "Failed"
    spec_members = [
        checkpoint.Member(
            pod_name=f"{name}-{i}",
            pod_uid=f"{name}-uid-{i}",
            identity=who,
            index=identity.index_of(who),
        )
        for i, who in enumerate(members)
    ]
    results = [
        checkpoint.MemberResult(pod_name=f"{name}-{i}", state=state)
        for i, state in enumerate(members.values())
    ]
    return checkpoint.Checkpoint(
        metadata={"name": name, "namespace": "ns"},
        spec=checkpoint.CheckpointSpec(
            lineage=OWNER,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE,
                reason="Preempted",
                time=T0 + datetime.timedelta(minutes=minute),
            ),
            members=spec_members,
        ),
        status=checkpoint.CheckpointStatus(phase=checkpoint.Phase(phase), members=results),
    )


def _policy(consistency: str = "coupled", **spec: Any) -> policy.CheckpointPolicy:
    return policy.load(
        {"metadata": {"name": "p"}, "spec": {"restore": {"consistency": consistency}, **spec}}
    )


def _plan(cps: list[checkpoint.Checkpoint], who: str, rule: str = "coupled") -> restore_plan.Plan:
    return restore_plan.plan(
        cps,
        owner=OWNER,
        identity=who,
        policy=_policy(rule),
        pod_fingerprint=checkpoint.Fingerprint(),
        nodes=[],
    )


def _from(result: restore_plan.Plan) -> tuple[str, str] | None:
    """``(set, pod uid of the member)`` restored from now, else ``None``."""
    if result.source is None or result.wait_for is not None:
        return None
    return result.source.name, result.source.member.pod_uid


# --- identity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {}, "index=0"),
        ({}, {keys.JOB_COMPLETION_INDEX_ANNOTATION: "3"}, "index=3"),
        ({keys.JOB_COMPLETION_INDEX_LABEL: "12"}, {}, "index=12"),
        (
            {
                keys.JOBSET_NAME_LABEL: "js",
                keys.JOBSET_REPLICATED_JOB_LABEL: "workers",
                keys.JOBSET_JOB_INDEX_LABEL: "1",
            },
            {keys.JOB_COMPLETION_INDEX_ANNOTATION: "0"},
            "replicatedJob=workers,jobIndex=1,index=0",
        ),
        (
            {keys.JOBSET_NAME_LABEL: "js"},
            {
                keys.JOBSET_REPLICATED_JOB_LABEL: "driver",
                keys.JOBSET_JOB_INDEX_LABEL: "0",
                keys.JOB_COMPLETION_INDEX_ANNOTATION: "1",
            },
            "replicatedJob=driver,jobIndex=0,index=1",
        ),
        (
            {keys.VOLCANO_TASK_SPEC_KEY: "worker"},
            {keys.VOLCANO_TASK_INDEX_KEY: "1"},
            "task=worker,index=1",
        ),
    ],
    ids=["single", "indexed-annotation", "indexed-label", "jobset", "jobset-annotations", "vcjob"],
)
def test_identity_of_each_workload_shape(
    labels: dict[str, str], annotations: dict[str, str], expected: str
) -> None:
    assert identity.of(labels, annotations) == expected


@pytest.mark.parametrize(
    ("labels", "annotations", "names"),
    [
        ({}, {keys.JOB_COMPLETION_INDEX_ANNOTATION: "\u00b2"}, "job-completion-index"),
        ({}, {keys.JOB_COMPLETION_INDEX_ANNOTATION: "-1"}, "job-completion-index"),
        ({keys.JOBSET_NAME_LABEL: "js", keys.JOBSET_REPLICATED_JOB_LABEL: "w"}, {}, "job-index"),
        ({keys.VOLCANO_TASK_SPEC_KEY: "worker"}, {}, "task-index"),
        ({keys.VOLCANO_TASK_SPEC_KEY: "a,b", keys.VOLCANO_TASK_INDEX_KEY: "0"}, {}, "task-spec"),
    ],
)
def test_malformed_identity_is_refused_naming_the_key(
    labels: dict[str, str], annotations: dict[str, str], names: str
) -> None:
    with pytest.raises(ValueError, match=names):
        identity.of(labels, annotations)


def test_identities_sort_naturally_and_legacy_members_have_one() -> None:
    assert sorted(["index=10", "index=2", "index=0"], key=identity.sort_key) == [
        "index=0",
        "index=2",
        "index=10",
    ]
    legacy = checkpoint.Member(pod_name="p", pod_uid="u", index=4)
    assert identity.of_member(legacy) == "index=4"


# --- the plan ---------------------------------------------------------------------------------

WHOLE = _set("whole", 1, {"index=0": SAVED, "index=1": SAVED})
PARTIAL = _set("partial", 2, {"index=0": SAVED})


def test_partial_set_serves_only_the_identity_it_holds() -> None:
    """Issue 19 item 1 (kube-scheduler preempted index 0 only)."""
    for rule in ("coupled", "independent"):
        assert _from(_plan([WHOLE, PARTIAL], "index=1", rule)) == ("whole", "whole-uid-1")
        assert _from(_plan([WHOLE, PARTIAL], "index=0", rule)) == ("partial", "partial-uid-0")
    only_partial = _plan([PARTIAL], "index=1")
    assert only_partial.cold_start
    assert "holds member index=1" in only_partial.reason


def test_a_later_whole_workload_set_supersedes_a_partial_one() -> None:
    later = _set("later", 3, {"index=0": SAVED, "index=1": SAVED})
    for who in ("index=0", "index=1"):
        assert _from(_plan([WHOLE, PARTIAL, later], who)) == ("later", f"later-uid-{who[-1]}")


TORN = _set("torn", 3, {"index=0": SAVED, "index=1": FAILED})


def test_coupled_never_restores_half_of_a_set() -> None:
    """Issue 11 item 1: one member torn -> every pod resumes from the older whole set."""
    assert TORN.status.phase is checkpoint.Phase.FAILED
    assert _from(_plan([WHOLE, TORN], "index=0")) == ("whole", "whole-uid-0")
    assert _from(_plan([WHOLE, TORN], "index=1")) == ("whole", "whole-uid-1")
    assert "coupled" in _plan([WHOLE, TORN], "index=0").reason


def test_independent_takes_each_identitys_newest_saved_member() -> None:
    assert _from(_plan([WHOLE, TORN], "index=0", "independent")) == ("torn", "torn-uid-0")
    assert _from(_plan([WHOLE, TORN], "index=1", "independent")) == ("whole", "whole-uid-1")


def test_shared_gives_every_pod_rank_zeros_newest_saved_member() -> None:
    for who in ("index=0", "index=1", "index=7"):
        result = _plan([WHOLE, TORN], who, "shared")
        assert _from(result) == ("torn", "torn-uid-0")
        assert result.identity == "index=0"
        assert result.reason.startswith("shared: member index=0: restore from torn")


def test_carried_forward_member_is_looked_through_to_its_older_state() -> None:
    """Issue 19 item 2: index 1 never ran in the second incarnation; the set still succeeds and
    index 1 resumes exactly from what it would have restored."""
    carried = _set("carried", 3, {"index=0": SAVED, "index=1": CARRIED})
    assert carried.status.phase is checkpoint.Phase.SUCCEEDED
    assert _from(_plan([WHOLE, carried], "index=0")) == ("carried", "carried-uid-0")
    assert _from(_plan([WHOLE, carried], "index=1")) == ("whole", "whole-uid-1")
    assert _plan([carried], "index=1").cold_start


def test_coupled_waits_for_a_set_still_saving_even_if_its_own_member_saved() -> None:
    saving = _set("saving", 3, {"index=0": SAVED, "index=1": SAVING})
    coupled = _plan([WHOLE, saving], "index=0")
    assert coupled.wait_for is not None
    assert coupled.wait_for.name == "saving"
    assert coupled.source is not None
    assert coupled.source.name == "whole"
    assert coupled.source.member.pod_uid == "whole-uid-0"
    independent = _plan([WHOLE, saving], "index=0", "independent")
    assert _from(independent) == ("saving", "saving-uid-0")
    awaited = _plan([WHOLE, saving], "index=1", "independent")
    assert awaited.wait_for is not None
    assert awaited.wait_for.member.pod_uid == "saving-uid-1"


def test_four_member_set_each_identity_restores_its_own_directory() -> None:
    four = _set("four", 1, {f"index={i}": SAVED for i in range(4)})
    for i in range(4):
        result = _plan([four], f"index={i}")
        assert result.source is not None
        assert result.source.path.endswith(f"/four-uid-{i}")


def test_jobset_and_vcjob_identities_do_not_collide() -> None:
    """Issue 19 item 3: two replicated Jobs x two pods have two pods of each completion index."""
    jobset = [f"replicatedJob={rj},jobIndex=0,index={i}" for rj in ("a", "b") for i in (0, 1)]
    vcjob = [f"task={t},index={i}" for t in ("ps", "worker") for i in (0, 1)]
    for shape in (jobset, vcjob):
        cp = _set("s", 1, dict.fromkeys(shape, SAVED))
        uids = {who: _from(_plan([cp], who)) for who in shape}
        assert len(set(uids.values())) == 4
        for n, who in enumerate(shape):
            assert uids[who] == ("s", f"s-uid-{n}")


def test_admission_check_plan_is_rank_zeros() -> None:
    decision = catalog.choose_restore(
        [WHOLE, PARTIAL],
        lineage=OWNER,
        policy=_policy(),
        pod_fingerprint=checkpoint.Fingerprint(),
        nodes=[],
    )
    assert decision.checkpoint is not None
    assert decision.checkpoint.name == "partial"


# --- retention --------------------------------------------------------------------------------


def test_retention_keeps_every_identitys_only_good_member() -> None:
    """Three newer partial sets of index 0 and keep=1 never expire index 1's only good member."""
    partials = [_set(f"p{n}", 2 + n, {"index=0": SAVED}) for n in range(3)]
    doomed = {
        cp.name
        for cp in catalog.retention([WHOLE, *partials], policy=_policy(retention={"keep": 1}))
    }
    assert "whole" not in doomed
    assert doomed == {"p0", "p1"}
    needed = restore_plan.needed([WHOLE, *partials], owner=OWNER, policy=_policy())
    assert needed == {"p2": ["index=0"], "whole": ["index=1"]}


def test_retention_follows_carried_forward_members() -> None:
    carried = _set("carried", 3, {"index=0": SAVED, "index=1": CARRIED})
    newer = _set("newer", 4, {"index=0": SAVED, "index=1": CARRIED})
    doomed = {
        cp.name
        for cp in catalog.retention([WHOLE, carried, newer], policy=_policy(retention={"keep": 1}))
    }
    assert doomed == {"carried"}


# --- the set verdict for gated pods (wait mode) --------------------------------------------


def test_plan_gates_only_a_coupled_wait_on_a_set_with_siblings() -> None:
    saving = _set("saving", 3, {"index=0": SAVED, "index=1": SAVING})
    assert _plan([WHOLE, saving], "index=0").await_verdict
    assert not _plan([WHOLE, saving], "index=1", "independent").await_verdict
    alone = _set("alone", 3, {"index=0": SAVING})
    assert not _plan([WHOLE, alone], "index=0").await_verdict


@pytest.mark.parametrize(
    ("members", "phase", "who", "expected"),
    [
        ({"index=0": SAVED, "index=1": FAILED}, "Failed", "index=0", restore_plan.NOT_RESTORABLE),
        ({"index=0": SAVED, "index=1": FAILED}, "Failed", "index=1", restore_plan.NOT_RESTORABLE),
        ({"index=0": SAVED, "index=1": SAVED}, "Succeeded", "index=1", "v-uid-1"),
        (
            {"index=0": SAVED, "index=1": CARRIED},
            "Succeeded",
            "index=1",
            restore_plan.NOT_RESTORABLE,
        ),
        ({"index=0": SAVED, "index=1": CARRIED}, "Succeeded", "index=0", "v-uid-0"),
    ],
    ids=["torn-sibling", "torn-self", "all-saved", "self-carried", "sibling-carried"],
)
def test_verdict_follows_the_set_not_the_members_own_directory(
    members: dict[str, checkpoint.MemberState], phase: str, who: str, expected: str
) -> None:
    cp = _set("v", 3, members, phase)
    found = restore_plan.verdict(cp, identity=who, policy=_policy())
    assert found.ready
    assert found.member == expected
    assert found.wait_seconds == (600 if expected != restore_plan.NOT_RESTORABLE else 0)


def test_verdict_waits_while_the_set_saves_and_falls_back_when_it_is_gone() -> None:
    saving = _set("saving", 3, {"index=0": SAVED, "index=1": SAVING})
    assert not restore_plan.verdict(saving, identity="index=0", policy=_policy()).ready
    gone = restore_plan.verdict(None, identity="index=0", policy=_policy())
    assert gone.ready
    assert gone.member == restore_plan.NOT_RESTORABLE


# --- the vetoes live in the plan too: an excluded set falls back to an older one ---------------


def _with_product(cp: checkpoint.Checkpoint, product: str) -> checkpoint.Checkpoint:
    spec = cp.spec.model_copy(update={"fingerprint": checkpoint.Fingerprint(gpu_product=product)})
    return cp.model_copy(update={"spec": spec})


def test_a_set_the_pods_node_selector_excludes_falls_back_to_an_older_one() -> None:
    older = _with_product(WHOLE, "A100")
    newer = _with_product(_set("newer", 5, {"index=0": SAVED, "index=1": SAVED}), "H100")
    result = restore_plan.plan(
        [older, newer],
        owner=OWNER,
        identity="index=1",
        policy=_policy(),
        pod_fingerprint=checkpoint.Fingerprint(),
        nodes=None,
        pinned={keys.GPU_PRODUCT_LABEL: "A100"},
    )
    assert _from(result) == ("whole", "whole-uid-1")
    assert result.passed_over == ["newer"]
    assert "nodeSelector nvidia.com/gpu.product=A100 excludes checkpoint's H100" in result.reason


def test_a_set_recording_a_directory_outside_the_lineage_is_passed_over() -> None:
    stray = _set("stray", 5, {"index=0": SAVED, "index=1": SAVED})
    results = [
        r.model_copy(update={"path": "/kontinue/checkpoints/other/x/y"})
        for r in stray.status.members
    ]
    stray = stray.model_copy(
        update={"status": stray.status.model_copy(update={"members": results})}
    )
    result = _plan([WHOLE, stray], "index=0")
    assert _from(result) == ("whole", "whole-uid-0")
    assert "outside lineage" in result.reason


# --- unknown but verifiable (issue 20 item 2) ------------------------------------------------


def test_an_unreported_member_is_offered_for_verification_with_the_older_set_as_fallback() -> None:
    """Its kubelet was lost: the set is Failed, but the member's directory may be complete. The
    pod is told to check it once (no wait) and to fall back to the older good set."""
    lost = _set("lost", 3, {"index=0": UNREPORTED})
    assert lost.status.phase is checkpoint.Phase.FAILED
    for rule in ("coupled", "independent", "shared"):
        result = _plan([WHOLE, lost], "index=0", rule)
        assert result.verify_only, rule
        assert result.wait_for is not None
        assert (result.wait_for.name, result.wait_for.member.pod_uid) == ("lost", "lost-uid-0")
        assert result.source is not None
        assert (result.source.name, result.source.member.pod_uid) == ("whole", "whole-uid-0")
        assert not result.await_verdict  # nothing to gate: one member, its own directory
        assert "restore from lost (member Unreported: no final status came) if its directory" in (
            result.reason
        )
        assert result.reason.endswith("if it fails, from whole"), result.reason
    alone = _plan([lost], "index=0")
    assert alone.verify_only
    assert alone.source is None
    assert alone.wait_for is not None
    assert "no older checkpoint to fall back to" in alone.reason


def test_a_coupled_set_with_siblings_never_offers_its_unreported_member() -> None:
    """A pod can verify only its own directory; its siblings restore from the older whole set,
    so trusting the unreported member would resume half the workload from each."""
    lost = _set("lost", 3, {"index=0": SAVED, "index=1": UNREPORTED})
    for who in ("index=0", "index=1"):
        result = _plan([WHOLE, lost], who)
        assert not result.verify_only
        assert _from(result) == ("whole", f"whole-uid-{who[-1]}")
    assert (
        "index=1 unreported (coupled: siblings cannot verify)"
        in _plan([WHOLE, lost], "index=1").reason
    )
    independent = _plan([WHOLE, lost], "index=1", "independent")
    assert independent.verify_only
    assert independent.wait_for is not None
    assert independent.wait_for.member.pod_uid == "lost-uid-1"
    assert _from(_plan([WHOLE, lost], "index=0", "independent")) == ("lost", "lost-uid-0")


def test_a_newer_set_still_saving_is_awaited_rather_than_an_older_unreported_one() -> None:
    lost = _set("lost", 3, {"index=0": UNREPORTED})
    saving = _set("saving", 5, {"index=0": SAVING})
    result = _plan([WHOLE, lost, saving], "index=0")
    assert result.wait_for is not None
    assert result.wait_for.name == "saving"
    assert not result.verify_only
    assert result.source is not None
    assert result.source.name == "whole"


def test_a_newer_good_set_wins_over_an_older_unreported_one() -> None:
    lost = _set("lost", 1, {"index=0": UNREPORTED})
    newer = _set("newer", 3, {"index=0": SAVED})
    assert _from(_plan([lost, newer], "index=0")) == ("newer", "newer-uid-0")


def test_retention_keeps_an_unreported_set_while_it_is_offered() -> None:
    lost = _set("lost", 3, {"index=0": UNREPORTED})
    needed = restore_plan.needed([WHOLE, lost], owner=OWNER, policy=_policy())
    assert needed == {"lost": ["index=0"], "whole": ["index=0", "index=1"]}


def test_verdict_never_restores_an_unreported_sibling() -> None:
    lost = _set("lost", 3, {"index=0": SAVED, "index=1": UNREPORTED})
    for who in ("index=0", "index=1"):
        decided = restore_plan.verdict(lost, identity=who, policy=_policy())
        assert decided.ready
        assert decided.member == restore_plan.NOT_RESTORABLE


def _created(cp: checkpoint.Checkpoint, at: str) -> checkpoint.Checkpoint:
    """``cp`` as the bridge creates it: ``kontinue.dev/created-at`` to the microsecond."""
    meta = cp.metadata.model_copy(
        update={
            "annotations": {keys.CREATED_AT_ANNOTATION: at},
            "creation_timestamp": datetime.datetime.fromisoformat(at).replace(microsecond=0),
        }
    )
    return cp.model_copy(update={"metadata": meta})


def test_a_whole_set_evicted_in_the_second_of_a_partial_one_is_newer_whatever_the_names() -> None:
    """The partial set of index 0 and, within the same second (trigger times and
    ``creationTimestamp`` are whole seconds), the whole Job evicted again: index 0's next pod
    must wait for the newer set, not restore the partial one because its name sorts later
    (tests/integration/bridge/test_member_sets.py, ``wait-and-leader-change``: its pods were
    not all gated in about one run of four)."""
    same = 2
    partial = _created(_set("zz-partial", same, {"index=0": SAVED}), "2026-12-02T10:02:00.100000Z")
    whole = _created(
        _set("aa-whole", same, {"index=0": SAVED, "index=1": SAVING}),
        "2026-12-02T10:02:00.900000Z",
    )
    assert [cp.name for cp in restore_plan.newest_first([partial, whole])] == [
        "aa-whole",
        "zz-partial",
    ]
    for who in ("index=0", "index=1"):
        chosen = _plan([WHOLE, partial, whole], who)
        assert chosen.wait_for is not None, chosen.reason
        assert chosen.wait_for.name == "aa-whole", chosen.reason
        assert chosen.await_verdict
    # a hand-written set without the annotation keeps the old order (its creationTimestamp)
    plain = _set("plain", same, {"index=0": SAVED})
    assert restore_plan.created_at(plain) == datetime.datetime.min.replace(tzinfo=datetime.UTC)
