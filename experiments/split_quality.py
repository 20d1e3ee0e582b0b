"""Benchmark: how close the controller's splits get to the exact optimum, per policy.

Usage: ``.venv/bin/python -m experiments.split_quality [--sets 20] [--quick]``

Random heterogeneous device sets (per-sample seconds lognormal with σ = 1, active power
2–65 W, idle power 15–50 % of active) run closed-loop rounds against the controller: it
allocates, every device reports ``time = a + b·n`` (times ``1 + jitter``) and
``energy = active watts × time``, and the split of each round is scored on the devices' true
costs against exact optima from a MILP (``scipy.optimize.milp``, HiGHS) written independently of
the controller's solver. The clock is virtual: costs come from the device model, not from
timing this process. Rows:

- ``energy``: per-sample costs; total round energy (active + idle until the slowest finishes)
  after ``--rounds`` rounds, over the minimum of all splits (and, for ``slack=0.1``, over the
  minimum within that slack).
- ``affine 20%`` / ``affine 40%``: every device also has a fixed per-round cost of 20 % / 40 %
  (× U(0.5, 1.5)) of the optimal per-sample round; makespan over the exact minimum, in round 6
  and the worst of rounds 6.. ``--rounds``.
- ``drift``: one random device becomes 2× slower (time and energy) in round 5; makespan over
  the optimum of the new costs in rounds 6, 7, 8 and the worst of 6.. ``--rounds``.
- The affine and drift rows also give the worst round energy of rounds 6+ over the minimum:
  within a 10 % makespan slack for ``min-energy slack=0.1``, over all splits for the others.
- ``stationary``: 5 % Gaussian jitter on every report, ``--stationary-rounds`` rounds; the
  number of re-splits (rounds whose split differs from the previous one) from round 7 on, and
  the median true makespan ratio over those rounds.

Each cell prints the median and the worst over the device sets.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy.optimize import Bounds, LinearConstraint, milp

from flwr_adaptive.controller import AllocationController, Report

PARTICIPANTS = 10
BUDGET = 6000

#: label -> controller factory (the paper's policies with their exact behaviour, and the new ones)
POLICY_FACTORIES: dict[str, Callable[[], AllocationController]] = {
    "time (paper)": lambda: AllocationController.from_policy("time", BUDGET, paper=True),
    "low-energy (paper)": lambda: AllocationController.from_policy("low-energy", BUDGET, paper=True),
    "energy (paper)": lambda: AllocationController.from_policy("energy", BUDGET, paper=True),
    "time affine+drift+gain": lambda: AllocationController.from_policy(
        "time", BUDGET, cost_model="affine", drift=0.3, deadband_rule="gain", deadband=0.02),
    "min-energy slack=0.1": lambda: AllocationController.from_policy("min-energy", BUDGET),
    "min-energy slack=inf": lambda: AllocationController.from_policy("min-energy", BUDGET, slack=math.inf),
}


@dataclass
class Devices:
    """True costs: ``t_i(n) = a_i + b_i·n`` seconds, active ``power_i`` W, ``idle_i`` W waiting."""

    a: np.ndarray
    b: np.ndarray
    power: np.ndarray
    idle: np.ndarray

    def round(self, n: np.ndarray) -> tuple[float, float]:
        """Makespan and total energy of split ``n`` (every device idles until the slowest ends)."""
        t = self.a + self.b * n
        T = float(t.max())
        return T, float(np.sum(self.power * t) + np.sum(self.idle * (T - t)))

    def scaled(self, i: int, factor: float) -> "Devices":
        a, b = self.a.copy(), self.b.copy()
        a[i] *= factor
        b[i] *= factor
        return Devices(a, b, self.power, self.idle)


def random_devices(rng: np.random.Generator, fixed_share: float = 0.0) -> Devices:
    b = 0.01 * rng.lognormal(0.0, 1.0, PARTICIPANTS)
    power = rng.uniform(2.0, 65.0, PARTICIPANTS)
    idle = power * rng.uniform(0.15, 0.5, PARTICIPANTS)
    optimal_round = BUDGET / np.sum(1.0 / b)  # makespan of the best per-sample split
    a = fixed_share * optimal_round * rng.uniform(0.5, 1.5, PARTICIPANTS)
    return Devices(a, b, power, idle)


# ----------------------------------------------------------------------------- exact optima (MILP)
def _milp(c: np.ndarray, rows: list[tuple[np.ndarray, float, float]], lo: np.ndarray, hi: np.ndarray,
          integrality: np.ndarray) -> np.ndarray:
    A = np.array([r[0] for r in rows])
    res = milp(c, constraints=LinearConstraint(A, [r[1] for r in rows], [r[2] for r in rows]),
               bounds=Bounds(lo, hi), integrality=integrality,
               options={"mip_rel_gap": 1e-9, "presolve": True})
    if not res.success:
        raise RuntimeError(f"MILP failed: {res.message}")
    return res.x


def exact_min_makespan(dev: Devices, min_quota: int = 1) -> float:
    """``min T`` s.t. ``a_i + b_i·n_i ≤ T``, ``Σn = budget``, integer ``n ≥ min_quota``."""
    P = len(dev.a)
    c = np.r_[np.zeros(P), 1.0]
    rows = [(np.r_[np.eye(P)[i] * dev.b[i], -1.0], -np.inf, -dev.a[i]) for i in range(P)]
    rows.append((np.r_[np.ones(P), 0.0], BUDGET, BUDGET))
    x = _milp(c, rows, np.r_[np.full(P, min_quota), 0.0], np.r_[np.full(P, BUDGET), np.inf],
              np.r_[np.ones(P), 0.0])
    n = np.round(x[:P])
    return dev.round(n)[0]


def exact_min_energy(dev: Devices, max_makespan: float = math.inf, min_quota: int = 1) -> float:
    """Least round energy over integer splits with makespan ≤ ``max_makespan``."""
    P = len(dev.a)
    # E = Σ power·(a + b n) + Σ idle·(T − a − b n): linear in (n, T).
    c = np.r_[dev.b * (dev.power - dev.idle), dev.idle.sum()]
    rows = [(np.r_[np.eye(P)[i] * dev.b[i], -1.0], -np.inf, -dev.a[i]) for i in range(P)]
    rows.append((np.r_[np.ones(P), 0.0], BUDGET, BUDGET))
    x = _milp(c, rows, np.r_[np.full(P, min_quota), 0.0], np.r_[np.full(P, BUDGET), max_makespan],
              np.r_[np.ones(P), 0.0])
    return dev.round(np.round(x[:P]))[1]


def min_energies(dev: Devices, T_min: float) -> dict[float, float]:
    """The least round energy with no makespan limit (key inf) and within a 10 % slack (key 0.1)."""
    return {math.inf: exact_min_energy(dev), 0.1: exact_min_energy(dev, 1.1 * T_min * (1 + 1e-9))}


def policy_slack(policy: str) -> float:
    """The slack a policy's energy is judged within: its own for min-energy, none for the others."""
    return 0.1 if policy == "min-energy slack=0.1" else math.inf


