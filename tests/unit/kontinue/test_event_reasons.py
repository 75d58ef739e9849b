"""Issue 12, Events: every reason Kontinue writes (the ``EVENT_*`` names of kontinue/keys.py,
which the bridge's handlers and the webhook's observer pass to the one Event writer,
kontinue/kube/events.py) is CamelCase, as Kubernetes reasons are, and is listed in the Events
table of docs/operations.md."""

from __future__ import annotations

import re

from kontinue import keys
from tests import fixtures

CAMEL = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]*)*$")


def _reasons() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(keys).items()
        if name.startswith("EVENT_") and isinstance(value, str)
    }


def test_every_event_reason_is_camel_case_and_distinct() -> None:
    reasons = _reasons()
    assert len(reasons) >= 11  # 11 today
    assert [v for v in reasons.values() if not CAMEL.match(v)] == []
    assert len(set(reasons.values())) == len(reasons)


def test_every_event_reason_is_in_the_operations_events_table() -> None:
    text = (fixtures.ROOT / "docs" / "operations.md").read_text()
    table = text.split("## Events", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([A-Za-z]+)`", row.split("|")[1])}
    assert sorted(set(_reasons().values()) - listed) == []
