"""experiments.hfl_noise: the HFL rank CV's noise floor and the controller replay on measured traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def write_equal_run(folder, rates, cv_by_policy=None):
    """history-equal-ranks.csv of one silo whose ranks ran 300 samples at ``rates[round][rank]`` s/sample."""
    rows = [{"round": r + 1, "node_id": 1, "partition_id": 0, "rank": k, "quota": 300, "samples": 300,
             "time_s": 300 * rate, "wait_s": 0.0, "energy_j": 1.0, "clock": "virtual"}
            for r, per_rank in enumerate(rates) for k, rate in enumerate(per_rank)]
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "history-equal-ranks.csv", index=False)
    for policy, cvs in (cv_by_policy or {}).items():
        pd.DataFrame({"round": range(1, len(cvs) + 1), "rank_cv_mean": cvs}).to_csv(
            folder / f"history-{policy}.csv", index=False)


def test_the_oracle_floor_by_hand():
    from experiments.hfl_noise import oracle_cv

    # mean over rounds >= 2: (1.05, 1.0); round 3 normalised: (1.1/1.05, 1) → CV 0.02326
    floor = oracle_cv(np.array([[1.0, 1.0], [1.0, 1.0], [1.1, 1.0]]))
    x = np.array([1.1 / 1.05, 1.0])
    assert floor[2] == pytest.approx(x.std() / x.mean()) and floor[2] == pytest.approx(0.02326, abs=1e-5)
    assert floor[1] == pytest.approx(0.02439, abs=1e-5)  # round 2: (1/1.05, 1)


def test_steady_ranks_have_no_noise_and_every_policy_balances_them(tmp_path):
    from experiments.hfl_noise import summarise

    # Prepare: rank 1 twice as slow as rank 0, every round, and the run's own CV figures
    write_equal_run(tmp_path / "run", [[0.001, 0.002]] * 6, {"time": [0.3, 0.1, 0.02, 0.04, 0.0, 0.0]})
    # Execute
    table = summarise([tmp_path / "run"])
    # Assert: no noise, a zero floor, the replayed controllers at 400/200 (CV 0) from round 2
    assert table.loc[table.index.str.startswith("fixed-quota noise"), "mean"].tolist() == [0.0, 0.0]
    assert table.loc[table.index.str.startswith("noise floor"), "mean"].item() == pytest.approx(0.0, abs=1e-12)
    assert (table.loc[table.index.str.startswith("replay"), "mean"].abs() < 1e-12).all()
    assert table.loc["measured in the run: time (rounds >= 3)", "mean"] == pytest.approx(0.015)


def test_noisy_ranks_raise_the_floor_and_a_missing_equal_run_is_refused(tmp_path):
    from experiments.hfl_noise import main, summarise

    rng = np.random.default_rng(3)
    rates = np.array([0.001, 0.002]) * np.exp(0.05 * rng.standard_normal((6, 2)))
    write_equal_run(tmp_path / "noisy", rates.tolist())
    table = summarise([tmp_path / "noisy"])
    floor = table.loc[table.index.str.startswith("noise floor"), "mean"].item()
    assert 0.005 < floor < 0.1
    assert table.loc["replay: time (rounds >= 3)", "mean"] > 0
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nothing-here")])


def test_the_replay_replaces_the_start_up_round_as_the_strategy_does():
    from experiments.hfl_noise import REPLAY_POLICIES, replay

    # Prepare: rank 0 costs 1 ms per sample, rank 1 2 ms; in the start-up round rank 0 looked 1.5 ms
    trace = np.array([[0.0015, 0.002]] + [[0.001, 0.002]] * 4)
    # Execute
    cvs = replay(trace, REPLAY_POLICIES["time"])
    # Assert: round 2 is split on the start-up round (343/257), round 3 on round 2 alone (400/200)
    t2 = np.array([343 * 0.001, 257 * 0.002])
    assert cvs[1] == pytest.approx(t2.std() / t2.mean())
    assert np.allclose(cvs[2:], 0.0)


def test_start_up_ratio_and_fixed_costs_by_hand(tmp_path):
    from experiments.hfl_noise import fixed_costs, startup_ratio

    assert startup_ratio(np.array([[1.2, 1.0], [1.1, 1.0], [1.0, 1.0], [1.0, 1.0]])).tolist() == [1.2, 1.0]
    # Prepare: an adaptive run whose rank 0 costs 50 ms + 1 ms per sample, rank 1 2 ms per sample;
    # round 1 (start-up, excluded) is off the line; an Equal run adds points at 300 samples
    quotas = {1: (300, 300), 2: (350, 250), 3: (400, 200), 4: (380, 220)}
    rows = [{"round": r, "partition_id": 0, "rank": k, "samples": q[k],
             "time_s": (0.05 + 0.001 * q[k] if k == 0 else 0.002 * q[k]) * (3.0 if r == 1 else 1.0)}
            for r, q in quotas.items() for k in (0, 1)]
    (tmp_path / "run").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "run" / "history-time-ranks.csv", index=False)
    write_equal_run(tmp_path / "run", [[0.35 / 300, 0.002]] * 4)  # on the same lines
    # Execute
    lines = fixed_costs([tmp_path / "run"], budget=600).set_index("rank")
    # Assert: at an even split (300 samples) rank 0's fixed share is 50 / 350 ms
    assert lines.loc[0, "fixed_s"] == pytest.approx(0.05) and lines.loc[0, "per_sample_s"] == pytest.approx(0.001)
    assert lines.loc[0, "fixed share at an even split"] == pytest.approx(0.05 / 0.35)
    assert lines.loc[1, "fixed_s"] == pytest.approx(0.0, abs=1e-12)
    assert lines.loc[1, "fixed share at an even split"] == pytest.approx(0.0, abs=1e-9)
