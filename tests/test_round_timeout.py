"""Round timeouts from the prediction: k × the predicted makespan within [floor, ceiling]; a late node is a timeout."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from adaptive_support import FakeGrid
from flwr_adaptive import keys
from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.round_timeout import RoundTimeout, TimedGrid
from test_strategy_core import play_round, quotas_of, reply, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

NODES = [501, 502, 503, 504]
PARTS = {501: 0, 502: 1, 503: 2, 504: 3}
COSTS = {0: 0.01, 1: 0.01, 2: 0.02, 3: 0.04}  # seconds per sample: slowdowns 1, 1, 2, 4


def _strategy(timeout: RoundTimeout | None) -> AdaptiveStrategy:
    from flwr.serverapp.strategy import FedAvg

    return AdaptiveStrategy(FedAvg(min_train_nodes=1, min_available_nodes=1), budget=800, deadband=0.0,
                            round_timeout=timeout)


def test_the_timeout_is_factor_times_the_prediction_clipped_to_floor_and_ceiling():
    rt = RoundTimeout(factor=3, floor_s=10, ceiling_s=100)
    assert rt.seconds(2.0) == 10.0 and rt.seconds(5.0) == 15.0 and rt.seconds(50.0) == 100.0
    assert rt.seconds(None) == 100.0 and rt.seconds(float("nan")) == 100.0  # nothing predicted yet: ceiling
    for bad, match in [(dict(factor=1.0), "factor=1.0 must be > 1"), (dict(floor_s=0), "0 < floor_s <= ceiling_s"),
                       (dict(floor_s=20, ceiling_s=10), "0 < floor_s <= ceiling_s"),
                       (dict(ceiling_s=float("inf")), "ceiling_s=inf must be a finite number")]:
        with pytest.raises(ValueError, match=match):
            RoundTimeout(**bad)
    with pytest.raises(ValueError, match="round_timeout must be a .*RoundTimeout"):
        _strategy(3.0)


def test_each_round_s_timeout_follows_the_controller_s_predicted_makespan():
    strategy, grid = _strategy(RoundTimeout(factor=3, floor_s=0.5, ceiling_s=600)), FakeGrid(NODES)
    q1, _ = play_round(strategy, grid, 1, COSTS, PARTS)
    assert strategy.round_timeout_s() == 600.0  # round 1: no estimate, the ceiling
    for rnd in (2, 3):
        q, _ = play_round(strategy, grid, rnd, COSTS, PARTS)
    from flwr.app import ArrayRecord, ConfigRecord

    msgs = list(strategy.configure_train(4, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
    q4 = quotas_of(msgs)
    # exact per-sample costs: the slowest node's compute is max(q × cost) (no overhead observed here)
    predicted = max(q4[n] * COSTS[PARTS[n]] for n in NODES)
    assert strategy.round_timeout_s() == pytest.approx(3 * predicted, rel=1e-6)
    assert 3 * predicted > 0.5  # the factor decided, not the floor


class RecordingGrid(FakeGrid):
    """A grid whose send_and_receive answers every node but ``late`` and records the timeout it got."""

    def __init__(self, node_ids, late=None):
        super().__init__(node_ids)
        self.late, self.timeouts = late, []

    def send_and_receive(self, messages, *, timeout=None):
        self.timeouts.append(timeout)
        return [reply(m, telemetry(m.content["config"][keys.QUOTA], 0.01 * m.content["config"][keys.QUOTA],
                                   PARTS[m.metadata.dst_node_id]))
                for m in messages if m.metadata.dst_node_id != self.late]


def test_a_late_node_misses_the_predicted_timeout_is_logged_and_put_on_probation(caplog):
    from flwr.app import ArrayRecord, ConfigRecord

    caplog.set_level(logging.INFO, logger="flwr")
    strategy = _strategy(RoundTimeout(factor=2, floor_s=0.1, ceiling_s=60))
    grid = RecordingGrid(NODES)
    timed = strategy.timed_grid(grid)
    assert isinstance(timed, TimedGrid) and strategy.timed_grid(timed) is timed
    arrays = ArrayRecord([np.zeros(2)])
    for rnd in (1, 2):
        msgs = list(strategy.configure_train(rnd, arrays, ConfigRecord({}), timed))
        strategy.aggregate_train(rnd, timed.send_and_receive(msgs, timeout=3600))
    assert grid.timeouts[0] == 60.0  # round 1: the ceiling (below start's 3600)
    # round 3: partition 3's node hangs
    grid.late = 504
    msgs = list(strategy.configure_train(3, arrays, ConfigRecord({}), timed))
    q3 = quotas_of(msgs)
    caplog.clear()
    strategy.aggregate_train(3, timed.send_and_receive(msgs, timeout=3600))
    expected = 2 * max(q3[n] * 0.01 for n in NODES)
    assert grid.timeouts[-1] == pytest.approx(expected, rel=1e-6)
    late = [r.getMessage() for r in caplog.records if "no reply from" in r.getMessage()]
    assert late == [f"[adaptive] round 3: no reply from partition 3 (node 504) (late: past the round timeout of "
                    f"{expected:.1f} s = 2 x the predicted {expected / 2:.1f} s within [0.1, 60] s); skipped, "
                    "on probation next round"]
    q4 = quotas_of(strategy.configure_train(4, arrays, ConfigRecord({}), timed))
    assert q4[504] == 1 and sum(q4.values()) == 800  # probation: the probe quota, the others take the rest


def test_without_the_option_the_grid_and_the_timeout_are_untouched():
    strategy = _strategy(None)
    grid = RecordingGrid(NODES)
    assert strategy.timed_grid(grid) is grid and strategy.round_timeout_s() is None
