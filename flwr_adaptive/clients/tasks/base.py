"""The task interface shared by every learning task: data, model, train on given indices, evaluate.

Contract
--------
A :class:`Task` owns one data source (hub or offline, chosen once per instance, see
:mod:`flwr_adaptive.clients.tasks.sources`) and turns it into a fixed ``(train, holdout)`` pair of
:class:`TaskDataset`. ``load`` gives a client its partition of ``train`` plus the shared holdout.
``train(model, dataset, indices)`` runs one optimizer step per consecutive chunk of
``batch_size`` indices, in the given order, duplicates allowed: it processes exactly
``len(indices)`` samples and reports that count. Choosing *which* indices (the quota, a seeded
order, cycling) is the caller's job; setting torch's thread count is the caller's job too.

Cost
----
``data()`` is memoised per instance; the first call reads the per-machine cache (or prepares it
once). ``train`` costs one forward/backward per batch and allocates one optimizer per call (local
optimizer state does not survive a round, as in FedAvg clients).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from . import _cache, partition, sources

__all__ = ["Task", "TaskDataset", "as_indices"]


def _log(level: int, msg: str) -> None:
    # Flower's logger: shown by default next to Flower's own lines, captured by pytest's caplog.
    from flwr.common.logger import log

    log(level, msg)


class TaskDataset(torch.utils.data.Dataset):
    """Samples of one task held as tensors, plus what partitioning and checks need.

    Attributes
    ----------
    labels : np.ndarray
        Per-sample label that partitioners split by (class; for regression a grouping).
    ids : np.ndarray
        Per-sample id in the prepared source, unique across train and holdout: overlap checks.
    source : str
        Which data this came from (the task's log line says the same).
    """

    labels: np.ndarray
    ids: np.ndarray
    source: str

    def __len__(self) -> int:
        return len(self.ids)

    @abstractmethod
    def subset(self: D, indices: np.ndarray) -> D:
        """A dataset of the samples at ``indices`` (sharing storage where possible)."""


#: A task's own dataset class (``Task[D]``: its collate and evaluation read that class's fields).
D = TypeVar("D", bound=TaskDataset)


def as_indices(indices: Sequence[int] | np.ndarray | torch.Tensor, n: int) -> np.ndarray:
    """Validate sample positions into a dataset of length ``n`` as a 1-D int64 array."""
    if isinstance(indices, torch.Tensor):
        indices = indices.cpu().numpy()
    arr = np.asarray(indices)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"indices must be a 1-D sequence of ints, got shape {arr.shape} dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n:
        raise ValueError(
            f"index {lo if lo < 0 else hi} is out of range for a dataset of {n} samples; "
            "choose indices in [0, len(dataset))"
        )
    return arr.astype(np.int64, copy=False)


class Task(ABC, Generic[D]):
    """One learning task: where its data comes from, its model, and how to train and evaluate.

    Parameters
    ----------
    source : {"auto", "hub", "offline"}
        Where the data comes from (see :mod:`flwr_adaptive.clients.tasks.sources`). Default ``"auto"``.
    hub_check : callable, optional
        Connectivity check for ``source="auto"``; default :func:`sources.hub_reachable`.
    """

    #: registry name
    name: str = ""
    #: what the Dirichlet partitioner splits by
    partition_by: str = "label"
    #: hub dataset name (None: no hub source)
    hub_dataset: str | None = None
    #: defaults for train()
    default_batch_size: int = 32
    default_lr: float = 0.05
    #: the headline metric returned by evaluate() and whether higher is better
    metric: str = "accuracy"
    higher_is_better: bool = True

    def __init__(self, source: str = "auto", *, hub_check: Callable[[], bool] | None = None):
        if source not in sources.SOURCES:
            raise ValueError(f"source={source!r} is not known; use one of {', '.join(sources.SOURCES)}")
        if source == "hub" and self.hub_dataset is None:
            raise ValueError(f"task {self.name!r} has no hub dataset; use source='offline'")
        self.source = source
        self._hub_check = hub_check or sources.hub_reachable
        self._data: tuple[D, D] | None = None

    # ----------------------------------------------------------------------------- data
    def data(self) -> tuple[D, D]:
        """The full ``(train, holdout)`` pair (memoised); logs one line naming the source."""
        if self._data is None:
            self._data = self._resolve()
        return self._data

    def load(
        self,
        partition_id: int,
        num_partitions: int,
        partitioner: str = "iid",
        alpha: float = 0.5,
        seed: int = 42,
        min_partition_size: int | None = None,
    ) -> tuple[D, D]:
        """This client's part of the training data and the shared holdout.

        Parameters
        ----------
        partition_id : int
            In ``[0, num_partitions)``; in Flower, ``context.node_config["partition-id"]``.
        num_partitions : int
            Number of clients sharing the training data.
        partitioner : {"iid", "dirichlet"}
            Equal random shards, or Dirichlet(``alpha``) over :attr:`partition_by`.
        alpha : float
            Dirichlet concentration; smaller is more skewed.
        seed : int
            Must be the same on every client of a run.
        min_partition_size : int, optional
            See :func:`partition.partition_all`.

        Returns
        -------
        train, holdout : TaskDataset, TaskDataset
        """
        train, holdout = self.data()
        partition.validate_partition_args(partition_id, num_partitions, partitioner, alpha, len(train))
        parts = partition.partition_all(train.labels, num_partitions, partitioner, alpha, seed, min_partition_size)
        return train.subset(parts[partition_id]), holdout

    def _hub_cache_name(self) -> str:
        return f"{self.name}-hub-v1"

    def _offline_cache_name(self) -> str:
        return f"{self.name}-offline-v1"

    def _resolve(self) -> tuple[D, D]:
        start = time.perf_counter()
        hub_name = self._hub_cache_name()
        hub_cached = bool(self.hub_dataset) and _cache.cache_path(hub_name).exists()
        if self.hub_dataset is None and self.source == "auto":
            choice, reason = "offline", "no hub dataset for this task"
        else:
            choice, reason = sources.choose_source(self.source, hub_cached, self._hub_check)
        level = INFO
        arrays = hit = None
        if choice == "hub":
            try:
                arrays, hit = _cache.cached_arrays(hub_name, self._hub_arrays)
            except Exception as err:  # noqa: BLE001 - any hub failure means "use offline data"
                if self.source == "hub":
                    raise RuntimeError(
                        f"{self.name}: loading {self.hub_dataset!r} from the hub failed ({err}); "
                        "use source='offline' or 'auto'"
                    ) from err
                choice, level = "offline", WARNING
                reason = f"hub failed: {type(err).__name__}: {str(err)[:120]}"
        name = hub_name if choice == "hub" else self._offline_cache_name()
        if arrays is None:
            arrays, hit = _cache.cached_arrays(name, self._offline_arrays)
        train, holdout = self._datasets(arrays)
        _log(
            level,
            f"[tasks] {self.name}: {choice} data {train.source} ({reason}); "
            f"{len(train):,} train / {len(holdout):,} holdout samples; "
            f"{'cache hit' if hit else 'prepared and cached'} {_cache.cache_path(name)} "
            f"in {time.perf_counter() - start:.2f} s wall",
        )
        return train, holdout

    def _hub_arrays(self) -> Mapping[str, np.ndarray]:
        """Download (via Flower Datasets) and convert the hub data into cacheable arrays."""
        raise NotImplementedError

    @abstractmethod
    def _offline_arrays(self) -> Mapping[str, np.ndarray]:
        """Read the offline data into cacheable arrays (must not touch the network)."""

    @abstractmethod
    def _datasets(self, arrays: Mapping[str, np.ndarray]) -> tuple[D, D]:
        """Build the fixed ``(train, holdout)`` pair from cached arrays."""

    # ---------------------------------------------------------------------------- model
    @abstractmethod
    def _build_model(self) -> nn.Module:
        """A freshly initialised model (uses torch's global RNG)."""

    def make_model(self, seed: int | None = None) -> nn.Module:
        """A new model; with ``seed`` its initial weights are reproducible (global RNG untouched)."""
        if seed is None:
            return self._build_model()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._build_model()

    def make_optimizer(self, model: nn.Module, lr: float) -> torch.optim.Optimizer:
        """The local optimizer, new every ``train`` call. Default: SGD with momentum 0.9."""
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    @abstractmethod
    def collate(self, dataset: D, indices: np.ndarray) -> tuple[torch.Tensor, ...]:
        """The batch of the samples at ``indices`` (validated positions) as model-ready tensors."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: tuple, reduction: str = "mean") -> torch.Tensor:
        """Training loss of ``batch``; ``reduction="sum"`` for DDP's per-step loss scaling."""

    # ------------------------------------------------------------------------ train/eval
    def train(
        self,
        model: nn.Module,
        dataset: D,
        indices: Sequence[int] | np.ndarray,
        batch_size: int | None = None,
        lr: float | None = None,
    ) -> dict[str, float | int]:
        """Train ``model`` in place on exactly the samples at ``indices``, in that order.

        Parameters
        ----------
        model : nn.Module
            From :meth:`make_model` (or with the same architecture).
        dataset : TaskDataset
            Usually the ``train`` part returned by :meth:`load`.
        indices : sequence of int
            Positions into ``dataset``; repeats allowed (cycling through small local data).
        batch_size : int, optional
            Default :attr:`default_batch_size`; the last batch may be smaller.
        lr : float, optional
            Default :attr:`default_lr`.

        Returns
        -------
        dict
            ``loss`` (mean training loss over the processed samples; 0.0 when none),
            ``samples`` (exactly ``len(indices)``), ``steps`` (optimizer steps).
        """
        idx = as_indices(indices, len(dataset))
        bs = self.default_batch_size if batch_size is None else batch_size
        if not isinstance(bs, (int, np.integer)) or bs < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive int")
        lr = self.default_lr if lr is None else lr
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr={lr!r} must be a finite number > 0")
        model.train()
        opt = self.make_optimizer(model, float(lr))
        total = 0.0
        samples = steps = 0
        for start in range(0, len(idx), bs):
            chunk = idx[start : start + bs]
            loss = self.loss(model, self.collate(dataset, chunk))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(chunk)
            samples += len(chunk)
            steps += 1
        return {"loss": total / samples if samples else 0.0, "samples": samples, "steps": steps}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dataset: D, batch_size: int = 1024) -> dict[str, float | int]:
        """Metrics of ``model`` on all of ``dataset``: ``loss``, ``samples`` and the task's own.

        Classification adds ``accuracy``; regression adds ``mse`` (in the target's units) and
        ``persistence_mse`` (the forecast "same as the last hour").
        """
        model.eval()
        sums: dict[str, float] = {}
        n = len(dataset)
        for start in range(0, n, batch_size):
            batch = self.collate(dataset, np.arange(start, min(n, start + batch_size)))
            for key, value in self._eval_batch(model, batch, dataset).items():
                sums[key] = sums.get(key, 0.0) + value
        out: dict[str, float | int] = {k: v / n for k, v in sums.items()} if n else {}
        out.setdefault("loss", 0.0)
        out["samples"] = n
        return self._finish_eval(out, dataset)

    def _eval_batch(self, model: nn.Module, batch: tuple, dataset: D) -> dict[str, float]:
        """Per-batch sums; default: classification (``loss`` and ``accuracy`` sums)."""
        *inputs, y = batch
        logits = model(*inputs)
        loss = nn.functional.cross_entropy(logits, y, reduction="sum")
        correct = (logits.argmax(dim=1) == y).sum()
        return {"loss": float(loss), "accuracy": float(correct)}

    def _finish_eval(self, out: dict[str, Any], dataset: D) -> dict[str, Any]:
        out.setdefault(self.metric, 0.0)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source={self.source!r})"
