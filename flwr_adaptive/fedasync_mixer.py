"""FedAsync: mix each arriving update into the model, discounted by its staleness.

Contract
--------
``FedAsyncMixer.mix(model, update, base_version)`` returns
``(1 − α_t)·model + α_t·update`` with ``α_t = α·s(version − base_version)`` and advances the
model version by one; ``s`` is one of the staleness functions of Xie, Koyejo & Gupta,
"Asynchronous Federated Optimization" (arXiv:1903.03934):

- ``constant``:   s(t) = 1
- ``polynomial``: s(t) = (t + 1)^(−a)
- ``hinge``:      s(t) = 1 if t ≤ b, else 1 / (a·(t − b) + 1)

``VirtualClockQueue`` orders finished jobs by their finish time on the virtual clock so that an
asynchronous run can be replayed in emulated-device time (docs/energy.md, "The virtual clock") no matter
in which order the real processes finished. Default values (α = 0.6, a = 0.5 for polynomial,
a = 10 and b = 4 for hinge) are ours, inside the ranges the paper explores.

Cost: one weighted sum over the model's arrays per update; numpy only.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["staleness_weight", "FedAsyncMixer", "VirtualClockQueue", "STALENESS_FUNCTIONS"]

STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge")


def staleness_weight(kind: str, staleness: int, a: float = 0.5, b: float = 4.0) -> float:
    """The staleness discount ``s(t)`` in [0, 1] (see the module docstring for the formulas)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((staleness + 1.0) ** (-a))
    if kind == "hinge":
        return 1.0 if staleness <= b else float(1.0 / (a * (staleness - b) + 1.0))
    raise ValueError(f"unknown staleness function {kind!r}; choose one of {', '.join(STALENESS_FUNCTIONS)}")


def _default_a(staleness: str) -> float:
    return 10.0 if staleness == "hinge" else 0.5


@dataclass
class FedAsyncMixer:
    """The FedAsync server update.

    Parameters
    ----------
    alpha : float
        Mixing weight α ∈ (0, 1] of a fresh update.
    staleness : str
        ``"constant"``, ``"polynomial"`` or ``"hinge"``.
    a, b : float
        Parameters of the staleness function (``b`` only for hinge). ``a`` defaults to 0.5 for
        polynomial and 10 for hinge.
    """

    alpha: float = 0.6
    staleness: str = "polynomial"
    a: float | None = None
    b: float = 4.0
    version: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {self.alpha}")
        if self.a is None:
            self.a = _default_a(self.staleness)
        staleness_weight(self.staleness, 0, self.a, self.b)  # validates the name

    def weight(self, base_version: int) -> float:
        """α_t for an update computed from model version ``base_version``."""
        if base_version > self.version:
            raise ValueError(f"update claims base version {base_version}, newer than the model ({self.version})")
        a = _default_a(self.staleness) if self.a is None else self.a  # None only if reset after __post_init__
        return self.alpha * staleness_weight(self.staleness, self.version - base_version, a, self.b)

    def mix(self, model: Sequence[np.ndarray], update: Sequence[np.ndarray], base_version: int) -> list[np.ndarray]:
        """Mix one update into ``model``; returns the new arrays and advances ``version``."""
        if len(model) != len(update):
            raise ValueError(f"update has {len(update)} arrays, the model {len(model)}")
        w = self.weight(base_version)
        mixed = []
        for m, u in zip(model, update):
            if np.shape(m) != np.shape(u):
                raise ValueError(f"update array of shape {np.shape(u)} does not match the model's {np.shape(m)}")
            mixed.append(
                ((1.0 - w) * np.asarray(m, dtype=float) + w * np.asarray(u, dtype=float)).astype(np.asarray(m).dtype)
            )
        self.version += 1
        return mixed


@dataclass(order=True)
class _Job:
    finish_s: float
    seq: int
    participant: Hashable = field(compare=False)
    payload: Any = field(compare=False)


class VirtualClockQueue:
    """Finished jobs in virtual finish-time order (ties: submission order)."""

    def __init__(self) -> None:
        self._heap: list[_Job] = []
        self._seq = itertools.count()

    def push(self, participant: Hashable, finish_s: float, payload: Any = None) -> None:
        if not math.isfinite(finish_s):
            raise ValueError(f"participant {participant!r}: finish time must be finite, got {finish_s!r}")
        heapq.heappush(self._heap, _Job(finish_s, next(self._seq), participant, payload))

    def pop(self) -> tuple[Hashable, float, Any]:
        job = heapq.heappop(self._heap)
        return job.participant, job.finish_s, job.payload

    def peek_time(self) -> float:
        return self._heap[0].finish_s if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._heap)
