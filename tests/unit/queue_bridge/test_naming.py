"""Checkpoint names: deterministic per eviction, distinct across evictions, valid DNS labels."""

from __future__ import annotations

import datetime
import re

import pytest

from kontinue.models import checkpoint
from queue_bridge import naming

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
T0 = datetime.datetime(2026, 12, 1, 10, 5, tzinfo=datetime.UTC)


def lineage(name: str = "train", uid: str = "owner-uid") -> checkpoint.Lineage:
    return checkpoint.Lineage(namespace="ns", owner_kind="Job", owner_name=name, owner_uid=uid)


def trigger(at: datetime.datetime = T0) -> checkpoint.Trigger:
    return checkpoint.Trigger(source=checkpoint.TriggerSource.KUEUE, reason="Preempted", time=at)


@pytest.mark.parametrize(
    ("owner", "prefix"),
    [
        ("train", "train-"),
        ("Train.V2_final", "train-v2-final-"),
        ("a" * 253, "a" * 52 + "-"),
        ("a" * 51 + ".b", "a" * 51 + "-"),  # truncation never leaves a dash before ours
        ("...", "checkpoint-"),
    ],
    ids=["plain", "sanitised", "longest", "no-double-dash", "nothing-usable"],
)
def test_name_shape(owner: str, prefix: str) -> None:
    name = naming.checkpoint_name(lineage(owner), trigger=trigger(), workload_uid="wl")
    assert DNS_LABEL.match(name), name
    assert len(name) <= 63
    assert name.startswith(prefix)
    assert re.fullmatch(r"[0-9a-f]{10}", name[len(prefix) :])


def test_same_eviction_same_name() -> None:
    """Kueue's two updates, a relist, the other replica: same inputs, same name."""
    first = naming.checkpoint_name(lineage(), trigger=trigger(), workload_uid="wl")
    naive = T0.replace(tzinfo=None)  # read back without zone
    sub_second = T0 + datetime.timedelta(microseconds=400_000)
    assert naming.checkpoint_name(lineage(), trigger=trigger(naive), workload_uid="wl") == first
    assert (
        naming.checkpoint_name(lineage(), trigger=trigger(sub_second), workload_uid="wl") == first
    )
    other_zone = T0.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert (
        naming.checkpoint_name(lineage(), trigger=trigger(other_zone), workload_uid="wl") == first
    )


def test_different_evictions_differ() -> None:
    names = {
        naming.checkpoint_name(lineage(), trigger=trigger(), workload_uid="wl"),
        naming.checkpoint_name(
            lineage(), trigger=trigger(T0 + datetime.timedelta(seconds=1)), workload_uid="wl"
        ),
        naming.checkpoint_name(lineage(), trigger=trigger(), workload_uid="wl-2"),
        naming.checkpoint_name(lineage(), trigger=trigger()),  # owner UID instead
        naming.checkpoint_name(lineage(uid="other"), trigger=trigger()),
    }
    assert len(names) == 5
