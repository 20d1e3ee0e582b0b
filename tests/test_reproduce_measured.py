"""The measured-clock section of ``experiments.reproduce`` on hand-made runs: the t interval its
tables report, the order its runs go in, the agreement of the two clocks and its verdict (a
property: identical clocks agree exactly), and the count of rounds far above their run's median."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow


def test_mean_ci_matches_a_hand_computed_t_interval():
    # Prepare: values 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653
    from experiments.reproduce import mean_ci

    m, h, n = mean_ci([1.0, 2.0, 3.0, math.nan])
    # Assert
    assert (m, n) == (2.0, 3)
    assert h == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert mean_ci([5.0])[0] == 5.0 and math.isnan(mean_ci([5.0])[1])


def test_measured_runs_go_seed_by_seed_with_the_order_rotated():
    # Prepare
    from experiments.reproduce import parse_args, plan_measured_units

    args = parse_args(["--measured-policies", "equal,time,energy", "--measured-seeds", "4", "--measured-rounds", "3"])
    # Act
    units = plan_measured_units(args)
    # Assert: seed after seed, each policy once per seed, the first policy moving on by one per seed
    assert [u.seed for u in units] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [u.policy for u in units[:6]] == ["equal", "time", "energy", "time", "energy", "equal"]
    assert [u.policy for u in units[9:]] == ["equal", "time", "energy"]
    assert {(u.clock, u.rounds, u.task, u.meta["kind"], u.meta["scenario"]) for u in units} == {
        ("measured", 3, "mnist", "measured", "testbed")}
    # on --clock measured every table is measured already: no separate section
    assert plan_measured_units(parse_args(["--clock", "measured"])) == []
    assert plan_measured_units(parse_args(["--skip-measured"])) == []


def _summary(rows: list[tuple[int, str, float, float]]) -> pd.DataFrame:
    from experiments.reproduce import with_change_vs_equal

    return with_change_vs_equal(pd.DataFrame(
        [{"task": "mnist", "scenario": "testbed", "seed": s, "policy": p, "makespan_s": t, "energy_j": e,
          "idle_j": 1.0, "cv_busy": 0.5} for s, p, t, e in rows]))


def test_clock_agreement_on_hand_made_runs():
    # Prepare: 2 seeds. Time-only's Δ makespan: measured -0.5, -0.3 (mean -0.4); modelled -0.4, -0.4.
    # t(0.975, 1) = 12.7062; sd of (-0.5, -0.3) = 0.141421 → half-width 12.7062 · 0.141421 / √2 = 1.27062
    from experiments.reproduce import clock_agreement, order_agreement

    measured = _summary([(0, "equal", 10, 100), (0, "time", 5, 80), (0, "low-energy", 6, 70),
                         (1, "equal", 10, 100), (1, "time", 7, 90), (1, "low-energy", 6, 60)])
    modelled = _summary([(0, "equal", 10, 100), (0, "time", 6, 80), (0, "low-energy", 7, 70),
                         (1, "equal", 10, 100), (1, "time", 6, 80), (1, "low-energy", 7, 70)])
    # Act
    agree = clock_agreement(measured, modelled, ["equal", "time", "low-energy"])
    order = order_agreement(measured, modelled, "time", "low-energy")
    # Assert
    t = agree["policies"]["time"]
    assert t["meas_makespan"][0] == pytest.approx(-0.4) and t["meas_makespan"][1] == pytest.approx(1.27062, rel=1e-4)
    assert t["mod_makespan"][:2] == pytest.approx((-0.4, 0.0))
    assert t["diff_makespan"][0] == pytest.approx(0.0) and t["diff_makespan"][2] == 2
    assert t["diff_energy"][0] == pytest.approx((-0.2 - 0.1) / 2 - (-0.2))  # measured -0.2, -0.1; modelled -0.2
    assert t["same_sign"] == (2, 2) and t["width_ratio"] == math.inf  # the modelled Δ does not vary
    assert "equal" not in agree["policies"]
    assert order == {"measured": (1, 2), "modelled": (2, 2)}  # seed 1: 7 > 6 on the measured clock


def test_verdict_calls_a_sign_flip_unstable_and_names_the_policy():
    # Prepare: Energy-only is slower than Equal on the modelled clock in both seeds, faster in one measured seed
    from experiments.reproduce import clock_agreement, measured_verdict, order_agreement

    modelled = _summary([(0, "equal", 10, 100), (0, "energy", 13, 120), (1, "equal", 10, 100), (1, "energy", 12, 110)])
    flipped = _summary([(0, "equal", 10, 100), (0, "energy", 9, 95), (1, "equal", 10, 100), (1, "energy", 12, 110)])
    # Act
    text = measured_verdict(clock_agreement(flipped, modelled, ["equal", "energy"]),
                            order_agreement(flipped, modelled, "time", "low-energy"))
    same = measured_verdict(clock_agreement(modelled, modelled, ["equal", "energy"]), {})
    # Assert
    assert "**Not stable on this shared machine:**" in text and "Energy-only (1/2 seeds)" in text
    assert "**Stable in sign:**" in same and "does not exclude zero for any policy" in same


@given(st.lists(st.tuples(st.floats(1.0, 100.0), st.floats(0.05, 5.0), st.floats(10.0, 1e3), st.floats(0.1, 3.0)),
                min_size=2, max_size=6))
@settings(max_examples=40, deadline=None)
def test_identical_clocks_agree_exactly(seeds):
    # Property: comparing a set of runs with itself gives zero differences, full sign agreement, width ratio 1
    from experiments.reproduce import clock_agreement

    rows = []
    for s, (t_eq, t_ratio, e_eq, e_ratio) in enumerate(seeds):
        rows += [(s, "equal", t_eq, e_eq), (s, "time", t_eq * t_ratio, e_eq * e_ratio)]
    runs = _summary(rows)
    f = clock_agreement(runs, runs, ["equal", "time"])["policies"]["time"]
    assert f["diff_makespan"][0] == pytest.approx(0.0, abs=1e-12)
    assert f["diff_energy"][0] == pytest.approx(0.0, abs=1e-12)
    assert f["meas_makespan"] == f["mod_makespan"]
    if f["mod_makespan"][0] != 0:  # the seeds whose Δ has the mean's sign
        expected = int(
            (np.sign(runs.loc[runs["policy"] == "time", "d_makespan_s"]) == np.sign(f["mod_makespan"][0])).sum()
        )
        assert f["same_sign"] == (expected, len(seeds))
    if f["mod_makespan"][1] > 0:
        assert f["width_ratio"] == pytest.approx(1.0)


def test_round_spikes_count_rounds_far_above_their_runs_median():
    # Prepare: Time-only seed 1 has a round at 5× its median (rounds 2–5: 1, 1, 1, 5 → median 1);
    # round 1 (an equal split for every policy) at 10× must not count, nor FedAsync's round-equivalents
    from experiments.reproduce import round_spikes

    def run(policy, seed, times, kind="measured"):
        return [{"kind": kind, "task": "mnist", "scenario": "testbed", "policy": policy, "seed": seed,
                 "round": r, "makespan_s": t} for r, t in enumerate(times, 1)]

    rows = pd.DataFrame(run("time", 1, [10, 1, 1, 1, 5]) + run("equal", 1, [1, 1, 1.2, 1, 1])
                        + run("fedasync", 1, [1, 1, 1, 9, 1]) + run("time", 1, [1, 1, 1, 9, 1], kind="pma"))
    # Act
    spikes = round_spikes(rows, "measured", "mnist", "testbed")
    # Assert
    assert (spikes["count"], spikes["rounds"]) == (1, 8)
    assert spikes["worst"] == (5.0, "time", 1, 5)
    assert round_spikes(rows, "pma", "mnist", "testbed")["count"] == 1
