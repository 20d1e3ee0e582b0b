"""The gain deadband's shortcut on a lower bound decides as the plain comparison does.

``CommittedSplit.kept`` keeps the held split when its predicted makespan is within the band of a
*lower bound* of the proposal's (``Proposal.bound``: each group's slowest participant at its
lower bound, then the continuous root lowered by more than its float error; for min-energy, a
lower bound of the round's energy and the slack's limit), so that the affine weighted split (the
min-energy sweep) is solved only when the deadband does not keep. A bound that passes implies the
exact value passes, so every decision, and every quota, must be those of the plain comparison
(the proposal solved every round). Checked on whole closed loops of the affine weighted
policies and min-energy, with groups, bounds, idle power, fixed costs, partial rounds and a step
change, against
``Proposal.bound`` returning ``None`` (no shortcut).
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_adaptive import proposal
from flwr_adaptive.controller import AllocationController, Report


def closed_loop(policy: str, seed: int, rounds: int = 16) -> list:
    rng = np.random.default_rng(seed)
    P = int(rng.integers(3, 60))
    ids = [f"n{i}" if i % 2 else i for i in range(P)]
    b = rng.lognormal(-5, 1, P)
    a = b * 100 * rng.uniform(0, 1, P) * (seed % 2)  # odd seeds: fixed costs
    watts = rng.lognormal(np.log(5), 0.5, P)
    budget = int(rng.integers(P * 10, P * 300))
    jitter = [0.0, 0.02, 0.1][seed % 3]
    if seed % 4 == 1:
        groups = {p: ("g0" if i % 2 else "g1") for i, p in enumerate(ids)}
        ctrl = AllocationController.from_policy(policy, {"g0": budget // 2, "g1": budget - budget // 2}, groups=groups)
    else:
        ctrl = AllocationController.from_policy(policy, budget)
    if seed % 3 == 0:
        for i in range(0, P, 3):
            ctrl.set_idle_power(ids[i], float(watts[i] * 0.3))
    if seed % 5 == 0:
        ctrl.set_max_quota(ids[0], max(1, budget // (2 * P)))
        ctrl.set_min_quota(ids[-1], budget // (3 * P))
    out = []
    for r in range(rounds):
        live = ids if seed % 2 == 0 or r % 4 else ids[1:]
        q = ctrl.allocate(live)
        out.append(sorted((str(k), v) for k, v in q.items()))
        if r == 8:
            b[: P // 3] *= 1.5
        for i, p in enumerate(ids):
            if q.get(p, 0) > 0:
                t = (a[i] + b[i] * q[p]) * (1 + jitter * rng.standard_normal())
                ctrl.observe(p, Report(time_s=float(t), energy_j=float(t * watts[i]), samples=int(q[p])))
    return out


@pytest.mark.parametrize("policy", ["time", "low-energy", "energy", "min-energy"])
def test_the_deadband_s_lower_bound_shortcut_keeps_exactly_when_the_solved_split_would(policy, monkeypatch):
    # Prepare: count how often the shortcut settles a decision without solving the split
    solved = []
    split = proposal.Proposal.split

    def counted(self):
        if self._quotas is None:  # solved now (split() caches its quotas)
            solved.append(1)
        return split(self)

    monkeypatch.setattr(proposal.Proposal, "split", counted)
    # Execute: 30 seeded loops as they are, then with no lower bound (the proposal always solved)
    got = [closed_loop(policy, seed) for seed in range(30)]
    rounds, shortcut_solves = 30 * 16, len(solved)
    monkeypatch.setattr(proposal.Proposal, "bound", lambda self, enough=None: None)
    want = [closed_loop(policy, seed) for seed in range(30)]
    # Assert: the shortcut was taken (fewer solves than rounds), and every quota is the same
    assert shortcut_solves < rounds - 30
    assert got == want
