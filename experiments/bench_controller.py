"""Benchmark: one round of controller work — every participant observes, then one allocate.

Usage: ``.venv/bin/python -m experiments.bench_controller [--repeats 7]``

Prints a table (wall clock, best of ``--repeats``) for 10, 1,000, 10,000 and 100,000
participants next to the targets in docs/controller.md (≤ 1 ms at 1,000, ≤ 100 ms at 100,000). Reports
are built before timing; their construction is the client's work, not the controller's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from flwr_adaptive.controller import AllocationController, Report

TARGET_MS = {1_000: 1.0, 100_000: 100.0}


def time_round(participants: int, repeats: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    ids = list(range(participants))
    ctrl = AllocationController(budget=100 * participants, w_time=1.0, deadband=0.0)
    ctrl.allocate(ids)
    best_observe = best_total = float("inf")
    for _ in range(repeats):
        per_sample = rng.lognormal(mean=-6.0, sigma=1.0, size=participants)
        reports = [Report(time_s=float(100 * t), energy_j=None, samples=100) for t in per_sample]
        start = time.perf_counter()
        for pid, report in zip(ids, reports):
            ctrl.observe(pid, report)
        observed = time.perf_counter()
        quotas = ctrl.allocate(ids)
        done = time.perf_counter()
        assert sum(quotas.values()) == 100 * participants
        best_observe = min(best_observe, observed - start)
        best_total = min(best_total, done - start)
    return {
        "participants": participants,
        "observe all (ms)": 1e3 * best_observe,
        "allocate (ms)": 1e3 * (best_total - best_observe),
        "total (ms)": 1e3 * best_total,
        "target (ms)": TARGET_MS.get(participants, float("nan")),
    }


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="rounds timed per size; the best is shown")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 10_000, 100_000])
    args = parser.parse_args(argv)
    rows = []
    for n in args.sizes:
        print(f"[bench] {n:>7} participants ...", flush=True)
        rows.append(time_round(n, args.repeats))
    table = pd.DataFrame(rows)
    table["meets target"] = np.where(table["target (ms)"].isna(), "",
                                     np.where(table["total (ms)"] <= table["target (ms)"], "yes", "NO"))
    print("\nController cost per round (wall clock, best of "
          f"{args.repeats}; observe for every participant + one allocate):")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return table


if __name__ == "__main__":
    main()
