"""kontinue_sdk.Session: real signals, real files, real processes (a bare interpreter too)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from kontinue import checkpoint_format, keys
from kontinue_sdk import session as sdk_session
from tests import processes

ROOT = Path(__file__).resolve().parents[3]

# A user's loop on the SDK core only: a counter "model", saved as one file. Run with
# ``python -I -S`` and only the checkout on sys.path: no site-packages at all, so an import of
# pydantic, aiohttp or anything else outside the standard library fails the run.
SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import kontinue_sdk
state = {"total": 0}
def save(d):
    (d / "state.json").write_text(json.dumps(state))
def load(d, manifest):
    state.update(json.loads((d / "state.json").read_text()))
session = kontinue_sdk.Session(save, load)
start = session.resume()
print("START", start, flush=True)
for step in range(start, int(sys.argv[2])):
    state["total"] += step
    print("STEP", step + 1, flush=True)
    session.step()
    session.wait(0.01)
std = sys.stdlib_module_names | {"__main__"}
third = sorted(m for m in sys.modules if m.split(".")[0] not in std)
print("MODULES", " ".join(third), flush=True)
print("DONE", state["total"], flush=True)
"""


class Run(processes.LineProcess):
    def __init__(self, tmp: Path, steps: int, **env: str) -> None:
        self.termination_log = tmp / "termination-log"
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        if keys.ENV_CHECKPOINT_DIR in env:
            full[keys.ENV_TERMINATION_LOG] = str(self.termination_log)
        super().__init__(
            [sys.executable, "-I", "-S", "-c", SCRIPT, str(ROOT), str(steps)], env=full, cwd=tmp
        )


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    yield from processes.closing(list[Run]())


def test_bare_interpreter_sigterm_saves_exits_143_and_the_restore_continues(
    tmp_path: Path, runs: list[Run]
) -> None:
    ckpt = tmp_path / "ckpt"
    first = Run(tmp_path / "a", 10**6, KONTINUE_CHECKPOINT_DIR=str(ckpt), KONTINUE_MEMBER="index=0")
    runs.append(first)
    first.read_until("STEP 30")
    first.proc.send_signal(signal.SIGTERM)
    code, _, err = first.finish()
    assert code == 143, err
    message = json.loads(first.termination_log.read_text())
    assert message["kontinue"] == "saved"
    manifest = checkpoint_format.verify(ckpt)
    saved = message["step"]
    assert manifest.extra == {"format": "kontinue-sdk/v1", "step": saved, "member": "index=0"}
    assert message["bytes"] == manifest.total_bytes
    assert message["path"] == str(ckpt)
    last = max(int(line.split()[1]) for line in first.lines if line.startswith("STEP"))
    assert last == saved  # saved at the step boundary after the last completed step
    assert json.loads((ckpt / "state.json").read_text()) == {"total": sum(range(saved))}

    second = Run(
        tmp_path / "b",
        saved + 20,
        KONTINUE_CHECKPOINT_DIR=str(tmp_path / "ckpt2"),
        KONTINUE_RESTORE_FROM=str(ckpt),
        KONTINUE_MEMBER="index=0",
    )
    runs.append(second)
    code, out, err = second.finish()
    assert code == 0, err
    assert f"START {saved}" in out
    assert f"DONE {sum(range(saved + 20))}" in out
    modules = next(line for line in second.lines if line.startswith("MODULES")).split()[1:]
    assert {m.split(".")[0] for m in modules} == {"kontinue", "kontinue_sdk"}
    assert "kontinue_sdk.session" in modules
    assert not set(modules) - {
        "kontinue",
        "kontinue.keys",
        "kontinue.checkpoint_format",
        "kontinue_sdk",
        "kontinue_sdk.session",
        "kontinue_sdk.environment",
    }
    assert f"restored step {saved}" in err


