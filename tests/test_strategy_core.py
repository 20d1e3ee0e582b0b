"""The adaptive strategy's server side without the simulation engine: messages built by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys

import adaptive_support as sup
from adaptive_support import FakeGrid
from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.core import STATE_FILE, AdaptiveCore


pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def telemetry(samples, time_s, partition, *, energy=-1.0, data_size=10_000, idle_w=2.0, capped=0, virtual=1):
    # local-steps: what the wrapper counts (here one sample per optimizer step)
    return {keys.SAMPLES: samples, keys.TIME_S: time_s, keys.CPU_TIME_S: time_s, keys.WALL_TIME_S: time_s,
            keys.ENERGY_J: energy, keys.DATA_SIZE: data_size, keys.PARTITION_ID: partition,
            keys.QUOTA_CAPPED: capped, keys.IDLE_W: idle_w, keys.VIRTUAL_CLOCK: virtual,
            keys.LOCAL_STEPS: max(samples, 1)}


def reply(msg, metrics, value=0.0):
    """The reply a wrapped client sends to ``msg``: its model is the constant ``value``."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.full(2, float(value))]),
                               "metrics": MetricRecord({"num-examples": 1, **metrics})}), reply_to=msg)


def quotas_of(messages):
    return {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in messages}


def play_round(strategy, grid, rnd, per_sample, partition_of, **kw):
    """configure_train + replies with time = quota × per-sample cost of the node's partition."""
    from flwr.app import ArrayRecord, ConfigRecord

    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({"lr": 0.1}), grid))
    q = quotas_of(msgs)
    replies = [reply(m, telemetry(q[m.metadata.dst_node_id], q[m.metadata.dst_node_id]
                                  * per_sample[partition_of[m.metadata.dst_node_id]],
                                  partition_of[m.metadata.dst_node_id], **kw),
                     value=partition_of[m.metadata.dst_node_id])
               for m in msgs]
    arrays, metrics = strategy.aggregate_train(rnd, replies)
    return q, arrays


NODES = [9001, 9002, 9003, 9004]
PARTS = {9001: 0, 9002: 1, 9003: 2, 9004: 3}
COSTS = {0: 0.001, 1: 0.002, 2: 0.004, 3: 0.004}


def _fedavg(n=len(NODES)):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


# --------------------------------------------------------------------------- Message API
def test_configure_train_gives_each_node_its_own_config_with_the_inner_entries():
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedProx

    # Prepare
    inner = FedProx(proximal_mu=0.3, min_train_nodes=4, min_available_nodes=4)
    strategy = AdaptiveStrategy(inner, budget=1001)
    arrays = ArrayRecord([np.zeros(2)])
    # Execute
    msgs = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), FakeGrid(NODES)))
    # Assert: round 1 is the equal split keyed by node id, one ConfigRecord per node
    assert sorted(quotas_of(msgs).values()) == [250, 250, 250, 251]
    configs = [m.content["config"] for m in msgs]
    assert len({id(c) for c in configs}) == 4
    for c in configs:
        assert c["proximal-mu"] == 0.3 and c["lr"] == 0.1 and c[keys.ROUND] == 1
        assert c[keys.ALLOW_CYCLING] is False
    assert all(m.content["arrays"] is arrays for m in msgs)  # shared, not copied


def test_rounds_after_the_first_split_by_partition_cost_and_sum_to_the_budget():
    # Prepare
    strategy = AdaptiveStrategy(_fedavg(), budget=1000, deadband=0.0)
    grid = FakeGrid(NODES)
    # Execute
    q1, _ = play_round(strategy, grid, 1, COSTS, PARTS)
    q2, _ = play_round(strategy, grid, 2, COSTS, PARTS)
    # Assert: inversely to the cost per sample, 1 : 1/2 : 1/4 : 1/4 of 1000
    assert sorted(q1.values()) == [250] * 4
    assert q2 == {9001: 500, 9002: 250, 9003: 125, 9004: 125}
    assert strategy.history["makespan_s"].iloc[1] < strategy.history["makespan_s"].iloc[0]


