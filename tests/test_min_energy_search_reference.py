"""Min-energy past the sweep's step limit, through the controller: the quotas of a plain reference.

Budgets whose sweep would move more than ``solver.MAX_SWEEP_STEPS`` samples leave the sweep for a
golden-section search over round lengths (``solver._search_rest``). That search was made faster
(the fill's gathers done once, each round length priced from the participants up to each group's
marginal, a length asked twice priced once, the unconstrained lower bound's order reused) with
"the same quotas" claimed; the digests of ``tests/test_controller_equivalence.py`` reach it only
without a slack. Here whole closed loops of the ``min-energy`` policy (slack 10 %, one group: the
vectorised sweep; two groups: the heap), with idle power and a step change, are run once as
they are and once with the search replaced by the straightforward version it replaced: every
round length priced by a full greedy fill, the unconstrained bound's order by a stable argsort
of each group's marginal energies. Every round's quotas must be the same.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_adaptive import solver
from flwr_adaptive.controller import AllocationController, Report


def _reference_search_rest(
    T_prev, T_max, idle_total, best_F, best_T, energy_lower, budgets, by_g, codes, order, g, a, b, lo, hi
):
    """``solver._search_rest`` as it was before the speed work (c567d41), on plain parts."""
    members = [np.flatnonzero(codes == k) for k in range(len(budgets))]
    by_g_ref = [idx[np.argsort(g[idx], kind="stable")] for idx in members]  # increasing g, ties by index
    limit = T_max
    if idle_total > 0:
        limit = min(limit, (best_F - energy_lower) / idle_total)
    else:
        n = solver._lower_bound_split(budgets, by_g_ref, g, lo, hi)
        with np.errstate(over="ignore", invalid="ignore"):
            limit = min(limit, float(np.max(a + b * n.astype(float))))
    T_hi = max(T_prev, limit)

    def energy_at(t: float) -> float:
        return float((g * solver._greedy_at(t, budgets, codes, order, a, b, lo, hi)).sum()) + idle_total * t

    for t in (solver._golden_search(energy_at, T_prev, T_hi), T_hi):
        F_t = energy_at(t)
        if F_t < best_F:
            best_F, best_T = F_t, t
    return best_F, best_T


def closed_loop(seed: int, participants: int, budget: int, groups: bool, idle: bool, rounds: int = 8) -> list:
    """Every round's quotas of the ``min-energy`` policy on a seeded fleet with fixed costs, 3 %
    jitter and a 2x step change in a third of the devices at round 4."""
    rng = np.random.default_rng(seed)
    ids = [f"n{i}" if i % 2 else i for i in range(participants)]
    b = rng.lognormal(-9, 1, participants)
    a = b * 2000 * rng.uniform(0, 1, participants)
    watts = rng.lognormal(np.log(5), 0.5, participants)
    if groups:
        ctrl = AllocationController.from_policy(
            "min-energy",
            {"g0": budget // 2, "g1": budget - budget // 2},
            groups={p: f"g{i % 2}" for i, p in enumerate(ids)},
        )
    else:
        ctrl = AllocationController.from_policy("min-energy", budget)
    if idle:
        for i in range(0, participants, 3):
            ctrl.set_idle_power(ids[i], float(watts[i] * 0.3))
    out = []
    for r in range(rounds):
        q = ctrl.allocate(ids)
        out.append([q[p] for p in ids])
        if r == 4:
            b[: participants // 3] *= 2.0
        for i, p in enumerate(ids):
            t = (a[i] + b[i] * q[p]) * (1 + 0.03 * rng.standard_normal())
            ctrl.observe(p, Report(time_s=float(t), energy_j=float(t * watts[i]), samples=int(q[p])))
    return out


@pytest.mark.parametrize(
    ("seed", "participants", "budget", "groups", "idle"),
    [
        (1, 30, 2_000_000, False, True),
        (2, 30, 2_000_000, True, True),
        (3, 200, 5_000_000, False, False),
        (4, 200, 5_000_000, True, False),
        (5, 1_500, 9_000_000, False, True),
        (6, 4_000, 20_000_000, True, False),
    ],
)
def test_min_energy_past_the_step_limit_gives_the_reference_search_s_quotas(
    seed, participants, budget, groups, idle, monkeypatch
):
    # Prepare: count the searches (the path under test must be taken)
    searches = []
    search = solver._search_rest

    def counted(*args):
        searches.append(1)
        return search(*args)

    monkeypatch.setattr(solver, "_search_rest", counted)
    # Execute: the loop as it is, then with the reference search
    got = closed_loop(seed, participants, budget, groups, idle)
    monkeypatch.setattr(solver, "_search_rest", _reference_search_rest)
    want = closed_loop(seed, participants, budget, groups, idle)
    # Assert: the search ran in most rounds, and every round's quotas are the reference's (red
    # when _Fill.total prices the blocks after its first wrongly, or carries its running sum
    # off by one: the 1,500 and 4,000 participants' marginals lie past the first block)
    assert len(searches) >= 5
    assert got == want