def test_outside_kubernetes_it_is_a_noop_and_sigterm_kills_as_usual(
    tmp_path: Path, runs: list[Run]
) -> None:
    done = Run(tmp_path / "done", 5)
    runs.append(done)
    code, out, err = done.finish()
    assert (code, err) == (0, "")
    assert "DONE 10" in out
    assert list(tmp_path.joinpath("done").iterdir()) == []

    killed = Run(tmp_path / "killed", 10**6)
    runs.append(killed)
    killed.read_until("STEP 3")
    killed.proc.send_signal(signal.SIGTERM)
    assert killed.finish()[0] == -signal.SIGTERM
    assert list(tmp_path.joinpath("killed").iterdir()) == []


def test_a_torn_directory_or_another_members_is_refused_with_exit_3(
    tmp_path: Path, runs: list[Run]
) -> None:
    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / "state.json").write_text('{"total": 1}')  # data, but the manifest never came
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "state.json").write_text('{"total": 1}')
    checkpoint_format.write_manifest(foreign, extra={"step": 2, "member": "index=1"})
    for name, source, reason in [
        ("torn", torn, "the save never finished"),
        ("foreign", foreign, "saved by member 'index=1', not by this pod's 'index=0'"),
    ]:
        run = Run(
            tmp_path / name / "run",
            10,
            KONTINUE_CHECKPOINT_DIR=str(tmp_path / name / "ckpt"),
            KONTINUE_RESTORE_FROM=str(source),
            KONTINUE_MEMBER="index=0",
        )
        runs.append(run)
        code, out, err = run.finish()
        assert code == sdk_session.EXIT_RESTORE_REFUSED, err
        assert "START" not in out
        assert reason in err
        message = json.loads(run.termination_log.read_text())
        assert message["kontinue"] == "restore-refused"
        assert reason in message["reason"]


def test_under_shared_a_pod_restores_the_member_the_webhook_names_and_saves_as_itself(
    tmp_path: Path, runs: list[Run]
) -> None:
    """Consistency ``shared`` (docs/api.md): the pod of ``index=1`` restores rank 0's member,
    named by ``KONTINUE_RESTORE_MEMBER`` (webhook/plumbing.py); its own save records
    ``index=1``. A directory of any other member is still refused."""
    rank0 = tmp_path / "rank0"
    rank0.mkdir()
    (rank0 / "state.json").write_text('{"total": 10}')
    checkpoint_format.write_manifest(rank0, extra={"step": 5}, member="index=0")
    env = {
        keys.ENV_RESTORE_FROM: str(rank0),
        keys.ENV_MEMBER: "index=1",
        keys.ENV_RESTORE_MEMBER: "index=0",
    }
    shared = Run(
        tmp_path / "shared", 1000000, KONTINUE_CHECKPOINT_DIR=str(tmp_path / "ckpt"), **env
    )
    runs.append(shared)
    assert shared.read_until("START") == "START 5"
    shared.read_until("STEP 7")
    shared.proc.send_signal(signal.SIGTERM)
    code, _, err = shared.finish()
    assert code == sdk_session.EXIT_PREEMPTED, err
    saved = checkpoint_format.verify(tmp_path / "ckpt", member="index=1")
    assert saved.member == "index=1"
    assert saved.extra["step"] >= 7

    other = Run(
        tmp_path / "other",
        10,
        KONTINUE_CHECKPOINT_DIR=str(tmp_path / "other-ckpt"),
        **{**env, keys.ENV_RESTORE_MEMBER: "index=2"},
    )
    runs.append(other)
    code, out, err = other.finish()
    assert code == sdk_session.EXIT_RESTORE_REFUSED, err
    assert "saved by member 'index=0', not by this pod's 'index=2'" in err


