"""A deterministic PyTorch training run on generated data: the SDK's plain-PyTorch example.

``python -m reference_workload.torch_trainer [--epochs E] [--size N] [--batch B]
[--step-seconds S]`` (or ``TRAINER_EPOCHS``, ``TRAINER_SIZE``, ``TRAINER_BATCH``,
``TRAINER_STEP_SECONDS``); ``KONTINUE_TORCH_BACKEND=dcp`` saves through
torch.distributed.checkpoint. A small MLP with dropout,
AdamW and a StepLR schedule, on data generated from a fixed seed; each step also draws from
Python's ``random`` and NumPy's global generator, so every generator the SDK restores matters.
``--step-seconds`` stands in for a long GPU step.

With ``WORLD_SIZE`` > 1 it is a DDP job over gloo (see :func:`_distributed`): each rank
trains on its share of every epoch and the gradients are averaged.

Output: ``STEP <n> epoch=<e> loss=<float.hex()>`` per step and ``DONE steps=<n>
params=<sha256 of every parameter's bytes>`` at the end, so two runs compare bit for bit.

The three lines marked ``# kontinue`` are all it takes to keep the workload contract
(docs/workload-contract.md quotes them; tests/integration/sdk/test_torch_cluster.py checks the
quote); the sampler is :class:`kontinue_sdk.pytorch.ResumableSampler` instead of
``shuffle=True``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import kontinue_sdk.pytorch as kontinue  # kontinue


def parameters_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _options(argv: Sequence[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="reference_workload.torch_trainer")
    parser.add_argument("--epochs", type=int, default=int(env("TRAINER_EPOCHS", "3")))
    parser.add_argument("--size", type=int, default=int(env("TRAINER_SIZE", "256")))
    parser.add_argument("--batch", type=int, default=int(env("TRAINER_BATCH", "16")))
    parser.add_argument(
        "--step-seconds", type=float, default=float(env("TRAINER_STEP_SECONDS", "0"))
    )
    return parser.parse_args(list(argv))


def _distributed() -> tuple[int, int]:
    """DDP over gloo when ``WORLD_SIZE`` > 1 (torchrun's variables; an Indexed Job's pod takes
    its rank from ``JOB_COMPLETION_INDEX``); rendezvous at ``MASTER_ADDR:MASTER_PORT``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    rank = int(os.environ.get("RANK", os.environ.get("JOB_COMPLETION_INDEX", "0")))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return rank, world


def main(argv: Sequence[str] | None = None) -> int:
    args = _options(sys.argv[1:] if argv is None else argv)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    data = torch.Generator().manual_seed(1234)
    inputs = torch.randn(args.size, 16, generator=data)
    targets = inputs @ torch.randn(16, 1, generator=data) + 0.1 * torch.randn(
        args.size, 1, generator=data
    )
    dataset = TensorDataset(inputs, targets)
    rank, world = _distributed()
    sampler = kontinue.ResumableSampler(len(dataset), seed=0, rank=rank, replicas=world)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)
    model: nn.Module = nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1)
    )
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
    ck = kontinue.resume(model=model, optimizer=opt, scheduler=sched, sampler=sampler)  # kontinue

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch, target in loader:
            noise = torch.from_numpy(np.random.normal(0.0, 0.01, batch.shape).astype(np.float32))
            scale = 1.0 + random.uniform(-0.01, 0.01)
            loss = nn.functional.mse_loss(model(batch + noise) * scale, target)
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            sched.step()
            print(
                f"STEP {sched.last_epoch} epoch={epoch} loss={float(loss.item()).hex()}", flush=True
            )
            time.sleep(args.step_seconds)
            ck.step()  # kontinue
    print(f"DONE steps={sched.last_epoch} params={parameters_digest(model)}", flush=True)
    if world > 1:
        # Every rank done before any leaves: rank 0 hosts the rendezvous store, and a process
        # that exits with the gloo group still up can abort in its destructors (exit -6 seen).
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's teardown: after a DDP run torch's C++ destructors (gloo's
    # and the TCPStore's threads) can still std::terminate ("terminate called without an active
    # exception", exit -6) even after destroy_process_group, and the job controller would count
    # a finished rank as a failed pod. Nothing of ours needs teardown: the output is flushed and
    # the SDK registers no exit hooks.
    os._exit(code)
