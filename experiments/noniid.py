"""Time and energy to accuracy on private, label-skewed data: the non-IID section of the results page.

Contract
--------
:func:`plan` lists the runs, :func:`summarise` turns their per-round rows into per-run figures,
:func:`section` writes the page's section (tables, target verdicts, the floor plot). The runs are
:func:`experiments.inprocess.run_pma` (Flower's strategies driven in this process, real training)
with private data: every node holds one Dirichlet(α) partition of the task's training data
(Flower Datasets' ``DirichletPartitioner`` over the task's ``partition_by`` labels: the class for
MNIST and sentiment, the **month of the target hour** for weather), quotas are capped at a node's
data size (``allow_cycling=False``), and the holdout is evaluated label by label every round.

Weather's skew: the three stations are New York airports within 20 km of each other and see
nearly the same weather, so a station split changes little; the month moves the input and target
distribution (season), so a node holding a few months holds one season's regime.

Rows (:data:`ROWS`): Equal with FedAvg's sample weights, Equal with the normalised (FedNova)
rule, Time-only and Min-energy with each weighting the strategies offer, Time-only around
Flower's ``FedProx``, Static, Oort-like, FedAsync, a PyramidFL-style baseline
(:mod:`experiments.pyramid_strategy`: fast nodes fill the slowest node's equal-share time with
extra local passes), and Time-only with a floor on each node's quota (a share of the equal split).
A row whose weighting the installed strategies do not offer is left out (the page says so).

Figures per run: the **target** is Equal + FedAvg's final metric of the same (task, scenario, α,
seed) minus 1 accuracy point (weather: its final MSE × 1.02); time and energy to the target are
the virtual clock's cumulative figures at the first evaluation that reaches it; the final metric
and the worst group (lowest per-class accuracy; for weather the highest per-client MSE, each
client's MSE weighting the holdout's months by its own data's months) at equal rounds; and the
worst group at the time the run reaches the target against Equal + FedAvg's at the same virtual
time (its last evaluation at or before it).

Cost
----
``rows × tasks × scenarios × alphas × seeds`` runs of ``rounds × budget`` samples each
(the ETA is printed); the measured-clock runs go one at a time after them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from experiments.inprocess import RunSpec

__all__ = ["Row", "ROWS", "FLOORS", "RESCALE_CAPS", "normalised_weighting", "default_weighting", "rescale_cap_option",
           "available_rows", "plan", "budgeted", "summarise", "target_checks", "floor_table", "section", "MARK_START",
           "MARK_END"]

MARK_START, MARK_END = "<!-- noniid:start -->", "<!-- noniid:end -->"
ALPHAS = (0.3, 0.1)
FLOORS = (0.25, 0.5, 0.75)  # floor on a quota as a share of the equal split (budget / nodes)
ACC_SLACK = 0.01  # target: Equal + FedAvg's final accuracy − 1 point
MSE_SLACK = 1.02  # weather: Equal + FedAvg's final MSE × 1.02
WORST_LIMIT = 5.0  # points (weather: % of the error) the worst group may fall below Equal's at the same time
TARGET_RATIO = {"testbed": 0.60, "wide": 0.35}  # the time-to-target targets for Time-only
PROX_MU = 0.1
ROUND_CAP = 4  # a budgeted run's round cap: this many times Equal + FedAvg's rounds
RESCALE_CAPS = (4.0, 8.0, 16.0)  # caps on the normalised rule's rescaling factor (rows when the strategies offer one)


@dataclass(frozen=True)
class Row:
    """One row of the tables: a policy with its aggregation and options."""

    policy: str
    label: str
    weighting: str | None = None  # None: the strategies' default for private data
    inner: str = "fedavg"
    floor: float = 0.0  # share of the equal split
    cycling: bool = False
    options: tuple = ()  # further strategy options, ((name, value), …)


def normalised_weighting() -> str | None:
    """The strategies' name of the normalised (FedNova) weighting, or ``None`` when they have none."""
    from flwr_adaptive.strategies import core

    names = [w for w in core.WEIGHTINGS if w not in ("samples", "data-size")]
    return names[0] if names else None


def default_weighting() -> str:
    """The weighting an ``AdaptiveStrategy`` uses with private data when the user names none."""
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    return str(AdaptiveStrategy(FedAvg(), budget=10, allow_cycling=False).weighting)


def rescale_cap_option() -> str | None:
    """The strategies' option that caps the normalised rule's rescaling factor, or ``None`` when they have none.

    Read from ``AdaptiveStrategy``'s signature (the first keyword with ``rescale`` in its name), so the rows
    appear as soon as the library offers the cap, whatever it is called.
    """
    import inspect

    from flwr_adaptive.strategies import AdaptiveStrategy

    names = [n for n in inspect.signature(AdaptiveStrategy.__init__).parameters if "rescale" in n]
    return names[0] if names else None


