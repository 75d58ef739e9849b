"""kontinue_sdk.hf without a cluster: a no-op outside Kubernetes, a refusal of a directory that
holds no Trainer checkpoint, and the Trainer's own checkpoint found inside a verified one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys

pytest.importorskip("transformers")  # CI installs it (Makefile: the hf extra); a bare venv skips

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from kontinue_sdk import hf  # noqa: E402
from reference_workload import hf_trainer  # noqa: E402


def _trainer(tmp_path: Path) -> Trainer:
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=8, n_layer=1, n_head=1))
    return Trainer(model=model, args=args, train_dataset=hf_trainer.TokenDataset(4))


@pytest.fixture(autouse=True)
def _no_kontinue(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (keys.ENV_CHECKPOINT_DIR, keys.ENV_RESTORE_FROM, keys.ENV_MEMBER):
        monkeypatch.delenv(name, raising=False)


def test_outside_kubernetes_attach_changes_nothing(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    trainer = _trainer(tmp_path)
    ck = hf.attach(trainer)
    assert ck.resume_from is None
    assert signal.getsignal(signal.SIGTERM) is before
    assert ck.callback in trainer.callback_handler.callbacks


def test_a_checkpoint_without_a_trainer_checkpoint_is_refused_with_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.pt").write_bytes(b"not a Trainer checkpoint")
    checkpoint_format.write_manifest(saved, extra={"step": 3})
    log = tmp_path / "termination-log"
    monkeypatch.setenv(keys.ENV_RESTORE_FROM, str(saved))
    monkeypatch.setenv(keys.ENV_TERMINATION_LOG, str(log))
    with pytest.raises(SystemExit) as ended:
        hf.attach(_trainer(tmp_path))
    assert ended.value.code == 3
    message = json.loads(log.read_text())
    assert message["kontinue"] == "restore-refused"
    assert "names no Trainer checkpoint" in message["reason"]


def test_the_trainer_checkpoint_inside_a_verified_directory_is_resumed_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = tmp_path / "saved"
    (saved / "checkpoint-3").mkdir(parents=True)
    (saved / "checkpoint-3" / "trainer_state.json").write_text("{}")
    checkpoint_format.write_manifest(saved, extra={"step": 3, hf.CHECKPOINT_KEY: "checkpoint-3"})
    monkeypatch.setenv(keys.ENV_RESTORE_FROM, str(saved))
    ck = hf.attach(_trainer(tmp_path))
    assert ck.resume_from == str(saved / "checkpoint-3")
    assert ck.session.steps_done == 3
