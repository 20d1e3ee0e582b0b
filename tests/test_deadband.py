"""The deadband's balance test: a split within the measured noise of balanced is held.

Identical devices with 30 % timing jitter used to wander (quotas 1.5–2.5× the fair share, the
split moving in ~85 % of rounds): each round's estimates, a few noisy reports each, proposed a
different split, and a jitter beyond the 30 % drift threshold rescaled a participant's whole
window to one noisy report. The reports at the committed quotas say directly whether the split
is off; jumps within the participants' measured scatter are no longer read as step changes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flwr_adaptive.controller import AllocationController, Report
from flwr_adaptive.deadband import BALANCE_T, balanced_within_noise

SEEDS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAN = math.nan


def window(quota: int, times: list[float], width: int = 6) -> list[list[float]]:
    """One participant's history rows ``(samples, seconds, joules)``, NaN-padded to ``width``."""
    rows = [[NAN, NAN, NAN]] * (width - len(times))
    return rows + [[float(quota), t, NAN] for t in times]


def history(*rows: list[list[float]]) -> np.ndarray:
    return np.array(rows, dtype=float)


def closed_loop(seed: int, rounds: int, jitter: float = 0.3, slow_from: int | None = None, factor: float = 1.0):
    """4 identical devices (0.01 s/sample, budget 1,200: the fair share is 300) under the named
    ``time`` policy, lognormal jitter σ = ``jitter``; device 0 becomes ``factor``× slower from
    round ``slow_from``. Returns the splits, one row per round."""
    rng = np.random.default_rng(seed)
    ctrl = AllocationController.from_policy("time", 1200)
    ids, tau, splits = [0, 1, 2, 3], np.full(4, 0.01), []
    for r in range(rounds):
        if r == slow_from:
            tau[0] *= factor
        q = ctrl.allocate(ids)
        n = np.array([q[p] for p in ids])
        splits.append(n)
        t = tau * n * np.exp(jitter * rng.standard_normal(4))
        for p in ids:
            ctrl.observe(p, Report(time_s=float(t[p]), samples=int(n[p])))
    return np.array(splits)


# ----------------------------------------------------------------------------- hand-computed
def test_balance_test_against_a_hand_computed_threshold():
    # Prepare: two participants, 4 reports each at their quota. log times of "a": 0, .2, 0, .2
    # (mean .1); of "b": mean m ± .1. Pooled σ² = (4·.01 + 4·.01)/6 dof; the standard error of
    # m_a − m̄ is σ·√((1 − 2/2)/4 + (1/4 + 1/4)/4) = σ·√(1/8); t(6 dof) = 4.904:
    # balanced iff |m_a − m̄| = |m_b − .1|/2 <= 4.904 · σ/√8, i.e. |m_b − .1| <= 0.40042.
    sigma = math.sqrt(0.08 / 6)
    limit = 2 * BALANCE_T[6] * sigma / math.sqrt(8)
    assert limit == pytest.approx(0.40042, abs=1e-4)
    a = window(300, [1.0, math.exp(0.2), 1.0, math.exp(0.2)])
    quota, codes, fixed = np.array([300, 300]), np.zeros(2, dtype=np.int64), np.zeros(2)

    def b_at(mean: float) -> list[list[float]]:
        return window(300, [math.exp(mean + d) for d in (-0.1, 0.1, -0.1, 0.1)])

    # Execute / Assert: just inside and just outside the threshold
    assert balanced_within_noise(quota, history(a, b_at(0.1 + limit - 1e-3)), codes, fixed)
    assert not balanced_within_noise(quota, history(a, b_at(0.1 + limit + 1e-3)), codes, fixed)


def test_balance_test_counts_only_reports_at_the_committed_quota_and_adds_the_fixed_seconds():
    quota, codes = np.array([300, 300]), np.zeros(2, dtype=np.int64)
    a = window(300, [3.0, 3.0, 3.0])
    # "b" took 6 s at another quota (not evidence) and 3 s at its committed one
    b = [[250.0, 6.0, NAN]] * 3 + window(300, [3.0, 3.0, 3.0], width=3)
    assert balanced_within_noise(quota, history(a, b), codes, np.zeros(2))
    # noise-free equal times are balanced; 1 s more fixed time for "b" is not
    assert not balanced_within_noise(quota, history(a, b), codes, np.array([0.0, 1.0]))


def test_balance_test_needs_a_report_at_every_positive_quota_and_compares_within_groups():
    codes = np.zeros(2, dtype=np.int64)
    a, b = window(300, [3.0, 3.1, 2.9]), window(200, [2.0, 2.1])  # b never ran its quota 300
    assert not balanced_within_noise(np.array([300, 300]), history(a, b), codes, np.zeros(2))
    # a participant with quota 0 is not judged
    assert balanced_within_noise(np.array([300, 0]), history(a, b), codes, np.zeros(2))
    # two groups of one: nothing to compare, even with times 2x apart
    fast, slow = window(300, [3.0, 3.1, 2.9]), window(300, [6.0, 6.2, 5.8])
    assert not balanced_within_noise(np.array([300, 300]), history(fast, slow), codes, np.zeros(2))
    assert balanced_within_noise(np.array([300, 300]), history(fast, slow), np.array([0, 1]), np.zeros(2))


