"""The HFL section of ``experiments.reproduce`` on hand-made rank times: the per-silo CV of the ranks'
times, its table (late rounds per seed, intervals over seeds, the settled rounds when reached),
the section read from the folders ``experiments.hfl`` leaves (a rerun: no ``flwr run`` here) and
its headline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def test_rank_cv_is_population_std_over_mean_per_round_and_silo():
    # Prepare: silo 0's ranks took 1 and 3 s (std 1, mean 2 → 0.5); silo 1's 2 and 2 s (0)
    from experiments.reproduce import rank_cv_rows

    ranks = pd.DataFrame({"round": [1, 1, 1, 1], "partition_id": [0, 0, 1, 1], "time_s": [1.0, 3.0, 2.0, 2.0],
                          "clock": ["virtual"] * 4})
    # Act
    rows = {(r["round"], r["silo"]): r["rank_cv"] for r in rank_cv_rows(ranks)}
    # Assert
    assert rows == {(1, 0): pytest.approx(0.5), (1, 1): pytest.approx(0.0)}


def test_hfl_table_averages_late_rounds_per_seed_then_intervals_over_seeds():
    # Prepare: 2 silos, 2 seeds, rounds 1–4; rounds 1–2 carry a huge CV that must not count (from round 3)
    from experiments.reproduce import hfl_table

    rows = []
    for seed, (a, b) in enumerate(((0.1, 0.3), (0.2, 0.4))):  # silo 0's CV in rounds 3 and 4 per seed
        for rnd in (1, 2, 3, 4):
            late = rnd >= 3
            rows.append({"setting": "moderate", "seed": seed, "policy": "Equal", "round": rnd, "silo": 0,
                         "rank_cv": (a if rnd == 3 else b) if late else 9.0})
            rows.append({"setting": "moderate", "seed": seed, "policy": "Equal", "round": rnd, "silo": 1,
                         "rank_cv": 0.5 if late else 9.0})
    # Act
    header, body = hfl_table(pd.DataFrame(rows))
    # Assert: silo 0 per seed 0.2 and 0.3 → mean 0.25, half-width 12.7062 · 0.0707107 / √2 = 0.635;
    # silo 1 always 0.5; mean over silos per seed 0.35, 0.4 → 0.375 ± 0.318
    assert header == ["setting", "policy", "silo 0", "silo 1", "mean over silos", "seeds"]
    assert body == [["moderate", "Equal", "0.25 ± 0.64", "0.5 ± 0", "0.375 ± 0.32", "2"]]


def test_hfl_table_adds_the_settled_rounds_when_the_runs_reach_them():
    # Prepare: 1 silo, 2 seeds, rounds 1–8; CV 0.4 in rounds 3–6, then 0.02 / 0.04 per seed in rounds 7–8
    from experiments.reproduce import SETTLED_ROUND, hfl_headline, hfl_table, settled_cv

    rows = [{"setting": "wide", "seed": seed, "policy": "Time-only", "round": rnd, "silo": 0,
             "rank_cv": 9.0 if rnd < 3 else (0.4 if rnd < SETTLED_ROUND else late)}
            for seed, late in enumerate((0.02, 0.04)) for rnd in range(1, 9)]
    # Act
    header, body = hfl_table(pd.DataFrame(rows))
    short = hfl_table(pd.DataFrame([r for r in rows if r["round"] < SETTLED_ROUND]))
    # Assert: rounds ≥ 3 per seed (4·0.4 + 2·late) / 6 → 0.2733, 0.28 → 0.277 ± 12.7062 · 0.004714 / √2 = 0.042;
    # rounds ≥ 7: 0.02, 0.04 → 0.03 ± 12.7062 · 0.0141421 / √2 = 0.127
    assert SETTLED_ROUND == 7
    assert header == ["setting", "policy", "silo 0", "mean over silos", "mean over silos, rounds ≥ 7", "seeds"]
    assert body == [["wide", "Time-only", "0.277 ± 0.042", "0.277 ± 0.042", "0.03 ± 0.13", "2"]]
    assert short[0] == ["setting", "policy", "silo 0", "mean over silos", "seeds"]  # 6-round runs: no such column
    assert list(settled_cv(pd.DataFrame(rows), "rank_cv", ("policy",))[("Time-only",)]) == [0.02, 0.04]
    assert ("rounds ≥ 3: *wide*: Time-only 0.277 ± 0.042. After 6 rounds (rounds ≥ 7): *wide*: Time-only "
            "0.03 ± 0.13.") in hfl_headline(pd.DataFrame(rows))


def _hfl_folder(folder, policies, cv_of_silo):
    """The files ``experiments.hfl`` leaves per seed, hand-made: silo s's two ranks took 1 and 1 + 2·cv seconds."""
    folder.mkdir(parents=True)
    (folder / "comparison.csv").write_text("policy\n")
    for policy in policies:
        rows, hist = [], []
        for rnd in (1, 2, 3, 4):
            cvs = []
            for silo, cv in cv_of_silo[policy].items():
                fast = 1.0
                slow = fast * (1 + cv) / (1 - cv)  # population CV of (fast, slow) is cv
                rows += [{"round": rnd, "partition_id": silo, "rank": r, "time_s": t, "clock": "virtual"}
                         for r, t in enumerate((fast, slow))]
                cvs.append(cv)
            hist.append({"round": rnd, "rank_cv_mean": float(np.mean(cvs))})
        pd.DataFrame(rows).to_csv(folder / f"history-{policy}-ranks.csv", index=False)
        pd.DataFrame(hist).to_csv(folder / f"history-{policy}.csv", index=False)


