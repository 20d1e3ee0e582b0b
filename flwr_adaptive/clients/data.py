"""The one data helper: make a client's training data exactly this round's quota.

Contract
--------
Call :func:`quota_data` where your client builds its training data, inside a train function
wrapped by :mod:`flwr_adaptive.clients.telemetry` (or on data a wrapped ``NumPyClient`` reads in ``fit``):

- With a quota in the round's config the result holds exactly ``quota`` samples, drawn in a
  seeded order over the local data: a permutation seeded by ``(seed, partition id, round)``, so
  every round sees a fresh order and two calls on data of the same length (e.g. ``x`` then ``y``)
  select the same samples. A quota above the local data size cycles through further permutations
  only when the config allows it (``keys.ALLOW_CYCLING``); otherwise it is capped at the data size
  and the cap is reported (``keys.QUOTA_CAPPED``).
- Without a quota (a plain Flower strategy) it selects all local data in its original order.
- The selection's size and the local data size are recorded in the active window, which the
  telemetry wrapper reports (``keys.SAMPLES``, ``keys.DATA_SIZE``). The quota is per pass: a train
  loop that runs E epochs over the result processes E × quota samples.

Accepted data and what comes back:

=========================================  ==================================================
``torch.utils.data.DataLoader``            a DataLoader with the same settings (batch size,
                                           shuffle, workers, collate…) over the selection
map-style dataset (``__len__`` +           a lazy view: resolved against the window active when
``__getitem__``: torch / HF datasets)      it is used, so it may be built in ``client_fn``
``numpy.ndarray`` / ``torch.Tensor``       ``data[indices]`` (inside a window only)
``tuple`` of arrays of equal length        a tuple, each indexed the same way
``list``                                   the list of selected items
=========================================  ==================================================

Cost
----
One permutation of the local data size per round and data size (cached per window); a lazy view
adds one context-variable lookup per item.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["QuotaWindow", "quota_data", "select_indices", "current_window"]


def select_indices(
    size: int,
    quota: int | None,
    *,
    allow_cycling: bool = False,
    seed: int = 0,
    partition: int = 0,
    server_round: int = 0,
) -> tuple[np.ndarray, bool]:
    """The samples to process: ``(indices into the local data, capped)``.

    Parameters
    ----------
    size : int
        Local data size.
    quota : int or None
        Samples asked for; ``None`` selects all data in order.
    allow_cycling : bool
        Whether a quota above ``size`` may cycle through the data again.
    seed, partition, server_round : int
        Seed the order: the same triple gives the same selection.
    """
    if size < 0:
        raise ValueError(f"local data size must be >= 0, got {size}")
    if quota is None:
        return np.arange(size, dtype=np.int64), False
    if quota < 0:
        raise ValueError(f"quota must be >= 0, got {quota}")
    if size == 0:
        return np.empty(0, dtype=np.int64), quota > 0
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(partition) & 0xFFFFFFFF, int(server_round) & 0xFFFFFFFF])
    if quota <= size:
        return rng.permutation(size)[:quota].astype(np.int64), False
    if not allow_cycling:
        return rng.permutation(size).astype(np.int64), True
    passes = -(-quota // size)
    order = np.concatenate([rng.permutation(size) for _ in range(passes)])
    return order[:quota].astype(np.int64), False


@dataclass
class QuotaWindow:
    """What one wrapped training call may read: its quota and how the order is seeded.

    ``quota is None`` means no quota was sent: all local data. ``size``, ``samples`` and
    ``capped`` describe the first selection made in the window (what the client reports).
    """

    quota: int | None
    allow_cycling: bool = False
    seed: int = 0
    partition: int = 0
    server_round: int = 0
    size: int | None = None
    samples: int | None = None
    capped: bool = False
    _cache: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def indices(self, size: int) -> np.ndarray:
        """The selection over local data of ``size`` samples (the same for the whole window)."""
        idx = self._cache.get(size)
        if idx is None:
            idx, capped = select_indices(
                size,
                self.quota,
                allow_cycling=self.allow_cycling,
                seed=self.seed,
                partition=self.partition,
                server_round=self.server_round,
            )
            self._cache[size] = idx
            if self.size is None:
                self.size, self.samples, self.capped = size, len(idx), capped
        return idx


_WINDOW: contextvars.ContextVar[QuotaWindow | None] = contextvars.ContextVar("flwr_adaptive_quota", default=None)


def current_window() -> QuotaWindow | None:
    """The window of the wrapped training call running in this thread, if any."""
    return _WINDOW.get()


def open_window(window: QuotaWindow) -> contextvars.Token:
    """Make ``window`` current (the telemetry wrapper calls this; ``close_window`` undoes it)."""
    return _WINDOW.set(window)


def close_window(token: contextvars.Token) -> None:
    _WINDOW.reset(token)


class _QuotaView:
    """A map-style dataset showing the active window's selection of ``base`` (all of it outside)."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def _indices(self) -> np.ndarray | None:
        window = _WINDOW.get()
        return None if window is None else window.indices(len(self.base))

    def __len__(self) -> int:
        idx = self._indices()
        return len(self.base) if idx is None else len(idx)

    def __getitem__(self, i: int) -> Any:
        idx = self._indices()
        return self.base[i] if idx is None else self.base[int(idx[i])]

    def __getitems__(self, items: list[int]) -> Any:
        idx = self._indices()
        picked = list(items) if idx is None else [int(idx[i]) for i in items]
        getitems = getattr(self.base, "__getitems__", None)
        return getitems(picked) if getitems is not None else [self.base[j] for j in picked]

    def __reduce__(self):
        # DataLoader workers unpickle the view in another process, where no window is active:
        # ship the selection made here.
        return (_FrozenView, (self.base, self._indices()))


