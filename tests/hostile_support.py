"""Helpers of the hostile-reply tests (``test_hostile_replies.py``, ``test_cost_trust.py``,
``test_hostile_evaluation.py``, ``test_run_faults.py``, ``test_oversized_replies.py``).

A 4-node federation whose replies are fabricated by hand (no simulation engine): node ``n``
holds partition ``PARTS[n]``, costs ``COSTS[partition]`` seconds per sample and returns a constant
model ``partition + 1``; ``HOSTILE`` is the node the tests make misbehave. ``_legacy_round`` plays
one round of the legacy (``ClientProxy``) API the same way.
"""

from __future__ import annotations

import numpy as np

from flwr_adaptive import keys

import adaptive_support as sup
from adaptive_support import FakeGrid


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


def liar_share_in_sampled_rounds(claim, nodes=10, per_round=2, rounds=30, seed=0):
    """The liar's share of each round it is sampled in (after its first), 10 nodes at 1–1.2 ms per sample of
    which Flower samples ``per_round`` a round (a fixed random schedule); ``claim``: the liar's claimed seconds per
    sample (``None``: honest)."""
    import random

    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    ids = [500 + i for i in range(nodes)]
    cost = {n: 0.001 * (1 + 0.2 * i / (nodes - 1)) for i, n in enumerate(ids)}
    liar = ids[nodes // 2]
    rng = random.Random(seed)
    schedule = {r: rng.sample(ids, per_round) for r in range(1, rounds + 1)}

    class Sampled(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            return super().configure_train(server_round, arrays, config, FakeGrid(schedule[server_round]))

    strategy = AdaptiveStrategy(Sampled(fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=1),
                                budget=100 * per_round)
    shares, seen = [], 0
    for rnd in range(1, rounds + 1):
        msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(ids)))
        q = {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in msgs}
        replies = []
        for m in msgs:
            n = m.metadata.dst_node_id
            per = claim if n == liar and claim is not None else cost[n]
            replies.append(reply(m, telemetry(q[n], q[n] * per, ids.index(n)), value=1.0))
        strategy.aggregate_train(rnd, replies)
        if liar in q:
            seen += 1
            if seen > 1:
                shares.append(q[liar] / sum(q.values()))
    return shares
