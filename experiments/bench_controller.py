"""Benchmark: one round of controller work — every participant observes, then one allocate.

Usage: ``.venv/bin/python -m experiments.bench_controller [--repeats 7] [--quick]``

Prints two tables (wall clock, best of ``--repeats``):

1. steady state: for 100, 1,000, 10,000 and 100,000 participants that all trained last round,
   every report is observed and one ``allocate`` splits the next round, next to the targets in
   docs/controller.md (≤ 1 ms at 1,000, ≤ 100 ms at 100,000);
2. first rounds: a fresh controller sees 20,000 or 40,000 participants for the first time (the
   first round of a cross-device run) — they are registered together, not one by one — and a
   sampled round draws 1 % to 10 % of a 100,000-node population of which a third is new.

Reports are built before timing; their construction is the client's work, not the controller's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from flwr_adaptive.controller import AllocationController, Report

TARGET_MS = {1_000: 1.0, 100_000: 100.0}


def make_reports(rng: np.random.Generator, count: int) -> list[Report]:
    per_sample = rng.lognormal(mean=-6.0, sigma=1.0, size=count)
    return [Report(time_s=float(100 * t), energy_j=None, samples=100) for t in per_sample]


def _observe_then_allocate(ctrl: AllocationController, ids: list, reports: list[Report]) -> tuple[float, float]:
    """Seconds of all the observes, and of observes + one allocate (whose split is checked)."""
    start = time.perf_counter()
    for pid, report in zip(ids, reports):
        ctrl.observe(pid, report)
    observed = time.perf_counter()
    quotas = ctrl.allocate(ids)
    done = time.perf_counter()
    assert sum(quotas.values()) == 100 * len(ids)
    return observed - start, done - start


def _best_ms(timings: list[tuple[float, float]]) -> dict:
    best_observe = min(observe for observe, _ in timings)
    best_total = min(total for _, total in timings)
    return {"observe all (ms)": 1e3 * best_observe, "allocate (ms)": 1e3 * (best_total - best_observe),
            "total (ms)": 1e3 * best_total}


def time_round(participants: int, repeats: int, seed: int = 0) -> dict:
    """Steady state: everyone is known; all observes plus one allocate."""
    rng = np.random.default_rng(seed)
    ids = list(range(participants))
    ctrl = AllocationController(budget=100 * participants, w_time=1.0, deadband=0.0)
    ctrl.allocate(ids)
    timings = [_observe_then_allocate(ctrl, ids, make_reports(rng, participants)) for _ in range(repeats)]
    return {"participants": participants, **_best_ms(timings),
            "target (ms)": TARGET_MS.get(participants, float("nan"))}


def time_first_round(new: int, repeats: int, seed: int = 0) -> dict:
    """A fresh controller: ``new`` unseen participants report, then one allocate registers them."""
    rng = np.random.default_rng(seed)
    ids = [f"node-{k}" for k in range(new)]
    timings = []
    for _ in range(repeats):
        reports = make_reports(rng, new)
        timings.append(_observe_then_allocate(AllocationController(budget=100 * new, w_time=1.0, deadband=0.0),
                                              ids, reports))
    return {"case": f"first round, {new:,} new participants", "sampled": new, **_best_ms(timings)}


def time_sampled_round(population: int, sampled: int, repeats: int, seed: int = 0) -> dict:
    """Partial participation: ``sampled`` of ``population`` nodes, a third of them never seen."""
    rng = np.random.default_rng(seed)
    ctrl = AllocationController(budget=100 * sampled, w_time=1.0, deadband=0.0)
    known = list(range(2 * population // 3))
    for pid, report in zip(known, make_reports(rng, len(known))):
        ctrl.observe(pid, report)
    ctrl.allocate(known[:sampled])
    next_new = population
    timings = []
    for _ in range(repeats):
        fresh = list(range(next_new, next_new + sampled // 3))
        next_new += len(fresh)
        ids = [int(p) for p in rng.choice(len(known), sampled - len(fresh), replace=False)] + fresh
        reports = make_reports(rng, sampled)
        start = time.perf_counter()
        quotas = ctrl.allocate(ids)
        allocated = time.perf_counter()
        for pid, report in zip(ids, reports):
            ctrl.observe(pid, report)  # applied at the next allocate, which the next repeat times
        done = time.perf_counter()
        assert sum(quotas.values()) == 100 * sampled
        timings.append((done - allocated, done - start))
    return {"case": f"{sampled:,} sampled of {population:,}, 1/3 new", "sampled": sampled, **_best_ms(timings)}


def main(argv: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="rounds timed per size; the best is shown")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000, 100_000])
    parser.add_argument("--quick", action="store_true", help="small sizes and 2 repeats (for the test suite)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = [100, 1_000], 2
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

    first = [2_000] if args.quick else [20_000, 40_000]
    sampled = [(10_000, 100)] if args.quick else [(100_000, 1_000), (100_000, 10_000)]
    rows = [time_first_round(n, args.repeats) for n in first]
    rows += [time_sampled_round(pop, k, args.repeats) for pop, k in sampled]
    churn = pd.DataFrame(rows)
    print("\nRounds with participants seen for the first time (wall clock, best of "
          f"{args.repeats}; new ids are registered together at allocate):")
    print(churn.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return table, churn


if __name__ == "__main__":
    main()