def test_bad_replies_are_skipped_before_fedavg_which_would_raise_on_them():
    from flwr.app import ArrayRecord, ConfigRecord, Error, Message
    from flwr.serverapp.exception import InconsistentMessageReplies

    # Prepare: node 1 answers fine, 2 with an error, 3 with NaN time, 4 with an extra metric key
    strategy = AdaptiveStrategy(_fedavg(), budget=400)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(), FakeGrid(NODES)))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    replies = [
        reply(by_node[9001], telemetry(100, 0.1, 0), value=1.0),
        Message(Error(code=0, reason="CUDA out of memory"), reply_to=by_node[9002]),
        reply(by_node[9003], telemetry(100, math.nan, 2), value=3.0),
        reply(by_node[9004], {**telemetry(100, 0.1, 3), "extra": 1.0}, value=4.0),
    ]
    plain = _fedavg()
    # Execute
    with pytest.raises(InconsistentMessageReplies):
        plain.aggregate_train(1, [replies[0], replies[3]])
    arrays, _ = strategy.aggregate_train(1, replies)
    # Assert: nodes 1 and 4 are aggregated (4's extra key is left out of the metric average, not
    # the reply: consistency is what aggregation needs); the others are logged with a reason
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [2.5, 2.5])
    status = strategy.client_history.set_index("node_id")["status"].to_dict()
    assert status == {9001: "ok", 9002: "error", 9003: "invalid", 9004: "ok"}
    assert strategy.controller.estimates() == {0: (0.001, None), 3: (0.001, None)}


def test_a_reply_claiming_more_samples_than_its_quota_is_invalid_and_not_counted(caplog):
    from flwr.app import ArrayRecord, ConfigRecord

    # Prepare: node 9004 reports 150 samples for a quota of 100
    strategy = AdaptiveStrategy(_fedavg(), budget=400)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(), FakeGrid(NODES)))
    replies = [reply(m, telemetry(150 if m.metadata.dst_node_id == 9004 else 100, 0.1,
                                  PARTS[m.metadata.dst_node_id])) for m in msgs]
    # Execute
    strategy.aggregate_train(1, replies)
    # Assert: skipped as invalid with the reason named; its samples are not counted
    status = strategy.client_history.set_index("node_id")["status"].to_dict()
    assert status == {9001: "ok", 9002: "ok", 9003: "ok", 9004: "invalid"}
    assert strategy.history["samples"].tolist() == [300]
    assert any("'samples' = 150 exceeds the quota of 100" in r.getMessage() for r in caplog.records)


def test_timed_out_nodes_are_skipped_and_probe_next_round():
    from flwr.app import ArrayRecord, ConfigRecord

    # Prepare
    strategy = AdaptiveStrategy(_fedavg(), budget=400)
    grid = FakeGrid(NODES)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(), grid))
    late = msgs[0].metadata.dst_node_id
    replies = [reply(m, telemetry(100, 0.1, PARTS[m.metadata.dst_node_id])) for m in msgs[1:]]
    # Execute
    strategy.aggregate_train(1, replies)
    q2 = quotas_of(strategy.configure_train(2, ArrayRecord([np.zeros(2)]), ConfigRecord(), grid))
    # Assert: the silent node gets the probe quota; its share goes to the others
    assert strategy.client_history.set_index("node_id").loc[late, "status"] == "no-reply"
    assert q2[late] == strategy.probe_quota() == 1 and sum(q2.values()) == 400


def test_a_strategy_without_probation_gives_a_failed_node_its_usual_share_and_observes_it():
    # Prepare: equal split; node 1001 fails in round 1
    class NoProbation(AdaptiveCore):
        uses_probation = False

    core = NoProbation(300, "equal")
    nodes = [1000, 1001, 1002]
    quotas = core.quotas_for(1, nodes)
    core.begin_round(1, quotas)
    reports = [ClientReport(n, i, 100, 100, 1.0, 0.0, 0.0, None, None, False, 1.0, True)
               for i, n in enumerate(nodes) if n != 1001]
    core.observe_replies(1, reports)
    core.end_round(1, reports, {1001: "error"})
    # Execute
    second = core.quotas_for(2, nodes)
    core.begin_round(2, second)
    back = ClientReport(1001, 1, 100, 100, 4.0, 0.0, 0.0, None, None, False, 1.0, True)
    accepted = core.observe_replies(2, [back])
    core.end_round(2, [back], {})
    # Assert: no probe quota, and its reply counts as a measurement
    assert second == {1000: 100, 1001: 100, 1002: 100}
    assert accepted == [back] and core.partition_of(1001) == 1
    assert core.client_history.set_index(["round", "node_id"]).loc[(2, 1001), "status"] == "ok"


