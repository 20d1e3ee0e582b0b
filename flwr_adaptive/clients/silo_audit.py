"""A silo's data-access audit: which sample ids each DDP rank read.

Contract
--------
:func:`audit_reads` returns a copy of a :class:`~flwr_adaptive.clients.ddp.worker.WorkerSpec`
whose ranks append the id of every sample they read to ``directory/rank-<r>.ids``
(little-endian int64): ``dataset.ids[i]`` for datasets with per-sample ids, else the position
``i``. Training is unchanged: the audit wraps the spec's data and collate function, and the
batches it returns are the ones the unaudited spec would collate. :func:`read_audit` reads the
logs back as ``{rank: ids in reading order}``. Used to show that a silo's ranks read only the
silo's own partition.

Cost
----
One small file append per rank and step; tensor data is read through a map-style dataset (so
that every read is seen), one ``index_select`` per tensor and batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from flwr_adaptive.clients.ddp.worker import WorkerSpec

__all__ = ["audit_reads", "read_audit"]


class _Rows(torch.utils.data.Dataset):
    """Tensors ``(inputs..., targets)`` as a map-style dataset, so that every read goes through collate."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]) -> None:
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[i] for t in self.tensors)


def _audited_data(data: Any) -> Any:
    if callable(data) and not isinstance(data, torch.utils.data.Dataset):
        data = data()
    if isinstance(data, (tuple, list)) and data and all(isinstance(t, torch.Tensor) for t in data):
        return _Rows(tuple(data))
    return data


def _audited_collate(inner: Callable | None, directory: str, dataset: Any, indices: np.ndarray) -> tuple:
    ids = getattr(dataset, "ids", None)
    read = np.asarray(indices, dtype=np.int64) if ids is None else np.asarray(ids)[indices].astype(np.int64)
    rank = dist.get_rank() if dist.is_initialized() else 0
    with open(os.path.join(directory, f"rank-{rank}.ids"), "ab") as f:
        f.write(read.astype("<i8").tobytes())
    if inner is not None:
        return inner(dataset, indices)
    if isinstance(dataset, _Rows):
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        return tuple(t.index_select(0, idx) for t in dataset.tensors)
    return torch.utils.data.default_collate([dataset[int(i)] for i in indices])


def audit_reads(spec: WorkerSpec, directory: str | os.PathLike) -> WorkerSpec:
    """``spec`` whose ranks log the id of every sample they read (a silo's data-access audit).

    Every batch a rank reads is appended to ``directory/rank-<r>.ids`` (little-endian int64):
    ``dataset.ids[i]`` for datasets with per-sample ids (the project's tasks: unique across the
    whole source, so they show which silo's partition a sample came from), else the position
    ``i``. :func:`read_audit` reads the logs back. Tensor data is wrapped in a map-style dataset
    so that every read is seen. Costs one small file append per rank and step.
    """
    directory = str(Path(directory).resolve())
    Path(directory).mkdir(parents=True, exist_ok=True)
    return replace(
        spec, data=partial(_audited_data, spec.data), collate_fn=partial(_audited_collate, spec.collate_fn, directory)
    )


def read_audit(directory: str | os.PathLike) -> dict[int, np.ndarray]:
    """``{rank: ids read, in reading order}`` from an :func:`audit_reads` directory."""
    out = {}
    for path in sorted(Path(directory).glob("rank-*.ids")):
        out[int(path.stem.split("-", 1)[1])] = np.fromfile(path, dtype="<i8")
    return out
