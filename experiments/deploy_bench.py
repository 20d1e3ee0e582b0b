"""Server-side round wall time per policy on a real local deployment (Flower's Deployment Engine).

Contract
--------
``python -m experiments.deploy_bench`` starts one :class:`~experiments.deployment.LocalDeployment`
(a SuperLink and ``--nodes`` SuperNodes on this machine; node ``i`` gets ``slowdown=k_i`` in its
node config, so ``apps/lite`` sleeps ``k_i × sample-cost-s`` per sample: genuinely slower nodes
on every clock) and runs ``flwr run apps/lite deploy`` once per policy (default Equal, then
Time-only) on it. It prints one table, all on the **wall clock** of this machine:

- ``round wall s`` — the ServerApp's own time per round (send, wait for every reply, aggregate,
  evaluate), mean over rounds 2..R (round 1 is the equal split under every policy);
- ``makespan s`` — the slowest node's measured training call (what the controller balances);
- ``ClientApp start s`` — seconds from a ClientApp process's creation to its training call
  (interpreter, imports, app loading; one process per message; mean per round, weighted by
  samples as Flower's FedAvg averages metrics);
- ``start share`` — that start-up as a share of the round wall time; the rest of the gap
  between the round and the makespan is the SuperNodes' polling (every 3 s when idle) and the
  transfers;
- ``vs Equal`` — the ratio of round wall times in this run.

``--quick`` runs 2 nodes × 2 rounds (the suite's smoke test). ``--targets`` runs
:mod:`experiments.deploy_targets` instead (4 nodes at slowdown 1, 1, 2, 4, per-round tables
against the ideal balanced round plus the measured overhead, restarts; its own options follow). Every process is stopped by PID at
the end, also on errors. Results (summaries, history CSVs) go to ``--out``.

Cost
----
Start-up ≈ 10–20 s, then per round ≈ the slowest node's training + 3–8 s (ClientApp start and
polling) on 2 loaded cores: about 2–4 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.compare import REPO, fresh_out_dir
from experiments.deployment import LocalDeployment
from flwr_adaptive.strategies.registry import LABELS

LITE_APP = REPO / "apps" / "lite"


def policy_row(policy: str, summary: dict[str, Any], clients: pd.DataFrame) -> dict[str, Any]:
    """The table's row of one run (rounds 2..R; see the module docstring)."""
    rounds = [r for r in summary["rounds"] if r["round"] >= 2]
    wall = sum(r["round_wall_s"] for r in rounds) / len(rounds)
    ok = clients[(clients["round"] >= 2) & (clients["status"] == "ok")]
    makespan = ok.groupby("round")["time_s"].max().mean()
    starts = [m["clientapp-start-s"] for r, m in summary.get("train_metrics", {}).items()
              if int(r) >= 2 and "clientapp-start-s" in m]
    start = sum(starts) / len(starts) if starts else float("nan")
    return {"policy": LABELS.get(policy, policy), "rounds": len(rounds), "round wall s": wall,
            "makespan s": makespan, "ClientApp start s": start, "start share": start / wall}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--targets" in argv:  # the per-round targets against the ideal (experiments.deploy_targets)
        from experiments import deploy_targets

        return deploy_targets.main([a for a in argv if a != "--targets"])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3, help="SuperNodes (partition-id 0..n-1)")
    ap.add_argument("--slowdown", type=float, nargs="*", default=None,
                    help="node-config slowdown per node (default: 1 ... 1 4: the last node 4x slower)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--budget", type=int, default=300, help="samples per round")
    ap.add_argument("--sample-cost-s", type=float, default=0.02, help="emulated seconds per sample at slowdown 1")
    ap.add_argument("--policies", default="equal,time")
    ap.add_argument("--out", default=str(REPO / "results" / "deploy_bench"))
    ap.add_argument("--run-timeout", type=float, default=1200.0, help="wall seconds per flwr run")
    ap.add_argument("--quick", action="store_true", help="2 nodes, 2 rounds, smaller budget (a smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.rounds, args.budget, args.sample_cost_s = 2, 2, 100, 0.01
    slowdowns = args.slowdown or [1.0] * (args.nodes - 1) + [4.0]
    if len(slowdowns) != args.nodes or any(k < 1 for k in slowdowns):
        ap.error(f"--slowdown needs {args.nodes} values >= 1, got {slowdowns}")
    if args.rounds < 2 or args.nodes < 1 or args.budget < args.nodes:
        ap.error("need --rounds >= 2, --nodes >= 1 and --budget >= --nodes")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    out = fresh_out_dir(args.out)
    started = time.perf_counter()
    rows = []
    dep = LocalDeployment(args.nodes, node_config=lambda i: {"partition-id": i, "num-partitions": args.nodes,
                                                             "slowdown": slowdowns[i]})
    print(f"== Deployment benchmark: {args.nodes} SuperNodes (slowdown {slowdowns}), {args.rounds} rounds of "
          f"{args.budget} samples at {args.sample_cost_s} s/sample, policies {', '.join(policies)}", flush=True)
    left = 0
    try:
        dep.start()
        print(f"SuperLink (pid {dep.superlink.pid if dep.superlink else '?'}) on {dep.address}; "
              f"logs in {dep.workdir}", flush=True)
        for policy in policies:
            policy_out = fresh_out_dir(out / policy)  # the history CSVs are appended per round
            config = {"policy": policy, "num-server-rounds": args.rounds, "budget": args.budget,
                      "sample-cost-s": args.sample_cost_s, "num-clients": args.nodes, "out-dir": str(policy_out)}
            run = dep.run(LITE_APP, config, timeout_s=args.run_timeout, log_name=f"flwr-run-{policy}.log",
                          on_line=lambda line: print("  " + line.split(":", 1)[-1].strip(), flush=True)
                          if "[adaptive] round" in line else None)
            status = dep.run_status(run.run_id) if run.run_id is not None else "not started"
            summary_path = policy_out / f"summary-{policy}.json"
            summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"status": "missing"}
            if status != "finished:completed" or summary.get("status") != "finished":
                tail = "".join(run.lines[-30:])
                raise SystemExit(f"the {policy} run did not finish (flwr list: {status}, summary: "
                                 f"{summary.get('status')}); last lines:\n{tail}")
            clients = pd.read_csv(policy_out / f"history-{policy}-clients.csv")
            rows.append(policy_row(policy, summary, clients))
    finally:
        left = dep.stop()
    table = pd.DataFrame(rows).set_index("policy")
    if "Equal" in table.index:
        table["vs Equal"] = table["round wall s"] / table.loc["Equal", "round wall s"]
    print()
    print(f"Server-side round wall time per policy (WALL clock, rounds 2..{args.rounds}, means; "
          f"Flower Deployment Engine on this machine):")
    print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    table.to_csv(out / "deploy_bench.csv")
    print(f"\nThis command: {time.perf_counter() - started:.0f} s wall clock; processes left running: {left}; "
          f"results in {out}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
