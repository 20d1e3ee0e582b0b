"""The noise-scaled drift threshold is part of what a run carries from one round to the next.

The threshold a report is judged by (``EstimateStore.record``) scales with the scatter of the
fits of the last ``allocate`` (``noise_cache``). Whatever does not change the controller must
leave it: a question (``costs`` of a newcomer once reset it, and the later splits changed in 39
of the 88 runs of the loop below) and a refused ``allocate``; a save / load between rounds (what
a resumed ServerApp does), after the round's reports or right after ``allocate`` (the state then
names the fits whose scatter the next reports need), must give the quotas of the uninterrupted run.
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
    "resume-old" / "resume-null": the same without the scatter's field / with it null;
    "resume-after": the same after the round's reports; "refused": an allocate that fails after
    fitting, before and after the reports). Returns every round's quotas."""
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
        if r == at and action == "resume-old":  # the scatter's field absent (earlier releases)
            ctrl = _reloaded(ctrl, policy, lambda state: state["model"].pop("scatter_slots"))
        if r == at and action == "resume-null":
            ctrl = _reloaded(ctrl, policy, lambda state: state["model"].update(scatter_slots=None))
        if r == at and action == "refused" and r > 0:  # (round 0 before its reports: nothing to fit)
            _refused_allocate(ctrl)
        for i, p in enumerate(IDS):
            slow = speed[i] * (3.0 if r >= 8 and i == 0 else 1.0)
            t = slow * (0.5 + 0.001 * quotas[p]) * math.exp(0.3 * rng.standard_normal())
            ctrl.observe(p, Report(time_s=float(t), energy_j=float(10 * t), samples=quotas[p]))
        if r == at and action == "resume-after":
            ctrl = _reloaded(ctrl, policy)
        if r == at and action == "refused":
            _refused_allocate(ctrl)
        quotas = ctrl.allocate(IDS)
        out.append(tuple(quotas.values()))
    return out


def _reloaded(ctrl: AllocationController, policy: str, edit=None) -> AllocationController:
    state = json.loads(json.dumps(ctrl.state_dict()))
    if edit is not None:
        edit(state)
    fresh = AllocationController.from_policy(policy, 1200)
    fresh.load_state_dict(state)
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


@pytest.mark.parametrize("policy", ["time", "min-energy"])
def test_a_state_saved_right_after_allocate_resumes_with_the_uninterrupted_quotas(policy):
    # Prepare / Execute: the state saved between allocate and the round's reports
    uninterrupted = {seed: loop(seed, policy=policy) for seed in range(4)}
    changed = [
        (seed, at)
        for seed in range(4)
        for at in range(1, ROUNDS)
        if loop(seed, at, "resume", policy) != uninterrupted[seed]
    ]
    # Assert (before the state saved the fits' scatter: 25 of these 44 runs differed, the first
    # reports after the resume judged by the bare drift threshold)
    assert changed == []


def test_a_state_without_the_scatter_field_loads_as_earlier_releases_resumed_it():
    # Prepare / Execute: states saved right after allocate, from which the scatter's field is
    # removed (what releases before it wrote) or set to null (no fits' scatter to carry)
    runs = [(seed, at) for seed in range(4) for at in range(1, ROUNDS)]
    old = {run: loop(*run, action="resume-old") for run in runs}
    null = {run: loop(*run, action="resume-null") for run in runs}
    # Assert: both load, and resume alike: the first reports judged by the bare drift threshold,
    # so some runs leave the uninterrupted quotas (25 of these 44 when this test was written)
    assert old == null
    assert any(old[run] != loop(run[0]) for run in runs)


class _Interrupted(Exception):
    pass


def _refused_allocate(ctrl: AllocationController) -> None:
    """An allocate that fits every window, caches their scatter, then fails (the solver
    interrupted), and the check that it changed nothing: the saved state is the same."""
    import flwr_adaptive.proposal as proposal

    before = json.dumps(ctrl.state_dict(), sort_keys=True)
    real = proposal.weighted_affine, proposal.min_makespan_of_groups

    def interrupted(*args, **kwargs):
        raise _Interrupted

    proposal.weighted_affine = proposal.min_makespan_of_groups = interrupted
    try:
        with pytest.raises(_Interrupted):
            ctrl.allocate(IDS)
    finally:
        proposal.weighted_affine, proposal.min_makespan_of_groups = real
    assert json.dumps(ctrl.state_dict(), sort_keys=True) == before


@pytest.mark.parametrize("policy", ["time", "min-energy"])
def test_an_allocate_refused_after_fitting_changes_neither_the_state_nor_the_later_quotas(policy):
    # Prepare / Execute: at each round, before and after its reports, an allocate that fails after fitting
    # (_refused_allocate asserts the state right after it is the state before it); before the
    # fix it left its scatter cached (the next reports' drift threshold) and its fits written
    # (a re-levelled line re-levelled once more)
    uninterrupted = {seed: loop(seed, policy=policy) for seed in range(2)}
    changed = [
        (seed, at)
        for seed in range(2)
        for at in range(ROUNDS)
        if loop(seed, at, "refused", policy) != uninterrupted[seed]
    ]
    # Assert
    assert changed == []
