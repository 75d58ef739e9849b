"""The soak's invariants (issue 11, "Make the search permanent"), as pure checks over a run's
record: the store's history (:mod:`tests.soak.history`) and what each pod's workload printed.

The restore rule checked is the ``coupled`` one (the default; docs/api.md, "Restore"), written
here again from the documentation rather than imported from kontinue/restore_plan.py, so the
product's planner cannot grade itself: a pod of identity *I* created at store revision *r*
restores *I*'s member of the newest set (by trigger time, then creation) created before *r* that
was not Expired by *r*, whose verdict is Succeeded, that holds *I* as Saved, and whose failed
restores had not reached ``attemptsBeforeFallback``; a member CarriedForward looks through to
older sets; no such set: a cold start. A pod the webhook never plumbed (created during its
outage) starts cold, as documented (kontinue/restore/__init__.py ``stand_in``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from tests.soak import history

ATTEMPTS_BEFORE_FALLBACK = 2
"""The policy default (docs/api.md, ``spec.restore.attemptsBeforeFallback``)."""
RESTORED = re.compile(r"^RESTORED member=(\S+) step=(\d+) dir=(\S+)$", re.MULTILINE)
COLD = re.compile(r"^COLD member=(\S+)$", re.MULTILINE)
SAVED = re.compile(r"^SAVED member=(\S+) step=(\d+)$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one pod's workload printed."""

    started: bool
    restored_from: str | None = None
    """The saving pod's uid (the directory name) it restored, None: cold or never started."""
    restored_step: int = 0
    saved_step: int | None = None
    wrong_member: bool = False


def outcome(log: str | None) -> Outcome:
    if log is None:
        return Outcome(started=False)
    restored = RESTORED.findall(log)
    saved = SAVED.findall(log)
    wrong = "WRONG-MEMBER" in log
    return Outcome(
        # a pod refusing another identity's directory started too (and is judged for it)
        started=bool(restored or COLD.search(log) or wrong),
        restored_from=restored[0][2] if restored else None,
        restored_step=int(restored[0][1]) if restored else 0,
        saved_step=int(saved[-1][1]) if saved else None,
        wrong_member=wrong,
    )


@dataclasses.dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


LATE_PLAN = "late-plan"
"""A violation: a pod restored what the rule gave at an *earlier* revision, at most :data:`LAG`
seconds before the pod was created: its plan was made from a view of the lineage that missed a
set recorded just before. Counted as a finding until the webhook read a plumbed pod's lineage
live at its CREATE (webhook/freshness.py; docs/security.md, "Soak findings", item 1); named apart
from ``restores-the-planned-member`` so a report says which it was."""
LAG = 2.0
"""How far back a plan's view is searched for a late plan (the watch cache's lag on a loaded
machine, which the webhook no longer plans from alone)."""
UNRECORDED = "unrecorded-at-creation"
"""Not an invariant: a pod was created while its predecessor's save was not yet recorded in any
set (the bridge created the set after the pod), so the rule, which goes by what existed at the
pod's creation, gives it an older set or a cold start, and it did not restore that save. No
read at admission can see a set that does not exist yet; counted and printed, never a failure
(docs/security.md, "Soak findings", item 1)."""
OWN_IDENTITY = "restores-only-its-own-identity"
"""Issue 19: no pod restores state saved by another identity. Judged twice, from sources the
product does not write: the identity of the pod whose directory it restored (from the labels and
annotations its controllers stamped, tests/soak/shapes.py ``identity``) must be its own, and the
workload must not have printed ``WRONG-MEMBER`` (it was handed a directory whose manifest names
another identity, tests/integration/workloads/member_trainer.py). The coupled rule never shares
a member across identities (only the ``shared`` choice does, which the soak does not use)."""
INVARIANTS = (
    OWN_IDENTITY,
    "restores-only-whole-sets",
    LATE_PLAN,
    "restores-the-planned-member",
    "one-cut-per-incarnation",
    "succeeded-sets-are-whole",
    "finalizer-within-deadline",
    "namespace-own",
    "newest-good-kept",
    "saved-data-unchanged",
    "never-blocked",
)


