"""The pure Lease decision of leader election (client-go's tryAcquireOrRenew rules)."""

from __future__ import annotations

import datetime

import pytest

from queue_bridge import leader

NOW = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=datetime.UTC)


def _spec(holder: str, renewed_seconds_ago: float, duration: int = 15) -> dict[str, object]:
    renewed = NOW - datetime.timedelta(seconds=renewed_seconds_ago)
    return {
        "holderIdentity": holder,
        "renewTime": leader.format_micro_time(renewed),
        "acquireTime": leader.format_micro_time(renewed),
        "leaseDurationSeconds": duration,
        "leaseTransitions": 3,
    }


@pytest.mark.parametrize(
    ("spec", "leading", "writes", "transitions"),
    [
        (None, True, True, 0),  # no Lease yet: create it
        (_spec("", 100), True, True, 3),  # released Lease: take it, not a transition
        (_spec("me", 1), True, True, 3),  # ours: renew
        (_spec("me", 100), True, True, 3),  # ours even if expired: renew
        (_spec("other", 5), False, False, None),  # held and fresh: wait
        (_spec("other", 15), True, True, 4),  # expired exactly at renew + duration: take over
        (_spec("other", 60), True, True, 4),
    ],
)
def test_decide(
    spec: dict[str, object] | None, leading: bool, writes: bool, transitions: int | None
) -> None:
    decision = leader.decide(spec, identity="me", now=NOW, duration_seconds=15)
    assert decision.leading is leading
    assert (decision.spec is not None) is writes
    if decision.spec is not None:
        assert decision.spec["holderIdentity"] == "me"
        assert decision.spec["renewTime"] == "2026-12-02T12:00:00.000000Z"
        assert decision.spec["leaseTransitions"] == transitions


def test_renewal_keeps_the_acquire_time() -> None:
    spec = _spec("me", 3)
    decision = leader.decide(spec, identity="me", now=NOW, duration_seconds=15)
    assert decision.spec is not None
    assert decision.spec["acquireTime"] == spec["acquireTime"]


def test_timings_must_let_a_leader_stop_before_its_lease_expires() -> None:
    with pytest.raises(ValueError, match="renew_seconds < deadline_seconds < duration_seconds"):
        leader.LeaderElector(
            None,  # type: ignore[arg-type]
            namespace="ns",
            name="l",
            identity="me",
            duration_seconds=10,
            renew_seconds=5,
            deadline_seconds=12,
        )
