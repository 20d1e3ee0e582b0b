"""End-to-end tests of the Message-API adaptive strategy in Flower's simulation engine.

Three simulations (Ray start-up dominates: ~10 s each):
- the drop-in test: the app ``flwr new`` generates for PyTorch (``tests/apps/pytorchexample``),
  switched to the adaptive strategy by editing only the lines a user edits, run with 6 emulated
  devices on a fake CPU clock so that every expected value is exact;
- the sampled test: the same app with FedAvg sampling half the nodes and a budget above their data;
- the fault test: clients that raise, report NaN time or miss the timeout once.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from flwr_adaptive import keys
from flwr_adaptive.accounting import optimal_makespan

import adaptive_support as sup

pytestmark = pytest.mark.slow

APPS = Path(__file__).parent / "apps"
BUDGET = 1200  # 6 clients: 200 each when split equally
FIRST_CALL_S = 2.0  # the app's one-off start-up (tests/apps/pytorchexample/task.py; checked below)

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


# The mistakes a user makes with those edits.
WITHOUT_DECORATOR = [e for e in EDITS if "@telemetry_train" not in e[2]]
WITHOUT_QUOTA_DATA = [e for e in EDITS if "quota_data(trainloader)" not in e[2]]
DECORATOR_ABOVE = [e if "@telemetry_train" not in e[2] else
                   ("client_app.py", "@app.train()\n",
                    "@telemetry_train(meter=emulated_meter, cpu_clock=CPU_CLOCK, wall_clock=CPU_CLOCK)\n@app.train()\n")
                   for e in EDITS]
# One simulation process for all virtual clients: exactly one call, the first, pays the start-up,
# whatever the machine's core count (more processes would each pay it in whichever round they start).
ONE_PROCESS = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 1}}


def _adapted_app(dst: Path, edits=EDITS) -> dict[str, list[str]]:
    """Copy the generated app to ``dst`` and apply ``edits``; returns each file's diff lines."""
    shutil.copytree(APPS / "pytorchexample", dst / "pytorchexample")
    diffs = {}
    for name in ("server_app.py", "client_app.py"):
        path = dst / "pytorchexample" / name
        before = path.read_text()
        after = before
        for fname, old, new in edits:
            if fname == name:
                assert after.count(old) == 1, f"{name}: the generated line {old!r} is not there once"
                after = after.replace(old, new)
        path.write_text(after)
        diffs[name] = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
                       if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return diffs


@contextlib.contextmanager
def _imported_app(root: Path):
    """Import ``root/pytorchexample``'s server and client modules; forget them afterwards."""
    sys.path.insert(0, str(root))
    try:
        yield lambda name: importlib.import_module(f"pytorchexample.{name}")
    finally:
        sys.path.remove(str(root))
        for mod in [m for m in sys.modules if m == "pytorchexample" or m.startswith("pytorchexample.")]:
            del sys.modules[mod]


def _run_adapted(root: Path, backend_config=ONE_PROCESS):
    """Run the app under ``root`` (3 rounds, 6 emulated devices); returns (strategy, ServerApp)."""
    from flwr.simulation import run_simulation

    with _imported_app(root) as load:
        server, client = load("server_app"), load("client_app")
        assert load("task").FIRST_CALL_S == FIRST_CALL_S
        created = []

        class Recording(server.AdaptiveStrategy):  # the test's only handle on the strategy
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                created.append(self)

            def start(self, grid, initial_arrays, *args, **kwargs):
                self.initial_ndarrays = [a.copy() for a in initial_arrays.to_numpy_ndarrays()]
                self.result = super().start(grid, initial_arrays, *args, **kwargs)
                return self.result

        server.AdaptiveStrategy = Recording
        try:
            with sup.quiet_flower():
                run_simulation(server.app, client.app, num_supernodes=len(sup.SLOWDOWNS),
                               backend_config=backend_config)
        finally:
            server.app.strategy = created[0] if created else None
        return created[0], server.app