def _order(s: history.Set) -> tuple[str, int]:
    return (s.trigger_time, s.added)


def _verifiable(found: history.Set, identity: str) -> bool:
    """An ``Unreported`` member of a set with no other member: "unknown but verifiable"
    (docs/api.md, "Late results and unreported members"): offered to the next pod of its
    identity, which restores it if the directory is complete, else the older set."""
    return found.states.get(identity) == "Unreported" and len(found.members) == 1


def expected_source(
    sets: Iterable[history.Set],
    *,
    namespace: str,
    owner_uid: str,
    identity: str,
    at: int,
    complete: Callable[[str], bool] = lambda _uid: False,
) -> str | None:
    """The saving pod uid a pod of ``identity`` created at revision ``at`` restores, or None.
    ``complete``: whether a saving pod's save completed (it printed ``SAVED``), for an
    unreported member, whose directory the restore verifies."""
    candidates = [
        s
        for s in sets
        if s.namespace == namespace
        and s.lineage_namespace == namespace
        and s.owner_uid == owner_uid
        and s.added < at
        and not (s.expired_at and s.expired_at < at)
        and not (s.deleted_at and s.deleted_at < at)
    ]
    for found in sorted(candidates, key=_order, reverse=True):
        if identity not in found.members:
            continue
        if found.verdict == "Failed" and _verifiable(found, identity):
            if found.failed_restores_at(at) < ATTEMPTS_BEFORE_FALLBACK and complete(
                found.members[identity]
            ):
                return found.members[identity]
            continue
        if found.verdict != "Succeeded":
            continue
        if found.failed_restores_at(at) >= ATTEMPTS_BEFORE_FALLBACK:
            continue
        state = found.states.get(identity, "")
        if state == "CarriedForward":
            continue
        if state == "Saved":
            return found.members[identity]
    return None


def check_restores(
    record: history.Record, outcomes: Mapping[str, Outcome], *, owner_uid: str
) -> list[Violation]:
    """Each started pod of the lineage restored what the rule gives it, from a whole set, the
    step its member saved, never another identity's directory."""
    found = []
    savers = {
        uid: set_
        for set_ in record.sets.values()
        for uid in set_.members.values()
        if set_.owner_uid == owner_uid
    }
    for pod in record.pods.values():
        seen = outcomes.get(pod.uid)
        if seen is None or not seen.started or pod.owner_uid != owner_uid:
            continue
        who = f"pod {pod.name} ({pod.identity})"
        if seen.wrong_member:
            found.append(Violation(OWN_IDENTITY, f"{who} was handed another identity's directory"))
        if seen.restored_from is not None:
            saving_pod = record.pods.get(seen.restored_from)
            if saving_pod is not None and saving_pod.identity != pod.identity:
                found.append(
                    Violation(
                        OWN_IDENTITY,
                        f"{who} restored the state of pod {saving_pod.name} "
                        f"({saving_pod.identity})",
                    )
                )
            source = savers.get(seen.restored_from)
            if source is None:
                found.append(
                    Violation(
                        "namespace-own",
                        f"{who} restored {seen.restored_from}, no member of its lineage",
                    )
                )
                continue
            saver = next((i for i, u in source.members.items() if u == seen.restored_from), "")
            verified = _verifiable(source, saver) and _complete(outcomes, seen.restored_from)
            if not verified and (
                source.verdict != "Succeeded" or source.states.get(saver) != "Saved"
            ):
                found.append(
                    Violation(
                        "restores-only-whole-sets",
                        f"{who} restored {source.name} member {saver} "
                        f"(verdict {source.verdict or 'none'}, states {source.states})",
                    )
                )
            if saver != pod.identity:
                found.append(Violation(OWN_IDENTITY, f"{who} restored member {saver}"))
            saved = outcomes.get(seen.restored_from)
            if saved is not None and saved.saved_step not in (None, seen.restored_step):
                found.append(
                    Violation(
                        "saved-data-unchanged",
                        f"{who} restored step {seen.restored_step}, its member saved "
                        f"step {saved.saved_step}",
                    )
                )
        want = (
            expected_source(
                record.sets.values(),
                namespace=pod.namespace,
                owner_uid=owner_uid,
                identity=pod.identity,
                at=pod.added,
                complete=lambda uid: _complete(outcomes, uid),
            )
            if pod.plumbed
            else None
        )
        if pod.plumbed and (missed := _recorded_after(record, pod, seen)):
            found.append(
                Violation(
                    UNRECORDED,
                    f"{who} created at r{pod.added} did not restore {missed}, recorded after it "
                    f"(the webhook wrote {pod.planned})",
                )
            )
        late = pod.plumbed and _planned_earlier(record, pod, seen, outcomes)
        if want != seen.restored_from and late:
            found.append(
                Violation(
                    LATE_PLAN,
                    f"{who} created at r{pod.added} restored {seen.restored_from or 'nothing'}, "
                    f"the rule gives {want or 'a cold start'} (what it gave before "
                    f"r{pod.added}: a plan from an older view; the webhook wrote {pod.planned})",
                )
            )
        elif want != seen.restored_from:
            found.append(
                Violation(
                    "restores-the-planned-member",
                    f"{who} created at r{pod.added} restored {seen.restored_from or 'nothing'}, "
                    f"the rule gives {want or 'a cold start'}; the webhook wrote {pod.planned}",
                )
            )
    return found


