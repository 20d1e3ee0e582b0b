"""Static profiling, the baseline: the split measured in the profiling round never changes (while the
adaptive strategy follows a drift), its controller's saved state keeps the freeze, profiling
rounds count reports, and a policy without cost weights is refused. Through ``SimGrid``
(``baselines_support``), Flower's own ``Strategy.start``, no Ray."""

from __future__ import annotations

import json

import pytest

from flwr_adaptive.controller import Report
from flwr_adaptive.static_profiling_controller import StaticProfilingController

from baselines_support import SimGrid, fedavg, quiet, run

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def test_static_split_never_changes_after_the_profiling_round_while_adaptive_follows_drift(tmp_path, caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

    # Prepare: 4 devices, 1:2:4:4 seconds per sample; device 0 becomes 16x slower from round 2 on.
    # state_dir on: the state is saved (and the controller flushed) after every round.
    quiet(caplog)
    costs = [2.0 ** -10, 2.0 ** -9, 2.0 ** -8, 2.0 ** -8]
    static_grid, adaptive_grid = (SimGrid(costs, drift={0: (2, 16.0)}) for _ in range(2))
    static = StaticProfilingStrategy(fedavg(4), budget=1000, state_dir=tmp_path)
    adaptive = AdaptiveStrategy(fedavg(4), budget=1000, policy="time")

    # Execute
    run(static, static_grid, rounds=5)
    run(adaptive, adaptive_grid, rounds=5)

    # Assert: round 1 equal; rounds 2..5 the split of round 1's measurement (1 : 1/2 : 1/4 : 1/4),
    # although device 0 reported 16x slower from round 2 on; the adaptive strategy moved away.
    assert static_grid.quotas(1) == {0: 250, 1: 250, 2: 250, 3: 250}
    assert all(static_grid.quotas(r) == {0: 500, 1: 250, 2: 125, 3: 125} for r in (2, 3, 4, 5))
    assert static.frozen
    assert adaptive_grid.quotas(5)[0] < 100
    assert list(static.history["policy"]) == ["static"] * 5
    assert (static.history["quota_sum"] == 1000).all()
    assert static.history["makespan_s"].iloc[-1] > 2 * adaptive.history["makespan_s"].iloc[-1]


def test_static_controller_state_keeps_the_freeze():
    # Prepare: profile one round, freeze, save.
    ctrl = StaticProfilingController(300)
    ctrl.allocate(["a", "b"])
    ctrl.observe("a", Report(time_s=150.0, samples=150))
    ctrl.observe("b", Report(time_s=300.0, samples=150))
    frozen_split = ctrl.allocate(["a", "b"])
    state = json.loads(json.dumps(ctrl.state_dict()))

    # Execute: a restarted controller gets drifting reports.
    again = StaticProfilingController(300)
    again.load_state_dict(state)
    again.observe("a", Report(time_s=1500.0, samples=150))

    # Assert
    assert again.frozen
    assert again.allocate(["a", "b"]) == frozen_split == {"a": 200, "b": 100}


def test_static_counts_profiling_rounds_by_reports_not_by_allocations():
    # Prepare: the Flower strategy's round 1 does not call allocate (equal split by node id).
    ctrl = StaticProfilingController(300, deadband=0.0)
    ctrl.observe("a", Report(time_s=150.0, samples=150))
    ctrl.observe("b", Report(time_s=300.0, samples=150))
    # Execute
    round2 = ctrl.allocate(["a", "b"])
    ctrl.observe("a", Report(time_s=1500.0, samples=200))  # drift seen in round 2: ignored
    round3 = ctrl.allocate(["a", "b"])
    # Assert
    assert round2 == round3 == {"a": 200, "b": 100}


def test_static_rejects_a_policy_without_cost_weights():
    from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

    with pytest.raises(ValueError, match="policy must be one of time, low-energy, energy, got 'equal'"):
        StaticProfilingStrategy(budget=10, policy="equal")