def test_hfl_section_reads_every_setting_and_seed_and_writes_table_csv_and_plot(tmp_path):
    # Prepare: the folders of both settings × 2 seeds already exist (a rerun reuses them: no flwr run here)
    from experiments import reproduce

    args = reproduce.parse_args(["--hfl-seeds", "2", "--hfl-rounds", "4", "--hfl-policies", "equal,time"])
    cv = {"moderate": ({"equal": {0: 0.3, 1: 0.1, 2: 0.2}, "time": {0: 0.05, 1: 0.03, 2: 0.04}},
                       {"equal": {0: 0.3, 1: 0.1, 2: 0.2}, "time": {0: 0.07, 1: 0.05, 2: 0.06}}),
          "wide": ({"equal": {0: 0.8, 1: 0.1, 2: 0.6}, "time": {0: 0.1, 1: 0.02, 2: 0.09}},
                   {"equal": {0: 0.5, 1: 0.4, 2: 0.9}, "time": {0: 0.2, 1: 0.05, 2: 0.08}})}
    for key, per_seed in cv.items():
        for seed, cvs in enumerate(per_seed):
            _hfl_folder(tmp_path / f"hfl-{key}-r4-equal_time-s{seed}", ["equal", "time"], cvs)
    # Act
    hfl = reproduce.run_hfl(args, tmp_path)
    figs = tmp_path / "figs"
    figs.mkdir()
    lines = reproduce.hfl_section(args, hfl, figs)
    # Assert: nothing failed, both settings reused from the folders, CVs recovered from the ranks' times
    assert hfl["failed"] == [] and reproduce.REUSED["HFL"] == 4
    assert list(hfl["curves"]) == list(reproduce.hfl_settings())
    table = pd.read_csv(figs / "hfl.csv")
    assert len(table) == 2 * 2 * 2 * 4 * 3  # settings × seeds × policies × rounds × silos
    got = table.set_index(["setting", "seed", "policy", "round", "silo"])["rank_cv"]
    wide = [s for s in reproduce.hfl_settings() if s.startswith("wide")][0]
    assert got[(wide, 1, "Equal", 3, 2)] == pytest.approx(0.9)
    # the table: one row per (setting, policy); wide Time-only, silo 1: seeds 0.02 and 0.05 → 0.035 ± 0.19
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| setting")]
    assert len(rows) == 4
    assert rows[3] == f"| {wide} | Time-only | 0.15 ± 0.64 | 0.035 ± 0.19 | 0.085 ± 0.064 | 0.09 ± 0.25 | 2 |"
    text = "\n".join(lines)
    assert "*moderate (testbed boards)*: Equal 0.2 ± 0, Time-only 0.05 ± 0.13" in text
    assert "smallest quota" not in text  # no rank at one sample per step in these folders
    assert (figs / "hfl-cv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hfl_headline_counts_late_silo_rounds_at_the_smallest_rank_quota():
    # Prepare: Time-only gave a rank 10 samples (one per step) in round 3 of silo 0 and in round 1 (too early
    # to count); Equal's 300/300 never counts
    from experiments.reproduce import HFL_STEPS, hfl_headline

    rows = [{"setting": "wide", "seed": 0, "policy": p, "round": rnd, "silo": 0, "rank_cv": 0.1,
             "min_samples": 10 if (p == "Time-only" and rnd in (1, 3)) else 300}
            for p in ("Equal", "Time-only") for rnd in (1, 2, 3, 4)]
    # Act
    text = hfl_headline(pd.DataFrame(rows))
    # Assert
    assert HFL_STEPS == 10
    assert "*wide*: Equal 0.1, Time-only 0.1" in text
    assert "Time-only, wide: 1 of 2" in text and "Equal, wide" not in text
