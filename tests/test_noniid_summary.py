"""The non-IID section's summary (``experiments.noniid.summarise``, ``target_checks``) on hand-made
runs: Equal + FedAvg's target, time and energy to it, the worst group at the same time, finals at
Equal's rounds from a run that went on to Equal's time."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def test_noniid_summary_takes_finals_at_equal_rounds_and_time_to_target_from_the_longer_run():
    # Prepare: Equal + FedAvg 2 rounds (acc 0.5, 0.8 at t = 1, 2 → target 0.79, its time 2). Time-only runs
    # 4 rounds of 0.5 s to Equal's time: 0.5, 0.6, 0.7, 0.85 → reached in round 4 at t = 2.0 (ratio 1), its
    # final at equal rounds is round 2's 0.6, and its makespan sums rounds 1–2 only.
    from experiments.noniid import summarise

    def run(row, accs, dt, stop):
        base = {"kind": "noniid", "task": "t", "scenario": "wide", "alpha": 0.3, "seed": 0, "row": row, "stop": stop}
        rows = [{**base, "round": 0, "accuracy": 0.1, "worst_group": 0.0, "virtual_time_s": 0.0,
                 "virtual_energy_j": 0.0, "makespan_s": np.nan, "energy_j": np.nan, "samples": np.nan}]
        for r, a in enumerate(accs, 1):
            rows.append({**base, "round": r, "accuracy": a, "worst_group": a / 2, "virtual_time_s": r * dt,
                         "virtual_energy_j": 3 * r * dt, "makespan_s": dt, "energy_j": 3 * dt, "samples": 10 * r})
        return rows

    rows = pd.DataFrame(run("equal-fedavg", [0.5, 0.8], 1.0, "rounds")
                        + run("time-samples", [0.5, 0.6, 0.7, 0.85], 0.5, "target"))
    # Act
    s = summarise(rows, {"t": "accuracy"}, {"t": True}).set_index("row")
    # Assert
    t = s.loc["time-samples"]
    assert t["reached"] and t["target_round"] == 4 and t["time_to_target_s"] == 2.0
    assert t["time_ratio"] == pytest.approx(1.0)
    assert t["final_metric"] == 0.6 and t["worst_final"] == 0.3
    assert t["makespan_s"] == 1.0 and t["samples_per_round"] == 15.0
    assert (t["rounds_run"], t["equal_rounds"], t["stop"]) == (4, 2, "target")
    assert (t["time_run_s"], t["equal_time_s"]) == (2.0, 2.0)


def test_noniid_summary_on_hand_made_runs():
    # Prepare: one seed, accuracy task. Equal + FedAvg: acc 0.5, 0.7, 0.8 at t = 1, 2, 3 → target 0.79,
    # reached at t = 3. Time-only: 0.6, 0.795 at t = 0.5, 1.2 → reached at 1.2, ratio 0.4; its worst class
    # there 0.3 vs Equal's at t ≤ 1.2 (round 1: 0.45) → −15 points. Other: never reaches.
    from experiments.noniid import summarise, target_checks

    def run(row, accs, times, worst):
        rows = [{"kind": "noniid", "task": "t", "scenario": "testbed", "alpha": 0.3, "seed": 0, "row": row,
                 "round": 0, "accuracy": 0.1, "worst_group": 0.0, "virtual_time_s": 0.0, "virtual_energy_j": 0.0,
                 "makespan_s": np.nan, "energy_j": np.nan, "samples": np.nan}]
        for r, (a, t, w) in enumerate(zip(accs, times, worst), 1):
            rows.append({**rows[0], "round": r, "accuracy": a, "worst_group": w, "virtual_time_s": t,
                         "virtual_energy_j": 10 * t, "makespan_s": 1.0, "energy_j": 10.0, "samples": 100})
        return rows

    rows = pd.DataFrame(run("equal-fedavg", [0.5, 0.7, 0.8], [1, 2, 3], [0.45, 0.5, 0.6])
                        + run("time-samples", [0.6, 0.795], [0.5, 1.2], [0.2, 0.3])
                        + run("other", [0.2, 0.3], [1, 2], [0.1, 0.1]))
    # Act
    s = summarise(rows, {"t": "accuracy"}, {"t": True}).set_index("row")
    checks = target_checks(s.reset_index(), "time-samples")
    # Assert
    assert s.loc["equal-fedavg", "target"] == pytest.approx(0.79)
    assert s.loc["time-samples", "time_to_target_s"] == 1.2 and s.loc["time-samples", "target_round"] == 2
    assert s.loc["time-samples", "time_ratio"] == pytest.approx(0.4)
    assert s.loc["time-samples", "energy_ratio"] == pytest.approx(0.4)
    assert s.loc["time-samples", "d_worst_same_time"] == pytest.approx(-15.0)
    assert not s.loc["other", "reached"] and math.isnan(s.loc["other", "time_ratio"])
    assert checks == [{"task": "t", "scenario": "testbed", "reached": 1, "seeds": 1, "median_ratio": pytest.approx(0.4),
                       "max_ratio": pytest.approx(0.4), "limit": 0.6, "ratio_ok": True,
                       "worst_delta": pytest.approx(-15.0), "worst_ok": False, "trivial": False}]
