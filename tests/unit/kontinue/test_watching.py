"""The pure parts of the watch cache: re-list reconciliation, per-event decisions, backoff."""

from __future__ import annotations

import pytest

from kontinue.kube import caching, watching

Entry = caching.Entry
Event = caching.Event


def _entries(**versions: str) -> dict[caching.Key, caching.Entry[str]]:
    """``a="3"`` -> key ("ns", "a") at resourceVersion "3" holding the object ``"a@3"``."""
    return {("ns", name): Entry(rv, f"{name}@{rv}") for name, rv in versions.items()}


def test_first_list_adds_everything_in_key_order() -> None:
    store, events = caching.reconcile(held={}, listed=_entries(b="2", a="1"))
    assert events == [Event("ADDED", "a@1"), Event("ADDED", "b@2")]
    assert store == _entries(a="1", b="2")


def test_relist_reports_only_what_changed() -> None:
    held = _entries(same="5", changed="6", gone="7")
    listed = _entries(same="5", changed="9", new="10")
    store, events = caching.reconcile(held=held, listed=listed)
    assert events == [
        Event("DELETED", "gone@7", "gone@7"),
        Event("MODIFIED", "changed@9", "changed@6"),
        Event("ADDED", "new@10"),
    ]
    assert store == listed


def test_counts_match_the_events_and_changes_are_made_one_at_a_time() -> None:
    held = {**_entries(same="5", changed="6", gone="7"), ("ns", "broken"): Entry("3", "b@3")}
    listed = _entries(same="5", changed="9", new="10")
    invalid = {("ns", "broken")}
    _, events = caching.reconcile(held=held, listed=listed, invalid=invalid)
    made = caching.counts(held=held, listed=listed, invalid=invalid)
    assert made == {t: sum(e.type == t for e in events) for t in ("ADDED", "MODIFIED", "DELETED")}
    assert made == {"ADDED": 1, "MODIFIED": 1, "DELETED": 1}

    read: list[str] = []

    class Counted:
        """An entry that records when its object is read (a packed entry parses then)."""

        def __init__(self, name: str) -> None:
            self.resource_version, self.name = "1", name

        @property
        def obj(self) -> str:
            read.append(self.name)
            return self.name

    stream = caching.changes(held={}, listed={("ns", n): Counted(n) for n in "abc"})
    assert next(stream).obj == "a"
    assert read == ["a"]  # b and c not read yet
    assert [e.obj for e in stream] == ["b", "c"]


def test_relist_keeps_the_held_object_when_unchanged() -> None:
    held = {("ns", "a"): Entry("5", "held copy")}
    listed = {("ns", "a"): Entry("5", "listed copy")}
    store, events = caching.reconcile(held=held, listed=listed)
    assert events == []
    assert store[("ns", "a")].obj == "held copy"


def test_periodic_resync_redelivers_unchanged_objects_as_sync() -> None:
    held = _entries(same="5", changed="6")
    _, events = caching.reconcile(held=held, listed=_entries(same="5", changed="8"), resync=True)
    assert events == [Event("MODIFIED", "changed@8", "changed@6"), Event("SYNC", "same@5")]


def test_an_invalid_listed_object_is_neither_deleted_nor_replaced() -> None:
    held = _entries(broken="3")
    store, events = caching.reconcile(held=held, listed={}, invalid={("ns", "broken")})
    assert events == []
    assert store == held


def test_relist_equal_to_the_store_is_silent() -> None:
    entries = _entries(a="1", b="2")
    store, events = caching.reconcile(held=entries, listed=dict(entries))
    assert (store, events) == (entries, [])


@pytest.mark.parametrize(
    ("watch_type", "held", "incoming", "expected"),
    [
        ("ADDED", None, Entry("3", "new"), Event("ADDED", "new")),
        ("MODIFIED", None, Entry("3", "new"), Event("ADDED", "new")),  # e.g. came into selector
        ("ADDED", Entry("2", "old"), Entry("3", "new"), Event("MODIFIED", "new", "old")),
        ("MODIFIED", Entry("2", "old"), Entry("3", "new"), Event("MODIFIED", "new", "old")),
        ("MODIFIED", Entry("3", "old"), Entry("3", "dup"), None),  # same version: duplicate
        ("MODIFIED", Entry("10", "old"), Entry("9", "stale"), None),  # numerically older
        ("MODIFIED", Entry("9", "old"), Entry("10", "new"), Event("MODIFIED", "new", "old")),
        ("MODIFIED", Entry("b", "old"), Entry("a", "new"), Event("MODIFIED", "new", "old")),
        ("MODIFIED", Entry("2", "old"), None, None),  # failed validation: keep the old copy
        ("DELETED", Entry("2", "old"), Entry("3", "last"), Event("DELETED", "last", "old")),
        ("DELETED", Entry("2", "old"), None, Event("DELETED", "old", "old")),
        ("DELETED", None, Entry("3", "last"), None),  # never seen: nothing to retract
        ("BOOKMARK", None, Entry("3", "x"), None),
    ],
)
def test_change_for_one_watch_event(
    watch_type: str,
    held: caching.Entry[str] | None,
    incoming: caching.Entry[str] | None,
    expected: caching.Event[str] | None,
) -> None:
    assert caching.change_for(watch_type, held=held, incoming=incoming) == expected


def test_keys_and_versions_of_raw_objects() -> None:
    raw = {"metadata": {"name": "w", "namespace": "team", "resourceVersion": "17"}}
    assert caching.key_of(raw) == ("team", "w")
    assert caching.key_of({"metadata": {"name": "cq"}}) == ("", "cq")
    assert caching.resource_version_of(raw) == "17"
    assert caching.resource_version_of({}) == ""


def test_backoff_doubles_up_to_the_cap_without_jitter() -> None:
    backoff = watching.Backoff(initial=0.5, factor=2.0, cap=4.0, jitter=0.0)
    schedule = [backoff.delay(n, rand=0.99) for n in range(1, 8)]
    assert schedule == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert backoff.delay(10_000, rand=0.0) == 4.0  # no overflow for a long outage


def test_backoff_jitter_only_shortens_and_stays_within_its_fraction() -> None:
    backoff = watching.Backoff(initial=1.0, factor=2.0, cap=8.0, jitter=0.5)
    assert backoff.delay(3, rand=0.0) == 4.0
    assert backoff.delay(3, rand=0.5) == 3.0
    assert backoff.delay(3, rand=0.999999) == pytest.approx(2.0, abs=1e-5)
    assert backoff.delay(9, rand=0.0) == 8.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": 0}, "Backoff.initial must be > 0"),
        ({"factor": 0.5}, "Backoff.factor must be >= 1"),
        ({"initial": 2, "cap": 1}, "Backoff.cap must be >= initial"),
        ({"jitter": 1.5}, "Backoff.jitter must be within"),
    ],
)
def test_bad_backoff_names_the_field(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        watching.Backoff(**kwargs)


def test_backoff_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="attempt must be >= 1"):
        watching.Backoff().delay(0, rand=0.0)


def test_watch_timeout_is_the_minimum_to_twice_it() -> None:
    assert watching.watch_timeout(300.0, rand=0.0) == 300
    assert watching.watch_timeout(300.0, rand=0.5) == 450
    assert watching.watch_timeout(300.0, rand=0.999) == 599
    assert watching.watch_timeout(0.2, rand=0.0) == 1  # the server needs a whole second
