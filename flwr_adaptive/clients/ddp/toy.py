"""Small synthetic DDP tasks for tests, the DDP benchmark and ``torchrun`` smoke runs.

Each factory returns a :class:`~flwr_adaptive.clients.ddp.worker.WorkerSpec` built from module-level callables
(``functools.partial``), so spawned ranks can unpickle it. The data are generated from a seed
inside each rank: every rank gets the identical dataset without shipping it.

The MLP has no BatchNorm (per-rank batch statistics would differ from the union batch's), so a DDP
step equals a single-process step on the union batch up to floating-point summation order.
"""

from __future__ import annotations

from functools import partial

import torch

from flwr_adaptive.clients.ddp.worker import WorkerSpec

__all__ = ["cnn_task", "mlp_task", "tiny_task", "make_cnn", "make_mlp", "make_classification"]


def make_mlp(
    dim: int, hidden: int, classes: int, depth: int = 2, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """``depth`` hidden layers of ``hidden`` units with tanh, then a linear classifier."""
    layers: list[torch.nn.Module] = []
    width = dim
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.Tanh()]
        width = hidden
    layers.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*layers).to(dtype)


def make_cnn(channels: int = 16, classes: int = 10, side: int = 28) -> torch.nn.Module:
    """Two 3×3 conv + max-pool blocks and a linear classifier (≈ 20k parameters at 28×28)."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, channels, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(channels, 2 * channels, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(2 * channels * (side // 4) ** 2, classes),
    )


def _images(n: int, side: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = make_classification(n, side * side, classes, seed)
    return x.view(n, 1, side, side), y


def make_classification(
    n: int, dim: int, classes: int, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian inputs labelled by a fixed random linear teacher (learnable, deterministic)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64)
    teacher = torch.randn(dim, classes, generator=g, dtype=torch.float64)
    y = (x @ teacher).argmax(dim=1)
    return x.to(dtype), y


def cnn_task(
    n: int = 4096, side: int = 28, channels: int = 16, classes: int = 10, seed: int = 0, lr: float = 0.02
) -> WorkerSpec:
    """A small CNN on 28×28 single-channel images: the DDP benchmark's default task.

    Convolutions give much compute per parameter (≈ 0.2 ms per sample forward + backward on one
    CPU thread, ≈ 0.25 ms fixed per step), so compute time is nearly proportional to the batch
    while the gradient all-reduce stays small (≈ 20k numbers), as with image models on
    accelerators.
    """
    return WorkerSpec(
        model_fn=partial(make_cnn, channels, classes, side),
        data=partial(_images, n, side, classes, seed),
        loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
        optimizer_fn=partial(torch.optim.SGD, lr=lr),
        seed=seed,
    )


def mlp_task(
    dim: int = 256, hidden: int = 512, classes: int = 10, depth: int = 2, n: int = 8192, seed: int = 0, lr: float = 0.05
) -> WorkerSpec:
    """A wider MLP (≈ 400k parameters): communication-heavy next to ``cnn_task``."""
    return WorkerSpec(
        model_fn=partial(make_mlp, dim, hidden, classes, depth),
        data=partial(make_classification, n, dim, classes, seed),
        loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
        optimizer_fn=partial(torch.optim.SGD, lr=lr),
        seed=seed,
    )


def tiny_task(
    n: int = 64,
    dim: int = 6,
    hidden: int = 8,
    classes: int = 3,
    seed: int = 0,
    lr: float = 0.1,
    dtype: torch.dtype = torch.float64,
) -> WorkerSpec:
    """A tiny float64 MLP for exact equivalence tests (float64 keeps the tolerance tight)."""
    return WorkerSpec(
        model_fn=partial(make_mlp, dim, hidden, classes, 1, dtype),
        data=partial(make_classification, n, dim, classes, seed, dtype),
        loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
        optimizer_fn=partial(torch.optim.SGD, lr=lr, momentum=0.9),
        seed=seed,
    )