def test_an_absent_restore_link_is_a_cold_start_a_dangling_one_is_refused(
    tmp_path: Path, runs: list[Run]
) -> None:
    cold = Run(
        tmp_path / "cold",
        4,
        KONTINUE_CHECKPOINT_DIR=str(tmp_path / "cold-ckpt"),
        KONTINUE_RESTORE_FROM=str(tmp_path / "no-link"),
    )
    runs.append(cold)
    code, out, err = cold.finish()
    assert code == 0, err
    assert "START 0" in out

    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    dangling = Run(
        tmp_path / "d",
        4,
        KONTINUE_CHECKPOINT_DIR=str(tmp_path / "d-ckpt"),
        KONTINUE_RESTORE_FROM=str(tmp_path / "dangling"),
    )
    runs.append(dangling)
    code, _, err = dangling.finish()
    assert code == sdk_session.EXIT_RESTORE_REFUSED
    assert "does not exist" in err


def test_sigusr1_saves_a_snapshot_and_continues_keeping_only_the_newest(
    tmp_path: Path, runs: list[Run]
) -> None:
    ckpt = tmp_path / "ckpt"
    run = Run(tmp_path / "a", 10**6, KONTINUE_CHECKPOINT_DIR=str(ckpt))
    runs.append(run)
    steps: list[int] = []
    for wanted in ("STEP 10", "STEP 40"):
        run.read_until(wanted)
        run.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done = [
                d
                for d in (ckpt / "snapshots").glob("step-*")
                if (d / checkpoint_format.MANIFEST_NAME).exists()
            ]
            if done and int(done[0].name.removeprefix("step-")) not in steps:
                break
            time.sleep(0.02)
        (snapshot,) = done
        step = int(snapshot.name.removeprefix("step-"))
        assert checkpoint_format.verify(snapshot).extra["step"] == step
        assert json.loads((snapshot / "state.json").read_text()) == {"total": sum(range(step))}
        steps.append(step)
    assert steps[0] >= 10
    assert steps[1] > steps[0]
    run.read_until(f"STEP {steps[1] + 20}")  # it went on
    assert run.proc.poll() is None
    assert not (ckpt / checkpoint_format.MANIFEST_NAME).exists()
    assert not run.termination_log.exists()

    run.proc.send_signal(signal.SIGTERM)  # the final save lists its own files, not snapshots/
    code, _, err = run.finish()
    assert code == 143, err
    final = checkpoint_format.verify(ckpt)
    assert [entry.path for entry in final.files] == ["state.json"]
    assert final.extra["step"] == json.loads(run.termination_log.read_text())["step"] > steps[1]


class Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _exit(code: int) -> NoReturn:
    raise Exited(code)


def test_a_failing_save_reports_failed_never_saved_and_exits_143(tmp_path: Path) -> None:
    def save(directory: Path) -> None:
        (directory / "half").write_bytes(b"x")
        raise MemoryError("out of memory while copying the state")

    log = tmp_path / "log"
    session = sdk_session.Session(
        save,
        environ={
            keys.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"),
            keys.ENV_TERMINATION_LOG: str(log),
        },
        exit=_exit,
    )
    session.request(sdk_session.Request.STOP)
    with pytest.raises(Exited) as caught:
        session.step()
    assert caught.value.code == 143
    message: dict[str, Any] = json.loads(log.read_text())
    assert message["kontinue"] == "failed"
    assert message["step"] == 1
    assert "out of memory" in message["error"]
    with pytest.raises(checkpoint_format.Problem):
        checkpoint_format.verify(tmp_path / "ckpt")


def test_periodic_saves_come_at_step_boundaries_once_the_period_passed(tmp_path: Path) -> None:
    now = [0.0]
    saved_at: list[int] = []

    def save(directory: Path) -> dict[str, int]:
        (directory / "s").write_text("x")
        saved_at.append(session.steps_done)
        return {"savedAt": session.steps_done}

    session = sdk_session.Session(
        save,
        save_every=10.0,
        environ={keys.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt")},
        clock=lambda: now[0],
    )
    session.resume()
    for _ in range(25):
        now[0] += 1.0
        session.step()
    assert saved_at == [10, 20]
    (snapshot,) = (tmp_path / "ckpt" / "snapshots").iterdir()
    assert checkpoint_format.verify(snapshot).extra["savedAt"] == 20
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
