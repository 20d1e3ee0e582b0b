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

Files: this module plans and runs the section (:func:`plan`, :func:`budgeted`, :func:`run`); the
rows are :mod:`experiments.noniid_rows`, the per-run figures and target checks
:mod:`experiments.noniid_figures` (:func:`summarise`, :func:`target_checks`), the page's lines
:mod:`experiments.noniid_page` (:func:`section`, :func:`splice`), the section's parts (each with its own
markers and CSV, rendered on its own) :mod:`experiments.noniid_parts`. Their public names are
re-exported here.

Cost
----
``rows × tasks × scenarios × alphas × seeds`` runs of ``rounds × budget`` samples each
(the ETA is printed); the measured-clock runs go one at a time after them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.inprocess import RunSpec, calibrate, fmt_s
from experiments.noniid_figures import (
    ACC_SLACK,
    MSE_SLACK,
    TARGET_RATIO,
    WORST_LIMIT,
    summarise,
    target_checks,
)
from experiments.noniid_page import (
    MARK_END,
    MARK_START,
    floor_rows,
    floor_table,
    plot_floor,
    run_table,
    section,
    splice,
)
from experiments.noniid_parts import PARTS, part_section
from experiments.noniid_rows import (
    ALPHAS,
    FLOORS,
    LATER_ALPHA_ROWS,
    MAIN_ROWS,
    MEASURED_ROWS,
    PROX_MU,
    QUICK_ROWS,
    RESCALE_CAPS,
    ROWS,
    Row,
    available_rows,
    default_row,
    default_weighting,
    normalised_weighting,
    rescale_cap_option,
    step_floor_of,
    strategy_defaults,
)
from experiments.reproduce_runs import REUSED, run_units, scenario_profiles, unit_path

__all__ = ["Row", "ROWS", "FLOORS", "RESCALE_CAPS", "normalised_weighting", "default_weighting", "rescale_cap_option",
           "available_rows", "plan", "budgeted", "summarise", "target_checks", "floor_table", "section",
           "MARK_START", "MARK_END", "ACC_SLACK", "MSE_SLACK", "WORST_LIMIT", "TARGET_RATIO", "run_table",
           "floor_rows", "plot_floor", "splice", "ALPHAS", "PROX_MU", "QUICK_ROWS", "MEASURED_ROWS",
           "LATER_ALPHA_ROWS", "MAIN_ROWS", "default_row", "ROUND_CAP", "spec_of", "reference_key", "rows_at", "run"]


ROUND_CAP = 4  # a budgeted run's round cap: this many times Equal + FedAvg's rounds


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
    # A step floor makes a row another run too, whether the row names it or a default set it; labels have said it
    # since min-energy's default had one (rows named "-steps{k}" say it already).
    steps = step_floor_of(row)
    steps = 0 if f"steps{steps}" in name.split("-") else steps
    # So is a normalised row on the strategies' default objective once that is not the data size it was.
    objective = None
    if "objective" not in dict(row.options) and (row.weighting or default_weighting()) == normalised_weighting():
        objective = strategy_defaults().get("objective", "data-size")
    label = f"a{alpha:g}-{name}" + (f"-w{default_weighting()}" if row.weighting is None else "") \
        + (f"-steps{steps}" if steps else "") + (f"-o{objective}" if objective not in (None, "data-size") else "")
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


