"""What a round costs on the measured clock, per row: the slow nodes' CPU time per sample.

``python -m experiments.measured_round_cost [--seeds 3] [--rounds 20] [--quick]`` runs Equal + FedAvg,
Time-only + ``weighting="samples"`` and Time-only as a user gets it with private data (normalised,
slow nodes' batches shrunk) on MNIST, the 11-device testbed, Dirichlet(0.3) label skew, for
``rounds`` rounds on the **measured** clock (device time = the training thread's CPU seconds ×
the emulated slowdown × jitter), and prints per row, median over seeds: the mean round (rounds
1 to ``rounds``) × Equal's, the three slowest devices' samples per training call and CPU
milliseconds per trained sample, all devices' CPU milliseconds per sample (from round 5, once the
split has settled), and the round and time (× Equal's) at which the run first reaches the same
seed's Equal final accuracy − 1 point (median over the seeds that reached it; how many did is
printed below the table).

Why: on the modelled clock a device's time is its samples × its cost per sample, so a row's round
is as short as its split makes it; on the measured clock each training call also pays costs per
call and per optimizer step, which the emulated slowdown multiplies and no split removes. The
shrunk batches give the slow devices more steps on their few samples, so they pay more of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

import pandas as pd

from experiments.noniid_figures import ACC_SLACK, first_at_target
from experiments.noniid_rows import MEASURED_ROWS as ROWS  # the non-IID section's measured-clock rows
from experiments.noniid_rows import ROWS as KNOWN_ROWS

SLOWEST = 3  # the devices whose CPU time per sample is shown
FROM_ROUND = 5  # the rounds the costs are read from (the split has settled)


Runs = dict[tuple[str, int], tuple[pd.DataFrame, pd.DataFrame]]  # (row, seed) -> (per-round, per-client rows)


def run_rows(seeds: int, rounds: int, rows: tuple[str, ...] = ROWS) -> Runs:
    """``{(row, seed): (per-round rows, per-client rows)}`` of ``rows`` (``experiments.noniid_rows.ROWS``'
    names, Equal + FedAvg first), ``rounds`` rounds each."""
    from experiments.inprocess import calibrate, run_pma
    from experiments.noniid import spec_of
    from experiments.reproduce_runs import scenario_profiles

    calibrate("mnist")  # warm-up: torch's lazy set-up is not a round's cost
    runs = {}
    for seed in range(seeds):
        profiles = scenario_profiles("testbed", seed)
        for name in rows:
            spec = spec_of(name, "mnist", profiles, seed, 0.3, rounds, 1100, "measured", None, "testbed",
                           kind="measured-round-cost")
            result = run_pma(dataclasses.replace(spec, rounds=rounds, min_rounds=0))
            runs[(name, seed)] = (result.rounds, result.clients)
            print(f"[measured_round_cost] seed {seed} {name}: {len(result.rounds) - 1} rounds in "
                  f"{result.wall_s:.1f} s (wall)", flush=True)
    return runs


def summarise(runs: Runs, slowest: int = SLOWEST, from_round: int = FROM_ROUND) -> pd.DataFrame:
    """One line per (row, seed); a device's slowdown is read as its time over its CPU time."""
    lines = []
    for (name, seed), (rounds, clients) in runs.items():
        equal = runs[("equal-fedavg", seed)][0]
        body, eq_body = rounds[rounds["round"] >= 1], equal[equal["round"] >= 1]
        target = float(eq_body["accuracy"].iloc[-1]) - ACC_SLACK
        hit, eq_hit = (first_at_target(run, "accuracy", target, True) for run in (rounds, equal))
        settled = clients[clients["round"] >= from_round]
        per_node = settled.assign(calls=settled["samples"] > 0).groupby("partition_id")[
            ["samples", "time_s", "cpu_time_s", "calls"]].sum()
        slow = per_node.assign(slowdown=per_node["time_s"] / per_node["cpu_time_s"]).nlargest(slowest, "slowdown")
        lines.append({
            "row": name, "seed": seed,
            "round × Equal": body["makespan_s"].mean() / eq_body["makespan_s"].mean(),
            f"samples / call, {slowest} slowest": slow["samples"].sum() / slow["calls"].sum(),
            f"CPU ms / sample, {slowest} slowest": 1e3 * slow["cpu_time_s"].sum() / slow["samples"].sum(),
            "CPU ms / sample, all": 1e3 * per_node["cpu_time_s"].sum() / per_node["samples"].sum(),
            "round at target": math.nan if hit is None else float(hit["round"]),
            "time to target × Equal": math.nan if hit is None or eq_hit is None
            else float(hit["virtual_time_s"]) / float(eq_hit["virtual_time_s"]),
        })
    return pd.DataFrame(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--rows", default=",".join(ROWS),
                    help="comma-separated rows of experiments.noniid_rows.ROWS (Equal + FedAvg is always run)")
    ap.add_argument("--quick", action="store_true", help="1 seed, 6 rounds (for tests)")
    args = ap.parse_args(argv)
    rows = ("equal-fedavg", *(r for r in dict.fromkeys(args.rows.split(",")) if r and r != "equal-fedavg"))
    unknown = [r for r in rows if r not in KNOWN_ROWS]
    if unknown:
        ap.error(f"--rows: unknown rows {unknown}; choose from experiments.noniid_rows.ROWS, e.g. {','.join(ROWS)}")
    if args.quick:
        args.seeds, args.rounds = 1, FROM_ROUND + 1
    if args.seeds < 1 or args.rounds <= FROM_ROUND:
        ap.error(f"--seeds must be >= 1 and --rounds > {FROM_ROUND}, got {args.seeds} and {args.rounds}")
    lines = summarise(run_rows(args.seeds, args.rounds, rows))
    table = lines.drop(columns="seed").groupby("row", sort=False).median()
    print(f"== MNIST, testbed, Dirichlet(0.3), {args.seeds} seeds × {args.rounds} rounds, MEASURED clock; median "
          f"over seeds (at target: over the seeds that reached it); mean round over rounds 1-{args.rounds}, CPU "
          f"costs from round {FROM_ROUND} ==")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    reached = lines.groupby("row", sort=False)["round at target"].count()
    print("seeds reaching Equal's final accuracy − 1 point within the rounds: "
          + ", ".join(f"{row} {n}/{args.seeds}" for row, n in reached.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
