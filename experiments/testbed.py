"""Policies compared on the emulated testbed, on the virtual clock (no training, no Flower).

Each round every device's per-sample cost is ``base_s × slowdown_at(device, round) × jitter``
(the virtual clock of :mod:`flwr_adaptive.devices`); the controller's split decides how many
samples each device processes; :func:`~flwr_adaptive.accounting.account_round` prices the round;
the devices report device time and active energy back to the controller as a
:class:`~flwr_adaptive.controller.Report`. The jitter draws depend only on (seed, round,
device), so every policy faces the same realised costs.

Two yardsticks per round, both computed without the controller:

- ``optimal_s``: the exact integer optimum for the round's *realised* per-sample costs
  (:func:`~flwr_adaptive.accounting.optimal_makespan`) — it knows this round's jitter.
- ``floor``: the makespan of the optimal split for the *expected* costs (slowdown, drift
  included, jitter not), divided by ``optimal_s`` — what a controller that knew every device's
  true speed but not this round's draw would get. No controller can expect to beat it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from flwr_adaptive.controller import AllocationController, Report
from flwr_adaptive.accounting import account_round, optimal_makespan, optimal_split
from flwr_adaptive.devices import DeviceProfile, device_time, slowdown_at
from flwr_adaptive.strategies.registry import parse_run_name

# ``time-paper``: Time-only with the paper's estimation and deadband (``from_policy(..., paper=True)``).
POLICY_NAMES = ("equal", "time-paper", "time", "low-energy", "min-energy")


@dataclass(frozen=True)
class VirtualRun:
    """Settings of one virtual-clock comparison (defaults are those of ``./run.sh --virtual``)."""

    rounds: int = 10
    budget: int = 6000
    base_s: float = 0.002  # host CPU seconds per sample (an assumed small-CNN step on this host)
    seed: int = 0
    smoothing: float = 0.5
    deadband: float = 0.05


def realised_costs(profiles: Sequence[DeviceProfile], round: int, base_s: float, seed: int) -> np.ndarray:
    """Per-sample device seconds of every device in ``round`` (same draws for every policy)."""
    return np.array([
        device_time(p, base_s, round, np.random.default_rng([seed, round, i]))
        for i, p in enumerate(profiles)
    ])


def simulate(policy: str, profiles: Sequence[DeviceProfile], run: VirtualRun = VirtualRun()) -> pd.DataFrame:
    """One policy for ``run.rounds`` rounds; one row per round (virtual clock).

    Columns: ``policy, round, makespan_s, optimal_s, ratio, floor, total_j, active_j, idle_j,
    cv_busy, min_quota, max_quota``.
    """
    ids = [p.name for p in profiles]
    if len(set(ids)) != len(ids):
        raise ValueError(f"device names must be unique, got {ids}")
    name, paper = parse_run_name(policy)
    ctrl = AllocationController.from_policy(name, run.budget, paper=paper, smoothing=run.smoothing,
                                            deadband=run.deadband)
    for p in profiles:  # min-energy prices waiting at each device's idle draw
        ctrl.set_idle_power(p.name, p.idle_w)
    by_name = dict(zip(ids, profiles))
    rows = []
    for rnd in range(1, run.rounds + 1):
        quotas = ctrl.allocate(ids)
        costs = realised_costs(profiles, rnd, run.base_s, run.seed)
        busy = {p: quotas[p] * c for p, c in zip(ids, costs)}
        acct = account_round(busy, by_name)
        optimal = optimal_makespan(costs.tolist(), run.budget)
        expected = [run.base_s * slowdown_at(p, rnd) for p in profiles]
        knowable = max(n * c for n, c in zip(optimal_split(expected, run.budget), costs))
        rows.append(dict(
            policy=policy, round=rnd, makespan_s=acct.makespan, optimal_s=optimal,
            ratio=acct.makespan / optimal, floor=knowable / optimal, total_j=acct.total_j,
            active_j=acct.total_active_j, idle_j=acct.total_idle_j, cv_busy=acct.cv_busy,
            min_quota=min(quotas.values()), max_quota=max(quotas.values()),
        ))
        for p in ids:
            if quotas[p] > 0:
                ctrl.observe(p, Report(time_s=float(busy[p]), energy_j=float(acct.active_j[p]),
                                       samples=int(quotas[p])))
    return pd.DataFrame(rows)


def compare(profiles: Sequence[DeviceProfile], run: VirtualRun = VirtualRun(),
            policies: Sequence[str] = POLICY_NAMES) -> pd.DataFrame:
    """All ``policies`` on the same realised costs, stacked (one row per policy and round)."""
    return pd.concat([simulate(p, profiles, run) for p in policies], ignore_index=True)


def summarise(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per policy: total time and energy over all rounds, mean CV, ratio at round 3 and last."""
    def one(df: pd.DataFrame) -> pd.Series:
        df = df.sort_values("round")
        r3 = df.loc[df["round"] == 3, "ratio"]
        return pd.Series({
            "time_s": df["makespan_s"].sum(),
            "energy_j": df["total_j"].sum(),
            "idle_share": df["idle_j"].sum() / df["total_j"].sum(),
            "mean_cv_busy": df["cv_busy"].mean(),
            "ratio_r3": float(r3.iloc[0]) if len(r3) else float("nan"),
            "ratio_last": float(df["ratio"].iloc[-1]),
            "floor_mean": df["floor"].mean(),
        })
    out = rounds.groupby("policy", sort=False)[list(rounds.columns.drop("policy"))].apply(one)
    return out
