"""AllocationController beyond the paper: min-energy, affine costs, drift, gain deadband."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from flwr_adaptive.controller import POLICIES, AllocationController, Report
from flwr_adaptive.solver import round_energy

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PAPER_POLICIES = ("equal", "time", "low-energy", "energy")


def play(ctrl, ids, a, b, power, rounds, idle=None, jitter=0.0, rng=None):
    """Closed loop on affine devices t = a + b·n (× jitter), energy = power·t; returns the splits."""
    splits = []
    for i, pid in enumerate(ids):
        if idle is not None:
            ctrl.set_idle_power(pid, float(idle[i]))
    for _ in range(rounds):
        q = ctrl.allocate(ids)
        n = np.array([q[p] for p in ids])
        splits.append(n)
        noise = 1.0 + jitter * rng.standard_normal(len(ids)) if jitter else np.ones(len(ids))
        t = (a + b * n) * noise
        for i, pid in enumerate(ids):
            if n[i] > 0:
                ctrl.observe(pid, Report(time_s=float(t[i]), energy_j=float(power[i] * t[i]), samples=int(n[i])))
    return splits


def brute_min_makespan(budget, a, b, lo=0):
    """Exact min over splits of 2–3 participants by enumeration."""
    best = math.inf
    P = len(a)
    if P == 2:
        cands = ((k, budget - k) for k in range(lo, budget - lo + 1))
    else:
        cands = ((i, j, budget - i - j) for i in range(lo, budget + 1) for j in range(lo, budget - i + 1)
                 if budget - i - j >= lo)
    for n in cands:
        best = min(best, float(np.max(a + b * np.array(n))))
    return best


# ----------------------------------------------------------------------------- construction
@pytest.mark.parametrize("kwargs, needle", [
    (dict(objective="fastest"), "objective"),
    (dict(cost_model="quadratic"), "cost_model"),
    (dict(deadband_rule="hold"), "deadband_rule"),
    (dict(slack=-0.1), "slack"),
    (dict(slack=float("nan")), "slack"),
    (dict(drift=0.0), "drift"),
    (dict(drift=True), "drift"),
])
def test_bad_options_fail_loudly_naming_the_option(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        AllocationController(100, **kwargs)


def test_set_idle_power_rejects_bad_watts():
    ctrl = AllocationController(100, objective="min-energy")
    for bad in (-1.0, math.inf, math.nan, "3", True, 1.0000001e6, 1e300):
        with pytest.raises(ValueError, match="idle watts"):
            ctrl.set_idle_power("a", bad)
    ctrl.set_idle_power("a", 1e6)  # the bound itself is a (large) silo's figure


def test_paper_flag_restores_the_paper_settings_of_any_policy():
    ctrl = AllocationController.from_policy("min-energy", 100, paper=True)
    assert (ctrl.cost_model, ctrl.drift, ctrl.deadband_rule) == ("per-sample", None, "tv")
    assert ctrl.objective == "min-energy"
    paper_time = AllocationController.from_policy("time", 100, paper=True)
    default = AllocationController(100)
    assert (paper_time.cost_model, paper_time.deadband_rule, paper_time.drift, paper_time.deadband) == \
        (default.cost_model, default.deadband_rule, default.drift, default.deadband)


# ----------------------------------------------------------------------------- affine costs
def test_affine_split_equalises_fixed_plus_per_sample_time_exactly():
    # Prepare: a = (4, 0) s, b = (0.01, 0.02) s/sample, budget 1000. Per-sample would give ~2:1;
    # the affine optimum equalises 4 + 0.01·n0 = 0.02·n1 → n0 = 533, n1 = 467 (max 9.34 s).
    ids = ["fixed", "plain"]
    a, b = np.array([4.0, 0.0]), np.array([0.01, 0.02])
    ctrl = AllocationController(1000, cost_model="affine", deadband=0.0)
    # Execute: round 1 equal, rounds 2-3 per-sample (quotas moved 5 %: two points do not identify
    # the line), round 4 on the line fitted through three noise-free points
    splits = play(ctrl, ids, a, b, np.ones(2), rounds=5)
    # Assert
    best = brute_min_makespan(1000, a, b)
    assert float(np.max(a + b * splits[3])) == pytest.approx(best)
    assert splits[4].tolist() == splits[3].tolist()
    assert best == pytest.approx(0.02 * 467)


@pytest.mark.parametrize("name, w_time, w_energy", [("time", 1.0, 0.0), ("low-energy", 0.75, 0.25)])
def test_named_policy_with_paper_flag_is_the_paper_controller(name, w_time, w_energy):
    ids = ["fixed", "plain", 7]
    a, b = np.array([4.0, 0.0, 1.0]), np.array([0.01, 0.02, 0.005])
    paper = play(AllocationController(1000, w_time=w_time, w_energy=w_energy), ids, a, b, np.ones(3), rounds=6)
    flagged = play(AllocationController.from_policy(name, 1000, paper=True), ids, a, b, np.ones(3), rounds=6)
    assert [s.tolist() for s in flagged] == [s.tolist() for s in paper]
    assert AllocationController.from_policy(name, 1000).cost_model == "affine"


def test_paper_flag_reproduces_the_paper_controller_round_by_round():
    ids = ["fixed", "plain", 7]
    a, b = np.array([4.0, 0.0, 1.0]), np.array([0.01, 0.02, 0.005])
    paper = play(AllocationController(1000), ids, a, b, np.ones(3), rounds=6)
    flagged = play(AllocationController.from_policy("min-energy", 1000, paper=True, objective="weighted",
                                                    w_time=1.0, slack=0.0), ids, a, b, np.ones(3), rounds=6)
    affine = play(AllocationController(1000, cost_model="affine"), ids, a, b, np.ones(3), rounds=6)
    assert [s.tolist() for s in flagged] == [s.tolist() for s in paper]
    # and the paper's split is held by its deadband further from the optimum than the affine one
    best = brute_min_makespan(1000, a, b)
    assert float(np.max(a + b * paper[-1])) > float(np.max(a + b * affine[-1])) >= best - 1e-9


@PROPERTY
@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.002, 0.05)), min_size=2, max_size=3),
       st.integers(60, 300))
# found by ./test.sh's random draws: per-sample costs so alike that the split stayed 20/20/20 and
# the fixed costs were never identified (2.4 % off) until the split was excited (excitation.py)
@example(devices=[(2.25, 0.01171875), (2.4375, 0.0078125), (2.4375, 0.00390625)], budget=60)
def test_affine_fit_reaches_the_exact_integer_optimum_on_noise_free_devices(devices, budget):
    a = np.array([d[0] for d in devices])
    b = np.array([d[1] for d in devices])
    ids = list(range(len(devices)))
    ctrl = AllocationController(budget, cost_model="affine", deadband=0.0, min_quota=1)
    splits = play(ctrl, ids, a, b, np.ones(len(ids)), rounds=6)
    best = brute_min_makespan(budget, a, b, lo=1)
    # once two different quotas identify each line, the split is exact (or the per-sample model
    # while the quotas did not move enough to identify the fixed cost, which is then negligible)
    assert float(np.max(a + b * splits[-1])) <= best * 1.02 + 1e-9
    assert all(s.sum() == budget and (s >= 1).all() for s in splits)


def test_an_equal_split_that_never_moves_is_excited_once_so_the_fixed_costs_are_identified():
    # Prepare: the counterexample above: the per-sample split stays 20/20/20 on its own
    a = np.array([2.25, 2.4375, 2.4375])
    b = np.array([0.01171875, 0.0078125, 0.00390625])
    ctrl = AllocationController(60, cost_model="affine", deadband=0.0, min_quota=1)
    # Execute
    splits = [s.tolist() for s in play(ctrl, [0, 1, 2], a, b, np.ones(3), rounds=6)]
    # Assert: once three reports sit at one quota (enough for a line, none identified), round 4
    # moves ceil(2 % of 20) = 1 sample per participant (the one left over gives to a participant
    # that took one, so each has a second level); from round 5 the identified lines split within
    # 0.5 % of the optimum (device 3's 97 % fixed share is capped at 95 % while its window is short)
    assert splits[:4] == [[20, 20, 20]] * 3 + [[19, 22, 19]]
    best = brute_min_makespan(60, a, b, lo=1)
    makespans = [float(np.max(a + b * np.array(s))) for s in splits]
    assert makespans[0] > 1.02 * best
    assert all(m <= 1.005 * best for m in makespans[4:])


def test_excitation_keeps_budgets_and_bounds_and_a_saved_state_resumes_it():
    # Prepare: two groups of two devices whose times differ by 1.2 % at the equal split, too
    # little for the per-sample split to move a sample; "a" sits at its upper bound
    ids = ["a", "b", "c", "d"]
    groups = {"a": 0, "b": 0, "c": 1, "d": 1}
    a, b = np.array([2.25, 2.4375] * 2), np.array([0.01171875, 0.00390625] * 2)
    make = lambda: AllocationController(  # noqa: E731
        {0: 40, 1: 40}, groups=groups, max_quota={"a": 20}, cost_model="affine", deadband=0.0
    )
    ctrl = make()
    first = play(ctrl, ids, a, b, np.ones(4), rounds=3)
    # Execute
    fourth = ctrl.allocate(ids)
    state = json.loads(json.dumps(ctrl.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    # Assert: every quota moved by ceil(2 % of 20) = 1 ("a", at its bound, gives instead of
    # taking), each group still sums to its budget, and the state says the split was an
    # excitation (not to be held by a deadband), so a resumed controller splits the same next
    assert [s.tolist() for s in first] == [[20, 20, 20, 20]] * 3
    assert fourth == {"a": 19, "b": 21, "c": 19, "d": 21}
    assert state["probe"] is True
    for c in (ctrl, resumed):
        for i, p in enumerate(ids):
            t = a[i] + b[i] * fourth[p]
            c.observe(p, Report(time_s=float(t), energy_j=float(t), samples=fourth[p]))
    assert ctrl.allocate(ids) == resumed.allocate(ids)


def test_identical_devices_are_not_excited():
    # devices that finish together are at the optimum whatever their fixed costs: no probe
    ctrl = AllocationController.from_policy("time", 400)
    splits = play(ctrl, list(range(4)), np.full(4, 2.0), np.full(4, 0.01), np.ones(4), rounds=8)
    assert all(s.tolist() == [100, 100, 100, 100] for s in splits)


def test_the_paper_estimation_is_never_excited():
    # the per-sample model has no fixed cost to identify: identical devices keep the equal split
    ctrl = AllocationController(400, deadband=0.0)
    splits = play(ctrl, list(range(4)), np.full(4, 2.0), np.full(4, 0.01), np.ones(4), rounds=4)
    assert all(s.tolist() == [100, 100, 100, 100] for s in splits)


# ----------------------------------------------------------------------------- drift
def test_step_change_is_followed_in_one_round_and_jitter_stays_quiet():
    rng = np.random.default_rng(7)
    ids = list(range(5))
    b = 0.01 * rng.lognormal(0, 1, 5)
    a = np.zeros(5)
    ctrl = AllocationController(5000, drift=0.3, deadband=0.0)
    play(ctrl, ids, a, b, np.ones(5), rounds=20, jitter=0.05, rng=rng)
    assert ctrl.drift_count == 0  # 100 observations with 5 % jitter: no false alarm
    # Execute: participant 2 becomes 2x slower for one round, then the next allocation
    b2 = b.copy()
    b2[2] *= 2
    play(ctrl, ids, a, b2, np.ones(5), rounds=1)
    n = np.array([ctrl.allocate(ids)[p] for p in ids])
    # Assert: the estimate jumped (the EMA alone would still be at the mean of old and new)
    assert ctrl.drift_count == 1
    assert float(np.max(b2 * n)) <= 1.03 * 5000 / np.sum(1 / b2)


def test_drift_rescales_an_identified_affine_line():
    ids = ["x", "y"]
    a, b = np.array([2.0, 0.0]), np.array([0.01, 0.01])
    ctrl = AllocationController(1000, cost_model="affine", drift=0.3, deadband=0.0)
    play(ctrl, ids, a, b, np.ones(2), rounds=5)
    play(ctrl, ids, 2 * a, 2 * b * np.array([1, 0]) + b * np.array([0, 1]), np.ones(2), rounds=1)
    n = np.array([ctrl.allocate(ids)[p] for p in ids])
    a2, b2 = np.array([4.0, 0.0]), np.array([0.02, 0.01])
    assert float(np.max(a2 + b2 * n)) == pytest.approx(brute_min_makespan(1000, a2, b2), rel=1e-3)


# ----------------------------------------------------------------------------- gain deadband
def test_gain_deadband_keeps_a_split_within_the_band_and_releases_beyond():
    ids = ["p", "q"]
    ctrl = AllocationController(1000, deadband=0.05, deadband_rule="gain")
    ctrl.observe("p", Report(time_s=1.0, samples=100))
    ctrl.observe("q", Report(time_s=1.0, samples=100))
    assert ctrl.allocate(ids) == {"p": 500, "q": 500}
    # 4 % slower: re-splitting would shorten the predicted round by ~2 % < 5 %: kept
    ctrl.observe("p", Report(time_s=1.08, samples=100))  # EMA → 1.04
    assert ctrl.allocate(ids) == {"p": 500, "q": 500}
    # much slower: the predicted gain exceeds 5 %: released
    ctrl.observe("p", Report(time_s=2.0, samples=100))
    assert ctrl.allocate(ids)["p"] < 450


def _moves_under_jitter(ctrl_of, jitter, seeds=range(6), rounds=30, settle=10):
    """Split changes after ``settle`` rounds on four affine devices whose times jitter (seeded)."""
    ids, a, b = ["a", "b", "c", "d"], np.full(4, 0.5), np.array([0.01, 0.02, 0.03, 0.04])
    moves = 0
    for seed in seeds:
        splits = play(ctrl_of(), ids, a, b, np.ones(4), rounds, jitter=jitter, rng=np.random.default_rng(seed))
        moves += sum(not np.array_equal(splits[i], splits[i - 1]) for i in range(settle, rounds))
    return moves


def test_gain_deadband_noise_floor_holds_a_split_that_jitter_alone_would_move():
    # Prepare: the named policies' gain deadband is max(2 %, the noise floor), the floor being
    # 3 × the median relative scatter of the recent times / √window (5 % jitter: ≈ 6 %). Seeded
    # jitter, so the counts are exact (no machine noise): measured 6 moves in 6 × 20 settled
    # rounds with the floor, 31 with the floor removed (band 2 % only), ~120 with no deadband.
    # Execute
    default = _moves_under_jitter(lambda: AllocationController.from_policy("time", 1000), 0.05)
    no_band = _moves_under_jitter(lambda: AllocationController.from_policy("time", 1000, deadband=0.0), 0.05)
    # Assert: the floor holds the split in most rounds (a limit halfway to the floor-free count)
    assert default <= 15 < no_band


def test_gain_deadband_noise_floor_is_zero_on_noise_free_devices_so_a_small_change_is_followed():
    # Prepare: noise-free affine devices t = 0.5 + b·n; the default policy (gain deadband 2 %)
    ids, a, b = ["a", "b", "c", "d"], np.full(4, 0.5), np.array([0.01, 0.02, 0.03, 0.04])
    ctrl = AllocationController.from_policy("time", 1000)
    # Execute: converge, then the slowest device becomes 6 % slower (below the 30 % drift trigger)
    before = play(ctrl, ids, a, b, np.ones(4), 8)[-1]
    after = play(ctrl, ids, a, b * [1, 1, 1, 1.06], np.ones(4), 8)[-1]
    # Assert: the exact equal-time split (0.5 + 0.01·480 = 0.5 + 0.04·120), then the new one
    # (a floor that did not vanish without jitter would hold an earlier, worse split instead)
    assert before.tolist() == [480, 240, 160, 120]
    assert after.tolist() == [484, 241, 161, 114]


# ----------------------------------------------------------------------------- min-energy
def test_min_energy_without_energy_figures_is_the_minimum_makespan():
    ids = ["a", "b", "c"]
    tau = np.array([0.01, 0.02, 0.04])
    ctrl = AllocationController(700, objective="min-energy", deadband=0.0)
    for p, t in zip(ids, tau):
        ctrl.observe(p, Report(time_s=float(100 * t), samples=100))
    n = np.array([ctrl.allocate(ids)[p] for p in ids])
    assert n.tolist() == [400, 200, 100]


@PROPERTY
@given(st.lists(st.tuples(st.floats(0.001, 0.05), st.floats(2.0, 65.0), st.floats(0.15, 0.5)),
                min_size=2, max_size=6),
       st.integers(50, 2000), st.sampled_from([0.0, 0.1, 0.3, math.inf]))
def test_min_energy_respects_the_slack_and_beats_every_paper_policy(devices, budget, slack):
    tau = np.array([d[0] for d in devices])
    power = np.array([d[1] for d in devices])
    idle = power * np.array([d[2] for d in devices])
    a, zero = np.zeros(len(tau)), np.zeros(len(tau))
    ids = list(range(len(tau)))

    def converged_split(ctrl):
        return play(ctrl, ids, a, tau, power, rounds=3, idle=idle)[-1]

    n_min = converged_split(AllocationController.from_policy("min-energy", budget, slack=slack, deadband=0.0))
    T_min_energy, E_min_energy = round_energy(n_min, a, tau, zero, power * tau, idle)
    fastest = converged_split(AllocationController(budget, objective="min-energy", slack=0.0, deadband=0.0))
    T_fastest = round_energy(fastest, a, tau, zero, power * tau, idle)[0]
    assert sum(n_min) == budget and (n_min >= 1).all()
    assert T_min_energy <= (1 + slack) * T_fastest * (1 + 1e-9) + 1e-12
    for name in PAPER_POLICIES:
        n = converged_split(AllocationController.from_policy(name, budget, deadband=0.0))
        T, E = round_energy(n, a, tau, zero, power * tau, idle)
        assert T >= T_fastest * (1 - 1e-9)  # no split is faster than the minimum makespan
        if T <= (1 + slack) * T_fastest:
            assert E_min_energy <= E * (1 + 1e-9) + 1e-9, name


# ----------------------------------------------------------------------------- invariants, state
@PROPERTY
@given(st.sampled_from(["min-energy", "time", "low-energy"]), st.sampled_from(["per-sample", "affine"]),
       st.sampled_from(["tv", "gain"]), st.integers(0, 2**31 - 1))
def test_budget_bounds_groups_and_json_state_hold_for_the_new_options(policy, cost_model, rule, seed):
    rng = np.random.default_rng(seed)
    ids = ["s0", "s1", 3, 4, "s4"]
    groups = {"s0": "A", "s1": "A", 3: "B", 4: "B", "s4": "B"}
    budget = {"A": int(rng.integers(10, 500)), "B": int(rng.integers(20, 900))}
    kwargs = dict(groups=groups, cost_model=cost_model, deadband_rule=rule, drift=0.3, min_quota=2,
                  max_quota={4: 300, "s1": 400})
    ctrl = AllocationController.from_policy(policy, budget, **kwargs)
    a = rng.uniform(0, 2, 5)
    b = 0.01 * rng.lognormal(0, 1, 5)
    power = rng.uniform(2, 65, 5)
    for r in range(6):
        if r == 3:  # save, reload through JSON, continue with the copy
            copy = AllocationController.from_policy(policy, budget, **kwargs)
            copy.load_state_dict(json.loads(json.dumps(ctrl.state_dict())))
            assert copy.allocate(ids) == ctrl.allocate(ids)
            ctrl = copy
        splits = play(ctrl, ids, a, b, power, rounds=1, idle=0.3 * power, jitter=0.05, rng=rng)
        n = dict(zip(ids, splits[0].tolist()))
        for g in ("A", "B"):
            assert sum(q for p, q in n.items() if groups[p] == g) == budget[g]
        assert all(q >= 2 for q in n.values()) and n[4] <= 300 and n["s1"] <= 400


def test_min_energy_is_a_named_policy():
    assert POLICIES["min-energy"].objective == "min-energy"
    assert AllocationController.from_policy("min-energy", 10).cost_model == "affine"


# ----------------------------------------------------------------------------- fallback while not identified
def test_two_jittered_rounds_do_not_identify_a_fixed_cost_and_round_3_is_the_per_sample_split():
    # Prepare: per-sample devices (no fixed cost), 0.01 and 0.02 s/sample, budget 1000. Round 1:
    # equal, 500 each (5.0 s and 10.0 s). Round 2: per-sample split 667/333, with ±5 % jitter:
    # p took 667·0.01·0.95 = 6.3365 s, q 333·0.02·1.05 = 6.993 s. A line through the two points
    # of p has a = +1.0 s (b = 0.0080), of q a = +1.0 s (b = 0.0180): jitter posing as fixed cost.
    # The per-sample EMA (α = 0.5): τ_p = (0.01 + 0.0095)/2 = 0.00975, τ_q = (0.02 + 0.021)/2 =
    # 0.0205; split ∝ 1/τ: 677.7 / 322.3 → 678 / 322 (the integer min-makespan split too:
    # max(6.6105, 6.601) < max(6.60075, 6.6215) for 677 / 323).
    ids = ["p", "q"]
    rounds = [({"p": 500, "q": 500}, {"p": 5.0, "q": 10.0}), ({"p": 667, "q": 333}, {"p": 6.3365, "q": 6.993})]
    controllers = {"time": AllocationController.from_policy("time", 1000),
                   "paper": AllocationController.from_policy("time", 1000, paper=True, deadband=0.0)}
    for ctrl in controllers.values():
        for quotas, seconds in rounds:
            # Execute: rounds 1 and 2 as above
            assert ctrl.allocate(ids) == quotas
            for p in ids:
                ctrl.observe(p, Report(time_s=seconds[p], samples=quotas[p]))
    # Assert: round 3 of the affine default is the paper's per-sample split (its deadband off: the
    # TV rule would keep 667 / 333), not the 2-point lines' split
    assert controllers["time"].allocate(ids) == {"p": 678, "q": 322} == controllers["paper"].allocate(ids)


@PROPERTY
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(0.002, 0.05), st.floats(-0.1, 0.1), st.floats(-0.1, 0.1)),
                min_size=2, max_size=3),
       st.integers(60, 300))
def test_affine_equals_per_sample_until_a_third_observation(devices, budget):
    # Prepare: fixed + per-sample devices with jitter; two observations per participant
    ids = list(range(len(devices)))
    a = np.array([d[0] for d in devices])
    b = np.array([d[1] for d in devices])
    jitter = np.array([[d[2], d[3]] for d in devices])
    ctrl = AllocationController(budget, cost_model="affine", deadband=0.0, min_quota=1)
    tau = np.zeros(len(ids))
    for r in range(2):
        q = ctrl.allocate(ids)
        for i in ids:
            t = float((a[i] + b[i] * q[i]) * (1 + jitter[i, r]))
            ctrl.observe(i, Report(time_s=t, samples=q[i]))
            tau[i] = t / q[i] if r == 0 else 0.5 * tau[i] + 0.5 * t / q[i]  # the EMA, α = 0.5
    # Execute: round 3
    split = np.array([ctrl.allocate(ids)[i] for i in ids])
    # Assert: two points never identify a line: round 3 is the exact min-makespan split of the
    # per-sample EMA estimates (the paper's model), whatever the 2-point lines say
    best = brute_min_makespan(budget, np.zeros(len(ids)), tau, lo=1)
    assert float(np.max(tau * split)) == pytest.approx(best, rel=1e-9)


def test_a_fixed_cost_seen_at_moving_quotas_is_not_taken_for_drift_before_its_line_is_identified():
    # Prepare: t = 1.83 + 0.00284·n s (a 40 % fixed share at 600 samples), observed at 600, 2061
    # and 2333 samples. The per-sample EMA after two rounds is (3.534/600 + 7.683/2061)/2 =
    # 0.004809 s/sample and predicts 11.22 s at 2333; the device takes 8.456 s (0.754×, beyond
    # the 1/1.3 drift band). The last observation's cost per sample predicts 8.70 s (0.972×).
    ctrl = AllocationController(6000, cost_model="affine", drift=0.3, deadband=0.0)
    for n in (600, 2061, 2333):
        ctrl.observe("fixed", Report(time_s=1.83 + 0.00284 * n, samples=n))
        ctrl.observe("plain", Report(time_s=0.003 * n, samples=n))
        ctrl.allocate(["fixed", "plain"])
    # Assert: no drift, and the three points identify the line (noise-free: exact)
    assert ctrl.drift_count == 0
    a, b, *_ = ctrl._store.affine_estimates(ctrl._slots(["fixed"]))
    assert (float(a[0]), float(b[0])) == pytest.approx((1.83, 0.00284), rel=1e-6)
    # Execute: a real step change, 2× slower near the last quota
    ctrl.observe("fixed", Report(time_s=2 * (1.83 + 0.00284 * 2400), samples=2400))
    ctrl.observe("plain", Report(time_s=0.003 * 2400, samples=2400))
    ctrl.allocate(["fixed", "plain"])
    assert ctrl.drift_count == 1


def test_early_rounds_benchmark_runs_both_estimations_on_the_same_costs():
    from experiments.early_rounds import measure

    table = measure(2)
    assert sorted(set(table["policy"])) == ["time", "time-paper"] and len(table) == 4
    # same realised costs for both: the same floor; every ratio is at least the exact optimum
    floors = table.pivot(index="seed", columns="policy", values="floor, rounds 3+")
    assert (floors["time"] == floors["time-paper"]).all()
    assert (table[["round 3", "round 4", "rounds 3+"]] >= 1.0 - 1e-9).all().all()


def test_fit_affine_identifies_a_clear_line_from_four_noisy_points():
    from flwr_adaptive.estimation import fit_affine

    # Prepare: t = 1 + 0.01·n at n = 100..400 with ±0.02 s of scatter: the slope's standard
    # error, σ/√Σ(n − mean n)², is 0.2 % of it (scripts/mutation.sh: Σ(n/mean n)² in its place,
    # 80x smaller, left this line unidentified and survived)
    n = np.array([[100.0, 200.0, 300.0, 400.0, np.nan, np.nan]])
    y = 1.0 + 0.01 * n + np.array([[0.02, -0.02, 0.01, -0.01, np.nan, np.nan]])
    # Execute
    a, b, identified, _ = fit_affine(n, y)
    # Assert: identified, with its fixed cost (least squares: a = 1.015, b = 0.00994)
    assert identified.tolist() == [True]
    assert a[0] == pytest.approx(1.015, abs=0.005) and b[0] == pytest.approx(0.00994, rel=1e-3)


def test_fit_affine_reweights_once_as_documented():
    from flwr_adaptive.estimation import fit_affine

    # Prepare: an exact line t = 1 + 0.01·n with one observation 10 % high. The documented robust
    # step: least squares, residuals r, scale s = 1.4826·median|r| (at least 1 % of the mean),
    # weights 1 / (1 + (r / 3s)²), weighted least squares again; computed here with numpy alone
    # (scripts/mutation.sh: the weight's r / 3s replaced by r + 3s survived)
    n = np.array([100.0, 200.0, 300.0, 400.0, 500.0, 600.0])
    y = 1.0 + 0.01 * n
    y[2] *= 1.1
    b0, a0 = np.polyfit(n, y, 1)
    r = y - (a0 + b0 * n)
    s = max(1.4826 * np.median(np.abs(r)), 0.01 * abs(y.mean()))
    b1, a1 = np.polyfit(n, y, 1, w=np.sqrt(1.0 / (1.0 + (r / (3.0 * s)) ** 2)))
    # Execute
    a, b, identified, _ = fit_affine(n[None], y[None])
    # Assert (the plain least-squares line would be a = 1.083)
    assert identified.tolist() == [True]
    assert a[0] == pytest.approx(a1, rel=1e-9) and b[0] == pytest.approx(b1, rel=1e-9)


def test_column_median_is_numpys_median_for_every_count_and_order():
    import itertools

    from flwr_adaptive.estimation import WINDOW, column_median

    # Prepare: every order of 1..WINDOW distinct values (the sorting networks per count), the
    # unused cells NaN (scripts/mutation.sh: one comparator of the 4-value network moved survived)
    rng = np.random.default_rng(0)
    for count in range(1, WINDOW + 1):
        values = rng.uniform(0.0, 10.0, count)
        orders = list(itertools.permutations(range(count)))
        v = np.full((WINDOW, len(orders)), np.nan)
        for j, order in enumerate(orders):
            v[:count, j] = values[list(order)]
        # Execute
        got = column_median(v, ~np.isnan(v))
        # Assert
        assert got.tolist() == [float(np.median(values))] * len(orders), count
