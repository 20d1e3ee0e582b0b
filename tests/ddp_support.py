"""Shared helper of the DDP tests (tests/test_ddp.py, tests/test_gpu.py): the single-process reference."""

from __future__ import annotations

import torch

from flwr_adaptive.clients.ddp.worker import WorkerSpec
from flwr_adaptive.schedule import IndexStream


def reference_training(spec: WorkerSpec, global_batches: list[int], start: int = 0, seed: int = 0,
                       state: dict | None = None) -> dict[str, torch.Tensor]:
    """One process, one optimizer step per global batch, mean loss over the batch."""
    torch.manual_seed(spec.seed)
    model = spec.model_fn()
    if state is not None:
        model.load_state_dict(state)
    optimizer = spec.optimizer_fn(model.parameters())
    x, y = spec.data()
    stream = IndexStream(len(x), seed=seed, start=start)
    for size in global_batches:
        idx = torch.from_numpy(stream.take(size))
        optimizer.zero_grad()
        (spec.loss_fn(model(x[idx]), y[idx]) / size).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
