"""Fault matrix: one hostile reply (or a hostile minority / majority) never stops or corrupts a round.

Every case fabricates the replies of a 4-node federation by hand (no simulation engine): round 1
is honest (partitions known), round 2 carries the fault, round 3 must configure normally. Each
case asserts that the round completes with the others, the budget accounting is exact, the
global model is the weighted mean of the honest updates only (never NaN), and one log line names
the offending node.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flwr_adaptive import keys

import adaptive_support as sup
from adaptive_support import FakeGrid

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

NODES = [9001, 9002, 9003, 9004]
PARTS = {9001: 0, 9002: 1, 9003: 2, 9004: 3}
COSTS = {0: 0.001, 1: 0.002, 2: 0.004, 3: 0.004}
BUDGET = 1000
HOSTILE = 9003


def telemetry(samples, time_s, partition, *, energy=-1.0, data_size=10_000):
    return {keys.SAMPLES: samples, keys.TIME_S: time_s, keys.CPU_TIME_S: time_s, keys.WALL_TIME_S: time_s,
            keys.ENERGY_J: energy, keys.DATA_SIZE: data_size, keys.PARTITION_ID: partition,
            keys.QUOTA_CAPPED: 0, keys.IDLE_W: 2.0, keys.VIRTUAL_CLOCK: 1}


def reply(msg, metrics, arrays=None, value=0.0):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    arrays = [np.full(2, float(value))] if arrays is None else arrays
    return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 1, **metrics})}),
                   reply_to=msg)


def honest(msg, quota, node):
    return reply(msg, telemetry(quota, quota * COSTS[PARTS[node]], PARTS[node]), value=PARTS[node] + 1)


def fedavg(n=4):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def configure(strategy, rnd, nodes=NODES):
    from flwr.app import ArrayRecord, ConfigRecord

    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(nodes)))
    return msgs, {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in msgs}


def honest_round(strategy, rnd):
    msgs, q = configure(strategy, rnd)
    strategy.aggregate_train(rnd, [honest(m, q[m.metadata.dst_node_id], m.metadata.dst_node_id) for m in msgs])
    return q


def expected_mean(q, nodes):
    """FedAvg of the honest constant models, weighted by the samples each processed."""
    return sup.weighted_mean([PARTS[n] + 1 for n in nodes], [q[n] for n in nodes])


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
        return [reply(msg, good, arrays=[np.zeros(2, dtype=np.float32)])]
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
def _proxy_class():
    """A legacy ``ClientProxy`` that only carries its cid (the strategies read nothing else)."""
    from flwr.server.client_proxy import ClientProxy

    class Proxy(ClientProxy):
        def get_properties(self, *a, **k): ...
        def get_parameters(self, *a, **k): ...
        def fit(self, *a, **k): ...
        def evaluate(self, *a, **k): ...
        def reconnect(self, *a, **k): ...

    return Proxy


def _legacy_round(strategy, rnd, faults=None):
    from flwr.common import Code, FitRes, Parameters, Status, ndarrays_to_parameters

    Proxy = _proxy_class()

    class Manager:
        def __init__(self):
            self.proxies = [Proxy(str(n)) for n in NODES]

        def num_available(self):
            return len(self.proxies)

        def sample(self, num_clients, min_num_clients=None, criterion=None):
            return list(self.proxies)

        def wait_for(self, *a, **k):
            return True

    params = ndarrays_to_parameters([np.zeros(2)])
    pairs = strategy.configure_fit(rnd, params, Manager())
    results = []
    for proxy, ins in pairs:
        n, quota = int(proxy.cid), ins.config[keys.QUOTA]
        metrics = telemetry(quota, quota * COSTS[PARTS[n]], PARTS[n])
        arrays = [np.full(2, float(PARTS[n] + 1))]
        extra = []
        if faults and n in faults:
            metrics, arrays, extra = faults[n](metrics, arrays)
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), quota, metrics)
        results.append((proxy, res))
        for more in extra:
            results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(more), quota, metrics)))
    quotas = {int(p.cid): ins.config[keys.QUOTA] for p, ins in pairs}
    params, _ = strategy.aggregate_fit(rnd, results, [])
    return quotas, params


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
        "dtype": lambda m, a: (m, [np.zeros(2, dtype=np.float32)], []),
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


# --------------------------------------------------------------------------- clients and run summary
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


# --------------------------------------------------------------------------- cost trust
def _claim(node, time_s, samples=100, virtual=False):
    from flwr_adaptive.strategies.reports import ClientReport

    return ClientReport(node_id=node, partition_id=node, quota=samples, samples=samples, time_s=time_s,
                        cpu_time_s=time_s, wall_time_s=time_s, energy_j=None, data_size=None, capped=False,
                        idle_w=None, virtual_clock=virtual)


def test_server_evidence_times_a_node_by_what_the_server_observed_after_two_rounds(caplog):
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: 5 s of transport/start-up for everyone; node 4 claims 0.2 s but really takes 9 s
    trust = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    claims = [_claim(1, 8.0), _claim(2, 9.0), _claim(3, 8.5), _claim(4, 0.2)]
    observed = {1: 13.0, 2: 14.0, 3: 13.5, 4: 14.0}
    # Execute
    first = trust.believe(1, claims, observed)
    second = trust.believe(2, claims, observed)
    virtual = trust.believe(3, [_claim(n, c.time_s, virtual=True) for n, c in zip(range(1, 5), claims)], observed)
    # Assert: one suspect round is not enough; the second times node 4 by the observation minus the
    # common overhead (median of observed - claimed = 5 s); honest nodes are untouched; no server
    # clock applies to virtual-clock telemetry
    assert first[4].time_s == 0.2
    assert second[4].time_s == pytest.approx(9.0) and [second[n].time_s for n in (1, 2, 3)] == [8.0, 9.0, 8.5]
    assert virtual[4].time_s == 0.2
    assert sum("server observed" in r.getMessage() for r in caplog.records) == 1


def test_server_evidence_does_not_suspect_an_honest_node_that_polling_made_late():
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: four honest nodes compute 1.3 s; the server pulls replies every 3 s, so three are seen
    # at 3 s; node 3 picked its instruction up one SuperNode poll late and missed the pull that followed
    # (8.9 s): 7.2 s beyond the common overhead of 1.7 s, 5.9 s beyond its claim, every round.
    claims = [_claim(n, 1.3) for n in (1, 2, 3, 4)]
    observed = {1: 3.0, 2: 3.0, 3: 8.9, 4: 3.0}
    # Execute
    trust = CostTrust()
    believed = [trust.believe(r, claims, observed) for r in (1, 2, 3)]
    tight = CostTrust(evidence_min_s=1.0)
    too_tight = [tight.believe(r, claims, observed) for r in (1, 2)]
    # Assert: the default (two 3-s polls) believes it; a 1-s margin would time it by the polls
    assert all(b[3].time_s == 1.3 for b in believed)
    assert too_tight[1][3].time_s == pytest.approx(8.9 - 1.7)


def test_plausibility_and_growth_cap_bound_a_liars_claim():
    from flwr_adaptive.strategies.trust import CostTrust

    trust = CostTrust()
    claims = [_claim(1, 0.2), _claim(2, 0.3), _claim(3, 0.25), _claim(4, 1e-9)]
    believed = trust.believe(1, claims, estimate_of=lambda n: {4: 0.0025}.get(n))
    # Assert: 1e-9 s is far below 1/4 of the others' median (0.25 s): taken at that median; a node
    # claiming 0.06 s (just inside 1/4) with an estimate of 0.0025 s/sample may halve at most
    assert believed[4].time_s == pytest.approx(0.25)
    inside = trust.believe(2, claims[:3] + [_claim(4, 0.07)], estimate_of=lambda n: {4: 0.0025}.get(n))
    assert inside[4].time_s == pytest.approx(0.125)
    assert [believed[n].time_s for n in (1, 2, 3)] == [0.2, 0.3, 0.25]
    with pytest.raises(ValueError, match="plausible_range must be a number >= 1"):
        CostTrust(plausible_range=0.5)


def test_server_evidence_needs_the_claim_exceeded_by_evidence_min_s_and_a_group(caplog):
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare (scripts/mutation.sh survivors: the seconds margin computed as a ratio, and a group of
    # min_group + 1 = 3 timed nodes relaxed to 2). Node 4 claims 0.5 s; the server's evidence
    # implies 5 s: 10x its claim but only 4.5 s above it, inside the 7-s margin of two polls.
    trust = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    claims = [_claim(1, 8.0), _claim(2, 9.0), _claim(3, 8.5), _claim(4, 0.5)]
    observed = {1: 13.0, 2: 14.0, 3: 13.5, 4: 10.0}  # common overhead 5 s: node 4 implies 5 s
    # Execute
    inside = [trust.believe(r, claims, observed)[4].time_s for r in (1, 2, 3)]
    pair = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    two = [pair.believe(r, [_claim(1, 8.0), _claim(4, 0.2)], {1: 13.0, 4: 30.0})[4].time_s for r in (1, 2, 3)]
    # Assert: both believed as claimed (two timed nodes: no group to take the overhead from)
    assert inside == [0.5, 0.5, 0.5]
    assert two == [0.2, 0.2, 0.2]
    assert not any("server observed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("trust", [0, 1, None, "yes"])
def test_trust_that_is_not_a_bool_or_a_cost_trust_is_refused(trust):
    from flwr_adaptive.strategies.trust import resolve_trust

    # 0 and 1 are not False and True (scripts/mutation.sh: `trust is False` -> `== False` survived)
    with pytest.raises(ValueError, match="trust must be True"):
        resolve_trust(trust)


@pytest.mark.parametrize("what", ["time", "energy"])
def test_plausible_range_boundary_is_one_quarter_of_the_others_median(what):
    from dataclasses import replace

    from flwr_adaptive.strategies import AdaptiveStrategy

    # Prepare: docs/security.md: a per-sample cost below the other nodes' median divided by
    # plausible_range (4) is not believed. The others claim 0.2, 0.3, 0.25 s per 100 samples
    # (median 0.25): the bound for node 4 is 0.0625 s. Claims 0.8 % either side of it.
    def claims(fourth):
        out = [_claim(1, 0.2), _claim(2, 0.3), _claim(3, 0.25), _claim(4, fourth)]
        if what == "energy":  # the same rule on joules; times all equal so only energy can be held
            out = [replace(c, time_s=0.25, energy_j=c.time_s) for c in out]
        return out

    def believed(fourth):
        trust = AdaptiveStrategy(budget=10).trust  # the strategy's default rules
        got = trust.believe(1, claims(fourth))[4]
        return got.time_s if what == "time" else got.energy_j

    # Execute / Assert: just inside (0.063 s, 1/3.97 of the median) and at the bound: believed as
    # claimed; just outside (0.062 s, 1/4.03): taken at the others' median
    assert believed(0.063) == 0.063
    assert believed(0.0625) == 0.0625
    assert believed(0.062) == pytest.approx(0.25)


def test_the_message_strategy_reads_the_arrival_time_the_superlink_stamps():
    from datetime import datetime, timezone

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    msgs, q = configure(strategy, 1)
    replies = [reply(m, {**telemetry(q[n], 0.5, PARTS[n]), keys.VIRTUAL_CLOCK: 0})
               for m in msgs for n in [m.metadata.dst_node_id]]
    for i, r in enumerate(replies):
        r.metadata.delivered_at = datetime.fromtimestamp(strategy._sent_at + 6.0 + i, tz=timezone.utc).isoformat()
    strategy.aggregate_train(1, replies)
    observed = strategy.observed_seconds([sup_report for sup_report in strategy._believed.values()])
    assert sorted(round(v, 3) for v in observed.values()) == [6.0, 7.0, 8.0, 9.0]


# --------------------------------------------------------------------------- evaluation replies
BAD_EVAL_WEIGHTS = [-3, -1e300, math.nan, math.inf, [1, 2]]


@pytest.mark.parametrize("weight", BAD_EVAL_WEIGHTS)
def test_one_evaluation_reply_with_an_unusable_weight_is_skipped_and_the_others_averaged(weight, caplog):
    # Prepare: 4 evaluation replies; the first weighs `weight` (-3 cancels the others' 3)
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(FedAvg(fraction_evaluate=1.0, min_evaluate_nodes=4, min_available_nodes=4),
                                budget=BUDGET)
    msgs = list(strategy.configure_evaluate(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(NODES)))
    replies = [Message(RecordDict({"metrics": MetricRecord({"num-examples": weight if i == 0 else 1,
                                                            "eval_loss": float(i)})}), reply_to=m)
               for i, m in enumerate(msgs)]
    hostile = msgs[0].metadata.dst_node_id
    # Execute
    metrics = strategy.aggregate_evaluate(1, replies)
    # Assert: the mean of the three others' losses, one line naming the hostile node
    assert metrics["eval_loss"] == pytest.approx(2.0)
    lines = [line for line in sup.adaptive_lines(caplog) if str(hostile) in line and "skipped" in line]
    assert len(lines) == 1 and "num-examples" in lines[0]


@pytest.mark.parametrize("count, loss", [(-3, 1.0), (0, math.nan)])
def test_legacy_evaluation_result_with_an_unusable_count_or_loss_is_skipped(count, loss):
    # Prepare: 4 evaluation results; the first is hostile (-3 cancels the others' 3 examples)
    from flwr.common import Code, EvaluateRes, Status
    from flwr.server.strategy import FedAvg

    from flwr_adaptive.strategies import LegacyAdaptiveStrategy

    Proxy = _proxy_class()
    strategy = LegacyAdaptiveStrategy(FedAvg(), budget=BUDGET)
    results = [(Proxy(str(n)), EvaluateRes(Status(Code.OK, ""), loss if i == 0 else float(i),
                                           count if i == 0 else 1, {}))
               for i, n in enumerate(NODES)]
    # Execute
    loss_aggregated, _ = strategy.aggregate_evaluate(1, results, [])
    # Assert: the mean of the three others' losses
    assert loss_aggregated == pytest.approx(2.0)


def test_evaluation_replies_weighing_nothing_give_no_aggregate():
    # Prepare: every evaluation reply weighs 0 examples (e.g. empty evaluation sets)
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(FedAvg(fraction_evaluate=1.0, min_evaluate_nodes=4, min_available_nodes=4),
                                budget=BUDGET)
    msgs = list(strategy.configure_evaluate(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(NODES)))
    replies = [Message(RecordDict({"metrics": MetricRecord({"num-examples": 0, "eval_loss": 1.0})}), reply_to=m)
               for m in msgs]
    # Execute / Assert: no division by zero out of the inner FedAvg
    assert strategy.aggregate_evaluate(1, replies) is None


def test_the_harmonized_metrics_line_names_each_key_with_its_nodes():
    from flwr_adaptive.strategies.screening import describe_removed

    # scripts/mutation.sh: "node" / "nodes" swapped survived (the operator's log line)
    text = describe_removed({"y": [2], "x": [0, 1], "z": list(range(7))}, [11, 12, 13, 14, 15, 16, 17])
    assert text == "'x' (nodes 11, 12); 'y' (node 13); 'z' (nodes 11, 12, 13, 14, 15…)"


def test_a_fast_majority_is_held_only_up_to_max_group_of_the_nodes(caplog):
    from dataclasses import replace

    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: 9 nodes, 6 claiming ~1/60 of the 3 others' cost. docs/security.md: groups of up to
    # max_group (1/3) of the nodes are judged against the rest; a larger coalition moves the median
    # and is not defended. So the 3 lowest claims are held (at the median of the other 6, 0.51 s)
    # and the other 3 are believed (scripts/mutation.sh: groups of up to max_group + n survived)
    claims = [_claim(i, 1.0 if i <= 3 else 0.01 + 0.001 * i) for i in range(1, 10)]
    # Execute
    believed = CostTrust().believe(1, claims)
    time_lines = [r.getMessage() for r in caplog.records]
    caplog.clear()
    energy = CostTrust().believe(1, [replace(c, time_s=1.0, energy_j=c.time_s) for c in claims])
    energy_lines = [r.getMessage() for r in caplog.records]
    # Assert: the same rule on joules; each log line names its unit
    assert [round(believed[n].time_s, 4) for n in range(1, 10)] == [1.0] * 3 + [0.5095] * 3 + [0.017, 0.018, 0.019]
    assert [round(energy[n].energy_j, 4) for n in range(1, 10)] == [1.0] * 3 + [0.5095] * 3 + [0.017, 0.018, 0.019]
    assert any("claims 0.00014 s per sample" in t for t in time_lines), time_lines
    assert any("claims 0.00014 J per sample" in t for t in energy_lines), energy_lines
