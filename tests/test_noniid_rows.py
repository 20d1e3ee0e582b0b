"""The non-IID section's rows: the Targets row is the default a user gets, the floor rows set what they say."""

from __future__ import annotations

import inspect
import math

import pytest

from experiments import noniid, noniid_parts, noniid_rows
from experiments.noniid_rows import ROWS, STEP_FLOORS, default_row, settings_of
from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.registry import build_strategy
from flwr_adaptive.strategies.step_floor import default_min_local_steps


def test_the_default_row_runs_the_strategies_defaults():
    # Prepare: what AdaptiveStrategy does when the user passes nothing (private data)
    params = inspect.signature(AdaptiveStrategy.__init__).parameters
    plain = AdaptiveStrategy(budget=10)
    row = ROWS[default_row("time")]
    # Assert: the row names its weighting and sets every option to the strategies' default
    steps = default_min_local_steps(params["min_local_steps"].default, "time", False)  # None: the policy's own
    opts = {"max_rescale": params["max_rescale"].default, "min_local_steps": steps, **dict(row.options)}
    built = build_strategy("time", budget=10, weighting=row.weighting, **dict(row.options))
    assert row.weighting == plain.weighting and not row.floor and row.inner == "fedavg"
    assert (built.max_rescale, built.min_local_steps) == (plain.max_rescale, plain.min_local_steps)
    assert built.scale_batch_size == plain.scale_batch_size == "shrink"
    assert opts["max_rescale"] == plain.max_rescale and opts["min_local_steps"] == plain.min_local_steps


def test_the_unbounded_normalised_row_is_not_the_default():
    # its runs were made before the cap existed: it says so and sets it, so it is never read as the default
    assert dict(ROWS["time-normalised"].options) == {"max_rescale": math.inf, "scale_batch_size": False}
    assert settings_of(ROWS["time-normalised"]) != settings_of(ROWS[default_row("time")])


def test_rows_measured_before_shrinking_was_the_default_keep_the_users_batch_size():
    # their finished runs (kept under the same names) trained at the user's batch size: the rows say so
    for name, row in ROWS.items():
        if row.policy in ("equal", "time", "min-energy") and "shrink" not in name and "eqsteps" not in name:
            built = build_strategy(row.policy, budget=10, weighting=row.weighting, **dict(row.options))
            assert built.scale_batch_size is False, name


@pytest.mark.parametrize("k", STEP_FLOORS)
def test_the_step_floor_rows_build_strategies_with_their_floor(k):
    for name, weighting in ((f"time-norm-cap8-steps{k}", "normalized"), (f"time-samples-steps{k}", "samples")):
        row = ROWS[name]
        strategy = build_strategy(row.policy, budget=10, weighting=row.weighting, **dict(row.options))
        assert (strategy.weighting, strategy.min_local_steps) == (weighting, k)


def test_a_default_step_floor_makes_the_default_weighting_rows_other_runs(monkeypatch):
    # a row on the default weighting (weighting=None) is another run once the default floor changes: its label says it
    base = noniid.spec_of("time-floor0.5", "weather", (1.0,) * 11, 0, 0.3, 10, 1100, "modelled", 1e-5, "testbed")
    defaults = noniid_rows.strategy_defaults()
    monkeypatch.setattr(noniid_rows, "strategy_defaults", lambda: {**defaults, "min_local_steps": 2})
    floored = noniid.spec_of("time-floor0.5", "weather", (1.0,) * 11, 0, 0.3, 10, 1100, "modelled", 1e-5, "testbed")
    assert base.label == "a0.3-time-floor0.5-wnormalized-oequal-split-eqtime"
    assert floored.label == "a0.3-time-floor0.5-wnormalized-steps2-oequal-split-eqtime"


