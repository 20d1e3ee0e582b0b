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

With ``balance_times`` (the time-only objectives: the split is balanced when everyone's
round takes equally long) a split is also kept while the participants' own recent reports at
their committed quotas are *balanced within their measured noise* (:func:`balanced_within_noise`):
no participant's mean log time (plus its ``fixed`` seconds) differs from its group's mean by
more than :data:`BALANCE_Z` standard errors, the noise being the scatter of the repeated reports
at the same quota (or, with too few of them, the scatter around the fitted lines). Estimates
built from a few noisy reports can propose a quite different split at every round on identical
devices (with 30 % jitter the split moved in most rounds, quotas up to 2× the fair share); the reports at the committed
quotas tell directly whether the split is off, and a truly slower participant shows up there
within a few rounds (at once when its slowdown is far beyond the noise).

``deadband <= 0`` never keeps. ``kept`` changes nothing; the controller calls ``commit``.

Cost
----
O(P) for P participants (one alignment through an index over the store's slots when the order
changed), plus two evaluations of the predicted objective with the ``"gain"`` rule, plus
O(P·WINDOW) for the balance test (one more line fit when the repeated reports are too few).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from flwr_adaptive import estimation

__all__ = ["CommittedSplit", "Predicted", "balanced_within_noise", "log_times", "BALANCE_Z"]

#: Standard errors a participant's mean log round time may lie from its group's before the split
#: counts as unbalanced (3: on identical devices a false release about once in 100 rounds per
#: participant's test). With σ estimated from ``dof`` repeated reports the Student-t quantile of
#: the same two-sided level (99.73 %) replaces it (:data:`BALANCE_T`).
BALANCE_Z = 3.0
#: Two-sided 99.73 % Student-t quantiles by degrees of freedom (entry 0 unused; beyond: BALANCE_Z).
BALANCE_T = np.array(
    [np.inf, 235.8, 19.21, 9.219, 6.620, 5.507, 4.904, 4.530, 4.277, 4.094, 3.957, 3.850, 3.764]
    + [3.694, 3.636, 3.586, 3.544, 3.507, 3.475, 3.447, 3.422, 3.400]
)
#: Fewest degrees of freedom of the repeated reports before their own scatter is the noise.
MIN_DOF = 3
#: Participants per block of the balance test's per-participant steps (they stay in the cache).
_ROWS = 8192
#: Skip the balance test's masks and gathers where they select everything (every report at its
#: quota, every quota positive, one group); the tests turn it off and compare the decisions.
SHORTCUTS = True

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
        self.logs: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # the balance test's last log times

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
        proposed: np.ndarray | Callable[[], np.ndarray],
        codes: np.ndarray,
        budgets: list[int],
        group_of: list[Hashable] | None,
        predicted: Predicted,
        noise_floor: Callable[[np.ndarray], float],
        history: np.ndarray | None = None,
        fixed: np.ndarray | None = None,
        balance_times: bool = False,
        bound: Callable[[Callable[[np.ndarray], bool]], np.ndarray | None] | None = None,
    ) -> np.ndarray | None:
        """The committed split aligned to ``slots`` if the deadband keeps it, else ``None``.

        ``budget`` is the controller's budget now, ``slot_count`` the number of slots in the
        store, ``group_of`` each participant's group (``None`` without groups) and
        ``noise_floor(slots)`` the relative jitter of the estimates (the ``"gain"`` rule).
        ``history`` holds each participant's recent raw reports ``(samples, seconds, joules)``
        (``(P, WINDOW, 3)``, NaN = none; ``None``: not kept), ``fixed`` its seconds beyond the
        reported compute; with ``balance_times`` they feed the balance test. ``proposed`` may be
        a function that solves the proposed split (called only when needed); ``bound(enough)`` gives
        values at or below ``predicted(proposed)`` without it (``None``: unknown; cheaper ones
        where ``enough`` says they serve): the gain rule keeps on them when it can, the same
        decision (a bound that passes, the exact value passes).
        """
        if deadband <= 0 or self.budget is None or self.budget != budget:
            return None
        if len(slots) != len(self.slots):
            return None
        order: np.ndarray | None = None  # None: the same order (the arrays themselves, no gathers)
        aligned: np.ndarray | slice = slice(None)
        if not np.array_equal(slots, self.slots):
            position = np.full(slot_count, -1, dtype=np.int64)
            position[self.slots] = np.arange(len(self.slots))
            gathered = position[slots]
            if (gathered < 0).any():
                return None  # the participant set changed
            aligned = order = gathered
        current = self.quota.copy() if order is None else self.quota[aligned]  # (a copy: the caller's)
        if not (np.array_equal(self.lo[aligned], lo) and np.array_equal(self.hi[aligned], hi)):
            return None
        if group_of is not None and (
            self.groups is None
            or (list(self.groups) if order is None else [self.groups[i] for i in order.tolist()]) != group_of
        ):
            return None  # a participant changed group
        if balance_times and history is not None and balanced_within_noise(current, history, codes, fixed, self.logs):
            return current
        if rule == "gain":
            # Keep the split while re-splitting improves the predicted objective by < deadband,
            # or by less than the participants' own jitter can fake.
            band = max(deadband, noise_floor(slots))
            held = predicted(current)

            def keeps(lower: np.ndarray) -> bool:
                return bool(np.all(held <= (1.0 + band) * lower))

            lower = None if bound is None else bound(keeps)
            if lower is not None and keeps(lower):
                return current
            keep = held <= (1.0 + band) * predicted(proposed() if callable(proposed) else proposed)
            return current if bool(np.all(keep)) else None
        proposed = proposed() if callable(proposed) else proposed
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


