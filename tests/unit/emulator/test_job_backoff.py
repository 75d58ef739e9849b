"""The emulated Job controller's pod-failure backoff (emulator/jobs/backoff.py), against
kubernetes/kubernetes v1.36 ``pkg/controller/job/backoff_utils.go``."""

from __future__ import annotations

import datetime
from typing import Any

from emulator.jobs import backoff

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(phase: str, finished: float) -> dict[str, Any]:
    return {
        "metadata": {"creationTimestamp": _iso(T0 - 100)},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"finishedAt": _iso(finished)}}}
            ],
        },
    }


def test_finished_time_follows_get_finished_time() -> None:
    assert backoff.finished_time(_pod("Failed", T0)) == T0
    meta: dict[str, Any] = {"creationTimestamp": _iso(T0 - 100)}
    status: dict[str, Any] = {"containerStatuses": [{"name": "main", "state": {"running": {}}}]}
    running = {"metadata": meta, "status": status}
    assert backoff.finished_time(running) == T0 - 100  # nothing else known: creation
    status["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": _iso(T0 - 5)}
    ]
    assert backoff.finished_time(running) == T0 - 5
    del status["conditions"]
    meta["deletionTimestamp"] = _iso(T0 + 30)
    meta["deletionGracePeriodSeconds"] = 30
    assert backoff.finished_time(running) == T0  # deletion minus its grace


def test_each_failure_since_the_last_success_doubles_the_wait() -> None:
    one = backoff.next_record(backoff.Record(), [], [_pod("Failed", T0)])
    assert one == backoff.Record(1, T0)
    assert backoff.remaining(one, T0) == 10.0
    assert backoff.remaining(one, T0 + 4) == 6.0
    assert backoff.remaining(one, T0 + 11) == 0.0
    two = backoff.next_record(one, [], [_pod("Failed", T0 + 20)])
    assert backoff.remaining(two, T0 + 20) == 20.0
    many = backoff.Record(12, T0)
    assert backoff.remaining(many, T0) == backoff.MAX_SECONDS
    assert backoff.remaining(one, T0, default=0.0) == 0.0  # turned off (the fast tier)


def test_a_success_resets_the_count_to_the_failures_after_it() -> None:
    old = backoff.Record(3, T0)
    assert backoff.next_record(old, [_pod("Succeeded", T0 + 5)], []) == backoff.Record()
    mixed = backoff.next_record(
        old,
        [_pod("Succeeded", T0 + 5)],
        [_pod("Failed", T0 + 2), _pod("Failed", T0 + 8), _pod("Failed", T0 + 9)],
    )
    assert mixed == backoff.Record(2, T0 + 9)
    assert backoff.next_record(old, [], []) == old
