"""Small synthetic DDP tasks for tests, the DDP benchmark and ``torchrun`` smoke runs.

Each factory returns a :class:`~clients.ddp_worker.WorkerSpec` built from module-level callables
(``functools.partial``), so spawned ranks can unpickle it. The data are generated from a seed
inside each rank: every rank gets the identical dataset without shipping it.

The MLP has no BatchNorm (per-rank batch statistics would differ from the union batch's), so a DDP
step equals a single-process step on the union batch up to floating-point summation order.
"""

from __future__ import annotations

from functools import partial

import torch

from clients.ddp_worker import WorkerSpec

__all__ = ["mlp_task", "tiny_task", "make_mlp", "make_classification"]


def make_mlp(dim: int, hidden: int, classes: int, depth: int = 2, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """``depth`` hidden layers of ``hidden`` units with tanh, then a linear classifier."""
    layers: list[torch.nn.Module] = []
    width = dim
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.Tanh()]
        width = hidden
    layers.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*layers).to(dtype)


def make_classification(n: int, dim: int, classes: int, seed: int = 0,
                        dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian inputs labelled by a fixed random linear teacher (learnable, deterministic)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64)
    teacher = torch.randn(dim, classes, generator=g, dtype=torch.float64)
    y = (x @ teacher).argmax(dim=1)
    return x.to(dtype), y


def mlp_task(dim: int = 256, hidden: int = 512, classes: int = 10, depth: int = 2, n: int = 8192,
             seed: int = 0, lr: float = 0.05) -> WorkerSpec:
    """A compute-bound MLP (≈ 0.1 ms per sample on one CPU thread) for the DDP benchmark.

    Per-sample work dominates the fixed per-step overhead at batch sizes of tens, so a rank's
    compute time is close to proportional to its batch, as on real accelerators at realistic
    batch sizes.
    """
    return WorkerSpec(
        model_fn=partial(make_mlp, dim, hidden, classes, depth),
        data=partial(make_classification, n, dim, classes, seed),
        loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
        optimizer_fn=partial(torch.optim.SGD, lr=lr),
        seed=seed,
    )


def tiny_task(n: int = 64, dim: int = 6, hidden: int = 8, classes: int = 3, seed: int = 0,
              lr: float = 0.1, dtype: torch.dtype = torch.float64) -> WorkerSpec:
    """A tiny float64 MLP for exact equivalence tests (float64 keeps the tolerance tight)."""
    return WorkerSpec(
        model_fn=partial(make_mlp, dim, hidden, classes, 1, dtype),
        data=partial(make_classification, n, dim, classes, seed, dtype),
        loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
        optimizer_fn=partial(torch.optim.SGD, lr=lr, momentum=0.9),
        seed=seed,
    )
