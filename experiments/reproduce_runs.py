"""The runs behind the IID tables of ``python -m experiments.reproduce``: scenarios, the plan, the run cache.

Contract
--------
:func:`scenario_profiles` gives the devices of a scenario and seed; :func:`plan_units` and
:func:`plan_measured_units` list the PMA, sweep and measured-clock runs of an invocation (one
:class:`experiments.inprocess.RunSpec` each); :func:`run_units` runs them in a process pool, or
reuses the finished ones kept under ``<work>/units/`` (:func:`unit_path`), and returns their
per-round rows tagged with kind, task, scenario and seed. :data:`REUSED` counts, per section, the
runs this invocation took from ``--work`` (the page states it). Policy names, their page order and
labels come from the strategy registry (:func:`policy_names`, :func:`label`).

Cost
----
Each run is real training (:func:`experiments.inprocess.run_pma`) in a worker process; a reused
run costs one CSV read.
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.inprocess import RunSpec, fmt_s, run_pma
from flwr_adaptive.controller import POLICIES
from flwr_adaptive.devices import DeviceProfile, get_testbed

REPO = Path(__file__).resolve().parent.parent
TASKS = ("mnist", "weather", "sentiment")
SCENARIOS = ("testbed", "wide")
SWEEP_W = tuple(i / 8 for i in range(9))
WIDE_SIGMA = 1.0
JITTER_SIGMA = 0.05
REUSED: dict[str, int] = {}  # finished runs this invocation took from --work instead of running them
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
