"""``python -m experiments.reproduce --quick`` end to end, and what its output must say.

One quick run (weather, 2 seeds, 4 rounds, both scenarios, every registry policy, the w_e sweep;
modelled clock; the measured-clock and non-IID sections' quick forms) into a temporary folder;
the tests read its page and CSVs. The properties are ones the command could get wrong: pairing
across policies, exact budgets, the target definition, the controller beating Equal on the
testbed, the page's provenance and its plots, the measured and non-IID sections, reruns that
reuse finished runs. Every test here reads the one module-scoped run (``quick``); the command's
parts on hand-made input are in ``test_reproduce_inputs.py``, ``test_reproduce_measured.py``,
``test_reproduce_hfl.py``, ``test_noniid_summary.py`` and ``test_inprocess_noniid.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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


def test_skip_noniid_reruns_the_rest_and_keeps_the_pages_noniid_section(quick, tmp_path):
    # Prepare: the quick page with a stale IID part and a non-IID section no run would write
    from experiments import noniid, reproduce
    from experiments.noniid_parts import PARTS, kept_parts

    out, _, _ = quick
    page = (out / "results.md").read_text()
    head, rest = page.split(noniid.MARK_START)
    section = noniid.MARK_START + "\nkept by hand\n" + noniid.MARK_END
    trust = PARTS["trust"]
    (tmp_path / "results.md").write_text("# stale IID part\n\n" + section + "\n\n" + trust.start + "\nx\n" + trust.end
                                         + "\n\n## Files\n")
    # Execute: reusing the quick run's finished units
    assert reproduce.main(["--quick", "--skip-noniid", "--out", str(tmp_path), "--work", str(out / "work"),
                           "--jobs", "1"]) == 0
    again = (tmp_path / "results.md").read_text()
    # Assert: the IID part is rendered afresh; the non-IID parts are kept verbatim, in order, before "Files"
    assert "stale IID part" not in again
    iid = again.split(noniid.MARK_START)[0]
    assert iid.split("## Set-up")[1] == head.split("## Set-up")[1]  # above it: this invocation's date and wall time
    assert section + "\n\n" + trust.start + "\nx\n" + trust.end + "\n\n## Files" in again
    # a part whose end marker is missing is not kept (nothing half-copied); none at all: nothing kept
    assert kept_parts(trust.start + "\nx\n" + section) == section.splitlines()
    assert kept_parts(head) == []


def test_every_row_runs_to_equals_time_or_its_target_and_reports_finals_at_equal_rounds(quick):
    # Prepare: the quick form's runs (Equal + FedAvg 4 rounds, cap 4 × 4)
    from experiments.reproduce import parse_args

    out, _, _ = quick
    args = parse_args(["--quick"])
    # every part's runs (the baselines part's CSV holds the rows that are not in the main part's)
    s = pd.concat([pd.read_csv(out / "results" / name)
                   for name in ("noniid.csv", "noniid-baselines.csv", "noniid-batch-scaling.csv", "noniid-trust.csv",
                                "noniid-objective.csv")])
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
    # a run that reached Equal's time without the target is a miss, not a censored one (FedAsync stops on its
    # time budget only: its history row of a round-equivalent comes after the evaluation that would stop it)
    sync = tb[tb["row"] != "fedasync"]
    assert not sync["reached"].any() or (sync.loc[sync["reached"], "target_round"] <= R).all()
    # the final metric is the round-R row of the run's own file
    import glob

    for path in glob.glob(str(out / "work" / "units" / "noniid-weather-*-eqtime.csv")):
        run = pd.read_csv(path)
        row = s[(s["row"] == run["row"].iloc[0]) & (s["scenario"] == run["scenario"].iloc[0])
                & (s["seed"] == run["seed"].iloc[0])].iloc[0]
        assert row["final_metric"] == pytest.approx(float(run.loc[run["round"] == R, "mse"].iloc[0]))
        assert row["rounds_run"] == run["round"].max()


def test_baselines_part_is_rendered_once_after_the_section_and_replaced_not_duplicated(quick, tmp_path):
    # Prepare: the quick page, once with its baselines part stale and once without it
    from experiments import noniid, reproduce
    from experiments.noniid_parts import PARTS, QUICK_BASELINE_ROWS

    out, _, _ = quick
    part = PARTS["baselines"]
    page = (out / "results.md").read_text()
    # Assert: the full command renders the part once, after the main part, with its own CSV
    assert page.count(part.start) == 1 and page.count(part.end) == 1
    assert page.index(noniid.MARK_END) < page.index(part.start) < page.index(part.end) < page.index("## Files")
    block = page.split(part.start)[1].split(part.end)[0]
    assert "### Baselines on private data (weather)" in block and "#### weather, wide, α = 0.3" in block
    s = pd.read_csv(out / "results" / part.csv)
    assert sorted(set(s["row"])) == sorted(QUICK_BASELINE_ROWS) and len(s) == len(QUICK_BASELINE_ROWS) * 2 * 2
    assert "FedAsync" in block and "FedAsync" not in page.split(noniid.MARK_START)[1].split(noniid.MARK_END)[0]
    head, rest = page.split(part.start)
    stale = head + part.start + "\nstale\n" + part.end + rest.split(part.end)[1]
    without = head.rstrip("\n") + rest.split(part.end)[1]
    for k, start in enumerate((stale, without)):
        (tmp_path / "results.md").write_text(start)
        # Execute: the part alone, twice, reusing the quick run's finished units
        for _ in range(2):
            assert reproduce.main(["--quick", "--only-noniid", "--noniid-part", "baselines", "--out", str(tmp_path),
                                   "--work", str(out / "work"), "--jobs", "1"]) == 0
        again = (tmp_path / "results.md").read_text()
        # Assert: one fresh part in the main part's wake; the page around it byte for byte what it was
        assert again.count(part.start) == 1 and again.count(part.end) == 1 and "stale" not in again, k
        assert again.split(part.start)[0].rstrip("\n") == head.rstrip("\n")
        assert again.split(part.end)[1] == rest.split(part.end)[1]
        key = "non-IID [baselines]"  # nothing ran again: every run of the part was reused
        assert reproduce.REUSED[key] + reproduce.REUSED[f"{key} (to equal time)"] == len(s)


def _quick_part(out, name, after, rows):
    """Part ``name`` of the quick page: rendered once, after part ``after`` and before Files, with one CSV line per
    row of ``rows``, scenario and seed (2 × 2); returns its block, its CSV and that CSV merged with the main part's."""
    from experiments.noniid_parts import PARTS

    before, part = PARTS[after], PARTS[name]
    page = (out / "results.md").read_text()
    assert page.count(part.start) == 1 and page.count(part.end) == 1
    assert page.index(before.end) < page.index(part.start) < page.index(part.end) < page.index("## Files")
    s = pd.read_csv(out / "results" / part.csv)
    assert sorted(set(s["row"])) == sorted(rows) and len(s) == len(rows) * 2 * 2
    main = pd.read_csv(out / "results" / "noniid.csv")
    merged = s.merge(main, on=["task", "scenario", "alpha", "seed", "row"], suffixes=("", "_main"))
    return page.split(part.start)[1].split(part.end)[0], s, merged