class _FrozenView(_QuotaView):
    def __init__(self, base: Any, indices: np.ndarray | None) -> None:
        super().__init__(base)
        self._frozen = indices

    def _indices(self) -> np.ndarray | None:
        return self._frozen


def _loader_over(loader: Any, dataset: Any) -> Any:
    """A DataLoader like ``loader`` (same batching, shuffling, workers) over ``dataset``."""
    from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler

    if isinstance(loader.dataset, IterableDataset):
        raise ValueError(
            "quota_data needs a map-style dataset (len + indexing); this DataLoader "
            "reads an IterableDataset: pass the quota to your own iterator instead"
        )
    if loader.batch_size is None:
        raise ValueError(
            "quota_data cannot re-create a DataLoader built with a custom batch_sampler "
            "(or batch_size=None): call quota_data on its dataset and build the loader "
            "over the result"
        )
    sampler = loader.sampler
    if type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None:
        shuffle = True
    elif type(sampler) is SequentialSampler:
        shuffle = False
    else:
        raise ValueError(
            f"quota_data cannot re-create a DataLoader with a custom sampler "
            f"({type(sampler).__name__}): it draws indices over the whole dataset. "
            "Call quota_data on the dataset and build your loader over the result"
        )
    kwargs = dict(
        batch_size=loader.batch_size,
        shuffle=shuffle,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
    )
    if loader.num_workers > 0:
        kwargs.update(prefetch_factor=loader.prefetch_factor, multiprocessing_context=loader.multiprocessing_context)
    return DataLoader(dataset, **kwargs)


def _is_array(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return True
    torch = __import__("sys").modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def quota_data(data: Any) -> Any:
    """This round's quota of ``data`` (see the module docstring for what each type returns).

    Raises
    ------
    ValueError
        For arrays, tuples and lists outside a wrapped training call (use a dataset or DataLoader
        there: they resolve lazily), for tuples of arrays of different lengths, and for
        DataLoaders whose sampling cannot be re-created over the selection.
    """
    torch_loader: Any = None  # the class, imported only when torch already is
    if "torch" in __import__("sys").modules:
        from torch.utils.data import DataLoader as torch_loader  # noqa: N813
    if torch_loader is not None and isinstance(data, torch_loader):
        return _loader_over(data, _QuotaView(data.dataset))
    if _is_array(data) or isinstance(data, (tuple, list)):
        window = _WINDOW.get()
        if window is None:
            raise ValueError(
                "quota_data(array/tuple/list) must run inside the wrapped train function "
                "(flwr_adaptive.clients.telemetry); outside it pass a dataset or DataLoader, which "
                "resolve the quota when they are read"
            )
        if isinstance(data, tuple):
            sizes = {len(x) for x in data}
            if len(sizes) != 1:
                raise ValueError(
                    f"quota_data(tuple) needs arrays of equal length, got lengths {[len(x) for x in data]}"
                )
            idx = window.indices(sizes.pop())
            return tuple(_take(x, idx) for x in data)
        idx = window.indices(len(data))
        return _take(data, idx)
    if hasattr(data, "__len__") and hasattr(data, "__getitem__"):
        return _QuotaView(data)
    raise ValueError(
        f"quota_data cannot select from {type(data).__name__}: pass a DataLoader, a "
        "map-style dataset, an array, a tuple of arrays or a list"
    )


def _take(x: Any, idx: np.ndarray) -> Any:
    if isinstance(x, list):
        return [x[int(i)] for i in idx]
    if isinstance(x, np.ndarray):
        return x[idx]
    import torch

    if isinstance(x, torch.Tensor):
        return x[torch.from_numpy(idx)]
    return [x[int(i)] for i in idx]
