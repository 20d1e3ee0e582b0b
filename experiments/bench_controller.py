"""Benchmark: one round of controller work — every participant observes, then one allocate.

Usage: ``.venv/bin/python -m experiments.bench_controller [--rounds 5] [--sizes 1000 10000 100000] [--quick]``

Prints two tables (wall clock, ``time.perf_counter``; the first also in CPU time):

1. every named policy (``from_policy(name)``: what the strategies build) and the paper's
   controller (``AllocationController(budget, w_time=.75, w_energy=.25)``) side by side, at
   1,000, 10,000 and 100,000 participants: the median over ``--rounds`` rounds of one
   ``observe_many`` (every participant's report, vectorised) plus one ``allocate``, after
   warm-up rounds that fill the estimates' windows (so the affine fits, the drift check and the
   gain deadband do their steady-state work). The devices have lognormal fixed and per-sample
   costs and powers, 3 % jitter, and report both time and energy; each round's reports come
   from the quotas the controller gave.
   Next to each policy: its ratio to the paper's controller, the same round in this process's
   CPU time (on a shared machine the wall clock also counts the other processes' turns), and
   whether it meets the targets of docs/controller.md (≤ 1 ms at 1,000, ≤ 100 ms at 100,000);
2. first rounds: a fresh controller sees 20,000 or 40,000 participants for the first time (the
   first round of a cross-device run) — they are registered together, not one by one — and a
   sampled round draws 1 % to 10 % of a 100,000-node population of which a third is new.

Reports (as the columns ``observe_many`` takes) are built before timing; their construction is
the client's work, not the controller's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from flwr_adaptive.controller import POLICIES, AllocationController, Report

TARGET_MS = {1_000: 1.0, 100_000: 100.0}
PAPER = "paper (w_time=.75, w_energy=.25)"
#: What the strategies build by default, then the rest of the named policies.
DEFAULT_POLICIES = ("time", "low-energy", "min-energy")


def make_reports(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(samples, time_s)`` of ``count`` reports of 100 samples, no energy."""
    per_sample = rng.lognormal(mean=-6.0, sigma=1.0, size=count)
    return np.full(count, 100, dtype=np.int64), 100 * per_sample


