"""What an operator reads: lines that name partitions, one quota line per round, history files in both APIs."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from adaptive_support import FakeGrid
from flwr_adaptive import keys
from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
from test_strategy_core import _Manager, play_round, quotas_of, reply, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def _lines(caplog, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if what in r.getMessage()]


def _adaptive(n: int, **kw) -> AdaptiveStrategy:
    from flwr.serverapp.strategy import FedAvg

    return AdaptiveStrategy(FedAvg(min_train_nodes=n, min_available_nodes=n), budget=800, deadband=0.0, **kw)


NODES = [7_340_001_234_567_891, 1_111_111_111, 98_765_432_101]  # Flower's node ids: random, unreadable
PARTS = {NODES[0]: 2, NODES[1]: 0, NODES[2]: 1}


def test_the_round_line_lists_every_quota_by_partition_in_partition_order(caplog):
    caplog.set_level(logging.INFO, logger="flwr")
    strategy, grid = _adaptive(3), FakeGrid(NODES)
    costs = {0: 0.001, 1: 0.002, 2: 0.004}
    play_round(strategy, grid, 1, costs, PARTS)
    q2, _ = play_round(strategy, grid, 2, costs, PARTS)
    lines = _lines(caplog, "[adaptive] round")
    assert len(lines) == 2  # still one line per round: the per-partition quotas are part of it
    by_part = {PARTS[n]: q for n, q in q2.items()}
    assert lines[1].endswith(f"3 clients, 0 skipped | quotas partition 0: {by_part[0]}, partition 1: {by_part[1]}, "
                             f"partition 2: {by_part[2]}")
    assert not any(str(n) in lines[1] for n in NODES)


def test_a_skipped_node_is_named_by_its_partition_with_the_reason_beside_its_quota(caplog):
    from flwr.app import ArrayRecord, ConfigRecord

    caplog.set_level(logging.INFO, logger="flwr")
    strategy, grid = _adaptive(3), FakeGrid(NODES)
    play_round(strategy, grid, 1, {0: 0.001, 1: 0.001, 2: 0.001}, PARTS)
    msgs = list(strategy.configure_train(2, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
    q = quotas_of(msgs)
    replies = [reply(m, telemetry(q[m.metadata.dst_node_id], 0.1, PARTS[m.metadata.dst_node_id]))
               for m in msgs if m.metadata.dst_node_id != NODES[0]]  # partition 2 does not answer
    caplog.clear()
    strategy.aggregate_train(2, replies)
    assert _lines(caplog, "no reply from") == [
        f"[adaptive] round 2: no reply from partition 2 (node {NODES[0]}) (timeout or lost); skipped"]
    assert f"partition 2: {q[NODES[0]]} (no-reply)" in _lines(caplog, "| quotas ")[0]


def test_above_the_limit_the_round_line_keeps_only_the_summary(caplog):
    caplog.set_level(logging.INFO, logger="flwr")
    nodes = list(range(100, 121))  # 21 nodes
    strategy = _adaptive(21)
    play_round(strategy, FakeGrid(nodes), 1, {p: 0.001 for p in range(21)}, {n: i for i, n in enumerate(nodes)})
    assert _lines(caplog, "| quotas ") == [] and len(_lines(caplog, "quota min/median/max")) == 1
    strategy.quota_line_max_nodes = 21
    play_round(strategy, FakeGrid(nodes), 2, {p: 0.001 for p in range(21)}, {n: i for i, n in enumerate(nodes)})
    assert len(_lines(caplog, "| quotas ")) == 1


def test_history_path_is_written_after_every_round_of_the_message_api(tmp_path):
    path = tmp_path / "out" / "history.csv"
    (tmp_path / "out").mkdir()
    path.write_text("round,stale\n99,1\n")  # a previous run's file: a fresh run starts anew
    strategy, grid = _adaptive(3, history_path=path), FakeGrid(NODES)
    for rnd in (1, 2):
        play_round(strategy, grid, rnd, {0: 0.001, 1: 0.002, 2: 0.004}, PARTS)
        rows = pd.read_csv(path)
        assert rows["round"].tolist() == list(range(1, rnd + 1))  # no call needed after the last round
    clients = pd.read_csv(tmp_path / "out" / "history-clients.csv")
    assert sorted(clients["partition_id"]) == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="history_path must be a CSV file path"):
        _adaptive(3, history_path=3)


def test_history_path_works_in_the_legacy_api_whose_round_loop_is_flower_s(tmp_path):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    path = tmp_path / "legacy.csv"
    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=300,
                                      history_path=path)
    manager = _Manager([11, 12, 13])
    ok = Status(Code.OK, "")
    for rnd in (1, 2, 3):
        pairs = strategy.configure_fit(rnd, ndarrays_to_parameters([np.zeros(2)]), manager)
        results = [(p, FitRes(ok, ndarrays_to_parameters([np.ones(2)]), 1,
                              telemetry(ins.config[keys.QUOTA], 0.001 * (i + 1) * ins.config[keys.QUOTA], i)))
                   for i, (p, ins) in enumerate(pairs)]
        strategy.aggregate_fit(rnd, results, [])
    # the files hold every round although nobody called save_history after the last one
    assert pd.read_csv(path)["round"].tolist() == [1, 2, 3]
    clients = pd.read_csv(tmp_path / "legacy-clients.csv")
    assert len(clients) == 9 and set(clients["status"]) == {"ok"}
    pd.testing.assert_frame_equal(pd.read_csv(path), strategy.history, check_dtype=False)


def test_replies_without_a_partition_id_still_adapt_by_node_id_and_say_how_to_name_the_partition(caplog):
    import hostile_support as hs

    # a TelemetryClient built without the Context (or a SuperNode without --node-config partition-id): the
    # replies name no partition; they used to get the equal split in every round, silently
    strategy = AdaptiveStrategy(hs.fedavg(), budget=hs.BUDGET, deadband=0.0)
    with caplog.at_level(logging.INFO, logger="flwr"):
        for rnd in (1, 2, 3):
            msgs, q = hs.configure(strategy, rnd)
            replies = []
            for m in msgs:
                n = m.metadata.dst_node_id
                metrics = hs.telemetry(q[n], q[n] * hs.COSTS[hs.PARTS[n]], hs.PARTS[n])
                metrics[keys.PARTITION_ID] = keys.UNKNOWN  # what the wrapper sends without a Context
                replies.append(hs.reply(m, metrics))
            strategy.aggregate_train(rnd, replies)
    assert q[hs.NODES[0]] > 2 * q[hs.NODES[3]]  # round 3: the 1 ms node gets over twice the 4 ms node's share
    assert sum(q.values()) == hs.BUDGET
    warned = _lines(caplog, "names no partition id")
    assert len(warned) == 1 and 'partition-id=<N> num-partitions=<M>' in warned[0]
