"""Partial participation and churn: budgets under unknown data sizes, bounded state, history spill.

The strategy is driven directly (FakeGrid, replies built by hand): each emulated node processes
``min(quota, data size)`` samples (cycling off) at its own cost per sample.
"""

from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from flwr_adaptive.priors import cautious_cost, provisional_caps
from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.history import ClientRows

from adaptive_support import FakeGrid

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


class SampledGrid(FakeGrid):
    """A grid whose connected nodes are ``node_ids``; the inner strategy samples ``sample`` of them."""

    def __init__(self, node_ids, sample):
        super().__init__(node_ids)
        self.sample = list(sample)


def _fedavg(sample: int):
    """FedAvg sampling exactly the grid's ``sample`` (so that a test decides who trains)."""
    from flwr.serverapp.strategy import FedAvg

    class GivenSample(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            return super().configure_train(server_round, arrays, config, FakeGrid(grid.sample))

    return GivenSample(fraction_train=1.0, min_train_nodes=1, min_available_nodes=1, fraction_evaluate=0.0)


class Fleet:
    """Emulated nodes: node id -> (partition id or -1, local data size, seconds per sample)."""

    def __init__(self, nodes: dict[int, tuple[int, int, float]], drop_last: dict[int, int] | None = None) -> None:
        self.nodes = dict(nodes)
        self.drop_last = drop_last or {}  # node id -> batch size of a drop_last loader

    def replies(self, messages):
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        out = []
        for m in messages:
            part, size, cost = self.nodes[m.metadata.dst_node_id]
            quota = m.content["config"][keys.QUOTA]
            samples = min(quota, size)
            if m.metadata.dst_node_id in self.drop_last:
                samples -= samples % self.drop_last[m.metadata.dst_node_id]
            metrics = {keys.SAMPLES: samples, keys.TIME_S: samples * cost, keys.CPU_TIME_S: samples * cost,
                       keys.WALL_TIME_S: samples * cost, keys.ENERGY_J: -1.0, keys.DATA_SIZE: size,
                       keys.PARTITION_ID: part, keys.QUOTA_CAPPED: int(quota > size), keys.IDLE_W: 1.0,
                       keys.VIRTUAL_CLOCK: 1}
            out.append(Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]),
                                           "metrics": MetricRecord({"num-examples": samples, **metrics})}),
                               reply_to=m))
        return out


def play(strategy, fleet: Fleet, rnd: int, sample=None) -> dict[int, int]:
    """One round: every node of ``fleet`` is connected, ``sample`` of them (default: all) train."""
    from flwr.app import ArrayRecord, ConfigRecord

    grid = SampledGrid(fleet.nodes, fleet.nodes if sample is None else sample)
    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
    strategy.aggregate_train(rnd, fleet.replies(msgs))
    return {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in msgs}


# --------------------------------------------------------------------------- priors (pure functions)
def test_provisional_caps_use_a_low_quantile_of_known_sizes_raised_to_hold_the_budget():
    sizes = np.arange(10, 110, 10)  # 10..100: the 10th percentile is 19
    assert provisional_caps([50, None, None], 100, sizes) == [50, 25, 25]  # 19 cannot hold 100: raised
    assert provisional_caps([50, None, None], 60, sizes) == [50, 19, 19]
    assert provisional_caps([50, None], 60, np.array([], dtype=int)) == [50, None]  # nothing known yet
    assert provisional_caps([50, 7], 60, sizes) == [50, 7]


@given(st.lists(st.one_of(st.none(), st.integers(1, 500)), min_size=1, max_size=20),
       st.integers(1, 5000), st.lists(st.integers(1, 500), min_size=1, max_size=30))
def test_property_provisional_caps_hold_the_budget_and_keep_known_caps(caps, budget, sizes):
    filled = provisional_caps(caps, budget, np.array(sizes))
    assert [f for f, c in zip(filled, caps) if c is not None] == [c for c in caps if c is not None]
    if None in caps:
        assert all(f is not None and f >= 1 for f in filled)
        assert sum(filled) >= budget or all(f <= max(int(np.quantile(sizes, 0.1)), 1) for f, c
                                            in zip(filled, caps) if c is None) and sum(filled) >= budget
        assert sum(filled) >= budget


