"""The Hugging Face ``Trainer`` adapter: the workload contract on the Trainer's own checkpoints.

Three lines in a user's script (docs/workload-contract.md, "Hugging Face Trainer")::

    import kontinue_sdk.hf as kontinue  # kontinue
    ck = kontinue.attach(trainer)  # kontinue
    trainer.train(resume_from_checkpoint=ck.resume_from)  # kontinue

The Trainer already knows how to save and resume everything a step depends on; this adapter maps
onto that machinery instead of saving beside it, the way transformers' own just-in-time
checkpointing does (transformers 5.x, ``TrainingArguments(enable_jit_checkpoint=True)``:
huggingface/transformers, src/transformers/trainer_jit_checkpoint.py, ``CheckpointManager``
calls ``trainer._save_checkpoint(trainer.model, trial=None)`` from a ``TrainerCallback``'s
``on_step_end`` after SIGTERM):

- **save**: at the first ``on_step_end`` after SIGTERM (a step boundary: the optimizer and LR
  scheduler have stepped, ``state.global_step`` counts the step), :class:`KontinueCallback` calls
  ``trainer._save_checkpoint`` with the Trainer's output directory pointed at
  ``KONTINUE_CHECKPOINT_DIR`` for the duration of the call. The Trainer writes
  ``checkpoint-<step>/`` there (src/transformers/trainer.py, ``Trainer._save_checkpoint``: the
  model, optimizer, scheduler, scaler, ``rng_state.pth`` — Python, NumPy, torch CPU and CUDA —
  and ``trainer_state.json``); then the session (kontinue_sdk/session.py) writes the project's
  manifest last through kontinue.checkpoint_format, the termination message, and exits 143.
- **resume**: :func:`attach` verifies ``KONTINUE_RESTORE_FROM`` (manifest, sizes, sha256, the
  member; a torn or foreign directory: exit 3) and :attr:`Kontinue.resume_from` names the
  ``checkpoint-<step>`` inside it, which ``trainer.train(resume_from_checkpoint=...)`` loads
  with its own code: weights, optimizer, scheduler, RNG states, and the data position
  (src/transformers/trainer.py, ``Trainer._init_training_state`` and the epoch loop's
  ``skip_first_batches`` / ``_load_rng_state``). ``None`` (a fresh start) otherwise.
- ``SIGUSR1`` (and ``save_every`` seconds) save a snapshot and continue, as for every session.

Outside Kubernetes (no ``KONTINUE_*`` variables) nothing is installed, nothing saved, and
``resume_from`` is ``None``: the same script runs on a laptop.

Use it *instead of* ``enable_jit_checkpoint``: that callback writes no manifest and no
termination message (Kontinue would count its save as a failed member) and, when :func:`attach`
runs after it, its SIGTERM handler is replaced by the session's and never fires.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from kontinue import checkpoint_format
from kontinue_sdk import pytorch as sdk_pytorch
from kontinue_sdk import session as sdk_session

FORMAT = "kontinue-sdk-hf/v1"
CHECKPOINT_KEY = "hf_checkpoint"
"""Manifest key naming the Trainer's ``checkpoint-<step>`` directory inside the saved one."""
PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


@contextlib.contextmanager
def _output_dir(trainer: Trainer, directory: Path) -> Iterator[None]:
    """The Trainer's output directory is ``directory`` for the duration (``_get_output_dir``)."""
    saved = trainer.args.output_dir
    trainer.args.output_dir = str(directory)
    try:
        yield
    finally:
        trainer.args.output_dir = saved


class KontinueCallback(TrainerCallback):  # type: ignore[misc]
    """Marks every optimizer step as the session's safe point; saves through the Trainer."""

    def __init__(self, trainer: Trainer, *, save_every: float | None = None) -> None:
        self.trainer = trainer
        self.session = sdk_session.Session(
            self._save, self._load, save_every=save_every, agree=sdk_pytorch.agree, format=FORMAT
        )
        self.resume_from: str | None = None
        """The Trainer checkpoint to pass to ``trainer.train(resume_from_checkpoint=...)``."""

    def start(self) -> None:
        """Install the signal handlers and find the checkpoint to resume from (exit 3 if torn)."""
        self.session.resume()

    def _load(self, directory: Path, manifest: checkpoint_format.Manifest) -> None:
        name = manifest.extra.get(CHECKPOINT_KEY)
        if not isinstance(name, str) or not name.startswith(f"{PREFIX}-") or "/" in name:
            raise ValueError(f"{directory}: the manifest names no Trainer checkpoint ({FORMAT})")
        checkpoint = directory / name
        if not checkpoint.is_dir():
            raise ValueError(f"{checkpoint}: missing")
        self.resume_from = str(checkpoint)

    def _save(self, directory: Path) -> dict[str, Any]:
        step = self.trainer.state.global_step
        model = self.trainer.model
        if model is None:
            raise RuntimeError("the Trainer has no model to save")
        with _output_dir(self.trainer, directory):
            self.trainer._save_checkpoint(model, trial=None)
        name = f"{PREFIX}-{step}"
        if not (directory / name).is_dir():
            raise RuntimeError(f"the Trainer wrote no {name} in {directory}")
        return {CHECKPOINT_KEY: name}

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> TrainerControl:
        self.session.step(state.global_step)  # saves and exits 143 after SIGTERM
        return control


class Kontinue:
    """What :func:`attach` returns: the callback's session and the checkpoint to resume from."""

    def __init__(self, callback: KontinueCallback) -> None:
        self.callback = callback

    @property
    def session(self) -> sdk_session.Session:
        return self.callback.session

    @property
    def resume_from(self) -> str | None:
        """``KONTINUE_RESTORE_FROM``'s Trainer checkpoint, ``None`` for a fresh start."""
        return self.callback.resume_from


def attach(trainer: Trainer, *, save_every: float | None = None) -> Kontinue:
    """Add the Kontinue callback to ``trainer`` and start its session (restore if restoring).

    Call it after building the Trainer, before ``trainer.train``, in the main thread (it installs
    the SIGTERM and SIGUSR1 handlers). ``save_every``: seconds between snapshots, for a hard kill.
    """
    if trainer.args.enable_jit_checkpoint:
        print(
            "kontinue: enable_jit_checkpoint is on: Kontinue's SIGTERM handler replaces its own",
            file=sys.stderr,
            flush=True,
        )
    callback = KontinueCallback(trainer, save_every=save_every)
    trainer.add_callback(callback)
    callback.start()
    return Kontinue(callback)
