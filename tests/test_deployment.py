"""Flower's Deployment Engine for real: a SuperLink and SuperNodes on this machine, `flwr run`.

``experiments.deployment.LocalDeployment`` starts ``flower-superlink`` and one ``flower-supernode``
per partition on free ports with a generated ``FLWR_HOME``; ``flwr run apps/lite deploy`` runs
the light app (numpy model; each node's cost is emulated by sleeping, ``slowdown`` from its node
config, so the server's wall clock sees genuinely slower nodes). Success is read from
``flwr list --format json`` and from the app's own summary; every process is stopped by PID
(also when an assertion fails) and checked gone.

About 7 minutes for the three tests on 2 cores shared with other jobs (155 s, 175 s and 95 s at a
load average of 12): a SuperNode polls every 3 s and starts one ClientApp process per message, a
SIGKILLed SuperNode is declared unavailable only after two missed 30 s heartbeats, and a killed
ServerApp's run is closed by the SuperLink after its own heartbeat timeout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import psutil
import pytest

from experiments.deployment import LocalDeployment

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
LITE_APP = REPO / "apps" / "lite"
SLOWDOWNS = [1, 1, 4]  # partition 2 is four times slower
RUN_TIMEOUT_S = 900.0


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _stop_and_check(dep: LocalDeployment) -> None:
    procs = dep.processes()
    left = dep.stop()
    assert left == 0 and _alive(procs) == [], f"processes left running: {_alive(procs)}"


def test_deployment_adapts_to_slow_nodes_and_survives_a_supernode_restart(tmp_path):
    # Prepare: 3 SuperNodes, one 4x slower; node 0 is SIGKILLed and restarted once round 2 is done
    out = tmp_path / "out"
    dep = LocalDeployment(3, node_config=lambda i: {"partition-id": i, "num-partitions": 3,
                                                    "slowdown": SLOWDOWNS[i]},
                          workdir=tmp_path / "deploy")
    killed: list[int] = []

    def on_line(line: str) -> None:
        if "[adaptive] round 2 " in line and not killed:
            killed.append(dep.node_pid(0))
            dep.kill_node(0)
            dep.start_node(0, wait=False)

    try:
        dep.start()
        first_id = dep.node_ids(0)[0]
        # Execute
        run = dep.run(LITE_APP, {"policy": "time", "num-server-rounds": 5, "budget": 300,
                                 "sample-cost-s": 0.01, "num-clients": 3, "out-dir": str(out),
                                 "state-dir": str(tmp_path / "state")},
                      timeout_s=RUN_TIMEOUT_S, on_line=on_line)
        log = "".join(run.lines)
        second_id = dep.wait_node(0)
        # Assert: Flower and the app both say the run completed every round
        assert run.run_id is not None, "".join(run.lines[-30:])
        assert dep.run_status(run.run_id) == "finished:completed"
        summary = json.loads((out / "summary-time.json").read_text())
        assert summary["status"] == "finished"
        assert [r["round"] for r in summary["rounds"]] == [0, 1, 2, 3, 4, 5]
        assert summary["rounds"][-1]["mse"] < 0.5 * summary["rounds"][0]["mse"]  # it learned
        clients = pd.read_csv(out / "history-time-clients.csv")
        rounds = pd.read_csv(out / "history-time.csv")
        assert rounds["clock"].eq("wall").all()  # the real meter, not the emulated virtual clock
        # Quotas adapt to the genuinely slower node once it has been measured (round 2 on)
        r2 = clients[(clients["round"] == 2) & (clients["status"] == "ok")].set_index("partition_id")
        assert set(r2.index) == {0, 1, 2}
        # (ideal 1/4; measured 0.262 and 0.265 in two runs on the shared 2-core machine at load ~20:
        # round 1's measured time ratio was 3.82. Margin: a busy round 1 may time the slow node 3x
        # to 5.5x the fast ones, i.e. a ratio of 0.18 to 0.33)
        quota_ratio = r2.loc[2, "quota"] / min(r2.loc[0, "quota"], r2.loc[1, "quota"])
        assert 0.18 < quota_ratio < 0.35, quota_ratio
        assert r2["quota"].sum() == 300
        # The busy times are balanced: the slow node no longer takes ~4x the fast ones' time
        # (ideal 1; measured 1.07 and 1.09; margin ±0.3 s of scheduling noise on ~1.4-s rounds)
        r1 = clients[clients["round"] == 1].set_index("partition_id")
        assert r1.loc[2, "time_s"] > 2.5 * r1.loc[0, "time_s"]
        assert 0.7 < r2.loc[2, "time_s"] / r2.loc[0, "time_s"] < 1.35
        # The SIGKILLed node: Flower's NODE_UNAVAILABLE reply is charged to it (not to the SuperLink),
        # it comes back with a new node id, takes its partition over and continues its estimate
        assert killed and second_id != first_id
        assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
        old = clients[clients["node_id"] == first_id]
        new = clients[clients["node_id"] == second_id]
        assert set(old[old["status"] != "ok"]["status"]) <= {"error", "no-reply"} and (old["status"] != "ok").any()
        assert old[old["status"] == "ok"]["round"].max() <= 3
        assert (new["status"] == "ok").any() and (new["partition_id"] == 0).all()
        assert set(clients[clients["round"] == 5]["partition_id"]) == {0, 1, 2}
        assert f"node {second_id} takes over partition 0 from node {first_id}" in log
        assert "set a distinct partition-id" not in log and "that was not sent a quota" not in log
        state = json.loads((tmp_path / "state" / "adaptive-state.json").read_text())
        controller = state["controller"]
        measured = {i for i, tau in zip(controller["ids"], controller["time_per_sample"]) if tau is not None}
        assert measured == {0, 1, 2}  # one estimate per partition; nothing measured under a node id
        r5 = clients[(clients["round"] == 5) & (clients["status"] == "ok")].set_index("partition_id")
        assert 0.18 < r5.loc[2, "quota"] / min(r5.loc[0, "quota"], r5.loc[1, "quota"]) < 0.35  # measured 0.262, 0.252
    finally:
        _stop_and_check(dep)


def _serverapp(dep: LocalDeployment) -> psutil.Process | None:
    for p in dep.processes():
        try:
            if any("flwr-serverapp" in part for part in p.cmdline()):
                return p
        except psutil.Error:
            pass
    return None


def test_tls_and_supernode_auth_and_a_killed_serverapp_that_resumes_from_its_checkpoint(tmp_path):
    # Prepare: TLS with certificates from scripts/certs.sh, only registered SuperNodes admitted
    out, state = tmp_path / "out", tmp_path / "state"
    config = {"policy": "time", "num-server-rounds": 2, "budget": 100, "sample-cost-s": 0.005,
              "num-clients": 2, "out-dir": str(out), "state-dir": str(state)}
    dep = LocalDeployment(2, workdir=tmp_path / "deploy", supernode_auth=True)
    killed: list[int] = []

    def kill_serverapp_after_round_1(line: str) -> None:
        if "[ROUND 2/2]" in line and not killed:  # round 1 is checkpointed by then
            proc = _serverapp(dep)
            assert proc is not None, "no flwr-serverapp process found"
            killed.append(proc.pid)
            proc.kill()

    try:
        dep.start()
        assert "--insecure" not in dep.superlink_command() and "--enable-supernode-auth" in dep.superlink_command()
        # A SuperNode whose key was never registered is refused (it never gets a node id)
        intruder = dep.add_node({"partition-id": 1, "num-partitions": 2}, start=False, register=False)
        dep.start_node(intruder, wait=False)
        # Execute: a run whose ServerApp is SIGKILLed after round 1, then the same run again
        first = dep.run(LITE_APP, config, timeout_s=RUN_TIMEOUT_S, on_line=kill_serverapp_after_round_1,
                        log_name="flwr-run-1.log")
        died = json.loads((out / "summary-time.json").read_text())
        first_status = dep.run_status(first.run_id)
        second = dep.run(LITE_APP, config, timeout_s=RUN_TIMEOUT_S, log_name="flwr-run-2.log")
        resumed = json.loads((out / "summary-time.json").read_text())
        # Assert: the dead run says so (Flower and the summary, which kept round 1)
        assert killed and first_status == "finished:failed"
        assert died["status"] == "running" and [r["round"] for r in died["rounds"]] == [0, 1]
        # ... and the second run continued at round 2 from the checkpointed model, to the end
        assert dep.run_status(second.run_id) == "finished:completed"
        assert resumed["status"] == "finished" and resumed["resumed_from"] == 1
        assert [r["round"] for r in resumed["rounds"]] == [0, 1, 2]
        assert "resuming the run from its checkpoint" in "".join(second.lines)
        history = pd.read_csv(out / "history-time.csv")
        assert history["round"].tolist() == [1, 2]  # appended per round across both ServerApps
        assert resumed["rounds"][-1]["mse"] < resumed["rounds"][1]["mse"]  # training went on from round 1
        assert dep.node_pid(intruder) is None or "SuperNode ID" not in dep.node_log(intruder)
    finally:
        _stop_and_check(dep)


def test_the_deployment_benchmark_quick_form_prints_the_round_wall_time_table(tmp_path, capsys):
    # Execute: 2 SuperNodes (one 4x slower), 2 rounds, Equal then Time-only
    from experiments import deploy_bench

    code = deploy_bench.main(["--quick", "--out", str(tmp_path / "bench")])
    text = capsys.readouterr().out
    # Assert: both policies ran to the end, one row each, on the wall clock, nothing left running
    assert code == 0, text[-3000:]
    table = pd.read_csv(tmp_path / "bench" / "deploy_bench.csv").set_index("policy")
    assert list(table.index) == ["Equal", "Time-only"] and (table["rounds"] == 1).all()
    assert (table["round wall s"] > table["makespan s"]).all()  # the round includes start-up and polling
    assert ((table["start share"] > 0) & (table["start share"] < 1)).all()
    assert table.loc["Equal", "vs Equal"] == 1.0
    # Time-only's split: the slow node gets ~1/5 of the budget, so its makespan is ~0.4x Equal's
    # (one node 4x slower: 4·B/2 vs 4·B/5; measured 0.44 and 0.47; the margin is scheduling noise)
    assert table.loc["Time-only", "makespan s"] < 0.6 * table.loc["Equal", "makespan s"]
    # "vs Equal" is the round wall time, ClientApp start-up included (its share measured 0.66-0.71
    # here, 8.7-15.5 s from run to run), so in this one-round quick form Time-only's ratio swings
    # either side of 1 (measured 1.48 and 0.66): it is checked to be that ratio, not below 1
    walls = table["round wall s"]
    assert table.loc["Time-only", "vs Equal"] == pytest.approx(walls["Time-only"] / walls["Equal"])
    assert "WALL clock" in text and "processes left running: 0" in text
