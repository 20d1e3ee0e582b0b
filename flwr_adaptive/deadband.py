"""The committed split and the deadband: keep it or take the proposed one.

Contract
--------
A :class:`CommittedSplit` holds the split the controller last returned, over the estimate
store's slots, with the bounds, budget and groups it was computed under; ``renumber`` follows
the store when slots are dropped (dropping a member forgets the split). ``kept`` returns the
committed split aligned to this round's participants when the deadband keeps it, else ``None``
(the proposed split is taken). A committed split is kept only
while the participant set, each participant's bounds and group, and the budget are those it
was computed under, and then, by the rule:

- ``"tv"`` (the paper): in every group ``Σ|new − current| / (2·budget_g) < deadband``, and no
  participant's quota would move by more than ``deadband·new + 1`` samples;
- ``"gain"``: re-splitting would improve the predicted objective (:data:`Predicted`: the group
  makespans, or the round energy and time of ``"min-energy"``) by less than a fraction
  ``max(deadband, noise floor)``, the noise floor being what the participants' own jitter can fake.

``deadband <= 0`` never keeps. ``kept`` changes nothing; the controller calls ``commit``.

Cost
----
O(P) for P participants (one alignment through an index over the store's slots when the order
changed), plus two evaluations of the predicted objective with the ``"gain"`` rule.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

__all__ = ["CommittedSplit", "Predicted"]

#: A split's predicted objective (group makespans, or energy and round time): what the gain deadband compares.
Predicted = Callable[[np.ndarray], np.ndarray]


_EMPTY = np.empty(0, dtype=np.int64)
_EMPTY.flags.writeable = False  # shared by every empty split: nothing may write into it


class CommittedSplit:
    """The committed split: ``quota`` of the store slots ``slots``, computed under ``lo``, ``hi``,
    ``budget`` (``None``: nothing committed) and ``groups`` (each member's group, or ``None``)."""

    def __init__(
        self,
        slots: np.ndarray = _EMPTY,
        quota: np.ndarray = _EMPTY,
        lo: np.ndarray = _EMPTY,
        hi: np.ndarray = _EMPTY,
        budget: Any = None,
        groups: list[Hashable] | None = None,
    ) -> None:
        self.slots, self.quota, self.lo, self.hi = slots, quota, lo, hi
        self.budget = budget
        self.groups = groups

    def renumber(self, renumber: np.ndarray) -> None:
        """Follow the store's slot renumbering (``-1``: dropped); a dropped member forgets the split."""
        cur = renumber[self.slots]
        if (cur < 0).any():
            self.slots = self.quota = self.lo = self.hi = _EMPTY
            self.budget = self.groups = None
        else:
            self.slots = cur

    def kept(
        self,
        *,
        deadband: float,
        rule: str,
        budget: Any,
        slot_count: int,
        slots: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        proposed: np.ndarray,
        codes: np.ndarray,
        budgets: list[int],
        group_of: list[Hashable] | None,
        predicted: Predicted,
        noise_floor: Callable[[np.ndarray], float],
    ) -> np.ndarray | None:
        """The committed split aligned to ``slots`` if the deadband keeps it, else ``None``.

        ``budget`` is the controller's budget now, ``slot_count`` the number of slots in the
        store, ``group_of`` each participant's group (``None`` without groups) and
        ``noise_floor(slots)`` the relative jitter of the estimates (the ``"gain"`` rule).
        """
        if deadband <= 0 or self.budget is None or self.budget != budget:
            return None
        if len(slots) != len(self.slots):
            return None
        if np.array_equal(slots, self.slots):
            aligned = np.arange(len(slots))
        else:
            position = np.full(slot_count, -1, dtype=np.int64)
            position[self.slots] = np.arange(len(self.slots))
            aligned = position[slots]
            if (aligned < 0).any():
                return None  # the participant set changed
        current = self.quota[aligned]
        if not (np.array_equal(self.lo[aligned], lo) and np.array_equal(self.hi[aligned], hi)):
            return None
        if group_of is not None and (self.groups is None or [self.groups[i] for i in aligned.tolist()] != group_of):
            return None  # a participant changed group
        if rule == "gain":
            # Keep the split while re-splitting improves the predicted objective by < deadband,
            # or by less than the participants' own jitter can fake.
            band = max(deadband, noise_floor(slots))
            keep = predicted(current) <= (1.0 + band) * predicted(proposed)
            return current if bool(np.all(keep)) else None
        change = np.abs(proposed - current)
        # The total-variation rule alone can hold a split in which one small participant carries
        # twice its fair load (a 2× slowdown of an 11 % participant moves only ~4 % of the
        # budget), so each participant's own change must also stay inside the band.
        if (change > deadband * proposed + 1).any():
            return None
        moved = np.bincount(codes, weights=change, minlength=len(budgets))
        for m, b in zip(moved.tolist(), budgets):
            if b > 0 and m / (2 * b) >= deadband:
                return None
        return current
