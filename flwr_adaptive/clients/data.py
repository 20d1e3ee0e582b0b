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
                                           shuffle, workers, collate…) over the selection;
                                           with a reference quota in the config its batch
                                           size scales (:mod:`.quota_loader`)
map-style dataset (``__len__`` +           a lazy view: resolved against the window active when
``__getitem__``: torch / HF datasets)      it is used, so it may be built in ``client_fn``
``numpy.ndarray`` / ``torch.Tensor``       ``data[indices]`` (inside a window only)
``tuple`` of arrays of equal length        a tuple, each indexed the same way
``list``                                   the list of selected items
=========================================  ==================================================

:func:`quota_batch_size` gives the batch size for a loop of the user's own over the selection:
the user's, scaled by quota / reference quota when the round's config holds one
(:mod:`flwr_adaptive.clients.batch_scaling`).

Cost
----
One permutation of the local data size per round and data size (cached per window); a lazy view
adds one context-variable lookup per item.
"""

from __future__ import annotations

import contextvars
import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flwr_adaptive.clients.batch_scaling import MAX_BATCH_SCALE, check_max_scale, scaled_batch_size

__all__ = ["QuotaWindow", "quota_data", "quota_batch_size", "select_indices", "current_window"]


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
    ``capped`` describe the first selection made in the window (what the client reports);
    ``dropped`` is what the first ``quota_data(DataLoader)`` iterated in the window leaves out of each
    pass with ``drop_last=True`` (a partial last batch; ``None``: none iterated), so the reply counts
    the samples trained, not only selected.
    ``reference`` is the round's reference quota (``keys.REFERENCE_QUOTA``; ``None``: not sent or
    malformed): batch sizes scale by quota / reference (:func:`quota_batch_size`). ``read`` says
    whether the selection reached the training: arrays, tuples and lists when selected, a lazy view
    when an item is read in this process or when it is pickled (for DataLoader workers); an item
    read in a forked DataLoader worker (Linux's default: the view is not pickled) sets a byte of
    memory shared with the worker, which :meth:`was_read` adds.
    """

    quota: int | None
    allow_cycling: bool = False
    reference: int | None = None
    seed: int = 0
    partition: int = 0
    server_round: int = 0
    size: int | None = None
    samples: int | None = None
    capped: bool = False
    dropped: int | None = None
    read: bool = False
    _cache: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    # one byte mapped shared: a forked worker's write reaches this process (its copy of ``read`` does not)
    _forked_read: mmap.mmap = field(default_factory=lambda: mmap.mmap(-1, 1), repr=False, compare=False)

    def mark_read(self) -> None:
        """The selection reached the training (here or in a forked worker)."""
        self.read = True
        self._forked_read[0] = 1

    def was_read(self) -> bool:
        """Whether the selection reached the training, in this process or a forked DataLoader worker."""
        return self.read or self._forked_read[0] == 1

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

    def _indices(self, read: bool = False) -> np.ndarray | None:
        window = _WINDOW.get()
        if window is None:
            return None
        if read:
            window.mark_read()
        return window.indices(len(self.base))

    def __len__(self) -> int:
        idx = self._indices()
        return len(self.base) if idx is None else len(idx)

    def __getitem__(self, i: int) -> Any:
        idx = self._indices(read=True)
        return self.base[i] if idx is None else self.base[int(idx[i])]

    def __getitems__(self, items: list[int]) -> Any:
        idx = self._indices(read=True)
        picked = list(items) if idx is None else [int(idx[i]) for i in items]
        getitems = getattr(self.base, "__getitems__", None)
        return getitems(picked) if getitems is not None else [self.base[j] for j in picked]

    def __reduce__(self):
        # DataLoader workers unpickle the view in another process, where no window is active:
        # ship the selection made here.
        return (_FrozenView, (self.base, self._indices(read=True)))


