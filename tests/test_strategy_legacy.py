"""End-to-end test of the legacy-API adaptive strategy (``flwr.server.strategy``) in simulation.

One simulation: 6 ``NumPyClient``s wrapped in ``TelemetryClient``, their data built in
``client_fn`` with ``quota_data`` (the lazy path: resolved when ``fit`` reads it), emulated devices
on a fake CPU clock, 3 rounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from flwr_adaptive.accounting import optimal_makespan

import adaptive_support as sup

pytestmark = pytest.mark.slow

BUDGET = 1200
N = len(sup.SLOWDOWNS)


def _apps(strategy_box):
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg

    from flwr_adaptive.clients.data import quota_data
    from flwr_adaptive.clients.telemetry import TelemetryClient
    from flwr_adaptive.strategies import LegacyAdaptiveStrategy

    class CountingClient(NumPyClient):
        def __init__(self, data, pid):
            self.data, self.pid = data, pid

        def fit(self, parameters, config):
            total = sum(self.data[i] for i in range(len(self.data)))
            return [np.full(2, total / len(self.data))], len(self.data), {}

    def client_fn(context: Context):
        pid = context.node_config["partition-id"]
        data = quota_data(sup.CountingData(2000, value=float(pid)))  # lazy: fit reads the quota
        client = CountingClient(data, pid)
        return TelemetryClient(client, context, meter=sup.emulated_meter, cpu_clock=sup.CPU_CLOCK,
                               wall_clock=sup.CPU_CLOCK).to_client()

    def server_fn(context: Context):
        inner = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=N, min_available_clients=N,
                       initial_parameters=ndarrays_to_parameters([np.zeros(2)]))
        strategy = LegacyAdaptiveStrategy(inner, budget=BUDGET, deadband=0.0)
        strategy_box.append(strategy)
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=3))

    return ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn)


@pytest.fixture(scope="module")
def legacy_run():
    from flwr.simulation import run_simulation

    box: list = []
    server, client = _apps(box)
    with sup.quiet_flower():
        # one simulation process: exactly one call, the first, is a cold start
        run_simulation(server, client, num_supernodes=N,
                       backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 1}})
    return box[0]


def test_legacy_quotas_differ_sum_to_budget_and_are_read_exactly(legacy_run):
    # Prepare
    rows = legacy_run.client_history
    hist = legacy_run.history
    # Assert: every round sums to the budget; round 3 gives six different quotas (in round 2 the
    # client whose call was the process's first, not observed, has the median cost)
    assert list(hist["round"]) == [1, 2, 3] and (hist["quota_sum"] == BUDGET).all()
    assert list(rows[rows["round"] == 1]["quota"]) == [BUDGET // N] * N  # round 1: equal split
    for rnd in (2, 3):
        quotas = rows[rows["round"] == rnd].set_index("partition_id")["quota"]
        assert quotas.sum() == BUDGET and (rnd == 2 or quotas.is_unique)
    # each client read exactly its quota (fake CPU clock: COST_S per read)
    assert (rows["status"] == rows["cold_start"].map({True: "cold-start", False: "ok"})).all()
    assert list(rows[rows["cold_start"]]["round"]) == [1]
    assert (rows["cpu_time_s"] == rows["quota"] * sup.COST_S).all()
    assert (rows["samples"] == rows["quota"]).all()


def test_legacy_round3_makespan_near_optimal_and_well_below_equal(legacy_run):
    # Prepare
    hist = legacy_run.history.set_index("round")
    optimum = optimal_makespan([sup.COST_S * s for s in sup.SLOWDOWNS], BUDGET)
    equal = BUDGET / N * sup.COST_S * max(sup.SLOWDOWNS)
    # Assert (virtual clock)
    assert hist.loc[1, "makespan_s"] == equal
    assert hist.loc[3, "makespan_s"] <= 1.05 * optimum
    assert hist.loc[3, "makespan_s"] < 0.5 * equal


def test_legacy_state_is_keyed_by_partition_id(legacy_run):
    # Prepare / Execute
    state = legacy_run.state_dict()
    # Assert: node ids change between runs; the controller only knows partition ids
    assert sorted(state["controller"]["ids"]) == list(range(N))
    tau = dict(zip(state["controller"]["ids"], state["controller"]["time_per_sample"]))
    assert tau == {pid: sup.COST_S * s for pid, s in enumerate(sup.SLOWDOWNS)}


def test_legacy_default_is_the_normalised_rule_with_the_equal_splits_weights(legacy_run):
    # The clients take no torch optimizer step (no local-steps): every round uses their samples in
    # place of steps, so an update is rescaled by (mean samples) / its samples; the weights are the
    # equal split's, min(data size 2000, budget 1200 // 6 nodes = 200)
    rows = legacy_run.client_history
    assert legacy_run.weighting == "normalized" and legacy_run.objective == "equal-split"
    assert (rows["agg_weight"] == 200).all()
    for _, rnd in rows.groupby("round"):
        np.testing.assert_allclose(rnd["agg_scale"], rnd["samples"].mean() / rnd["samples"], rtol=1e-12)
