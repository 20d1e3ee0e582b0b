"""End-to-end tests of the Message-API adaptive strategy in Flower's simulation engine.

Two simulations (Ray start-up dominates: ~10 s each):
- the drop-in test: the app ``flwr new`` generates for PyTorch (``tests/apps/pytorchexample``),
  switched to the adaptive strategy by editing only the lines a user edits, run with 6 emulated
  devices on a fake CPU clock so that every expected value is exact;
- the fault test: clients that raise, report NaN time or miss the timeout once.
"""

from __future__ import annotations

import difflib
import importlib
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from flwr_adaptive.accounting import optimal_makespan

import adaptive_support as sup

pytestmark = pytest.mark.slow

APPS = Path(__file__).parent / "apps"
BUDGET = 1200  # 6 clients: 200 each when split equally

# What a user changes in the generated app: (file, line as generated, replacement lines).
EDITS = [
    ("server_app.py", "from flwr.serverapp.strategy import FedAvg\n",
     "from flwr.serverapp.strategy import FedAvg\nfrom flwr_adaptive.strategies import AdaptiveStrategy\n"),
    ("server_app.py", "    strategy = FedAvg(fraction_train=fraction_train)\n",
     f"    strategy = AdaptiveStrategy(FedAvg(fraction_train=fraction_train), budget={BUDGET})\n"),
    ("client_app.py", "from flwr.clientapp import ClientApp\n",
     "from flwr.clientapp import ClientApp\nfrom flwr_adaptive.clients import quota_data, telemetry_train\n"
     "from pytorchexample.task import CPU_CLOCK, emulated_meter  # test instrumentation: fake clock\n"),
    ("client_app.py", "@app.train()\n",
     "@app.train()\n@telemetry_train(meter=emulated_meter, cpu_clock=CPU_CLOCK, wall_clock=CPU_CLOCK)\n"),
    ("client_app.py", "    trainloader, _ = load_data(partition_id, num_partitions, batch_size)\n",
     "    trainloader, _ = load_data(partition_id, num_partitions, batch_size)\n"
     "    trainloader = quota_data(trainloader)\n"),
]


def _adapted_app(dst: Path) -> dict[str, list[str]]:
    """Copy the generated app to ``dst`` and apply EDITS; returns each file's diff lines."""
    shutil.copytree(APPS / "pytorchexample", dst / "pytorchexample")
    diffs = {}
    for name in ("server_app.py", "client_app.py"):
        path = dst / "pytorchexample" / name
        before = path.read_text()
        after = before
        for fname, old, new in EDITS:
            if fname == name:
                assert after.count(old) == 1, f"{name}: the generated line {old!r} is not there once"
                after = after.replace(old, new)
        path.write_text(after)
        diffs[name] = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
                       if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return diffs


@pytest.fixture(scope="module")
def dropin_run(tmp_path_factory):
    """Run the adapted app for 3 rounds on 6 emulated devices (one simulation for all asserts)."""
    from flwr.simulation import run_simulation

    root = tmp_path_factory.mktemp("dropin")
    diffs = _adapted_app(root)
    sys.path.insert(0, str(root))
    try:
        server = importlib.import_module("pytorchexample.server_app")
        client = importlib.import_module("pytorchexample.client_app")
        created = []

        class Recording(server.AdaptiveStrategy):  # the test's only handle on the strategy
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                created.append(self)

            def start(self, grid, initial_arrays, *args, **kwargs):
                self.initial_ndarrays = [a.copy() for a in initial_arrays.to_numpy_ndarrays()]
                return super().start(grid, initial_arrays, *args, **kwargs)

        server.AdaptiveStrategy = Recording
        with sup.quiet_flower():
            run_simulation(server.app, client.app, num_supernodes=len(sup.SLOWDOWNS),
                           backend_config={"client_resources": {"num_cpus": 1}})
        yield diffs, created[0], server.app
    finally:
        sys.path.remove(str(root))
        for mod in [m for m in sys.modules if m == "pytorchexample" or m.startswith("pytorchexample.")]:
            del sys.modules[mod]


