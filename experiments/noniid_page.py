"""The non-IID section of the results page: its lines, the floor plot, its place on the page.

Contract
--------
:func:`section` writes the section between :data:`MARK_START` and :data:`MARK_END` from the per-run
figures (:func:`experiments.noniid_figures.summarise`): the set-up and provenance, the targets
(:func:`experiments.noniid_figures.target_checks`), the headline ratios, a table per task, scenario
and α (:func:`run_table`), the floor's table and plot (:func:`floor_table`, :func:`plot_floor`) and
the measured clock. :func:`splice` puts the section (or another block between its markers) into an existing page,
replacing the old one. :func:`headline` and :func:`task_tables` are the tables other parts reuse.
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

from experiments.noniid_figures import ACC_SLACK, MSE_SLACK, WORST_LIMIT, _median, target_checks
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


def left_out_lines(left_out: Sequence[str]) -> list[str]:
    """The line naming the rows the installed strategies cannot run (none when every row ran)."""
    if not left_out:
        return []
    return ["Rows left out: the installed strategies offer no normalised weighting ("
            + ", ".join(ROWS[n].label for n in left_out) + ").", ""]


def headline(summary: pd.DataFrame, rows: Sequence[str], tasks: Sequence[str], scenarios: Sequence[str],
             alpha: float, level: str = "###") -> list[str]:
    """The headline table: per row, time to target × Equal + FedAvg for each (task, scenario) at ``alpha``.

    Parameters
    ----------
    summary : pandas.DataFrame
        Per-run figures (:func:`experiments.noniid_figures.summarise`).
    rows : Sequence[str]
        Rows of :data:`experiments.noniid_rows.ROWS`, in the table's order.
    tasks, scenarios : Sequence[str]
        The columns: every (task, scenario).
    alpha : float
        The Dirichlet concentration of the runs shown.
    level : str
        The Markdown heading of the table's title.
    """
    combos = [(t, sc) for t in tasks for sc in scenarios]
    L = [f"{level} Headline: time to target × Equal + FedAvg, α = {alpha:g}", "",
         "Median over seeds (range), with the seeds that reached the target; virtual clock.", ""]
    body = []
    for name in rows:
        cells = []
        for task, scenario in combos:
            g = summary[(summary["row"] == name) & (summary["task"] == task) & (summary["scenario"] == scenario)
                        & np.isclose(summary["alpha"], alpha)]
            cells.append(f"{_ratio_cell(g, 'time_ratio')} [{int(g['reached'].sum())}/{len(g)}]" if len(g) else "–")
        body.append([ROWS[name].label, *cells])
    return [*L, *_md(["row", *(f"{t}, {sc}" for t, sc in combos)], body), ""]


def task_tables(summary: pd.DataFrame, rows: Sequence[str], tasks: Sequence[str], scenarios: Sequence[str],
                alphas: Sequence[float], metric_of: dict[str, str], higher_of: dict[str, bool],
                level: str = "###") -> list[str]:
    """A :func:`run_table` per (task, scenario, α) that ran, titled at heading ``level`` with its target line.

    Parameters
    ----------
    summary : pandas.DataFrame
        Per-run figures (:func:`experiments.noniid_figures.summarise`).
    rows : Sequence[str]
        Rows of :data:`experiments.noniid_rows.ROWS`, in each table's order.
    tasks, scenarios, alphas : Sequence
        The tables: one per (task, scenario, α) with runs in ``summary``.
    metric_of, higher_of : dict
        Per task: the metric's column and whether higher is better.
    level : str
        The Markdown heading of each table's title.
    """
    L: list[str] = []
    for task in tasks:
        for scenario in scenarios:
            for alpha in alphas:
                s = summary[(summary["task"] == task) & (summary["scenario"] == scenario)
                            & np.isclose(summary["alpha"], alpha)]
                if s.empty:
                    continue
                eq = s[s["row"] == "equal-fedavg"]
                early = bool(len(eq) and (eq["target_round"] == 1).all())
                L += [f"{level} {task}, {scenario}, α = {alpha:g}", "",
                      f"Target: {_fmt(float(eq['target'].mean()), 4)} (mean over seeds); Equal + FedAvg reaches it "
                      f"after {_fmt(_median(eq['time_to_target_s']))} s (median)"
                      + (". **Uninformative here**: Equal + FedAvg reaches its own final figure − 1 point already "
                         "after round 1 in every seed (the model barely moves over the run), and round 1 is an equal "
                         "split for every row, so the time ratios are 1 by construction." if early else "."), ""]
                L += run_table(s, rows, metric_of[task], higher_of[task]) + [""]
    return L


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


#: The floor rows of each weighting, in the order of the floor's table and plot: (setting, row).
FLOOR_FAMILIES = {
    "normalised, rescale ≤ 8": (("none", "time-norm-cap8"), ("shrunk batches (default)", "time-norm-cap8-shrink"),
                                ("≥ 2 steps", "time-norm-cap8-steps2"),
                                ("≥ 3 steps", "time-norm-cap8-steps3"), ("0.25 × equal", "time-floor0.25"),
                                ("0.5 × equal", "time-floor0.5"), ("0.75 × equal", "time-floor0.75")),
    "samples": (("none", "time-samples"), ("≥ 2 steps", "time-samples-steps2"), ("≥ 3 steps", "time-samples-steps3"),
                ("0.5 × equal", "time-samples-floor0.5")),
}


def _own_floor(setting: str) -> bool:
    """Whether a floor setting is neither "none" nor a step or share floor (the default's shrunk batches)."""
    return setting != "none" and "steps" not in setting and "equal" not in setting


def floor_rows(rows: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """``{weighting: [(setting, row)]}`` of :data:`FLOOR_FAMILIES` that ran, for a weighting with "none" and a step
    or share floor row."""
    out = {}
    for family, settings in FLOOR_FAMILIES.items():
        ran = [(lab, n) for lab, n in settings if n in rows]
        if ran and ran[0][0] == "none" and any(lab != "none" and not _own_floor(lab) for lab, _ in ran):
            out[family] = ran
    return out


def _floor_point(g: pd.DataFrame) -> tuple[float, float, str]:
    """(median time × Equal of the seeds reached, worst seed's Δ worst vs Equal at the same time, 'r/n')."""
    return _median(g["time_ratio"]), float(g["d_worst_same_time"].min()), f"{int(g['reached'].sum())}/{len(g)}"


def plot_floor(summary: pd.DataFrame, rows: Sequence[str], path: Path, alpha: float = ALPHAS[0]) -> Path | None:
    """Per weighting, per (task, scenario): time to target × Equal against the worst group's Δ vs Equal at the same
    time (worst seed), one point per floor setting, joined from no floor to the step floors and to the share floors."""
    fams = floor_rows(rows)
    if not fams:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary[np.isclose(summary["alpha"], alpha)]
    fig, axes = plt.subplots(1, len(fams), figsize=(6.5 * len(fams), 4.8), squeeze=False)
    for ax, (family, settings) in zip(axes[0], fams.items()):
        for k, ((task, scenario), g) in enumerate(s.groupby(["task", "scenario"], sort=False)):
            pts = [(lab, *_floor_point(g[g["row"] == n])) for lab, n in settings if (g["row"] == n).any()]
            pts = [p for p in pts if math.isfinite(p[1]) and math.isfinite(p[2])]  # a setting no seed reached
            if not pts or pts[0][0] != "none":
                continue
            marker = "o" if scenario == "testbed" else "s"
            # from no floor to each kind of floor: steps (solid), a share of the equal split (dotted)
            for kind, style in (("steps", "-"), ("equal", ":")):
                line = [pts[0], *(p for p in pts[1:] if kind in p[0])]
                ax.plot([p[1] for p in line], [p[2] for p in line], linestyle=style, marker=marker, color=f"C{k}",
                        label=f"{task}, {scenario}" if kind == "steps" else None)
            for lab, x, y, _ in pts:
                if _own_floor(lab):  # on no line: a floor of its own
                    ax.plot([x], [y], marker="*", markersize=9, color=f"C{k}")
                ax.annotate(lab, (x, y), fontsize=6, color=f"C{k}", xytext=(3, 3), textcoords="offset points")
        for limit, style in ((0.60, ":"), (0.35, "-.")):
            ax.axvline(limit, color="grey", linestyle=style, linewidth=0.8)
        ax.axhline(-WORST_LIMIT, color="red", linestyle=":", linewidth=0.8,
                   label=f"−{WORST_LIMIT:g} (the issue's limit)")
        own = any(_own_floor(lab) for lab, _ in settings)
        ax.set(xlabel="time to target × Equal + FedAvg (median of the seeds reached; targets 0.60 testbed, 0.35 wide)",
               ylabel="worst group − Equal's, same time (worst seed)")
        ax.set_title(f"Time-only + {family}, α = {alpha:g} (virtual clock)\nsolid: step floors, dotted: share floors"
                     + (", star: shrunk batches" if own else "") + "; weather: Δ in % of its error", fontsize=8)
        ax.xaxis.label.set_size(7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def floor_table(summary: pd.DataFrame, settings: Sequence[tuple[str, str]],
                alpha: float = 0.3) -> tuple[list[str], list[list[str]]]:
    """Per (task, scenario) at ``alpha``, per floor setting: seeds reaching the target, median time × Equal + FedAvg
    of those, and the worst seed's Δ worst group vs Equal at the same time (the targets' figures)."""
    s = summary[np.isclose(summary["alpha"], alpha)]
    body = []
    for (task, scenario), g in s.groupby(["task", "scenario"], sort=False):
        cells = []
        for _, name in settings:
            r = g[g["row"] == name]
            if r.empty:
                cells.append("–")
                continue
            ratio, worst, reached = _floor_point(r)
            cells.append(f"{reached}, {_fmt(ratio)}, {_fmt(worst)}")
        if any(c != "–" for c in cells[1:]):
            body.append([f"{task}, {scenario}", *cells])
    return ["task, scenario", *(lab for lab, _ in settings)], body


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
          "gives the same time and energy to target as going on (a row whose rounds are 0.3–0.5× as long as "
          "Equal's is not held to Equal's rounds). *Final* figures are still at "
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
    L += left_out_lines(left_out)
    if not rows:
        return L + ["No non-IID run finished.", "", MARK_END]
    # ---- the targets
    L += [f"### Targets (Time-only as a user gets it: {ROWS[default].label}, α = 0.3)", ""]
    L += _targets_table(summary, default, args.noniid_alphas) + [""]
    L += ["(The issue's targets are stated for α = 0.3; the α = 0.1 lines are for information.)", ""]
    candidates = [n for n in rows if n != default and n.startswith("time-") and ROWS[n].inner == "fedavg"
                  and ROWS[n].weighting is not None]
    if candidates:
        L += ["### The same targets for the other Time-only settings", ""]
        for name in candidates:
            L += [f"**{ROWS[name].label}**", ""] + _targets_table(summary, name, args.noniid_alphas[:1]) + [""]
    # ---- headline: time to target × Equal per row, task and scenario at the first α; a table per task, scenario, α
    alpha0 = args.noniid_alphas[0]
    L += headline(summary, rows, args.noniid_tasks, args.scenarios, alpha0)
    L += task_tables(summary, rows, args.noniid_tasks, args.scenarios, args.noniid_alphas, metric_of, higher_of)
    # ---- the floor
    fams = floor_rows(rows)
    if fams:
        png = plot_floor(summary, rows, figs / "noniid-floor.png", alpha0)
        L += ["### A floor on a participant's share", "",
              "Time-only with a floor on each node's quota: `min_local_steps=k` (at least k optimizer steps of the "
              "node's batch size, learnt from its replies, within the equal share) or `min_quota` set to a share of "
              f"the equal split ({args.budget} / 11 samples). Equal gives each node {args.budget // 11} samples, "
              "4 steps of 32, so 2 steps is about half the equal share and 3 steps nearly all of it. Each cell, at α = "
              f"{alpha0:g}: seeds that reached the target, median time × Equal + FedAvg of those, and the worst seed's "
              "worst group minus Equal + FedAvg's at the same time (points; weather: % of its error; negative is "
              "worse), both over the seeds that reached the target (the Targets tables count a target as met only "
              "when every seed reached it). A floor costs time (the slow nodes' larger quotas set the makespan) and "
              "buys local steps for the nodes the split keeps small, whose normalised updates are otherwise scaled up "
              "from few steps and whose samples otherwise weigh little. *Shrunk batches* is the default's own floor "
              "(`scale_batch_size=\"shrink\"`): a node whose quota falls below the equal share trains the equal "
              "split's steps in smaller batches: more steps, no more samples (no more time on the modelled clock, "
              "which charges samples; smaller batches cost a real device somewhat more per sample).",
              ""]
        for family, settings in fams.items():
            header, body = floor_table(summary, settings, alpha0)
            L += [f"**Time-only + {family}**", ""] + _md(header, body) + [""]
        if png is not None:
            L += [f"![time to target against the worst group, per floor](results/{png.name})", ""]
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


def splice(page: str, lines: Sequence[str], start: str = MARK_START, end: str = MARK_END,
           after: str | None = None) -> str:
    """``page`` with the block between ``start`` and ``end`` replaced by ``lines``.

    A page without that block gets it after the marker ``after`` (when given and on the page), else before
    ``## Files``, else at its end. ``ValueError`` when ``end`` comes before ``start`` (a hand-edited page).
    """
    block = "\n".join(lines)
    if start in page and end in page:
        head, rest = page.split(start, 1)
        if end not in rest:
            raise ValueError(f"the page's {end!r} comes before its {start!r}: restore the pair in order (or delete "
                             "both) and rerun; nothing was written")
        return head + block + rest.split(end, 1)[1]
    if after is not None and after in page:
        head, tail = page.split(after, 1)
        return head + after + "\n\n" + block + tail
    if "\n## Files" in page:
        head, tail = page.split("\n## Files", 1)
        return head + "\n" + block + "\n\n## Files" + tail
    return page.rstrip("\n") + "\n\n" + block + "\n"