def _complete(outcomes: Mapping[str, Outcome], uid: str) -> bool:
    """The pod ``uid`` printed ``SAVED``: its save completed (its manifest was written)."""
    seen = outcomes.get(uid)
    return seen is not None and seen.saved_step is not None


def _recorded_after(record: history.Record, pod: history.Pod, seen: Outcome) -> str:
    """The newest Succeeded set recorded *after* ``pod`` was created that holds a Saved member
    of its identity saved by a pod created before it (a predecessor), when ``pod`` did not
    restore that member: what it missed because the set did not exist yet ("" if none)."""
    later = sorted(
        (
            s
            for s in record.sets.values()
            if s.namespace == pod.namespace
            and s.owner_uid == pod.owner_uid
            and s.added > pod.added
            and s.verdict == "Succeeded"
            and s.states.get(pod.identity) == "Saved"
        ),
        key=_order,
        reverse=True,
    )
    for s in later:
        saver = record.pods.get(s.members.get(pod.identity, ""))
        if saver is None or saver.added >= pod.added:
            continue
        if seen.restored_from != saver.uid:
            return s.name
        return ""
    return ""


def _planned_earlier(
    record: history.Record, pod: history.Pod, seen: Outcome, outcomes: Mapping[str, Outcome]
) -> bool:
    """Whether the rule, applied to the lineage as it was just before some change recorded
    within :data:`LAG` seconds before the pod's creation, gives what the pod restored."""
    changes = set()
    for s in record.sets.values():
        changes |= {s.added, s.expired_at, s.deleted_at}
        changes |= {at for at, _ in s.failed_restores}
    created = record.times.get(pod.added, 0.0)
    recent = {c for c in changes if 0 < c < pod.added and record.times.get(c, 0.0) >= created - LAG}
    return any(
        expected_source(
            record.sets.values(),
            namespace=pod.namespace,
            owner_uid=pod.owner_uid,
            identity=pod.identity,
            at=at,
            complete=lambda uid: _complete(outcomes, uid),
        )
        == seen.restored_from
        for at in sorted(recent)
    )


