"""The deployment targets (docs/deployment.md) on a real SuperLink + SuperNodes: per-round tables against the ideal.

Contract
--------
``python -m experiments.deploy_bench --targets`` (or ``python -m experiments.deploy_targets``)
starts one :class:`~experiments.deployment.LocalDeployment` with 4 SuperNodes at slowdown
1, 1, 2, 4 (``apps/lite``: each sample sleeps ``sample-cost-s × slowdown``), an app that does
**not** call ``mark_warm`` (every message runs in a fresh ClientApp process and reports a cold
start), and runs, one ``flwr run`` each:

1. ``empty``: Equal with ``sample-cost-s = 0``: the per-round overhead of Flower itself (ClientApp
   start-up, the SuperNodes' and the ServerApp's polling, transfers), the median round;
2. ``time``: Time-only, ``--rounds`` rounds; the ideal round is the balanced makespan
   ``budget / Σ 1/(c·k_i)`` (continuous quotas) plus the overhead of run 1;
3. ``time+startup``: the same with a per-message start-up of ``--startup-s × slowdown`` slept
   before the measured call (a slow board imports slowly too); the ideal accounts for it:
   ``(budget + n·s/c) / Σ 1/(c·k_i)`` plus the overhead;
4. ``node-restart``: Time-only; when round ``--fault-round`` ends, partition 3's SuperNode is
   stopped (SIGTERM) and started again (a new node id); the first round after it is compared
   with the round before the fault;
5. ``serverapp-resume``: Time-only with a ``state-dir``; when round ``--fault-round`` ends the
   ``flwr-serverapp`` process is killed, and ``flwr run`` is started again on the same state:
   its first round is compared with the round before the fault;
6. ``superlink-restart``: Time-only with a ``state-dir``, the SuperLink on a ``--database``; when
   round ``--fault-round`` ends the SuperLink is SIGKILLed with its descendants (its SuperExec
   and the running ServerApp: the SuperLink's machine crashed) and started again on the same port
   and database; the SuperNodes reconnect under their node ids, and ``flwr run`` is started
   again on the state. Its first round is compared with the round before the fault and with the
   ideal plus the overhead.

Every table is on the server's **wall clock** (``round_wall_s`` of the app's summary: the
ServerApp's time per round, send → replies → aggregate → evaluate), with the quotas per partition
of each round. Every process is stopped by PID at the end, also on errors.

Cost
----
Each round lasts ≈ the ideal plus the overhead (≥ 20 s with the defaults), round 1 of a run the
equal split (the slowest node's 4× share); about 25–35 minutes of wall clock for all six cases on
2 shared cores (the SuperLink's restart adds ≈ 15 s). No quick form: one fault case alone takes
minutes of deployment, beyond the suite's budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from experiments.compare import REPO, fresh_out_dir
from experiments.deployment import LocalDeployment

LITE_APP = REPO / "apps" / "lite"
SLOWDOWNS = (1.0, 1.0, 2.0, 4.0)
CASES = ("empty", "time", "time+startup", "node-restart", "serverapp-resume", "superlink-restart")


def ideal_round_s(budget: int, cost_s: float, slowdowns: tuple[float, ...], startup_s: float = 0.0) -> float:
    """The balanced makespan: every node finishes at T with ``startup_s·k + cost_s·k·q = T``, ``Σq = budget``."""
    speed = sum(1.0 / (cost_s * k) for k in slowdowns)
    return (budget + len(slowdowns) * startup_s / cost_s) / speed


def _rounds(out: Path, policy: str) -> pd.DataFrame:
    """Per round of one run: server wall seconds and the quota of every partition."""
    summary = json.loads((out / f"summary-{policy}.json").read_text())
    walls = {int(r["round"]): float(r["round_wall_s"]) for r in summary["rounds"] if "round_wall_s" in r}
    clients = pd.read_csv(out / f"history-{policy}-clients.csv")
    quotas = clients.pivot_table(index="round", columns="partition_id", values="quota", aggfunc="first")
    frame = pd.DataFrame({"wall s": pd.Series(walls)})
    for part in quotas.columns:
        frame[f"q{int(part)}"] = quotas[part]
    frame.index.name = "round"
    return frame


def _serverapps(dep: LocalDeployment) -> list[psutil.Process]:
    found = []
    for p in dep.processes():
        try:
            if any("flwr-serverapp" in part for part in p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--budget", type=int, default=600, help="samples per round")
    ap.add_argument("--sample-cost-s", type=float, default=0.1, help="emulated seconds per sample at slowdown 1")
    ap.add_argument("--startup-s", type=float, default=1.0, help="per-message start-up × slowdown (case 3)")
    ap.add_argument("--fault-round", type=int, default=3, help="the fault comes after this round (cases 4, 5)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    ap.add_argument("--out", default=str(REPO / "results" / "deploy_targets"))
    ap.add_argument("--run-timeout", type=float, default=1500.0, help="wall seconds per flwr run")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    out = fresh_out_dir(args.out)
    started = time.perf_counter()
    n = len(SLOWDOWNS)
    ideal = ideal_round_s(args.budget, args.sample_cost_s, SLOWDOWNS)
    ideal_startup = ideal_round_s(args.budget, args.sample_cost_s, SLOWDOWNS, args.startup_s)
    base = {"num-server-rounds": args.rounds, "budget": args.budget, "sample-cost-s": args.sample_cost_s,
            "num-clients": n, "min-nodes": n, "mark-warm": False}
    print(f"== Deployment targets: {n} SuperNodes (slowdown {list(SLOWDOWNS)}), {args.budget} samples/round at "
          f"{args.sample_cost_s} s/sample, an app without mark_warm; ideal round {ideal:.2f} s "
          f"({ideal_startup:.2f} s with a {args.startup_s:g} s x slowdown start-up); WALL clock", flush=True)
    dep = LocalDeployment(n, node_config=lambda i: {"partition-id": i, "num-partitions": n,
                                                    "slowdown": SLOWDOWNS[i]},
                          database="superlink-restart" in cases)
    tables: dict[str, pd.DataFrame] = {}
    overhead = float("nan")
    left = 0

    def flwr_run(name: str, config: dict[str, Any], on_round=None) -> Path:
        case_out = fresh_out_dir(out / name)
        policy = str(config["policy"])

        def on_line(line: str) -> None:
            if "[adaptive] round" in line and "makespan" in line:
                print(f"  [{name}] " + line.split(":", 1)[-1].strip()[:200], flush=True)
                if on_round is not None:
                    on_round(line)

        run = dep.run(LITE_APP, {**base, **config, "out-dir": str(case_out)}, timeout_s=args.run_timeout,
                      log_name=f"flwr-run-{name}.log", on_line=on_line)
        if not (case_out / f"summary-{policy}.json").exists():
            raise SystemExit(f"{name}: no summary; last lines:\n{''.join(run.lines[-30:])}")
        return case_out

    try:
        dep.start()
        print(f"SuperLink on {dep.address}; logs in {dep.workdir}", flush=True)
        if "empty" in cases or any(c != "empty" for c in cases):
            empty = _rounds(flwr_run("empty", {"policy": "equal", "sample-cost-s": 0.0, "num-server-rounds": 3}),
                            "equal")
            overhead = float(empty["wall s"].median())
            tables["empty"] = empty
        for name, startup, target in (("time", 0.0, ideal), ("time+startup", args.startup_s, ideal_startup)):
            if name in cases:
                frame = _rounds(flwr_run(name, {"policy": "time", "startup-s": startup}), "time")
                frame["ideal+overhead s"] = target + overhead
                frame["ratio"] = frame["wall s"] / frame["ideal+overhead s"]
                tables[name] = frame
        if "node-restart" in cases:
            done = threading.Event()

            def restart(line: str) -> None:
                if f"[adaptive] round {args.fault_round} " in line and not done.is_set():
                    done.set()
                    dep.stop_node(n - 1)  # an operator's restart: stopped, then started again
                    dep.start_node(n - 1, wait=False)

            frame = _rounds(flwr_run("node-restart", {"policy": "time"}, restart), "time")
            frame["vs before fault"] = frame["wall s"] / frame.loc[args.fault_round, "wall s"]
            tables["node-restart"] = frame
        if "serverapp-resume" in cases:
            state = out / "serverapp-resume-state"
            killed = threading.Event()

            def kill_serverapp(line: str) -> None:
                if f"[adaptive] round {args.fault_round} " in line and not killed.is_set():
                    killed.set()
                    time.sleep(1.0)  # let the ServerApp save the round's checkpoint
                    for p in _serverapps(dep):
                        p.kill()

            first = _rounds(flwr_run("serverapp-before", {"policy": "time", "state-dir": str(state)},
                                     kill_serverapp), "time")
            second = _rounds(flwr_run("serverapp-resume", {"policy": "time", "state-dir": str(state)}), "time")
            frame = pd.concat([first.loc[: args.fault_round], second.loc[args.fault_round + 1 :]])
            frame["vs before fault"] = frame["wall s"] / frame.loc[args.fault_round, "wall s"]
            tables["serverapp-resume"] = frame
        if "superlink-restart" in cases:
            state = out / "superlink-restart-state"
            crashed, restarted = threading.Event(), threading.Event()
            outage: list[float] = []

            def crash_superlink(line: str) -> None:
                if f"[adaptive] round {args.fault_round} " in line and not crashed.is_set():
                    crashed.set()

                    def restart() -> None:
                        time.sleep(1.0)  # let the ServerApp save the round's checkpoint
                        down = time.perf_counter()
                        dep.restart_superlink()
                        outage.append(time.perf_counter() - down)
                        restarted.set()

                    threading.Thread(target=restart, daemon=True).start()

            first = _rounds(flwr_run("superlink-before", {"policy": "time", "state-dir": str(state)},
                                     crash_superlink), "time")
            if not restarted.wait(300):
                raise SystemExit("superlink-restart: the SuperLink did not come back within 300 s")
            second = _rounds(flwr_run("superlink-restart", {"policy": "time", "state-dir": str(state)}), "time")
            frame = pd.concat([first.loc[: args.fault_round], second.loc[args.fault_round + 1 :]])
            frame["vs before fault"] = frame["wall s"] / frame.loc[args.fault_round, "wall s"]
            frame["ideal+overhead s"] = ideal + overhead
            frame["ratio"] = frame["wall s"] / frame["ideal+overhead s"]
            tables["superlink-restart"] = frame
            print(f"SuperLink down and back (kill, restart on its database, ready): {outage[0]:.1f} s", flush=True)
    finally:
        left = dep.stop()
    pd.set_option("display.width", 200)
    print(f"\nPer-round overhead measured on an empty round: {overhead:.2f} s (median of the 'empty' run)")
    for name, frame in tables.items():
        print(f"\n-- {name} (server-side round, WALL clock; q<i> = quota of partition i)")
        print(frame.to_string(float_format=lambda v: f"{v:.2f}"))
        frame.to_csv(out / f"{name}.csv")
    print(f"\nThis command: {time.perf_counter() - started:.0f} s wall clock; processes left running: {left}; "
          f"results in {out}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