# ----------------------------------------------------------------------------- closed loop
@SEEDS
@given(st.integers(0, 2**32 - 1))
def test_identical_devices_with_30_percent_jitter_stay_near_the_equal_split(seed):
    # Prepare / Execute: 50 rounds; judge rounds 10-49 (the early rounds adapt on 1-3 reports)
    splits = closed_loop(seed, 50)[10:]
    worst = np.abs(splits - 300).max(axis=1) / 300  # the farthest quota from the fair share
    moved = (np.abs(np.diff(splits, axis=0)).sum(axis=1) > 0).mean()
    # Assert: every quota within ±50 % of the equal split in >= 75 % of the rounds, and the split
    # moves in <= 30 % of them. Measured over 200 seeds: >= 80 % of rounds within the band
    # (median 100 %), moves in <= 15 % (median 5 %). Without the balance test the split moved in
    # 26-87 % of the rounds (passing on 1.5 % of the seeds), without the noise-scaled drift
    # threshold in 44-69 % (on no seed); before both: 85 % of rounds, quotas up to 2x the share.
    assert (worst <= 0.5).mean() >= 0.75
    assert moved <= 0.3


@SEEDS
@given(st.integers(0, 2**32 - 1))
def test_a_truly_slower_device_is_rebalanced_within_15_rounds_despite_the_jitter(seed):
    # Prepare: settle 20 rounds, then device 0 runs 3x slower (30 % jitter as above)
    splits = closed_loop(seed, 36, slow_from=20, factor=3.0)
    # Assert: its quota falls below the midpoint between the fair share (300) and the balanced
    # one (~180) within 15 rounds (measured over 300 seeds: 0-9 rounds, median 3; with the
    # balance test holding every split the quota never moves)
    midpoint = 300 * (1 + 1 / 3) / 2
    assert (splits[20:, 0] < midpoint).any()


def test_with_little_jitter_a_step_change_is_still_followed_at_once():
    # Prepare: 5 % jitter (the measured scatter keeps the drift threshold at its 30 %)
    splits = closed_loop(7, 24, jitter=0.05, slow_from=20, factor=1.5)
    # Assert: the next split after the first slow report already moves device 0 well down
    assert splits[21, 0] < 0.85 * splits[19, 0]


def silo_drift_loop(seed: int, jitter: float) -> dict[int, dict[str, int]]:
    """tests/test_silo.py's drift scenario without processes: 3 silos of 2 ranks (400 samples per
    silo and round), rank time = slowdown × (0.01 s + 0.16 ms per sample) × lognormal jitter, each
    silo's ranks 2× apart in speed change at round 4. Returns each round's rank quotas."""
    slowdowns = {0: ([1.0, 3.0], [1.0, 6.0]), 1: ([1.0, 6.0], [2.0, 6.0]), 2: ([6.0, 1.0], [3.0, 1.0])}
    rng = np.random.default_rng(seed)
    ctrl = AllocationController.from_policy("time", {}, groups={}, smoothing=1.0, deadband=0.02)
    ids = [f"{silo}/{rank}" for silo in range(3) for rank in range(2)]
    for rid in ids:
        ctrl.set_group(rid, int(rid[0]), 400)
    quotas, rounds = dict.fromkeys(ids, 200), {}
    for rnd in range(1, 7):
        rounds[rnd] = dict(quotas)
        for rid in ids:
            silo, rank = int(rid[0]), int(rid[2])
            slow = slowdowns[silo][rnd >= 4][rank]
            t = slow * (0.01 + 0.00016 * quotas[rid]) * math.exp(jitter * rng.standard_normal())
            ctrl.observe(rid, Report(time_s=t, samples=quotas[rid]))
        quotas = ctrl.allocate(ids)
    return rounds


@pytest.mark.parametrize(("jitter", "least"), [(0.1, 38), (0.15, 33)])
def test_ranks_follow_a_2x_step_at_their_held_quota_despite_lines_fitted_to_few_reports(jitter, least):
    # Prepare / Execute: 40 seeds of the silo drift scenario
    def followed(r: dict[int, dict[str, int]]) -> bool:
        before, last = r[4], r[6]
        moved = last["0/1"] < before["0/1"] and last["1/0"] < before["1/0"] and last["2/0"] > before["2/0"]
        return moved and all(last[slow] < 200 for slow in ("0/1", "1/1", "2/0"))

    passed = sum(followed(silo_drift_loop(seed, jitter)) for seed in range(40))
    # Assert: the split follows every silo's step by round 6 in nearly every seed. Measured: 40 and
    # 35 of 40. With the drift threshold scaled by the scatter around lines through 3 reports
    # (misfit read as jitter): 10 and 8; judging a report at the held quota against the line
    # instead of the last report there: 34 and 29.
    assert passed >= least, passed
