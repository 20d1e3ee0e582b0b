"""``python -m experiments.reproduce --quick`` end to end, and what its output must say.

One quick run (weather, 2 seeds, 4 rounds, both scenarios, every registry policy, the w_e sweep;
modelled clock) into a temporary folder; the tests read its page and CSVs. The properties are
ones the command could get wrong: pairing across policies, exact budgets, the target definition,
the controller beating Equal on the testbed, the page's provenance and its plots.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    from experiments import reproduce

    out = tmp_path_factory.mktemp("reproduce")
    code = reproduce.main(["--quick", "--out", str(out), "--work", str(out / "work"), "--jobs", "1"])
    assert code == 0
    runs = pd.read_csv(out / "results" / "runs.csv")
    sweep = pd.read_csv(out / "results" / "sweep.csv")
    return out, runs, sweep


def test_every_registry_policy_ran_on_every_scenario_and_seed(quick):
    # Prepare
    from flwr_adaptive.strategies.registry import POLICY_NAMES

    _, runs, _ = quick
    # Assert: policies × scenarios × seeds, each exactly once, on the one quick task
    assert set(runs["policy"]) == set(POLICY_NAMES)
    counts = runs.groupby(["scenario", "seed", "policy"]).size()
    assert len(counts) == len(POLICY_NAMES) * 2 * 2 and (counts == 1).all()
    assert set(runs["task"]) == {"weather"}


def test_sweep_shares_the_pma_runs_draws_exactly(quick):
    # Prepare: w_e = 0, 0.25 and 1 are Time-only, Low-energy and Energy-only; the sweep skips the
    # gradient steps, the PMA runs train, and on the modelled clock that changes no time or energy
    _, runs, sweep = quick
    pairs = {0.0: "time", 0.25: "low-energy", 1.0: "energy"}
    for (scenario, seed), s in sweep.groupby(["scenario", "seed"]):
        pma = runs[(runs["scenario"] == scenario) & (runs["seed"] == seed)].set_index("policy")
        for w, policy in pairs.items():
            row = s[np.isclose(s["w_e"], w)].iloc[0]
            # Assert: identical figures (same quotas, same jitter draws)
            assert row["energy_j"] == pytest.approx(pma.loc[policy, "energy_j"], rel=1e-9)
            assert row["makespan_s"] == pytest.approx(pma.loc[policy, "makespan_s"], rel=1e-9)
        eq = s[s["policy"] == "equal"].iloc[0]
        assert eq["energy_j"] == pytest.approx(pma.loc["equal", "energy_j"], rel=1e-9)


def test_synchronous_policies_process_the_budget_every_round(quick):
    # Prepare
    from experiments.reproduce import parse_args

    _, runs, _ = quick
    sync = runs[runs["policy"] != "fedasync"]
    # Assert: every round of every synchronous run trained exactly the budget
    assert (sync["samples_per_round"] == parse_args(["--quick"]).budget).all()


def test_target_is_equals_loss_at_80_percent_and_equal_reaches_it_by_then(quick):
    # Prepare: 4 rounds → target round ceil(3.2) = 4
    from experiments.reproduce import target_round

    _, runs, _ = quick
    eq = runs[runs["policy"] == "equal"]
    # Assert
    assert target_round(4) == 4 and target_round(10) == 8
    assert (eq["target_round"] <= 4).all()
    assert (eq["time_to_target_s"] <= eq["makespan_s"] + 1e-12).all()
    # every policy of a (scenario, seed) shares Equal's target
    assert (runs.groupby(["scenario", "seed"])["target_loss"].nunique() == 1).all()


def test_time_only_beats_equal_on_the_testbed_in_every_seed(quick):
    # Prepare
    _, runs, _ = quick
    tb = runs[runs["scenario"] == "testbed"].set_index(["seed", "policy"])
    for seed in (0, 1):
        # Assert: shorter, cheaper and better balanced than Equal, with the change stored as paired Δ
        assert tb.loc[(seed, "time"), "makespan_s"] < tb.loc[(seed, "equal"), "makespan_s"]
        assert tb.loc[(seed, "time"), "energy_j"] < tb.loc[(seed, "equal"), "energy_j"]
        assert tb.loc[(seed, "time"), "cv_busy"] < tb.loc[(seed, "equal"), "cv_busy"]
        d = tb.loc[(seed, "time"), "d_makespan_s"]
        assert d == pytest.approx(tb.loc[(seed, "time"), "makespan_s"] / tb.loc[(seed, "equal"), "makespan_s"] - 1)


def test_wide_scenario_is_wider_than_the_testbed():
    # Prepare
    from experiments.reproduce import scenario_profiles

    spread = lambda ps: np.log([p.slowdown for p in ps]).std()  # noqa: E731
    # Assert: σ of log-slowdown near 1 on average over seeds, well above the testbed's; fleets differ by seed
    wide = [spread(scenario_profiles("wide", s)) for s in range(20)]
    assert 0.7 < np.mean(wide) < 1.2 and spread(scenario_profiles("testbed", 0)) < 0.6
    assert scenario_profiles("wide", 0) != scenario_profiles("wide", 1)
    assert scenario_profiles("wide", 3) == scenario_profiles("wide", 3)


def test_page_has_provenance_tables_and_plots(quick):
    # Prepare
    from flwr_adaptive.strategies.registry import LABELS, POLICY_NAMES

    out, _, _ = quick
    page = (out / "results.md").read_text()
    # Assert: provenance at the top
    head = page.split("## Headline")[0]
    for key in ("**Command**: `python -m experiments.reproduce --quick", "**Date**", "**Commit**", "**Machine**",
                "**Wall time of the command**", "modelled device time", "**Calibration**"):
        assert key in head, key
    # every policy's label in the tables, the sweep's verdict, the FedScale citation
    for p in POLICY_NAMES:
        assert f"| {LABELS.get(p, p)} |" in page
    assert page.count("Non-monotone") + page.count("Not reproduced") == 2
    assert "FedScale" in page and "client_metadata.py" in page
    # every referenced plot exists and is a PNG
    import re

    pngs = re.findall(r"\]\((results/[^)]+\.png)\)", page)
    # convergence (1 task) + one sweep plot per scenario + the non-IID section's floor plot
    assert len(pngs) == 4
    for rel in pngs:
        assert (out / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wide_ddp_slowdowns_are_lognormal_mid_quantiles():
    # Prepare: Φ⁻¹(1/8, 3/8, 5/8, 7/8) = ∓1.1503, ∓0.3186; exp, scaled so the fastest is 2
    from experiments.reproduce import lognormal_quartile_slowdowns

    expected = [2.0, 2.0 * math.exp(1.1503 - 0.3186), 2.0 * math.exp(1.1503 + 0.3186), 2.0 * math.exp(2 * 1.1503)]
    # Assert
    assert lognormal_quartile_slowdowns() == pytest.approx(expected, abs=0.01)


def test_mean_ci_matches_a_hand_computed_t_interval():
    # Prepare: values 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653
    from experiments.reproduce import mean_ci

    m, h, n = mean_ci([1.0, 2.0, 3.0, math.nan])
    # Assert
    assert (m, n) == (2.0, 3)
    assert h == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert mean_ci([5.0])[0] == 5.0 and math.isnan(mean_ci([5.0])[1])


def test_options_are_checked_early():
    from experiments import reproduce

    with pytest.raises(SystemExit):
        reproduce.parse_args(["--policies", "time,energy"])  # no Equal: no target, no Δ
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--tasks", "imagenet"])
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--seeds", "1"])
    for bad in (["--noniid-rounds", "imagenet=3"], ["--noniid-rounds", "mnist=x"], ["--noniid-lr", "mnist=-1"],
                ["--noniid-round-cap", "0"], ["--noniid-rounds", "0"]):
        with pytest.raises(SystemExit):
            reproduce.parse_args(bad)
    # per-task rounds: a number for every task, or task=rounds over the defaults
    assert set(reproduce.parse_args(["--noniid-rounds", "7"]).noniid_rounds.values()) == {7}
    args = reproduce.parse_args(["--noniid-rounds", "weather=3", "--noniid-lr", "mnist=0.2"])
    default = reproduce.parse_args([])
    assert args.noniid_rounds == {**default.noniid_rounds, "weather": 3}
    assert args.noniid_lr == {**default.noniid_lr, "mnist": 0.2}


# --------------------------------------------------------------------------- the measured clock
def test_measured_section_ran_every_asked_policy_and_seed_once_on_its_own_clock(quick):
    # Prepare
    from experiments.reproduce import parse_args

    out, _, _ = quick
    args = parse_args(["--quick"])
    measured = pd.read_csv(out / "results" / "measured.csv")
    # Assert: the quick form's policies × seeds, once each, on the one task and scenario, full budget each round
    assert sorted(zip(measured["seed"], measured["policy"])) == sorted(
        (s, p) for s in range(args.measured_seeds) for p in args.measured_policies)
    assert set(measured["task"]) == {args.measured_task} and set(measured["scenario"]) == {args.measured_scenario}
    assert (measured["samples_per_round"] == args.budget).all()
    # Δ vs Equal is paired per seed on the measured figures themselves
    eq = measured[measured["policy"] == "equal"].set_index("seed")["makespan_s"]
    for _, row in measured.iterrows():
        assert row["d_makespan_s"] == pytest.approx(row["makespan_s"] / eq[row["seed"]] - 1)


def test_equal_trains_the_same_model_on_both_clocks(quick):
    # Prepare: Equal's quotas do not depend on the clock, so with the same seed it trains exactly the same model
    out, runs, _ = quick
    measured = pd.read_csv(out / "results" / "measured.csv").set_index(["seed", "policy"])
    modelled = runs[runs["scenario"] == "testbed"].set_index(["seed", "policy"])
    for seed in (0, 1):
        # Assert
        assert measured.loc[(seed, "equal"), "final_loss"] == pytest.approx(modelled.loc[(seed, "equal"), "final_loss"],
                                                                            rel=1e-9)


def test_page_has_the_measured_section_with_its_table_and_verdict(quick):
    # Prepare
    from experiments.reproduce import label, parse_args

    out, _, _ = quick
    page = (out / "results.md").read_text()
    args = parse_args(["--quick"])
    # Assert: the header names both clocks; the section's table has one row per asked policy with its seed count
    head = page.split("## Set-up")[0]
    assert "modelled device time" in head and "PMA on the measured clock" in head
    section = page.split("## PMA on the measured clock")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| policy")]
    assert [r.split(" | ")[0][2:] for r in rows] == [label(p) for p in args.measured_policies]
    assert all(r.split(" | ")[8] == str(args.measured_seeds) for r in rows)
    assert "**Measured vs modelled clock, same seeds:**" in section
    assert ("**Stable in sign:**" in section) != ("**Not stable on this shared machine:**" in section)
    assert "Single rounds (round ≥ 2) whose makespan exceeds 3× the median round" in section


def test_a_rerun_that_reuses_every_run_states_the_warm_up_of_the_invocation_that_ran_them(quick, tmp_path):
    # Prepare: the quick run's finished runs, reused into another page
    import re

    from experiments import reproduce

    out, _, _ = quick
    first = (out / "results.md").read_text()
    # Execute
    assert reproduce.main(["--quick", "--out", str(tmp_path), "--work", str(out / "work"), "--jobs", "1"]) == 0
    again = (tmp_path / "results.md").read_text()
    # Assert: no new warm-up (it would state a calibration the reused runs never saw)
    stated = [re.findall(r"the warm-up's calibration gave ([0-9.e+-]+)", page) for page in (first, again)]
    assert len(stated[0]) == 1 and stated[1] == stated[0]
    assert reproduce.REUSED["measured"] == len(reproduce.plan_measured_units(reproduce.parse_args(["--quick"])))



def test_a_rerun_states_the_iid_reuse_in_the_header_and_the_non_iid_reuse_in_its_section(quick, tmp_path):
    # Prepare: the quick run's finished runs, reused into another page
    import re

    from experiments import noniid, reproduce

    out, _, _ = quick
    # Execute
    assert reproduce.main(["--quick", "--out", str(tmp_path), "--work", str(out / "work"), "--jobs", "1"]) == 0
    page = (tmp_path / "results.md").read_text()
    # Assert: the header speaks of the IID settings' earlier invocations only; the non-IID section of its own runs
    header = next(line for line in page.splitlines() if line.startswith("- **Wall time of the command**"))
    reused = re.search(r"It reused finished runs \(([^)]*)\)", header).group(1)
    assert "pma and sweep" in reused and "measured" in reused and "non-IID" not in reused
    assert re.search(r"it reused [0-9]+ finished runs from `--work`", page.split(noniid.MARK_START)[1])
    assert reproduce.REUSED["non-IID"] > 0

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
        expected = int((np.sign(runs.loc[runs["policy"] == "time", "d_makespan_s"]) == np.sign(f["mod_makespan"][0])).sum())
        assert f["same_sign"] == (expected, len(seeds))
    if f["mod_makespan"][1] > 0:
        assert f["width_ratio"] == pytest.approx(1.0)


# --------------------------------------------------------------------------- HFL
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


def test_hfl_and_measured_options_are_checked_early():
    from experiments import reproduce

    with pytest.raises(SystemExit):
        reproduce.parse_args(["--measured-policies", "time,energy"])  # no Equal to compare with
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--hfl-policies", "equal,oort"])  # Oort-like is not a controller policy
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--measured-seeds", "1"])
    args = reproduce.parse_args([])
    assert (args.hfl_seeds, args.hfl_rounds, args.ddp_rounds, args.measured_seeds) == (3, 10, 10, 5)
    assert args.hfl_policies == ["equal", "time", "min-energy"]


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


# --------------------------------------------------------------------------- private, label-skewed data
def test_noniid_section_ran_every_row_scenario_and_seed_with_equal_as_its_reference(quick):
    # Prepare
    from experiments import noniid
    from experiments.reproduce import parse_args

    out, _, _ = quick
    args = parse_args(["--quick"])
    s = pd.read_csv(out / "results" / "noniid.csv")
    # Assert: rows × scenarios × seeds at the quick α, once each, on the quick task
    assert sorted(set(s["row"])) == sorted(args.noniid_rows)
    assert s.groupby(["scenario", "seed", "row"]).size().eq(1).all() and len(s) == len(args.noniid_rows) * 2 * 2
    assert set(s["task"]) == {"weather"} and set(s["alpha"]) == {0.3}
    # the weather target is Equal + FedAvg's final MSE × 1.02, shared by every row of a seed; Equal's ratio is 1
    eq = s[s["row"] == "equal-fedavg"]
    assert np.allclose(eq["target"], eq["final_metric"] * noniid.MSE_SLACK)
    assert eq["reached"].all() and np.allclose(eq["time_ratio"], 1.0) and np.allclose(eq["d_worst_same_time"], 0.0)
    assert (s.groupby(["scenario", "seed"])["target"].nunique() == 1).all()
    # private data: the capped rows never train more than the budget; PyramidFL-style fills rounds beyond it
    capped = s[~s["row"].isin(["pyramid"])]
    assert (capped["samples_per_round"] <= args.budget).all()
    assert (s.loc[s["row"] == "pyramid", "samples_per_round"] > args.budget).all()


def test_pyramid_rounds_last_as_long_as_equals_and_fast_nodes_do_more(quick):
    # Prepare: from round 2 PyramidFL-style gives each node the samples it finishes in the slowest node's
    # equal-share time, so its rounds are Equal's within the jitter (σ 0.05) and the fastest does the most
    import glob

    out, _, _ = quick
    for path in glob.glob(str(out / "work" / "units" / "noniid-weather-testbed-s0-a0.3-pyramid-eqtime.csv")):
        path = path.replace("-eqtime", "")
        py = pd.read_csv(glob.glob(path.replace("pyramid", "pyramid*"))[0]).set_index("round")
        eq = pd.read_csv(path.replace("pyramid", "equal-fedavg")).set_index("round")
        late = [r for r in py.index if r >= 2 and r in eq.index]  # it may run a round past Equal's to Equal's time
        ratio = py.loc[late, "makespan_s"] / eq.loc[late, "makespan_s"]
        # Assert
        assert ((ratio > 0.8) & (ratio < 1.25)).all(), ratio
        assert (py.loc[late, "samples"] > 1.5 * eq.loc[late, "samples"]).all()
        break
    else:
        pytest.fail("the quick run has no PyramidFL-style unit for weather / testbed / seed 0")


def test_page_has_the_noniid_section_with_targets_headline_and_floor_plot(quick):
    # Prepare
    from experiments import noniid

    out, _, _ = quick
    page = (out / "results.md").read_text()
    # Assert: one section between its markers, before Files, with its own provenance and tables
    assert page.count(noniid.MARK_START) == 1 and page.count(noniid.MARK_END) == 1
    section = page.split(noniid.MARK_START)[1].split(noniid.MARK_END)[0]
    assert page.index(noniid.MARK_END) < page.index("## Files")
    for key in ("**Command**: `python -m experiments.reproduce --quick", "**Calibration**", "Dirichlet",
                "### Targets", "### Headline: time to target × Equal + FedAvg", "### weather, testbed, α = 0.3",
                "### A floor on a participant's share", "### Measured clock: weather, testbed", "PyramidFL-style"):
        assert key in section, key
    assert (out / "results" / "noniid-floor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](results/noniid-floor.png)" in section
    measured = pd.read_csv(out / "results" / "noniid-measured.csv")
    assert len(measured) == 2 * len(set(measured["row"])) and set(measured["seed"]) == {0, 1}


def test_only_noniid_replaces_the_section_and_keeps_the_rest(quick, tmp_path):
    # Prepare: the quick page with its non-IID section replaced by a stale one
    from experiments import noniid, reproduce

    out, _, _ = quick
    page = (out / "results.md").read_text()
    head, rest = page.split(noniid.MARK_START)
    stale = head + noniid.MARK_START + "\nstale\n" + noniid.MARK_END + rest.split(noniid.MARK_END)[1]
    (tmp_path / "results.md").write_text(stale)
    # Execute: reusing the quick run's finished units
    assert reproduce.main(["--quick", "--only-noniid", "--out", str(tmp_path), "--work", str(out / "work"),
                           "--jobs", "1"]) == 0
    again = (tmp_path / "results.md").read_text()
    # Assert: the IID part is byte for byte what it was; the section is fresh; nothing ran again
    assert again.split(noniid.MARK_START)[0] == head
    assert "stale" not in again and "### Targets" in again
    assert reproduce.REUSED["non-IID"] > 0
    assert noniid.splice("# R\n\n## Files\nx\n", ["A"]) == "# R\n\nA\n\n## Files\nx\n"


def test_every_row_runs_to_equals_time_or_its_target_and_reports_finals_at_equal_rounds(quick):
    # Prepare: the quick form's runs (Equal + FedAvg 4 rounds, cap 4 × 4)
    from experiments.reproduce import parse_args

    out, _, _ = quick
    args = parse_args(["--quick"])
    s = pd.read_csv(out / "results" / "noniid.csv")
    R, cap = args.noniid_rounds["weather"], args.noniid_round_cap * args.noniid_rounds["weather"]
    eq = s[s["row"] == "equal-fedavg"]
    other = s[s["row"] != "equal-fedavg"]
    # Assert: Equal runs its rounds; every other run at least as many, and it ends for a stated reason
    assert (eq["rounds_run"] == R).all() and (eq["stop"] == "rounds").all() and (s["equal_rounds"] == R).all()
    assert (other["rounds_run"] >= R).all() and (other["rounds_run"] <= cap).all()
    assert set(other["stop"]) <= {"target", "time budget", "cap"}
    tb = other[other["stop"] == "time budget"]
    assert (tb["time_run_s"] >= tb["equal_time_s"] * (1 - 1e-9)).all()
    # stopped at the target: at the first round from R on that reaches it (target round before R: at R)
    tg = other[other["stop"] == "target"]
    assert tg["reached"].all() and (tg["rounds_run"] == np.maximum(tg["target_round"], R)).all()
    capped = other[other["stop"] == "cap"]
    assert (capped["rounds_run"] == cap).all() and (capped["time_run_s"] < capped["equal_time_s"]).all()
    # a run that reached Equal's time without the target is a miss, not a censored one
    assert not tb["reached"].any() or (tb.loc[tb["reached"], "target_round"] <= R).all()
    # the final metric is the round-R row of the run's own file
    import glob

    for path in glob.glob(str(out / "work" / "units" / "noniid-weather-*-eqtime.csv")):
        run = pd.read_csv(path)
        row = s[(s["row"] == run["row"].iloc[0]) & (s["scenario"] == run["scenario"].iloc[0])
                & (s["seed"] == run["seed"].iloc[0])].iloc[0]
        assert row["final_metric"] == pytest.approx(float(run.loc[run["round"] == R, "mse"].iloc[0]))
        assert row["rounds_run"] == run["round"].max()


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


def test_a_budgeted_run_stops_at_the_first_round_past_its_time_or_at_its_target():
    # Prepare: weather, no training (modelled clock: the time does not depend on the model), Equal's 3 rounds
    import dataclasses

    from experiments.inprocess import RunSpec, run_pma
    from experiments.reproduce import scenario_profiles

    base = RunSpec("equal", "weather", scenario_profiles("wide", 0), rounds=3, budget=440, per_sample_s=1e-3,
                   train=False)
    equal = run_pma(base).rounds
    budget = float(equal["virtual_time_s"].iloc[-1])
    # Act: Time-only to Equal's time (cap 12 rounds); the same with a target the untrained model already meets
    timed = run_pma(dataclasses.replace(base, policy="time", rounds=12, min_rounds=3, time_budget_s=budget)).rounds
    target = run_pma(dataclasses.replace(base, policy="time", rounds=12, min_rounds=3, time_budget_s=budget,
                                         stop_target=1e9, stop_higher=False)).rounds
    short = run_pma(dataclasses.replace(base, policy="time", rounds=4, min_rounds=3, time_budget_s=100 * budget)).rounds
    # FedAsync writes a round-equivalent's row after its evaluation: it stops on its time only, keeping every row
    fedasync = run_pma(dataclasses.replace(base, policy="fedasync", rounds=12, min_rounds=3, time_budget_s=budget,
                                           stop_target=1e9, stop_higher=False)).rounds
    # Assert: past Equal's rounds (its rounds are shorter), ended by the first round at or beyond the budget
    t = timed["virtual_time_s"].to_numpy()
    assert (equal["stop"] == "rounds").all() and (timed["stop"] == "time budget").all()
    assert len(timed) - 1 > 3 and t[-1] >= budget > t[-2]
    assert (target["stop"] == "target").all() and target["round"].max() == 3  # not before min_rounds
    assert (short["stop"] == "cap").all() and short["round"].max() == 4
    assert (fedasync["stop"] == "time budget").all() and fedasync["virtual_time_s"].iloc[-1] >= budget
    with pytest.raises(ValueError, match="min_rounds"):
        dataclasses.replace(base, min_rounds=4)
    with pytest.raises(ValueError, match="time_budget_s"):
        dataclasses.replace(base, time_budget_s=0.0)


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


def test_dirichlet_partitions_are_skewed_disjoint_and_cover_the_training_data():
    # Prepare: weather's label is the month of the target hour
    from experiments.inprocess import partitions

    def skew(parts):  # mean total-variation distance of each partition's label mix from the pooled mix
        labels = np.concatenate([p.labels for p in parts])
        pooled = np.bincount(labels, minlength=12) / len(labels)
        return np.mean([0.5 * np.abs(np.bincount(p.labels, minlength=12) / len(p) - pooled).sum() for p in parts])

    iid, _ = partitions("weather", 11, 0)
    d03, _ = partitions("weather", 11, 0, "dirichlet", 0.3)
    d01, _ = partitions("weather", 11, 0, "dirichlet", 0.1)
    # Assert: more skew at smaller α, none to speak of for IID; the same samples, each in one partition
    assert skew(iid) < 0.1 < skew(d03) < skew(d01)
    ids = np.concatenate([p.ids for p in d03])
    assert len(ids) == len(np.unique(ids)) == sum(len(p) for p in iid)
    assert partitions("weather", 11, 1, "dirichlet", 0.3)[0][0].ids.tolist() != d03[0].ids.tolist()


def test_group_metrics_recombine_to_the_holdout_and_bound_the_worst_client():
    # Prepare: weather, a fresh model, the holdout split by month
    from experiments.inprocess import group_metrics, holdout_groups, load_task, partitions

    task = load_task("weather")
    model = task.make_model(seed=0)
    parts, holdout = partitions("weather", 11, 0, "dirichlet", 0.3)
    groups = holdout_groups("weather")
    # Act
    overall, worst = group_metrics(task, model, groups, parts)
    whole = task.evaluate(model, holdout)
    per_month = [task.evaluate(model, sub)["mse"] for _, sub in groups]
    # Assert: the month-by-month pass gives the whole holdout's figures; a client's error is a mix of months'
    assert overall["mse"] == pytest.approx(whole["mse"], rel=1e-5)
    assert overall["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert min(per_month) <= worst <= max(per_month)


def test_proximal_training_is_plain_training_at_mu_zero_and_stays_nearer_the_global_model():
    import torch

    from experiments.inprocess import load_task, partitions, train_proximal

    task = load_task("weather")
    data = partitions("weather", 11, 0)[0][0]
    idx = np.arange(min(256, len(data)))

    def trained(fn, *extra):
        model = task.make_model(seed=0)
        fn(task, model, data, idx, *extra) if extra else task.train(model, data, idx)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    start = torch.cat([p.detach().flatten() for p in task.make_model(seed=0).parameters()])
    plain, zero, prox = trained(None), trained(train_proximal, 0.0), trained(train_proximal, 10.0)
    # Assert
    assert torch.allclose(plain, zero)
    assert (prox - start).norm() < (plain - start).norm()
