"""``kontinue.models.base.parse_time``: the one reader of ``metav1.Time`` / ``MicroTime`` text."""

from __future__ import annotations

import datetime

import pytest

from kontinue.models import base

UTC = datetime.UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        # MicroTime (a Lease's renewTime, an Event's eventTime)
        ("2026-01-02T03:04:05.123456Z", datetime.datetime(2026, 1, 2, 3, 4, 5, 123456, UTC)),
        ("2026-01-02T05:04:05+02:00", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),  # no offset
    ],
)
def test_rfc3339_text_becomes_an_aware_time(text: str, expected: datetime.datetime) -> None:
    parsed = base.parse_time(text)
    assert parsed == expected
    assert parsed.tzinfo is not None


def test_what_format_time_writes_reads_back() -> None:
    now = base.now()
    assert base.parse_time(base.format_time(now)) == now


def test_text_that_is_no_time_raises() -> None:
    with pytest.raises(ValueError, match="Invalid isoformat"):
        base.parse_time("yesterday")
