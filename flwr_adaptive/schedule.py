"""DDP per-step batch-size schedules, their loss scales, and the sampler they drive.

Contract
--------
In DDP every rank runs the **same number of optimizer steps** per round and all-reduces its
gradient after each one. To give rank ``i`` a quota of ``q_i`` samples over ``S`` steps without
padding or dummy batches, :func:`batch_schedule` spreads every quota over the steps:

- row ``i`` sums to ``q_i``;
- every entry of row ``i`` is ``⌊q_i/S⌋`` or ``⌈q_i/S⌉`` (so a quota below ``S`` gives zeros);
- every column sums to ``⌊N/S⌋`` or ``⌈N/S⌉`` with ``N = Σ q_i`` (the global batch stays even).

Each rank sums its per-sample losses of step ``s`` and multiplies by ``world / B_s``, ``B_s`` the
step's actual column sum (:func:`loss_scales`). DDP's gradient *average* over ranks then equals
the sample-mean gradient of the step's global batch; a rank with an empty batch contributes a
zero gradient (not NaN) and still joins the all-reduce.

:class:`ScheduleSampler` replaces ``DistributedSampler``: all ranks walk the same seeded,
per-epoch shuffled index stream; step ``s`` takes the next ``B_s`` indices of it and rank ``i``
reads its ``S[i, s]`` of them at offset ``Σ_{j<i} S[j, s]``. The ranks' batches are disjoint and
their union is exactly the global batch a single process would have used.

Cost
----
``batch_schedule`` is O(R·S) numpy work for R ranks; a sampler draws one permutation per epoch
of the dataset (O(dataset size)) and then O(batch) per step.

Imports numpy only (no torch): the sampler is a plain iterable of index lists, which
``torch.utils.data.DataLoader(batch_sampler=...)`` accepts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = [
    "batch_schedule",
    "loss_scales",
    "step_makespan",
    "IndexStream",
    "ScheduleSampler",
]


def _as_quotas(quotas: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(quotas)
    if arr.ndim != 1:
        raise ValueError(f"quotas must be a 1-D sequence of ints (one per rank), got shape {arr.shape}")
    if arr.size and (arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"quotas must be ints, got {arr.tolist()!r}; round them first (the controller returns ints)")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise ValueError(f"quotas must be >= 0, got {arr.tolist()}")
    return arr


def batch_schedule(quotas: Sequence[int] | np.ndarray, steps: int) -> np.ndarray:
    """Per-step batch sizes of every rank: an int64 matrix of shape ``(ranks, steps)``.

    Parameters
    ----------
    quotas : sequence of int
        Samples of each rank for the round (``>= 0``).
    steps : int
        Optimizer steps of the round, the same for every rank (``>= 1``).

    Returns
    -------
    numpy.ndarray
        ``S`` with ``S.sum(axis=1) == quotas``, ``S[i, s] ∈ {⌊q_i/steps⌋, ⌈q_i/steps⌉}`` and every
        column sum in ``{⌊N/steps⌋, ⌈N/steps⌉}``, ``N = Σ quotas``.

    Notes
    -----
    Rank ``i`` gets ``⌊q_i/S⌋`` everywhere plus ``r_i = q_i mod S`` extra samples. The extras of
    all ranks are laid end to end around the ring of steps (rank ``i``'s start where rank
    ``i-1``'s end), so step ``s`` receives extras at positions ``≡ s (mod S)``: every column gets
    ``⌊R/S⌋`` or ``⌈R/S⌉`` of the ``R = Σ r_i`` extras, and since ``r_i < S`` no rank gets two
    extras in one step.
    """
    q = _as_quotas(quotas)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    steps = int(steps)
    base, extra = np.divmod(q, steps)
    sched = np.repeat(base[:, None], steps, axis=1)
    if extra.any():
        start = np.concatenate([[0], np.cumsum(extra)[:-1]]) % steps
        # Column offset of step s from rank i's first extra, in [0, steps).
        offset = (np.arange(steps)[None, :] - start[:, None]) % steps
        sched += offset < extra[:, None]
    return sched


def loss_scales(schedule: np.ndarray, world: int | None = None) -> np.ndarray:
    """Per-step factor ``world / B_s`` for the *sum* of a rank's per-sample losses.

    Parameters
    ----------
    schedule : numpy.ndarray
        ``(ranks, steps)`` batch sizes (``batch_schedule``'s output, or any per-step split).
    world : int, optional
        Ranks averaging the gradient (default: ``schedule.shape[0]``).

    Returns
    -------
    numpy.ndarray
        float64 of length ``steps``; ``0.0`` for a step whose global batch is empty, so such a
        step yields a zero gradient rather than NaN.
    """
    sched = np.asarray(schedule)
    if sched.ndim != 2:
        raise ValueError(f"schedule must be a (ranks, steps) matrix, got shape {sched.shape}")
    world = sched.shape[0] if world is None else world
    if isinstance(world, bool) or not isinstance(world, (int, np.integer)) or world < 1:
        raise ValueError(f"world must be an int >= 1, got {world!r}")
    totals = sched.sum(axis=0).astype(np.float64)
    out: np.ndarray = np.zeros_like(totals)
    np.divide(float(world), totals, out=out, where=totals > 0)
    return out


def step_makespan(step_times: np.ndarray) -> float:
    """Round makespan under per-step synchronization: ``Σ_s max_i t[i, s]``.

    Every step ends at an all-reduce, so the slowest rank of *each step* sets the pace; this
    is at least ``max_i Σ_s t[i, s]`` and equals it only when one rank is slowest at every step.
    """
    t = np.asarray(step_times, dtype=np.float64)
    if t.ndim != 2:
        raise ValueError(f"step_times must be a (ranks, steps) matrix, got shape {t.shape}")
    if t.size == 0:
        return 0.0
    return float(t.max(axis=0).sum())


class IndexStream:
    """An endless stream of dataset indices, reshuffled every epoch, identical on every rank.

    Position ``p`` of the stream is index ``perm_e[p mod n]`` of epoch ``e = p // n``, with
    ``perm_e`` a permutation seeded by ``(seed, e)``. Ranks that agree on ``seed`` and on the
    stream position agree on every global batch without communicating.

    Parameters
    ----------
    dataset_size : int
        Number of samples (``>= 1``).
    seed : int
        Shuffling seed shared by all ranks.
    start : int
        Stream position to begin at (e.g. the samples consumed by earlier rounds).
    shuffle : bool
        ``False`` walks ``0, 1, …, n-1`` in order every epoch.
    """

    def __init__(self, dataset_size: int, seed: int = 0, start: int = 0, shuffle: bool = True) -> None:
        if isinstance(dataset_size, bool) or not isinstance(dataset_size, (int, np.integer)) or dataset_size < 1:
            raise ValueError(f"dataset_size must be an int >= 1, got {dataset_size!r}")
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
            raise ValueError(f"start must be an int >= 0, got {start!r}")
        self.dataset_size = int(dataset_size)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.position = int(start)
        self._epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            if self.shuffle:
                self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.dataset_size)
            else:
                self._perm = np.arange(self.dataset_size, dtype=np.int64)
            self._epoch = epoch
        return self._perm

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` indices (crossing epoch boundaries as needed)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        out = np.empty(count, dtype=np.int64)
        done = 0
        n = self.dataset_size
        while done < count:
            epoch, offset = divmod(self.position, n)
            chunk = min(count - done, n - offset)
            out[done : done + chunk] = self._permutation(epoch)[offset : offset + chunk]
            done += chunk
            self.position += chunk
        return out

    @staticmethod
    def rank_slice(global_batch: np.ndarray, sizes: Sequence[int] | np.ndarray, rank: int) -> np.ndarray:
        """Rank ``rank``'s share of one global batch split by per-rank ``sizes``."""
        sizes = np.asarray(sizes, dtype=np.int64)
        if int(sizes.sum()) != len(global_batch):
            raise ValueError(
                f"per-rank sizes {sizes.tolist()} do not add up to the global batch of {len(global_batch)}"
            )
        lo = int(sizes[:rank].sum())
        return global_batch[lo : lo + int(sizes[rank])]


class ScheduleSampler:
    """Batch sampler of one rank, driven by a per-step schedule (replaces ``DistributedSampler``).

    Iterating yields one list of dataset indices per step — possibly empty — ``steps`` in all.
    Every rank builds it with the same schedule, ``dataset_size``, ``seed`` and ``start``.

    Parameters
    ----------
    schedule : numpy.ndarray
        ``(ranks, steps)`` batch sizes, e.g. ``batch_schedule(quotas, steps)``.
    rank : int
        This rank's row.
    dataset_size : int
        Samples in the (shared) dataset; a round longer than an epoch continues into the next,
        reshuffled one.
    seed : int
        Shuffling seed, shared by all ranks.
    start : int
        Stream position of the round's first sample (samples consumed by earlier rounds), so
        consecutive rounds walk through the epoch instead of repeating its start.
    shuffle : bool
        Shuffle each epoch (as ``DistributedSampler(shuffle=True)``).

    Notes
    -----
    ``DataLoader``'s default collate cannot batch an empty list; pass a ``collate_fn`` that
    handles it, or index tensors directly as the DDP worker does.
    """

    def __init__(
        self, schedule: np.ndarray, rank: int, dataset_size: int, seed: int = 0, start: int = 0, shuffle: bool = True
    ) -> None:
        sched = np.asarray(schedule)
        if sched.ndim != 2 or not np.issubdtype(sched.dtype, np.integer) or (sched < 0).any():
            raise ValueError(
                "schedule must be a (ranks, steps) matrix of ints >= 0, e.g. batch_schedule(quotas, steps)"
            )
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < sched.shape[0]:
            raise ValueError(f"rank must be an int in [0, {sched.shape[0]}), got {rank!r}")
        IndexStream(dataset_size, seed, start, shuffle)  # validates the stream arguments
        self.schedule = sched.astype(np.int64)
        self.rank = int(rank)
        self.dataset_size = int(dataset_size)
        self.seed = int(seed)
        self.start = int(start)
        self.shuffle = bool(shuffle)

    def __len__(self) -> int:
        return int(self.schedule.shape[1])

    @property
    def samples(self) -> int:
        """Samples this rank reads in the round (its quota)."""
        return int(self.schedule[self.rank].sum())

    @property
    def end(self) -> int:
        """Stream position after the round: the next round's ``start``."""
        return self.start + int(self.schedule.sum())

    def __iter__(self) -> Iterator[list[int]]:
        stream = IndexStream(self.dataset_size, self.seed, self.start, self.shuffle)
        for column in self.schedule.T:
            batch = stream.take(int(column.sum()))
            yield IndexStream.rank_slice(batch, column, self.rank).tolist()
