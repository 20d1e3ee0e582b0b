"""The non-IID section of the results page: its lines, the floor plot, its place on the page.

Contract
--------
:func:`section` writes the section between :data:`MARK_START` and :data:`MARK_END` from the per-run
figures (:func:`experiments.noniid_figures.summarise`): the set-up and provenance, the targets
(:func:`experiments.noniid_figures.target_checks`), the headline ratios, a table per task, scenario
and α (:func:`run_table`), the floor's table and plot (:func:`floor_table`, :func:`plot_floor`) and
the measured clock. :func:`splice` puts the section into an existing page, replacing the old one.
It renders only: no run is started and no figure decided here.

Cost
----
Milliseconds for the tables; about a second for the floor plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.noniid_figures import ACC_SLACK, MSE_SLACK, WORST_LIMIT, _median, _worst_delta, target_checks
from experiments.noniid_rows import ALPHAS, ROWS, default_row, default_weighting

MARK_START, MARK_END = "<!-- noniid:start -->", "<!-- noniid:end -->"


def _fmt(v: float, digits: int = 3) -> str:
    if v == math.inf:
        return "∞"
    return "–" if not math.isfinite(v) else f"{v:.{digits}g}"


def _ratio_cell(g: pd.DataFrame, col: str) -> str:
    v = g[col].dropna()
    if not len(v):
        return "–"
    return f"{v.median():.2f} ({v.min():.2f}–{v.max():.2f})"


def _md(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(r) + " |" for r in body)]


def run_table(s: pd.DataFrame, rows: Sequence[str], metric: str, higher: bool) -> list[str]:
    """One (task, scenario, α) table: a line per row."""
    worst_name = "worst class acc" if higher else "worst client MSE"
    hdr = ["row", "reached", "time to target s", "× Equal + FedAvg (median, range)", "energy to target J",
           "energy × Equal", f"final {metric}", f"final {worst_name}", "Δ worst vs Equal, same time (worst seed)",
           "rounds run (median; cap hit)"]
    body = []
    for name in rows:
        g = s[s["row"] == name]
        if g.empty:
            continue
        body.append([ROWS[name].label, f"{int(g['reached'].sum())}/{len(g)}", _fmt(_median(g["time_to_target_s"])),
                     _ratio_cell(g, "time_ratio"), _fmt(_median(g["energy_to_target_j"])),
                     _ratio_cell(g, "energy_ratio"), _fmt(float(g["final_metric"].mean()), 4),
                     _fmt(float(g["worst_final"].mean()), 3), _fmt(float(g["d_worst_same_time"].min()), 3),
                     _rounds_cell(g)])
    return _md(hdr, body)


def _targets_table(summary: pd.DataFrame, row: str, alphas: Sequence[float]) -> list[str]:
    """The issue's three targets for ``row``, one line per (task, scenario) and α."""
    body = []
    for alpha in alphas:
        for c in target_checks(summary, row, alpha):
            ok = lambda b, c=c: ("met" if b else "**not met**") + (  # noqa: E731
                " (trivially: target reached in round 1)" if c["trivial"] else "")
            body.append([f"{c['task']}, {c['scenario']}", f"{alpha:g}", f"{c['reached']}/{c['seeds']}",
                         f"{_fmt(c['median_ratio'])} (max {_fmt(c['max_ratio'])})", f"≤ {c['limit']:g}",
                         ok(c["ratio_ok"]), _fmt(c["worst_delta"]), ok(c["worst_ok"])])
    return _md(["task, scenario", "α", "reached", "time × Equal (median)", "target", "time", "Δ worst, same time "
                "(worst seed)", f"worst ≥ −{WORST_LIMIT:g}"], body)


def _rounds_cell(g: pd.DataFrame) -> str:
    if "rounds_run" not in g:
        return "–"
    caps = int((g["stop"] == "cap").sum()) if "stop" in g else 0
    return f"{_median(g['rounds_run']):.0f}" + (f"; cap {caps}/{len(g)}" if caps else "")


def floor_rows(rows: Sequence[str]) -> list[tuple[float, str]]:
    """``[(floor share, row)]``: the default Time-only row at floor 0, then the floor rows that ran."""
    base = default_row("time")
    out = [(0.0, base)] if base in rows else []
    return out + [(ROWS[n].floor, n) for n in rows if n.startswith("time-floor")]


