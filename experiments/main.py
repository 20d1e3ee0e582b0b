"""The main job of ``./run.sh`` (docs/measurements.md): the emulated testbed, then the policies compared through Flower.

Prints the 11-device testbed with shortened citations, then runs the Flower App of this
repository (``apps/pma``) with ``flwr run apps/pma`` once per policy (Equal, Time-only, Low-energy, Min-energy; offline, see
``experiments.compare``) and prints one table: makespan and energy on the VIRTUAL clock (device
time from the profiles), final holdout loss / accuracy, plus the command's wall time and peak
memory. A few minutes on a 2-core machine.

``--virtual`` instead runs the pure virtual-clock controller comparison (no Flower, about a
second): per-round makespan, total energy, CV of busy time and makespan ÷ the exact optimum for
that round's realised per-sample costs, then a summary.

Usage: python -m experiments.main [--rounds 10] [--budget N] [--jitter 0.05] [--seed 0]
       [--virtual [--base-ms 2.0]] [--citations]
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from flwr_adaptive.devices import HOST_7ZIP_SINGLE_MIPS, get_testbed
from experiments.testbed import POLICY_NAMES, VirtualRun, compare, summarise


def testbed_table(profiles) -> pd.DataFrame:
    rows = []
    for p in profiles:
        speed, act, idle = p.source("slowdown"), p.source("active_w"), p.source("idle_w")
        rows.append({
            "device": p.name, "arch": p.arch, "slowdown": p.slowdown, "active_W": p.active_w,
            "idle_W": p.idle_w, "J/host-s": p.slowdown * p.active_w,
            "speed source": speed.short() if speed else "-",
            "active source": act.short(28) if act else "-",
            "idle source": idle.short(28) if idle else "-",
        })
    return pd.DataFrame(rows).set_index("device")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=None,
                    help="samples per round, split among devices (default 2200 with Flower, 6000 with --virtual)")
    ap.add_argument("--virtual", action="store_true",
                    help="the pure virtual-clock controller comparison instead of the Flower runs")
    ap.add_argument("--jitter", type=float, default=0.05, help="lognormal sigma of run-to-run jitter")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-ms", type=float, default=2.0, help="host CPU ms per sample (assumed)")
    ap.add_argument("--citations", action="store_true", help="print the full quote behind every figure")
    args = ap.parse_args(argv)
    if args.budget is None:
        args.budget = 6000 if args.virtual else 2200
    for name in ("rounds", "budget"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.jitter < 0 or args.base_ms <= 0:
        ap.error(f"--jitter must be >= 0 and --base-ms > 0, got {args.jitter} and {args.base_ms}")

    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    profiles = get_testbed(jitter_sigma=args.jitter)
    print("== Emulated testbed: 11 devices (6 Arm, 3 RISC-V, 2 x86) ==")
    print(f"slowdown = host 7-zip single-thread rating ({HOST_7ZIP_SINGLE_MIPS:.0f} MIPS, measured here) / "
          f"device rating (sbc-bench); 'estimate' = no public figure found (reasoning in devices.py)")
    print(testbed_table(profiles).to_string(float_format=lambda v: f"{v:.2f}"))
    if args.citations:
        for p in profiles:
            for c in p.citations:
                tag = "ESTIMATE" if c.estimate else c.url
                print(f"  {p.name:13s} {c.figure:9s} {tag}\n      \"{c.quote}\"")
    if not args.virtual:
        from experiments.compare import main as flower_comparison

        print(flush=True)
        status = flower_comparison(["--rounds", str(args.rounds), "--budget", str(args.budget),
                                    "--seed", str(args.seed), "--jitter", str(args.jitter)])
        if status == 0:
            from experiments.compare import REPO
            from experiments.plots import plot_comparison

            print(f"Plot: {plot_comparison(REPO / 'results' / 'flower')}")
        return status
    run = VirtualRun(rounds=args.rounds, budget=args.budget, base_s=args.base_ms / 1000.0, seed=args.seed)
    print(f"\n== VIRTUAL CLOCK: {args.rounds} rounds, budget {args.budget} samples/round, "
          f"{args.base_ms} host-ms/sample, jitter sigma {args.jitter}, seed {args.seed} ==")
    print("makespan_s, total_j: virtual-clock seconds and joules (idle until the slowest finishes "
          "included); ratio = makespan / exact optimum for the round's realised costs; floor = same "
          "ratio for the best split knowable before the round (true speeds, unknown jitter)")
    rounds = compare(profiles, run, POLICY_NAMES)
    cols = ["round", "makespan_s", "total_j", "cv_busy", "ratio", "floor", "min_quota", "max_quota"]
    for policy, df in rounds.groupby("policy", sort=False):
        print(f"\n-- policy {policy} (virtual clock) --")
        print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\n== Summary (virtual clock; time_s and energy_j summed over all rounds) ==")
    print(summarise(rounds).to_string(float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
