"""A run says what it could not use: a meter returning unusable seconds falls back to wall time (said
once, not every round), and a run in which no reply was aggregated reports failure."""

from __future__ import annotations

import json
import math

import pytest

from flwr_adaptive import keys

import adaptive_support as sup
from hostile_support import BUDGET, configure, fedavg, honest_round

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


@pytest.mark.parametrize("seconds", [math.nan, -2.0, 0.0, math.inf])
def test_a_meter_returning_unusable_seconds_falls_back_to_wall_time_said_once(seconds, caplog):
    from flwr_adaptive.clients import telemetry
    from flwr_adaptive.energy import Measurement
    from test_telemetry import _context, _counting_train, _train_message

    class Broken:
        def begin_window(self, name):
            pass

        def end_window(self, name):
            return Measurement(seconds, 5.0, "broken", "virtual")

    telemetry._SAID.clear()
    clock, record = sup.FakeClock(), {}
    wrapped = telemetry.telemetry_train(_counting_train(40, clock, record), meter=Broken(), cpu_clock=clock,
                                        wall_clock=clock)
    # Execute: two rounds
    replies = [wrapped(_train_message({keys.QUOTA: 10, keys.ROUND: r}), _context(0)).content["metrics"]
               for r in (1, 2)]
    # Assert: wall time, no energy, wall clock; the fallback is logged once, not every round
    for metrics in replies:
        assert metrics[keys.TIME_S] == metrics[keys.WALL_TIME_S] > 0
        assert metrics[keys.ENERGY_J] == keys.UNMEASURED_ENERGY and metrics[keys.VIRTUAL_CLOCK] == 0
    assert sum("reporting wall time" in r.getMessage() for r in caplog.records) == 1


def test_a_run_that_aggregated_nothing_reports_failure(tmp_path):
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.run_summary import RunSummary, rounds_trained
    from flwr.app import Error, Message

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    for rnd in (1, 2):
        msgs, _ = configure(strategy, rnd)
        strategy.aggregate_train(rnd, [Message(Error(code=4, reason="timeout"), reply_to=m) for m in msgs[:1]])
    summary = RunSummary(tmp_path, "time", "toy", {})
    # Execute
    status = summary.finish(True, 1.0, rounds_trained(strategy))
    # Assert
    data = json.loads((tmp_path / "summary-time.json").read_text())
    assert status == data["status"] == "failed" and data["rounds_trained"] == 0 and "no reply" in data["error"]
    with pytest.raises(RuntimeError, match="failed: no reply was aggregated"):
        summary.check()
    honest_round(strategy, 3)
    ok = RunSummary(None, "time", "toy", {})
    assert ok.finish(True, 1.0, rounds_trained(strategy)) == "finished"
    ok.check()
