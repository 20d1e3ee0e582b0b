"""Restarts keep the saved split: a restarted node, a resumed ServerApp, a SuperLink restarted on its database.

Fake grids and the state file: what each fault looks like to the strategy (node ids that changed,
or a fresh strategy object over the same state) and the first round after it.
"""

from __future__ import annotations

import json

import pytest

from adaptive_support import FakeGrid
from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.core import STATE_FILE
from test_strategy_core import play_round

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

BUDGET = 800
NODES = [501, 502, 503, 504]
PARTS = {501: 0, 502: 1, 503: 2, 504: 3}
COSTS = {0: 0.001, 1: 0.001, 2: 0.002, 3: 0.004}  # slowdowns 1, 1, 2, 4
BALANCED = {0: 290.9, 1: 290.9, 2: 145.5, 3: 72.7}  # 800 ∝ 1 / cost


def _strategy(state_dir=None) -> AdaptiveStrategy:
    from flwr.serverapp.strategy import FedAvg

    return AdaptiveStrategy(FedAvg(min_train_nodes=1, min_available_nodes=1), budget=BUDGET, state_dir=state_dir)


def _learned(state_dir=None) -> tuple[AdaptiveStrategy, dict]:
    strategy = _strategy(state_dir)
    grid = FakeGrid(NODES)
    for rnd in (1, 2, 3):
        q, _ = play_round(strategy, grid, rnd, COSTS, PARTS)
    return strategy, {PARTS[n]: v for n, v in q.items()}


def test_the_learned_split_is_the_balanced_one_before_any_fault():
    _, split = _learned()
    assert sum(split.values()) == BUDGET
    assert all(abs(split[p] - BALANCED[p]) <= 1.5 for p in BALANCED)


def test_a_restarted_node_keeps_its_partition_s_quota_and_the_others_keep_theirs(caplog):
    # Prepare: partition 3's SuperNode restarts: it is back under a new node id, the old one is gone
    strategy, before = _learned()
    restarted = 9_999
    grid = FakeGrid([501, 502, 503, restarted])
    parts = {**PARTS, restarted: 3}
    # Execute: the first round after the restart, then the next
    q4, _ = play_round(strategy, grid, 4, COSTS, parts)
    q5, _ = play_round(strategy, grid, 5, COSTS, parts)
    # Assert: nobody is re-split equally; the newcomer trains partition 3's quota until it replies
    assert {parts[n]: v for n, v in q4.items()} == before
    assert {parts[n]: v for n, v in q5.items()} == before
    assert any(f"node {restarted} (partition not known yet) trains with the quota of partition 3" in r.getMessage()
               for r in caplog.records)
    assert strategy.partition_of(restarted) == 3


def test_a_new_node_where_no_partition_is_vacant_gets_the_provisional_share_and_the_others_their_split():
    strategy, before = _learned()
    newcomer = 777
    grid = FakeGrid([*NODES, newcomer])
    q4, _ = play_round(strategy, grid, 4, {**COSTS, 4: 0.001}, {**PARTS, newcomer: 4})
    known = {PARTS[n]: v for n, v in q4.items() if n != newcomer}
    assert sum(q4.values()) == BUDGET and len(set(q4.values())) > 2  # never an equal split for all
    # the known partitions keep their proportions (the newcomer's share is taken from all of them)
    assert abs(known[0] - known[1]) <= 1 and known[0] / known[3] == pytest.approx(BALANCED[0] / BALANCED[3], rel=0.1)


@pytest.mark.parametrize("fault", ["serverapp-resumed", "superlink-restarted-on-its-database"])
def test_a_resumed_serverapp_keeps_the_saved_split_in_its_first_round(tmp_path, fault):
    # Prepare: 3 rounds saved to the state file; the ServerApp dies (or the SuperLink restarts on
    # its --database: the SuperNodes keep their node ids, the run is started again on the state)
    original, _ = _learned(tmp_path)
    saved = json.loads((tmp_path / STATE_FILE).read_text())
    assert sorted(map(tuple, saved["partitions"])) == sorted(PARTS.items())
    # Execute: a fresh strategy object over the same state_dir, the same node ids
    resumed = _strategy(tmp_path)
    q, _ = play_round(resumed, FakeGrid(NODES), 4, COSTS, PARTS)
    # Assert: its first round is what the run would have done without the fault, not the equal split
    unbroken = original.quotas_for(4, NODES)
    assert q == unbroken and sorted(q.values()) != [200, 200, 200, 200]


def test_without_the_saved_partitions_a_resumed_run_would_split_equally(tmp_path):
    # the guarded line: drop the map from the state file and the first round is the equal split
    _learned(tmp_path)
    path = tmp_path / STATE_FILE
    state = json.loads(path.read_text())
    del state["partitions"]  # a state written before the map was saved still loads
    path.write_text(json.dumps(state))
    q, _ = play_round(_strategy(tmp_path), FakeGrid(NODES), 4, COSTS, PARTS)
    assert sorted(q.values()) == [200, 200, 200, 200]


@pytest.mark.parametrize("bad", [{"1": 2}, [[1]], [[1, -1]], [[1, True]], [[None, 1]], [[1, 1.5]]])
def test_a_tampered_partition_map_sets_the_state_file_aside(tmp_path, bad, caplog):
    _learned(tmp_path)
    path = tmp_path / STATE_FILE
    state = json.loads(path.read_text())
    state["partitions"] = bad
    path.write_text(json.dumps(state))
    strategy = _strategy(tmp_path)
    assert strategy.partition_of(501) is None and not path.exists()
    assert any("is unusable" in r.getMessage() and "node partition" in r.getMessage() for r in caplog.records)