def plot_floor(summary: pd.DataFrame, rows: Sequence[str], path: Path) -> Path | None:
    """Median time to target (× Equal + FedAvg) and mean worst-group Δ against the floor share."""
    fl = floor_rows(rows)
    if len(fl) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    x = [f for f, _ in fl]
    for (task, scenario, alpha), g in summary.groupby(["task", "scenario", "alpha"], sort=False):
        style = "-" if np.isclose(alpha, ALPHAS[0]) else "--"
        ratio = [_median(g.loc[g["row"] == n, "time_ratio"]) for _, n in fl]
        worst = [float(g.loc[g["row"] == n, "worst_final"].mean()) for _, n in fl]
        eq_worst = float(g.loc[g["row"] == "equal-fedavg", "worst_final"].mean())
        d = [_worst_delta(w, eq_worst, bool(g["task"].iloc[0] != "weather")) for w in worst]
        name = f"{task}, {scenario}, α={alpha:g}"
        for ax, y in ((axes[0], ratio), (axes[1], d)):  # floors that did not run (or never reached) are left out
            keep = [i for i, v in enumerate(y) if math.isfinite(v)]
            ax.plot([x[i] for i in keep], [y[i] for i in keep], style, marker="o", label=name)
    axes[0].set(xlabel="floor on a quota (share of the equal split)",
                ylabel="time to target × Equal + FedAvg (median, reached)",
                title="Time to target vs the floor (virtual clock)")
    axes[1].set(xlabel="floor on a quota (share of the equal split)",
                ylabel="final worst group − Equal's (points; weather: % error)",
                title="Worst class / client at equal rounds")
    axes[1].axhline(-WORST_LIMIT, color="red", linestyle=":", label=f"−{WORST_LIMIT:g} (the issue's limit)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def floor_table(summary: pd.DataFrame, rows: Sequence[str], alpha: float = 0.3) -> tuple[list[str], list[list[str]]]:
    """Per (task, scenario) at ``alpha``, per floor: seeds reaching the target, median time × Equal + FedAvg of
    those, and the final worst group minus Equal + FedAvg's (points; weather: % of its error; mean over seeds)."""
    s = summary[np.isclose(summary["alpha"], alpha)]
    fl = floor_rows(rows)
    body = []
    for (task, scenario), g in s.groupby(["task", "scenario"], sort=False):
        eq = g[g["row"] == "equal-fedavg"]
        cells = []
        for _, name in fl:
            r = g[g["row"] == name]
            if r.empty:
                cells.append("–")
                continue
            d = _worst_delta(float(r["worst_final"].mean()), float(eq["worst_final"].mean()), task != "weather")
            cells.append(f"{int(r['reached'].sum())}/{len(r)}, {_fmt(_median(r['time_ratio']))}, {_fmt(d)}")
        if any(c != "–" for c in cells[1:]):
            body.append([f"{task}, {scenario}", *cells])
    return ["task, scenario", *(f"floor {f:g}" for f, _ in fl)], body


def section(args: Any, summary: pd.DataFrame, measured: pd.DataFrame, metric_of: dict[str, str],
            higher_of: dict[str, bool], figs: Path, left_out: Sequence[str], provenance: Sequence[str]) -> list[str]:
    """The page's non-IID section, between :data:`MARK_START` and :data:`MARK_END`."""
    rows = [n for n in args.noniid_rows if n in set(summary["row"])] if len(summary) else []
    default = default_row("time")
    L = [MARK_START, "## Private, label-skewed data: time and energy to accuracy", ""]
    L += list(provenance)
    L += ["", "Every node holds one Dirichlet(α) partition of the task's training data (Flower Datasets' "
          "`DirichletPartitioner`; α = " + ", ".join(f"{a:g}" for a in args.noniid_alphas) + "): by class for "
          "MNIST and sentiment, by the **month** of the target hour for weather (the three stations are New York "
          "airports within 20 km of each other with nearly the same weather; the month moves the regression's "
          "inputs and targets by season). Private data: each quota is capped at the node's data size "
          "(`allow_cycling=False`), except PyramidFL-style, whose extra local work is more passes over its own "
          f"data. Rounds of {args.budget} samples over 11 devices, {args.noniid_seeds} paired seeds per (task, "
          "scenario, α); virtual clock (modelled device time) unless marked. Local training: the task's optimizer "
          "and batch 32, learning rate the task's default"
          + "".join(f"; {t} {lr:g}" for t, lr in sorted(args.noniid_lr.items()) if t in args.noniid_tasks) + ".",
          "",
          "**Runs to equal time.** Equal + FedAvg runs "
          + ", ".join(f"{args.noniid_rounds[t]} rounds on {t}" for t in args.noniid_tasks)
          + "; every other row runs until its cumulative virtual time reaches Equal + FedAvg's total time of the "
          f"same (task, scenario, α, seed), at least as many rounds and at most {args.noniid_round_cap}× as many, "
          "and stops early at the first evaluation (from Equal's last round on) that reaches the target, which "
          "gives the same time and energy to target as going on. This fixes a measurement of the earlier page, "
          "not the target: there every row ran Equal's rounds, so a row whose rounds are 0.3–0.5× as long had to "
          "reach the target in 0.3–0.5× the time or was counted as not reached. *Final* figures are still at "
          "equal rounds (each run's round R, R being Equal + FedAvg's); *time / energy to target* come from the "
          "longer run; a run that hits its round cap before Equal's time without reaching the target is counted "
          "as not reached and marked *cap*.",
          "",
          f"- **Target**: Equal + FedAvg's final accuracy of the same seed minus {100 * ACC_SLACK:g} point (weather: "
          f"its final MSE × {MSE_SLACK:g}); "
          "time and energy to target are the cumulative virtual figures at the first evaluation reaching it; "
          "× Equal + FedAvg is the per-seed ratio to Equal + FedAvg's own time (energy) to the target, median "
          "and range over seeds.",
          "- **Worst group**: the lowest per-class holdout accuracy (weather: the highest per-client MSE, each "
          "client's MSE weighting the holdout's months by its own data's months). *Final*: after the last round "
          "(equal rounds). *Δ worst vs Equal, same time*: the run's worst group when it reaches the target minus "
          "Equal + FedAvg's at the same virtual time (its last evaluation at or before it), in points (weather: % "
          "of Equal's error; negative is worse), the worst seed.",
          f"- **Default weighting** of the strategies with private data: `{default_weighting()}` (the row "
          f"\"{ROWS[default].label}\" is Time-only as a user gets it).",
          "- **PyramidFL-style** (Li et al., MobiCom 2022; `experiments/pyramid_strategy.py`): round 1 equal, "
          "then every node works until the slowest node's equal-share time ends (work grows with speed); its rounds "
          "last as long as Equal's and process more samples: compare by time to target (equal wall time).", ""]
    if left_out:
        L += ["Rows left out: the installed strategies offer no normalised weighting ("
              + ", ".join(ROWS[n].label for n in left_out) + ").", ""]
    if not rows:
        return L + ["No non-IID run finished.", "", MARK_END]
    # ---- the targets
    L += ["### Targets (Time-only with the default weighting, α = 0.3)", ""]
    L += _targets_table(summary, default, args.noniid_alphas) + [""]
    L += ["(The issue's targets are stated for α = 0.3; the α = 0.1 lines are for information.)", ""]
    candidates = [n for n in rows if n != default and n.startswith("time-") and ROWS[n].inner == "fedavg"
                  and not ROWS[n].floor and ROWS[n].weighting is not None]
    if candidates:
        L += ["### The same targets for the other Time-only weightings (candidates for the default)", ""]
        for name in candidates:
            L += [f"**{ROWS[name].label}**", ""] + _targets_table(summary, name, args.noniid_alphas[:1]) + [""]
    # ---- headline: time to target × Equal per row, task and scenario at the first α
    alpha0 = args.noniid_alphas[0]
    combos = [(t, sc) for t in args.noniid_tasks for sc in args.scenarios]
    L += [f"### Headline: time to target × Equal + FedAvg, α = {alpha0:g}", "",
          "Median over seeds (range), with the seeds that reached the target; virtual clock.", ""]
    body = []
    for name in rows:
        cells = []
        for task, scenario in combos:
            g = summary[(summary["row"] == name) & (summary["task"] == task) & (summary["scenario"] == scenario)
                        & np.isclose(summary["alpha"], alpha0)]
            cells.append(f"{_ratio_cell(g, 'time_ratio')} [{int(g['reached'].sum())}/{len(g)}]" if len(g) else "–")
        body.append([ROWS[name].label, *cells])
    L += _md(["row", *(f"{t}, {sc}" for t, sc in combos)], body) + [""]
    # ---- per task, scenario, alpha
    for task in args.noniid_tasks:
        for scenario in args.scenarios:
            for alpha in args.noniid_alphas:
                s = summary[(summary["task"] == task) & (summary["scenario"] == scenario)
                            & np.isclose(summary["alpha"], alpha)]
                if s.empty:
                    continue
                eq = s[s["row"] == "equal-fedavg"]
                early = bool(len(eq) and (eq["target_round"] == 1).all())
                L += [f"### {task}, {scenario}, α = {alpha:g}", "",
                      f"Target: {_fmt(float(eq['target'].mean()), 4)} (mean over seeds); Equal + FedAvg reaches it "
                      f"after {_fmt(_median(eq['time_to_target_s']))} s (median)"
                      + (". **Uninformative here**: Equal + FedAvg reaches its own final figure − 1 point already "
                         "after round 1 in every seed (the model barely moves over the run), and round 1 is an equal "
                         "split for every row, so the time ratios are 1 by construction." if early else "."), ""]
                L += run_table(s, rows, metric_of[task], higher_of[task]) + [""]
    # ---- the floor
    fl = floor_rows(rows)
    if len(fl) >= 2:
        header, body = floor_table(summary, rows, alpha0)
        png = plot_floor(summary, rows, figs / "noniid-floor.png")
        L += ["### A floor on a participant's share", "",
              "Time-only with the default weighting and `min_quota` set to a share of the equal split "
              f"({args.budget} / 11 samples); floor 0 is the default (`min_quota=1`). Each cell, at α = {alpha0:g}: "
              "seeds that reached the target, median time × Equal + FedAvg of those, and the final worst group "
              "minus Equal + FedAvg's (points; weather: % of its error; negative is worse). A floor costs time (the "
              "slow nodes' larger quotas set the makespan) and buys local steps for the nodes the split keeps small, "
              "whose normalised updates are otherwise scaled up from few steps.", ""]
        L += _md(header, body) + [""]
        if png is not None:
            L += [f"![time to target and worst group vs the floor](results/{png.name})", ""]
    # ---- the measured clock
    if measured is not None and len(measured):
        mrows = [n for n in args.noniid_measured_rows if n in set(measured["row"])]
        task, scenario = args.noniid_measured_task, args.measured_scenario
        L += [f"### Measured clock: {task}, {scenario}, α = {alpha0:g}", "",
              f"The same runs with device time **measured** (the training thread's CPU seconds × slowdown × jitter), "
              f"{args.noniid_measured_seeds} paired seeds one at a time after the modelled runs, the rows' order "
              "rotated per seed. The last column is the same row's time × Equal on the modelled clock "
              "(same seeds).", ""]
        mod = summary[(summary["task"] == task) & (summary["scenario"] == scenario)
                      & np.isclose(summary["alpha"], alpha0) & summary["seed"].isin(measured["seed"])]
        body = []
        for name in mrows:
            g = measured[measured["row"] == name]
            gm = mod[mod["row"] == name]
            body.append([ROWS[name].label, f"{int(g['reached'].sum())}/{len(g)}", _fmt(_median(g["time_to_target_s"])),
                         _ratio_cell(g, "time_ratio"), _ratio_cell(g, "energy_ratio"),
                         _fmt(float(g["final_metric"].mean()), 4), _fmt(float(g["worst_final"].mean()), 3),
                         _ratio_cell(gm, "time_ratio") if len(gm) else "–"])
        L += _md(["row", "reached", "time to target s", "time × Equal", "energy × Equal", f"final {metric_of[task]}",
                  "final worst group", "time × Equal, modelled"], body) + [""]
    L += ["Files: `results/noniid.csv` (one line per run, every figure above)"
          + (", `results/noniid-measured.csv`" if measured is not None and len(measured) else "") + ".", "", MARK_END]
    return L


def splice(page: str, lines: Sequence[str]) -> str:
    """``page`` with its non-IID section replaced by ``lines`` (inserted before ``## Files`` when it has none)."""
    block = "\n".join(lines)
    if MARK_START in page and MARK_END in page:
        head, rest = page.split(MARK_START, 1)
        return head + block + rest.split(MARK_END, 1)[1]
    if "\n## Files" in page:
        head, tail = page.split("\n## Files", 1)
        return head + "\n" + block + "\n\n## Files" + tail
    return page.rstrip("\n") + "\n\n" + block + "\n"