@pytest.mark.parametrize("weighting, expected", [("samples", (1 * 200 + 2 * 120) / 320),
                                                  ("data-size", (1 * 50 + 2 * 150) / 200)])
def test_aggregation_weights_follow_the_weighting(weighting, expected):
    from flwr.app import ArrayRecord, ConfigRecord

    # Prepare: quotas of 200; node A processed 200 samples of its 50 (cycling), node B 120 of its 150
    strategy = AdaptiveStrategy(_fedavg(2), budget=400, weighting=weighting, allow_cycling=True)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(), FakeGrid([1, 2])))
    replies = [reply(msgs[0], telemetry(200, 0.2, 0, data_size=50), value=1.0),
               reply(msgs[1], telemetry(120, 0.1, 1, data_size=150), value=2.0)]
    # Execute
    arrays, _ = strategy.aggregate_train(1, replies)
    # Assert
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [expected, expected])


def test_fedadam_inner_strategy_aggregates_through_the_wrapper():
    from flwr.serverapp.strategy import FedAdam

    # Prepare
    strategy = AdaptiveStrategy(FedAdam(fraction_evaluate=0.0, min_train_nodes=4, min_available_nodes=4),
                                budget=400)
    # Execute
    _, arrays = play_round(strategy, FakeGrid(NODES), 1, COSTS, PARTS)
    # Assert: FedAdam moved the model towards the clients' average (all positive)
    assert (arrays.to_numpy_ndarrays()[0] > 0).all()


def test_state_resumes_from_state_dir_and_round_one_is_still_equal(tmp_path):
    # Prepare: a first run learns costs, then the ServerApp restarts with new node ids
    first = AdaptiveStrategy(_fedavg(), budget=1000, state_dir=tmp_path)
    play_round(first, FakeGrid(NODES), 1, COSTS, PARTS)
    saved = json.loads((tmp_path / STATE_FILE).read_text())
    new_nodes = [5, 6, 7, 8]
    # Execute
    second = AdaptiveStrategy(_fedavg(), budget=1000, state_dir=tmp_path, deadband=0.0)
    estimates = second.controller.estimates()
    q1, _ = play_round(second, FakeGrid(new_nodes), 1, COSTS, dict(zip(new_nodes, range(4))))
    q2, _ = play_round(second, FakeGrid(new_nodes), 2, COSTS, dict(zip(new_nodes, range(4))))
    # Assert
    assert saved["rounds"] == 1 and sorted(saved["controller"]["ids"]) == [0, 1, 2, 3]
    assert estimates == {p: (c, None) for p, c in COSTS.items()}
    assert sorted(q1.values()) == [250] * 4  # node ids are new: equal split keyed by node id
    assert q2[5] > q2[6] > q2[7] and sum(q2.values()) == 1000
    assert second.state_dict()["rounds"] == 3


def test_state_resumes_from_the_serverapp_context():
    from flwr.app import Context, RecordDict

    # Prepare
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    first = AdaptiveStrategy(_fedavg(), budget=1000, context=context)
    play_round(first, FakeGrid(NODES), 1, COSTS, PARTS)
    # Execute
    second = AdaptiveStrategy(_fedavg(), budget=1000, context=context)
    # Assert
    assert second.controller.estimates() == first.controller.estimates() != {}