def balanced_within_noise(
    quota: np.ndarray,
    history: np.ndarray,
    codes: np.ndarray,
    fixed: np.ndarray | None = None,
    cache: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> bool:
    """Whether the reports at the committed ``quota`` show the split balanced within their noise.

    ``history`` is ``(P, W, 3)``: each participant's recent ``(samples, seconds, joules)``
    (NaN = none); only the reports at exactly its committed quota count (they need no model:
    the same work, timed again). Each participant's mean log round time ``m_i`` (its reported
    seconds plus ``fixed[i]``, over its ``k_i`` reports) is compared with the mean ``m̄`` of its
    group (``codes``): balanced when every ``|m_i − m̄| ≤ z·σ·√((1 − 2/P)/k_i + Σ_j 1/k_j / P²)``
    (the standard error of ``m_i − m̄``, P the group's size). σ is the pooled scatter of the
    repeated reports (at least :data:`MIN_DOF` degrees of freedom, ``z`` their Student-t quantile),
    else the median scatter around the participants' fitted lines (``z`` = :data:`BALANCE_Z`).
    False when a participant with a positive quota has no report at it, or without a noise
    figure; a group of one is balanced. Noise-free reports (σ = 0) are balanced only when equal.
    ``fixed=None``: no fixed seconds (adding 0.0 changes no time that counts: the same result,
    without two passes over the history). ``cache``: a dict the caller keeps between calls, where
    the logs of the last call's times are reused (see :func:`log_times`).
    """
    n, t = history[..., 0], history[..., 1]
    # The per-participant steps a block of rows at a time (each row is its own: the same values;
    # whole arrays of 100,000 participants made each step a trip to memory), the pooled sum once.
    blocks = [slice(s, s + _ROWS) for s in range(0, len(quota), _ROWS)]
    # Each block's windows are copied once as (WINDOW, rows): every step is then a plain vector
    # operation over participants and the sums down a window add its reports in order, as the
    # sums along a row of WINDOW numbers do (the same bits; a sum along short rows is ~10x slower).
    with np.errstate(invalid="ignore", divide="ignore"):
        at = np.empty(t.shape[::-1], dtype=bool)  # (WINDOW, P)
        times = np.empty(t.shape[::-1])
        k = np.empty(len(quota), dtype=np.int64)
        for r in blocks:
            tr = times[:, r]
            np.copyto(tr, t[r].T)
            # (the samples copied first: a comparison through the transpose costs ~5x as much)
            at[:, r] = (
                (np.ascontiguousarray(n[r].T) == quota[r])
                & np.isfinite(tr)
                & ((tr if fixed is None else tr + fixed[r]) > 0)
            )
            k[r] = at[:, r].sum(axis=0)
        active = quota > 0
        everyone = SHORTCUTS and bool(active.all())  # (every quota positive: the masks select every row)
        if not active.any() or ((k == 0) if everyone else (k[active] == 0)).any():
            return False  # a participant not yet timed at its quota: nothing to judge
        m = np.empty(len(quota))
        squares = np.empty(t.shape)  # each report's squared deviation from its participant's mean
        every_report = SHORTCUTS and bool(at.all())  # (every report at its quota, a settled split: no masks)
        logs = log_times(times, {} if cache is None else cache) if every_report and fixed is None else None
        for r in blocks:
            ar = at[:, r]
            timed = times[:, r] if every_report else np.where(ar, times[:, r], 1.0)
            x = logs[:, r] if logs is not None else np.log(timed if fixed is None else timed + fixed[r])
            if every_report:  # (k >= 1 everywhere)
                m[r] = x.sum(axis=0) / k[r]
                squares[r] = ((x - m[r]) ** 2).T
            else:
                x = np.where(ar, x, 0.0)
                m[r] = x.sum(axis=0) / np.maximum(k[r], 1)
                squares[r] = (np.where(ar, x - m[r], 0.0) ** 2).T
        dof = int((k - 1).sum() if everyone else (k[active] - 1).sum())
        if dof >= MIN_DOF:
            # squares[active] of every row is squares itself, as contiguous: the same sum
            sigma = math.sqrt(float((squares if everyone else squares[active]).sum()) / dof)
            z = float(BALANCE_T[dof]) if dof < len(BALANCE_T) else BALANCE_Z
        else:
            # Too few repeats: the relative scatter around each participant's fitted line (≈ the
            # scatter of the log time for small noise) over all of its recent reports.
            noise = estimation.fit_affine(n[active], t[active])[3]
            if not np.isfinite(noise).any():
                return False
            sigma, z = float(np.nanmedian(noise)), BALANCE_Z
    one_group = not codes.any()  # everyone in group 0 (no groups): no sort of the codes, no group mask
    for g in [0] if one_group else np.unique(codes[active]).tolist():
        # (everyone in one group: the arrays themselves, not gathers of every entry)
        idx = slice(None) if one_group and everyone else np.flatnonzero(active if one_group else active & (codes == g))
        size = len(k) if isinstance(idx, slice) else len(idx)
        if size < 2:
            continue
        inv_k = 1.0 / k[idx]
        se = sigma * np.sqrt((1.0 - 2.0 / size) * inv_k + inv_k.sum() / size**2)
        mg = m[idx]
        if (np.abs(mg - mg.mean()) > z * se).any():
            return False
    return True


def log_times(times: np.ndarray, cache: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """``np.log(times)`` of ``(WINDOW, P)`` report times, the same bits; ``cache`` holds the last call's.

    A held split's windows move by one report a round: where ``times`` without its newest row is
    the last call's ``times`` without its oldest (compared value by value), their logs are the
    last call's, and only the newest row is taken (a log is a function of its argument alone,
    elementwise: the same bits wherever the value lies in the array; ~60 % of a round of the
    balance test at 1,000 participants was the log of every report).
    """
    last = cache.get("logs")
    if last is not None and last[0].shape == times.shape and len(times) > 1 and np.array_equal(times[:-1], last[0][1:]):
        logs = np.empty_like(times)
        logs[:-1] = last[1][1:]
        np.log(times[-1], out=logs[-1])
    else:
        logs = np.log(times)
    cache["logs"] = (times, logs)
    return logs
