"""The minimum-makespan integer split of a sample budget for affine per-participant costs.

Contract
--------
Participant ``i`` processing ``n_i`` samples takes ``t_i(n) = a_i + b_i·n`` seconds (``a_i ≥ 0``,
``b_i > 0``). :func:`min_makespan_split` returns integer quotas ``lo ≤ n ≤ hi`` with ``Σn =
budget`` that minimise the makespan ``max_i t_i(n_i)``, and that makespan;
:func:`makespan_lower_bound` a value at or below it without the integer rounding (what the gain
deadband compares first); :func:`caps_at` the most samples each participant finishes within a
round length (what the min-energy solver, ``flwr_adaptive.solver``, fills greedily).

Cost
----
``min_makespan_split``: O(P) for P participants to find the continuous round length (an
active-set step, usually one or two; else a sort over the bounds' breakpoints, O(P log P)),
then the integer rounding: the remaining samples go to the earliest next finishes, found by a
partition and a merge of the fast participants' finish times (O(P + M log M) for M merged
times; a heap, O(P log P) per step, only past :data:`_MAX_MERGE_STEPS` samples per participant).
``makespan_lower_bound``: the O(P) continuous part only.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from flwr_adaptive.limits import exact_sum

__all__ = ["min_makespan_split", "makespan_lower_bound", "slowest_at_lower_bound", "caps_at", "cap_bounds"]

#: Samples per participant :func:`_extra_samples` generates before it leaves the rounding to the heap.
_MAX_MERGE_STEPS = 256
_REL = 1e-12  # relative tolerance when a round length is compared with t_i(n) = a_i + b_i·n
_ABS = 1e-9


def caps_at(
    T: float, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray, bounds: tuple[np.ndarray, ...] | None = None
) -> np.ndarray:
    """Most samples each participant can process within ``T`` seconds, clipped to its bounds
    (``lo`` ≥ 0; a NaN, from infinite costs, gives ``lo``), at most ``2**62``.

    ``bounds``: ``cap_bounds(lo, hi)`` when already computed (many round lengths, the same bounds).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        k = np.floor((T - a) / b * (1.0 + _REL) + _ABS)
    lo_f, hi_cap = cap_bounds(lo, hi) if bounds is None else bounds
    # fmax takes lo over a NaN; with 0 ≤ lo ≤ 2**62 this is clip(k, lo, min(hi, 2**62)) and no
    # separate clip to ±2**62 is needed
    capped: np.ndarray = np.minimum(np.fmax(k, lo_f), hi_cap).astype(np.int64)
    return capped