def test_min_energys_rows_measured_under_its_former_default_keep_its_floor_and_cap():
    # Prepare: min-energy's default with private data was a floor of one batch and the cap of 8; it is now shrunk
    # batches and a cap of 2. The rows measured before keep the old settings (and say them), the default row is
    # the shrunk-batch row with the cap of 2
    def label(name):
        return noniid.spec_of(name, "mnist", (1.0,) * 11, 0, 0.3, 20, 1100, "modelled", 1e-4, "testbed").label

    built = {n: build_strategy("min-energy", budget=10, weighting=ROWS[n].weighting, **dict(ROWS[n].options))
             for n in ("min-energy-normalised", "min-energy-data-size", "min-energy-norm-nofloor",
                       "min-energy-norm-shrink")}
    plain = build_strategy("min-energy", budget=10)

    # Assert: the old rows' strategies have the floor (or none, the no-floor rows) and the cap of 8, their labels
    # say it; the default row is what a user gets; Time-only's labels are unchanged
    assert (built["min-energy-normalised"].min_local_steps, built["min-energy-normalised"].max_rescale) == (1, 8.0)
    assert built["min-energy-data-size"].min_local_steps == 1
    assert (built["min-energy-norm-nofloor"].min_local_steps, built["min-energy-norm-nofloor"].max_rescale) == (0, 8.0)
    assert built["min-energy-norm-shrink"].max_rescale == 8.0
    assert ROWS["min-energy-normalised"].label == "Min-energy + normalised, ≥ 1 step, rescale ≤ 8"
    assert ROWS["min-energy-data-size"].label == "Min-energy + data-size, ≥ 1 step"
    assert default_row("min-energy") == "min-energy-norm-shrink-cap2"
    default = build_strategy("min-energy", budget=10, weighting=ROWS["min-energy-norm-shrink-cap2"].weighting,
                             **dict(ROWS["min-energy-norm-shrink-cap2"].options))
    assert (default.min_local_steps, default.scale_batch_size, default.max_rescale) == (
        plain.min_local_steps, plain.scale_batch_size, plain.max_rescale) == (0, "shrink", 2.0)
    assert "min-energy-norm-shrink-cap2" in noniid_rows.MAIN_ROWS
    # the runs cached under these labels in a long-lived --work folder (commits 49925aa to 75ee1c0) are these runs,
    # and not the no-floor runs made before them under the bare names
    assert label("min-energy-normalised") == "a0.3-min-energy-normalised-steps1-oequal-split-eqtime"
    assert label("min-energy-data-size") == "a0.3-min-energy-data-size-steps1-eqtime"
    assert label("min-energy-norm-nofloor") == "a0.3-min-energy-norm-nofloor-oequal-split-eqtime"
    assert label("time-norm-cap8") == "a0.3-time-norm-cap8-oequal-split-eqtime"
    assert label("time-norm-cap8-steps2") == "a0.3-time-norm-cap8-steps2-oequal-split-eqtime"
    assert label("time-samples") == "a0.3-time-samples-eqtime"


def test_min_energys_shrink_row_trades_its_step_floor_for_shrunk_batches():
    # Prepare: the row that gives min-energy the Time-only default's floor (the equal split's steps in smaller
    # batches) instead of its former one-batch step floor, at the former cap of 8
    row = ROWS["min-energy-norm-shrink"]

    # Act
    strategy = build_strategy(row.policy, budget=10, weighting=row.weighting, **dict(row.options))

    # Assert: no step floor, slow nodes' batches shrunk, the normalised rule; another run than the default's
    assert (strategy.weighting, strategy.min_local_steps, strategy.scale_batch_size) == ("normalized", 0, "shrink")
    assert settings_of(row) != settings_of(ROWS[default_row("min-energy")])
    assert "min-energy-norm-shrink" in noniid_parts.BASELINE_ROWS
    capped = ROWS["min-energy-norm-shrink-cap2"]
    strategy = build_strategy(capped.policy, budget=10, weighting=capped.weighting, **dict(capped.options))
    assert (strategy.min_local_steps, strategy.scale_batch_size, strategy.max_rescale) == (0, "shrink", 2.0)


@pytest.mark.parametrize("cap", noniid_rows.MIN_ENERGY_CAPS)
def test_min_energys_lower_cap_rows_keep_its_former_floor_and_set_their_cap(cap):
    row = ROWS[f"min-energy-norm-cap{cap:g}"]
    strategy = build_strategy(row.policy, budget=10, weighting=row.weighting, **dict(row.options))
    assert (strategy.weighting, strategy.max_rescale, strategy.min_local_steps) == ("normalized", cap, 1)
    assert settings_of(row) != settings_of(ROWS[default_row("min-energy")])  # never read as the default
