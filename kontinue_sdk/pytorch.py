"""The plain-PyTorch adapter: everything a training step depends on, saved and restored exactly.

Three lines in a user's script (docs/workload-contract.md, "PyTorch")::

    import kontinue_sdk.pytorch as kontinue
    session = kontinue.resume(model=model, optimizer=optimizer, scheduler=scheduler,
                              sampler=sampler)
    ...
        session.step()          # after optimizer.step(), once per step

plus :class:`ResumableSampler` in place of ``shuffle=True`` when the loop reads a DataLoader.

What is saved (``state.pt`` through ``torch.save``, or, with ``backend="dcp"``, the model and
optimizer through ``torch.distributed.checkpoint`` in ``dcp/`` and the rest in ``state.pt``):
the model, optimizer, LR scheduler and AMP ``GradScaler`` state dicts, any ``extra`` objects with
``state_dict``/``load_state_dict``, the sampler's epoch and position, and the random number
generators: Python's ``random``, NumPy's global generator (when NumPy is installed), torch's CPU
generator and every CUDA device's (when CUDA is available). Files are written by the session
(kontinue_sdk/session.py) through kontinue.checkpoint_format, manifest last.

Why a restored run equals an uninterrupted one bit for bit: the save happens at a step boundary
(never inside the signal handler), every input of the next step is restored, and the random
generators are restored at the moment the resumed data pass begins — a DataLoader draws a seed
from torch's generator when its iterator is created, which an uninterrupted run did at the start
of the epoch, not in the middle (torch/utils/data/dataloader.py, ``_BaseDataLoaderIter``). With a
:class:`ResumableSampler` the generators are restored when the sampler's iterator starts; without
one, in :func:`resume`.

Multi-process (``torch.distributed`` initialised, DDP): at every :meth:`Session.step` the ranks
agree on the strongest pending request with one ``all_reduce(MAX)`` of a single integer, so all
ranks save the same step even when SIGTERM reached them a step apart; each rank saves its own
member into its own ``KONTINUE_CHECKPOINT_DIR``.

Limits: the sampler's position counts indices handed out, which equals samples consumed only with
``num_workers=0`` (worker prefetching hands out indices ahead); ``backend="dcp"`` saves each
rank's full state dict with ``no_dist=True`` (replicated DDP state), not a sharded FSDP set.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from kontinue import checkpoint_format
from kontinue_sdk import session as sdk_session

STATE_FILE = "state.pt"
DCP_DIR = "dcp"
FORMAT = "kontinue-sdk-torch/v1"
ENV_BACKEND = "KONTINUE_TORCH_BACKEND"


class Stateful(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


def rng_state() -> dict[str, Any]:
    """The state of every random generator a step may use (tensors and plain values only)."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "torch": torch.get_rng_state(),
    }
    if "numpy" in sys.modules:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = [kind, torch.from_numpy(np.array(keys)), pos, has_gauss, cached]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class ResumableSampler(torch.utils.data.Sampler[int]):
    """A random (or sequential) sampler whose place in the data survives a restore.

    The order of epoch ``e`` is ``randperm(size)`` of a generator seeded ``seed + e`` (what
    ``DistributedSampler`` does), so it does not depend on the global generator's history. The
    state is the epoch and the number of indices handed out in it. After a restore, epochs before
    the saved one yield nothing (a loop ``for epoch in range(n): sampler.set_epoch(epoch)`` runs
    through them empty) and the saved epoch continues at the saved position. Without
    ``set_epoch`` calls each new pass starts the next epoch. With ``replicas > 1`` (DDP) rank
    ``rank`` takes every ``replicas``-th index of the epoch's order, as ``DistributedSampler``
    does without padding.
    """

    def __init__(
        self, size: int, *, seed: int = 0, shuffle: bool = True, rank: int = 0, replicas: int = 1
    ) -> None:
        if not 0 <= rank < replicas:
            raise ValueError(f"rank {rank} is not in [0, {replicas})")
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.replicas = replicas
        self.epoch = 0
        self.position = 0
        self._resume: tuple[int, int] | None = None
        self._on_resume: list[Any] = []

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def __len__(self) -> int:
        return len(range(self.rank, self.size, self.replicas))

    def _order(self) -> list[int]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = [int(i) for i in torch.randperm(self.size, generator=generator)]
        else:
            order = list(range(self.size))
        return order[self.rank :: self.replicas]

    def __iter__(self) -> Iterator[int]:
        start = 0
        if self._resume is not None:
            saved_epoch, saved_position = self._resume
            if self.epoch < saved_epoch:
                return  # done before the save
            if self.epoch == saved_epoch:
                start = saved_position
            self._resume = None
            for hook in self._on_resume:
                hook()
            self._on_resume.clear()
        elif self.position >= len(self):
            self.epoch += 1
        self.position = start
        for index in self._order()[start:]:
            self.position += 1
            yield index

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._resume = (self.epoch, self.position)

    def when_resumed(self, hook: Any) -> None:
        """Run ``hook()`` when the resumed pass begins (the adapter restores the RNG there)."""
        self._on_resume.append(hook)


