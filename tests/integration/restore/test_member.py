"""A pod restores only its own member's state: the manifest's ``member`` against
``KONTINUE_MEMBER`` (the contract between the webhook, the workload SDK and the restore program).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys, restore
from tests.integration.restore import support


def saved_by(directory: Path, member: str | None) -> None:
    directory.mkdir(parents=True)
    (directory / "state.bin").write_bytes(b"x" * 64)
    checkpoint_format.write_manifest(directory, extra={"step": 5}, member=member)


@pytest.mark.parametrize(
    "identity",
    ["index=1", "replicatedJob=workers,jobIndex=0,index=1", "task=worker,index=1"],
)
def test_own_member_restores(area: Path, identity: str) -> None:
    saved_by(area / "ckpt", identity)

    result = support.run(
        area, {keys.ENV_RESTORE_FROM: str(area / "ckpt"), keys.ENV_MEMBER: identity}
    )

    assert result.code == 0
    support.assert_one_line(result, stream="stdout", contains=["verified 1 files"])


def test_another_members_directory_is_refused(area: Path) -> None:
    saved_by(area / "ckpt", "index=0")

    result = support.run(
        area, {keys.ENV_RESTORE_FROM: str(area / "ckpt"), keys.ENV_MEMBER: "index=1"}
    )

    assert result.code == restore.ExitCode.OTHER_MEMBER
    support.assert_one_line(
        result,
        stream="stderr",
        contains=["other-member:", "saved by member 'index=0'", "not by this pod's 'index=1'"],
    )


def test_another_members_awaited_directory_falls_back(area: Path) -> None:
    """Link mode: the awaited directory is another member's; this member's fallback is used."""
    saved_by(area / "new", "index=0")
    saved_by(area / "old", "index=1")

    result = support.run(
        area,
        {
            keys.ENV_RESTORE_FROM: str(area / "run" / "restore-from"),
            keys.ENV_RESTORE_SOURCE: str(area / "old"),
            keys.ENV_WAIT_FOR: str(area / "new"),
            keys.ENV_MEMBER: "index=1",
        },
    )

    assert result.code == 0
    assert (area / "run" / "restore-from").resolve() == (area / "old").resolve()
    support.assert_one_line(result, stream="stdout", contains=["instead of", "other-member:"])


@pytest.mark.parametrize(
    ("recorded", "given"),
    [(None, "index=1"), ("index=0", None), (None, None)],
    ids=["old-manifest", "old-webhook", "neither"],
)
def test_unknown_side_trusts_the_webhooks_choice(
    area: Path, recorded: str | None, given: str | None
) -> None:
    """A manifest that predates ``member`` (or a pod given no ``KONTINUE_MEMBER``) is accepted:
    the directory is the one the webhook chose for this pod's member from the Checkpoint."""
    saved_by(area / "ckpt", recorded)
    env = {keys.ENV_RESTORE_FROM: str(area / "ckpt")}
    if given is not None:
        env[keys.ENV_MEMBER] = given

    result = support.run(area, env)

    assert result.code == 0


def test_shared_state_restores_rank_0s_member_into_every_pod(area: Path) -> None:
    """Consistency ``shared``: pod index=1 restores rank 0's directory; the webhook names the
    restored identity in ``KONTINUE_RESTORE_MEMBER``, and only that is compared."""
    saved_by(area / "ckpt", "index=0")
    env = {keys.ENV_RESTORE_FROM: str(area / "ckpt"), keys.ENV_MEMBER: "index=1"}

    assert support.run(area, env).code == restore.ExitCode.OTHER_MEMBER
    result = support.run(area, {**env, keys.ENV_RESTORE_MEMBER: "index=0"})

    assert result.code == 0
    assert support.run(area, {**env, keys.ENV_RESTORE_MEMBER: "index=2"}).code == 7