def cap_bounds(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``lo`` and ``min(hi, 2**62)`` as floats: what :func:`caps_at` clips to."""
    return lo.astype(float), np.minimum(hi.astype(float), 2.0**62)


def _continuous_makespan(budget: int, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """The real ``T`` with ``Σ clip((T − a)/b, lo, hi) = budget`` (piecewise linear in ``T``).

    Tries the active set first (O(P) per step, usually one or two steps), then, when that does
    not settle, sorts the breakpoints (O(P log P), :func:`_sorted_makespan`).
    """
    T = _active_set_makespan(budget, a, b, lo, hi)
    return _sorted_makespan(budget, a, b, lo, hi) if T is None else T


def _active_set_makespan(budget: int, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float | None:
    """``T`` on the linear piece where the participants strictly between their bounds are
    ``free``: ``T = (budget − Σ_at lo lo − Σ_at hi hi + Σ_free a/b) / Σ_free 1/b``, the free set
    re-read at the new ``T`` until it stays the same (then ``T`` lies on that piece: the exact
    root). Starts with everyone free; ``None`` after 8 steps, or without a free participant.
    The same root as :func:`_sorted_makespan`, up to float rounding.
    """
    lo_f, hi_f = lo.astype(float), hi.astype(float)
    inv = 1.0 / b
    a_inv = a * inv
    with np.errstate(over="ignore", invalid="ignore"):
        start = a + b * lo_f  # at or below: the participant sits at lo
        stop = a + b * hi_f  # at or above: it sits at hi (inf when unbounded)
    # Masks only where they can hold someone: the first step has everyone free (an empty masked
    # sum is 0.0, and x + 0.0 is x), and with no finite stop nobody is at hi while T < inf (inf
    # and NaN are never ≤ T): the same sums, fewer numpy calls.
    bounded = bool((stop < math.inf).any())
    none = np.zeros(len(a), dtype=bool)
    at_lo, at_hi, hi_empty = none, none, True
    for step in range(8):
        free = none if step == 0 else (~at_lo if hi_empty else ~(at_lo | at_hi))
        everyone = step == 0 or bool(free.all())
        slope = float(inv.sum()) if everyone else float(inv[free].sum())
        if not slope > 0:
            return None
        fixed = 0.0 if step == 0 else float(lo_f[at_lo].sum()) + (0.0 if hi_empty else float(hi_f[at_hi].sum()))
        offset = float(a_inv.sum()) if everyone else float(a_inv[free].sum())
        T = (budget - fixed + offset) / slope
        new_lo = start >= T
        new_hi_empty = not bounded and T < math.inf
        new_hi = none if new_hi_empty else stop <= T
        if (new_lo == at_lo).all() and ((hi_empty and new_hi_empty) or (new_hi == at_hi).all()):
            return T if math.isfinite(T) else None
        at_lo, at_hi, hi_empty = new_lo, new_hi, new_hi_empty
    return None


def _sorted_makespan(budget: int, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """The root of :func:`_continuous_makespan` from the sorted breakpoints (exact piece search)."""
    lo_f, hi_f = lo.astype(float), hi.astype(float)
    start = a + b * lo_f  # below: the participant sits at lo
    stop = a + b * hi_f  # above: it sits at hi (inf when unbounded)
    cand = np.unique(np.concatenate([start, stop[np.isfinite(stop)]]))
    s_order, e_order = np.argsort(start), np.argsort(stop)
    s_sorted, e_sorted = start[s_order], stop[e_order]
    slope_s = np.r_[0.0, np.cumsum(1.0 / b[s_order])]
    off_s = np.r_[0.0, np.cumsum(a[s_order] / b[s_order])]
    lo_cum = np.r_[0.0, np.cumsum(lo_f[s_order])]
    slope_e = np.r_[0.0, np.cumsum(1.0 / b[e_order])]
    off_e = np.r_[0.0, np.cumsum(a[e_order] / b[e_order])]
    hi_cum = np.r_[0.0, np.cumsum(np.where(np.isfinite(e_sorted), hi_f[e_order], 0.0))]

    def total(T: np.ndarray) -> np.ndarray:
        k_s = np.searchsorted(s_sorted, T, side="left")  # start_i < T: above lo
        k_e = np.searchsorted(e_sorted, T, side="right")  # stop_i <= T: at hi
        slope = slope_s[k_s] - slope_e[k_e]
        offset = off_s[k_s] - off_e[k_e]
        samples: np.ndarray = (lo_cum[-1] - lo_cum[k_s]) + hi_cum[k_e] + T * slope - offset
        return samples

    f = total(cand)
    k = int(np.searchsorted(f, budget, side="left"))
    if k < len(cand) and f[k] == budget:
        return float(cand[k])
    if k == 0:
        return float(cand[0])
    t0 = float(cand[k - 1])
    t1 = float(cand[k]) if k < len(cand) else t0 + 1.0
    f1 = float(f[k]) if k < len(cand) else float(total(np.array([t1]))[0])
    return t0 + (budget - float(f[k - 1])) * (t1 - t0) / (f1 - float(f[k - 1]))


def makespan_lower_bound(
    budget: int, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray, slowest: float | None = None
) -> float:
    """A value at or below the makespan of :func:`min_makespan_split` (same arguments), without
    the integer rounding: the larger of the slowest participant at its lower bound and the
    continuous optimum lowered by more than its float error.

    Any split has ``n ≥ lo``, so its makespan is at least ``max(a + b·lo)`` (the same float
    operations, which round monotonically). Any integer split ``n`` (``Σn = budget`` within
    bounds) has ``Σ clip((T_n − a)/b, lo, hi) ≥ budget`` at its makespan ``T_n``, so ``T_n`` is at
    or above the continuous root; the root's sums over ``P`` positive terms are within
    ``P·2⁻⁵³`` of exact, relatively, so lowering it by ``1e-9 + 4·P·2⁻⁵³`` keeps it below.
    O(P), about a third of the split's cost. ``slowest``: :func:`slowest_at_lower_bound` when known.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if len(a) == 0:
        return 0.0
    if slowest is None:
        slowest = slowest_at_lower_bound(a, b, lo)  # a fixed cost can outlast everyone else's round
    if budget == exact_sum(hi):
        return slowest  # every bound binds: no continuous root
    T = _continuous_makespan(budget, a, b, np.asarray(lo), np.asarray(hi))
    return max(slowest, T * (1.0 - (1e-9 + 4.0 * len(a) * 2.0**-53))) if T > 0 else slowest


def slowest_at_lower_bound(a: np.ndarray, b: np.ndarray, lo: np.ndarray) -> float:
    """``max(a + b·lo)`` (0 for nobody): no split's makespan is below it (the cheap part of
    :func:`makespan_lower_bound`)."""
    return float(np.max(a + b * lo)) if len(a) else 0.0


def min_makespan_split(
    budget: int, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, float]:
    """Integer quotas minimising ``max_i a_i + b_i·n_i`` with ``Σn = budget``, ``lo ≤ n ≤ hi``.

    Returns the quotas and their makespan. The caller guarantees ``Σlo ≤ budget ≤ Σhi``.
    Among equal makespans the participants with the earliest next finish take the remainder.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if len(a) == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    # exact_sum: unbounded participants carry int64's maximum, whose plain sum wraps around
    if budget == exact_sum(hi):  # every bound binds (no slope left past the last breakpoint)
        return hi.copy(), float(np.max(a + b * hi))
    T = _continuous_makespan(budget, a, b, lo, hi)
    # The integer optimum is >= the continuous one, so these caps lie below an optimal split.
    n = caps_at(T, a, b, lo, hi)
    short = budget - int(n.sum())
    if short > 0:
        extra = _extra_samples(short, a, b, n, hi)
        if extra is not None:
            n += extra
            return n, float(np.max(a + b * n))
        heap = [(float(a[i] + b[i] * (n[i] + 1)), i) for i in np.flatnonzero(n < hi).tolist()]
        heapq.heapify(heap)
        for _ in range(short):
            t, i = heapq.heappop(heap)
            n[i] += 1
            if n[i] < hi[i]:
                heapq.heappush(heap, (t + float(b[i]), i))
    elif short < 0:  # only through floating-point ties at T
        heap = [(-float(a[i] + b[i] * n[i]), i) for i in np.flatnonzero(n > lo).tolist()]
        heapq.heapify(heap)
        for _ in range(-short):
            t, i = heapq.heappop(heap)
            n[i] -= 1
            if n[i] > lo[i]:
                heapq.heappush(heap, (t + float(b[i]), i))
    return n, float(np.max(a + b * n))


def _extra_samples(short: int, a: np.ndarray, b: np.ndarray, n: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
    """How many of the ``short`` remaining samples the heap of :func:`min_makespan_split` gives
    each participant, found without the heap; ``None`` when that would take many steps (the heap
    then runs).

    The heap is a k-way merge: participant ``i``'s finish times ``a + b·(n + 1)``, then ``+ b``
    per further sample (float additions, as the heap adds them), and it pops the ``short``
    smallest ``(time, index)`` pairs of their union. All of them lie at or below ``cut``, the
    ``short``-th smallest first finish (the first finishes alone supply ``short`` pairs there), so
    the union's pairs up to ``cut`` are generated a sample at a time for all participants at
    once (a fast participant may take several; rarely more than a few dozen steps), sorted by
    ``(time, index)``, and the first ``short`` counted. Same pairs, same order: the same quotas.
    """
    room = np.flatnonzero(n < hi)
    if short >= len(room):
        return None
    everyone = len(room) == len(n)  # the common case: no gathers (the same values elementwise)
    first = a + b * (n + 1) if everyone else a[room] + b[room] * (n[room] + 1)
    cut = np.partition(first, short - 1)[short - 1]
    take = first <= cut
    if everyone:
        idx, vals = np.flatnonzero(take), first[take]
        # second pairs straight from the full arrays (second ≤ cut implies first ≤ cut: b > 0)
        with np.errstate(over="ignore", invalid="ignore"):
            second = first + b
        extra_left = hi - n - 1
        more = np.flatnonzero((extra_left > 0) & (second <= cut))
        merged = _merge_rows(idx, vals, more, first[more], b[more], extra_left[more], cut)
    else:
        idx, vals = room[take], first[take]
        left = hi[idx] - n[idx] - 1  # samples it can still take after this one
        bi = b[idx]
        with np.errstate(over="ignore", invalid="ignore"):
            second = vals + bi
        more = np.flatnonzero((left > 0) & (second <= cut))  # positions in idx with a second pair
        merged = _merge_rows(idx, vals, idx[more], vals[more], bi[more], left[more], cut)
    if merged is not None:
        if isinstance(merged, str):
            return None  # a participant would take more than _MAX_MERGE_STEPS: the heap
        times, who = merged
        popped = who[np.lexsort((who, times))[:short]]
        return np.bincount(popped, minlength=len(n))
    left = hi[idx] - n[idx] - 1
    values, owners = [vals], [idx]
    for _ in range(_MAX_MERGE_STEPS):
        more = left > 0
        idx, left = idx[more], left[more] - 1
        vals = vals[more] + b[idx]
        below = vals <= cut
        if not below.any():
            break
        idx, vals, left = idx[below], vals[below], left[below]
        values.append(vals)
        owners.append(idx)
    else:
        return None
    times, who = np.concatenate(values), np.concatenate(owners)
    popped = who[np.lexsort((who, times))[:short]]
    return np.bincount(popped, minlength=len(n))


#: Most cells of the table :func:`_merge_rows` builds (beyond it, the merge a sample at a time).
_MAX_MERGE_CELLS = 1 << 20


def _merge_rows(
    idx: np.ndarray, vals: np.ndarray, owners: np.ndarray, v: np.ndarray, bi: np.ndarray, left: np.ndarray, cut: float
) -> tuple[np.ndarray, np.ndarray] | str | None:
    """The pairs ``(time, owner)`` at or below ``cut`` that :func:`_extra_samples`' merge generates a
    sample at a time, for all steps at once: ``"heap"`` where it would give up (a participant
    with more than ``_MAX_MERGE_STEPS`` of them), ``None`` where this table would be too large or
    its estimate of the steps too short (the merge then runs itself).

    ``idx``, ``vals``: every participant's first pair; ``owners`` (in ``idx``'s order), ``v``,
    ``bi``, ``left``: the participants with a second pair at or below ``cut``, their first time,
    cost per sample and samples left after the first. A participant's times are ``v`` then
    ``+ bi`` once per further sample, while it has samples ``left``: the running sums of one row
    ``[v, bi, bi, ...]`` per participant (``np.cumsum`` along a row adds in order, as the merge
    does), so each row is one participant's times and the cells at or below ``cut`` (its times
    only grow) within ``left`` are its pairs.
    """
    if not len(owners):
        return vals, idx
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        steps = np.floor((cut - v) / bi)  # about how many pairs follow the first
    estimate = float(np.max(np.minimum(steps, left)))
    if not estimate >= 0 or len(owners) * (min(estimate, _MAX_MERGE_STEPS) + 2) > _MAX_MERGE_CELLS:
        return None
    width = int(min(estimate, _MAX_MERGE_STEPS)) + 2  # column j: the time after j more samples
    table = np.empty((len(owners), width))
    table[:, 0] = v
    table[:, 1:] = bi[:, None]
    times = np.cumsum(table, axis=1)
    pairs = times <= cut
    if int(left.min()) < width - 1:  # some row runs out of samples within the table
        pairs &= np.arange(width) <= left[:, None]
    if width > _MAX_MERGE_STEPS and pairs[:, _MAX_MERGE_STEPS:].any():
        return "heap"  # the merge's last step still finds a pair: it gives up
    if pairs[:, -1].any():
        return None  # the estimate fell short
    rows, cols = np.nonzero(pairs[:, 1:])
    return np.concatenate([vals, times[rows, cols + 1]]), np.concatenate([idx, owners[rows]])