def test_cautious_cost_is_the_quantile_the_slowest_of_k_draws_is_expected_at():
    costs = np.arange(1.0, 102.0)  # 1..101
    assert cautious_cost(costs, 1) == pytest.approx(51.0)  # one newcomer: the median
    assert cautious_cost(costs, 3) == pytest.approx(76.0)  # three: the 75th percentile
    assert np.isnan(cautious_cost(np.array([]), 3))


# --------------------------------------------------------------------------- exact budget, unknown sizes
def test_first_seen_nodes_are_capped_provisionally_and_no_sample_is_lost():
    # Prepare: eight nodes of 64 samples, four sampled per round, budget = 4 × 64: the only exact split
    # gives everyone all its data. Fast nodes 1..4 are known after round 1; 5..8 are new in round 2.
    fleet = Fleet({n: (n, 64, 0.001 * n) for n in range(1, 9)})
    strategy = AdaptiveStrategy(_fedavg(4), budget=256, policy="time", deadband=0.0)
    play(strategy, fleet, 1, sample=[1, 2, 3, 4])
    # Execute: round 2 samples two known (fast, capped at 64) and two new nodes
    fleet_live = [1, 2, 5, 6]
    q2 = play(strategy, fleet, 2, sample=fleet_live)
    # Assert: the new ones are not sent more than the known sizes; nothing was lost
    assert q2 == {1: 64, 2: 64, 5: 64, 6: 64}
    hist = strategy.history
    assert (hist["samples"] == 256).all()
    assert (hist[["short_capped", "short_untrained", "short_skipped", "short_unassigned"]] == 0).all().all()


def test_a_shortfall_is_reported_in_the_history_row_and_as_a_warning(caplog):
    # Prepare: known nodes hold 100 samples; a new node turns out to hold only 10 (below the prior)
    fleet = Fleet({1: (1, 100, 0.001), 2: (2, 100, 0.001), 3: (3, 10, 0.001), 4: (4, 100, 0.001)})
    strategy = AdaptiveStrategy(_fedavg(2), budget=120, policy="time", deadband=0.0)
    play(strategy, fleet, 1, sample=[1, 2])
    # Execute: node 3 (unknown size, provisionally capped at 100) and node 1 share the budget
    with caplog.at_level(logging.INFO, logger="flwr"):
        q2 = play(strategy, fleet, 2, sample=[1, 3])
    # Assert: 60 + 60 sent, node 3 processed 10: 50 samples short, in the row and in a warning
    assert q2 == {1: 60, 3: 60}
    row = strategy.history.iloc[-1]
    assert (row["samples"], row["short_capped"], row["short_skipped"], row["short_unassigned"]) == (70, 50, 0, 0)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "round 2 (time" in r.getMessage()]
    assert len(warned) == 1
    assert "50 of 120 budgeted samples not processed (50 above capped nodes' data" in warned[0].getMessage()
    # and the next round knows node 3's size: the budget is exact again
    q3 = play(strategy, fleet, 3, sample=[1, 3])
    assert q3 == {1: 100, 3: 10} and strategy.history.iloc[-1]["samples"] == 110
    assert strategy.history.iloc[-1]["short_unassigned"] == 10  # all local data: 10 given to nobody


@pytest.mark.parametrize("budget, said", [(200, True), (150, False)])
def test_a_budget_of_exactly_the_nodes_data_is_said_once(budget, said, caplog):
    # Two nodes of 100 samples and a budget of 200 (Flower's template with budget = its nodes' data): the only
    # exact split is all of everyone's data, every round, and nothing is balanced; before, nothing said so
    fleet = Fleet({1: (1, 100, 0.001), 2: (2, 100, 0.004)})
    strategy = AdaptiveStrategy(_fedavg(2), budget=budget, policy="time")
    with caplog.at_level(logging.WARNING, logger="flwr"):
        for rnd in (1, 2, 3):
            play(strategy, fleet, rnd)
    lines = [r.getMessage() for r in caplog.records if "equals the local data" in r.getMessage()]
    assert len(lines) == int(said)
    assert not said or ("budget 200" in lines[0] and "budget_per_node" in lines[0])