def test_dropin_changes_only_the_strategy_line_the_wrap_and_the_data_helper(dropin_run):
    # Prepare / Execute: the fixture applied EDITS to the generated app.
    diffs, _, _ = dropin_run
    # Assert: one line replaced on the server, three lines added on the client, plus imports.
    assert diffs["server_app.py"] == [
        "-    strategy = FedAvg(fraction_train=fraction_train)",
        "+from flwr_adaptive.strategies import AdaptiveStrategy",
        f"+    strategy = AdaptiveStrategy(FedAvg(fraction_train=fraction_train), budget={BUDGET})",
    ] or sorted(diffs["server_app.py"]) == sorted([
        "-    strategy = FedAvg(fraction_train=fraction_train)",
        "+from flwr_adaptive.strategies import AdaptiveStrategy",
        f"+    strategy = AdaptiveStrategy(FedAvg(fraction_train=fraction_train), budget={BUDGET})",
    ])
    added = [line for line in diffs["client_app.py"] if line.startswith("+")]
    assert len(added) == 4 and not [line for line in diffs["client_app.py"] if line.startswith("-")]
    assert any("@telemetry_train" in line for line in added)
    assert any("quota_data(trainloader)" in line for line in added)


def test_dropin_quotas_differ_and_sum_to_the_budget_every_round(dropin_run):
    # Prepare
    _, strategy, _ = dropin_run
    hist, clients = strategy.history, strategy.client_history
    rank = {pid: -s for pid, s in enumerate(sup.SLOWDOWNS)}  # faster device, larger quota
    # Assert
    assert list(hist["round"]) == [1, 2, 3]
    assert (hist["quota_sum"] == BUDGET).all()
    # Round 1 is the equal split over the nodes connected then (the generated FedAvg samples as
    # soon as 2 are up); round 2 splits by cost among the nodes seen in round 1 (the others get
    # the median cost); by round 3 every node has been seen.
    seen = set(clients[clients["round"] == 1]["partition_id"])
    r2 = clients[clients["round"] == 2].set_index("partition_id")["quota"]
    known = r2[r2.index.isin(seen)]
    assert list(known.sort_values().index) == sorted(known.index, key=rank.get)
    r3 = clients[clients["round"] == 3].set_index("partition_id")["quota"]
    assert len(r3) == len(sup.SLOWDOWNS) and r3.sum() == BUDGET
    assert r3.is_unique  # six different devices, six different quotas
    assert list(r3.sort_values().index) == sorted(r3.index, key=rank.get)


def test_dropin_each_client_read_exactly_its_quota(dropin_run):
    # Prepare
    _, strategy, _ = dropin_run
    rows = strategy.client_history
    # Assert: the counting dataset advanced the fake CPU clock by COST_S per read, so the CPU
    # seconds a client measured are its reads; the telemetry's samples and device time follow.
    assert (rows["status"] == "ok").all()
    assert (rows["cpu_time_s"] == rows["quota"] * sup.COST_S).all()
    assert (rows["samples"] == rows["quota"]).all()
    slowdown = rows["partition_id"].map(dict(enumerate(sup.SLOWDOWNS)))
    assert (rows["time_s"] == rows["cpu_time_s"] * slowdown).all()


def test_dropin_round3_makespan_is_near_optimal_and_well_below_equal(dropin_run):
    # Prepare
    _, strategy, _ = dropin_run
    hist = strategy.history.set_index("round")
    optimum = optimal_makespan([sup.COST_S * s for s in sup.SLOWDOWNS], BUDGET)
    equal = BUDGET / len(sup.SLOWDOWNS) * sup.COST_S * max(sup.SLOWDOWNS)
    # Assert (virtual clock)
    assert hist.loc[3, "clock"] == "virtual"
    assert hist.loc[3, "makespan_s"] <= 1.05 * optimum
    assert hist.loc[3, "makespan_s"] < 0.5 * equal
    assert hist.loc[3, "cv_busy"] < 0.05


def test_dropin_logs_one_line_per_round_and_trains_the_model(dropin_run, caplog):
    # Prepare
    _, strategy, app = dropin_run
    # Execute: the history's log line, as the strategy writes it each round
    with caplog.at_level("INFO", logger="flwr"):
        strategy.log_round(strategy.history.iloc[-1].to_dict())
    # Assert
    line = sup.adaptive_lines(caplog)[-1]
    assert "round 3" in line and "makespan" in line and "virtual clock" in line and "CV busy" in line
    assert "quota min/median/max" in line
    final, initial = app.final_arrays.to_numpy_ndarrays(), strategy.initial_ndarrays
    assert [a.shape for a in final] == [a.shape for a in initial]
    assert all(not np.array_equal(f, i) for f, i in zip(final, initial))  # every tensor was trained