class Devices:
    """``count`` devices with ``t = a + b·n`` (lognormal a, b), active power lognormal, jitter 3 %."""

    def __init__(self, count: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.b = rng.lognormal(mean=-6.0, sigma=1.0, size=count)
        self.a = self.b * 100 * rng.uniform(0.0, 1.0, size=count)  # a fixed share up to half the round
        self.watts = rng.lognormal(mean=np.log(5.0), sigma=0.5, size=count)

    def reports(self, quotas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(samples, time_s, energy_j)`` of every device for its quota."""
        jitter = 1.0 + 0.03 * self.rng.standard_normal(len(quotas))
        t = (self.a + self.b * quotas) * np.clip(jitter, 0.5, 1.5)
        return quotas, t, t * self.watts


def policy_round_ms(
    make: Callable[[int], AllocationController], participants: int, rounds: int, warmup: int = 8, loop: bool = False
) -> dict:
    """Median ms (wall clock and this process's CPU time) of one observe_many (``loop``: one
    observe per participant, what the bench timed before observe_many) + one allocate over
    ``rounds`` rounds after ``warmup``."""
    devices = Devices(participants)
    ids = list(range(participants))
    ctrl = make(100 * participants)
    quotas = np.fromiter(ctrl.allocate(ids).values(), dtype=np.int64, count=participants)
    observe_s, total_s, cpu_s = [], [], []
    for r in range(warmup + rounds):
        samples, time_s, energy_j = devices.reports(quotas)
        columns = zip(time_s.tolist(), energy_j.tolist(), samples.tolist())
        reports = [Report(t, e, n) for t, e, n in columns] if loop else []
        cpu = time.process_time()
        start = time.perf_counter()
        if loop:
            for pid, report in zip(ids, reports):
                ctrl.observe(pid, report)
        else:
            ctrl.observe_many(ids, samples, time_s, energy_j)
        observed = time.perf_counter()
        split = ctrl.allocate(ids)
        done = time.perf_counter()
        cpu = time.process_time() - cpu
        quotas = np.fromiter(split.values(), dtype=np.int64, count=participants)
        assert int(quotas.sum()) == 100 * participants
        if r >= warmup:
            observe_s.append(observed - start)
            total_s.append(done - start)
            cpu_s.append(cpu)
    observe_ms, total_ms = 1e3 * float(np.median(observe_s)), 1e3 * float(np.median(total_s))
    return {
        "observe": observe_ms,
        "allocate": total_ms - observe_ms,
        "total": total_ms,
        "cpu": 1e3 * float(np.median(cpu_s)),
    }


def policy_table(sizes: list[int], rounds: int, loop: bool = False) -> pd.DataFrame:
    """One row per policy (the paper's controller first): per size the wall-clock ms, its ratio to
    the paper's controller, and the CPU ms of this process (what a loaded machine inflates least)."""
    makers: dict[str, Callable[[int], AllocationController]] = {
        PAPER: lambda budget: AllocationController(budget, w_time=0.75, w_energy=0.25),
    }
    order = list(DEFAULT_POLICIES) + [p for p in POLICIES if p not in DEFAULT_POLICIES]
    for name in order:
        makers[name] = lambda budget, name=name: AllocationController.from_policy(name, budget)
    rows = []
    for n in sizes:
        for label, make in makers.items():
            print(f"[bench] {label:>34} at {n:>7,} participants ...", flush=True)
            rows.append({"policy": label, "participants": n, **policy_round_ms(make, n, rounds, loop=loop)})
    long = pd.DataFrame(rows)
    wall = long.pivot(index="policy", columns="participants", values="total").reindex(list(makers))
    cpu = long.pivot(index="policy", columns="participants", values="cpu").reindex(list(makers))
    table = pd.DataFrame(index=wall.index)
    for n in sizes:
        table[f"{n:,} (ms)"] = wall[n]
        table[f"{n:,} / paper"] = wall[n] / wall.loc[PAPER, n]
        table[f"{n:,} cpu (ms)"] = cpu[n]
    for name, values in (("meets targets", wall), ("meets targets (cpu)", cpu)):
        verdict = []
        for label in table.index:
            checks = [values.loc[label, n] <= t for n, t in TARGET_MS.items() if n in sizes]
            verdict.append("" if not checks else ("yes" if all(checks) else "NO"))
        table[name] = verdict
    table.attrs["long"] = long
    return table


def time_first_round(new: int, repeats: int, seed: int = 0) -> dict:
    """A fresh controller: ``new`` unseen participants report, then one allocate registers them."""
    rng = np.random.default_rng(seed)
    ids = [f"node-{k}" for k in range(new)]
    timings = []
    for _ in range(repeats):
        samples, time_s = make_reports(rng, new)
        ctrl = AllocationController(budget=100 * new, w_time=1.0, deadband=0.0)
        start = time.perf_counter()
        ctrl.observe_many(ids, samples, time_s)
        observed = time.perf_counter()
        quotas = ctrl.allocate(ids)
        done = time.perf_counter()
        assert sum(quotas.values()) == 100 * new
        timings.append((observed - start, done - start))
    return {"case": f"first round, {new:,} new participants", "sampled": new, **_best_ms(timings)}


def _best_ms(timings: list[tuple[float, float]]) -> dict:
    best_observe = min(observe for observe, _ in timings)
    best_total = min(total for _, total in timings)
    return {
        "observe all (ms)": 1e3 * best_observe,
        "allocate (ms)": 1e3 * (best_total - best_observe),
        "total (ms)": 1e3 * best_total,
    }


def time_sampled_round(population: int, sampled: int, repeats: int, seed: int = 0) -> dict:
    """Partial participation: ``sampled`` of ``population`` nodes, a third of them never seen."""
    rng = np.random.default_rng(seed)
    ctrl = AllocationController(budget=100 * sampled, w_time=1.0, deadband=0.0)
    known = list(range(2 * population // 3))
    ctrl.observe_many(known, *make_reports(rng, len(known)))
    ctrl.allocate(known[:sampled])
    next_new = population
    timings = []
    for _ in range(repeats):
        fresh = list(range(next_new, next_new + sampled // 3))
        next_new += len(fresh)
        ids = [int(p) for p in rng.choice(len(known), sampled - len(fresh), replace=False)] + fresh
        samples, time_s = make_reports(rng, sampled)
        start = time.perf_counter()
        quotas = ctrl.allocate(ids)
        allocated = time.perf_counter()
        ctrl.observe_many(ids, samples, time_s)  # applied at the next allocate, which the next repeat times
        done = time.perf_counter()
        assert sum(quotas.values()) == 100 * sampled
        timings.append((done - allocated, done - start))
    return {"case": f"{sampled:,} sampled of {population:,}, 1/3 new", "sampled": sampled, **_best_ms(timings)}


def main(argv: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds timed per policy and size; the median is shown")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument(
        "--observe-loop", action="store_true", help="one observe per participant instead of observe_many (the old way)"
    )
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 participants, 2 rounds (for the tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds = [100, 1_000], 2
    table = policy_table(args.sizes, args.rounds, loop=args.observe_loop)
    observe = "one observe per participant" if args.observe_loop else "one observe_many of every participant"
    print(
        "\nController cost per round (wall clock, time.perf_counter, and this process's CPU time, "
        f"time.process_time; median of {args.rounds} rounds; {observe} + one allocate; ms):"
    )
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))

    repeats = 2 if args.quick else 7
    first = [2_000] if args.quick else [20_000, 40_000]
    sampled = [(10_000, 100)] if args.quick else [(100_000, 1_000), (100_000, 10_000)]
    rows = [time_first_round(n, repeats) for n in first]
    rows += [time_sampled_round(pop, k, repeats) for pop, k in sampled]
    churn = pd.DataFrame(rows)
    print(
        "\nRounds with participants seen for the first time (paper Time-only controller, wall clock, best of "
        f"{repeats}; observe_many; new ids are registered together at allocate):"
    )
    print(churn.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return table, churn


if __name__ == "__main__":
    main()
