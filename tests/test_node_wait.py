"""A round short of nodes: progress lines at least every 30 s, then a failed run with the fix (never a hang)."""

from __future__ import annotations

import logging

import pytest
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.node_wait import MAX_LOG_INTERVAL_S, NodeWaitError, nodes_needed, wait_for_nodes


class FakeClock:
    """A clock that ``sleep`` advances: the deadline and the log times are exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Grid:
    """``get_node_ids`` answers from a schedule: ``arrivals[i]`` = time node i connects."""

    def __init__(self, clock: FakeClock, arrivals: list[float]) -> None:
        self.clock, self.arrivals, self.calls = clock, arrivals, 0

    def get_node_ids(self) -> list[int]:
        self.calls += 1
        return [i + 1 for i, t in enumerate(self.arrivals) if t <= self.clock.now]


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger="flwr")

    def get() -> list[str]:
        return [r.getMessage() for r in caplog.records if "waits for" in r.getMessage()]

    return get


def test_enough_nodes_return_at_once_without_a_line_or_a_sleep(lines):
    clock = FakeClock()
    grid = Grid(clock, [0.0, 0.0, 0.0])
    assert wait_for_nodes(grid, 2, clock=clock, sleep=clock.sleep) == [1, 2, 3]
    assert clock.now == 0.0 and grid.calls == 1 and lines() == []


def test_nodes_that_arrive_in_time_end_the_wait_with_progress_lines_meanwhile(lines):
    clock = FakeClock()
    grid = Grid(clock, [0.0, 25.0, 47.0])
    nodes = wait_for_nodes(grid, 3, timeout_s=100, hint="start 3 SuperNodes", clock=clock, sleep=clock.sleep)
    assert nodes == [1, 2, 3] and clock.now == pytest.approx(47.0)
    got = lines()
    # at 0, 10, 20, 30, 40 s: how many are connected, how many are needed, when it gives up, the fix
    assert len(got) == 5
    assert got[0] == ("[adaptive] the round waits for 3 nodes: 1 connected after 0 s (the run fails after 100 s); "
                      "start 3 SuperNodes")
    assert "2 connected after 30 s" in got[3]


def test_too_few_nodes_fail_after_the_wait_with_counts_and_the_hint(lines):
    clock = FakeClock()
    grid = Grid(clock, [0.0, 0.0])
    fix = 'run with --federation-config "num-supernodes=11"'
    with pytest.raises(NodeWaitError) as err:
        wait_for_nodes(grid, 6, timeout_s=45, hint=fix, what="round 1", log_every_s=300, clock=clock, sleep=clock.sleep)
    assert str(err.value) == f"round 1 needs 6 connected nodes, 2 connected after 45 s (node wait 45 s); {fix}"
    assert clock.now == pytest.approx(45.0)  # not a poll later
    assert "\n" not in str(err.value)
    # a line at least every 30 s although 300 were asked: at 0 and 30 (then the error at 45)
    assert [line.split("after ")[1].split(" s")[0] for line in lines()] == ["0", "30"]
    assert MAX_LOG_INTERVAL_S == 30.0


def test_the_nodes_needed_are_the_inner_strategy_s_minimums():
    assert nodes_needed(FedAvg(min_train_nodes=3, min_available_nodes=5)) == 5
    assert nodes_needed(FedAvg(min_train_nodes=7, min_available_nodes=2)) == 7
    assert nodes_needed(object()) == 0


def test_the_strategy_fails_round_1_instead_of_entering_flower_s_endless_wait():
    clock = FakeClock()
    grid = Grid(clock, [0.0, 0.0])
    strategy = AdaptiveStrategy(FedAvg(min_train_nodes=6, min_available_nodes=6), budget=600)
    strategy.node_wait_s = 0.0  # give up at once: Flower's sample_nodes would loop here for ever
    strategy.node_wait_hint = "pass -c num-clients=2"
    with pytest.raises(NodeWaitError, match=r"round 1 needs 6 connected nodes, 2 connected .*; pass -c num-clients=2"):
        strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid)


def test_the_legacy_strategy_fails_instead_of_the_client_manager_s_silent_day_long_wait():
    from flwr.common import ndarrays_to_parameters
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    from flwr_adaptive.strategies import LegacyAdaptiveStrategy
    from test_strategy_core import _Manager

    assert nodes_needed(LegacyFedAvg(min_fit_clients=4, min_available_clients=3)) == 4
    strategy = LegacyAdaptiveStrategy(LegacyFedAvg(min_fit_clients=3, min_available_clients=3), budget=300)
    strategy.node_wait_s = 0.0
    with pytest.raises(NodeWaitError, match="round 1 needs 3 connected nodes, 2 connected"):
        strategy.configure_fit(1, ndarrays_to_parameters([]), _Manager([11, 12]))
    assert len(strategy.configure_fit(1, ndarrays_to_parameters([]), _Manager([11, 12, 13]))) == 3
