"""Every result of the results page from one command: ``python -m experiments.reproduce``.

Contract
--------
Runs, and writes ``<out>/results.md`` plus PNG plots and the per-run CSV under ``<out>/results/``:

1. **PMA**: every policy of ``flwr_adaptive.strategies.registry.POLICY_NAMES`` (Equal, Static,
   Oort-like, FedAsync, Time-only, Low-energy, Energy-only and whatever controller policies the
   registry holds, e.g. min-energy) on every task (MNIST, weather regression, sentiment), on two
   device scenarios (the cited 11-board testbed; a wide fleet whose slowdowns are lognormal,
   σ = 1), for ``--seeds`` seeds. Each run is Flower's strategy driven in this process
   (:mod:`experiments.inprocess`): real training, the strategies' own quotas, screening,
   aggregation and accounting. Tables: mean and 95 % interval (Student t over seeds) of makespan,
   total and idle energy, busy-time CV, time and energy to the target loss (Equal's holdout loss
   after 80 % of its rounds, per seed), final holdout metric; the change against Equal per seed.
2. **w_e sweep**: the weighted controller with ``w_t = 1 − w_e`` for ``w_e ∈ {0, 0.125, …, 1}`` on
   both scenarios, next to Equal and every controller policy that is not a weighting (min-energy):
   energy and makespan with intervals, one plot per scenario marking the minimum.
3. **Convergence**: holdout loss against virtual time and against energy, per policy and task.
4. **DDP** (``experiments.ddp_benchmark``, real gloo ranks) and **HFL-DDP** (``experiments.hfl``,
   ``flwr run apps/hfl``): per-round compute CV inside the synchronized group, Equal vs adaptive
   (vs EMA batch sizing for DDP; vs Min-energy for HFL), over several seeds, in a moderate and a
   wide spread; HFL per silo and over the silos, mean and 95 % interval over seeds. The CV is
   averaged from round 3 and, in a second column, from round 7 (after the controller's first 6
   rounds; both commands run 10 rounds by default).
5. **Overhead**: the controller's and the strategy's own time per round, as a share of the
   round's wall time and of its virtual makespan, measured in the PMA runs.
6. **PMA on the measured clock**: one task and scenario (default MNIST, testbed), the paper's
   policies plus Static and Min-energy, ``--measured-seeds`` paired seeds, device time from each
   training call's CPU time. These runs go one at a time in this process after the modelled ones,
   seed by seed with the policies' order rotated, after an untimed warm-up; the section sets their
   Δ vs Equal next to the modelled clock's for the same seeds and says whether the paired
   comparison keeps its sign on this machine.

Pairing and clocks: within one invocation every policy of a (task, scenario, seed) sees the same
data partitions, initial model, sample order and device jitter draws. The default
``--clock modelled`` makes device time ``per_sample_s(task) × samples × slowdown × jitter``, the
per-sample cost calibrated once at start (printed, and written to the page), so comparisons are
deterministic on a shared machine; ``--clock measured`` uses each training call's CPU time instead.
The same PMA comparison through ``flwr run apps/pma`` (one Flower run per policy) is
``python -m experiments.baselines``. DDP and HFL use their own clocks (stated on the page).

``--quick``: one task, two seeds, few rounds, the measured-clock section on that task with the
paper's four policies, no DDP/HFL (the test suite runs it).

Cost
----
The training (``rounds × budget`` samples per PMA run), parallel over ``--jobs`` processes, plus
the measured-clock runs one at a time, DDP and HFL (≈ 50 s per ``flwr run`` of apps/hfl: policies ×
seeds × 2 settings of them). Progress: one line per finished run with the number left and an ETA.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from experiments.inprocess import RunSpec, calibrate, fmt_s, idle_model_note, run_pma
from flwr_adaptive.controller import POLICIES
from flwr_adaptive.devices import DeviceProfile, get_testbed

REPO = Path(__file__).resolve().parent.parent
TASKS = ("mnist", "weather", "sentiment")
SCENARIOS = ("testbed", "wide")
SWEEP_W = tuple(i / 8 for i in range(9))
WIDE_SIGMA = 1.0
JITTER_SIGMA = 0.05
TARGET_AT = 0.8
FROM_ROUND = 3  # busy-time CV and DDP/HFL CV are averaged from this round on (the controller has learned)
SETTLED_ROUND = 7  # DDP/HFL CV "after 6 rounds": a second column from this round on, when the runs reach it
REUSED: dict[str, int] = {}  # finished runs this invocation took from --work instead of running them
FEDSCALE_URL = ("https://github.com/SymbioticLab/FedScale/blob/27d7cd3d81ffcbcfe8716758aa8d67f0b11a982c/"
                "fedscale/cloud/internal/client_metadata.py")

# The measured-clock section: the paper's policies, then Static and Min-energy (the registry decides what exists).
MEASURED_POLICIES = ("equal", "time", "low-energy", "energy", "static", "min-energy")
# The HFL-DDP section: no adaptation, the adaptive default, the energy-optimal split.
HFL_POLICIES = ("equal", "time", "min-energy")
HFL_STEPS = 10  # DDP steps per silo round; the HFL strategy's smallest rank quota is one sample per step
# Policy order on the page: no adaptation, the baselines, the paper's policies, then the rest.
_FIRST = ("equal", "static", "oort", "fedasync", "time", "low-energy", "energy")


def policy_names() -> list[str]:
    """Every policy the strategy registry builds, in page order (new ones are picked up here)."""
    from flwr_adaptive.strategies.registry import POLICY_NAMES

    return [p for p in _FIRST if p in POLICY_NAMES] + [p for p in POLICY_NAMES if p not in _FIRST]


def label(policy: str) -> str:
    from flwr_adaptive.strategies.registry import LABELS

    return LABELS.get(policy, policy)


def extra_controller_policies() -> list[str]:
    """Controller policies that are not a time/energy weighting (e.g. min-energy): sweep companions."""
    return [name for name, p in POLICIES.items() if p.objective != "weighted"]


# --------------------------------------------------------------------------- scenarios
def scenario_profiles(name: str, seed: int) -> tuple[DeviceProfile, ...]:
    """The devices of scenario ``name`` for ``seed``.

    ``testbed``: the 11 cited boards (:func:`flwr_adaptive.devices.get_testbed`), jitter σ 0.05.
    ``wide``: 11 devices whose slowdowns are ``median(testbed) × exp(σ·z)``, ``z ~ N(0, 1)``, σ = 1,
    drawn per seed (each seed is another fleet), with the watts of the testbed's boards in order.
    """
    testbed = get_testbed(jitter_sigma=JITTER_SIGMA)
    if name == "testbed":
        return testbed
    if name == "wide":
        rng = np.random.default_rng([20221, seed])
        median = float(np.median([p.slowdown for p in testbed]))
        slow = median * np.exp(WIDE_SIGMA * rng.standard_normal(len(testbed)))
        return tuple(DeviceProfile(f"wide-{i}", p.arch, slowdown=round(float(s), 4), active_w=p.active_w,
                                   idle_w=p.idle_w, jitter_sigma=JITTER_SIGMA, model=f"lognormal σ={WIDE_SIGMA:g}")
                     for i, (p, s) in enumerate(zip(testbed, slow)))
    raise ValueError(f"unknown scenario {name!r}; choose from {SCENARIOS}")


# --------------------------------------------------------------------------- statistics
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


# --------------------------------------------------------------------------- units of work
def _unit_name(spec: RunSpec) -> str:
    what = spec.label or spec.policy
    return f"{spec.meta['kind']}-{spec.task}-{spec.meta['scenario']}-s{spec.seed}-{what}".replace("/", "_")


def _run_unit(spec: RunSpec) -> tuple[pd.DataFrame, float]:
    """One run in a worker process: its per-round rows tagged with task, scenario, seed."""
    result = run_pma(spec)
    rows = result.rounds
    for key, value in spec.meta.items():  # kind, scenario (and the non-IID runs' alpha, row)
        rows[key] = value
    rows["task"], rows["seed"] = spec.task, spec.seed
    rows["w_e"] = np.nan if spec.w_energy is None else spec.w_energy
    rows["budget"] = spec.budget
    return rows, result.wall_s


def plan_units(args: argparse.Namespace, per_sample: dict[str, float]) -> list[RunSpec]:
    """Every PMA and sweep run of this invocation (heaviest first)."""
    units = []
    for task in args.tasks:
        for scenario in args.scenarios:
            for seed in range(args.seeds):
                profiles = scenario_profiles(scenario, seed)
                for policy in args.policies:
                    units.append(RunSpec(policy, task, profiles, seed=seed, rounds=args.rounds, budget=args.budget,
                                         clock=args.clock, per_sample_s=per_sample.get(task),
                                         meta={"kind": "pma", "scenario": scenario}))
    train_sweep = args.clock == "measured"
    for scenario in args.scenarios:
        for seed in range(args.seeds):
            profiles = scenario_profiles(scenario, seed)
            common = dict(seed=seed, rounds=args.rounds, budget=args.budget, clock=args.clock,
                          per_sample_s=per_sample.get(args.sweep_task), train=train_sweep)
            for w in SWEEP_W:
                units.append(RunSpec("time", args.sweep_task, profiles, w_energy=w, label=f"w_e={w:g}",
                                     meta={"kind": "sweep", "scenario": scenario}, **common))
            for policy in ["equal", *extra_controller_policies()]:
                units.append(RunSpec(policy, args.sweep_task, profiles, meta={"kind": "sweep", "scenario": scenario},
                                     **common))
    cost = {t: per_sample.get(t, 1e-4) for t in args.tasks}
    return sorted(units, key=lambda u: -(cost.get(u.task, 1e-4) if u.train else 1e-6))


def plan_measured_units(args: argparse.Namespace) -> list[RunSpec]:
    """The runs of the measured-clock section, in the order they run (one process, one after the other).

    Seed by seed, every policy of the seed before the next seed, so that a change of the machine's
    load over the section falls on all policies of a seed alike; the policies' order rotates by one
    per seed, so no policy always runs first (on a cold cache) or last.
    """
    if not args.measured:
        return []
    profiles_of = {seed: scenario_profiles(args.measured_scenario, seed) for seed in range(args.measured_seeds)}
    units = []
    for seed in range(args.measured_seeds):
        k = seed % len(args.measured_policies)
        for policy in args.measured_policies[k:] + args.measured_policies[:k]:
            units.append(RunSpec(policy, args.measured_task, profiles_of[seed], seed=seed, rounds=args.measured_rounds,
                                 budget=args.budget, clock="measured",
                                 meta={"kind": "measured", "scenario": args.measured_scenario}))
    return units


def _unit_cost(spec: RunSpec) -> float:
    """Relative cost for the ETA: training seconds on the modelled clock, plus a fixed part per round."""
    # A budgeted run (experiments.noniid) stops between its min_rounds and its cap: guess twice the minimum.
    rounds = min(spec.rounds, 2 * spec.min_rounds) if spec.min_rounds else spec.rounds
    train = (spec.per_sample_s or 2e-4) * rounds * spec.budget if spec.train else 0.0
    return train + 0.05 * rounds


def unit_path(work: Path, spec: RunSpec) -> Path:
    """Where a finished run of ``spec`` is kept in ``work`` (a rerun reuses it)."""
    return work / "units" / f"{_unit_name(spec)}.csv"


def run_units(units: list[RunSpec], jobs: int, work: Path, on_progress: Any = None,
              reuse_key: str = "pma and sweep") -> pd.DataFrame:
    """Run (or, when its file exists in ``work``, reuse) every unit; progress lines with an ETA."""
    done_dir = work / "units"
    done_dir.mkdir(parents=True, exist_ok=True)
    frames, todo = [], []
    for spec in units:
        path = unit_path(work, spec)
        if path.exists():
            frames.append(pd.read_csv(path))
        else:
            todo.append(spec)
    REUSED[reuse_key] = len(frames)
    if frames:
        print(f"[reproduce] reusing {len(frames)} finished runs from {done_dir} (--fresh to rerun them)", flush=True)
    total_cost = sum(_unit_cost(u) for u in todo)
    done_cost, started = 0.0, time.perf_counter()

    def finished(k: int, spec: RunSpec, rows: pd.DataFrame, wall: float) -> None:
        nonlocal done_cost
        rows.to_csv(unit_path(work, spec), index=False)
        frames.append(rows)
        done_cost += _unit_cost(spec)
        elapsed = time.perf_counter() - started
        eta = elapsed * (total_cost - done_cost) / done_cost if done_cost > 0 else math.nan
        what = spec.label or label(spec.policy)
        if on_progress is not None:
            on_progress()
        print(f"[reproduce] {spec.meta['kind']} run {k}/{len(todo)} done: {spec.task} / {spec.meta['scenario']} / "
              f"seed {spec.seed} / {what} in {wall:.1f} s (wall); {len(todo) - k} left, ETA {fmt_s(eta)}", flush=True)

    if jobs <= 1:
        for k, spec in enumerate(todo, 1):
            rows, wall = _run_unit(spec)
            finished(k, spec, rows, wall)
    elif todo:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(_run_unit, spec): spec for spec in todo}
            try:
                for k, fut in enumerate(as_completed(futures), 1):
                    rows, wall = fut.result()
                    finished(k, futures[fut], rows, wall)
            except BaseException:  # interrupted or a run failed: stop the workers now (finished runs are kept)
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --------------------------------------------------------------------------- per-run figures
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


# --------------------------------------------------------------------------- plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_convergence(rows: pd.DataFrame, task: str, scenarios: Sequence[str], policies: Sequence[str],
                     path: Path) -> Path:
    """Holdout loss vs virtual time and vs energy: mean over seeds per round, 95 % band of the loss."""
    plt = _plt()
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(12, 4.2 * len(scenarios)), squeeze=False)
    pma = rows[(rows["kind"] == "pma") & (rows["task"] == task)]
    for i, scenario in enumerate(scenarios):
        sub = pma[pma["scenario"] == scenario]
        for policy in policies:
            run = sub[sub["policy"] == policy]
            if run.empty:
                continue
            g = run.groupby("round")
            x_t, x_e = g["virtual_time_s"].mean(), g["virtual_energy_j"].mean()
            stats = [mean_ci(v) for _, v in g["loss"]]
            m = np.array([s[0] for s in stats])
            h = np.nan_to_num(np.array([s[1] for s in stats]))
            for ax, x in ((axes[i, 0], x_t), (axes[i, 1], x_e)):
                line, = ax.plot(x.to_numpy(), m, marker=".", label=label(policy))
                ax.fill_between(x.to_numpy(), m - h, m + h, color=line.get_color(), alpha=0.15)
        axes[i, 0].set(title=f"{task}, {scenario}: holdout loss vs virtual time", xlabel="virtual seconds (cumulative)",
                       ylabel="holdout loss")
        axes[i, 1].set(title=f"{task}, {scenario}: holdout loss vs energy", xlabel="joules, active + idle (cumulative)",
                       ylabel="holdout loss")
        for ax in axes[i]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_sweep(sweep: pd.DataFrame, scenario: str, path: Path) -> Path:
    """Total energy and makespan per w_e (mean, 95 % bars), the minimum marked, companions as lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax2 = ax.twinx()
    sub = sweep[sweep["scenario"] == scenario]
    curve = sub[sub["w_e"].notna()]
    stats = curve.groupby("w_e").agg(list)
    w = stats.index.to_numpy()
    e = [mean_ci(v) for v in stats["energy_j"]]
    t = [mean_ci(v) for v in stats["makespan_s"]]
    em, eh = np.array([x[0] for x in e]), np.nan_to_num([x[1] for x in e])
    tm, th = np.array([x[0] for x in t]), np.nan_to_num([x[1] for x in t])
    ax.errorbar(w, em, yerr=eh, marker="o", color="tab:green", capsize=3, label="total energy (left)")
    ax2.errorbar(w, tm, yerr=th, marker="s", color="tab:blue", capsize=3, alpha=0.7, label="makespan (right)")
    k = int(np.argmin(em))
    ax.scatter([w[k]], [em[k]], s=180, facecolors="none", edgecolors="red", linewidths=2, zorder=5,
               label=f"minimum energy: w_e = {w[k]:g}")
    for policy, style in (("equal", ":"), *((p, "--") for p in extra_controller_policies())):
        comp = sub[(sub["policy"] == policy) & sub["w_e"].isna()]
        if len(comp):
            ax.axhline(comp["energy_j"].mean(), linestyle=style, color="gray" if policy == "equal" else "red",
                       label=f"{label(policy)}: energy {comp['energy_j'].mean():.4g} J, makespan "
                             f"{comp['makespan_s'].mean():.3g} s")
    ax.set(xlabel="w_e (w_t = 1 − w_e)", ylabel="total energy over the run, J (virtual clock)",
           title=f"w_e sweep, {scenario} scenario (mean over seeds, 95 % interval)")
    ax2.set_ylabel("makespan over the run, s (virtual clock)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper center")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_cv(curves: dict[str, dict[str, list[list[float]]]], title: str, path: Path) -> Path:
    """Per-round CV per policy (mean over seeds, 95 % band), one panel per setting."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    for ax, (setting, by_policy) in zip(axes[0], curves.items()):
        for policy, runs in by_policy.items():
            n = min(len(r) for r in runs)
            arr = np.array([r[:n] for r in runs], dtype=float)
            stats = [mean_ci(arr[:, j]) for j in range(n)]
            m = np.array([s[0] for s in stats])
            h = np.nan_to_num([s[1] for s in stats])
            x = np.arange(1, n + 1)
            line, = ax.plot(x, m, marker="o", label=policy)
            ax.fill_between(x, m - h, m + h, color=line.get_color(), alpha=0.15)
        ax.set(title=f"{title}: {setting}", xlabel="round", ylabel="CV of compute time")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- DDP and HFL (subprocesses)
def lognormal_quartile_slowdowns(ranks: int = 4, sigma: float = WIDE_SIGMA, fastest: float = 2.0) -> list[float]:
    """Slowdowns at the mid-quantiles (k − ½)/ranks of a lognormal σ, scaled so the fastest is ``fastest``."""
    from scipy.stats import norm

    z = norm.ppf((np.arange(ranks) + 0.5) / ranks)
    s = np.exp(sigma * z)
    return [round(float(v), 2) for v in s / s.min() * fastest]


def run_ddp(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """``experiments.ddp_benchmark`` per seed and setting; per-round compute CV per policy."""
    settings = {"moderate (slowdowns 2, 3, 4, 6)": [2.0, 3.0, 4.0, 6.0],
                f"wide (lognormal σ={WIDE_SIGMA:g} mid-quantiles)": lognormal_quartile_slowdowns()}
    out: dict[str, Any] = {"settings": settings, "curves": {}, "rows": [], "clock": None, "failed": []}
    REUSED["DDP"] = 0
    total, k, started = len(settings) * args.ddp_seeds, 0, time.perf_counter()
    for setting, slowdowns in settings.items():
        out["curves"][setting] = {}
        for seed in range(args.ddp_seeds):
            k += 1
            path = work / f"ddp-{len(out['curves'])}-r{args.ddp_rounds}-b{args.ddp_budget}-s{seed}.json"
            cmd = [sys.executable, "-m", "experiments.ddp_benchmark", "--slowdowns", ",".join(map(str, slowdowns)),
                   "--policies", "equal,time,ema", "--rounds", str(args.ddp_rounds), "--budget", str(args.ddp_budget),
                   "--seed", str(seed), "--json", str(path)]
            if path.exists():
                REUSED["DDP"] += 1
            else:
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.section_timeout)
                if not path.exists():
                    out["failed"].append(f"{setting}, seed {seed}: exit {proc.returncode}: {proc.stderr[-400:]}")
                    print(f"[reproduce] ddp {k}/{total} FAILED ({setting}, seed {seed}); see the page", flush=True)
                    continue
                elapsed = time.perf_counter() - started
                print(f"[reproduce] ddp run {k}/{total} done: {setting}, seed {seed} in {time.perf_counter() - t0:.0f} s "
                      f"(wall); {total - k} left, ETA {fmt_s(elapsed / k * (total - k))}", flush=True)
            data = json.loads(path.read_text())
            for row in data["rounds"]:
                out["rows"].append({"setting": setting, "seed": seed, **{c: row[c] for c in (
                    "policy", "round", "compute CV", "makespan s", "sync-wait share", "clock")}})
                out["clock"] = row["clock"]
            for policy, rows in pd.DataFrame(data["rounds"]).groupby("policy", sort=False):
                out["curves"][setting].setdefault(policy, []).append(list(rows.sort_values("round")["compute CV"]))
    out["command"] = ("python -m experiments.ddp_benchmark --slowdowns S --policies equal,time,ema "
                      f"--rounds {args.ddp_rounds} --budget {args.ddp_budget} --seed K --json F")
    return out


def hfl_settings() -> dict[str, tuple[str, list[str]]]:
    """The HFL-DDP settings: ``{name on the page: (key of the work folder, extra experiments.hfl arguments)}``."""
    return {"moderate (testbed boards)": ("moderate", []),
            f"wide (lognormal σ={WIDE_SIGMA:g} fleet per seed)": ("wide", ["--spread", "wide"])}


def hfl_slowdowns(spread: str, seed: int = 0, silos: int = 3, ranks: str = "2") -> list[list[float]]:
    """The ranks' slowdowns per silo (the app's fleet of ``spread``, its devices taken in turn)."""
    from hfl_app.task import silo_devices  # apps/hfl is on sys.path (experiments/__init__.py)

    return [[max(d.slowdown, 1.0) for d in silo_devices(ranks, pid, spread=spread, seed=seed)]
            for pid in range(silos)]


def rank_cv_rows(ranks: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (round, silo): the CV (population std / mean) of the silo's ranks' compute time."""
    rows = []
    for (rnd, silo), g in ranks.groupby(["round", "partition_id"]):
        t = g["time_s"].to_numpy(dtype=float)
        rows.append({"round": int(rnd), "silo": int(silo),
                     "rank_cv": float(t.std() / t.mean()) if t.mean() > 0 else math.nan,
                     "min_samples": int(g["samples"].min()) if "samples" in g else -1,
                     "clock": str(g["clock"].iloc[0])})
    return rows


