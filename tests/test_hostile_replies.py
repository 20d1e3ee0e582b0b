"""Fault matrix: one hostile reply (or a hostile minority / majority) never stops or corrupts a round.

Every case fabricates the replies of a 4-node federation by hand (``hostile_support``; no
simulation engine): round 1 is honest (partitions known), round 2 carries the fault, round 3
must configure normally. Each case asserts that the round completes with the others, the budget
accounting is exact, the global model is the weighted mean of the honest updates only (never
NaN), and one log line names the offending node. The same faults through HFL's per-rank lists
and the legacy API; the log line that lists the metric keys left out.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from flwr_adaptive import keys

import adaptive_support as sup
from adaptive_support import FakeGrid
from hostile_support import (
    BUDGET,
    COSTS,
    HOSTILE,
    NODES,
    PARTS,
    _legacy_round,
    configure,
    expected_mean,
    fedavg,
    honest,
    honest_round,
    reply,
    telemetry,
)

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


# Each fault: how node HOSTILE replies instead of honestly; None means it is kept (duplicates).
def _fault_replies(kind, msg, quota):
    part = PARTS[HOSTILE]
    good = telemetry(quota, quota * COSTS[part], part)
    if kind == "time-underflow":
        return [reply(msg, {**good, keys.TIME_S: 5e-324})]
    if kind == "energy-underflow":
        return [reply(msg, {**good, keys.ENERGY_J: 5e-324})]
    if kind == "time-overflow":
        return [reply(msg, {**good, keys.TIME_S: 1.7e308, keys.SAMPLES: 1})]
    if kind == "data-size-huge":
        return [reply(msg, {**good, keys.DATA_SIZE: 1e19})]
    if kind == "data-size-int64":
        return [reply(msg, {**good, keys.DATA_SIZE: 2**63 - 1})]
    if kind == "idle-w-huge":
        return [reply(msg, {**good, keys.IDLE_W: 1e300})]
    if kind == "arrays-shape":
        return [reply(msg, good, arrays=[np.zeros(3)])]
    if kind == "arrays-dtype":
        return [reply(msg, good, arrays=[np.zeros(2, dtype=np.int64)])]  # the floats as integers
    if kind == "arrays-extra":
        return [reply(msg, good, arrays=[np.zeros(2), np.zeros(2)])]
    if kind == "arrays-nan":
        return [reply(msg, good, arrays=[np.array([np.nan, 1.0])])]
    if kind == "arrays-inf":
        return [reply(msg, good, arrays=[np.array([np.inf, 1.0])])]
    raise AssertionError(kind)


SKIPPED_FAULTS = ["time-underflow", "energy-underflow", "time-overflow", "data-size-huge", "data-size-int64",
                  "idle-w-huge", "arrays-shape", "arrays-dtype", "arrays-extra", "arrays-nan", "arrays-inf"]


@pytest.mark.parametrize("policy", ["time", "low-energy"])
@pytest.mark.parametrize("kind", SKIPPED_FAULTS)
def test_one_hostile_reply_is_skipped_with_one_line_and_the_round_completes(kind, policy, caplog):
    # Prepare: an honest first round (energy measured so that low-energy can compute)
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, weighting="samples", policy=policy, deadband=0.0)
    msgs, q = configure(strategy, 1)
    strategy.aggregate_train(1, [reply(m, telemetry(q[n], q[n] * COSTS[PARTS[n]], PARTS[n], energy=q[n] * 0.01),
                                       value=PARTS[n] + 1)
                                 for m in msgs for n in [m.metadata.dst_node_id]])
    msgs, q = configure(strategy, 2)
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        if n == HOSTILE:
            replies += _fault_replies(kind, m, q[n])
        else:
            replies.append(reply(m, telemetry(q[n], q[n] * COSTS[PARTS[n]], PARTS[n], energy=q[n] * 0.01),
                                 value=PARTS[n] + 1))
    caplog.clear()
    # Execute
    arrays, _ = strategy.aggregate_train(2, replies)
    _, q3 = configure(strategy, 3)
    # Assert: the round completed with the three others, exactly; the model is their mean; next round sums
    row = strategy.history.iloc[-1]
    assert (row["clients"], row["skipped"], row["quota_sum"]) == (3, 1, BUDGET)
    assert row["samples"] == sum(q[n] for n in NODES if n != HOSTILE)
    model = arrays.to_numpy_ndarrays()[0]
    assert np.all(np.isfinite(model))
    assert model == pytest.approx(expected_mean(q, [n for n in NODES if n != HOSTILE]))
    assert sum(q3.values()) == BUDGET and set(q3) == set(NODES)
    lines = [line for line in sup.adaptive_lines(caplog) if str(HOSTILE) in line and "skipped" in line]
    assert len(lines) == 1
    clients = strategy.client_history
    assert clients[(clients["round"] == 2) & (clients["node_id"] == HOSTILE)]["status"].tolist() == ["invalid"]


def test_underflowing_time_from_two_of_three_nodes_and_from_the_only_node_known(caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    # Prepare: three nodes, two of them underflow in round 1 (nothing known yet)
    strategy = AdaptiveStrategy(fedavg(3), budget=BUDGET, deadband=0.0)
    nodes = NODES[:3]
    msgs, q = configure(strategy, 1, nodes)
    replies = [reply(m, telemetry(q[n], 5e-324 if n != 9001 else q[n] * 0.001, PARTS[n]))
               for m in msgs for n in [m.metadata.dst_node_id]]
    # Execute
    strategy.aggregate_train(1, replies)
    _, q2 = configure(strategy, 2, nodes)
    # Assert: only the honest node was observed; the next split still sums exactly
    assert sum(q2.values()) == BUDGET
    assert list(strategy.controller.estimates()) == [0]
    # and a federation whose only node underflows still configures
    alone = AdaptiveStrategy(fedavg(1), budget=BUDGET)
    msgs, q = configure(alone, 1, [9001])
    alone.aggregate_train(1, [reply(msgs[0], telemetry(q[9001], 5e-324, 0))])
    _, q2 = configure(alone, 2, [9001])
    assert q2 == {9001: BUDGET}


def test_two_replies_from_one_node_count_once():
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, weighting="samples")
    honest_round(strategy, 1)
    msgs, q = configure(strategy, 2)
    replies = [honest(m, q[m.metadata.dst_node_id], m.metadata.dst_node_id) for m in msgs]
    twin = next(m for m in msgs if m.metadata.dst_node_id == HOSTILE)
    replies.append(reply(twin, telemetry(q[HOSTILE], q[HOSTILE] * 0.004, PARTS[HOSTILE]), value=100.0))
    # Execute
    arrays, _ = strategy.aggregate_train(2, replies)
    # Assert: budget samples in all, and the duplicate's model (100) is not in the average
    row = strategy.history.iloc[-1]
    assert (row["clients"], row["samples"]) == (4, BUDGET)
    assert arrays.to_numpy_ndarrays()[0] == pytest.approx(expected_mean(q, NODES))


def test_a_node_listed_twice_by_the_grid_is_sent_one_message():
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    # Execute
    msgs, q = configure(strategy, 1, NODES + [NODES[0]])
    # Assert
    assert sorted(m.metadata.dst_node_id for m in msgs) == NODES and sum(q.values()) == BUDGET


def test_a_colluding_majority_with_an_extra_metric_key_does_not_get_the_minority_skipped(caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, weighting="samples")
    honest_round(strategy, 1)
    msgs, q = configure(strategy, 2)
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        extra = {} if n == 9001 else {"steal": 1.0}
        replies.append(reply(m, {**telemetry(q[n], q[n] * COSTS[PARTS[n]], PARTS[n]), **extra}, value=PARTS[n] + 1))
    caplog.clear()
    # Execute
    arrays, metrics = strategy.aggregate_train(2, replies)
    # Assert: every reply kept; the extra key is left out of the average with one line
    assert strategy.history.iloc[-1]["clients"] == 4
    assert arrays.to_numpy_ndarrays()[0] == pytest.approx(expected_mean(q, NODES))
    assert "steal" not in metrics
    assert sum("'steal'" in line for line in sup.adaptive_lines(caplog)) == 1


def test_a_metric_another_kind_in_one_reply_is_left_out_not_fatal():
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    msgs, q = configure(strategy, 1)
    replies = [reply(m, {**telemetry(q[n], q[n] * COSTS[PARTS[n]], PARTS[n]),
                         "loss": [1.0, 2.0] if n == HOSTILE else 0.5}, value=PARTS[n] + 1)
               for m in msgs for n in [m.metadata.dst_node_id]]
    _, metrics = strategy.aggregate_train(1, replies)
    assert "loss" not in metrics and strategy.history.iloc[-1]["clients"] == 4


def test_a_nan_metric_in_one_reply_names_that_reply_s_node_not_every_node(caplog):
    # Seen through flwr run (helper-62): one node's NaN train_loss listed the first 5 of 6 nodes, none the sender
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    msgs, q = configure(strategy, 1)
    replies = [reply(m, {**telemetry(q[n], q[n] * COSTS[PARTS[n]], PARTS[n]),
                         "train_loss": math.nan if n == HOSTILE else 0.5}, value=PARTS[n] + 1)
               for m in msgs for n in [m.metadata.dst_node_id]]
    caplog.clear()
    _, metrics = strategy.aggregate_train(1, replies)
    assert "train_loss" not in metrics and strategy.history.iloc[-1]["clients"] == 4  # left out, nobody skipped
    said = [line for line in sup.adaptive_lines(caplog) if "'train_loss'" in line]
    assert len(said) == 1 and f"'train_loss' (node {HOSTILE})" in said[0] and "not finite" in said[0]
    # every reply's NaN: every node is named (helper-64: the line said "(node )")
    from flwr_adaptive.strategies.screening import harmonize_metrics

    contents = [r.content for r in replies]
    for c in contents:
        c["metrics"]["train_loss"] = math.nan
    assert harmonize_metrics(contents, [])["train_loss"] == [0, 1, 2, 3]


def test_node_unavailable_reply_from_the_superlink_is_attributed_to_its_node(caplog):
    from flwr.app import Error, Message

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    msgs, q = configure(strategy, 1)
    for i, m in enumerate(msgs):  # what the Grid does when it pushes them
        m.metadata.__dict__["_message_id"] = f"msg-{i}"
    lost = next(m for m in msgs if m.metadata.dst_node_id == HOSTILE)
    unavailable = Message(Error(code=3, reason="NODE_UNAVAILABLE"), reply_to=lost)
    unavailable.metadata.__dict__["_src_node_id"] = 1  # Flower's error reply comes from the SuperLink
    replies = [honest(m, q[m.metadata.dst_node_id], m.metadata.dst_node_id) for m in msgs if m is not lost]
    caplog.clear()
    # Execute
    strategy.aggregate_train(1, replies + [unavailable])
    # Assert: recorded as an error of node HOSTILE, not as a stray reply of node 1 plus a no-reply
    clients = strategy.client_history
    assert clients[clients["node_id"] == HOSTILE]["status"].tolist() == ["error"]
    assert not any("node 1 " in line for line in sup.adaptive_lines(caplog))


def test_a_restarted_node_takes_over_its_partition_when_the_old_owner_is_gone(caplog):
    from flwr.app import Error, Message

    from flwr_adaptive.strategies import AdaptiveStrategy

    caplog.set_level("INFO", logger="flwr")
    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, deadband=0.0)
    honest_round(strategy, 1)
    honest_round(strategy, 2)
    estimate = strategy.controller.estimates()[PARTS[HOSTILE]]
    # Execute: the old owner's round-3 message fails (unavailable); node 7777 reports its partition
    nodes = NODES + [7777]
    msgs, q = configure(strategy, 3, nodes)
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        if n == HOSTILE:
            replies.append(Message(Error(code=3, reason="NODE_UNAVAILABLE"), reply_to=m))
        elif n == 7777:
            replies.append(reply(m, telemetry(q[n], q[n] * COSTS[PARTS[HOSTILE]], PARTS[HOSTILE]), value=3))
        else:
            replies.append(honest(m, q[m.metadata.dst_node_id], n))
    strategy.aggregate_train(3, replies)
    _, q4 = configure(strategy, 4, [n for n in nodes if n != HOSTILE])
    # Assert: 7777 is keyed by the partition (no "node-7777" participant), its estimate continued
    assert "node-7777" not in strategy.controller.estimates()
    assert strategy.controller.estimates()[PARTS[HOSTILE]][0] == pytest.approx(estimate[0])
    assert any("takes over partition 2" in line for line in sup.adaptive_lines(caplog))
    assert sum(q4.values()) == BUDGET


def test_two_live_nodes_claiming_one_partition_stay_a_warning(caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    honest_round(strategy, 1)
    nodes = NODES + [7777]
    msgs, q = configure(strategy, 2, nodes)
    replies = [reply(m, telemetry(q[n], q[n] * 0.004, PARTS.get(n, PARTS[HOSTILE])), value=1)
               for m in msgs for n in [m.metadata.dst_node_id]]
    strategy.aggregate_train(2, replies)
    assert "node-7777" in strategy.controller.estimates()
    assert any("claims partition id 2" in line for line in sup.adaptive_lines(caplog))


# --------------------------------------------------------------------------- HFL
def test_hfl_per_rank_lists_longer_than_the_budget_can_plan_are_screened_and_never_stored(caplog):
    from test_hfl import hierarchical, play, silo_reply

    strategy = hierarchical(2, deadband=0.0)  # budget 600, 10 steps: at most 60 ranks per silo
    costs = {0: [0.001, 0.002], 1: [0.001, 0.001]}
    play(strategy, 1, costs)
    from flwr.app import ArrayRecord, ConfigRecord

    node_of = {1000: 0, 1001: 1}
    msgs = list(strategy.configure_train(2, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(node_of)))
    huge = 200_000
    replies = [silo_reply(m, node_of[m.metadata.dst_node_id], costs[node_of[m.metadata.dst_node_id]])
               if node_of[m.metadata.dst_node_id] == 0 else
               silo_reply(m, 1, [0.001] * huge, rank_quotas=[600] + [0] * (huge - 1))
               for m in msgs]
    # Execute
    strategy.aggregate_train(2, replies)
    # Assert: silo 1 skipped, no rank of it beyond its 2 stored, the round completed with silo 0
    assert strategy.history.iloc[-1]["clients"] == 1
    assert sorted(p for p in strategy.controller.groups if str(p).startswith("1/")) == ["1/0", "1/1"]
    assert any("more than the 60 ranks" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- legacy API
@pytest.mark.parametrize("kind", ["nan", "shape", "dtype", "data-size", "underflow", "duplicate"])
def test_legacy_strategy_screens_the_same_faults(kind):
    from flwr.common import parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    from flwr_adaptive.strategies import LegacyAdaptiveStrategy

    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=4, min_available_clients=4), budget=BUDGET, weighting="samples")
    _legacy_round(strategy, 1)
    fault = {
        "nan": lambda m, a: (m, [np.array([np.nan, 0.0])], []),
        "shape": lambda m, a: (m, [np.zeros(3)], []),
        "dtype": lambda m, a: (m, [np.zeros(2, dtype=np.int64)], []),
        "data-size": lambda m, a: ({**m, keys.DATA_SIZE: 10**19}, a, []),
        "underflow": lambda m, a: ({**m, keys.TIME_S: 5e-324}, a, []),
        "duplicate": lambda m, a: (m, a, [[np.full(2, 100.0)]]),
    }[kind]
    # Execute
    q, params = _legacy_round(strategy, 2, {HOSTILE: fault})
    # Assert
    kept = NODES if kind == "duplicate" else [n for n in NODES if n != HOSTILE]
    row = strategy.history.iloc[-1]
    assert row["clients"] == len(kept) and row["samples"] == sum(q[n] for n in kept)
    model = parameters_to_ndarrays(params)[0]
    assert np.all(np.isfinite(model)) and model == pytest.approx(expected_mean(q, kept))
    assert not math.isnan(row["makespan_s"])


# --------------------------------------------------------------------------- the operator's log line
def test_the_harmonized_metrics_line_names_each_key_with_its_nodes():
    from flwr_adaptive.strategies.screening import describe_removed

    # scripts/mutation.sh: "node" / "nodes" swapped survived (the operator's log line)
    text = describe_removed({"y": [2], "x": [0, 1], "z": list(range(7))}, [11, 12, 13, 14, 15, 16, 17])
    assert text == "'x' (nodes 11, 12); 'y' (node 13); 'z' (nodes 11, 12, 13, 14, 15…)"


def test_a_round_in_which_no_reply_is_kept_says_loudly_that_the_model_did_not_change(caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, weighting="samples")
    honest_round(strategy, 1)
    msgs, q = configure(strategy, 2)
    replies = [reply(m, telemetry(q[n], q[n] * COSTS[PARTS[n]], PARTS[n]), arrays=[np.zeros(2, dtype=np.int64)])
               for m in msgs for n in [m.metadata.dst_node_id]]
    with caplog.at_level("INFO", logger="flwr"):
        strategy.aggregate_train(2, replies)
    line = [r for r in caplog.records if "[adaptive] round 2 (" in r.getMessage()]
    assert len(line) == 1 and line[0].levelname == "WARNING"
    assert "NO reply was kept: the global model did not change this round" in line[0].getMessage()
    honest_round(strategy, 3)
    assert "NO reply" not in [r for r in caplog.records if "[adaptive] round 3 (" in r.getMessage()][-1].getMessage()


def test_a_node_naming_a_new_partition_every_round_keeps_its_first_and_grows_no_state(caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, weighting="samples")
    with caplog.at_level("WARNING", logger="flwr"):
        for rnd in range(1, 8):
            msgs, q = configure(strategy, rnd)
            replies = []
            for m in msgs:
                n = m.metadata.dst_node_id
                part = PARTS[n] if n != HOSTILE or rnd == 1 else 100 + rnd  # a fresh partition id every round
                replies.append(reply(m, telemetry(q[n], q[n] * COSTS[PARTS[n]], part), value=PARTS[n] + 1))
            strategy.aggregate_train(rnd, replies)
    # it stays keyed by the partition it named first: four controller slots, four owners, as with honest nodes
    assert strategy.nodes.partition_of[HOSTILE] == PARTS[HOSTILE]
    assert len(strategy.controller.estimates()) == 4 and set(strategy.nodes.owner) == set(PARTS.values())
    assert sum("claimed partition 2 before" in r.getMessage() for r in caplog.records) == 1