@pytest.fixture(scope="module")
def dropin_run(tmp_path_factory):
    """Run the adapted app for 3 rounds on 6 emulated devices (one simulation for all asserts)."""
    root = tmp_path_factory.mktemp("dropin")
    diffs = _adapted_app(root)
    strategy, app = _run_adapted(root)
    yield diffs, strategy, app


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
    # soon as 2 are up); round 2 splits by cost among the nodes observed in round 1 (the others,
    # and the one whose call was the process's first, get the median cost); by round 3 every
    # node has been observed.
    r1 = clients[clients["round"] == 1]
    seen = set(r1[r1["status"] == "ok"]["partition_id"])  # observed (the cold start is not)
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
    # seconds a client measured are its reads (plus the process's one-off start-up on the one
    # call that paid it); the telemetry's samples and device time follow.
    assert (rows["status"] == rows["cold_start"].map({True: "cold-start", False: "ok"})).all()
    assert rows["cold_start"].sum() == 1  # one simulation process: one first call
    assert (rows["cpu_time_s"] == rows["quota"] * sup.COST_S + rows["cold_start"] * FIRST_CALL_S).all()
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


def test_dropin_cold_start_client_is_back_at_its_share_by_round_3(dropin_run):
    # Prepare: the client whose call was the process's first paid FIRST_CALL_S more (15-70x its
    # work); the right split gives each device budget x (1/slowdown) / sum(1/slowdown)
    _, strategy, _ = dropin_run
    rows = strategy.client_history
    cold = rows[rows["cold_start"]]
    inverse = {pid: 1.0 / s for pid, s in enumerate(sup.SLOWDOWNS)}
    right = {pid: BUDGET * w / sum(inverse.values()) for pid, w in inverse.items()}
    r3 = rows[rows["round"] == 3].set_index("partition_id")["quota"]
    # Assert: the cold call was in round 1 and its client is within 5 % of its share in round 3
    assert list(cold["round"]) == [1]
    pid = int(cold["partition_id"].iloc[0])
    assert abs(r3[pid] - right[pid]) <= 0.05 * right[pid]


def test_dropin_aggregated_train_metrics_have_no_averaged_ids(dropin_run):
    # Prepare
    _, strategy, _ = dropin_run
    rows = strategy.client_history
    per_round = strategy.result.train_metrics_clientapp
    # Assert: the user's train_loss as FedAvg averages it; telemetry by name, no ids or flags
    assert sorted(per_round) == [1, 2, 3]
    for rnd, metrics in per_round.items():
        assert "train_loss" in metrics
        assert not set(metrics) & {keys.PARTITION_ID, keys.DATA_SIZE, keys.QUOTA_CAPPED, keys.SAMPLES,
                                   keys.VIRTUAL_CLOCK, keys.IDLE_W, keys.COLD_START}
        kept = rows[rows["round"] == rnd]
        assert metrics[keys.SAMPLES_TOTAL] == kept["samples"].sum()
        assert metrics[keys.TIME_S_MAX] == kept["time_s"].max()
        assert metrics[keys.COLD_START_CLIENTS] == kept["cold_start"].sum()


# --------------------------------------------------------------------------- set-up mistakes
@pytest.mark.parametrize("edits, fix", [
    (WITHOUT_DECORATOR, "@telemetry_train, on the line directly BELOW @app.train()"),
    (WITHOUT_QUOTA_DATA, "trainloader = quota_data(trainloader)"),
], ids=["without-telemetry_train", "without-quota_data"])
def test_dropin_setup_mistake_stops_in_round_1_with_the_fix(tmp_path, edits, fix):
    from flwr_adaptive.strategies.setup_check import SetupError

    # Prepare
    _adapted_app(tmp_path, edits)
    # Execute
    with pytest.raises(SetupError) as err:
        _run_adapted(tmp_path)
    # Assert: stopped in round 1, before any round was recorded, with the fix in the message
    assert str(err.value).startswith("round 1:") and fix in str(err.value)


def test_dropin_telemetry_train_above_app_train_fails_when_the_clientapp_loads(tmp_path):
    # Prepare
    _adapted_app(tmp_path, DECORATOR_ABOVE)
    # Execute / Assert: the ClientApp does not load (Flower answers every node with the error,
    # and the strategy stops round 1 on it: tests/test_dropin_mistakes.py)
    with _imported_app(tmp_path) as load, pytest.raises(TypeError) as err:
        load("client_app")
    assert "@telemetry_train is above @app.train()" in str(err.value)
    assert "    @app.train()\n    @telemetry_train\n    def train(msg, context):" in str(err.value)