def run_hfl(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """``experiments.hfl`` (``flwr run apps/hfl``) per setting and seed; per-round rank CV inside the silos."""
    settings = hfl_settings()
    out: dict[str, Any] = {"settings": settings, "curves": {}, "rows": [], "failed": []}
    REUSED["HFL"] = 0
    policies = ",".join(args.hfl_policies)
    total, k, started, ran = len(settings) * args.hfl_seeds, 0, time.perf_counter(), 0
    for setting, (key, extra) in settings.items():
        out["curves"][setting] = {}
        for seed in range(args.hfl_seeds):
            k += 1
            folder = work / f"hfl-{key}-r{args.hfl_rounds}-{'_'.join(args.hfl_policies)}-s{seed}"
            cmd = [sys.executable, "-m", "experiments.hfl", "--policies", policies, "--rounds", str(args.hfl_rounds),
                   "--steps", str(HFL_STEPS), "--seed", str(seed), *extra, "--out", str(folder)]
            if (folder / "comparison.csv").exists():
                REUSED["HFL"] += 1
            else:
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.section_timeout)
                if not (folder / "comparison.csv").exists():  # (exit 1 also means "a process was left running")
                    out["failed"].append(f"{setting}, seed {seed}: exit {proc.returncode}: "
                                         f"{(proc.stdout + proc.stderr)[-600:]}")
                    print(f"[reproduce] hfl {k}/{total} FAILED ({setting}, seed {seed}); see the page", flush=True)
                    continue
                ran += 1
                elapsed = time.perf_counter() - started
                print(f"[reproduce] hfl run {k}/{total} done: {setting}, seed {seed} in "
                      f"{time.perf_counter() - t0:.0f} s (wall); {total - k} left, ETA "
                      f"{fmt_s(elapsed / ran * (total - k))}", flush=True)
            for policy in args.hfl_policies:
                hist = pd.read_csv(folder / f"history-{policy}.csv").sort_values("round")
                out["curves"][setting].setdefault(label(policy), []).append(list(hist["rank_cv_mean"]))
                for row in rank_cv_rows(pd.read_csv(folder / f"history-{policy}-ranks.csv")):
                    out["rows"].append({"setting": setting, "seed": seed, "policy": label(policy), **row})
    out["command"] = (f"python -m experiments.hfl --policies {policies} --rounds {args.hfl_rounds} --steps {HFL_STEPS} "
                      "--seed K [--spread wide] --out DIR")
    return out


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


