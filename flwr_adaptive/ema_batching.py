"""The EMA batch-sizing baseline: re-balance per-rank batch sizes at every step (LB-BSP-like).

Contract
--------
After every DDP step each rank knows every rank's compute time and batch size of that step (the
DDP worker piggybacks them on the gradient all-reduce). :class:`EmaBatchSizer` keeps an
exponential moving average of each rank's throughput (samples per second of its own compute,
waits excluded) and splits the *next* step's global batch proportionally to it, in integers that
sum to the global batch exactly. The global batch, the step count and the gradient (sample mean
of the global batch) are unchanged; only the split moves.

This is the per-step baseline the round-level controller is compared with: it reacts within a
step, but it also chases every step's timing noise, and a rank's throughput is only observed at
the batch size it was just given.

Every rank runs its own copy on the same all-reduced numbers, so all copies agree without
further communication (the arithmetic is deterministic).

Cost
----
O(R) numpy work per step for R ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["EmaBatchSizer"]


class EmaBatchSizer:
    """Per-step batch sizes proportional to an EMA of each rank's measured throughput.

    Parameters
    ----------
    world : int
        Number of ranks.
    smoothing : float
        EMA weight α ∈ (0, 1] of the newest throughput; a rank's first measurement initialises.
    min_batch : int
        Smallest batch a rank is given while the global batch allows ``world · min_batch``; the
        default 1 keeps every rank measured (a rank given 0 samples reveals nothing about its
        speed).
    """

    def __init__(self, world: int, smoothing: float = 0.5, min_batch: int = 1) -> None:
        if isinstance(world, bool) or not isinstance(world, (int, np.integer)) or world < 1:
            raise ValueError(f"world must be an int >= 1, got {world!r}")
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must lie in (0, 1], got {smoothing!r}")
        if isinstance(min_batch, bool) or not isinstance(min_batch, (int, np.integer)) or min_batch < 0:
            raise ValueError(f"min_batch must be an int >= 0, got {min_batch!r}")
        self.world = int(world)
        self.smoothing = float(smoothing)
        self.min_batch = int(min_batch)
        self.throughput = np.full(self.world, np.nan)  # samples per second, NaN = not measured

    def update(self, times_s: ArrayLike, sizes: ArrayLike) -> None:
        """One EMA step from a step's per-rank compute seconds and batch sizes.

        Ranks with an empty batch or a non-positive / non-finite time keep their estimate.
        """
        t = np.asarray(times_s, dtype=np.float64)
        n = np.asarray(sizes, dtype=np.float64)
        if t.shape != (self.world,) or n.shape != (self.world,):
            raise ValueError(
                f"times_s and sizes need one value per rank ({self.world}), got shapes {t.shape} and {n.shape}"
            )
        valid = (n > 0) & (t > 0) & np.isfinite(t)
        obs = np.divide(n, t, out=np.full(self.world, np.nan), where=valid)
        old = self.throughput
        a = self.smoothing
        blended = np.where(np.isnan(old), obs, a * obs + (1.0 - a) * old)
        self.throughput = np.where(valid, blended, old)

    def weights(self) -> np.ndarray:
        """Relative speed of each rank; an unmeasured rank counts as the median measured one."""
        thr = self.throughput
        known = ~np.isnan(thr)
        if not known.any():
            return np.ones(self.world)
        out: np.ndarray = np.where(known, thr, float(np.median(thr[known])))
        return out

    def split(self, global_batch: int) -> np.ndarray:
        """Per-rank batch sizes (int64) summing to ``global_batch``, proportional to throughput."""
        if isinstance(global_batch, bool) or not isinstance(global_batch, (int, np.integer)) or global_batch < 0:
            raise ValueError(f"global_batch must be an int >= 0, got {global_batch!r}")
        floor = min(self.min_batch, int(global_batch) // self.world)
        rest = int(global_batch) - floor * self.world
        w = self.weights()
        x = w * (rest / w.sum())
        n: np.ndarray = np.floor(x).astype(np.int64)
        short = rest - int(n.sum())
        if short:
            # Largest remainder; ties go to the lower rank so every copy picks the same ranks.
            order = np.argsort(-(x - n), kind="stable")
            n[order[:short]] += 1
        return n + floor

    def state_dict(self) -> dict[str, list[float | None]]:
        """JSON-serialisable state (``None`` for unmeasured ranks)."""
        return {"throughput": [None if np.isnan(v) else float(v) for v in self.throughput]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        thr = [np.nan if v is None else float(v) for v in state["throughput"]]
        if len(thr) != self.world:
            raise ValueError(f"state has {len(thr)} ranks, this sizer has {self.world}")
        self.throughput = np.array(thr, dtype=np.float64)