def test_a_probe_whose_cap_makes_the_sum_equal_the_budget_is_not_said_to_be_all_data(caplog):
    # Node 3 sent nothing in round 1: in round 2 it is on probation (1 sample), so the caps are 100, 100 and 1,
    # which sum to the budget of 201 for this round only; 201 of 300 samples is a budget that balances (the
    # advice to lower it would be wrong)
    from flwr.app import ArrayRecord, ConfigRecord

    fleet = Fleet({1: (1, 100, 0.001), 2: (2, 100, 0.004), 3: (3, 100, 0.002)})
    strategy = AdaptiveStrategy(_fedavg(3), budget=201, policy="time")
    grid = SampledGrid(fleet.nodes, fleet.nodes)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_train(1, [r for r in fleet.replies(msgs) if r.metadata.src_node_id != 3])
        quotas = play(strategy, fleet, 2)
    assert quotas == {1: 100, 2: 100, 3: 1}
    assert not [r for r in caplog.records if "equals the local data" in r.getMessage()]


def test_a_partial_batch_a_node_dropped_is_counted_apart_from_capped_nodes(caplog):
    # Node 1 reads its quota with drop_last in batches of 32: of 75 samples it trains 64. Those 11 are not
    # "above a capped node's data" (it holds 100): they have their own column and words in the round line.
    fleet = Fleet({1: (1, 100, 0.001), 2: (2, 100, 0.001)}, drop_last={1: 32})
    strategy = AdaptiveStrategy(_fedavg(2), budget=150, policy="equal")
    with caplog.at_level(logging.INFO, logger="flwr"):
        assert play(strategy, fleet, 1) == {1: 75, 2: 75}
    row = strategy.history.iloc[-1]
    assert (row["samples"], row["short_capped"], row["short_untrained"], row["short_skipped"],
            row["short_unassigned"]) == (139, 0, 11, 0, 0)
    line = next(r.getMessage() for r in caplog.records if "round 1 (equal" in r.getMessage())
    assert "11 of 150 budgeted samples not processed (0 above capped nodes' data" in line
    assert "11 left of their quota by nodes, e.g. a partial batch dropped by drop_last" in line


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(5, 200), min_size=12, max_size=12), st.integers(2, 6), st.integers(1, 10**6),
       st.sampled_from(["time", "equal"]))
def test_property_every_budgeted_sample_is_processed_or_reported(sizes, sample, seed, policy):
    # Prepare: twelve nodes of random data sizes and costs; `sample` of them train each round
    rng = random.Random(seed)
    fleet = Fleet({n: (n, sizes[n], rng.uniform(0.001, 0.01)) for n in range(12)})
    budget = 40 * sample
    strategy = AdaptiveStrategy(_fedavg(sample), budget=budget, policy=policy, deadband=0.0)
    for rnd in range(1, 9):
        live = rng.sample(range(12), sample)
        # Execute
        quotas = play(strategy, fleet, rnd, sample=live)
        # Assert: quotas never exceed a size known before the round; the row accounts for the budget
        row = strategy.history.iloc[-1]
        assert (row["samples"] + row["short_capped"] + row["short_untrained"] + row["short_skipped"]
                + row["short_unassigned"] == budget)
        assert sum(quotas.values()) + row["short_unassigned"] == budget
    seen_before = strategy.client_history.groupby("node_id")["round"].min()
    rows = strategy.client_history
    late = rows[rows["round"] > rows["node_id"].map(seen_before)]
    assert (late["quota"] <= late["data_size"]).all()  # after a node's first reply its cap is known


