"""Event construction and the name-based aggregation of repeated occurrences."""

from __future__ import annotations

from queue_bridge import recording

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "scavenger-0", "namespace": "research", "uid": "u-1"},
}


def test_the_same_occurrence_maps_to_one_event_name() -> None:
    involved = recording.Involved.of(JOB)
    first = recording.event_name(involved, "CheckpointFailed", "member p0: killed at grace end")
    again = recording.event_name(involved, "CheckpointFailed", "member p0: killed at grace end")
    other = recording.event_name(involved, "CheckpointSucceeded", "2 members saved")
    assert first == again
    assert first != other
    assert first.startswith("scavenger-0.")


def test_event_points_at_the_object_and_names_the_component() -> None:
    event = recording.build_event(
        recording.Involved.of(JOB),
        reason="CheckpointStarted",
        message="x" * 5000,
        type_="Normal",
        instance="bridge-0",
    )
    assert event["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "scavenger-0",
        "namespace": "research",
        "uid": "u-1",
    }
    assert event["metadata"]["namespace"] == "research"
    assert event["source"] == {"component": "kontinue-bridge"}
    assert len(event["message"]) == 1024
    assert event["firstTimestamp"].endswith("Z")
    assert event["count"] == 1