class _FrozenView(_QuotaView):
    def __init__(self, base: Any, indices: np.ndarray | None) -> None:
        super().__init__(base)
        self._frozen = indices

    def _indices(self, read: bool = False) -> np.ndarray | None:
        return self._frozen


def quota_batch_size(batch_size: int, *, max_scale: float | None = MAX_BATCH_SCALE) -> int:
    """The batch size for this round's quota: ``batch_size`` scaled by quota / reference quota.

    With a strategy built with ``scale_batch_size=True`` every node gets the round's reference
    quota (the equal share) with its own; reading the quota in batches of
    ``ceil(batch_size · quota / reference)`` takes the steps the reference takes at
    ``batch_size``, so every node takes the same number of local steps
    (:mod:`flwr_adaptive.clients.batch_scaling`). With ``scale_batch_size="shrink"`` (the
    strategies' default with private data) a node at or above the equal share is sent its own
    quota as the reference and keeps ``batch_size``. For your own loop over arrays::

        x, y = quota_data((x_train, y_train))
        bs = quota_batch_size(32)
        for i in range(0, len(x), bs):
            ...  # one optimizer step on x[i:i + bs], y[i:i + bs]

    Parameters
    ----------
    batch_size : int
        Your batch size (what a node holding the reference quota uses).
    max_scale : float or None (default: 8.0)
        The largest factor over ``batch_size`` (memory); above it the extra samples become extra
        steps, which the strategy's normalised aggregation corrects. ``None``: no cap.

    Returns
    -------
    int
        The scaled batch size inside a wrapped training call whose config holds a reference
        quota; ``batch_size`` otherwise (no reference, a malformed one, or outside the call).
        The samples are those ``quota_data`` selected (the quota capped at the local data),
        else the quota.
    """
    window = _WINDOW.get()
    if window is None or window.reference is None:
        return scaled_batch_size(batch_size, 0, None, max_scale)
    samples = window.samples if window.samples is not None else (window.quota or 0)
    return scaled_batch_size(batch_size, samples, window.reference, max_scale)


def _is_array(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return True
    torch = __import__("sys").modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def quota_data(data: Any, *, max_batch_scale: float | None = MAX_BATCH_SCALE) -> Any:
    """This round's quota of ``data`` (see the module docstring for what each type returns).

    Parameters
    ----------
    data : DataLoader, map-style dataset, array, tuple of arrays or list
        The local training data.
    max_batch_scale : float or None (default: 8.0)
        For a DataLoader re-created inside a wrapped training call whose config holds a
        reference quota (``scale_batch_size=True`` or ``"shrink"`` on the strategy): the largest factor its
        batch size is scaled by (see :func:`quota_batch_size`). ``None``: no cap. A dataset or
        array has no batch size to scale: ``DataLoader(quota_data(dataset), batch_size=B)`` reads
        in batches of B (pass the DataLoader itself, ``quota_data(DataLoader(dataset, B))``, or
        use :func:`quota_batch_size` in your own loop).

    Raises
    ------
    ValueError
        For ``max_batch_scale`` not a number >= 1 or ``None`` (whatever ``data`` is, at the call).
        For arrays, tuples and lists outside a wrapped training call (use a dataset or DataLoader
        there: they resolve lazily), for tuples of arrays of different lengths, and for
        DataLoaders whose sampling cannot be re-created over the selection.
    """
    check_max_scale(max_batch_scale, "max_batch_scale")  # here, not when a reference first arrives
    torch_loader: Any = None  # the class, imported only when torch already is
    if "torch" in __import__("sys").modules:
        from torch.utils.data import DataLoader as torch_loader  # noqa: N813
    if torch_loader is not None and isinstance(data, torch_loader):
        from flwr_adaptive.clients.quota_loader import loader_over

        return loader_over(data, _QuotaView(data.dataset), max_batch_scale)
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
            window.mark_read()
            return tuple(_take(x, idx) for x in data)
        idx = window.indices(len(data))
        window.mark_read()
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