# ----------------------------------------------------------------------------- closed loop
def run_rounds(ctrl: AllocationController, schedule: Callable[[int], Devices], rounds: int,
               rng: np.random.Generator, jitter: float = 0.0) -> list[np.ndarray]:
    """Splits of rounds 1..rounds; ``schedule(r)`` gives the true devices of round ``r``."""
    ids = list(range(PARTICIPANTS))
    splits = []
    for r in range(1, rounds + 1):
        dev = schedule(r)
        for i in ids:
            ctrl.set_idle_power(i, float(dev.idle[i]))
        q = ctrl.allocate(ids)
        n = np.array([q[i] for i in ids])
        splits.append(n)
        t = (dev.a + dev.b * n) * (1.0 + jitter * rng.standard_normal(PARTICIPANTS)).clip(0.5)
        for i in ids:
            ctrl.observe(i, Report(time_s=float(t[i]), energy_j=float(dev.power[i] * t[i]), samples=int(n[i])))
    return splits


def measure(sets: int, rounds: int, stationary_rounds: int, policies: list[str], seed: int = 0) -> pd.DataFrame:
    cells: dict[tuple[str, str], list[float]] = {}

    def add(row: str, policy: str, value: float) -> None:
        cells.setdefault((row, policy), []).append(value)

    for s in range(sets):
        rng = np.random.default_rng([seed, s])
        # energy: per-sample devices
        dev = random_devices(rng)
        T_min = exact_min_makespan(dev)
        E_min = exact_min_energy(dev)
        E_min_slack = exact_min_energy(dev, 1.1 * T_min * (1 + 1e-9))
        for p in policies:
            n = run_rounds(POLICY_FACTORIES[p](), lambda r: dev, rounds, rng)[-1]
            T, E = dev.round(n)
            add("energy / min energy", p, E / E_min)
            add("makespan / min makespan", p, T / T_min)
            if p == "min-energy slack=0.1":
                add("energy / min energy within slack 0.1", p, E / E_min_slack)
        # affine fixed costs
        for share in (0.2, 0.4):
            dev = random_devices(rng, fixed_share=share)
            T_min = exact_min_makespan(dev)
            minima = min_energies(dev, T_min)
            for p in policies:
                splits = run_rounds(POLICY_FACTORIES[p](), lambda r: dev, rounds, rng)
                ratios = [dev.round(n)[0] / T_min for n in splits]
                add(f"affine {share:.0%}: makespan round 6", p, ratios[5])
                add(f"affine {share:.0%}: worst makespan rounds 6+", p, max(ratios[5:]))
                add(f"affine {share:.0%}: worst energy / min rounds 6+", p,
                    max(dev.round(n)[1] for n in splits[5:]) / minima[policy_slack(p)])
        # drift: one device 2x slower from round 5 on
        dev = random_devices(rng)
        slow = int(rng.integers(PARTICIPANTS))
        after = dev.scaled(slow, 2.0)
        T_after = exact_min_makespan(after)
        minima = min_energies(after, T_after)
        for p in policies:
            splits = run_rounds(POLICY_FACTORIES[p](), lambda r: dev if r < 5 else after, rounds, rng)
            ratios = [after.round(n)[0] / T_after for n in splits]
            for r in (6, 7, 8):
                add(f"drift: makespan round {r}", p, ratios[r - 1])
            add("drift: worst makespan rounds 6+", p, max(ratios[5:]))
            add("drift: worst energy / min rounds 6+", p,
                max(after.round(n)[1] for n in splits[5:]) / minima[policy_slack(p)])
        # stationary devices, 5 % jitter
        dev = random_devices(rng)
        T_min = exact_min_makespan(dev)
        for p in policies:
            splits = run_rounds(POLICY_FACTORIES[p](), lambda r: dev, stationary_rounds, rng, jitter=0.05)
            resplits = sum(not np.array_equal(splits[r], splits[r - 1]) for r in range(6, len(splits)))
            add("jitter 5%: re-splits from round 7", p, resplits)
            add("jitter 5%: makespan rounds 7+", p, float(np.median([dev.round(n)[0] / T_min for n in splits[6:]])))
    rows = []
    for (row, policy), values in cells.items():
        rows.append({"row": row, "policy": policy, "median": float(np.median(values)),
                     "worst": float(np.max(values)), "sets": len(values)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=20, help="random device sets per row (default 20)")
    parser.add_argument("--rounds", type=int, default=12, help="closed-loop rounds per run (>= 8)")
    parser.add_argument("--stationary-rounds", type=int, default=30, help="rounds of the jitter row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 sets, 8 rounds, 12 jitter rounds (for tests)")
    parser.add_argument("--policies", nargs="+", default=list(POLICY_FACTORIES), choices=list(POLICY_FACTORIES))
    args = parser.parse_args(argv)
    if args.quick:
        args.sets, args.rounds, args.stationary_rounds = 3, 8, 12
    if args.sets < 1 or args.rounds < 8 or args.stationary_rounds < 8:
        parser.error("need --sets >= 1, --rounds >= 8 and --stationary-rounds >= 8")
    table = measure(args.sets, args.rounds, args.stationary_rounds, args.policies, args.seed)
    wide = table.pivot(index="row", columns="policy", values=["median", "worst"])
    wide = wide.reindex(columns=[(stat, p) for p in args.policies for stat in ("median", "worst")])
    wide = wide.reindex(index=list(dict.fromkeys(table["row"])))
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.float_format", "{:.3f}".format):
        print(f"[split_quality] virtual clock; {args.sets} device sets of {PARTICIPANTS} participants, "
              f"budget {BUDGET}; median / worst over sets")
        for p in args.policies:
            print(f"\n== {p}")
            print(table[table.policy == p][["row", "median", "worst"]].to_string(index=False,
                                                                                float_format="{:.3f}".format))
    return table


if __name__ == "__main__":
    main()
