"""The reference trainer as a real subprocess receiving real signals, writing real checkpoints."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.kubelet import launch, runtime, worker
from kontinue import checkpoint_format, keys
from reference_workload import trainer
from tests import processes

ROOT = Path(__file__).resolve().parents[2]


class Trainer(processes.LineProcess):
    """One ``python -m reference_workload.trainer`` process; stdout is read line by line."""

    def __init__(
        self, tmp: Path, *args: str, restore_from: Path | None = None, member: str | None = None
    ) -> None:
        self.checkpoint_dir = tmp / "ckpt"
        self.termination_log = tmp / "termination-log"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(ROOT),
            keys.ENV_CHECKPOINT_DIR: str(self.checkpoint_dir),
            keys.ENV_TERMINATION_LOG: str(self.termination_log),
        }
        if restore_from is not None:
            env[keys.ENV_RESTORE_FROM] = str(restore_from)
        if member is not None:
            env[keys.ENV_MEMBER] = member
        super().__init__(
            [sys.executable, "-m", "reference_workload.trainer", *args], env=env, cwd=tmp
        )


def _fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[1:])


@pytest.fixture
def procs() -> Iterator[list[Trainer]]:
    yield from processes.closing(list[Trainer]())


def test_sigterm_saves_reports_and_exits_143_then_restore_continues(
    tmp_path: Path, procs: list[Trainer]
) -> None:
    first = Trainer(
        tmp_path / "a", "--rate", "200", "--state-bytes", "65536", "--save-seconds", "0.3"
    )
    procs.append(first)
    first.read_until("PROGRESS step=20 ")
    first.proc.send_signal(signal.SIGTERM)
    code, _, err = first.finish()
    assert code == 143, err
    saved_line = next(line for line in first.lines if line.startswith("SAVED "))
    saved_step = int(_fields(saved_line)["step"])
    assert saved_step >= 20

    message = json.loads(first.termination_log.read_text())
    assert message["kontinue"] == "saved"
    assert message["step"] == saved_step
    manifest = checkpoint_format.verify(first.checkpoint_dir)
    assert trainer.saved_step(manifest) == saved_step
    assert message["bytes"] == manifest.total_bytes > 65536
    assert float(message["seconds"]) >= 0.3

    second = Trainer(
        tmp_path / "b",
        "--rate",
        "500",
        "--steps",
        str(saved_step + 30),
        "--state-bytes",
        "65536",
        restore_from=first.checkpoint_dir,
    )
    procs.append(second)
    restored = second.read_until("RESTORED ")
    assert _fields(restored)["step"] == str(saved_step)
    progress = second.read_until("PROGRESS ")
    assert _fields(progress)["step"] == str(saved_step + 1)
    assert _fields(progress)["restored_from"] == str(saved_step)
    code, _, err = second.finish()
    assert code == 0, err
    assert second.lines[-1] == f"DONE step={saved_step + 30}"
    assert not second.termination_log.exists()


def test_restored_state_equals_an_uninterrupted_run(tmp_path: Path, procs: list[Trainer]) -> None:
    """Save at some step, restore, finish: the state must equal a run that never stopped."""
    first = Trainer(tmp_path / "a", "--rate", "300", "--state-bytes", "97", "--save-seconds", "0")
    procs.append(first)
    first.read_until("PROGRESS step=10 ")
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish()[0] == 143
    saved = trainer.saved_step(checkpoint_format.verify(first.checkpoint_dir))
    state = bytearray((first.checkpoint_dir / trainer.STATE_FILE).read_bytes())
    fresh = bytearray(97)
    for step in range(saved):
        trainer._advance(fresh, step)
    assert state == fresh


def test_save_slower_than_grace_is_killed_and_leaves_a_rejected_torn_directory(
    tmp_path: Path, procs: list[Trainer]
) -> None:
    slow = Trainer(
        tmp_path / "a", "--rate", "200", "--state-bytes", "200000", "--save-seconds", "30"
    )
    procs.append(slow)
    slow.read_until("PROGRESS step=5 ")
    slow.proc.send_signal(signal.SIGTERM)
    slow.read_until("SAVING ")
    # The kubelet's grace period ends: SIGKILL mid-save (after some chunks reached the disk).
    deadline = time.monotonic() + 10
    state = slow.checkpoint_dir / trainer.STATE_FILE
    while time.monotonic() < deadline and not (state.exists() and state.stat().st_size > 0):
        time.sleep(0.02)
    slow.proc.send_signal(signal.SIGKILL)
    slow.proc.wait(timeout=10)
    assert slow.proc.returncode == -signal.SIGKILL  # reported by a runtime as exit code 137
    assert state.stat().st_size > 0
    assert not (slow.checkpoint_dir / checkpoint_format.MANIFEST_NAME).exists()
    assert not slow.termination_log.exists()
    with pytest.raises(checkpoint_format.Problem, match="the save never finished"):
        checkpoint_format.verify(slow.checkpoint_dir)

    refused = Trainer(tmp_path / "b", "--rate", "200", restore_from=slow.checkpoint_dir)
    procs.append(refused)
    code, out, err = refused.finish()
    assert code == trainer.EXIT_RESTORE_REFUSED
    assert "PROGRESS" not in out
    assert "the save never finished" in err
    assert json.loads(refused.termination_log.read_text())["kontinue"] == "restore-refused"


def test_finishing_all_steps_exits_zero_without_a_checkpoint(
    tmp_path: Path, procs: list[Trainer]
) -> None:
    done = Trainer(tmp_path / "a", "--rate", "1000", "--steps", "25", "--progress-every", "5")
    procs.append(done)
    code, out, err = done.finish()
    assert code == 0, err
    assert [line.split()[1] for line in out.splitlines() if line.startswith("PROGRESS")] == [
        f"step={n}" for n in (5, 10, 15, 20, 25)
    ]
    assert not done.checkpoint_dir.exists()


def test_bad_option_names_the_option(tmp_path: Path, procs: list[Trainer]) -> None:
    bad = Trainer(tmp_path / "a", "--rate", "fast")
    procs.append(bad)
    code, _, err = bad.finish()
    assert code == trainer.EXIT_BAD_OPTIONS
    assert "--rate" in err
    assert "fast" in err


# --- the trainer as a pod on the emulated kubelet: node A saves, node B restores -------------


def _trainer_pod(name: str, *, env: list[dict[str, Any]], grace: int) -> dict[str, Any]:
    """A pod like the webhook will plumb: checkpoint dir per pod UID on a shared hostPath."""
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "nodeName": "node-a",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {
                    "name": "trainer",
                    "image": "localhost/kontinue-base:dev",
                    "command": ["python3", "-m", "reference_workload.trainer"],
                    "args": ["--rate", "100", "--state-bytes", "300000"],
                    "env": [
                        {
                            "name": "POD_UID",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
                        },
                        {"name": "KONTINUE_CHECKPOINT_DIR", "value": "/ckpt/$(POD_UID)"},
                        *env,
                    ],
                    "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                }
            ],
            "volumes": [{"name": "ckpt", "hostPath": {"path": "/var/kontinue/checkpoints"}}],
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


async def _discard(_status: dict[str, Any]) -> None:
    return None


async def _run_and_delete(
    pod: dict[str, Any], node: launch.Node, rt: runtime.Runtime
) -> tuple[worker.PodWorker, worker.Outcome]:
    timing = worker.Timing(relist_seconds=0.2, sandbox_seconds=0.05, terminal_delay_seconds=0.2)
    pod_worker = worker.PodWorker(pod, runtime_=rt, node=node, sink=_discard, timing=timing)
    task = asyncio.create_task(pod_worker.run())
    for _ in range(1000):
        trainer_container = pod_worker.containers.get("trainer")
        log = trainer_container.spec.log_path if trainer_container else None
        if log is not None and log.exists() and log.read_text().count("PROGRESS ") >= 20:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the trainer never made 20 steps")
    deleted = copy.deepcopy(pod_worker.pod)
    deleted["metadata"].update(
        generation=2,
        deletionTimestamp="2026-12-02T12:00:00Z",
        deletionGracePeriodSeconds=pod["spec"]["terminationGracePeriodSeconds"],
    )
    pod_worker.update(deleted)
    return pod_worker, await asyncio.wait_for(task, timeout=60)


async def test_trainer_pod_saves_on_node_a_and_restores_on_node_b(tmp_path: Path) -> None:
    rt = runtime.Runtime()
    node_a = launch.Node("node-a", "10.0.0.1", tmp_path / "a", tmp_path / "shared")
    node_b = launch.Node("node-b", "10.0.0.2", tmp_path / "b", tmp_path / "shared")
    try:
        first, outcome = await _run_and_delete(
            _trainer_pod("first", env=[{"name": "TRAINER_SAVE_SECONDS", "value": "0.3"}], grace=5),
            node_a,
            rt,
        )
        assert outcome == worker.Outcome(phase="Failed", final_delete=True)
        terminated = first.written[-1]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (143, "Error")
        message = json.loads(terminated["message"])
        assert message["kontinue"] == "saved"
        saved = tmp_path / "shared" / "hostpath" / "var/kontinue/checkpoints" / "uid-first"
        assert message["path"] == str(saved)
        assert trainer.saved_step(checkpoint_format.verify(saved)) == message["step"] >= 20

        restore = [{"name": "KONTINUE_RESTORE_FROM", "value": "/ckpt/uid-first"}]
        second, _ = await _run_and_delete(_trainer_pod("second", env=restore, grace=5), node_b, rt)
        log = second.containers["trainer"].spec.log_path.read_text().splitlines()
        assert f"RESTORED step={message['step']} from={saved} member=- as=-" in log
        first_progress = next(line for line in log if line.startswith("PROGRESS"))
        assert first_progress.split()[1] == f"step={message['step'] + 1}"
    finally:
        await rt.close()


async def test_trainer_pod_saving_slower_than_grace_is_killed_137_and_torn(tmp_path: Path) -> None:
    rt = runtime.Runtime()
    node = launch.Node("node-a", "10.0.0.1", tmp_path / "a", tmp_path / "shared")
    try:
        slow = [{"name": "TRAINER_SAVE_SECONDS", "value": "30"}]
        pod_worker, outcome = await _run_and_delete(
            _trainer_pod("slow", env=slow, grace=2), node, rt
        )
        assert outcome == worker.Outcome(phase="Failed", final_delete=True)
        terminated = pod_worker.written[-1]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
        assert "message" not in terminated  # no "saved" line: a failed member
        (kill,) = pod_worker.containers["trainer"].kills
        assert kill.sigkill_at is not None
        torn = tmp_path / "shared" / "hostpath" / "var/kontinue/checkpoints" / "uid-slow"
        assert (torn / trainer.STATE_FILE).stat().st_size > 0
        with pytest.raises(checkpoint_format.Problem, match="the save never finished"):
            checkpoint_format.verify(torn)
    finally:
        await rt.close()


def test_trainer_checkpoints_pass_the_restore_check_and_altered_ones_do_not(
    tmp_path: Path,
) -> None:
    """The trainer writes through kontinue.checkpoint_format, the check the restore
    init-container runs: its directory verifies, same-size altered content and a missing
    manifest do not, and the trainer itself refuses both."""
    good = tmp_path / "good"
    written = trainer.save_checkpoint(good, step=7, state=b"\x01" * 1000)
    assert checkpoint_format.verify(good) == written
    assert trainer.saved_step(written) == 7
    assert {e.path for e in written.files} == {trainer.STATE_FILE, trainer.TRAINER_FILE}
    assert trainer._restore(good, state_bytes=1000) == (7, bytearray(b"\x01" * 1000), None)
    (good / trainer.STATE_FILE).write_bytes(b"\x02" * 1000)  # same size, other content
    with pytest.raises(checkpoint_format.Problem, match="sha256 mismatch"):
        trainer._restore(good, state_bytes=1000)

    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / trainer.STATE_FILE).write_bytes(b"\x01" * 10)  # data written, manifest never came
    with pytest.raises(checkpoint_format.Problem) as caught:
        trainer._restore(torn, state_bytes=10)
    assert caught.value.cause is checkpoint_format.Cause.TORN


def test_the_trainer_records_its_member_and_refuses_another_members_directory(
    tmp_path: Path, procs: list[Trainer]
) -> None:
    """The workload contract's member identity (docs/api.md): the manifest names the saver,
    a pod of another identity refuses the directory (exit 3), its own identity restores it."""
    first = Trainer(tmp_path / "a", "--rate", "200", "--save-seconds", "0", member="index=0")
    procs.append(first)
    first.read_until("PROGRESS step=5 ")
    first.proc.send_signal(signal.SIGTERM)
    code, _, err = first.finish()
    assert code == 143, err
    manifest = json.loads((first.checkpoint_dir / checkpoint_format.MANIFEST_NAME).read_text())
    assert manifest[keys.MANIFEST_MEMBER_KEY] == "index=0"

    other = Trainer(
        tmp_path / "b", "--steps", "1", restore_from=first.checkpoint_dir, member="index=1"
    )
    procs.append(other)
    code, _, err = other.finish()
    assert code == trainer.EXIT_RESTORE_REFUSED, err
    assert "saved by member 'index=0', not by this pod's 'index=1'" in err

    same = Trainer(
        tmp_path / "c", "--steps", "1000000", restore_from=first.checkpoint_dir, member="index=0"
    )
    procs.append(same)
    restored = same.read_until("RESTORED ")
    # the line names who saved the directory and who restores it (the demo counts mismatches)
    assert restored.endswith(" member=index=0 as=index=0"), restored
