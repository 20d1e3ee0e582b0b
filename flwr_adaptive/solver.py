"""Exact integer splits of a sample budget for affine per-participant costs.

Contract
--------
Participant ``i`` processing ``n_i`` samples takes ``t_i(n) = a_i + b_i·n`` seconds (``a_i ≥ 0``,
``b_i > 0``) and spends ``e_i(n) = c_i + d_i·n`` joules of active energy; while it waits for the
slowest participant of the round it draws ``p_i ≥ 0`` idle watts. Every participant takes part
in the round (its fixed cost ``a_i`` counts even at ``n_i = 0``). Quotas are integers with
``lo_i ≤ n_i ≤ hi_i`` and, per group ``g``, ``Σ_{i∈g} n_i = budget_g`` exactly. The round's
makespan is ``T = max_i t_i(n_i)`` over all groups (the round ends when the last one finishes).

- :func:`min_makespan_split` minimises ``T`` for one group (``flwr_adaptive.makespan``,
  re-exported here with :func:`makespan_lower_bound` and :func:`caps_at`).
- :func:`min_energy_split` minimises the round's energy
  ``E = Σ_i e_i(n_i) + p_i·(T − t_i(n_i))`` subject to ``T ≤ (1 + slack)·T_min``, where ``T_min``
  is the smallest makespan any split reaches. ``slack=0`` is the minimum makespan (the energy
  decides only among its ties), ``slack=inf`` is unconstrained minimum energy.
- :func:`round_energy` evaluates ``(T, E)`` of any split.

Cost
----
``min_makespan_split``: see ``flwr_adaptive.makespan`` (O(P log P) at most). ``min_energy_split``:
one ``min_makespan_split`` per group, a sort by marginal energy, then the sweep over the round lengths
at which a sample moves away from the minimum-makespan split (at most the budget, in practice the
few percent of it that the slack allows). With one group (the common case) the sweep runs an
epoch at a time (``flwr_adaptive.sweep``: the events generated and sorted at once, a few array
operations per change of the marginal participant, O(M log M) for M moves); with several groups
one heap step per moved sample, O((P + M) log P). Beyond :data:`MAX_SWEEP_STEPS` steps (budgets of
millions) the sweep stops and a golden-section search over the rest of the round lengths finishes
(100 greedy fills, O(P log P) each): exact up to then, within a sample's rounding after (at such
budgets within 1e-5 of the energy in the tests); without it a budget of 10 million took 9 s.

Why it is exact: for a fixed round length ``T`` each participant can take at most
``cap_i(T) = min(hi_i, ⌊(T − a_i)/b_i⌋)`` samples, and ``E = const + Σ g_i·n_i + (Σ p)·T`` with
the marginal energy ``g_i = d_i − p_i·b_i`` (a sample adds its active joules and shortens the
participant's idle wait). For fixed ``T`` the integer minimum of a linear objective under box
constraints and one sum is the greedy fill in increasing ``g_i`` order. That minimum only changes
when some ``cap_i`` grows, i.e. at ``T = a_i + b_i·k``; between those events ``E`` grows with
``T``. So sweeping ``T`` upwards from ``T_min`` through the events that can move a sample, and
keeping the best, visits the optimum.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from flwr_adaptive.limits import exact_sum
from flwr_adaptive.makespan import _ABS, _REL, cap_bounds, caps_at, makespan_lower_bound, min_makespan_split
from flwr_adaptive.sweep import sweep_one_group

__all__ = [
    "min_makespan_split",
    "makespan_lower_bound",
    "min_energy_split",
    "min_makespan_of_groups",
    "round_energy",
    "round_energy_lower_bound",
    "caps_at",
]

#: Samples :func:`min_energy_split` moves one by one before it searches the round length instead.
MAX_SWEEP_STEPS = 50_000


def round_energy(
    n: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, idle_w: np.ndarray
) -> tuple[float, float]:
    """``(makespan, active + idle energy)`` of the split ``n`` for one synchronised round."""
    n = np.asarray(n, dtype=float)
    t = a + b * n
    T = float(t.max()) if len(t) else 0.0
    return T, float(np.sum(c + d * n) + np.sum(idle_w * (T - t)))


def min_energy_split(
    budgets: list[int],
    codes: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    d: np.ndarray,
    idle_w: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    slack: float,
    t_min: float | None = None,
) -> tuple[np.ndarray, float]:
    """Integer quotas minimising the round's active + idle energy within the makespan slack.

    Parameters
    ----------
    budgets : list of int
        Budget of each group; ``codes[i]`` is participant ``i``'s group index.
    codes : np.ndarray
        Group index of each participant.
    a, b : np.ndarray
        Time model ``t_i(n) = a_i + b_i·n`` (``a ≥ 0``, ``b > 0``).
    c, d : np.ndarray
        Active energy model ``e_i(n) = c_i + d_i·n``.
    idle_w : np.ndarray
        Idle watts of each participant while it waits for the slowest.
    lo, hi : np.ndarray
        Integer bounds (``Σlo ≤ budget_g ≤ Σhi`` per group, checked by the caller).
    slack : float
        ``T ≤ (1 + slack)·T_min``; ``0`` is the minimum makespan, ``inf`` no constraint.
    t_min : float, optional
        ``min_makespan_of_groups`` of the same arguments, when already computed.

    Returns
    -------
    tuple
        The quotas and ``T_min``, the smallest makespan of any split.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    P = len(a)
    if P == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    # 1. The minimum makespan over all groups (the round ends with its slowest group).
    members = [np.flatnonzero(codes == k) for k in range(len(budgets))]
    T_min = _min_makespan(budgets, members, a, b, lo, hi) if t_min is None else t_min
    T_max = math.inf if math.isinf(slack) else T_min * (1.0 + slack) * (1.0 + _REL) + _ABS
    idle_total = float(np.sum(idle_w))
    g = np.asarray(d, dtype=float) - np.asarray(idle_w, dtype=float) * b  # marginal energy per sample

    # 2. Greedy fill at T_min, per group in increasing g (ties by index): prefix at cap,
    #    one marginal participant partly filled, the rest at lo.
    # by group, then g, then index (one group: a stable sort of g is that order, at a third of the cost)
    order = np.argsort(g, kind="stable") if len(budgets) == 1 else np.lexsort((np.arange(P), g, codes))
    pos = np.empty(P, dtype=np.int64)
    n = _greedy_at(T_min, budgets, codes, order, a, b, lo, hi)
    cap = caps_at(T_min, a, b, lo, hi)
    group_start = np.searchsorted(codes[order], np.arange(len(budgets)), side="left")
    pos[order] = np.arange(P)
    # the marginal of each group: the last participant (in order) above its lower bound
    marginal = np.full(len(budgets), -1, dtype=np.int64)
    for k, idx in enumerate(members):
        above = idx[n[idx] > lo[idx]]
        if len(above):
            marginal[k] = int(above[np.argmax(pos[above])])

    # 3. Sweep T upwards through the cap events of participants before their group's marginal.
    #    One group: an epoch at a time (flwr_adaptive.sweep, the same result bit for bit).
    #    Several: one heap step per moved sample, the loop on Python lists (numpy scalars cost
    #    several times more per step).
    # each group's members in order (increasing g, ties by index): what a stable argsort of g gives
    by_g = [order[s:e] for s, e in zip(group_start.tolist(), [*group_start[1:].tolist(), P])]
    energy_lower = _lower_bound(budgets, by_g, g, lo, hi)  # Σ g·n with caps = hi
    best_F = float(np.dot(g, n)) + idle_total * T_min
    best_T = T_min
    F = best_F
    mpos = np.where(marginal >= 0, pos[np.maximum(marginal, 0)], -1)[codes]  # position of i's marginal
    start = np.flatnonzero((cap < hi) & (marginal[codes] >= 0) & (pos < mpos))
    swept = None
    if len(budgets) == 1 and marginal[0] >= 0:  # one group: the sweep an epoch at a time (sweep.py)
        swept = sweep_one_group(
            T_min,
            T_max,
            idle_total,
            energy_lower,
            best_F,
            a,
            b,
            g,
            lo,
            hi,
            cap,
            n,
            order,
            pos,
            int(marginal[0]),
            start,
            MAX_SWEEP_STEPS,
        )
    if swept is not None:
        best_F, best_T, T_prev, limited = swept
        if limited:
            best_F, best_T = _search_rest(
                T_prev, T_max, idle_total, best_F, best_T, energy_lower, budgets, by_g, codes, order, g, a, b, lo, hi
            )
        return _greedy_at(best_T, budgets, codes, order, a, b, lo, hi), T_min
    heap = list(zip((a[start] + b[start] * (cap[start] + 1)).tolist(), start.tolist()))
    heapq.heapify(heap)
    T_prev = T_min
    n_sweep = n.tolist()
    cap_l, hi_l, lo_l, b_l, g_l = cap.tolist(), hi.tolist(), lo.tolist(), b.tolist(), g.tolist()
    pos_l, codes_l, order_l, marginal_l = pos.tolist(), codes.tolist(), order.tolist(), marginal.tolist()
    group_start_l = group_start.tolist()
    steps = 0
    while heap:
        steps += 1
        if steps > MAX_SWEEP_STEPS:  # a huge budget: search the round length instead (see Cost)
            best_F, best_T = _search_rest(
                T_prev, T_max, idle_total, best_F, best_T, energy_lower, budgets, by_g, codes, order, g, a, b, lo, hi
            )
            break
        T, i = heapq.heappop(heap)
        if T > T_max or idle_total * T + energy_lower >= best_F - 1e-12 * abs(best_F):
            break
        k = codes_l[i]
        m = marginal_l[k]
        if m < 0 or pos_l[i] >= pos_l[m]:
            continue  # i is no longer cheaper than its group's marginal: its caps never matter again
        cap_l[i] += 1
        if cap_l[i] < hi_l[i]:
            heapq.heappush(heap, (T + b_l[i], i))
        # i was at its cap (everything before the marginal is): one sample moves m -> i.
        n_sweep[i] += 1
        n_sweep[m] -= 1
        F += (g_l[i] - g_l[m]) + idle_total * (T - T_prev)
        T_prev = T
        if n_sweep[m] == lo_l[m]:
            # the marginal moves back to the previous participant of the group above its bound
            p = pos_l[m] - 1
            first = group_start_l[k]
            while p >= first and n_sweep[order_l[p]] <= lo_l[order_l[p]]:
                p -= 1
            marginal_l[k] = order_l[p] if p >= first else -1
        if F < best_F - 1e-12 * abs(best_F):
            best_F, best_T = F, T
    return _greedy_at(best_T, budgets, codes, order, a, b, lo, hi), T_min