def check_incarnation(
    record: history.Record,
    outcomes: Mapping[str, Outcome],
    pods: Sequence[history.Pod],
    *,
    owner_uid: str,
) -> list[Violation]:
    """The pods that replaced a whole Job resume from one cut: some prefix of the lineage's sets
    (in creation order) gives every plumbed one of them exactly what it restored."""
    plumbed = [p for p in pods if p.plumbed and outcomes.get(p.uid, Outcome(False)).started]
    if len(plumbed) < 2:
        return []
    latest = max(p.added for p in plumbed)
    lineage = sorted(
        (s for s in record.sets.values() if s.owner_uid == owner_uid and s.added < latest),
        key=lambda s: s.added,
    )
    observed = {p.uid: outcomes[p.uid].restored_from for p in plumbed}
    for cut in range(len(lineage), -1, -1):
        prefix = lineage[:cut]
        if all(
            expected_source(
                prefix,
                namespace=p.namespace,
                owner_uid=owner_uid,
                identity=p.identity,
                at=latest + 1,
                complete=lambda uid: _complete(outcomes, uid),
            )
            == observed[p.uid]
            for p in plumbed
        ):
            return []
    names = ", ".join(f"{p.identity}<-{observed[p.uid] or 'cold'}" for p in plumbed)
    return [Violation("one-cut-per-incarnation", f"no single cut gives {names}")]


FORGED_PREFIX = "forged-"
"""The soak's own forgeries (tests/soak/run.py ``forge``): admitted only while the webhook is
unreachable (its failurePolicy for Checkpoints is Ignore; no CRD rule can compare a field with
``metadata.namespace``), after which what matters is that nothing uses them."""


def check_sets(record: history.Record, outcomes: Mapping[str, Outcome]) -> list[Violation]:
    """A Succeeded set holds only members that saved (or never ran); every set but the soak's
    own forgeries names its own namespace's lineage."""
    found = []
    for s in record.sets.values():
        if s.lineage_namespace != s.namespace and not s.name.startswith(FORGED_PREFIX):
            found.append(
                Violation(
                    "namespace-own",
                    f"{s.namespace}/{s.name} exists naming lineage of {s.lineage_namespace}",
                )
            )
        if s.verdict != "Succeeded":
            continue
        for identity, state in s.states.items():
            uid = s.members.get(identity, "")
            if state not in ("Saved", "CarriedForward"):
                found.append(
                    Violation("succeeded-sets-are-whole", f"{s.name}: {identity} is {state}")
                )
            seen = outcomes.get(uid)
            if state == "Saved" and seen is not None and seen.saved_step is None:
                found.append(
                    Violation(
                        "succeeded-sets-are-whole",
                        f"{s.name}: {identity} Saved, but its pod {uid} never saved",
                    )
                )
    return found


def check_retention(record: history.Record, *, before: int) -> list[Violation]:
    """No set expired (before revision ``before``, while its Job still ran) while it held some
    identity's newest Saved member in a Succeeded set."""
    found = []
    for s in record.sets.values():
        if not s.expired_at or s.expired_at >= before or s.verdict != "Succeeded":
            continue
        for identity, state in s.states.items():
            if state != "Saved":
                continue
            newer = [
                o
                for o in record.sets.values()
                if o is not s
                and o.owner_uid == s.owner_uid
                and o.namespace == s.namespace
                and o.verdict == "Succeeded"
                and o.verdict_at < s.expired_at
                and _order(o) > _order(s)
                and o.states.get(identity) == "Saved"
            ]
            if not newer:
                found.append(
                    Violation(
                        "newest-good-kept",
                        f"{s.name} expired at r{s.expired_at} while it held the newest saved "
                        f"{identity}",
                    )
                )
    return found


def check_finalizers(
    record: history.Record, *, margin: float, slack: float, now: float
) -> list[Violation]:
    """No pod holds ``kontinue.dev/checkpoint`` past its deletion deadline plus the bridge's
    margin (``slack`` absorbs a replica's restart and a loaded machine)."""
    found = []
    for pod in record.pods.values():
        if not pod.deletion_deadline:
            continue
        released = pod.finalizer_released_at or now
        late = released - (pod.deletion_deadline + margin)
        if late > slack:
            found.append(
                Violation(
                    "finalizer-within-deadline",
                    f"pod {pod.namespace}/{pod.name} held the finalizer {late:.0f} s past its "
                    "deadline plus margin",
                )
            )
    return found