# --------------------------------------------------------------------------- partial participation
SAMPLED_BUDGET = 7200  # above the 3 x 2000 samples that half of the 6 nodes hold: capped
SAMPLED_EDITS = [
    ("server_app.py", '    fraction_train: float = context.run_config.get("fraction-train", 1.0)\n',
     '    fraction_train: float = context.run_config.get("fraction-train", 0.5)\n'),
    *[(f, old, new.replace(f"budget={BUDGET}", f"budget={SAMPLED_BUDGET}")) for f, old, new in EDITS],
]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory):
    """The adapted app with FedAvg sampling half the nodes and a budget above their data (cycling off)."""
    root = tmp_path_factory.mktemp("sampled")
    _adapted_app(root, SAMPLED_EDITS)
    records = _Records()
    logging.getLogger("flwr").addHandler(records)
    try:
        strategy, _ = _run_adapted(root)
    finally:
        logging.getLogger("flwr").removeHandler(records)
    return strategy, [line for line in records.lines if line.startswith("[adaptive]")]


def test_sampled_capping_warns_in_every_round_it_happens(sampled_run):
    # Prepare: the rounds in which the histories show capping, either reported by clients (a
    # quota above their local data) or made by the split (every client given all its data,
    # short of the budget), and the rounds of each kind of warning
    strategy, warnings = sampled_run
    hist, clients = strategy.history.set_index("round"), strategy.client_history
    capped_clients = clients[clients["capped"]].groupby("round").size().to_dict()
    all_local_data = {rnd for rnd, rows in clients.groupby("round")
                      if hist.loc[rnd, "quota_sum"] < SAMPLED_BUDGET and (rows["quota"] == rows["data_size"]).all()}
    reported = {int(line.split("round ")[1].split(":")[0]): line for line in warnings
                if "had a quota above their local data" in line}
    split = {int(line.split("round ")[1].split(":")[0]): line for line in warnings
             if "samples of local data of the" in line}
    # Assert: half of the 6 nodes train each round, and capping happens in every round (the
    # budget exceeds the data of any 3 nodes)
    assert list(hist.index) == [1, 2, 3]
    assert (clients.groupby("round").size() <= len(sup.SLOWDOWNS) // 2).all()
    assert set(capped_clients) | all_local_data == {1, 2, 3}
    assert (clients["samples"] == clients["data_size"]).all()  # each trained on all its data, no more
    # Assert: a warning in every round it happened, none in another, with that round's numbers
    assert set(reported) == set(capped_clients)
    for rnd, line in reported.items():
        rows = clients[clients["round"] == rnd]
        assert f"{capped_clients[rnd]} of {len(rows)} clients" in line and f"budget {SAMPLED_BUDGET}" in line
    assert set(split) == all_local_data
    for rnd, line in split.items():
        total = clients[clients["round"] == rnd]["data_size"].sum()
        assert f"budget {SAMPLED_BUDGET} samples exceeds the {total} samples" in line
    assert all("budget_per_node" in line for line in [*reported.values(), *split.values()])


# --------------------------------------------------------------------------- faults
FAULT_TIMEOUT_S = 6.0  # round 3 runs on one Ray actor while the other still sleeps: room for a loaded machine
FAULT_BUDGET = 600


def _fault_apps(strategy):
    """A client app whose partition 0 raises, 1 reports NaN time, 2 misses the timeout in round 2."""
    import time

    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    from flwr_adaptive.clients.telemetry import mark_warm, quota_data, telemetry_train

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
        mark_warm()  # this process has started: its train calls are not cold starts
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
                                budget=FAULT_BUDGET, weighting="samples")
    server, client = _fault_apps(strategy)
    with sup.quiet_flower():
        run_simulation(server, client, num_supernodes=n, backend_config={"client_resources": {"num_cpus": 1}})
    return strategy


def test_faults_every_round_completes_with_the_others(fault_run):
    # Prepare
    hist = fault_run.history.set_index("round")
    rows = fault_run.client_history
    known = rows[rows["partition_id"].notna()]
    # each simulation process's first call is a cold start: its report is aggregated, not observed
    assert set(known[known["status"] == "cold-start"]["round"]) <= {1}
    status = known.pivot(index="round", columns="partition_id", values="status").replace("cold-start", "ok")
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