# --------------------------------------------------------------------------- faults
FAULT_TIMEOUT_S = 3.0
FAULT_BUDGET = 600


def _fault_apps(strategy):
    """A client app whose partition 0 raises, 1 reports NaN time, 2 misses the timeout in round 2."""
    import time

    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    from flwr_adaptive.clients.telemetry import quota_data, telemetry_train

    def meter(context, server_round):
        if context.node_config["partition-id"] == 1:
            return sup.NaNMeter()
        return sup.emulated_meter(context, server_round)

    client = ClientApp()

    @client.train()
    @telemetry_train(meter=meter, cpu_clock=sup.CPU_CLOCK, wall_clock=sup.CPU_CLOCK)
    def train(msg, context):
        pid = context.node_config["partition-id"]
        rnd = msg.content["config"]["server-round"]
        if pid == 0:
            raise RuntimeError("client 0 always fails")
        if pid == 2 and rnd == 2:
            time.sleep(2 * FAULT_TIMEOUT_S)  # wall time: misses the round's timeout
        data = quota_data(sup.CountingData(1000, value=float(pid)))
        value = sum(data[i] for i in range(len(data))) / max(len(data), 1)
        arrays = ArrayRecord([np.full(3, value)])
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": len(data)})}),
                       reply_to=msg)

    @client.query()
    def warm_up(msg, context):
        return Message(RecordDict(), reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid, context):
        sup.start_every_node(grid, 6)
        strategy.final = strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=4,
                                        timeout=FAULT_TIMEOUT_S)

    return server, client


@pytest.fixture(scope="module")
def fault_run():
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from flwr_adaptive.strategies import AdaptiveStrategy

    n = 6
    strategy = AdaptiveStrategy(FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n),
                                budget=FAULT_BUDGET)
    server, client = _fault_apps(strategy)
    with sup.quiet_flower():
        run_simulation(server, client, num_supernodes=n, backend_config={"client_resources": {"num_cpus": 1}})
    return strategy


def test_faults_every_round_completes_with_the_others(fault_run):
    # Prepare
    hist = fault_run.history.set_index("round")
    rows = fault_run.client_history
    known = rows[rows["partition_id"].notna()]
    status = known.pivot(index="round", columns="partition_id", values="status")
    # Assert: 4 rounds, each aggregated from the good clients
    assert list(hist.index) == [1, 2, 3, 4]
    # client 0 never replied with metrics, so its partition stays unknown: one error per round
    assert list(rows[rows["partition_id"].isna()]["status"]) == ["error"] * 4
    assert list(status[1]) == ["invalid"] * 4
    assert list(status[2]) == ["ok", "no-reply", "probe", "ok"]
    for pid in (3, 4, 5):
        assert list(status[pid]) == ["ok"] * 4
    assert list(hist["clients"]) == [4, 3, 4, 4]
    assert (hist["quota_sum"] == FAULT_BUDGET).all()


def test_faults_bad_shares_are_resplit_and_bad_observations_dropped(fault_run):
    # Prepare
    rows = fault_run.client_history
    estimates = fault_run.controller.estimates()
    # Assert: a node that failed gets the probe quota next round; the rest goes to the others
    r3 = rows[rows["round"] == 3]
    probe = fault_run.probe_quota()
    assert sorted(r3[r3["status"] != "ok"]["quota"]) == [probe] * 3
    assert r3[r3["status"] == "ok"]["quota"].sum() == FAULT_BUDGET - 3 * probe
    # the NaN-time client never reached the controller; the good ones did
    assert 1 not in estimates and {2, 3, 4, 5} <= set(estimates)


def test_faults_updates_of_the_good_clients_are_kept(fault_run):
    # Prepare: every client returns its partition id as its model; FedAvg weights by samples
    rows = fault_run.client_history
    last = rows[(rows["round"] == 4) & rows["status"].isin(["ok", "probe"])]
    # Execute
    final = fault_run.final.arrays.to_numpy_ndarrays()[0]
    # Assert
    expected = sup.weighted_mean(last["partition_id"], last["samples"])
    np.testing.assert_allclose(final, np.full(3, expected))