def _rows() -> dict[str, Row]:
    norm = normalised_weighting() or "normalised"
    rows = {"equal-fedavg": Row("equal", "Equal + FedAvg", "samples"),
            "equal-norm": Row("equal", "Equal + normalised", norm)}
    for policy, name in (("time", "Time-only"), ("min-energy", "Min-energy")):
        for w, wl in (("samples", "samples"), ("data-size", "data-size"), (norm, "normalised")):
            rows[f"{policy}-{wl}"] = Row(policy, f"{name} + {wl}", w)
    rows["time-fedprox"] = Row("time", f"Time-only + FedProx (μ={PROX_MU:g})", None, inner="fedprox")
    rows["static"] = Row("static", "Static", None)
    rows["oort"] = Row("oort", "Oort-like", None)
    rows["fedasync"] = Row("fedasync", "FedAsync", "samples")
    rows["pyramid"] = Row("pyramid", "PyramidFL-style", "samples", cycling=True)
    for f in FLOORS:
        rows[f"time-floor{f:g}"] = Row("time", f"Time-only, floor {f:g} × equal", None, floor=f)
    cap = rescale_cap_option()
    for c in RESCALE_CAPS if cap else ():
        rows[f"time-norm-cap{c:g}"] = Row("time", f"Time-only + normalised, rescale ≤ {c:g}", norm,
                                          options=((cap, c),))
    return rows


ROWS = _rows()
#: Rows of the quick form (the suite): the reference, the adaptive default, one baseline of each kind.
QUICK_ROWS = ("equal-fedavg", "equal-norm", "time-samples", "time-normalised", "time-floor0.25", "pyramid",
              "time-fedprox")
MEASURED_ROWS = ("equal-fedavg", "time-samples", "time-normalised")
#: Rows run at the second and later α (the first α runs every asked row): the reference, both Equal
#: rules, Time-only's weightings (the normalised one with its rescale capped at 8 too: the candidate default
#: that keeps the slow data owner's class in tests/test_noniid_e2e.py's case) and the PyramidFL-style baseline.
LATER_ALPHA_ROWS = ("equal-fedavg", "equal-norm", "time-samples", "time-data-size", "time-normalised",
                    "time-norm-cap8", "pyramid")


