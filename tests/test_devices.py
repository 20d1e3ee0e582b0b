"""Device profiles, the testbed preset, the virtual clock, round accounting and the exact optimum."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.testbed import VirtualRun, realised_costs, simulate
from flwr_adaptive.accounting import account_round, optimal_makespan, optimal_split
from flwr_adaptive.devices import (
    HOST_7ZIP_SINGLE_MIPS,
    TESTBED,
    DeviceProfile,
    device_time,
    get_testbed,
    jitter_factor,
    slowdown_at,
)


# --------------------------------------------------------------------------- profiles
@pytest.mark.parametrize("field, value, match", [
    ("slowdown", 0.0, "slowdown must be > 0"),
    ("slowdown", float("inf"), "slowdown must be a finite number"),
    ("active_w", -1.0, "active_w must be >= 0"),
    ("idle_w", float("nan"), "idle_w must be a finite number"),
    ("jitter_sigma", -0.1, "jitter_sigma must be >= 0"),
])
def test_profile_rejects_bad_figures_naming_device_and_field(field, value, match):
    kwargs = dict(name="pi", arch="arm64", slowdown=2.0, active_w=5.0, idle_w=2.0)
    kwargs[field] = value
    with pytest.raises(ValueError, match=f"device 'pi': {match}"):
        DeviceProfile(**kwargs)


def test_profile_drift_needs_both_fields_and_a_1_based_round():
    with pytest.raises(ValueError, match="give both drift_from_round and drift_slowdown"):
        DeviceProfile("pi", "arm64", 2.0, 5.0, 2.0, drift_from_round=3)
    with pytest.raises(ValueError, match="drift_from_round must be an int >= 1"):
        DeviceProfile("pi", "arm64", 2.0, 5.0, 2.0, drift_from_round=0, drift_slowdown=4.0)


def test_slowdown_changes_exactly_from_the_drift_round():
    profile = DeviceProfile("pi", "arm64", 2.0, 5.0, 2.0, drift_from_round=4, drift_slowdown=5.0)
    assert [slowdown_at(profile, r) for r in (1, 3, 4, 9)] == [2.0, 2.0, 5.0, 5.0]


# --------------------------------------------------------------------------- testbed preset
def test_testbed_has_eleven_devices_across_three_architectures():
    archs = [p.arch for p in TESTBED]
    assert len(TESTBED) == 11 and len({p.name for p in TESTBED}) == 11
    assert (archs.count("arm64"), archs.count("riscv64"), archs.count("x86_64")) == (6, 3, 2)
    assert all(p.jitter_sigma == 0.05 for p in TESTBED)


def test_every_figure_is_cited_with_a_quote_or_marked_as_an_estimate():
    for p in TESTBED:
        for figure in ("slowdown", "active_w", "idle_w"):
            c = p.source(figure)
            assert c is not None, f"{p.name}: {figure} has no citation"
            assert c.quote.strip(), f"{p.name}: {figure} has an empty quote"
            assert c.estimate == (c.url is None), f"{p.name}: {figure}: estimate iff no address"
            if not c.estimate:
                assert c.url.startswith("https://")


def test_slowdown_is_the_host_rating_over_the_quoted_device_rating():
    # The quoted sbc-bench row is the source of truth: its 7-zip single-thread column.
    for p in TESTBED:
        row = p.source("slowdown").quote
        device_mips = float(row.split("|")[6])
        assert p.slowdown == pytest.approx(HOST_7ZIP_SINGLE_MIPS / device_mips, rel=1e-4), p.name


def test_testbed_with_other_jitter_host_and_drift():
    tb = get_testbed(jitter_sigma=0.0, host_mips=2 * HOST_7ZIP_SINGLE_MIPS, drift={"rpi4": (5, 9.0)})
    by_name = {p.name: p for p in tb}
    assert all(p.jitter_sigma == 0.0 for p in tb)
    assert by_name["rpi5"].slowdown == pytest.approx(2 * {p.name: p for p in TESTBED}["rpi5"].slowdown, rel=1e-3)
    assert (slowdown_at(by_name["rpi4"], 4), slowdown_at(by_name["rpi4"], 5)) == (by_name["rpi4"].slowdown, 9.0)
    with pytest.raises(ValueError, match=r"drift names unknown devices \['nope'\]"):
        get_testbed(drift={"nope": (2, 3.0)})


# --------------------------------------------------------------------------- virtual clock
def test_device_time_without_jitter_is_exact_and_draws_nothing():
    profile = DeviceProfile("pi", "arm64", 3.0, 5.0, 2.0, drift_from_round=2, drift_slowdown=4.0)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert device_time(profile, 0.5, 1, rng) == 1.5
    assert device_time(profile, 0.5, 2, rng) == 2.0
    assert rng.bit_generator.state == state


def test_device_time_jitter_is_one_lognormal_draw_per_call():
    profile = DeviceProfile("pi", "arm64", 2.0, 5.0, 2.0, jitter_sigma=0.1)
    z = np.random.default_rng(3).standard_normal()
    assert device_time(profile, 1.0, 1, np.random.default_rng(3)) == pytest.approx(2.0 * math.exp(0.1 * z))
    assert jitter_factor(DeviceProfile("x", "arm64", 1.0, 1.0, 1.0)) == 1.0


@pytest.mark.parametrize("bad", [-0.1, float("nan"), None])
def test_device_time_rejects_bad_cpu_seconds(bad):
    with pytest.raises(ValueError, match="cpu_s must be a finite number >= 0"):
        device_time(TESTBED[0], bad, 1)


def test_testbed_realised_costs_follow_drift_and_are_the_same_for_every_caller():
    tb = get_testbed(jitter_sigma=0.0, drift={"rpi5": (3, 10.0)})
    c2, c3 = realised_costs(tb, 2, 0.001, seed=1), realised_costs(tb, 3, 0.001, seed=1)
    assert (c2[0], c3[0]) == pytest.approx((0.001 * tb[0].slowdown, 0.01))
    jittery = get_testbed(0.05)
    assert np.array_equal(realised_costs(jittery, 4, 0.001, 7), realised_costs(jittery, 4, 0.001, 7))


# --------------------------------------------------------------------------- accounting
def test_account_round_hand_computed():
    # Prepare: busy 2 / 5 / 3 s; the slowest (b) sets the makespan
    busy = {"a": 2.0, "b": 5.0, "c": 3.0}
    active_w = {"a": 10.0, "b": 2.0, "c": 4.0}
    idle_w = {"a": 3.0, "b": 1.0, "c": 2.0}
    # Execute
    acct = account_round(busy, active_w=active_w, idle_w=idle_w)
    # Assert
    assert acct.makespan == 5.0
    assert acct.wait == {"a": 3.0, "b": 0.0, "c": 2.0}
    assert acct.active_j == {"a": 20.0, "b": 10.0, "c": 12.0}
    assert acct.idle_j == {"a": 9.0, "b": 0.0, "c": 4.0}
    assert (acct.total_active_j, acct.total_idle_j, acct.total_j) == (42.0, 13.0, 55.0)
    assert acct.cv_busy == pytest.approx(math.sqrt(14) / 10)  # std sqrt(14)/3 over mean 10/3


def test_account_round_prices_from_profiles_and_prefers_measured_active_energy():
    fast = DeviceProfile("fast", "x86_64", 1.0, active_w=20.0, idle_w=5.0)
    slow = DeviceProfile("slow", "arm64", 4.0, active_w=4.0, idle_w=1.0)
    acct = account_round({"fast": 1.0, "slow": 4.0}, {"fast": fast, "slow": slow}, active_j={"slow": 15.0})
    assert acct.active_j == {"fast": 20.0, "slow": 15.0}
    assert acct.idle_j == {"fast": 15.0, "slow": 0.0}
    assert acct.total_j == 50.0


def test_account_round_balanced_and_single_participant_have_zero_cv():
    assert account_round({"a": 2.0, "b": 2.0}, active_w={"a": 1, "b": 1}, idle_w={"a": 1, "b": 1}).cv_busy == 0.0
    assert account_round({"a": 2.0}, active_w={"a": 1}, idle_w={"a": 1}).cv_busy == 0.0


def test_account_round_errors_name_the_participant():
    with pytest.raises(ValueError, match="participant 'b' has no idle_w"):
        account_round({"a": 1.0, "b": 1.0}, active_w={"a": 1, "b": 1}, idle_w={"a": 1})
    with pytest.raises(ValueError, match="participant 'a': busy time must be a finite number >= 0"):
        account_round({"a": -1.0}, active_w={"a": 1}, idle_w={"a": 1})
    with pytest.raises(ValueError, match="needs active_w= or profiles="):
        account_round({"a": 1.0})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=20))
def test_account_round_invariants(rows):
    busy = {i: b for i, (b, _, _) in enumerate(rows)}
    acct = account_round(busy, active_w={i: a for i, (_, a, _) in enumerate(rows)},
                         idle_w={i: w for i, (_, _, w) in enumerate(rows)})
    assert acct.makespan == max(busy.values())
    assert min(acct.wait.values()) == 0.0 and all(w >= 0 for w in acct.wait.values())
    assert all(acct.busy[p] + acct.wait[p] == pytest.approx(acct.makespan) for p in busy)
    assert acct.total_j == pytest.approx(acct.total_active_j + acct.total_idle_j)
    assert acct.cv_busy >= 0


# --------------------------------------------------------------------------- exact optimum
def test_optimal_split_hand_computed():
    assert optimal_split([1.0, 2.0], 3) == [2, 1]
    assert optimal_makespan([1.0, 2.0], 3) == 2.0
    assert optimal_split([3.0, 5.0], 8) == [5, 3] and optimal_makespan([3.0, 5.0], 8) == 15.0
    assert optimal_makespan([1.0, 1.0], 0) == 0.0


def test_optimal_split_rejects_bad_input():
    with pytest.raises(ValueError, match=r"per_sample_s\[1\] must be a finite number > 0"):
        optimal_split([1.0, 0.0], 5)
    with pytest.raises(ValueError, match="budget must be an int >= 0"):
        optimal_split([1.0], 2.5)


def brute_force(costs, budget):
    best = math.inf
    for split in itertools.product(range(budget + 1), repeat=len(costs)):
        if sum(split) == budget:
            best = min(best, max(n * c for n, c in zip(split, costs)))
    return best


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=3), st.integers(0, 12))
def test_optimal_makespan_equals_brute_force(costs, budget):
    assert optimal_makespan(costs, budget) == pytest.approx(brute_force(costs, budget))
    assert sum(optimal_split(costs, budget)) == budget


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=30), st.integers(1, 5000))
def test_optimal_makespan_lies_between_the_continuous_bound_and_one_sample_more(costs, budget):
    continuous = budget / sum(1.0 / c for c in costs)  # everyone finishes together, fractional samples
    opt = optimal_makespan(costs, budget)
    assert continuous * (1 - 1e-12) <= opt <= continuous + max(costs)


# --------------------------------------------------------------------------- the claim in docs/measurements.md
def test_time_only_reaches_the_exact_optimum_by_round_3_without_jitter():
    # With σ = 0 the realised costs are the expected ones: the optimum is reachable.
    rounds = simulate("time", get_testbed(jitter_sigma=0.0), VirtualRun(rounds=3, seed=0))
    assert rounds["ratio"].iloc[0] > 2.0  # Equal split in round 1 (no measurement yet)
    assert rounds["ratio"].iloc[2] <= 1.05


def test_time_only_reaches_the_jitter_floor_by_round_3():
    # With σ = 0.05 drawn per device per round, this round's draw cannot be known before the
    # round. The fair yardstick is the best split knowable beforehand (true speeds, unknown
    # jitter): Time-only is within 5 % of it on average by round 3 (seeded, 20 runs).
    excess = []
    for seed in range(20):
        r3 = simulate("time", get_testbed(jitter_sigma=0.05), VirtualRun(rounds=3, seed=seed)).iloc[2]
        excess.append(r3["ratio"] / r3["floor"])
    assert np.mean(excess) <= 1.05
    assert max(excess) <= 1.15


def test_with_per_round_jitter_even_a_perfect_forecast_misses_1_05_of_the_realised_optimum():
    # Documents why the literal claim "≤ 1.05× the realised optimum by round 3" cannot hold at
    # σ = 0.05 on 11 devices: the slowest draw of 11 lognormals is ~e^(0.05·1.6) ≈ 1.08 above
    # the median, so the split by true speeds already averages ~1.09× the realised optimum.
    floors = [simulate("time", get_testbed(0.05), VirtualRun(rounds=3, seed=s)).iloc[2]["floor"] for s in range(20)]
    assert np.mean(floors) > 1.05