def hfl_table(rows: pd.DataFrame, from_round: int = FROM_ROUND,
              settled_round: int = SETTLED_ROUND) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the HFL table: per setting and policy, the rank CV of every silo and their mean.

    A seed's figure is the mean over rounds ≥ ``from_round`` (per silo; "mean over silos": of the
    silos' per-round CVs); each cell is mean ± 95 % interval over seeds. When the runs reach
    ``settled_round``, one more column: the mean over silos from that round on.
    """
    late = rows[rows["round"] >= from_round]
    silos = sorted(late["silo"].unique())
    per_silo = late.groupby(["setting", "policy", "silo", "seed"], sort=False)["rank_cv"].mean().reset_index()
    per_seed = late.groupby(["setting", "policy", "seed"], sort=False)["rank_cv"].mean().reset_index()
    settled = settled_cv(rows, "rank_cv", ("setting", "policy"), settled_round)
    body = []
    for (setting, policy), g in per_seed.groupby(["setting", "policy"], sort=False):
        ps = per_silo[(per_silo["setting"] == setting) & (per_silo["policy"] == policy)]
        extra = [] if settled is None else [fmt_ci(settled.get((setting, policy), []))]
        body.append([setting, policy, *(fmt_ci(ps.loc[ps["silo"] == s, "rank_cv"]) for s in silos),
                     fmt_ci(g["rank_cv"]), *extra, str(g["seed"].nunique())])
    extra = [] if settled is None else [f"mean over silos, rounds ≥ {settled_round}"]
    return ["setting", "policy", *(f"silo {s}" for s in silos), "mean over silos", *extra, "seeds"], body


# --------------------------------------------------------------------------- the page
def machine_line() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    import flwr

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return (f"{cpu or 'unknown CPU'}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, torch {torch.__version__}, flwr {flwr.__version__}; "
            f"load average at start {load:.1f}")


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return sha + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def sweep_verdict(sweep: pd.DataFrame, scenario: str) -> tuple[str, dict[str, Any]]:
    """Where the energy minimum falls and whether energy is non-monotone in w_e (paired per seed).

    Non-monotone is *reproduced* when the mean minimum is interior and, paired per seed, below both
    ends with 95 % confidence; at an end, the paired difference to its neighbour is reported.
    """
    curve = sweep[(sweep["scenario"] == scenario) & sweep["w_e"].notna()]
    table = curve.pivot_table(index="seed", columns="w_e", values="energy_j")
    w = table.columns.to_numpy()
    means = table.mean().to_numpy()
    k = int(np.argmin(means))
    per_seed_argmin = [float(w[i]) for i in table.to_numpy().argmin(axis=1)]
    interior = 0 < k < len(w) - 1

    def paired(i: int, j: int) -> tuple[float, float]:
        m, h, _ = mean_ci((table.iloc[:, i] - table.iloc[:, j]).to_numpy())
        return m, h

    def upper(mh: tuple[float, float]) -> float:
        return mh[0] + (mh[1] if math.isfinite(mh[1]) else 0.0)

    d_lo, d_hi = paired(k, 0), paired(k, len(w) - 1)
    below_both = interior and upper(d_lo) < 0 and upper(d_hi) < 0
    rising = bool(np.all(np.diff(means) > 0))
    facts = {"w_min": float(w[k]), "interior": interior, "below_both": below_both, "rising": rising,
             "per_seed_argmin": per_seed_argmin, "d_vs_0": d_lo, "d_vs_1": d_hi}
    fmt = lambda mh: f"{mh[0]:+.4g} ± {mh[1]:.2g} J"  # noqa: E731
    if below_both:
        text = (f"**Non-monotone: reproduced.** Mean total energy is lowest at w_e = {w[k]:g}, below both ends with "
                f"95 % confidence (paired per seed: {fmt(d_lo)} vs w_e = 0, {fmt(d_hi)} vs w_e = 1).")
    elif interior:
        text = (f"**Non-monotone in the mean only (not significant).** Mean total energy is lowest at w_e = {w[k]:g}, "
                f"but a paired difference to an end does not exclude zero ({fmt(d_lo)} vs w_e = 0, {fmt(d_hi)} vs "
                "w_e = 1).")
    else:
        nb = 1 if k == 0 else len(w) - 2
        text = (f"**Not reproduced.** Mean total energy is lowest at the end w_e = {w[k]:g} "
                f"({fmt(paired(k, nb))} vs its neighbour w_e = {w[nb]:g}, paired)"
                + ("; it rises with every step of w_e." if rising else "."))
    text += f" Per seed the minimum falls at w_e = {', '.join(f'{v:g}' for v in per_seed_argmin)}."
    return text, facts


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
    out: dict[str, Any] = {"policies": {}, "equal_cv": (mean_ci(measured.loc[measured["policy"] == "equal", "cv_busy"]),
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


def measured_section(args: argparse.Namespace, measured: pd.DataFrame, modelled: pd.DataFrame,
                     metric: str, rounds: pd.DataFrame | None = None) -> list[str]:
    """The page's "PMA on the measured clock" section (``measured``/``modelled``: run summaries with Δ;
    ``rounds``: the per-round rows of both, for the spikes of single rounds)."""
    task, scenario = args.measured_task, args.measured_scenario
    mod = modelled[(modelled["task"] == task) & (modelled["scenario"] == scenario)] if len(modelled) else modelled
    mod = mod[mod["seed"].isin(measured["seed"])] if len(mod) else mod
    L = ["## PMA on the measured clock", "",
         f"The same in-process runs on task `{task}`, {scenario} scenario, {args.measured_seeds} paired seeds, "
         f"{args.measured_rounds} rounds of {args.budget} samples, but device time is **measured**: the training "
         "thread's CPU seconds (`time.thread_time`, torch on one thread) × slowdown × jitter, as the Flower App "
         "measures it. The runs go one at a time in this process after the modelled runs are done (no worker of "
         "this command competes with them; other users of the machine may), seed by seed with the policies' order "
         "rotated per seed, after one untimed warm-up call (torch's lazy set-up would otherwise land in the first "
         "run's first round)"
         + (f"; the warm-up's calibration gave {args.measured_per_sample:.3e} host CPU s per sample"
            if getattr(args, "measured_per_sample", None) else "")
         + ". Mean ± 95 % interval over seeds; Δ vs Equal paired per seed."
         + (" The last two columns are the same policy's Δ on the modelled clock, same seeds (from the tables above)."
            if len(mod) else ""), ""]
    hdr = ["policy", "makespan s", "Δ makespan", "total energy J", "Δ energy", "idle energy J", "busy-time CV",
           f"final {metric}", "seeds"] + (["Δ makespan, modelled", "Δ energy, modelled"] if len(mod) else [])
    body = []
    for p in args.measured_policies:
        sp = measured[measured["policy"] == p]
        if sp.empty:
            continue
        row = [label(p), fmt_ci(sp["makespan_s"]), fmt_ci(sp["d_makespan_s"], 3, pct=True), fmt_ci(sp["energy_j"]),
               fmt_ci(sp["d_energy_j"], 3, pct=True), fmt_ci(sp["idle_j"]), fmt_ci(sp["cv_busy"]),
               fmt_ci(sp["final_metric"], 4), str(len(sp))]
        if len(mod):
            mp = mod[mod["policy"] == p]
            row += [fmt_ci(mp["d_makespan_s"], 3, pct=True), fmt_ci(mp["d_energy_j"], 3, pct=True)]
        body.append(row)
    L += _md_table(hdr, body) + [""]
    if not len(mod):
        L += [f"(The modelled-clock tables of this invocation do not include {task} / {scenario}: no comparison.)", ""]
        return L
    L += [measured_verdict(clock_agreement(measured, mod, args.measured_policies),
                           order_agreement(measured, mod, "time", "low-energy")), ""]
    if rounds is not None and len(rounds):
        sp = {k: round_spikes(rounds[rounds["policy"].isin(args.measured_policies)], k, task, scenario)
              for k in ("measured", "pma")}
        if sp["measured"]["worst"] is not None:
            r, p, seed, rnd = sp["measured"]["worst"]
            L += [f"Single rounds (round ≥ 2) whose makespan exceeds {sp['measured']['factor']:g}× the median round of "
                  f"the same run: {sp['measured']['count']} of {sp['measured']['rounds']} on the measured clock (the "
                  f"largest {r:.1f}×: {label(p)}, seed {seed}, round {rnd}), {sp['pma']['count']} of "
                  f"{sp['pma']['rounds']} on the modelled clock. A spike is a training call whose CPU time "
                  "jumps while other processes share the machine (this command does not identify the cause); a "
                  "run's makespan is the sum of its rounds, so one spike can move the run's Δ vs Equal by tens of "
                  "percent and flip a seed's sign. So the verdict above holds for this invocation's machine load: "
                  "rerun this section (`--measured-seeds`, `--skip-hfl --skip-ddp`) on a quiet machine before "
                  "trusting a measured-clock figure.", ""]
    return L


def measured_verdict(agree: dict[str, Any], order: dict[str, tuple]) -> str:
    """The sentence(s) comparing the measured clock with the modelled one (from :func:`clock_agreement`)."""
    pct = lambda mh: f"{100 * mh[0]:+.1f} ± {100 * mh[1]:.1f} %" if math.isfinite(mh[1]) else f"{100 * mh[0]:+.1f} %"  # noqa: E731
    pol = agree["policies"]
    if not pol:
        return "Only Equal ran on the measured clock: nothing to compare."
    disagree = [p for p, f in pol.items()
                if math.isfinite(f["diff_makespan"][1]) and abs(f["diff_makespan"][0]) > f["diff_makespan"][1]]
    unstable = [p for p, f in pol.items() if f["same_sign"][0] < f["same_sign"][1]]
    ratios = [f["width_ratio"] for f in pol.values() if math.isfinite(f["width_ratio"])]
    (cv_m, _, _), (cv_o, _, _) = agree["equal_cv"]
    parts = ["**Measured vs modelled clock, same seeds:** "
             + "; ".join(f"{label(p)} Δ makespan {pct(f['meas_makespan'])} measured vs {pct(f['mod_makespan'])} "
                         f"modelled" for p, f in pol.items()) + "."]
    if ratios:
        parts.append(f"The measured Δ-makespan intervals are {np.median(ratios):.1f}× as wide as the modelled ones "
                     f"(median over policies); Equal's busy-time CV is {cv_m:.3g} measured vs {cv_o:.3g} modelled "
                     "(Equal's quotas are the same on both clocks, so the difference is the host's CPU-time noise).")
    if disagree:
        parts.append("Paired per seed, measured − modelled Δ makespan excludes zero for "
                     + ", ".join(label(p) for p in disagree)
                     + ": there the clocks differ beyond the seeds' noise (the measured clock also sees per-call "
                       "costs that do not scale with a device's samples, and the controller reacts to them).")
    else:
        parts.append("Paired per seed, measured − modelled Δ makespan does not exclude zero for any policy: the "
                     "clocks agree within the seeds' noise.")
    if order.get("measured") and order.get("modelled"):
        (km, nm), (ko, no) = order["measured"], order["modelled"]
        parts.append(f"Time-only is faster than Low-energy in {km}/{nm} seeds on the measured clock, {ko}/{no} on "
                     "the modelled one.")
    if unstable:
        parts.append("**Not stable on this shared machine:** the sign of Δ makespan vs Equal changes between seeds "
                     "for " + ", ".join(f"{label(p)} ({pol[p]['same_sign'][0]}/{pol[p]['same_sign'][1]} seeds)"
                                        for p in unstable)
                     + "; use the modelled clock's tables for these comparisons.")
    else:
        parts.append("**Stable in sign:** every policy's Δ makespan vs Equal has the modelled clock's sign in every "
                     "seed; the sizes differ as above.")
    return " ".join(parts)


def hfl_section(args: argparse.Namespace, hfl: dict[str, Any], figs: Path) -> list[str]:
    """The page's HFL-DDP section from :func:`run_hfl`'s result: settings, table, headline sentence, plot, CSV."""

    def silos(spread: str, seed: int = 0) -> str:
        return "; ".join(f"silo {i}: {', '.join(f'{v:.3g}' for v in sl)}"
                         for i, sl in enumerate(hfl_slowdowns(spread, seed)))

    def ratio(spread: str, seed: int) -> float:  # the largest slow/fast ratio inside one silo
        return max(max(sl) / min(sl) for sl in hfl_slowdowns(spread, seed))

    wide_ratios = ", ".join(f"{ratio('wide', k):.2g}×" for k in range(args.hfl_seeds))
    L = ["## HFL-DDP: rank CV inside the silos", "",
         f"`{hfl['command']}` for {args.hfl_seeds} seeds per setting, {args.hfl_rounds} rounds: `flwr run apps/hfl`, "
         "3 silos × 2 DDP ranks (600 samples per silo and round over 10 steps), the controller moving samples "
         "between the ranks of a silo only. Figure: the CV (std / mean) of the compute time of a silo's ranks "
         "(virtual clock: the ranks' CPU seconds × emulated slowdown), mean over rounds ≥ "
         f"{FROM_ROUND} per seed (and, when the runs reach round {SETTLED_ROUND}, over rounds ≥ {SETTLED_ROUND}: "
         f"after the controller's first {SETTLED_ROUND - 1} rounds), then mean ± 95 % interval over seeds. "
         f"Settings: *moderate*: the testbed boards taken in turn (rank slowdowns {silos('testbed')}; largest "
         f"ratio inside a silo {ratio('testbed', 0):.2g}×); *wide*: the wide scenario's lognormal σ = {WIDE_SIGMA:g} fleet of each "
         "seed (the same draw as the PMA tables' wide scenario, `--spread wide`), scaled so its fastest device "
         f"is at 1× (the ranks sleep to be slow; seed 0: {silos('wide', 0)}; largest ratio inside a silo per "
         f"seed: {wide_ratios}).", ""]
    if hfl["rows"]:
        rows = pd.DataFrame(hfl["rows"])
        rows.to_csv(figs / "hfl.csv", index=False)
        header, body = hfl_table(rows)
        L += _md_table(header, body) + [""]
        L += [hfl_headline(rows), ""]
        png = plot_cv(hfl["curves"], "HFL-DDP", figs / "hfl-cv.png")
        L += [f"![HFL rank CV per round](results/{png.name})", ""]
    L += [f"- HFL run failed: {f}" for f in hfl["failed"]] + ([""] if hfl["failed"] else [])
    return L


def hfl_headline(rows: pd.DataFrame, from_round: int = FROM_ROUND) -> str:
    """One sentence per setting: the mean-over-silos rank CV of every policy (mean ± 95 % interval over seeds)."""
    late = rows[rows["round"] >= from_round]
    per_seed = late.groupby(["setting", "policy", "seed"], sort=False)["rank_cv"].mean().reset_index()

    def by_setting(cv_of: dict[tuple, pd.Series]) -> str:
        settings = dict.fromkeys(setting for setting, _ in cv_of)
        return "; ".join(f"*{setting}*: " + ", ".join(f"{policy} {fmt_ci(v)}" for (s, policy), v in cv_of.items()
                                                      if s == setting) for setting in settings)

    late_cv = {key: g["rank_cv"] for key, g in per_seed.groupby(["setting", "policy"], sort=False)}
    text = f"Rank CV inside the silos (mean over silos), rounds ≥ {from_round}: {by_setting(late_cv)}."
    settled = settled_cv(rows, "rank_cv", ("setting", "policy"))
    if settled is not None:
        text += f" After {SETTLED_ROUND - 1} rounds (rounds ≥ {SETTLED_ROUND}): {by_setting(settled)}."
    text += (" The paper's Equal CV (0.8–1.1) came from its devices; the Equal CV here is what the emulated spread "
             "inside a silo gives.")
    if "min_samples" in late:
        floor = late[late["policy"] != "Equal"].assign(at_floor=lambda d: d["min_samples"].between(0, HFL_STEPS))
        hits = [f"{policy}, {setting}: {int(g['at_floor'].sum())} of {len(g)}"
                for (setting, policy), g in floor.groupby(["setting", "policy"], sort=False) if g["at_floor"].any()]
        if hits:
            text += (f" Silo-rounds (rounds ≥ {from_round}) in which a rank got the smallest quota, one sample per "
                     f"DDP step ({HFL_STEPS} samples): " + "; ".join(hits) + ". For Time-only that is where the split "
                     "stops: the rank's per-step costs do not shrink with its samples, so the silo's CV cannot fall "
                     "further. Min-energy minimises energy, not the time spread: it moves samples to the rank that "
                     "spends less energy per sample.")
    return text


def write_page(out: Path, args: argparse.Namespace, rows: pd.DataFrame, per_sample: dict[str, float],
               metric_of: dict[str, str], higher_better: dict[str, bool], ddp: dict | None, hfl: dict | None,
               wall_s: float, earlier_walls: Sequence[float], earlier_commits: Sequence[str], machine: str,
               commit: str, command: str, date: str, noniid: Sequence[str] = ()) -> Path:
    """Write ``out/results.md`` and the plots under ``out/results/``; returns the page's path.

    ``noniid``: the lines of the non-IID section (:func:`noniid_lines`), placed before "Files".
    """
    figs = out / "results"
    figs.mkdir(parents=True, exist_ok=True)
    summary = with_change_vs_equal(run_summaries(rows, metric_of))
    summary.to_csv(figs / "runs.csv", index=False)
    sweep = rows[(rows["kind"] == "sweep") & (rows["round"] >= 1)].groupby(
        ["scenario", "seed", "policy"], sort=False).agg(
        energy_j=("energy_j", "sum"), makespan_s=("makespan_s", "sum"), idle_j=("idle_j", "sum"),
        w_e=("w_e", "first")).reset_index()
    sweep.to_csv(figs / "sweep.csv", index=False)
    clock_name = {"modelled": "virtual clock, modelled device time (calibrated cost per sample × samples × "
                              "slowdown × jitter)",
                  "measured": "virtual clock, measured device time (training thread's CPU seconds × slowdown × "
                              "jitter)"}[args.clock]
    L: list[str] = []
    L += ["# Results", "",
          "<!-- Generated by the command below; do not edit by hand: rerun it. -->", "",
          f"- **Command**: `{command}`",
          f"- **Date**: {date}",
          f"- **Commit**: `{commit}`",
          f"- **Machine**: {machine}",
          f"- **Wall time of the command**: {fmt_s(wall_s)} ({wall_s:.0f} s, jobs={args.jobs})"
          + (f". It reused finished runs ({', '.join(f'{k}: {v}' for k, v in REUSED.items() if v)}) of "
             f"{len(earlier_walls)} earlier invocation(s) with the same settings"
             + (f" (commit {', '.join(sorted(set(earlier_commits)))})" if earlier_commits else "")
             + f", whose wall time was {fmt_s(sum(earlier_walls))} in all" if any(REUSED.values()) and earlier_walls
             else ""),
          f"- **Clock of the PMA tables, the sweep and the convergence plots**: {clock_name}"
          + (" (except the section \"PMA on the measured clock\": measured device time, training thread's CPU "
             "seconds × slowdown × jitter)" if args.measured else "")
          + ". DDP and HFL use their own clocks (stated in their sections).", ""]
    L += ["## Set-up", "",
          f"- **Policies** ({len(args.policies)}): " + ", ".join(f"{label(p)} (`{p}`)" for p in args.policies) + ".",
          f"- **Tasks**: {', '.join(args.tasks)}; {args.rounds} rounds, {args.budget} samples per round over 11 "
          "devices (FedAsync: the same samples per round-equivalent), IID partitions, the task's default model, "
          "batch size and learning rate.",
          f"- **Seeds**: {args.seeds} per (task, scenario), paired: in one seed every policy gets the same partitions, "
          "initial model, sample order and device jitter draws.",
          "- **Runs**: Flower's strategies (`flwr_adaptive.strategies.build_strategy`, what `apps/pma` builds) driven "
          "through `Strategy.start` in one process with an in-process Grid (`experiments/inprocess.py`); the clients "
          "are the Flower App's train function (`@telemetry_train` + `quota_data`), and the training is real. The same "
          "comparison through `flwr run apps/pma` is `python -m experiments.baselines` (measured clock, one seed).",
          "- **Scenarios**:",
          f"  - *testbed*: the 11 cited boards of `flwr_adaptive.devices` ({idle_model_note(scenario_profiles('testbed', 0))}), "
          f"jitter σ = {JITTER_SIGMA:g} per device and round.",
          f"  - *wide*: 11 devices whose slowdowns are the testbed's median × exp(σ·z), z ~ N(0, 1), σ = {WIDE_SIGMA:g}, "
          "drawn anew for every seed (seed 0: "
          f"{idle_model_note(scenario_profiles('wide', 0))}), with the testbed boards' watts. Why lognormal: "
          f"FedScale's runtime (Lai et al., \"FedScale\", ICML 2022) samples client compute speed from a lognormal "
          f"([`client_metadata.py`, `get_completion_time_lognormal`]({FEDSCALE_URL}): \"assumes that client "
          "computation speed is a lognormal distribution (see PAPAYA / GFL papers)\", "
          "`np.random.lognormal(1, tail_skew)` with `tail_skew = 0.6` by default). σ = 1 is wider than that default "
          "on purpose: it is the spread of a fleet with phones several generations apart; the testbed's own "
          "σ of log-slowdown is given above.",
          f"- **Target loss**: per (task, scenario, seed), Equal's holdout loss after {target_round(args.rounds)} of its "
          f"{args.rounds} rounds (80 %); time and energy to target are summed up to the first round at or below it "
          "(\"reached\" counts the seeds where that happened; the mean is over those).",
          f"- **Busy-time CV**: std / mean of the devices' compute time in a round, averaged from round {FROM_ROUND} on.",
          "- **Intervals**: mean ± half-width of the 95 % Student-t interval over seeds; Δ vs Equal is the paired "
          "per-seed relative change.", ""]
    if args.clock == "modelled":
        L += ["**Calibration** (host CPU seconds per training sample, torch on one thread, median of 5 timed calls; "
              "the modelled clock multiplies these by samples × slowdown × jitter):", ""]
        L += _md_table(["task", "host CPU s / sample"], [[t, f"{per_sample[t]:.3e}"] for t in sorted(per_sample)])
        L += [""]

    # ---- headline
    L += ["## Headline: every policy vs Equal", "",
          "Paired per-seed change of the run's total makespan / total energy (active + idle) against Equal, "
          "mean ± 95 % interval, per task and scenario."
          + (" On the modelled clock a task's cost per sample scales every device alike, so these ratios are the "
             "same on every task for the policies whose decisions depend on time and energy only; the tasks "
             "differ in Oort-like's choices (it uses the training loss), in the losses, in time and energy to "
             "the target and in the final metric (tables below)." if args.clock == "modelled" else ""), ""]
    combos = [(t, sc) for t in args.tasks for sc in args.scenarios]
    body = []
    for p in args.policies:
        if p == "equal":
            continue
        cells = []
        for task, scenario in combos:
            sp = summary[(summary["task"] == task) & (summary["scenario"] == scenario) & (summary["policy"] == p)]
            cells.append(f"{fmt_ci(sp['d_makespan_s'], 3, pct=True)} / {fmt_ci(sp['d_energy_j'], 3, pct=True)}")
        body.append([label(p), *cells])
    L += _md_table(["policy", *(f"{t}, {sc}" for t, sc in combos)], body) + [""]

    # ---- per task tables
    L += ["## PMA: every policy, every task, both scenarios", ""]
    for task in args.tasks:
        metric = metric_of[task]
        arrow = "higher is better" if higher_better[task] else "lower is better"
        for scenario in args.scenarios:
            s = summary[(summary["task"] == task) & (summary["scenario"] == scenario)]
            tgt = s[s["policy"] == "equal"]["target_loss"]
            L += [f"### {task}, {scenario} scenario", "",
                  f"Target loss (Equal after {target_round(args.rounds)} rounds): {fmt_ci(tgt, 4)}. "
                  f"Final holdout metric: {metric} ({arrow}).", ""]
            hdr = ["policy", "makespan s", "Δ makespan", "total energy J", "Δ energy", "idle energy J",
                   "busy-time CV", "time to target s", "energy to target J", "reached", f"final {metric}",
                   "final loss"]
            body = []
            for p in args.policies:
                sp = s[s["policy"] == p]
                if sp.empty:
                    continue
                body.append([label(p), fmt_ci(sp["makespan_s"]), fmt_ci(sp["d_makespan_s"], 3, pct=True),
                             fmt_ci(sp["energy_j"]), fmt_ci(sp["d_energy_j"], 3, pct=True), fmt_ci(sp["idle_j"]),
                             fmt_ci(sp["cv_busy"]), fmt_ci(sp["time_to_target_s"]), fmt_ci(sp["energy_to_target_j"]),
                             f"{int(sp['target_round'].notna().sum())}/{len(sp)}", fmt_ci(sp["final_metric"], 4),
                             fmt_ci(sp["final_loss"], 4)])
            L += _md_table(hdr, body) + [""]
        png = plot_convergence(rows, task, args.scenarios, args.policies, figs / f"convergence-{task}.png")
        L += [f"![{task}: holdout loss vs virtual time and vs energy](results/{png.name})", ""]
    L += ["Notes: Oort-like trains a subset each round; devices it leaves out are not counted (as if switched off). "
          "FedAsync has no synchronization waits: its idle energy is that of devices that ran out of work at the end; "
          "its \"round\" is a round-equivalent of the same number of samples.", ""]

    # ---- the measured clock
    if args.measured:
        measured = with_change_vs_equal(run_summaries(rows, metric_of, kind="measured"))
        measured.to_csv(figs / "measured.csv", index=False)
        if measured.empty:
            L += ["## PMA on the measured clock", "", "No measured-clock run finished.", ""]
        else:
            L += measured_section(args, measured, summary, metric_of[args.measured_task], rows)

    # ---- sweep
    L += ["## Energy vs w_e (non-monotonicity)", "",
          f"The weighted controller with w_t = 1 − w_e on task `{args.sweep_task}`, {args.seeds} seeds per scenario, "
          f"{args.rounds} rounds; Equal and " + ", ".join(label(p) for p in extra_controller_policies())
          + " as reference lines. w_e = 0 is Time-only, 0.25 Low-energy, 1 Energy-only (the same code path: the "
          "table above and this sweep agree on them exactly)."
          + (" On the modelled clock a round's time and energy do not depend on the model, so the sweep reads each "
             "quota without the gradient steps (same strategy, quotas, jitter draws)." if args.clock == "modelled"
             else ""), ""]
    for scenario in args.scenarios:
        sub = sweep[sweep["scenario"] == scenario]
        text, _ = sweep_verdict(sweep, scenario)
        png = plot_sweep(sweep, scenario, figs / f"sweep-{scenario}.png")
        rows_md = []
        for w in SWEEP_W:
            sw = sub[np.isclose(sub["w_e"], w)]
            rows_md.append([f"{w:g}", fmt_ci(sw["energy_j"], 4), fmt_ci(sw["energy_j"] - sw["idle_j"], 4),
                            fmt_ci(sw["idle_j"], 4), fmt_ci(sw["makespan_s"], 4)])
        for p in ["equal", *extra_controller_policies()]:
            sp = sub[(sub["policy"] == p) & sub["w_e"].isna()]
            rows_md.append([label(p), fmt_ci(sp["energy_j"], 4), fmt_ci(sp["energy_j"] - sp["idle_j"], 4),
                            fmt_ci(sp["idle_j"], 4), fmt_ci(sp["makespan_s"], 4)])
        ends = [sub[np.isclose(sub["w_e"], w)] for w in (0.0, 1.0)]
        act = [float((e["energy_j"] - e["idle_j"]).mean()) for e in ends]
        idle = [float(e["idle_j"].mean()) for e in ends]
        text += (f" From w_e = 0 to 1, active energy goes from {act[0]:.4g} to {act[1]:.4g} J and idle energy "
                 f"(waiting for the round's slowest device) from {idle[0]:.4g} to {idle[1]:.4g} J.")
        L += [f"### {scenario} scenario", "", text, ""]
        L += _md_table(["w_e", "total energy J", "active energy J", "idle energy J", "makespan s"], rows_md) + [""]
        L += [f"![w_e sweep, {scenario}](results/{png.name})", ""]

    # ---- overhead
    L += ["## Controller overhead", "",
          "Measured in the PMA runs above (synchronous policies), per round: the controller's own calls "
          "(`allocate` + `observe`), the strategy's `configure_train` + `aggregate_train` (controller, screening, "
          "FedAvg aggregation of 11 models), both WALL clock; the round's wall time here (the 11 clients train one "
          "after the other in this process), and the round's virtual makespan (what the devices would take).", ""]
    ov = summary[summary["controller_s"].notna()]
    body = []
    for p in args.policies:
        o = ov[ov["policy"] == p]
        if o.empty:
            continue
        body.append([label(p), fmt_ci(o["controller_s"] * 1e3), fmt_ci(o["strategy_s"] * 1e3),
                     fmt_ci(o["round_wall_s"]), fmt_ci(100 * o["controller_s"] / o["round_wall_s"], 2) + " %",
                     fmt_ci(100 * o["strategy_s"] / o["round_wall_s"], 2) + " %", fmt_ci(o["round_makespan_s"]),
                     fmt_ci(100 * o["controller_s"] / o["round_makespan_s"], 2) + " %"])
    L += _md_table(["policy", "controller ms / round", "strategy ms / round", "round wall s",
                    "controller / round wall", "strategy / round wall", "round makespan s (virtual)",
                    "controller / makespan"], body) + [""]
    L += [f"Over every task, scenario and seed ({', '.join(args.tasks)}): mean ± 95 % interval over runs. Equal's "
          "controller is a plain equal split; its strategy time is what wrapping FedAvg costs without adaptation.", ""]
    L += ["The virtual rounds here are short (a few thousand samples of small models), so the share of the makespan "
          "is an upper bound for longer rounds: the controller's time does not grow with the round's samples.", ""]

    # ---- DDP / HFL
    if ddp is not None:
        L += ["## DDP: per-round compute CV (Equal vs adaptive vs EMA batch sizing)", "",
              f"`{ddp['command']}` for {args.ddp_seeds} seeds per setting: 4 gloo ranks on this machine, emulated "
              "slowness as a real sleep per step. Compute CV and makespan on the ranks' compute clock "
              f"({ddp.get('clock') or '?'}: process CPU seconds × emulated slowdown); mean over rounds ≥ {FROM_ROUND} "
              f"(and, when the runs reach round {SETTLED_ROUND}, the compute CV over rounds ≥ {SETTLED_ROUND}: after "
              f"the controller's first {SETTLED_ROUND - 1} rounds), then mean ± 95 % interval over seeds. The wide "
              "setting uses the mid-quantiles of a lognormal σ = 1 "
              f"({', '.join(map(str, list(ddp['settings'].values())[1]))}; the fastest rank at 2× because the "
              "benchmark needs slowdowns ≥ 2 to keep 4 ranks within this machine's cores).", ""]
        if ddp["rows"]:
            d = pd.DataFrame(ddp["rows"])
            late = d[d["round"] >= FROM_ROUND].groupby(["setting", "policy", "seed"], sort=False).mean(
                numeric_only=True).reset_index()
            settled = settled_cv(d, "compute CV", ("setting", "policy"))
            body = []
            for (setting, policy), g in late.groupby(["setting", "policy"], sort=False):
                extra = [] if settled is None else [fmt_ci(settled.get((setting, policy), []))]
                body.append([setting, policy, fmt_ci(g["compute CV"]), *extra, fmt_ci(g["makespan s"]),
                             fmt_ci(g["sync-wait share"]), str(len(g))])
            extra = [] if settled is None else [f"compute CV, rounds ≥ {SETTLED_ROUND}"]
            L += _md_table(["setting", "policy", "compute CV", *extra, "makespan s / round", "sync-wait share",
                            "seeds"], body)
            png = plot_cv(ddp["curves"], "DDP", figs / "ddp-cv.png")
            L += ["", f"![DDP compute CV per round](results/{png.name})", ""]
            L += ["The paper reports an Equal CV of 0.8–1.1 on its devices; the Equal CV above is what the emulated "
                  "spread gives (it follows from the slowdowns: the CV of (2, 3, 4, 6) is 0.39).", ""]
        L += [f"- DDP run failed: {f}" for f in ddp["failed"]] + ([""] if ddp["failed"] else [])
    if hfl is not None:
        L += hfl_section(args, hfl, figs)
    if ddp is None or hfl is None:
        skipped = [n for n, v in (("DDP", ddp), ("HFL-DDP", hfl)) if v is None]
        L += [f"{' and '.join(skipped)} not run in this invocation (`--quick` or `--skip-ddp` / `--skip-hfl`).", ""]
    L += [*noniid, *([""] if noniid else [])]
    L += ["## Files", "",
          "- `results/runs.csv`: one row per PMA run (task, scenario, seed, policy) with every figure above.",
          "- `results/sweep.csv`: one row per sweep run.",
          *(["- `results/measured.csv`: one row per run of the measured-clock section."] if args.measured else []),
          *(["- `results/hfl.csv`: the HFL rank CV per setting, seed, policy, round and silo."] if hfl else []),
          "- Single runs of the other commands (`./run.sh`, the virtual-clock testbed, the controller benchmark, "
          "the centralised task check): [measurements.md](measurements.md).", ""]
    page = out / "results.md"
    page.write_text("\n".join(L) + "\n")
    return page


# --------------------------------------------------------------------------- command line
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one task (weather), two seeds, 4 rounds, a small measured-clock section, no DDP/HFL: "
                    "a few minutes at most")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: testbed, wide")
    ap.add_argument("--policies", default="all", help="comma-separated registry policies, or 'all'")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--budget", type=int, default=1100, help="samples per round over the 11 devices")
    ap.add_argument("--clock", choices=("modelled", "measured"), default="modelled")
    ap.add_argument("--sweep-task", default=None, help="task of the w_e sweep (default: the first task)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (modelled clock only; measured uses 1)")
    ap.add_argument("--measured-task", default="mnist", help="task of the measured-clock section")
    ap.add_argument("--measured-scenario", default="testbed", help="scenario of the measured-clock section")
    ap.add_argument("--measured-seeds", type=int, default=5, help="paired seeds of the measured-clock section")
    ap.add_argument("--measured-rounds", type=int, default=None, help="rounds of the measured-clock section "
                    "(default: --rounds)")
    ap.add_argument("--measured-policies", default=",".join(MEASURED_POLICIES),
                    help="comma-separated registry policies of the measured-clock section (Equal included)")
    ap.add_argument("--skip-measured", action="store_true", help="no measured-clock section")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument("--skip-hfl", action="store_true")
    ap.add_argument("--ddp-seeds", type=int, default=3)
    ap.add_argument("--ddp-rounds", type=int, default=10)
    ap.add_argument("--ddp-budget", type=int, default=2000, help="DDP samples per round over the 4 ranks")
    ap.add_argument("--hfl-seeds", type=int, default=3)
    ap.add_argument("--hfl-rounds", type=int, default=10)
    ap.add_argument("--hfl-policies", default=",".join(HFL_POLICIES), help="comma-separated experiments.hfl policies")
    ap.add_argument("--section-timeout", type=float, default=1800.0, help="seconds before one DDP/HFL command is killed")
    ap.add_argument("--skip-noniid", action="store_true", help="no non-IID section")
    ap.add_argument("--only-noniid", action="store_true",
                    help="run only the non-IID section and replace it in the existing <out>/results.md")
    ap.add_argument("--noniid-finished-only", action="store_true",
                    help="non-IID section from the runs finished in --work only; the page lists the missing ones")
    ap.add_argument("--noniid-tasks", default=None, help="tasks of the non-IID section (default: --tasks)")
    ap.add_argument("--noniid-alphas", default="0.3,0.1", help="Dirichlet concentrations of the non-IID section")
    ap.add_argument("--noniid-seeds", type=int, default=None, help="paired seeds of the non-IID section "
                    "(default: --seeds)")
    ap.add_argument("--noniid-rounds", default="mnist=20,sentiment=20,weather=10",
                    help="Equal + FedAvg's rounds in the non-IID runs: one number, or task=rounds,… (every other row "
                    "runs to Equal + FedAvg's virtual time, at most --noniid-round-cap times as many rounds)")
    ap.add_argument("--noniid-round-cap", type=int, default=4,
                    help="a non-IID run's round cap, as a multiple of Equal + FedAvg's rounds")
    ap.add_argument("--noniid-lr", default="sentiment=0.1",
                    help="local learning rate per task in the non-IID runs, task=lr,… (others: the task's default)")
    ap.add_argument("--noniid-rows", default="all", help="comma-separated rows of experiments.noniid.ROWS, or 'all'")
    ap.add_argument("--noniid-measured-seeds", type=int, default=5,
                    help="paired seeds of the non-IID measured-clock runs (0: none)")
    ap.add_argument("--noniid-measured-task", default="mnist", help="task of the non-IID measured-clock runs")
    ap.add_argument("--out", default=str(REPO / "docs"), help="folder of results.md (plots go to <out>/results/)")
    ap.add_argument("--work", default=str(REPO / "results" / "reproduce"),
                    help="folder of finished runs; a rerun reuses them (same settings) unless --fresh")
    ap.add_argument("--fresh", action="store_true", help="discard finished runs in --work first")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.seeds, args.rounds = "weather", 2, 4
        args.skip_ddp = args.skip_hfl = True
        args.measured_task, args.measured_seeds, args.measured_rounds = "weather", 2, 4
        args.measured_policies = "equal,time,low-energy,energy"
        args.noniid_alphas, args.noniid_rounds, args.noniid_measured_task = "0.3", "4", "weather"
        args.noniid_measured_seeds = 2
        if args.noniid_rows == "all":
            from experiments.noniid import QUICK_ROWS

            args.noniid_rows = ",".join(QUICK_ROWS)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    known = policy_names()
    args.policies = known if args.policies == "all" else [p.strip() for p in args.policies.split(",") if p.strip()]
    from flwr_adaptive.clients.tasks import TASKS as KNOWN_TASKS

    args.measured_policies = [p.strip() for p in args.measured_policies.split(",") if p.strip()]
    args.hfl_policies = [p.strip() for p in args.hfl_policies.split(",") if p.strip()]
    args.measured_rounds = args.rounds if args.measured_rounds is None else args.measured_rounds
    bad = [t for t in [*args.tasks, args.measured_task] if t not in KNOWN_TASKS] \
        + [s for s in [*args.scenarios, args.measured_scenario] if s not in SCENARIOS] \
        + [p for p in [*args.policies, *args.measured_policies] if p not in known]
    if bad:
        ap.error(f"unknown names {bad}: tasks from {sorted(KNOWN_TASKS)}, scenarios from {SCENARIOS}, "
                 f"policies from {known}")
    if "equal" not in args.policies:
        ap.error("the target loss and every Δ are against Equal: keep 'equal' in --policies")
    from flwr_adaptive.strategies.registry import LABELS, parse_run_name

    hfl_known = [p for p in LABELS if parse_run_name(p)[0] in POLICIES]
    if not args.hfl_policies or [p for p in args.hfl_policies if p not in hfl_known]:
        ap.error(f"--hfl-policies must name some of {hfl_known} (the controller's policies), got {args.hfl_policies}")
    if "equal" not in args.measured_policies:
        ap.error("the measured-clock section's Δ are against Equal: keep 'equal' in --measured-policies")
    for name in ("seeds", "rounds", "budget", "jobs", "ddp_seeds", "ddp_rounds", "ddp_budget", "hfl_seeds",
                 "hfl_rounds", "measured_seeds", "measured_rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.seeds < 2 or args.measured_seeds < 2:
        ap.error(f"--seeds and --measured-seeds must be >= 2 for an interval, got {args.seeds} and "
                 f"{args.measured_seeds}")
    from experiments import noniid

    args.noniid_tasks = args.tasks if args.noniid_tasks is None else [
        t.strip() for t in args.noniid_tasks.split(",") if t.strip()]
    args.noniid_seeds = args.seeds if args.noniid_seeds is None else args.noniid_seeds
    try:
        args.noniid_alphas = [float(a) for a in args.noniid_alphas.split(",") if a.strip()]
    except ValueError:
        ap.error(f"--noniid-alphas must be comma-separated numbers, got {args.noniid_alphas!r}")
    asked = list(noniid.ROWS) if args.noniid_rows == "all" else [r.strip() for r in args.noniid_rows.split(",")
                                                                    if r.strip()]
    unknown = [r for r in asked if r not in noniid.ROWS] + [t for t in [*args.noniid_tasks, args.noniid_measured_task]
                                                           if t not in KNOWN_TASKS]
    if unknown:
        ap.error(f"unknown non-IID rows or tasks {unknown}: rows from {list(noniid.ROWS)}")
    args.noniid_rows, args.noniid_left_out = noniid.available_rows(asked)
    rounds_default = _per_task(ap, "--noniid-rounds", "10", int, KNOWN_TASKS)
    rounds_default = _per_task(ap, "--noniid-rounds", ap.get_default("noniid_rounds"), int, KNOWN_TASKS, rounds_default)
    args.noniid_rounds = _per_task(ap, "--noniid-rounds", args.noniid_rounds, int, KNOWN_TASKS, rounds_default)
    lr_default = _per_task(ap, "--noniid-lr", ap.get_default("noniid_lr"), float, KNOWN_TASKS)
    args.noniid_lr = _per_task(ap, "--noniid-lr", args.noniid_lr, float, KNOWN_TASKS, lr_default)
    if any(not (math.isfinite(v) and v > 0) for v in args.noniid_lr.values()):
        ap.error(f"--noniid-lr must give positive learning rates, got {args.noniid_lr}")
    if "equal-fedavg" not in args.noniid_rows:
        ap.error("the non-IID target and every ratio are against Equal + FedAvg: keep 'equal-fedavg' in --noniid-rows")
    if not args.noniid_alphas or any(not (math.isfinite(a) and a > 0) for a in args.noniid_alphas):
        ap.error(f"--noniid-alphas must be positive numbers, got {args.noniid_alphas}")
    if args.noniid_seeds < 2 or min(args.noniid_rounds.values()) < 1 or args.noniid_measured_seeds < 0 \
            or args.noniid_round_cap < 1:
        ap.error("--noniid-seeds must be >= 2, --noniid-rounds >= 1, --noniid-round-cap >= 1 and "
                 "--noniid-measured-seeds >= 0")
    args.noniid_measured_rows = [r for r in noniid.MEASURED_ROWS if r in args.noniid_rows] or ["equal-fedavg"]
    if args.clock != "modelled":
        args.noniid_measured_seeds = 0  # every non-IID table is the same clock already
    args.noniid = not args.skip_noniid
    # On --clock measured every PMA table is already on the measured clock: the section would repeat them.
    args.measured = not args.skip_measured and args.clock == "modelled"
    args.sweep_task = args.sweep_task or args.tasks[0]
    if args.clock == "measured":
        args.jobs = 1  # concurrent processes would inflate each other's CPU time
    return args


def _per_task(ap: argparse.ArgumentParser, flag: str, text: str, kind: type, tasks: Any,
              base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``"20"`` → every task 20; ``"mnist=20,weather=10"`` → ``base`` with those tasks set."""
    if text.strip() and "=" not in text:
        try:
            return {t: kind(text) for t in tasks}
        except ValueError:
            ap.error(f"{flag} must be a number or task=number,…, got {text!r}")
    out = dict(base or {})
    for item in filter(None, (i.strip() for i in text.split(","))):
        task, _, value = (part.strip() for part in item.partition("="))
        if task not in tasks:
            ap.error(f"{flag}: unknown task {task!r} in {text!r}; tasks from {sorted(tasks)}")
        try:
            out[task] = kind(value)
        except ValueError:
            ap.error(f"{flag} must be task=number,…, got {item!r}")
    return out


