"""The soak's plan: a seed in, the rounds of evictions and faults out. Pure and deterministic.

One round is one eviction of the soak's workload (a shape of tests/soak/shapes.py: an Indexed
Job, a JobSet, a Volcano Job), from one source, with the faults that surround it (issue 11,
"Make the search permanent"; issue 19 added the shapes):

- sources: ``kueue`` (a higher-priority Job in the same ClusterQueue: Kueue evicts the whole
  Workload), ``drain`` (every pod through the Eviction API), ``volcano`` (a higher-priority vcjob
  Volcano reclaims the GPUs for: every pod), ``eviction-api`` (one pod, as a drain of one node
  does), ``scheduler`` (a higher-priority bare pod that fits nowhere: kube-scheduler preempts one
  pod); each shape names the ones it is evicted by, the first evicting it whole;
- faults: ``torn`` (an evicted member ignores SIGTERM: SIGKILLed mid-save at the grace period's
  end, no manifest), ``api-error`` (the bridge's requests of one kind fail with 500, 429 or 409,
  ``count`` times, through the emulator's ``faults``), ``watch-drop`` (every watch cut),
  ``compact`` (the history forgotten and every watch cut: resuming is 410 Gone), ``leader-kill``
  (the leading bridge replica dies; a fresh replica replaces it), ``bridges-down`` (every replica
  dies; fresh ones start ``seconds`` later), ``webhook-outage`` (the webhook is unreachable for
  ``seconds``: mutation fails open, so pods created meanwhile are not plumbed), ``forge`` (another
  namespace creates a Checkpoint naming this Job's lineage, and a pod forging a restore),
  ``volume-full`` (an evicted member's save fails as on a full checkpoint volume: a cut-short
  data file, no manifest, a ``failed`` termination message).

The same seed always gives the same plan (``describe`` prints it). Running it is not equally
deterministic: the emulated cluster is asynchronous, so how the faults interleave with the
components' own timing varies from run to run (docs/security.md, "Fault soak").
"""

from __future__ import annotations

import dataclasses
import random

from tests.soak import shapes

SOURCES = shapes.INDEXED.sources
FAULT_KINDS = (
    "torn",
    "api-error",
    "watch-drop",
    "compact",
    "leader-kill",
    "bridges-down",
    "webhook-outage",
    "forge",
    "volume-full",
)
API_TARGETS = (
    ("create", "checkpoints", ""),
    ("patch", "checkpoints", "status"),
    ("update", "checkpoints", "status"),
    ("patch", "pods", ""),
    ("create", "events", ""),
    ("patch", "events", ""),
    ("update", "leases", ""),
    ("list", "checkpoints", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
)
API_STATUSES = (500, 429, 409, 503)
PROBABILITY = {
    "torn": 0.3,
    "api-error": 0.6,
    "watch-drop": 0.25,
    "compact": 0.15,
    "leader-kill": 0.25,
    "bridges-down": 0.1,
    "webhook-outage": 0.1,
    "forge": 0.15,
    "volume-full": 0.15,
}


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str
    delay: float = 0.0
    """Seconds after the eviction starts that it fires (negative: before the eviction)."""
    member: int = -1
    """``torn``, ``volume-full``: the completion (or task) index whose pods ignore SIGTERM or
    fail their save (in a 2 x 2 shape, the pod of that index in each replicated Job or task)."""
    target: tuple[str, str, str] = ("", "", "")
    """``api-error``: (verb, resource, subresource) of the bridge's requests that fail."""
    status: int = 0
    count: int = 0
    seconds: float = 0.0
    """``bridges-down``, ``webhook-outage``: how long it lasts."""

    def __str__(self) -> str:
        if self.kind in ("torn", "volume-full"):
            return f"{self.kind}(index={self.member})"
        if self.kind == "api-error":
            verb, resource, sub = self.target
            what = f"{resource}/{sub}" if sub else resource
            return f"api-error({verb} {what} -> {self.status} x{self.count})"
        extra = f", {self.seconds:.1f}s" if self.seconds else ""
        return f"{self.kind}(at {self.delay:+.1f}s{extra})"


@dataclasses.dataclass(frozen=True)
class Round:
    number: int
    source: str
    victim: int
    """``eviction-api``: the position in the shape's identities of the member evicted alone."""
    faults: tuple[Fault, ...]
    whole: bool = False
    """The source evicts the whole workload."""

    def __str__(self) -> str:
        who = "" if self.whole else f"(member={self.victim})"
        faults = ", ".join(str(f) for f in self.faults) or "no faults"
        return f"round {self.number}: {self.source}{who}; {faults}"


def plan(seed: int, rounds: int, *, shape: shapes.Shape = shapes.INDEXED) -> list[Round]:
    """``rounds`` rounds for the workload ``shape``, the same for the same arguments (a 2-pod
    Indexed Job's plan is the one this module made before the other shapes existed)."""
    rng = random.Random(seed)
    out = []
    for number in range(1, rounds + 1):
        source = rng.choice(shape.sources)
        victim = rng.randrange(shape.members)
        whole = source == shape.whole
        faults = []
        for kind in FAULT_KINDS:
            if rng.random() >= PROBABILITY[kind]:
                continue
            faults.append(_fault(rng, kind, shape=shape, whole=whole, victim=victim))
        out.append(Round(number, source, victim, tuple(faults), whole=whole))
    return out


def _fault(
    rng: random.Random, kind: str, *, shape: shapes.Shape, whole: bool, victim: int
) -> Fault:
    delay = round(rng.uniform(-0.5, 3.0), 1)
    if kind in ("torn", "volume-full"):
        index = rng.randrange(shape.indexes) if whole else shape.index_of(victim)
        return Fault(kind, member=index)
    if kind == "api-error":
        return Fault(
            kind,
            target=rng.choice(API_TARGETS),
            status=rng.choice(API_STATUSES),
            count=rng.randint(1, 4),
        )
    if kind == "bridges-down":
        return Fault(kind, delay=delay, seconds=round(rng.uniform(0.5, 4.0), 1))
    if kind == "webhook-outage":
        start = round(rng.uniform(-1.0, 1.0), 1)
        return Fault(kind, delay=start, seconds=round(rng.uniform(0.5, 3.0), 1))
    return Fault(kind, delay=delay)


def describe(seed: int, rounds: list[Round]) -> str:
    """The plan as text: what a failing run prints so that it can be replayed."""
    return "\n".join([f"seed {seed}: {len(rounds)} rounds", *(f"  {r}" for r in rounds)])
