"""This round's proposed split: the option's solver applied to the estimates, before the deadband.

Contract
--------
:func:`propose` returns a :class:`Proposal`: the integer quotas of the controller's option for
the participants of one ``allocate`` (each group's quotas sum exactly to its budget, within
``[lo, hi]``), the function that predicts the option's objective under any split of them (what
the gain deadband compares) and, for the affine weighted split, a lower bound of that objective
that needs no integer rounding (the split is then solved only when the deadband asks for it).
The paper's split (``objective="weighted"`` with per-sample costs or the Equal weights, and
every option while nothing is measured) is ``n_i ∝ 1/c_i`` per group
(``flwr_adaptive.split.bounded_split``); the affine weighted split equalises ``A_i + B_i·n_i``
per group and ``"min-energy"`` minimises the round's energy within the makespan slack
(``flwr_adaptive.solver``). It changes nothing: neither the store nor the committed split.

Cost
----
The paper's split: O(P) when no bound binds, O(P log P) otherwise, plus one loop over groups.
The affine and min-energy splits: those of ``flwr_adaptive.solver`` (O(P log P) per group).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from flwr_adaptive.deadband import Predicted
from flwr_adaptive.estimates import EstimateStore, median
from flwr_adaptive.limits import ParticipantId
from flwr_adaptive.makespan import slowest_at_lower_bound
from flwr_adaptive.solver import (
    makespan_lower_bound,
    min_energy_split,
    min_makespan_of_groups,
    min_makespan_split,
    round_energy,
    round_energy_lower_bound,
)
from flwr_adaptive.split import bounded_split, check_fits, group_makespans

__all__ = ["propose", "Proposal"]


def propose(
    store: EstimateStore,
    participants: Sequence[ParticipantId],
    slots: np.ndarray,
    known: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    codes: np.ndarray,
    names: list[Hashable],
    budgets: list[int],
    *,
    objective: str,
    w_time: float,
    w_energy: float,
    slack: float,
    fixed_s: Mapping[ParticipantId, float],
    idle_w: Mapping[ParticipantId, float],
) -> Proposal:
    """The option's split of ``budgets`` among ``participants`` and its predicted objective.

    ``codes`` holds each participant's group index into ``names`` / ``budgets``; ``known``
    marks the participants with a fresh estimate; ``fixed_s`` and ``idle_w`` are the
    per-participant seconds beyond the reported compute and idle watts (missing: 0 s, the
    median watts). Raises ``ValueError`` when a group's bounds cannot hold its budget.
    """
    if not known.any() or (objective == "weighted" and (store.cost_model == "per-sample" or w_time == w_energy == 0)):
        # the paper's split (and, with nothing measured yet, the equal split for every option)
        cost = store.weighted_cost(slots, known, w_time, w_energy)
        weight = 1.0 / cost
        quotas = np.zeros(len(participants), dtype=np.int64)
        if len(names) == 1:
            if len(participants):
                quotas = bounded_split(budgets[0], weight, lo, hi, names[0])
        else:
            for k, g in enumerate(names):
                idx = np.flatnonzero(codes == k)
                quotas[idx] = bounded_split(budgets[k], weight[idx], lo[idx], hi[idx], g)
        fixed = np.zeros(len(participants))
        return Proposal(quotas, lambda q: group_makespans(fixed, cost, q, codes, len(budgets)))
    # the options beyond the paper
    for k, g in enumerate(names):
        idx = codes == k
        check_fits(budgets[k], lo[idx], hi[idx], g)
    a, b, c, d = store.model(slots, known, int(sum(budgets)))
    if fixed_s:  # what the server waits for beyond the compute: part of the fixed term
        a = a + np.array([fixed_s.get(p, 0.0) for p in participants], dtype=float)
    if objective == "weighted":  # the weighted cost, affine: equalise A_i + B_i·n_i
        A, B = weighted_affine(a, b, c, d, w_time, w_energy)
        # one group: its members are everyone (no gather); else each group's indices
        members: list[slice | np.ndarray] = (
            [slice(None)] if len(names) == 1 else [np.flatnonzero(codes == k) for k in range(len(names))]
        )

        def solve() -> np.ndarray:
            quotas = np.zeros(len(slots), dtype=np.int64)
            for k, idx in enumerate(members):
                quotas[idx] = min_makespan_split(budgets[k], A[idx], B[idx], lo[idx], hi[idx])[0]
            return quotas

        def bound(enough: Callable[[np.ndarray], bool] | None = None) -> np.ndarray:
            # each group's makespan under the split, from below: its slowest participant at lo
            # first, the continuous root only when that is not enough
            slowest = np.array([slowest_at_lower_bound(A[i], B[i], lo[i]) for i in members])
            if enough is not None and enough(slowest):
                return slowest
            return np.array(
                [
                    makespan_lower_bound(budgets[k], A[i], B[i], lo[i], hi[i], s)
                    for k, (i, s) in enumerate(zip(members, slowest.tolist()))
                ]
            )

        return Proposal(solve, lambda q: group_makespans(A, B, q, codes, len(budgets)), bound)
    # min-energy
    if np.isnan(d).all():  # no energy figures anywhere: the minimum makespan (Time-only)
        c, d, idle, slack = np.zeros(len(slots)), np.zeros(len(slots)), np.zeros(len(slots)), 0.0
    elif not idle_w:  # no idle watts set (the common case): the loop below gives these zeros
        idle = np.zeros(len(slots))
    else:
        given = [idle_w.get(p) for p in participants]
        known_idle = [w for w in given if w is not None]
        fill = float(np.median(known_idle)) if known_idle else 0.0
        idle = np.array([fill if w is None else w for w in given], dtype=float)
    t_min = min_makespan_of_groups(budgets, codes, a, b, lo, hi)
    t_limit = (1.0 + slack) * t_min

    def predicted(q: np.ndarray) -> np.ndarray:
        T, E = round_energy(q, a, b, c, d, idle)
        return np.array([E, max(T, t_limit) if math.isfinite(t_limit) else 0.0])

    def sweep() -> np.ndarray:
        return min_energy_split(budgets, codes, a, b, c, d, idle, lo, hi, slack, t_min=t_min)[0]

    def energy_bound(enough: Callable[[np.ndarray], bool] | None = None) -> np.ndarray:
        # the round's energy from below (no sweep), and its time term's floor: the slack's limit;
        # the bound without a sort first, the sorted fill's only when that is not enough
        floor = t_limit if math.isfinite(t_limit) else 0.0
        cheap = np.array(
            [round_energy_lower_bound(budgets, codes, a, b, c, d, idle, lo, hi, t_min, slack, False), floor]
        )
        if enough is not None and enough(cheap):
            return cheap
        return np.array([round_energy_lower_bound(budgets, codes, a, b, c, d, idle, lo, hi, t_min, slack), floor])

    return Proposal(sweep, predicted, energy_bound)


def weighted_affine(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, w_time: float, w_energy: float
) -> tuple[np.ndarray, np.ndarray]:
    """The weighted cost of affine models as ``A_i + B_i·n``: each term over its median per-sample cost."""
    A, B = np.zeros(len(a)), np.zeros(len(a))
    if w_time > 0:
        scale = median(b)
        A, B = A + w_time * a / scale, B + w_time * b / scale
    if w_energy > 0:
        if np.isnan(d).any():
            raise ValueError(
                "energy is unmeasured for some participants but w_energy > 0: report "
                "energy_j from every participant or use a policy with w_energy=0"
            )
        scale = median(d)
        if not scale > 0:
            raise ValueError(
                f"median energy per sample is {scale!r} (must be > 0 to normalise); check the reports or set w_energy=0"
            )
        A, B = A + w_energy * c / scale, B + w_energy * d / scale
    return A, B


class Proposal:
    """This round's proposed split (``split()``) and the function that predicts the option's
    objective under any split (``predicted``).

    The affine weighted split is solved only when asked for: while the gain deadband keeps the
    committed split, the comparison with a lower bound of the proposal's objective (``bound()``,
    per entry of ``predicted``) settles it, and the integer rounding is never done. Every other
    option's split is solved at once (``split`` is then the array itself).
    """

    def __init__(
        self,
        split: np.ndarray | Callable[[], np.ndarray],
        predicted: Predicted,
        bound: Callable[[Callable[[np.ndarray], bool] | None], np.ndarray] | None = None,
    ) -> None:
        self._quotas = split if isinstance(split, np.ndarray) else None
        self._solve = split
        self.predicted = predicted
        self._bound = bound

    def split(self) -> np.ndarray:
        """The proposed integer quotas (solved on the first call)."""
        if self._quotas is None:
            solve = self._solve
            assert callable(solve)
            self._quotas = solve()
        return self._quotas

    def bound(self, enough: Callable[[np.ndarray], bool] | None = None) -> np.ndarray | None:
        """Values at or below ``predicted(split())`` entry by entry, without solving; ``None``: none
        known. ``enough(values)``: whether cheaper values already serve (then they may be returned)."""
        return None if self._bound is None else self._bound(enough)