def test_history_csv_and_one_log_line_per_round(tmp_path, caplog):
    # Prepare
    strategy = AdaptiveStrategy(_fedavg(), budget=400, policy="low-energy")
    grid = FakeGrid(NODES)
    # Execute
    with caplog.at_level("INFO", logger="flwr"):
        for rnd in (1, 2):
            play_round(strategy, grid, rnd, COSTS, PARTS, energy=1.0)
    strategy.save_history(tmp_path / "history.csv")
    # Assert
    lines = sup.adaptive_lines(caplog)
    assert len(lines) == 2 and lines[0].startswith("[adaptive] round 1 (low-energy, virtual clock): makespan ")
    assert "energy " in lines[0] and "quota min/median/max 100/100/100" in lines[0]
    import pandas as pd

    hist = pd.read_csv(tmp_path / "history.csv")
    clients = pd.read_csv(tmp_path / "history-clients.csv")
    assert list(hist["round"]) == [1, 2] and len(clients) == 8
    # round 1: busy 0.1, 0.2, 0.4, 0.4 s; idle 2 W while waiting for 0.4 s; 1 J active each
    assert hist.loc[0, "makespan_s"] == pytest.approx(0.4)
    assert hist.loc[0, "energy_j"] == pytest.approx(4 * 1.0 + 2.0 * (0.3 + 0.2))


def test_energy_policy_drops_observations_without_energy_but_keeps_the_update(caplog):
    # Prepare
    strategy = AdaptiveStrategy(_fedavg(), budget=400, policy="energy")
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        _, arrays = play_round(strategy, FakeGrid(NODES), 1, COSTS, PARTS)  # energy -1: unmeasured
    # Assert
    assert arrays is not None
    assert (strategy.client_history["status"] == "observation-dropped").all()
    assert any("energy_j is None but w_energy" in line for line in sup.adaptive_lines(caplog))


def test_budget_above_the_local_data_without_cycling_trains_everyone_on_all_data(caplog):
    # Prepare: 4 clients with 100 samples each, budget 1000
    strategy = AdaptiveStrategy(_fedavg(), budget=1000)
    grid = FakeGrid(NODES)
    with caplog.at_level("WARNING", logger="flwr"):
        play_round(strategy, grid, 1, COSTS, PARTS, data_size=100)
        # Execute
        q2, _ = play_round(strategy, grid, 2, COSTS, PARTS, data_size=100)
    # Assert
    assert q2 == {n: 100 for n in NODES}
    warned = [line for line in sup.adaptive_lines(caplog) if "every client trains on all its local data" in line]
    assert len(warned) == 1 and "a budget of at most 400" in warned[0] and "round 2" in warned[0]


NODES5 = [9001, 9002, 9003, 9004, 9005]
PARTS5 = {n: i for i, n in enumerate(NODES5)}
COSTS5 = {i: 0.001 * (i + 1) for i in range(5)}


def test_budget_below_nodes_times_min_quota_trains_a_rotating_subset(caplog):
    # Prepare: 3 samples per round cannot give 5 nodes min_quota 1 each; 50 local samples each
    strategy = AdaptiveStrategy(_fedavg(5), budget=3)
    grid = FakeGrid(NODES5)
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        q1, arrays1 = play_round(strategy, grid, 1, COSTS5, PARTS5, data_size=50)
        q2, arrays2 = play_round(strategy, grid, 2, COSTS5, PARTS5, data_size=50)
    # Assert: 3 nodes train each round, 1 sample each; those left out in round 1 train in round 2
    assert q1 == {9001: 1, 9002: 1, 9003: 1}
    assert set(q2) >= {9004, 9005} and len(q2) == 3 and sum(q2.values()) == 3
    assert arrays1 is not None and arrays2 is not None
    assert (strategy.client_history["status"] == "ok").all()  # nobody left out is penalised
    assert strategy.history["samples"].tolist() == [3, 3]
    warned = [line for line in sup.adaptive_lines(caplog) if "cannot give each of the 5 nodes" in line]
    assert len(warned) == 1 and "raise the budget to at least 5" in warned[0]