def _min_makespan(
    budgets: list[int], members: list[np.ndarray], a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> float:
    T_min = 0.0
    if len(members) == 1 and len(members[0]) == len(a):
        # one group of everyone (the common case): its members in index order are the arrays themselves
        return max(T_min, min_makespan_split(budgets[0], a, b, lo, hi)[1]) if len(a) else T_min
    for k, idx in enumerate(members):
        if len(idx):
            _, T_k = min_makespan_split(budgets[k], a[idx], b[idx], lo[idx], hi[idx])
            T_min = max(T_min, T_k)
    return T_min


def min_makespan_of_groups(
    budgets: list[int], codes: np.ndarray, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> float:
    """``T_min`` of :func:`min_energy_split`: the smallest makespan of any split (over groups)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    lo, hi, codes = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64), np.asarray(codes, dtype=np.int64)
    if len(budgets) == 1:  # one group holds everyone (codes are group indices): no member list
        return _min_makespan(budgets, [np.arange(len(a))], a, b, lo, hi)
    return _min_makespan(budgets, [np.flatnonzero(codes == k) for k in range(len(budgets))], a, b, lo, hi)


def round_energy_lower_bound(
    budgets: list[int],
    codes: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    d: np.ndarray,
    idle_w: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    t_min: float,
    slack: float,
    sort: bool = True,
) -> float:
    """A value at or below ``round_energy(n, ...)``'s energy for every split ``n`` within the
    slack (so below :func:`min_energy_split`'s), without the sweep; ``-inf`` without a finite slack.
    ``sort=False``: the cheaper, lower value that takes each group's samples above ``lo`` at its
    least ``g`` (no sort: O(P); the same as the sorted fill where no upper bound binds).

    ``E = Σc − Σp·a + Σ g·n + (Σp)·T`` with ``g = d − p·b``: ``Σ g·n`` is at least its minimum
    with no makespan limit (the greedy fill in increasing ``g``) and ``T`` at least ``T_min``
    (``p ≥ 0``). Lowered by more than the float error of either side: ``(1e-9 + 8·P·2⁻⁵³)`` times
    a bound on the magnitude of every term they sum (``Σ|c| + Σp·|a| + budget·max(|d| + p·b) +
    (Σp)·T_max``). O(P log P) (the sort by ``g``).
    """
    if not math.isfinite(slack) or not len(a):
        return -math.inf
    a, b, c, d = (np.asarray(x, dtype=float) for x in (a, b, c, d))
    idle = np.asarray(idle_w, dtype=float)
    lo, hi, codes = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64), np.asarray(codes, dtype=np.int64)
    g = d - idle * b
    if sort:
        order = np.argsort(g, kind="stable") if len(budgets) == 1 else np.lexsort((np.arange(len(a)), g, codes))
        starts = np.searchsorted(codes[order], np.arange(len(budgets)), side="left").tolist()
        least = _lower_bound(budgets, [order[s:e] for s, e in zip(starts, [*starts[1:], len(a)])], g, lo, hi)
    else:  # Σ g·n ≥ Σ g·lo + (least g of the group)·(samples above lo)
        groups = [slice(None)] if len(budgets) == 1 else [codes == k for k in range(len(budgets))]
        least = float(np.sum(g * lo))
        for k, members in enumerate(groups):
            if (gk := g[members]).size:
                least += float(gk.min()) * (budgets[k] - exact_sum(lo[members]))
    idle_total = float(np.sum(idle))
    with np.errstate(over="ignore", invalid="ignore"):
        bound = float(np.sum(c) - np.sum(idle * a)) + least + idle_total * t_min
        t_max = t_min * (1.0 + slack) * (1.0 + _REL) + _ABS
        size = float(np.sum(np.abs(c)) + np.sum(idle * np.abs(a)))
        size += float(sum(budgets)) * float(np.max(np.abs(d) + idle * b)) + idle_total * abs(t_max)
        lowered = bound - (1e-9 + 8.0 * len(a) * 2.0**-53) * size
    return lowered if math.isfinite(lowered) else -math.inf


def _search_rest(
    T_prev: float,
    T_max: float,
    idle_total: float,
    best_F: float,
    best_T: float,
    energy_lower: float,
    budgets: list[int],
    by_g: list[np.ndarray],
    codes: np.ndarray,
    order: np.ndarray,
    g: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> tuple[float, float]:
    """Past the sweep's step limit: the best of a golden-section search over the round lengths
    that are left and of the slack's limit, against the sweep's best so far.

    Each round length is priced by :meth:`_Fill.total` (the participants up to each group's
    marginal only), the same value as a full fill; one asked for twice is priced once.
    """
    T_hi = max(T_prev, _search_limit(T_max, idle_total, best_F, energy_lower, budgets, by_g, g, a, b, lo, hi))
    fill = _Fill(budgets, codes, order, a, b, lo, hi, g)
    totals: dict[float, float] = {}

    def energy_at(t: float) -> float:
        if t not in totals:
            totals[t] = fill.total(t)
        return totals[t] + idle_total * t

    # the slack's limit is where the optimum often sits: compare it with the search's pick
    for t in (_golden_search(energy_at, T_prev, T_hi), T_hi):
        F_t = energy_at(t)
        if F_t < best_F:
            best_F, best_T = F_t, t
    return best_F, best_T


def _search_limit(
    T_max: float,
    idle_total: float,
    best_F: float,
    energy_lower: float,
    budgets: list[int],
    by_g: list[np.ndarray],
    g: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> float:
    """The longest round that can still beat ``best_F``: the slack's limit, the idle draw's
    break-even, and (no idle draw) the round of the unconstrained energy minimum."""
    limit = T_max
    if idle_total > 0:
        limit = min(limit, (best_F - energy_lower) / idle_total)
    else:  # energy never grows with T: the unconstrained greedy's own round is the far end
        n = _lower_bound_split(budgets, by_g, g, lo, hi)
        with np.errstate(over="ignore", invalid="ignore"):
            limit = min(limit, float(np.max(a + b * n.astype(float))))
    return limit


def _golden_search(f: Callable[[float], float], lo: float, hi: float, iterations: int = 100) -> float:
    """The argmin of ``f`` on ``[lo, hi]`` by golden-section search (``f`` is convex in the
    continuous relaxation; integer rounding makes it so only to within a sample)."""
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(iterations):
        if hi - lo <= 1e-12 * max(1.0, abs(hi)):
            break
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - ratio * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + ratio * (hi - lo)
            f2 = f(x2)
    return x1 if f1 <= f2 else x2


def _greedy_at(
    T: float,
    budgets: list[int],
    codes: np.ndarray,
    order: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """Each group's budget filled in ``order`` up to ``caps_at(T)``, starting from ``lo``."""
    cap = caps_at(T, a, b, lo, hi)
    n = lo.copy()
    sorted_codes = codes[order]
    room = (cap - lo)[order]
    for k, budget in enumerate(budgets):
        s, e = np.searchsorted(sorted_codes, [k, k + 1], side="left")
        if s == e:
            continue
        left = budget - int(lo[order[s:e]].sum())
        cum = np.cumsum(room[s:e])
        take = np.minimum(room[s:e], np.maximum(left - (cum - room[s:e]), 0))
        if int(take.sum()) != left:
            raise AssertionError(f"round length {T!r} cannot hold group {k}'s budget {budget}")
        n[order[s:e]] += take
    return n


#: Participants of the first block :meth:`_Fill.total` fills (each next block 4 times larger).
_FIRST_FILL_BLOCK = 1024


class _Fill:
    """:func:`_greedy_at` at many round lengths, the same quotas: what does not depend on the round
    length (costs and bounds in ``order``, each group's range in it and what its budget leaves
    above the lower bounds) gathered once, so one call is the caps, one pass per group and one
    scatter back (the search calls it ~60 times; the gathers were a third of each call)."""

    def __init__(
        self,
        budgets: list[int],
        codes: np.ndarray,
        order: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        g: np.ndarray | None = None,
    ) -> None:
        self.order, self.lo = order, lo
        self.a, self.b, self.lo_o, self.hi_o = a[order], b[order], lo[order], hi[order]
        self.bounds = cap_bounds(self.lo_o, self.hi_o)
        sorted_codes = codes[order]
        self.groups = []
        for k, budget in enumerate(budgets):
            s, e = (int(x) for x in np.searchsorted(sorted_codes, [k, k + 1], side="left"))
            if s < e:
                self.groups.append((k, budget, s, e, budget - int(self.lo_o[s:e].sum())))
        if g is not None:
            self.g_o = g[order]
            self.at_lo = g * lo  # each participant's term of Σ g·n while it sits at lo
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                # Σ (T + |a|)/b bounds the sum of all rooms above lo (see total)
                self.inv_b, self.a_over_b = float(np.sum(1.0 / b)), float(np.sum(np.abs(a) / b))

    def caps(self, T: float) -> np.ndarray:
        """``caps_at(T)`` of the participants in order."""
        return caps_at(T, self.a, self.b, self.lo_o, self.hi_o, self.bounds)

    def at(self, T: float) -> np.ndarray:
        """``_greedy_at(T, ...)`` of the arguments given at construction."""
        room = self.caps(T) - self.lo_o
        n_o = self.lo_o.copy()
        for k, budget, s, e, left in self.groups:
            r = room[s:e]
            take = np.minimum(r, np.maximum(left - (np.cumsum(r) - r), 0))
            if int(take.sum()) != left:
                raise AssertionError(f"round length {T!r} cannot hold group {k}'s budget {budget}")
            n_o[s:e] += take
        n = np.empty_like(self.lo)
        n[self.order] = n_o  # every participant is in one group: all of n is written
        return n

    def total(self, T: float) -> float:
        """``float((g * _greedy_at(T, ...)).sum())``, the same value, filling each group only up
        to its marginal participant: the ones after it sit at ``lo`` (their terms are ``g·lo``,
        computed once), and the sum runs over the same terms in the same places.

        The running sum of the rooms is taken a block at a time (a carry between blocks: int64
        sums are the same however they are grouped) and stops once it covers the budget, where
        no sum of all caps can overflow int64 (else the whole group at once, as the full fill)."""
        terms = self.at_lo.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            most = (abs(T) * self.inv_b + self.a_over_b) * (1.0 + 1e-6) + len(self.lo) + 1.0
        early = bool(most < 2.0**62)
        for k, budget, s, e, left in self.groups:
            given, carry, start, size = 0, np.int64(0), s, _FIRST_FILL_BLOCK if early else e - s
            while start < e:
                stop = min(start + size, e)
                part = slice(start, stop)
                bounds = (self.bounds[0][part], self.bounds[1][part])
                r = caps_at(T, self.a[part], self.b[part], self.lo_o[part], self.hi_o[part], bounds) - self.lo_o[part]
                cum = np.cumsum(r) + carry
                take = np.minimum(r, np.maximum(left - (cum - r), 0))
                given += int(take.sum())
                terms[self.order[part]] = self.g_o[part] * (self.lo_o[part] + take)
                carry, start, size = cum[-1], stop, 4 * size
                if early and carry >= left:
                    break  # everyone after takes 0: at lo
            if given != left:
                raise AssertionError(f"round length {T!r} cannot hold group {k}'s budget {budget}")
        return float(terms.sum())


def _lower_bound_split(
    budgets: list[int], by_g: list[np.ndarray], g: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """The quotas of ``min Σ g·n`` with no makespan limit: each group (``by_g``: its members in
    increasing ``g``, ties by index) filled in that order."""
    n = lo.astype(np.int64).copy()
    for k, o in enumerate(by_g):
        if not len(o):
            continue
        left = budgets[k] - int(lo[o].sum())
        room = (hi[o] - lo[o]).astype(float)  # float: unbounded rooms would overflow an int64 cumsum
        cum = np.cumsum(room)
        n[o] += np.minimum(room, np.maximum(left - (cum - room), 0.0)).astype(np.int64)  # ≤ left: exact
    return n


def _lower_bound(budgets: list[int], by_g: list[np.ndarray], g: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """``min Σ g·n`` with no makespan limit (every cap at ``hi``): no round length does better."""
    return float(np.dot(g, _lower_bound_split(budgets, by_g, g, lo, hi).astype(float)))