def _stop_on_sigterm() -> None:
    """SIGTERM ends the command like Ctrl-C, so its worker processes are stopped too."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def noniid_lines(args: argparse.Namespace, work: Path, figs: Path, per_sample: dict[str, float], machine: str,
                 commit: str, command: str, date: str) -> list[str]:
    """The non-IID section (:mod:`experiments.noniid`): its own settings check, calibration and provenance."""
    from experiments import noniid
    from experiments.inprocess import load_task

    # What a finished run depends on beyond its file name (task, scenario, seed, α, row and, for rows on the
    # strategies' default weighting, that default): rows, tasks, seeds and α may grow between invocations.
    settings = {k: getattr(args, k) for k in ("noniid_rounds", "budget", "noniid_round_cap", "noniid_lr")}
    settings["runs"] = "Equal + FedAvg: its rounds; the others: to its virtual time, stopped at the target"
    path = work / "noniid-settings.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    if saved and saved.get("settings") != json.loads(json.dumps(settings)):
        raise SystemExit(f"{work} holds non-IID runs of other settings; pass --fresh or another --work")
    calib = dict(saved.get("per_sample_s", {}))
    for t in args.noniid_tasks:
        if t not in calib:
            calib[t] = per_sample[t] if t in per_sample else calibrate(t)
    path.write_text(json.dumps({"settings": settings, "per_sample_s": calib}, indent=1))
    tasks = {*args.noniid_tasks, args.noniid_measured_task}
    metric_of = {t: load_task(t).metric for t in tasks}
    higher_of = {t: bool(load_task(t).higher_is_better) for t in tasks}
    provenance = [f"- **Command**: `{command}`; **date** {date}; **commit** `{commit}`; {machine}.",
                  "- **Calibration** (host CPU s per training sample, the modelled clock's unit): "
                  + ", ".join(f"{t} {calib[t]:.3e}" for t in sorted(calib)) + "."]
    return noniid.run(args, work, calib, metric_of, higher_of, figs, provenance)


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    if args.only_noniid:
        return main_noniid_only(args, argv, started)
    command = "python -m experiments.reproduce " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                      else sys.argv[1:]))
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    if args.fresh and work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    # What the cached PMA and sweep runs depend on (DDP/HFL files carry their own settings in their names).
    settings = {k: getattr(args, k) for k in ("tasks", "scenarios", "policies", "seeds", "rounds", "budget", "clock",
                                              "sweep_task", "measured_task", "measured_scenario", "measured_rounds")}
    settings_path = work / "settings.json"
    if settings_path.exists() and json.loads(settings_path.read_text()).get("settings") != json.loads(
            json.dumps(settings)):
        raise SystemExit(f"{work} holds runs of other settings; pass --fresh or another --work")
    machine, commit = machine_line(), git_commit()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"[reproduce] {command}\n[reproduce] {machine}; commit {commit}", flush=True)
    tasks_needed = sorted(set(args.tasks) | {args.sweep_task})
    from experiments.inprocess import load_task

    metric_of = {t: load_task(t).metric for t in {*tasks_needed, args.measured_task}}
    higher_better = {t: bool(load_task(t).higher_is_better) for t in {*tasks_needed, args.measured_task}}
    per_sample: dict[str, float] = {}
    if args.clock == "modelled":
        saved = json.loads(settings_path.read_text()).get("per_sample_s", {}) if settings_path.exists() else {}
        for t in tasks_needed:
            per_sample[t] = saved[t] if t in saved else calibrate(t)
            print(f"[reproduce] calibration: {t}: {per_sample[t]:.3e} host CPU s per training sample"
                  f"{' (reused from ' + str(settings_path) + ')' if t in saved else ''}", flush=True)
    previous = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    earlier, earlier_commits = previous.get("walls_s", []), previous.get("commits", [])
    record = {"settings": settings, "per_sample_s": per_sample, "walls_s": earlier,
              "commits": earlier_commits + [commit]}

    def note_wall() -> None:  # this invocation's wall time so far, kept in case it is interrupted
        record["walls_s"] = earlier + [round(time.perf_counter() - started, 1)]
        settings_path.write_text(json.dumps(record, indent=1))

    note_wall()
    units = plan_units(args, per_sample)
    print(f"[reproduce] {len(units)} runs: {sum(u.meta['kind'] == 'pma' for u in units)} PMA "
          f"({len(args.policies)} policies × {len(args.tasks)} tasks × {len(args.scenarios)} scenarios × {args.seeds} "
          f"seeds) + {sum(u.meta['kind'] == 'sweep' for u in units)} sweep; {args.jobs} worker(s); clock {args.clock}",
          flush=True)
    if argv is None:  # the command line, not a caller in this process (tests)
        _stop_on_sigterm()
    rows = run_units(units, args.jobs, work, on_progress=note_wall)
    measured_units = plan_measured_units(args)
    if measured_units:  # after the pool, in this process alone: the CPU time of a run is the clock here
        print(f"[reproduce] measured clock: {len(measured_units)} runs ({len(args.measured_policies)} policies × "
              f"{args.measured_seeds} seeds, {args.measured_task} / {args.measured_scenario}), one at a time",
              flush=True)
        if any(not unit_path(work, u).exists() for u in measured_units):
            # Torch's lazy set-up lands in the first training call's CPU time: take it here, not in a run's round 1.
            args.measured_per_sample = calibrate(args.measured_task)
            print(f"[reproduce] measured clock warm-up: {args.measured_task}: {args.measured_per_sample:.3e} host "
                  "CPU s per training sample now", flush=True)
        else:  # every run is reused: the page states the warm-up of the invocation that ran them, if it was saved
            args.measured_per_sample = previous.get("measured_per_sample_s")
        record["measured_per_sample_s"] = args.measured_per_sample
        rows = pd.concat([rows, run_units(measured_units, 1, work, on_progress=note_wall, reuse_key="measured")],
                         ignore_index=True)
    ddp = None if args.skip_ddp else run_ddp(args, work)
    hfl = None if args.skip_hfl else run_hfl(args, work)
    extra = noniid_lines(args, work, out / "results", per_sample, machine, commit, command, date) if args.noniid else []
    wall = time.perf_counter() - started
    page = write_page(out, args, rows, per_sample, metric_of, higher_better, ddp, hfl, wall, earlier, earlier_commits,
                      machine, commit, command, date, extra)
    note_wall()
    print(f"[reproduce] wrote {page} and {out / 'results'}/ in {fmt_s(wall)} (wall)", flush=True)
    return 0


def main_noniid_only(args: argparse.Namespace, argv: Sequence[str] | None, started: float) -> int:
    """``--only-noniid``: run the non-IID section and replace it in the existing page (the rest is kept as it is)."""
    from experiments import noniid

    command = "python -m experiments.reproduce " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                      else sys.argv[1:]))
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    if args.fresh and work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    machine, commit = machine_line(), git_commit()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"[reproduce] {command}\n[reproduce] {machine}; commit {commit}", flush=True)
    if argv is None:
        _stop_on_sigterm()
    lines = noniid_lines(args, work, out / "results", {}, machine, commit, command, date)
    page = out / "results.md"
    old = page.read_text() if page.exists() else "# Results\n"
    page.write_text(noniid.splice(old, lines))
    print(f"[reproduce] replaced the non-IID section of {page} in {fmt_s(time.perf_counter() - started)} (wall)",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
