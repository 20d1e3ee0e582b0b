"""Host-spike capping of an emulated device's per-step compute seconds.

Contract
--------
:func:`despiked_steps` caps each non-empty step of one rank's round at
``(1 + SPIKE_HEADROOM) ×`` the round's median step (scaled up for a larger batch); a round with
fewer than 3 non-empty steps, and every empty step, is returned as it is. It only ever lowers a
step: contention on the shared host only inflates CPU time, so only the top is clipped, and a
round that is slower as a whole is kept. It is meant for emulated devices only, whose ranks
share one host and whose slowdown would otherwise multiply the host's noise into the device's
clock (the silo's module docstring, :mod:`flwr_adaptive.clients.silo`, says where it is applied).

Cost
----
One median per round and rank: O(steps) numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["SPIKE_HEADROOM", "despiked_steps"]

SPIKE_HEADROOM = 0.25
"""How far above the rank's median step of the round an emulated step may cost (a share)."""


def despiked_steps(seconds: Sequence[float], batches: Sequence[int], headroom: float = SPIKE_HEADROOM) -> np.ndarray:
    """Per-step compute seconds of one rank with host spikes capped (emulated devices only).

    Each non-empty step is capped at ``(1 + headroom) ×`` the median of the round's non-empty
    steps, times ``batch / median batch`` for a batch larger than the median (a larger batch may
    cost proportionally more). Fewer than 3 non-empty steps: returned as they are (no median
    to trust). Empty steps (0 samples, 0 seconds) stay 0.
    """
    t = np.asarray(seconds, dtype=float)
    b = np.asarray(batches, dtype=float)
    busy = b > 0
    if int(busy.sum()) < 3:
        return t.copy()
    cap = (1.0 + headroom) * float(np.median(t[busy])) * np.maximum(1.0, b / float(np.median(b[busy])))
    return np.where(busy, np.minimum(t, cap), t)
