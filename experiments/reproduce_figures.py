"""Per-run figures of the IID tables and the interval arithmetic of ``python -m experiments.reproduce``.

Contract
--------
:func:`run_summaries` turns each run's per-round rows into one line of figures (totals, busy-time CV
from round :data:`FROM_ROUND` on, time and energy to Equal's loss after :func:`target_round` of its
rounds, final metrics, the controller's overhead); :func:`with_change_vs_equal` adds the paired
per-seed Δ vs Equal. :func:`mean_ci` is the mean and 95 % Student-t half-width over seeds,
:func:`fmt_ci` its cell on the page, ``_md_table`` a markdown table. The comparisons behind the
page's sentences: :func:`settled_cv` (a CV after the controller's first rounds, from
:data:`SETTLED_ROUND`), :func:`clock_agreement` and :func:`order_agreement` (measured vs modelled
clock), :func:`round_spikes` (single slow rounds).

Cost
----
pandas group-bys over the per-round rows: milliseconds for the page's few thousand rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

TARGET_AT = 0.8
FROM_ROUND = 3  # busy-time CV and DDP/HFL CV are averaged from this round on (the controller has learned)
SETTLED_ROUND = 7  # DDP/HFL CV "after 6 rounds": a second column from this round on, when the runs reach it


def t_quantile(df: int) -> float:
    """Two-sided 95 % Student-t quantile for ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def mean_ci(values: Iterable[float]) -> tuple[float, float, int]:
    """``(mean, half-width of the 95 % t interval, n)`` of the finite values (half-width NaN if n < 2)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, 0
    if len(x) == 1:
        return float(x[0]), math.nan, 1
    return float(x.mean()), t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x)), len(x)


def fmt_ci(values: Iterable[float], digits: int = 3, pct: bool = False) -> str:
    m, h, n = mean_ci(values)
    if n == 0:
        return "–"
    scale, unit = (100.0, " %") if pct else (1.0, "")
    body = f"{m * scale:+.{digits}g}" if pct else _num(m, digits)
    if n == 1 or not math.isfinite(h):
        return body + unit
    return f"{body} ± {_num(h * scale, 2)}{unit}"


def _num(v: float, digits: int = 3) -> str:
    if not math.isfinite(v):
        return "–"
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.{max(digits - 1, 1)}e}"
    return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:,.{max(digits - len(str(int(abs(v)))), 0)}f}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def target_round(rounds: int) -> int:
    """The round whose Equal loss is the target: ceil(0.8 · rounds)."""
    return max(1, math.ceil(TARGET_AT * rounds - 1e-9))


def run_summaries(rows: pd.DataFrame, metric_of: dict[str, str], kind: str = "pma") -> pd.DataFrame:
    """One row per run of ``kind`` (``pma`` or ``measured``): totals, CV, target figures, final metrics, overhead."""
    pma = rows[rows["kind"] == kind] if len(rows) else rows
    out = []
    for (task, scenario, seed), group in pma.groupby(["task", "scenario", "seed"], sort=False):
        equal = group[group["policy"] == "equal"].set_index("round")
        R = int(equal.index.max()) if len(equal) else int(group["round"].max())
        target = float(equal.loc[target_round(R), "loss"]) if len(equal) else math.nan
        for policy, run in group.groupby("policy", sort=False):
            run = run.sort_values("round")
            body = run[run["round"] >= 1]
            reached = body[body["loss"] <= target]
            first = reached.iloc[0] if len(reached) else None
            metric = metric_of[task]
            sync = "strategy_s" in body and body["strategy_s"].notna().all()
            out.append({
                "task": task, "scenario": scenario, "seed": seed, "policy": policy,
                "makespan_s": body["makespan_s"].sum(), "energy_j": body["energy_j"].sum(),
                "idle_j": body["idle_j"].sum(), "active_j": body["active_j"].sum(),
                "cv_busy": body.loc[body["round"] >= min(FROM_ROUND, len(body)), "cv_busy"].mean(),
                "target_loss": target,
                "target_round": int(first["round"]) if first is not None else math.nan,
                "time_to_target_s": float(first["virtual_time_s"]) if first is not None else math.nan,
                "energy_to_target_j": float(first["virtual_energy_j"]) if first is not None else math.nan,
                "final_loss": float(body["loss"].iloc[-1]), "final_metric": float(body[metric].iloc[-1]),
                "controller_s": body["controller_s"].mean() if sync else math.nan,
                "strategy_s": body["strategy_s"].mean() if sync else math.nan,
                "round_wall_s": body["round_wall_s"].mean() if sync else math.nan,
                "round_makespan_s": body["makespan_s"].mean(),
                "samples_per_round": body["samples"].mean() if "samples" in body else math.nan,
            })
    return pd.DataFrame(out)


def with_change_vs_equal(summary: pd.DataFrame) -> pd.DataFrame:
    """Add per-seed relative changes of makespan and energy against Equal (paired)."""
    summary = summary.copy()
    base = summary[summary["policy"] == "equal"].set_index(["task", "scenario", "seed"])
    key = list(zip(summary["task"], summary["scenario"], summary["seed"]))
    for col in ("makespan_s", "energy_j", "idle_j"):
        ref = np.array([base[col].get(k, math.nan) for k in key], dtype=float)
        summary[f"d_{col}"] = summary[col].to_numpy(dtype=float) / ref - 1.0
    return summary


def settled_cv(rows: pd.DataFrame, column: str, keys: Sequence[str],
               settled_round: int = SETTLED_ROUND) -> dict[tuple, pd.Series] | None:
    """``{key: per-seed mean of column over rounds ≥ settled_round}``, or ``None`` when no run reaches that round.

    Rounds before ``settled_round`` are the controller still identifying the costs; this is the
    figure "after ``settled_round − 1`` rounds" next to the table's from-round-3 figure.
    """
    settled = rows[rows["round"] >= settled_round]
    if settled.empty:
        return None
    per_seed = settled.groupby([*keys, "seed"], sort=False)[column].mean().reset_index()
    return {key: g[column] for key, g in per_seed.groupby(list(keys), sort=False)}


def clock_agreement(measured: pd.DataFrame, modelled: pd.DataFrame, policies: Sequence[str]) -> dict[str, Any]:
    """How the measured clock's paired Δ vs Equal compare with the modelled clock's, seed by seed.

    ``measured`` and ``modelled`` are run summaries (:func:`with_change_vs_equal`) of one task and
    scenario. Per policy other than Equal, over the seeds both clocks ran: the Δ makespan and Δ
    energy of each clock as ``(mean, half-width, n)``; ``diff_makespan`` / ``diff_energy``: the
    per-seed measured − modelled Δ (``(mean, half-width, n)``: an interval that excludes 0 means the
    clocks disagree beyond the seeds' noise); ``same_sign``: seeds whose measured Δ makespan has
    the sign of the modelled mean; ``width_ratio``: measured half-width / modelled half-width of Δ
    makespan. ``equal_cv``: Equal's busy-time CV on each clock (the excess on the measured clock is
    the host's timing noise: Equal's quotas do not depend on the clock).
    """
    key = ["seed", "policy"]
    both = measured.merge(modelled, on=key, suffixes=("_meas", "_mod"))
    out: dict[str, Any] = {"policies": {},
                           "equal_cv": (mean_ci(measured.loc[measured["policy"] == "equal", "cv_busy"]),
                                        mean_ci(modelled.loc[modelled["policy"] == "equal", "cv_busy"]))}
    for p in policies:
        if p == "equal":
            continue
        b = both[both["policy"] == p]
        if b.empty:
            continue
        f: dict[str, Any] = {}
        for col in ("makespan_s", "energy_j"):
            short = col.split("_")[0]
            f[f"meas_{short}"] = mean_ci(b[f"d_{col}_meas"])
            f[f"mod_{short}"] = mean_ci(b[f"d_{col}_mod"])
            f[f"diff_{short}"] = mean_ci(b[f"d_{col}_meas"] - b[f"d_{col}_mod"])
        sign = np.sign(f["mod_makespan"][0])
        f["same_sign"] = (int((np.sign(b["d_makespan_s_meas"]) == sign).sum()), len(b))
        h_meas, h_mod = f["meas_makespan"][1], f["mod_makespan"][1]
        f["width_ratio"] = h_meas / h_mod if h_mod > 0 else math.inf
        out["policies"][p] = f
    return out


def order_agreement(measured: pd.DataFrame, modelled: pd.DataFrame, first: str, second: str) -> dict[str, tuple]:
    """Seeds in which ``first`` has a shorter makespan than ``second`` on each clock: ``(k, n)``."""
    res = {}
    for name, s in (("measured", measured), ("modelled", modelled)):
        t = s.pivot_table(index="seed", columns="policy", values="makespan_s")
        if first in t and second in t:
            d = (t[first] - t[second]).dropna()
            res[name] = (int((d < 0).sum()), len(d))
    return res


def round_spikes(rows: pd.DataFrame, kind: str, task: str, scenario: str, factor: float = 3.0) -> dict[str, Any]:
    """Rounds whose makespan is more than ``factor`` × the median round of the same run (rounds ≥ 2).

    Round 1 is left out (every policy starts from an equal split there). Returns ``count``,
    ``rounds`` (how many were looked at) and ``worst``: ``(ratio, policy, seed, round)`` or None.
    """
    sub = rows[(rows["kind"] == kind) & (rows["task"] == task) & (rows["scenario"] == scenario) & (rows["round"] >= 2)]
    count, total, worst = 0, 0, None
    for (policy, seed), run in sub.groupby(["policy", "seed"], sort=False):
        if policy == "fedasync":  # its "rounds" are round-equivalents of an asynchronous run
            continue
        ratio = run["makespan_s"].to_numpy(dtype=float) / float(run["makespan_s"].median())
        count, total = count + int((ratio > factor).sum()), total + len(ratio)
        k = int(np.argmax(ratio))
        if worst is None or ratio[k] > worst[0]:
            worst = (float(ratio[k]), str(policy), int(seed), int(run["round"].iloc[k]))
    return {"count": count, "rounds": total, "worst": worst, "factor": factor}
