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
    assert len(pngs) == 3  # convergence (1 task) + one sweep plot per scenario
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
