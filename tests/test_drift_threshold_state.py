"""The noise-scaled drift threshold is part of what a run carries from one round to the next.

The threshold a report is judged by (``EstimateStore.record``) scales with the scatter of the
fits of the last ``allocate`` (``noise_cache``). Whatever does not change the controller must
leave it: a question (``costs`` of a newcomer once reset it, and the later splits changed in 39
of the 88 runs of the loop below), and a save / load between rounds (what a resumed ServerApp
does) must give the quotas of the uninterrupted run.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flwr_adaptive.controller import AllocationController, Report

IDS = [f"n{i}" for i in range(6)]
ROUNDS = 12


def loop(seed: int, at: int | None = None, action: str = "none", policy: str = "time") -> list[tuple[int, ...]]:
    """6 devices with fixed costs and 30 % jitter under ``policy`` (drift detection, affine fits),
    device 0 3x slower from round 8. At round ``at``, before its reports: ``action`` ("costs": ask
    the costs of the participants and a newcomer; "resume": save, JSON, load into a new controller;
    "resume-after": the same after the round's reports). Returns every round's quotas."""
    rng = np.random.default_rng(seed)
    speed = rng.uniform(1, 4, len(IDS))
    ctrl = AllocationController.from_policy(policy, 1200)
    quotas = ctrl.allocate(IDS)
    out = []
    for r in range(ROUNDS):
        if r == at and action == "costs":
            ctrl.costs([*IDS, "newcomer"])
        if r == at and action == "resume":
            ctrl = _reloaded(ctrl, policy)
        for i, p in enumerate(IDS):
            slow = speed[i] * (3.0 if r >= 8 and i == 0 else 1.0)
            t = slow * (0.5 + 0.001 * quotas[p]) * math.exp(0.3 * rng.standard_normal())
            ctrl.observe(p, Report(time_s=float(t), energy_j=float(10 * t), samples=quotas[p]))
        if r == at and action == "resume-after":
            ctrl = _reloaded(ctrl, policy)
        quotas = ctrl.allocate(IDS)
        out.append(tuple(quotas.values()))
    return out


def _reloaded(ctrl: AllocationController, policy: str) -> AllocationController:
    fresh = AllocationController.from_policy(policy, 1200)
    fresh.load_state_dict(json.loads(json.dumps(ctrl.state_dict())))
    return fresh


def test_asking_the_costs_of_a_newcomer_changes_no_later_split():
    # Prepare / Execute: 8 seeds, the question asked before each round's reports
    changed = [(seed, at) for seed in range(8) for at in range(1, ROUNDS) if loop(seed, at, "costs") != loop(seed)]
    # Assert: the same quotas in every round (before the fix: 39 of these 88 runs differed, the
    # question having reset the scatter the next reports' drift threshold is scaled by)
    assert changed == []


@pytest.mark.parametrize("policy", ["time", "min-energy"])
def test_a_state_saved_after_the_rounds_reports_resumes_with_the_uninterrupted_quotas(policy):
    # Prepare / Execute: what the strategies do (save at the end of each round's aggregation)
    changed = [
        at
        for seed in range(4)
        for at in range(ROUNDS)
        if loop(seed, at, "resume-after", policy) != loop(seed, policy=policy)
    ]
    # Assert
    assert changed == []


@pytest.mark.xfail(
    strict=True,
    reason=(
        "known: a state saved between allocate and the round's reports resumes without the last "
        "fits' scatter (noise_cache is not saved and load_state_dict clears it), so the first "
        "reports after it are judged by the bare drift threshold; the strategies save after the "
        "reports and are not affected. Fix in AllocationController.load_state_dict (rebuild the "
        "scatter of the committed split's windows) or save it with the state."
    ),
)
def test_a_state_saved_right_after_allocate_resumes_with_the_uninterrupted_quotas():
    # Prepare / Execute
    changed = [(seed, at) for seed in range(4) for at in range(1, ROUNDS) if loop(seed, at, "resume") != loop(seed)]
    # Assert (today: 20 of these 44 runs differ)
    assert changed == []
