"""Flower's Deployment Engine for real: a SuperLink and SuperNodes on this machine, `flwr run`.

``experiments.deployment.LocalDeployment`` starts ``flower-superlink`` and one ``flower-supernode``
per partition on free ports with a generated ``FLWR_HOME``; ``flwr run apps/lite deploy`` runs
the light app (numpy model; each node's cost is emulated by sleeping, ``slowdown`` from its node
config, so the server's wall clock sees genuinely slower nodes). Success is read from
``flwr list --format json`` and from the app's own summary; every process is stopped by PID
(also when an assertion fails) and checked gone.

About 2–3 minutes on 2 idle cores: a SuperNode polls every 3 s and starts one ClientApp process
per message, and a SIGKILLed SuperNode is declared unavailable only after two missed 30 s
heartbeats.
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
                                 "sample-cost-s": 0.01, "num-clients": 3, "out-dir": str(out)},
                      timeout_s=RUN_TIMEOUT_S, on_line=on_line)
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
        assert r2.loc[2, "quota"] < 0.6 * min(r2.loc[0, "quota"], r2.loc[1, "quota"])
        assert r2["quota"].sum() == 300
        # The busy times are balanced: the slow node no longer takes ~4x the fast ones' time
        r1 = clients[clients["round"] == 1].set_index("partition_id")
        assert r1.loc[2, "time_s"] > 2.5 * r1.loc[0, "time_s"]
        assert r2.loc[2, "time_s"] < 2.0 * r2.loc[0, "time_s"]
        # The SIGKILLed node: a new Flower node id, and the restarted process trains again
        assert killed and second_id != first_id
        assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
        old = clients[clients["node_id"] == first_id]
        new = clients[clients["node_id"] == second_id]
        assert (old["round"] <= 3).all() and (old[old["round"] == 3]["status"] != "ok").all()
        assert (new["status"] == "ok").any() and (new["partition_id"] == 0).all()
        assert set(clients[clients["round"] == 5]["partition_id"]) == {0, 1, 2}
    finally:
        _stop_and_check(dep)
