"""Splitting a task's local data: a fixed holdout, then client partitions of the rest.

Contract
--------
- The holdout is fixed: it depends on the data and a constant seed only, never on the partition
  arguments, so every client and the server evaluate on the same samples and convergence curves
  of different runs are comparable. It is disjoint from the training part.
- ``partition_all`` splits the training part with Flower Datasets' partitioners (the same code a
  Flower user's hub pipeline runs) over a tiny ``datasets.Dataset`` that holds only positions and
  labels, never the samples themselves. Partitions are disjoint and their union is the training
  part. ``"iid"``: a seeded shuffle, then :class:`IidPartitioner`'s equal contiguous shards
  (sizes differ by at most one; the shuffle matters because local sources are often sorted by
  label). ``"dirichlet"``: :class:`DirichletPartitioner` by label with concentration ``alpha``
  (smaller = more skewed). The same arguments give the same split on every machine, which is how
  independent client processes agree on who holds what.

Cost
----
O(n) plus one small Arrow table per call (60,000 labels, 10 partitions: IID ≈ 20 ms,
Dirichlet ≈ 0.3 s, most of it Flower's Python lists). Each client computes
the whole split and keeps its own part.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = [
    "PARTITIONERS",
    "partition_all",
    "stratified_holdout",
    "group_holdout",
    "validate_partition_args",
]

PARTITIONERS = ("iid", "dirichlet")


def validate_partition_args(partition_id: int, num_partitions: int, partitioner: str, alpha: float, n: int) -> None:
    """Raise ``ValueError`` naming the bad value and the fix."""
    if partitioner not in PARTITIONERS:
        raise ValueError(f"partitioner={partitioner!r} is not known; use one of {', '.join(PARTITIONERS)}")
    if not isinstance(num_partitions, (int, np.integer)) or num_partitions < 1:
        raise ValueError(f"num_partitions={num_partitions!r} must be a positive int")
    if num_partitions > n:
        raise ValueError(
            f"num_partitions={num_partitions} exceeds the {n} training samples; use fewer partitions or more data"
        )
    if not isinstance(partition_id, (int, np.integer)) or not 0 <= partition_id < num_partitions:
        raise ValueError(
            f"partition_id={partition_id!r} must be an int in [0, {num_partitions}) for num_partitions={num_partitions}"
        )
    if partitioner == "dirichlet" and not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha={alpha!r} must be a finite number > 0 for the Dirichlet partitioner")


def partition_all(
    labels: np.ndarray,
    num_partitions: int,
    partitioner: str = "iid",
    alpha: float = 0.5,
    seed: int = 42,
    min_partition_size: int | None = None,
) -> list[np.ndarray]:
    """Split positions ``0..len(labels)-1`` into ``num_partitions`` disjoint index arrays.

    Parameters
    ----------
    labels : np.ndarray
        One label per training sample (class, or a grouping such as the month for regression).
    num_partitions : int
        Number of clients.
    partitioner : {"iid", "dirichlet"}
        See the module docstring.
    alpha : float
        Dirichlet concentration (ignored for ``"iid"``).
    seed : int
        Seed of the shuffle / Dirichlet draws; all clients must use the same one.
    min_partition_size : int, optional
        Dirichlet only: redraw until every partition holds at least this many samples
        (Flower's rule, at most 10 redraws). Default ``min(10, n // (2 * num_partitions))``.

    Returns
    -------
    list of np.ndarray
        Sorted int64 positions per partition id.
    """
    import datasets
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    labels = np.asarray(labels)
    n = len(labels)
    validate_partition_args(0, num_partitions, partitioner, alpha, n)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n) if partitioner == "iid" else np.arange(n)
    # Arrow format: column reads are zero-copy (the default format iterates rows: 20× slower).
    table = datasets.Dataset.from_dict({"idx": order, "label": labels[order]}).with_format("arrow")
    if partitioner == "iid":
        part = IidPartitioner(num_partitions=num_partitions)
    else:
        if min_partition_size is None:
            min_partition_size = min(10, n // (2 * num_partitions))
        part = DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=float(alpha),
            min_partition_size=int(min_partition_size),
            self_balancing=False,
            shuffle=False,
            seed=int(seed),
        )
    part.dataset = table
    out = []
    try:
        with warnings.catch_warnings():
            # Flower warns on every Dirichlet redraw; the final failure is reported below.
            warnings.simplefilter("ignore", UserWarning)
            for pid in range(num_partitions):
                out.append(np.sort(np.asarray(part.load_partition(pid)["idx"], dtype=np.int64)))
    except ValueError as err:
        raise ValueError(
            f"Dirichlet partitioning with alpha={alpha}, num_partitions={num_partitions} and "
            f"min_partition_size={min_partition_size} over {n} samples failed ({err}); "
            "use a larger alpha, fewer partitions or a smaller min_partition_size"
        ) from err
    return out


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask of a holdout that takes ``round(fraction · count)`` samples of every label."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(labels), dtype=bool)
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        k = int(round(fraction * len(members)))
        mask[rng.choice(members, size=k, replace=False)] = True
    return mask


def group_holdout(groups: Sequence | np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask of a holdout made of whole groups (e.g. all snippets of one movie).

    Whole groups keep near-duplicates (same movie, same station-week) out of both sides.
    """
    labels = np.asarray(groups)
    uniq = np.unique(labels)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(uniq, size=int(round(fraction * len(uniq))), replace=False)
    return np.isin(labels, chosen)
