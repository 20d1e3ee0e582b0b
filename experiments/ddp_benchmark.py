"""DDP benchmark: Equal vs adaptive (round-level controller) vs EMA batch sizing on emulated ranks.

Usage::

    python -m experiments.ddp_benchmark                       # 4 ranks, slowdowns 2,3,4,6
    python -m experiments.ddp_benchmark --devices rpi4,jetson-nano,visionfive2,rpi-zero2w

One local group of spawned gloo ranks (torch on one thread each) trains the same model from the
same start under each policy. Heterogeneity is emulated: a rank with slowdown k sleeps before
every gradient all-reduce until its step's compute has lasted k × its measured CPU compute
(``(k − 1) ×`` the compute when it has a core to itself), so the waits are real. The default slowdowns are all ≥ 2 on purpose: balanced ranks then need
``Σ 1/slowdown_i`` ≈ 1.25 CPU cores, so the sleeps, not contention for this machine's 2 cores,
set the pace (``1,1.5,2,3`` would need 2.5 cores and stretch the fast rank's wall time).
Per round it prints, per policy:

- **compute CV** — coefficient of variation (population std / mean) of the ranks' compute time
  (forward + backward + slowness sleep, waits excluded) on the ranks' compute clock (process CPU
  seconds × slowdown on CPU);
- **sync-wait share** — Σ all-reduce seconds / Σ round seconds over the ranks, wall clock;
- **makespan** — ``Σ_s max_i t_{i,s}``, the per-step synchronized round time, compute clock;
- **round** — the slowest rank's wall seconds for the round (includes the all-reduce transfers,
  optimizer steps and the machine's contention: several ranks share a core);
- **overrun** — wall-clock compute beyond the emulated ``k ×`` compute, as a share of the
  emulated compute (contention the sleeps could not absorb; near 0 means the wall-clock numbers
  reflect the emulated devices, not this machine's load).

The summary averages rounds ``>= --from-round`` (default 3: the controller has seen two rounds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import pandas as pd

from flwr_adaptive.clients.ddp.driver import DDP_POLICIES, RoundDriver, round_summary
from flwr_adaptive.clients.ddp.launch import LocalDDPGroup
from flwr_adaptive.clients.ddp.run import load_task
from flwr_adaptive.clients.ddp.worker import relative_slowdowns
from flwr_adaptive.strategies.registry import PAPER_SUFFIX, parse_run_name

# Not flwr_adaptive.strategies.registry.LABELS: the DDP benchmark compares other policies (EMA batch sizing, no
# Flower baselines) and names the adaptive ones as such.
POLICY_LABELS = {"equal": "Equal", "time": "adaptive (time)", "low-energy": "adaptive (low-energy)",
                 "energy": "adaptive (energy)", "min-energy": "adaptive (min-energy)", "ema": "EMA batch sizing"}
# ``<policy>-paper``: the paper's estimation and deadband (per-sample costs, no drift detection).
POLICY_LABELS.update({p + PAPER_SUFFIX: f"adaptive ({p}, paper)" for p in ("time", "low-energy", "energy")})


def _csv(kind):
    def parse(text: str) -> list:
        try:
            return [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None
    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.ddp_benchmark", description=__doc__.split("\n")[0])
    p.add_argument("--slowdowns", type=_csv(float), default=[2.0, 3.0, 4.0, 6.0],
                   help="emulated per-rank slowness (>= 1), one per rank")
    p.add_argument("--devices", type=_csv(str), default=None,
                   help="testbed device names (flwr_adaptive.devices) instead of --slowdowns; energy = active "
                        "watts × compute time")
    p.add_argument("--policies", type=_csv(str), default=["equal", "time-paper", "time", "min-energy", "ema"],
                   help=f"from {list(POLICY_LABELS)} (<policy>-paper: the paper's estimation and deadband; "
                        "min-energy without --devices has no energy figures: the shortest round)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=int, default=4000, help="samples per round over all ranks")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per round, the same on every rank")
    p.add_argument("--task", default="flwr_adaptive.clients.ddp.toy:cnn_task", help="module:factory returning a WorkerSpec")
    p.add_argument("--deadband", type=float, default=0.02, help="controller deadband")
    p.add_argument("--smoothing", type=float, default=1.0,
                   help="controller EMA weight of the newest round (1: the compute clock here is CPU time, "
                        "steady from round to round; use 0.5 on noisy wall-clock devices)")
    p.add_argument("--ema-smoothing", type=float, default=0.5, help="EMA weight of the EMA baseline")
    p.add_argument("--from-round", type=int, default=3, help="first round in the summary")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write every round's summary here")
    args = p.parse_args(argv)
    bad = [x for x in args.policies if x not in POLICY_LABELS or parse_run_name(x)[0] not in DDP_POLICIES]
    if bad:
        p.error(f"unknown policies {bad}; choose from {list(POLICY_LABELS)}")
    if args.rounds < 1 or not 1 <= args.from_round <= args.rounds:
        p.error(f"need rounds >= 1 and 1 <= --from-round <= rounds, got {args.rounds} and {args.from_round}")
    return args


def ranks_of(args: argparse.Namespace
             ) -> tuple[list[float], list[float | None] | None, list[float] | None, list[str]]:
    """Per-rank slowdowns, active watts, idle watts and labels."""
    if args.devices:
        from flwr_adaptive.devices import TESTBED

        by_name = {d.name: d for d in TESTBED}
        unknown = [n for n in args.devices if n not in by_name]
        if unknown:
            raise SystemExit(f"unknown devices {unknown}; choose from {sorted(by_name)}")
        slowdowns, watts = relative_slowdowns([by_name[n] for n in args.devices])
        return slowdowns, watts, [by_name[n].idle_w for n in args.devices], list(args.devices)
    return list(args.slowdowns), None, None, [f"×{s:g}" for s in args.slowdowns]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    slowdowns, watts, idle, labels = ranks_of(args)
    world = len(slowdowns)
    spec = load_task(args.task)
    print(f"[ddp-benchmark] {world} ranks ({', '.join(f'{l} → slowdown {s:.2f}' for l, s in zip(labels, slowdowns))}); "
          f"budget {args.budget} samples/round over {args.steps} steps; policies {args.policies}", flush=True)
    print("[ddp-benchmark] clocks: compute time, CV and makespan on each rank's compute clock (process CPU s × "
          "emulated slowdown; the slowdown is a real sleep); sync-wait share and round time on the wall clock",
          flush=True)
    t0 = time.perf_counter()
    rows = []
    with LocalDDPGroup(spec, world, backend="gloo") as group:
        print(f"[ddp-benchmark] started {world} ranks in {time.perf_counter() - t0:.1f} s (wall)", flush=True)
        start_state = group.get_state()
        for policy in args.policies:
            group.set_state(start_state)
            group.reset_ema()
            name, paper = parse_run_name(policy)
            extra = {"paper": True} if paper else {}
            driver = RoundDriver(world, args.budget, args.steps, policy=name, slowdowns=slowdowns,
                                 active_watts=watts, idle_watts=idle, seed=args.seed,
                                 ema_smoothing=args.ema_smoothing, deadband=args.deadband,
                                 smoothing=args.smoothing, **extra)
            for r in range(1, args.rounds + 1):
                plan = driver.plan()
                telemetry = group.run_round(plan)
                driver.observe(telemetry)
                s = round_summary(telemetry)
                energy = [t.energy_j for t in telemetry]
                rows.append({"policy": POLICY_LABELS[policy], "round": r, "quotas": s["quotas"],
                             "compute CV": s["compute_cv"], "sync-wait share": s["wait_share"],
                             "makespan s": s["makespan_s"], "round s (wall)": s["wall_s"],
                             "overrun": s["overrun_share"],
                             "active energy J": None if None in energy else float(sum(energy)),
                             "clock": s["clock"], "time_s": s["time_s"]})
                print(f"[ddp-benchmark] {POLICY_LABELS[policy]:<18} round {r}: samples {s['quotas']}  compute CV "
                      f"{s['compute_cv']:.3f}  sync-wait {s['wait_share']:.1%}  makespan {s['makespan_s']:.3f} s "
                      f"({s['clock']} clock)  round {s['wall_s']:.3f} s (wall)", flush=True)
    table = pd.DataFrame(rows)
    late = table[table["round"] >= args.from_round]
    summary = late.groupby("policy", sort=False).agg(
        {"compute CV": "mean", "sync-wait share": "mean", "makespan s": "mean", "round s (wall)": "mean",
         "overrun": "mean"})
    if late["active energy J"].notna().all():
        summary["active energy J"] = late.groupby("policy", sort=False)["active energy J"].mean()
    if "Equal" in summary.index:
        summary["makespan vs Equal"] = summary["makespan s"] / summary.loc["Equal", "makespan s"]
    clock = rows[0]["clock"] if rows else "?"
    print(f"\nDDP benchmark, {world} ranks, rounds {args.from_round}–{args.rounds} (mean). compute CV and makespan "
          f"Σ_s max_i t_i,s: {clock} clock × emulated slowdown; sync-wait share and round time: wall clock "
          f"(emulated slowness is a real sleep). Total {time.perf_counter() - t0:.0f} s (wall).")
    print(summary.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "slowdowns": slowdowns, "rounds": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