def test_the_batch_scaling_part_follows_the_baselines_part_and_runs_nothing_the_main_part_ran(quick):
    from experiments.noniid_parts import QUICK_BATCH_SCALING_ROWS

    out, _, _ = quick
    block, s, merged = _quick_part(out, "batch-scaling", "baselines", QUICK_BATCH_SCALING_ROWS)
    assert "### Batch sizes with the normalised rule (weather)" in block and "slow nodes' batches shrunk" in block
    assert len(merged) == len(s) and (merged["time_ratio"].fillna(-1) == merged["time_ratio_main"].fillna(-1)).all()


def test_the_trust_part_follows_the_batch_scaling_part_and_reuses_the_rows_it_shares(quick):
    from experiments.noniid_parts import QUICK_TRUST_ROWS

    out, _, _ = quick
    block, _, merged = _quick_part(out, "trust", "batch-scaling", QUICK_TRUST_ROWS)
    assert "### Cost trust on honest fleets (weather)" in block
    assert "every implausible cost claim at the median" in block
    assert set(merged["row"]) == set(QUICK_TRUST_ROWS) - {"time-norm-cap8-shrink-trust-median"}
    assert (merged["time_ratio"].fillna(-1) == merged["time_ratio_main"].fillna(-1)).all()


def test_the_objective_part_follows_the_trust_part_and_reuses_the_rows_it_shares(quick):
    from experiments.noniid_parts import QUICK_OBJECTIVE_ROWS

    out, _, _ = quick
    block, s, merged = _quick_part(out, "objective", "trust", QUICK_OBJECTIVE_ROWS)
    assert "### The normalised rule's objective (weather)" in block and "data-size objective" in block
    assert set(merged["row"]) == set(QUICK_OBJECTIVE_ROWS) - {"time-norm-cap8-shrink-datasize"}
    assert (merged["time_ratio"].fillna(-1) == merged["time_ratio_main"].fillna(-1)).all()
    # the data-size row is another run: its aggregation differs wherever a node holds more than its share
    pooled = s[s["row"] == "time-norm-cap8-shrink-datasize"].set_index(["task", "scenario", "seed"])
    default = s[s["row"] == "time-norm-cap8-shrink"].set_index(["task", "scenario", "seed"])
    assert (pooled["final_metric"] != default.loc[pooled.index, "final_metric"]).any()


def test_a_given_modelled_clock_unit_is_the_runs_and_one_unlike_the_work_folders_stops_before_running(quick, tmp_path):
    # Prepare: the quick run's work folder and the units its runs were timed on
    import json

    from experiments import reproduce

    out, _, _ = quick
    work = out / "work"
    iid = json.loads((work / "settings.json").read_text())["per_sample_s"]
    noniid = json.loads((work / "noniid-settings.json").read_text())["per_sample_s"]
    task = next(iter(noniid))
    (tmp_path / "results.md").write_text((out / "results.md").read_text())
    common = ["--quick", "--out", str(tmp_path), "--work", str(work), "--jobs", "1"]
    # Execute / Assert: another unit than the saved runs' stops both sections with the fix, before anything runs
    other = {t: 2 * v for t, v in iid.items()}
    with pytest.raises(SystemExit, match="s per sample, not the .* of --per-sample-s; pass --fresh"):
        reproduce.main([*common, "--skip-noniid", "--per-sample-s", ",".join(f"{t}={v!r}" for t, v in other.items())])
    with pytest.raises(SystemExit, match="s per sample, not the .* of --per-sample-s; pass --fresh"):
        reproduce.main([*common, "--only-noniid", "--per-sample-s", f"{task}={2 * noniid[task]!r}"])
    # the saved unit given again: every run is reused, the page says that unit
    assert reproduce.main([*common, "--only-noniid", "--per-sample-s", f"{task}={noniid[task]!r}"]) == 0
    assert reproduce.REUSED["non-IID"] > 0 and f"{task} {noniid[task]:.3e}" in (tmp_path / "results.md").read_text()
