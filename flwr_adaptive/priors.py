"""What the server assumes about a participant before it has measured it.

Contract
--------
A participant's first quota is given before any report of its own, so the server must assume
something about it. Two assumptions live here, both drawn from what is already known about the
population (the participants measured so far):

- :func:`provisional_caps` — its **local data size** when data is private (``allow_cycling`` off):
  a participant whose size is not known yet is capped at a low quantile of the sizes reported so
  far (default: the 10th percentile), raised just enough that the caps can still hold the budget.
  Without it a first-seen participant is unbounded, takes whatever capped participants leave, and
  the samples beyond its data are lost.
- :func:`cautious_cost` — its **cost per sample**: the ``1 − 1/(k+1)`` quantile of the measured
  population's costs when ``k`` unmeasured participants train together. The slowest of ``k``
  draws from the population is expected near that quantile, so the unmeasured participants
  finish, in expectation, with the measured ones instead of setting the round's makespan (the
  median, the controller's default, makes the slowest of them late by the population's spread).

Both are pure functions of numbers (no Flower, no controller): the strategies call them.

Cost
----
One ``numpy`` quantile over the known values: O(P) for P participants measured so far.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["provisional_caps", "cautious_cost", "CAP_QUANTILE"]

#: Quantile of the reported data sizes a participant of unknown size is capped at.
CAP_QUANTILE = 0.1


def provisional_caps(
    caps: Sequence[int | None], budget: int, known_sizes: np.ndarray, quantile: float = CAP_QUANTILE
) -> list[int | None]:
    """Fill the unknown entries of ``caps`` (``None``) with a provisional data size.

    Parameters
    ----------
    caps : sequence of int or None
        This round's upper bound of each participant: its data size, or ``None`` when unknown.
    budget : int
        Samples the round must split.
    known_sizes : numpy.ndarray
        Data sizes reported so far by the population (any participants, this round's or not).
    quantile : float (default: ``CAP_QUANTILE``)
        Quantile of ``known_sizes`` given to a participant of unknown size.

    Returns
    -------
    list of int or None
        ``caps`` with every ``None`` replaced by ``max(q, ⌈(budget − Σ known caps) / k⌉)`` (``q``
        the quantile, ``k`` the unknown entries), so that the caps can always hold the budget;
        unchanged when nothing is unknown or no size is known yet.
    """
    unknown = [i for i, c in enumerate(caps) if c is None]
    if not unknown or len(known_sizes) == 0:
        return list(caps)
    prior = int(math.floor(float(np.quantile(known_sizes, quantile))))
    rest = budget - sum(c for c in caps if c is not None)
    needed = -(-rest // len(unknown)) if rest > 0 else 0
    fill = max(prior, needed, 1)
    return [fill if c is None else c for c in caps]


def cautious_cost(measured: np.ndarray, unmeasured: int) -> float:
    """Cost per sample to assume for each of ``unmeasured`` participants training together.

    Parameters
    ----------
    measured : numpy.ndarray
        Costs per sample (seconds, or a dimensionless cost) of the participants measured so far.
    unmeasured : int
        How many unmeasured participants train this round.

    Returns
    -------
    float
        The ``1 − 1/(unmeasured + 1)`` quantile of ``measured`` (its median for one participant);
        NaN when nothing is measured.
    """
    if len(measured) == 0 or unmeasured < 1:
        return math.nan
    return float(np.quantile(measured, 1.0 - 1.0 / (unmeasured + 1)))