def test_budget_below_nodes_times_min_quota_gives_every_trainer_its_minimum():
    # Prepare: min_quota 2, budget 5, 4 nodes: 2 nodes fit
    core = AdaptiveCore(5, "time", min_quota=2, deadband=0.0)
    nodes = [1, 2, 3, 4]
    # Execute
    rounds = []
    for rnd in (1, 2, 3):
        quotas = core.quotas_for(rnd, nodes)
        core.begin_round(rnd, quotas)
        reports = [ClientReport(n, n, q, q, q * 0.01, 0.0, 0.0, None, 50, False, 1.0, True) for n, q in quotas.items()]
        core.observe_replies(rnd, reports)
        core.end_round(rnd, reports, {})
        rounds.append(quotas)
    # Assert
    for quotas in rounds:
        assert len(quotas) == 2 and sum(quotas.values()) == 5 and min(quotas.values()) >= 2
    assert set(rounds[0]) | set(rounds[1]) == set(nodes)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 12), min_quota=st.integers(1, 5), data=st.data())
def test_property_small_budget_sums_exactly_and_measures_every_node(n, min_quota, data):
    # Prepare: a budget that fits m < n nodes at their minimum
    m = data.draw(st.integers(1, n - 1))
    budget = data.draw(st.integers(m * min_quota, (m + 1) * min_quota - 1))
    core = AdaptiveCore(budget, "time", min_quota=min_quota, deadband=0.0)
    nodes = [500 + i for i in range(n)]
    trained = set()
    # Execute: enough rounds for a full rotation
    for rnd in range(1, -(-n // m) + 1):
        quotas = core.quotas_for(rnd, nodes)
        core.begin_round(rnd, quotas)
        reports = [ClientReport(node, i, quotas[node], quotas[node], quotas[node] * 0.001 * (i + 1), 0.0, 0.0,
                                None, 1000, False, 1.0, True) for i, node in enumerate(nodes) if node in quotas]
        core.observe_replies(rnd, reports)
        core.end_round(rnd, reports, {})
        # Assert
        assert sum(quotas.values()) == budget and len(quotas) == m
        assert min(quotas.values()) >= min_quota
        trained |= set(quotas)
    assert trained == set(nodes)


def test_budget_above_the_local_data_of_known_and_new_nodes_still_sums_to_the_budget():
    # Prepare: three nodes reported 100 local samples each; a fourth is new (size unknown)
    core = AdaptiveCore(1000, "time", deadband=0.0)
    q1 = core.quotas_for(1, [1, 2, 3])
    core.begin_round(1, q1)
    reports = [ClientReport(n, n, q, 100, 0.1, 0.0, 0.0, None, 100, True, 1.0, True) for n, q in q1.items()]
    core.observe_replies(1, reports)
    core.end_round(1, reports, {})
    # Execute
    q2 = core.quotas_for(2, [1, 2, 3, 4])
    # Assert: the known ones train on all their data, the new one takes the exact remainder
    assert q2 == {1: 100, 2: 100, 3: 100, 4: 700}


def test_two_nodes_claiming_one_partition_are_kept_apart_the_same_way_everywhere(caplog):
    # Prepare: nodes 1 and 2 both say partition 0 (slow and fast); node 3 is partition 1
    core = AdaptiveCore(700, "time", deadband=0.0)
    nodes, parts, cost = [1, 2, 3], {1: 0, 2: 0, 3: 1}, {1: 0.004, 2: 0.001, 3: 0.002}
    with caplog.at_level("INFO", logger="flwr"):
        q1 = core.quotas_for(1, nodes)
        core.begin_round(1, q1)
        reports = [ClientReport(n, parts[n], q, q, q * cost[n], 0.0, 0.0, None, 10_000, False, 1.0, True)
                   for n, q in q1.items()]
        core.observe_replies(1, reports)
        core.end_round(1, reports, {})
        # Execute
        q2 = core.quotas_for(2, nodes)
    # Assert: the second claimant has its own estimate, observed and used under one key
    estimates = core.controller.estimates()
    assert set(estimates) == {0, "node-2", 1}
    assert estimates[0][0] == pytest.approx(0.004) and estimates["node-2"][0] == pytest.approx(0.001)
    assert q2 == {1: 100, 2: 400, 3: 200}  # ∝ 1 / cost per sample
    warned = [line for line in sup.adaptive_lines(caplog) if "claims partition id 0" in line]
    assert len(warned) == 1 and "node 2 claims partition id 0, which node 1 already has" in warned[0]
    # ... and the round line names it by its node, not as a second "partition 0" (helper-56)
    line = next(m for m in sup.adaptive_lines(caplog) if "round 1 (time" in m)
    assert "quotas partition 0: " in line and "node 2: " in line and line.count("partition 0:") == 1


def test_constructor_rejects_bad_arguments_naming_the_value():
    with pytest.raises(ValueError, match="unknown policy 'fast'; choose one of equal, time"):
        AdaptiveStrategy(budget=10, policy="fast")
    with pytest.raises(ValueError, match="unknown weighting 'size'"):
        AdaptiveStrategy(budget=10, weighting="size")
    with pytest.raises(ValueError, match="budget must be a positive int .* got 0"):
        AdaptiveStrategy(budget=0)
    with pytest.raises(ValueError, match="for a flwr.server.strategy one use flwr_adaptive.strategies.LegacyAdaptiveStrategy"):
        from flwr.server.strategy import FedAvg as LegacyFedAvg

        AdaptiveStrategy(LegacyFedAvg(), budget=10)
    with pytest.raises(ValueError, match="got float 0.5$"):  # not a strategy at all: no hint about the legacy API
        AdaptiveStrategy(0.5, budget=10)
    # wrapped twice (helper-62): round 1 stopped telling the user to wrap a ClientApp that was wrapped
    with pytest.raises(ValueError, match=r"already an adaptive strategy .*AdaptiveStrategy\(FedAvg\(\), budget"):
        AdaptiveStrategy(AdaptiveStrategy(budget=10), budget=10)
    with pytest.raises(ValueError, match="already an adaptive strategy"):
        LegacyAdaptiveStrategy(LegacyAdaptiveStrategy(budget=10), budget=10)


# --------------------------------------------------------------------------- legacy API
class _Proxy:
    def __init__(self, cid):
        self.cid = str(cid)


class _Manager:
    """Just enough of a ClientManager for FedAvg.configure_fit."""

    def __init__(self, cids):
        self.proxies = [_Proxy(c) for c in cids]

    def num_available(self):
        return len(self.proxies)

    def all(self):
        return {p.cid: p for p in self.proxies}

    def sample(self, num_clients, min_num_clients=None, criterion=None):
        return self.proxies[:num_clients]


def test_legacy_gives_each_client_a_distinct_fitins_and_reweights_results():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg

    # Prepare
    seen = {}

    class Inner(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            seen["weights"] = sorted(res.num_examples for _, res in results)
            seen["failures"] = failures
            return super().aggregate_fit(server_round, results, failures)

    strategy = LegacyAdaptiveStrategy(Inner(min_fit_clients=3, min_available_clients=3, on_fit_config_fn=lambda r: {"lr": 0.1}),
                                      budget=300, weighting="samples")
    manager = _Manager([11, 12, 13])
    # Execute
    pairs = strategy.configure_fit(1, ndarrays_to_parameters([np.zeros(2)]), manager)
    ok = Status(Code.OK, "")
    results = [(pairs[0][0], FitRes(ok, ndarrays_to_parameters([np.ones(2)]), 1, telemetry(100, 0.1, 0))),
               (pairs[1][0], FitRes(ok, ndarrays_to_parameters([np.ones(2) * 3]), 1, telemetry(50, 0.1, 1))),
               (pairs[2][0], FitRes(ok, ndarrays_to_parameters([np.ones(2) * 9]), 1, telemetry(0, 0.1, 2)))]
    params, _ = strategy.aggregate_fit(1, results, [])
    # Assert
    assert len({id(ins) for _, ins in pairs}) == 3 and len({id(ins.config) for _, ins in pairs}) == 3
    assert sorted(ins.config[keys.QUOTA] for _, ins in pairs) == [100, 100, 100]
    assert all(ins.config["lr"] == 0.1 for _, ins in pairs)
    assert seen["weights"] == [50, 100]  # the zero-sample result is invalid and left out
    np.testing.assert_allclose(parameters_to_ndarrays(params)[0], [(100 + 150) / 150] * 2)
    status = strategy.client_history.set_index("node_id")["status"].to_dict()
    assert status == {11: "ok", 12: "ok", 13: "invalid"}


def test_legacy_failures_are_logged_and_probe_next_round():
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    # Prepare
    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=300)
    manager = _Manager([11, 12, 13])
    pairs = strategy.configure_fit(1, ndarrays_to_parameters([np.zeros(2)]), manager)
    ok = Status(Code.OK, "")
    results = [(pairs[0][0], FitRes(ok, ndarrays_to_parameters([np.ones(2)]), 1, telemetry(100, 0.1, 0)))]
    failures = [(pairs[1][0], FitRes(Status(Code.FIT_NOT_IMPLEMENTED, "boom"), ndarrays_to_parameters([]), 0, {})),
                TimeoutError("round timeout")]
    # Execute
    strategy.aggregate_fit(1, results, failures)
    q2 = {p.cid: ins.config[keys.QUOTA] for p, ins in strategy.configure_fit(2, ndarrays_to_parameters([np.zeros(2)]),
                                                                             manager)}
    # Assert
    status = strategy.client_history.set_index("node_id")["status"].to_dict()
    assert status == {11: "ok", 12: "error", 13: "no-reply"}
    assert q2 == {"11": 298, "12": 1, "13": 1}


# --------------------------------------------------------------------------- invariants
@settings(max_examples=60, deadline=None)
@given(costs=st.lists(st.floats(1e-4, 1e-1), min_size=2, max_size=8),
       failures=st.lists(st.lists(st.booleans(), min_size=8, max_size=8), min_size=1, max_size=5),
       budget=st.integers(20, 5000), policy=st.sampled_from(["equal", "time", "low-energy", "energy"]))
def test_every_round_sums_to_the_budget_and_failed_nodes_only_probe(costs, failures, budget, policy):
    # Prepare
    core = AdaptiveCore(budget, policy, deadband=0.0)
    nodes = [1000 + i for i in range(len(costs))]
    for rnd, failed_mask in enumerate(failures, start=1):
        # Execute
        quotas = core.quotas_for(rnd, nodes)
        core.begin_round(rnd, quotas)
        failed = {n for n, bad in zip(nodes, failed_mask) if bad}
        reports = [ClientReport(n, i, quotas[n], quotas[n], quotas[n] * costs[i], 0.0, 0.0,
                                quotas[n] * costs[i] * 5.0, None, False, 1.0, True)
                   for i, n in enumerate(nodes) if n not in failed]
        probation = set(core._probation)
        core.observe_replies(rnd, reports)
        core.end_round(rnd, reports, {n: "error" for n in failed})
        # Assert
        assert sum(quotas.values()) == budget and min(quotas.values()) >= 1
        if probation and probation != set(nodes):
            assert all(quotas[n] == core.probe_quota() for n in probation)


def test_a_dropped_observation_names_the_partition(caplog, monkeypatch):
    # Prepare: nodes 11 and 12 are partitions 3 and 4; the controller refuses node 12's report
    core = AdaptiveCore(400, "time", deadband=0.0)
    q1 = core.quotas_for(1, [11, 12])
    core.begin_round(1, q1)
    reports = [ClientReport(n, n - 8, q, q, q * 0.01, 0.0, 0.0, None, 10_000, False, 1.0, True) for n, q in q1.items()]
    observe = core.controller.observe

    def refuse_partition_4(key, report):
        if key == 4:
            raise ValueError("refused for the test")
        observe(key, report)

    monkeypatch.setattr(core.controller, "observe", refuse_partition_4)
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        core.observe_replies(1, reports)
    # Assert: the line names the partition the operator configured, then Flower's node id
    dropped = [line for line in sup.adaptive_lines(caplog) if "dropped" in line]
    assert len(dropped) == 1 and "observation of partition 4 (node 12) dropped: refused for the test" in dropped[0]