# --------------------------------------------------------------------------- bounded state under churn
def test_node_id_churn_over_200_rounds_keeps_state_and_memory_bounded(caplog):
    # Prepare: 40 partitions; every round 5 of the 40 connected nodes restart under a new node id
    # (same partition), and 2 nodes that never report a partition come and go. 10 train per round.
    rng = random.Random(7)
    next_id = iter(range(10_000, 10**9))
    node_of = {p: next(next_id) for p in range(40)}
    anonymous = [next(next_id) for _ in range(2)]
    nodes = {n: (p, 50, 0.001 * (1 + p % 4)) for p, n in node_of.items()}
    nodes.update({n: (-1, 50, 0.002) for n in anonymous})
    fleet = Fleet(nodes)
    strategy = AdaptiveStrategy(_fedavg(10), budget=400, policy="time")
    strategy._client_rows = ClientRows(limit=300)
    sizes = {}
    with caplog.at_level(logging.WARNING, logger="flwr"):
        for rnd in range(1, 201):
            for p in rng.sample(range(40), 5):  # restarts: new node ids for the same partitions
                del fleet.nodes[node_of[p]]
                node_of[p] = next(next_id)
                fleet.nodes[node_of[p]] = (p, 50, 0.001 * (1 + p % 4))
            for n in anonymous[:]:
                del fleet.nodes[n]
                anonymous.remove(n)
                anonymous.append(next(next_id))
                fleet.nodes[anonymous[-1]] = (-1, 50, 0.002)
            # Execute
            live = list(fleet.nodes)
            play(strategy, fleet, rnd, sample=rng.sample(live, 10))
            if rnd in (50, 200):
                state = strategy.state_dict()
                sizes[rnd] = (len(state["controller"]["ids"]), len(json.dumps(state)))
    # Assert: controller ids stay within the partitions plus the connected nodes, and do not grow
    ids_50, bytes_50 = sizes[50]
    ids_200, bytes_200 = sizes[200]
    assert ids_200 <= 40 + len(fleet.nodes) and ids_200 <= ids_50 + 2
    assert bytes_200 <= 1.1 * bytes_50
    # per-node maps hold at most the connected nodes plus as many departed ones
    assert len(strategy._last_trained) <= 2 * len(fleet.nodes)
    assert len(strategy._partition_of) <= 2 * len(fleet.nodes)
    # the history keeps at most `limit` rows in memory and still returns all of them
    assert strategy._client_rows.in_memory <= 300
    assert len(strategy.client_history) == 200 * 10
    # a restarted node is keyed by its partition again: no "claims partition" warning
    assert not [r for r in caplog.records if "claims partition id" in r.getMessage()]
    # and the partitions' estimates survive the restarts
    assert set(range(40)) <= set(strategy.controller.estimates())


def test_a_partition_owned_by_a_connected_node_is_still_kept_apart_from_a_second_claimant(caplog):
    # Prepare: nodes 1 and 2 both claim partition 0 and stay connected
    fleet = Fleet({1: (0, 100, 0.004), 2: (0, 100, 0.001), 3: (1, 100, 0.002)})
    strategy = AdaptiveStrategy(_fedavg(3), budget=210, policy="time", deadband=0.0)
    for rnd in (1, 2, 3):
        play(strategy, fleet, rnd)
    # Assert: the second claimant (whichever replied second) keeps its own slot, not pruned as stale
    estimates = set(strategy.controller.estimates())
    assert estimates in ({0, 1, "node-1"}, {0, 1, "node-2"})


def test_client_rows_spill_beyond_the_limit_and_read_back_in_order():
    rows = ClientRows(limit=3)
    for i in range(8):
        rows.append({"round": i, "node_id": 100 + i, "energy_j": float(i) / 2, "data_size": None})
    frame = rows.frame()
    assert rows.in_memory <= 3 and rows.spilled == 6 and len(rows) == 8
    assert frame["round"].tolist() == list(range(8))
    assert frame["energy_j"].tolist() == [i / 2 for i in range(8)]
    with pytest.raises(ValueError, match="limit must be an int >= 1"):
        ClientRows(limit=0)


def test_controller_forget_drops_slots_and_bounds_and_the_next_split_still_sums():
    from flwr_adaptive.controller import AllocationController, Report

    ctrl = AllocationController(100, deadband=0.0, max_quota={"a": 30})
    ctrl.allocate(["a", "b", "c"])
    for p, t in (("a", 1.0), ("b", 2.0), ("c", 4.0)):
        ctrl.observe(p, Report(time_s=t, samples=33 if p != "a" else 30))
    ctrl.forget(["a", "zz"], config=True)
    assert set(ctrl.estimates()) == {"b", "c"} and "a" not in ctrl.state_dict()["ids"]
    assert ctrl.state_dict()["max_quota"] == []
    quotas = ctrl.allocate(["b", "c", "a"])  # "a" is new again: the median cost, no cap
    assert sum(quotas.values()) == 100 and quotas["b"] > quotas["c"]


def test_min_makespan_split_with_the_budget_equal_to_the_sum_of_the_caps_gives_every_cap():
    from flwr_adaptive.solver import min_makespan_split

    b = np.array([1.0, 1.0, 0.25, 0.75])
    quotas, makespan = min_makespan_split(160, np.zeros(4), b, np.ones(4, dtype=np.int64),
                                          np.array([30, 50, 50, 30]))
    assert quotas.tolist() == [30, 50, 50, 30] and makespan == 50.0
