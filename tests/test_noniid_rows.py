"""The non-IID section's rows: the Targets row is the default a user gets, the floor rows set what they say."""

from __future__ import annotations

import inspect

import pytest

from experiments import noniid, noniid_rows
from experiments.noniid_rows import ROWS, STEP_FLOORS, default_row, settings_of
from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.registry import build_strategy


def test_the_default_row_runs_the_strategies_defaults():
    # Prepare: what AdaptiveStrategy does when the user passes nothing (private data)
    params = inspect.signature(AdaptiveStrategy.__init__).parameters
    plain = AdaptiveStrategy(budget=10)
    row = ROWS[default_row("time")]
    # Assert: the row names its weighting and sets every option to the strategies' default
    opts = {"max_rescale": params["max_rescale"].default, "min_local_steps": params["min_local_steps"].default,
            **dict(row.options)}
    built = build_strategy("time", budget=10, weighting=row.weighting, **dict(row.options))
    assert row.weighting == plain.weighting and not row.floor and row.inner == "fedavg"
    assert (built.max_rescale, built.min_local_steps) == (plain.max_rescale, plain.min_local_steps)
    assert opts["max_rescale"] == plain.max_rescale and opts["min_local_steps"] == plain.min_local_steps


def test_the_unbounded_normalised_row_is_not_the_default():
    # its runs were made before the cap existed: it says so and sets it, so it is never read as the default
    assert dict(ROWS["time-normalised"].options) == {"max_rescale": None}
    assert settings_of(ROWS["time-normalised"]) != settings_of(ROWS[default_row("time")])


@pytest.mark.parametrize("k", STEP_FLOORS)
def test_the_step_floor_rows_build_strategies_with_their_floor(k):
    for name, weighting in ((f"time-norm-cap8-steps{k}", "normalized"), (f"time-samples-steps{k}", "samples")):
        row = ROWS[name]
        strategy = build_strategy(row.policy, budget=10, weighting=row.weighting, **dict(row.options))
        assert (strategy.weighting, strategy.min_local_steps) == (weighting, k)


def test_a_default_step_floor_makes_the_default_weighting_rows_other_runs(monkeypatch):
    # a row on the default weighting (weighting=None) is another run once the default floor changes: its label says it
    base = noniid.spec_of("time-floor0.5", "weather", (1.0,) * 11, 0, 0.3, 10, 1100, "modelled", 1e-5, "testbed")
    monkeypatch.setattr(noniid, "strategy_defaults", lambda: {**noniid_rows.strategy_defaults(), "min_local_steps": 2})
    floored = noniid.spec_of("time-floor0.5", "weather", (1.0,) * 11, 0, 0.3, 10, 1100, "modelled", 1e-5, "testbed")
    assert base.label == "a0.3-time-floor0.5-wnormalized-eqtime"
    assert floored.label == "a0.3-time-floor0.5-wnormalized-steps2-eqtime"