def agree(request: sdk_session.Request) -> sdk_session.Request:
    """The strongest request of all ranks (``all_reduce(MAX)``); ``request`` alone otherwise."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return request
    flag = torch.tensor([int(request)], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return sdk_session.Request(int(flag.item()))


class TorchState:
    """Save and load callbacks for :class:`kontinue_sdk.Session` over torch objects."""

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Stateful | None = None,
        scaler: Stateful | None = None,
        sampler: ResumableSampler | None = None,
        extra: Mapping[str, Stateful] | None = None,
        backend: str = "torch.save",
    ) -> None:
        if backend not in ("torch.save", "dcp"):
            raise ValueError(f"backend must be 'torch.save' or 'dcp', not {backend!r}")
        self.model = model
        self.optimizer = optimizer
        self.sampler = sampler
        self.backend = backend
        self.objects: dict[str, Stateful] = dict(extra or {})
        if scheduler is not None:
            self.objects["scheduler"] = scheduler
        if scaler is not None:
            self.objects["scaler"] = scaler
        if sampler is not None:
            self.objects["sampler"] = sampler
        if backend == "torch.save":
            self.objects["model"] = model
            if optimizer is not None:
                self.objects["optimizer"] = optimizer

    def save(self, directory: Path) -> dict[str, Any]:
        state = {name: obj.state_dict() for name, obj in self.objects.items()}
        state["rng"] = rng_state()
        if self.backend == "dcp":
            self._dcp_save(directory / DCP_DIR)
        torch.save(state, directory / STATE_FILE)
        return {"backend": self.backend}

    def load(self, directory: Path, manifest: checkpoint_format.Manifest) -> None:
        backend = manifest.extra.get("backend", "torch.save")
        if backend != self.backend:
            raise ValueError(f"{directory}: saved with backend {backend!r}, not {self.backend!r}")
        state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
        missing = set(self.objects) - set(state)
        if missing:
            raise ValueError(f"{directory}/{STATE_FILE} lacks {sorted(missing)}")
        if self.backend == "dcp":
            self._dcp_load(directory / DCP_DIR)
        for name, obj in self.objects.items():
            obj.load_state_dict(state[name])
        rng = state["rng"]
        if self.sampler is not None:
            self.sampler.when_resumed(lambda: set_rng_state(rng))
        else:
            set_rng_state(rng)

    def _dcp_save(self, path: Path) -> None:
        from torch.distributed.checkpoint import state_dict as dcp_state
        from torch.distributed.checkpoint import state_dict_saver

        model_sd, optim_sd = dcp_state.get_state_dict(self.model, self._optimizers())
        state_dict_saver.save(
            {"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(path), no_dist=True
        )

    def _dcp_load(self, path: Path) -> None:
        from torch.distributed.checkpoint import state_dict as dcp_state
        from torch.distributed.checkpoint import state_dict_loader

        model_sd, optim_sd = dcp_state.get_state_dict(self.model, self._optimizers())
        # loaded in place: the tensors of these two dicts receive the saved values
        state_dict_loader.load(
            {"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(path), no_dist=True
        )
        dcp_state.set_state_dict(
            self.model, self._optimizers(), model_state_dict=model_sd, optim_state_dict=optim_sd
        )

    def _optimizers(self) -> tuple[torch.optim.Optimizer, ...]:
        return () if self.optimizer is None else (self.optimizer,)


def resume(
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Stateful | None = None,
    scaler: Stateful | None = None,
    sampler: ResumableSampler | None = None,
    extra: Mapping[str, Stateful] | None = None,
    backend: str | None = None,
    save_every: float | None = None,
) -> sdk_session.Session:
    """A started :class:`kontinue_sdk.Session` over these objects (restored if restoring).

    ``session.steps_done`` is the number of steps the restored state has taken (0 when fresh).
    ``backend``: ``"torch.save"`` or ``"dcp"``; by default ``KONTINUE_TORCH_BACKEND``, else
    ``"torch.save"`` (so a job switches without a code change).
    """
    if backend is None:
        backend = os.environ.get(ENV_BACKEND, "") or "torch.save"
    state = TorchState(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        sampler=sampler,
        extra=extra,
        backend=backend,
    )
    session = sdk_session.Session(
        state.save, state.load, save_every=save_every, agree=agree, format=FORMAT
    )
    session.resume()
    return session