def _run_paired(units: Sequence[RunSpec], jobs: int, work: Path, metric_of: dict[str, str],
                higher_of: dict[str, bool], key: str) -> pd.DataFrame:
    """Equal + FedAvg's runs first, then every other run with its budget and target from them (:func:`budgeted`).

    A run whose Equal + FedAvg run is not among ``units`` cannot be budgeted and is left out.
    """
    ref = [u for u in units if u.meta["row"] == "equal-fedavg"]
    eq_rows = run_units(ref, jobs, work, reuse_key=key)
    by_key: dict[tuple, pd.DataFrame] = {}
    if len(eq_rows):
        for u in ref:
            k = reference_key(u)
            m = (eq_rows["kind"] == k[0]) & (eq_rows["task"] == k[1]) & (eq_rows["scenario"] == k[2]) \
                & np.isclose(eq_rows["alpha"], k[3]) & (eq_rows["seed"] == k[4]) & (eq_rows["row"] == "equal-fedavg")
            by_key[k] = eq_rows[m]
    rest = [budgeted(u, by_key[reference_key(u)], metric_of[u.task], higher_of[u.task])
            for u in units if u.meta["row"] != "equal-fedavg" and reference_key(u) in by_key]
    other = run_units(rest, jobs, work, reuse_key=f"{key} (to equal time)")
    return pd.concat([eq_rows, other], ignore_index=True)


def run(args: Any, work: Path, per_sample: dict[str, float], metric_of: dict[str, str], higher_of: dict[str, bool],
        figs: Path, provenance: Sequence[str], part: str = "main") -> list[str]:
    """Run (or reuse from ``work``) one part's runs, write its CSVs under ``figs``, return its page lines.

    ``part``: a key of :data:`experiments.noniid_parts.PARTS`; ``args`` are that part's
    (:func:`experiments.noniid_parts.part_args`). Parts share ``work``: a run two parts plan runs once.
    """
    import time

    started = time.perf_counter()
    units, measured_units = plan(args, per_sample, scenario_profiles)
    missing: list[RunSpec] = []
    if getattr(args, "noniid_finished_only", False):  # the page from what has run; the rest is listed as missing
        missing = [u for u in units + measured_units if not unit_path(work, u).exists()]
        units = [u for u in units if u not in missing]
        measured_units = [u for u in measured_units if u not in missing]
        if not units:
            raise SystemExit(f"--noniid-finished-only: none of the {len(missing)} planned non-IID runs has finished "
                             f"under {work}; run without --noniid-finished-only first (or point --work at the runs)")
    key = "non-IID" if part == "main" else f"non-IID [{part}]"  # REUSED's keys: the page's header skips "non-IID…"
    print(f"[reproduce] {key}: {len(units)} runs ({len(args.noniid_rows)} rows × {len(args.noniid_tasks)} tasks × "
          f"{len(args.scenarios)} scenarios × {len(args.noniid_alphas)} α × {args.noniid_seeds} seeds) + "
          f"{len(measured_units)} on the measured clock; {args.jobs} worker(s); Equal + FedAvg first (every other "
          "row runs to its time)", flush=True)
    rows = _run_paired(units, args.jobs, work, metric_of, higher_of, key)
    if measured_units:
        if any(not unit_path(work, u).exists() for u in measured_units):
            calibrate(args.noniid_measured_task)  # warm-up: torch's lazy set-up is not a round's cost
        rows = pd.concat([rows, _run_paired(measured_units, 1, work, metric_of, higher_of, "non-IID measured")],
                         ignore_index=True)
    figs.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows, metric_of, higher_of)
    summary.to_csv(figs / PARTS[part].csv, index=False)
    measured = summarise(rows, metric_of, higher_of, kind="noniid-measured") if measured_units else None
    if measured is not None:
        measured.to_csv(figs / "noniid-measured.csv", index=False)
    wall = time.perf_counter() - started
    keys = [key, *(["non-IID measured"] if measured_units else [])]
    reused = sum(REUSED.get(k, 0) + REUSED.get(f"{k} (to equal time)", 0) for k in keys)
    prov = [*provenance, f"- **Wall time of this {'section' if part == 'main' else 'part'}**: {fmt_s(wall)}"
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
    if part != "main":
        return part_section(part, args, summary, metric_of, higher_of, args.noniid_left_out, prov)
    _, left = available_rows(list(ROWS))
    return section(args, summary, measured, metric_of, higher_of, figs, [n for n in left if n in ROWS], prov)
