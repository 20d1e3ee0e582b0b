"""The three baselines in Flower's simulation engine: one Ray start, one ServerApp running each.

Six emulated devices (``adaptive_support.PROFILES``: slowdowns 1–6) on a fake CPU clock, so
device times are exact: a client that reads ``q`` samples reports ``q × COST_S × slowdown``.
The ServerApp builds each strategy from its policy name (``flwr_adaptive.strategies.registry``, as the Flower
App does from ``policy=``) and runs Static for 3 rounds, Oort-like for 4, FedAsync for 2
round-equivalents, one after the other on the same nodes.
"""

from __future__ import annotations

import numpy as np
import pytest

import adaptive_support as sup

pytestmark = pytest.mark.slow

N = len(sup.SLOWDOWNS)
BUDGET = 600  # 100 per device when split equally
PLAN = (("static", 3), ("oort", 4), ("fedasync", 2))


def _apps(done: dict):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.clients.telemetry import mark_warm, quota_data, telemetry_train
    from flwr_adaptive import keys
    from flwr_adaptive.strategies.registry import build_strategy

    client = ClientApp()

    @client.train()
    @telemetry_train(meter=sup.emulated_meter, cpu_clock=sup.CPU_CLOCK, wall_clock=sup.CPU_CLOCK)
    def train(msg, context):
        pid = context.node_config["partition-id"]
        data = quota_data(sup.CountingData(1000, value=float(pid)))
        value = sum(data[i] for i in range(len(data))) / max(len(data), 1)
        # A model that moves toward the partition id; a loss that differs per device (Oort's utility).
        model = msg.content["arrays"].to_numpy_ndarrays()[0]
        metrics = MetricRecord({"num-examples": len(data), keys.TRAIN_LOSS: 1.0 + 0.1 * pid})
        return Message(RecordDict({"arrays": ArrayRecord([0.5 * model + 0.5 * value]), "metrics": metrics}),
                       reply_to=msg)

    @client.query()
    def warm_up(msg, context):
        mark_warm()  # this process has started: its train calls are not cold starts
        return Message(RecordDict(), reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid, context):
        sup.start_every_node(grid, N)
        for policy, rounds in PLAN:
            strategy = build_strategy(policy, budget=BUDGET, num_nodes=N, seed=1,
                                      strategy=FedAvg(fraction_train=1.0, fraction_evaluate=0.0,
                                                   min_train_nodes=N, min_available_nodes=N))
            result = strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=rounds,
                                    timeout=60.0)
            done[policy] = (strategy, result)

    return server, client


@pytest.fixture(scope="module")
def runs():
    from flwr.simulation import run_simulation

    done: dict = {}
    server, client = _apps(done)
    with sup.quiet_flower():
        run_simulation(server, client, num_supernodes=N, backend_config={"client_resources": {"num_cpus": 1}})
    return done


def test_static_in_flower_keeps_the_profiled_split(runs):
    # Prepare
    strategy, _ = runs["static"]
    rows = strategy.client_history
    split = {r: rows[rows["round"] == r].set_index("partition_id")["quota"].to_dict() for r in (1, 2, 3)}
    # Assert: equal, then ∝ 1/slowdown (device 0 most, device 5 least), unchanged in round 3
    assert set(split[1].values()) == {BUDGET // N}
    assert split[2] == split[3] and sum(split[2].values()) == BUDGET
    assert max(split[2], key=split[2].get) == 0 and min(split[2], key=split[2].get) == N - 1
    assert list(strategy.history["policy"]) == ["static"] * 3


def test_oort_in_flower_trains_round_fraction_equal_shares(runs):
    # Prepare
    strategy, _ = runs["oort"]
    rows, hist = strategy.client_history, strategy.history
    # Assert: round(0.6 · 6) = 4 devices per round, 150 samples each, 2 excluded
    assert list(hist["clients"]) == [4] * 4 and list(hist["excluded"]) == [2] * 4
    assert (rows["quota"] == BUDGET // 4).all() and (rows["samples"] == BUDGET // 4).all()
    counts = strategy.selection_counts()
    assert sum(counts.values()) == 16 and set(counts) <= set(range(N))
    # durations fed to the selector are the clients' virtual-clock times
    slow = {p: s for p, s in enumerate(sup.SLOWDOWNS)}
    for node, arm in strategy.selector.arms.items():
        if arm.count:
            assert arm.duration == (BUDGET // 4) * sup.COST_S * slow[strategy.partition_of(node)]


def test_fedasync_in_flower_mixes_in_virtual_finish_order(runs):
    # Prepare
    strategy, result = runs["fedasync"]
    jobs, hist = strategy.client_history, strategy.history
    # Assert: 2 round-equivalents = 1200 samples in 100-sample jobs, mixed in finish-time order;
    # each device restarts where its previous job finished; times are exact device times.
    assert (jobs["status"] == "ok").all() and jobs["samples"].sum() == 2 * BUDGET
    assert list(jobs["finish_s"]) == sorted(jobs["finish_s"])
    assert (jobs["time_s"] == jobs["quota"] * sup.COST_S * jobs["partition_id"].map(dict(enumerate(sup.SLOWDOWNS)))).all()
    for _, dev in jobs.groupby("partition_id"):
        assert list(dev["start_s"])[1:] == list(dev["finish_s"])[:-1]
    assert hist["makespan_s"].sum() == jobs["finish_s"].max()
    assert list(hist["clock"]) == ["virtual", "virtual"]
    # the fastest device did the most jobs, and late updates from slow devices were stale
    per_device = jobs.groupby("partition_id").size()
    assert per_device.idxmax() == 0 and per_device[0] > per_device[N - 1]
    assert jobs["staleness"].max() > 0
    final = result.arrays.to_numpy_ndarrays()[0]
    assert np.all((final > 0) & (final < N - 1))
