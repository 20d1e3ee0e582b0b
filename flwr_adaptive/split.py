"""The bounded integer split: integers that sum exactly to a budget, proportional where no bound binds.

Contract
--------
:func:`bounded_split` returns integers ``n`` with ``Σn = budget`` exactly and
``lo ≤ n ≤ hi``, ``n ∝ weight`` wherever no bound binds (the paper's split ``n_i ∝ 1/c_i`` with
``min_quota``/``max_quota``); :func:`check_fits` refuses bounds that cannot hold the budget,
naming the sums; :func:`round_to_budget` is the largest-remainder rounding both use;
:func:`group_makespans` is the predicted makespan of each group under a split (what the gain
deadband compares). The affine and min-energy splits live in ``flwr_adaptive.solver``.

Cost
----
O(P) when no bound binds (the common case); otherwise O(P log P) (a sort of the bounds'
breakpoints and one search over them). Rounding is one argsort, O(P log P).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from flwr_adaptive.limits import ParticipantId, exact_sum

__all__ = ["bounded_split", "check_fits", "group_codes", "group_makespans", "round_to_budget"]


def bounded_split(budget: int, weight: np.ndarray, lo: np.ndarray, hi: np.ndarray, group: Hashable) -> np.ndarray:
    """Integers ``n`` with ``Σn = budget``, ``lo ≤ n ≤ hi`` and ``n ∝ weight`` where no bound binds.

    Solves ``Σ clip(λ·w, lo, hi) = budget`` for λ exactly (the left side is piecewise linear in λ
    with breakpoints ``lo/w`` and ``hi/w``), then rounds by largest remainder.
    """
    lo_sum, hi_sum = check_fits(budget, lo, hi, group)
    if budget == lo_sum:
        return lo.copy()
    if budget == hi_sum:
        return hi.copy()
    lo_f, hi_f = lo.astype(float), hi.astype(float)
    x = weight * (budget / weight.sum())
    if (x >= lo_f).all() and (x <= hi_f).all():
        return round_to_budget(x, budget, lo, hi)  # no bound binds: the common case
    a = lo_f / weight  # below a_i the participant sits at lo_i
    b = hi_f / weight  # above b_i it sits at hi_i
    cand = np.unique(np.concatenate([a, b[np.isfinite(b)]]))
    a_order, b_order = np.argsort(a), np.argsort(b)
    a_sorted, b_sorted = a[a_order], b[b_order]
    lo_cum = np.r_[0.0, np.cumsum(lo_f[a_order])]
    wa_cum = np.r_[0.0, np.cumsum(weight[a_order])]
    hi_cum = np.r_[0.0, np.cumsum(np.where(np.isfinite(b_sorted), hi_f[b_order], 0.0))]
    wb_cum = np.r_[0.0, np.cumsum(weight[b_order])]

    def total(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k_a = np.searchsorted(a_sorted, lam, side="left")  # a_i < λ: above their lower bound
        k_b = np.searchsorted(b_sorted, lam, side="right")  # b_i ≤ λ: at their upper bound
        slope = wa_cum[k_a] - wb_cum[k_b]
        return (lo_cum[-1] - lo_cum[k_a]) + hi_cum[k_b] + lam * slope, slope

    f, _ = total(cand)
    k = int(np.searchsorted(f, budget, side="left"))
    if k < len(cand) and f[k] == budget:
        lam = cand[k]
    elif k == 0:
        lam = cand[0]  # unreachable: f(min a) = Σlo < budget
    else:
        # f is linear on [cand[k-1], cand[k]] (or beyond the last breakpoint): use its slope there.
        lam0 = cand[k - 1]
        _, slope = total(np.array([np.nextafter(lam0, np.inf)]))
        lam = lam0 + (budget - f[k - 1]) / slope[0]
    x = np.clip(lam * weight, lo_f, hi_f)
    return round_to_budget(x, budget, lo, hi)


def group_codes(
    participants: Sequence[ParticipantId], groups: Mapping[ParticipantId, Hashable] | None
) -> tuple[np.ndarray, list[Hashable]]:
    """Group index of each participant and the group names in order of first appearance (one
    group ``None`` without ``groups``); raises naming the participants without a group."""
    if groups is None:
        return np.zeros(len(participants), dtype=np.int64), [None]
    missing = [p for p in participants if p not in groups]
    if missing:
        raise ValueError(f"participants {missing[:5]!r} have no group: add them to groups=")
    names: dict[Hashable, int] = {}
    codes = np.fromiter(
        (names.setdefault(groups[p], len(names)) for p in participants), dtype=np.int64, count=len(participants)
    )
    return codes, list(names)


def check_fits(budget: int, lo: np.ndarray, hi: np.ndarray, group: Hashable) -> tuple[int, int]:
    """``(Σlo, Σhi)``; raises when the bounds cannot hold ``budget``."""
    where = "" if group is None else f"group {group!r}: "
    lo_sum, hi_sum = exact_sum(lo), exact_sum(hi)
    if budget < lo_sum:
        raise ValueError(
            f"{where}budget {budget} is below the sum of min_quota {lo_sum} over "
            f"{len(lo)} participants; lower min_quota or raise the budget"
        )
    if budget > hi_sum:
        raise ValueError(
            f"{where}budget {budget} is above the sum of max_quota {hi_sum} over "
            f"{len(hi)} participants; raise max_quota (or cycle data) or lower the budget"
        )
    return lo_sum, hi_sum


def group_makespans(
    fixed: np.ndarray, per_sample: np.ndarray, quotas: np.ndarray, codes: np.ndarray, groups: int
) -> np.ndarray:
    """``max_{i∈g} fixed_i + per_sample_i·n_i`` of each group (0 for an empty group)."""
    out = np.zeros(groups)
    times = fixed + per_sample * quotas
    if groups == 1:  # ufunc.at is slow: one group is one max
        out[0] = times.max(initial=0.0)
    else:
        np.maximum.at(out, codes, times)
    return out


def round_to_budget(x: np.ndarray, budget: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of ``x`` to integers in ``[lo, hi]`` summing to ``budget``."""
    n = np.clip(np.floor(x + 1e-9).astype(np.int64), lo, hi)
    frac = x - n
    short = budget - exact_sum(n)
    # Usually |short| < len(n) and one pass settles it; float error near MAX_BUDGET may leave
    # more, so whole steps are spread first. Exact whenever Σlo ≤ budget ≤ Σhi.
    while short != 0:
        sign = 1 if short > 0 else -1
        order = np.argsort(-sign * frac, kind="stable")
        room = (hi[order] - n[order]) if sign > 0 else (n[order] - lo[order])
        order, room = order[room > 0], room[room > 0]
        step = abs(short) // len(order)
        if step == 0:
            n[order[: abs(short)]] += sign
            break
        moved = np.minimum(room, step)
        n[order] += sign * moved
        short -= sign * exact_sum(moved)
    return n
