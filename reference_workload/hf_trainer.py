"""A deterministic Hugging Face ``Trainer`` run: the SDK's Trainer example.

``python -m reference_workload.hf_trainer`` (``TRAINER_EPOCHS``, ``TRAINER_SIZE``,
``TRAINER_BATCH``, ``TRAINER_STEP_SECONDS``). A one-layer GPT-2 built from a config (nothing is
downloaded; set ``HF_HUB_OFFLINE=1`` to be sure) learns a seeded random token sequence with the
Trainer's defaults (AdamW, linear schedule, dropout on, a shuffled sampler), on the CPU.

Output: ``STEP <n> loss=<float.hex()>`` per optimizer step (printed by :class:`Reporting` as the
loss is computed) and ``DONE steps=<n> params=<sha256 of every parameter's bytes>`` at the end,
so two runs compare bit for bit. ``--step-seconds`` stands in for a long GPU step.

The three lines marked ``# kontinue`` are all it takes to keep the workload contract
(docs/workload-contract.md quotes them; tests/integration/sdk/test_hf_cluster.py checks the quote).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import kontinue_sdk.hf as kontinue  # kontinue

SEQUENCE = 16
VOCAB = 64


class TokenDataset(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``size`` seeded random sequences; each is its own language-modelling target."""

    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(1234)
        self.tokens = torch.randint(0, VOCAB, (size, SEQUENCE), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


class Reporting(Trainer):
    """The Trainer, printing every step's loss exactly (its own log averages and runs later)."""

    def __init__(self, *args: Any, step_seconds: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_seconds = step_seconds

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        value = loss[0] if isinstance(loss, tuple) else loss
        print(f"STEP {self.state.global_step + 1} loss={float(value.item()).hex()}", flush=True)
        time.sleep(self.step_seconds)
        return loss


def parameters_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> int:
    env = os.environ.get
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQUENCE,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=env("TRAINER_OUTPUT_DIR") or tempfile.mkdtemp(prefix="hf-trainer-"),
        num_train_epochs=int(env("TRAINER_EPOCHS", "2")),
        per_device_train_batch_size=int(env("TRAINER_BATCH", "8")),
        learning_rate=1e-3,
        seed=0,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Reporting(
        model=model,
        args=args,
        train_dataset=TokenDataset(int(env("TRAINER_SIZE", "64"))),
        step_seconds=float(env("TRAINER_STEP_SECONDS", "0")),
    )
    ck = kontinue.attach(trainer)  # kontinue
    trainer.train(resume_from_checkpoint=ck.resume_from)  # kontinue
    print(f"DONE steps={trainer.state.global_step} params={parameters_digest(model)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