def available_rows(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(rows that can run, rows left out)``: a normalised row needs the strategies' normalised weighting."""
    norm = normalised_weighting()
    ok, left = [], []
    for name in names:
        row = ROWS[name]
        (left if row.weighting == "normalised" and norm is None else ok).append(name)
    return ok, left


def default_row(policy: str = "time") -> str:
    """The row of ``policy`` whose weighting is the strategies' default for private data."""
    w = default_weighting()
    label = {"samples": "samples", "data-size": "data-size"}.get(w, "normalised")
    return f"{policy}-{label}"


def spec_of(name: str, task: str, profiles: tuple, seed: int, alpha: float, rounds: int, budget: int, clock: str,
            per_sample_s: float | None, scenario: str, kind: str = "noniid", lr: float | None = None,
            cap: int = ROUND_CAP) -> RunSpec:
    """The run of row ``name`` (see :data:`ROWS`); ``rounds`` are Equal + FedAvg's.

    Equal + FedAvg runs ``rounds`` rounds. Every other row is a budgeted run (:func:`budgeted` fills in
    its time budget and target from Equal + FedAvg's run of the same seed): at least ``rounds`` rounds,
    at most ``cap × rounds``.
    """
    row = ROWS[name]
    floor = max(1, int(math.ceil(row.floor * budget / len(profiles)))) if row.floor else 1
    # A row on the strategies' default weighting is another run when that default changes: the name says which.
    label = f"a{alpha:g}-{name}" + (f"-w{default_weighting()}" if row.weighting is None else "")
    reference = name == "equal-fedavg"
    return RunSpec(row.policy, task, profiles, seed=seed, rounds=rounds if reference else cap * rounds, budget=budget,
                   clock=clock, per_sample_s=per_sample_s, label=label if reference else f"{label}-eqtime",
                   partitioner="dirichlet", alpha=alpha, weighting=row.weighting, allow_cycling=row.cycling,
                   inner=row.inner, proximal_mu=PROX_MU if row.inner == "fedprox" else 0.0, min_quota=floor,
                   group_eval=True, lr=lr, options=row.options, min_rounds=0 if reference else rounds,
                   meta={"kind": kind, "scenario": scenario, "alpha": alpha, "row": name, "equal_rounds": rounds})


def reference_key(spec: RunSpec) -> tuple:
    """What pairs a run with its Equal + FedAvg run: (kind, task, scenario, α, seed)."""
    return spec.meta["kind"], spec.task, spec.meta["scenario"], float(spec.meta["alpha"]), spec.seed


def budgeted(spec: RunSpec, equal_rows: pd.DataFrame, metric: str, higher: bool) -> RunSpec:
    """``spec`` with the time budget and target of its Equal + FedAvg run (``equal_rows``: that run's rows).

    Budget: Equal + FedAvg's cumulative virtual time after its last round (equal time). Target: its final
    metric − :data:`ACC_SLACK` (weather: × :data:`MSE_SLACK`). The run stops at the first evaluation from
    round ``min_rounds`` (Equal's rounds) on that reaches either: its time and energy to the target are
    then what a run to the full budget would give, and its round ``min_rounds`` is the equal-rounds row.
    """
    import dataclasses

    if spec.meta["row"] == "equal-fedavg":
        return spec
    eq = equal_rows.sort_values("round")
    final = float(eq[metric].iloc[-1])
    return dataclasses.replace(spec, time_budget_s=float(eq["virtual_time_s"].iloc[-1]),
                               stop_target=final - ACC_SLACK if higher else final * MSE_SLACK, stop_higher=higher)


def rows_at(args: Any, k: int) -> list[str]:
    """The rows run at the ``k``-th α: all asked rows at the first, :data:`LATER_ALPHA_ROWS` of them after."""
    return list(args.noniid_rows) if k == 0 else [r for r in args.noniid_rows if r in LATER_ALPHA_ROWS]


def plan(args: Any, per_sample: dict[str, float], scenario_profiles: Any) -> tuple[list[RunSpec], list[RunSpec]]:
    """``(modelled-clock runs, measured-clock runs)`` of the section (heaviest task first)."""
    units, measured = [], []
    for task in args.noniid_tasks:
        for scenario in args.scenarios:
            for k, alpha in enumerate(args.noniid_alphas):
                names = rows_at(args, k)
                for seed in range(args.noniid_seeds):
                    profiles = scenario_profiles(scenario, seed)
                    for name in names:
                        units.append(spec_of(name, task, profiles, seed, alpha, args.noniid_rounds[task], args.budget,
                                             "modelled", per_sample[task], scenario, lr=args.noniid_lr.get(task),
                                             cap=args.noniid_round_cap))
    if args.noniid_measured_seeds:
        alpha = args.noniid_alphas[0]
        for seed in range(args.noniid_measured_seeds):
            profiles = scenario_profiles(args.measured_scenario, seed)
            names = [n for n in args.noniid_measured_rows]
            k = seed % len(names)
            for name in names[k:] + names[:k]:  # the order rotates per seed, as in the IID measured section
                task = args.noniid_measured_task
                measured.append(spec_of(name, task, profiles, seed, alpha, args.noniid_rounds[task],
                                        args.budget, "measured", None, args.measured_scenario,
                                        kind="noniid-measured", lr=args.noniid_lr.get(task),
                                        cap=args.noniid_round_cap))
    # The first α before the others (the targets are stated for it), the heaviest task first within one α.
    order = {t: per_sample.get(t, 1e-4) for t in args.noniid_tasks}
    first = args.noniid_alphas[0]
    return sorted(units, key=lambda u: (u.alpha != first, -order.get(u.task, 1e-4))), measured


# --------------------------------------------------------------------------- per-run figures
def _reach(run: pd.DataFrame, metric: str, target: float, higher: bool) -> pd.Series | None:
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
        eq_hit = _reach(eq, metric, target, higher)
        eq_t = float(eq_hit["virtual_time_s"]) if eq_hit is not None else math.nan
        eq_e = float(eq_hit["virtual_energy_j"]) if eq_hit is not None else math.nan
        for name, run in group.groupby("row", sort=False):
            run = run.sort_values("round")
            hit = _reach(run, metric, target, higher)
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


# --------------------------------------------------------------------------- page
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
    axes[0].set(xlabel="floor on a quota (share of the equal split)", ylabel="time to target × Equal + FedAvg (median, reached)",
                title="Time to target vs the floor (virtual clock)")
    axes[1].set(xlabel="floor on a quota (share of the equal split)",
                ylabel="final worst group − Equal's (points; weather: % error)", title="Worst class / client at equal rounds")
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
    L += ["", f"Every node holds one Dirichlet(α) partition of the task's training data (Flower Datasets' "
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
              "rotated per seed. The last column is the same row's time × Equal on the modelled clock (same seeds).", ""]
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


def _run_paired(units: Sequence[RunSpec], jobs: int, work: Path, metric_of: dict[str, str],
                higher_of: dict[str, bool], key: str) -> pd.DataFrame:
    """Equal + FedAvg's runs first, then every other run with its budget and target from them (:func:`budgeted`).

    A run whose Equal + FedAvg run is not among ``units`` cannot be budgeted and is left out.
    """
    from experiments import reproduce

    ref = [u for u in units if u.meta["row"] == "equal-fedavg"]
    eq_rows = reproduce.run_units(ref, jobs, work, reuse_key=key)
    by_key: dict[tuple, pd.DataFrame] = {}
    if len(eq_rows):
        for u in ref:
            k = reference_key(u)
            m = (eq_rows["kind"] == k[0]) & (eq_rows["task"] == k[1]) & (eq_rows["scenario"] == k[2]) \
                & np.isclose(eq_rows["alpha"], k[3]) & (eq_rows["seed"] == k[4]) & (eq_rows["row"] == "equal-fedavg")
            by_key[k] = eq_rows[m]
    rest = [budgeted(u, by_key[reference_key(u)], metric_of[u.task], higher_of[u.task])
            for u in units if u.meta["row"] != "equal-fedavg" and reference_key(u) in by_key]
    other = reproduce.run_units(rest, jobs, work, reuse_key=f"{key} (to equal time)")
    return pd.concat([eq_rows, other], ignore_index=True)


def run(args: Any, work: Path, per_sample: dict[str, float], metric_of: dict[str, str], higher_of: dict[str, bool],
        figs: Path, provenance: Sequence[str]) -> list[str]:
    """Run (or reuse from ``work``) the section's runs, write its CSVs under ``figs``, return its page lines."""
    import time

    from experiments import reproduce

    started = time.perf_counter()
    units, measured_units = plan(args, per_sample, reproduce.scenario_profiles)
    missing: list[RunSpec] = []
    if getattr(args, "noniid_finished_only", False):  # the page from what has run; the rest is listed as missing
        missing = [u for u in units + measured_units if not reproduce.unit_path(work, u).exists()]
        units = [u for u in units if u not in missing]
        measured_units = [u for u in measured_units if u not in missing]
    print(f"[reproduce] non-IID: {len(units)} runs ({len(args.noniid_rows)} rows × {len(args.noniid_tasks)} tasks × "
          f"{len(args.scenarios)} scenarios × {len(args.noniid_alphas)} α × {args.noniid_seeds} seeds) + "
          f"{len(measured_units)} on the measured clock; {args.jobs} worker(s); Equal + FedAvg first (every other "
          "row runs to its time)", flush=True)
    rows = _run_paired(units, args.jobs, work, metric_of, higher_of, "non-IID")
    if measured_units:
        if any(not reproduce.unit_path(work, u).exists() for u in measured_units):
            reproduce.calibrate(args.noniid_measured_task)  # warm-up: torch's lazy set-up is not a round's cost
        rows = pd.concat([rows, _run_paired(measured_units, 1, work, metric_of, higher_of, "non-IID measured")],
                         ignore_index=True)
    figs.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows, metric_of, higher_of)
    summary.to_csv(figs / "noniid.csv", index=False)
    measured = summarise(rows, metric_of, higher_of, kind="noniid-measured") if measured_units else None
    if measured is not None:
        measured.to_csv(figs / "noniid-measured.csv", index=False)
    wall = time.perf_counter() - started
    reused = sum(v for k, v in reproduce.REUSED.items() if k.startswith("non-IID"))
    prov = [*provenance, f"- **Wall time of this section**: {reproduce.fmt_s(wall)}"
            + (f" (it reused {reused} finished runs from `--work`)" if reused else "") + "."]
    if missing:
        groups: dict[tuple, int] = {}
        for u in missing:
            key = (u.meta["kind"], u.task, u.meta["alpha"], ROWS[u.meta["row"]].label)
            groups[key] = groups.get(key, 0) + 1
        prov.append(f"- **Not run** (`--noniid-finished-only`: this page shows the runs that finished; {len(missing)} "
                    "of the plan did not run, for lack of machine time): "
                    + "; ".join(f"{lab} on {task}, α = {a:g}{' (measured clock)' if kind != 'noniid' else ''}: "
                                f"{n} runs" for (kind, task, a, lab), n in sorted(groups.items(), key=str)) + ".")
    _, left = available_rows(list(ROWS))
    return section(args, summary, measured, metric_of, higher_of, figs, [n for n in left if n in ROWS], prov)
