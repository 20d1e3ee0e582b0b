"""Equal steps, scaled batches: the batch size that takes a quota in the reference quota's steps.

Contract
--------
With ``scale_batch_size=True`` the adaptive strategies send every node the round's reference quota
(``keys.REFERENCE_QUOTA``: the equal share, budget / nodes trained) next to its own quota (with
``"shrink"``, the default with private data, ``max(reference, quota)``: only a node below the share
scales, down). A node
then moves its extra (or missing) samples through the **batch size**, not the step count: at the
user's batch size ``B`` the reference quota ``r`` takes ``ceil(r / B)`` steps, and a quota ``q``
is read in batches of

    ``scaled_batch_size(B, q, r) = ceil(B · q / r)``   (at least 1)

so it takes ``ceil(q / ceil(B·q/r)) <= ceil(r / B)`` steps: never more than the reference's, the
same count for every node except when a quota is so small that its batches hold one sample. A
node holding the reference quota keeps the user's batch size. Equal step counts keep FedAvg's
objective on private, non-IID data (each update is the same number of steps on an unbiased
estimate of the node's own gradient), so the normalised rule's factors are all 1.

``max_scale`` bounds the batch at ``floor(max_scale · B)`` (memory): above it the extra samples
become extra steps, which the telemetry reports and the normalised rule corrects as without
scaling. :func:`reference_of` reads the reference from a round's config, which is untrusted: a
value that is not an int >= 1 gives ``None`` (the caller keeps the user's batch size) and one
warning naming the value.

Cost
----
A few integer operations per call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from flwr_adaptive import keys
from flwr_adaptive._logging import logger as log

__all__ = ["MAX_BATCH_SCALE", "scaled_batch_size", "check_max_scale", "reference_of"]

#: The default cap on the batch-size factor (``max_scale``): at most 8 × the user's batch size.
MAX_BATCH_SCALE = 8.0


def scaled_batch_size(
    batch_size: int, samples: int, reference: int | None, max_scale: float | None = MAX_BATCH_SCALE
) -> int:
    """The batch size that reads ``samples`` in the steps ``reference`` takes at ``batch_size``.

    Parameters
    ----------
    batch_size : int
        The user's batch size ``B`` (>= 1): what a node holding the reference quota uses.
    samples : int
        The samples this round's loop reads (the quota as selected: capped at the local data).
    reference : int or None
        The round's reference quota (``keys.REFERENCE_QUOTA``); ``None`` or ``samples <= 0``:
        ``batch_size`` unchanged.
    max_scale : float or None (default: 8.0)
        The largest factor over ``batch_size`` (>= 1; ``None``: no cap). When it binds the loop
        takes more steps than the reference's.

    Returns
    -------
    int
        ``min(ceil(B · samples / reference), floor(max_scale · B))``, at least 1.

    Raises
    ------
    ValueError
        ``batch_size`` not an int >= 1, or ``max_scale`` not a number >= 1 or ``None``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1 (the batch size at the reference quota), got {batch_size!r}")
    check_max_scale(max_scale, "max_scale")
    if reference is None or samples <= 0:
        return int(batch_size)
    scaled = max(1, -(-int(batch_size) * int(samples) // int(reference)))
    if max_scale is not None and math.isfinite(max_scale):
        scaled = min(scaled, max(1, int(max_scale * batch_size)))
    return int(scaled)


def check_max_scale(max_scale: float | None, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``max_scale`` is a number >= 1 or ``None``."""
    number = isinstance(max_scale, (int, float, np.integer, np.floating)) and not isinstance(max_scale, bool)
    if max_scale is not None and not (number and max_scale >= 1):
        raise ValueError(f"{name} must be a number >= 1 or None (no cap on the batch-size factor), got {max_scale!r}")


_WARNED: set[str] = set()  # malformed references already logged in this process


def reference_of(config: Mapping[str, Any]) -> int | None:
    """The round's reference quota from ``config`` (``None``: absent or malformed, with one warning)."""
    value = config.get(keys.REFERENCE_QUOTA)
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if ok and math.isfinite(value) and value >= 1 and value == int(value):
        return int(value)
    said = repr(value)[:80]
    if said not in _WARNED:
        _WARNED.add(said)
        log.warning(
            "config %r must be an int >= 1 (the round's reference quota), got %s: training at the "
            "user's batch size (no batch scaling) this round",
            keys.REFERENCE_QUOTA,
            said,
        )
    return None
