"""kontinue_sdk.pytorch without a cluster: the torch.distributed.checkpoint backend across three
SIGTERMs of real processes, and every piece of state the adapter restores."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kontinue import checkpoint_format, keys
from tests.integration.sdk import harness

torch = pytest.importorskip("torch")  # CI installs it (Makefile); a bare venv skips
np = pytest.importorskip("numpy")

from kontinue_sdk import pytorch  # noqa: E402  (needs torch)

MODULE = "reference_workload.torch_trainer"
DOC = harness.ROOT / "docs" / "workload-contract.md"
ENV = {"TRAINER_EPOCHS": "2", pytorch.ENV_BACKEND: "dcp"}


@pytest.mark.slow  # four torch.distributed.checkpoint processes: ~45 s on a loaded 2-core machine
@pytest.mark.timeout(300)
def test_dcp_backend_three_sigterms_equal_the_uninterrupted_run(tmp_path: Path) -> None:
    (reference,) = harness.reference_run(MODULE, ENV)
    assert reference.exit_code == 0, reference.log[-2000:]
    runs: list[harness.Incarnation] = []
    previous: Path | None = None
    for index, stop_at in enumerate([5, 14, 23, None]):
        ckpt = tmp_path / f"ckpt-{index}"
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(harness.ROOT),
            **ENV,
            "TRAINER_STEP_SECONDS": "0.02",
            keys.ENV_CHECKPOINT_DIR: str(ckpt),
            keys.ENV_TERMINATION_LOG: str(tmp_path / f"log-{index}"),
        }
        if previous is not None:
            env[keys.ENV_RESTORE_FROM] = str(previous)
        lines = []
        with subprocess.Popen(
            [sys.executable, "-m", MODULE], env=env, stdout=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if stop_at is not None and line.startswith(f"STEP {stop_at} "):
                    proc.send_signal(signal.SIGTERM)
        runs.append(harness.Incarnation("".join(lines), proc.returncode))
        previous = ckpt
        if stop_at is not None:
            manifest = checkpoint_format.verify(ckpt)
            assert manifest.extra["backend"] == "dcp"
            assert any(entry.path.startswith("dcp/") for entry in manifest.files)
    assert [run.exit_code for run in runs] == [143, 143, 143, 0]
    assert harness.stitched(runs) == reference.steps
    assert runs[-1].done == reference.done


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = state["value"]


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.random()), torch.rand(3).tolist()


def test_state_round_trip_scaler_extra_rng_and_sampler_position(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
    sampler = pytorch.ResumableSampler(10, seed=3)
    counter = Counter()
    counter.value = 7
    sampler.set_epoch(2)
    taken = [i for _, i in zip(range(4), iter(sampler), strict=False)]
    state = pytorch.TorchState(
        model=model, optimizer=optimizer, scaler=scaler, sampler=sampler, extra={"c": counter}
    )
    state.save(tmp_path)
    manifest = checkpoint_format.write_manifest(tmp_path, extra={"step": 4})
    expected = _draws()

    fresh_model = torch.nn.Linear(3, 1)
    fresh_scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    fresh_sampler = pytorch.ResumableSampler(10, seed=3)
    fresh_counter = Counter()
    restored = pytorch.TorchState(
        model=fresh_model,
        optimizer=torch.optim.SGD(fresh_model.parameters(), lr=0.1),
        scaler=fresh_scaler,
        sampler=fresh_sampler,
        extra={"c": fresh_counter},
    )
    random.seed(99)
    restored.load(tmp_path, manifest)
    assert fresh_counter.value == 7
    assert fresh_scaler.get_scale() == 1024.0
    assert torch.equal(fresh_model.weight, model.weight)
    for epoch in (0, 1):  # epochs before the saved one are done: empty
        fresh_sampler.set_epoch(epoch)
        assert list(fresh_sampler) == []
    fresh_sampler.set_epoch(2)
    rest = iter(fresh_sampler)
    first = next(rest)  # the resumed pass begins: the random generators are restored now
    assert _draws() == expected
    assert taken + [first, *rest] == [
        int(i) for i in torch.randperm(10, generator=torch.Generator().manual_seed(5))
    ]
    assert fresh_sampler.state_dict() == {"epoch": 2, "position": 10}
    fresh_sampler.set_epoch(3)
    assert sorted(fresh_sampler) == list(range(10))


def test_a_checkpoint_of_the_other_backend_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    pytorch.TorchState(model=model).save(tmp_path)
    manifest = checkpoint_format.write_manifest(
        tmp_path, extra={"step": 1, "backend": "torch.save"}
    )
    with pytest.raises(ValueError, match="saved with backend 'torch.save', not 'dcp'"):
        pytorch.TorchState(model=model, backend="dcp").load(tmp_path, manifest)
    assert os.path.exists(tmp_path / pytorch.STATE_FILE)


def test_the_three_lines_in_the_docs_are_the_ones_the_tested_script_uses() -> None:
    doc = DOC.read_text()
    recipe = doc.split("### PyTorch", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    added = [line.strip() for line in recipe.splitlines() if line.strip().endswith("# kontinue")]
    script = (harness.ROOT / "reference_workload" / "torch_trainer.py").read_text()
    used = [line.strip() for line in script.splitlines() if line.strip().endswith("# kontinue")]
    assert added == used
    assert len(used) == 3
