"""Per-run figures of the non-IID section and the issue's target checks.

Contract
--------
:func:`summarise` turns each run's per-round rows into one line: the target (Equal + FedAvg's final
metric of the same task, scenario, α and seed − :data:`ACC_SLACK`; weather: its MSE ×
:data:`MSE_SLACK`), whether and when the run reached it, time and energy to it and their ratios to
Equal + FedAvg's, the final and worst-group metrics at equal rounds, and the worst group against
Equal + FedAvg's at the same virtual time. :func:`target_checks` states the issue's targets for one
row per task and scenario (:data:`TARGET_RATIO`, :data:`WORST_LIMIT`).

Cost
----
pandas group-bys over the per-round rows: milliseconds for the section's thousands of rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

ACC_SLACK = 0.01  # target: Equal + FedAvg's final accuracy − 1 point
MSE_SLACK = 1.02  # weather: Equal + FedAvg's final MSE × 1.02
WORST_LIMIT = 5.0  # points (weather: % of the error) the worst group may fall below Equal's at the same time
TARGET_RATIO = {"testbed": 0.60, "wide": 0.35}  # the time-to-target targets for Time-only


def first_at_target(run: pd.DataFrame, metric: str, target: float, higher: bool) -> pd.Series | None:
    """The first round (from round 1) whose ``metric`` reaches ``target`` (``higher``: at or above), or ``None``."""
    body = run[run["round"] >= 1]
    hit = body[body[metric] >= target] if higher else body[body[metric] <= target]
    return hit.iloc[0] if len(hit) else None


def _worst_delta(worst: float, ref: float, higher: bool) -> float:
    """Points by which ``worst`` is better than ``ref`` (negative: worse); weather: % of ``ref``'s error."""
    if not (math.isfinite(worst) and math.isfinite(ref)):
        return math.nan
    return 100.0 * (worst - ref) if higher else 100.0 * (ref - worst) / ref


def summarise(rows: pd.DataFrame, metric_of: dict[str, str], higher_of: dict[str, bool],
              kind: str = "noniid") -> pd.DataFrame:
    """One row per run: target, reached, time/energy to target and × Equal, final and worst metrics.

    Time and energy to target come from the whole run (a budgeted run goes on to Equal + FedAvg's time);
    the final metric, the final worst group, the makespan, energy and samples per round from its first
    ``R`` rounds, ``R`` being Equal + FedAvg's (equal rounds). ``stop`` says why the run ended
    (``"cap"``: its round cap came before Equal's time; a miss there is censored, not measured).
    """
    sub = rows[rows["kind"] == kind] if len(rows) else rows
    out = []
    for (task, scenario, alpha, seed), group in sub.groupby(["task", "scenario", "alpha", "seed"], sort=False):
        metric, higher = metric_of[task], higher_of[task]
        eq = group[group["row"] == "equal-fedavg"].sort_values("round")
        if eq.empty:
            continue
        eq_final = float(eq[metric].iloc[-1])
        equal_rounds = int(eq["round"].max())
        budget_s = float(eq["virtual_time_s"].iloc[-1])
        target = eq_final - ACC_SLACK if higher else eq_final * MSE_SLACK
        eq_hit = first_at_target(eq, metric, target, higher)
        eq_t = float(eq_hit["virtual_time_s"]) if eq_hit is not None else math.nan
        eq_e = float(eq_hit["virtual_energy_j"]) if eq_hit is not None else math.nan
        for name, run in group.groupby("row", sort=False):
            run = run.sort_values("round")
            hit = first_at_target(run, metric, target, higher)
            t = float(hit["virtual_time_s"]) if hit is not None else math.nan
            e = float(hit["virtual_energy_j"]) if hit is not None else math.nan
            worst_at = float(hit["worst_group"]) if hit is not None else math.nan
            before = eq[eq["virtual_time_s"] <= t + 1e-12] if hit is not None else eq.iloc[0:0]
            eq_worst_then = float(before["worst_group"].iloc[-1]) if len(before) else math.nan
            body = run[(run["round"] >= 1) & (run["round"] <= equal_rounds)]
            stop = str(run["stop"].iloc[-1]) if "stop" in run else "rounds"
            out.append({
                "task": task, "scenario": scenario, "alpha": float(alpha), "seed": int(seed), "row": name,
                "target": target, "reached": hit is not None,
                "target_round": int(hit["round"]) if hit is not None else math.nan,
                "time_to_target_s": t, "energy_to_target_j": e,
                "time_ratio": t / eq_t if eq_t > 0 else math.nan,
                "energy_ratio": e / eq_e if eq_e > 0 else math.nan,
                "final_metric": float(body[metric].iloc[-1]), "worst_final": float(body["worst_group"].iloc[-1]),
                "worst_at_target": worst_at, "equal_worst_same_time": eq_worst_then,
                "d_worst_same_time": _worst_delta(worst_at, eq_worst_then, higher),
                "makespan_s": float(body["makespan_s"].sum()), "energy_j": float(body["energy_j"].sum()),
                "samples_per_round": float(body["samples"].mean()),
                "equal_rounds": equal_rounds, "rounds_run": int(run["round"].max()), "stop": stop,
                "time_run_s": float(run["virtual_time_s"].iloc[-1]), "equal_time_s": budget_s,
            })
    return pd.DataFrame(out)


def _median(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.median()) if len(v) else math.nan


def target_checks(summary: pd.DataFrame, row: str, alpha: float = 0.3) -> list[dict[str, Any]]:
    """The issue's targets for ``row`` per (task, scenario) at ``alpha``: reached in every seed, median
    time × Equal at most :data:`TARGET_RATIO`, worst group never more than :data:`WORST_LIMIT` below Equal's."""
    out = []
    at = summary[np.isclose(summary["alpha"], alpha)]
    s = at[at["row"] == row]
    for (task, scenario), g in s.groupby(["task", "scenario"], sort=False):
        eq = at[(at["row"] == "equal-fedavg") & (at["task"] == task) & (at["scenario"] == scenario)]
        limit = TARGET_RATIO.get(scenario, math.nan)
        ratio = _median(g["time_ratio"]) if g["reached"].all() else math.nan
        worst = float(g["d_worst_same_time"].min()) if g["reached"].all() else math.nan
        out.append({"task": task, "scenario": scenario, "reached": int(g["reached"].sum()), "seeds": len(g),
                    "median_ratio": ratio, "max_ratio": float(g["time_ratio"].max()), "limit": limit,
                    "ratio_ok": bool(g["reached"].all() and ratio <= limit),
                    "worst_delta": worst, "worst_ok": bool(g["reached"].all() and worst >= -WORST_LIMIT),
                    # Equal reaches the target in round 1 (an equal split for every row): the ratio says nothing
                    "trivial": bool(len(eq) and (eq["target_round"] == 1).all())})
    return out
