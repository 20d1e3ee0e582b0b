"""Time-only's early rounds on the virtual-clock testbed, over seeds: the estimation vs the paper's.

``python -m experiments.early_rounds [--seeds 40] [--quick]`` runs ``experiments.testbed``'s
closed loop (the 11-board testbed, 5 % jitter, 10 rounds, budget 6,000: ``./run.sh --virtual``)
for seeds 0..N-1 with ``time`` (the default estimation) and ``time-paper`` (the paper's), and
prints, per policy, the mean and worst over seeds of the makespan ratio (makespan / exact
optimum of the round's realised costs; **virtual clock**) in round 3, round 4 and rounds 3–10,
next to the floor (the best split knowable with the true speeds but not the round's jitter).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from experiments.testbed import VirtualRun, simulate
from flwr_adaptive.devices import get_testbed

POLICIES = ("time", "time-paper")


def measure(seeds: int, policies: tuple[str, ...] = POLICIES) -> pd.DataFrame:
    """One row per (policy, seed): ratios in round 3, round 4, mean of rounds 3+, mean floor of rounds 3+."""
    profiles = get_testbed(jitter_sigma=0.05)
    rows = []
    for seed in range(seeds):
        for policy in policies:
            df = simulate(policy, profiles, VirtualRun(seed=seed)).set_index("round")
            rows.append({"policy": policy, "seed": seed, "round 3": df.loc[3, "ratio"], "round 4": df.loc[4, "ratio"],
                         "rounds 3+": df.loc[3:, "ratio"].mean(), "floor, rounds 3+": df.loc[3:, "floor"].mean()})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="3 seeds (for tests)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds = 3
    if args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    table = measure(args.seeds).drop(columns="seed").groupby("policy", sort=False).agg(["mean", "max"])
    print(f"== Time-only's early rounds, {args.seeds} seeds: makespan / exact optimum (VIRTUAL clock; mean, worst) ==")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
