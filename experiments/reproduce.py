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
deterministic on a shared machine; ``--per-sample-s`` gives that unit instead (the page's values make
a rerun bit-identical: a few decisions compare costs the rules made equal, and another unit can round
such a tie the other way, e.g. which of two nodes gets one more sample); ``--clock measured`` uses
each training call's CPU time instead.
The same PMA comparison through ``flwr run apps/pma`` (one Flower run per policy) is
``python -m experiments.baselines``. DDP and HFL use their own clocks (stated on the page).

``--quick``: one task, two seeds, few rounds, the measured-clock section on that task with the
paper's four policies, no DDP/HFL (the test suite runs it).

The non-IID section comes in parts, each between its own markers with its own CSV
(:mod:`experiments.noniid_parts`): the command renders every part; ``--only-noniid`` runs and
replaces them in an existing page, ``--noniid-part NAME`` one of them only (the others are kept
as they are); ``--skip-noniid`` reruns the rest of the page and keeps its non-IID section as it is.

Files: this module is the command line (every flag, the checks of their values) and the
orchestration (the runs' order, the settings a cached run depends on, provenance); the runs are
:mod:`experiments.reproduce_runs` (scenarios, planning, the run cache and worker pool), the figures
:mod:`experiments.reproduce_figures` (per-run summaries, intervals, clock comparisons), the plots
:mod:`experiments.reproduce_plots`, DDP and HFL :mod:`experiments.reproduce_ddp_hfl`, the page
:mod:`experiments.reproduce_page`, and the non-IID section :mod:`experiments.noniid`. The names
tests and other commands import from here are re-exported.

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
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.inprocess import calibrate, fmt_s
from experiments.reproduce_ddp_hfl import (
    HFL_STEPS,
    hfl_headline,
    hfl_section,
    hfl_settings,
    hfl_slowdowns,
    hfl_table,
    lognormal_quartile_slowdowns,
    rank_cv_rows,
    run_ddp,
    run_hfl,
)
from experiments.reproduce_figures import (
    FROM_ROUND,
    SETTLED_ROUND,
    TARGET_AT,
    clock_agreement,
    fmt_ci,
    mean_ci,
    order_agreement,
    round_spikes,
    run_summaries,
    settled_cv,
    t_quantile,
    target_round,
    with_change_vs_equal,
)
from experiments.reproduce_page import (
    FEDSCALE_URL,
    git_commit,
    machine_line,
    measured_section,
    measured_verdict,
    sweep_verdict,
    write_page,
)
from experiments.reproduce_plots import (
    plot_convergence,
    plot_cv,
    plot_sweep,
)
from experiments.reproduce_runs import (
    JITTER_SIGMA,
    REPO,
    REUSED,
    SCENARIOS,
    SWEEP_W,
    TASKS,
    WIDE_SIGMA,
    extra_controller_policies,
    label,
    plan_measured_units,
    plan_units,
    policy_names,
    run_units,
    scenario_profiles,
    unit_path,
)
from flwr_adaptive.controller import POLICIES

# The names tests and the other commands import from here (the command's modules are listed above).
__all__ = ["FEDSCALE_URL", "FROM_ROUND", "HFL_POLICIES", "HFL_STEPS", "JITTER_SIGMA", "MEASURED_POLICIES", "REPO",
           "REUSED", "SCENARIOS", "SETTLED_ROUND", "SWEEP_W", "TARGET_AT", "TASKS", "WIDE_SIGMA",
           "clock_agreement", "extra_controller_policies", "fmt_ci", "git_commit", "hfl_headline",
           "hfl_section", "hfl_settings", "hfl_slowdowns", "hfl_table", "label",
           "lognormal_quartile_slowdowns", "machine_line", "main", "main_noniid_only", "mean_ci",
           "measured_section", "measured_verdict", "noniid_lines", "order_agreement", "parse_args",
           "plan_measured_units", "plan_units", "plot_convergence", "plot_cv", "plot_sweep", "policy_names",
           "rank_cv_rows", "round_spikes", "run_ddp", "run_hfl", "run_summaries", "run_units",
           "scenario_profiles", "settled_cv", "sweep_verdict", "t_quantile", "target_round", "unit_path",
           "with_change_vs_equal", "write_page"]


# The measured-clock section: the paper's policies, then Static and Min-energy (the registry decides what exists).
MEASURED_POLICIES = ("equal", "time", "low-energy", "energy", "static", "min-energy")
# The HFL-DDP section: no adaptation, the adaptive default, the energy-optimal split.
HFL_POLICIES = ("equal", "time", "min-energy")


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
    ap.add_argument("--section-timeout", type=float, default=1800.0,
                    help="seconds before one DDP/HFL command is killed")
    ap.add_argument("--skip-noniid", action="store_true",
                    help="no non-IID runs; the page's non-IID section, if it has one, is kept as it is")
    ap.add_argument("--only-noniid", action="store_true",
                    help="run only the non-IID section and replace it in the existing <out>/results.md")
    ap.add_argument("--noniid-part", default="all",
                    choices=("all", "main", "baselines", "batch-scaling", "trust", "objective"),
                    help="with --only-noniid: the part of the non-IID section to run and replace (each part has its "
                    "own markers and CSV; 'all': every part)")
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
    ap.add_argument("--per-sample-s", default="",
                    help="the modelled clock's host seconds per training sample, task=seconds,… (or one number for "
                    "every task), instead of calibrating at start: the page's provenance values rerun its modelled "
                    "runs bit for bit (another unit can round a tie between equal costs the other way)")
    ap.add_argument("--noniid-rows", default="main",
                    help="comma-separated rows of experiments.noniid.ROWS, 'main' (the main part's rows, "
                    "experiments.noniid.MAIN_ROWS; the other parts run their own) or 'all' (every row, in every part)")
    ap.add_argument("--noniid-measured-seeds", type=int, default=5,
                    help="paired seeds of the non-IID measured-clock runs (0: none)")
    ap.add_argument("--noniid-measured-task", default="mnist", help="task of the non-IID measured-clock runs")
    ap.add_argument("--noniid-measured-rows", default=None,
                    help="comma-separated rows of the measured-clock runs, among --noniid-rows (default: "
                    "experiments.noniid.MEASURED_ROWS among them)")
    ap.add_argument("--out", default=str(REPO / "docs"), help="folder of results.md (plots go to <out>/results/)")
    ap.add_argument("--work", default=str(REPO / "results" / "reproduce"),
                    help="folder of finished runs; a rerun reuses them (same settings) unless --fresh")
    ap.add_argument("--fresh", action="store_true", help="discard finished runs in --work first")
    args = ap.parse_args(argv)
    # A part of the non-IID section with rows and tasks of its own takes these two only when they are named.
    args.noniid_rows_given, args.noniid_tasks_given = args.noniid_rows != "main", args.noniid_tasks is not None
    if args.quick:
        args.tasks, args.seeds, args.rounds = "weather", 2, 4
        args.skip_ddp = args.skip_hfl = True
        args.measured_task, args.measured_seeds, args.measured_rounds = "weather", 2, 4
        args.measured_policies = "equal,time,low-energy,energy"
        args.noniid_alphas, args.noniid_rounds, args.noniid_measured_task = "0.3", "4", "weather"
        args.noniid_measured_seeds = 2
        if args.noniid_rows == "main":
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
    named = {"all": list(noniid.ROWS), "main": [r for r in noniid.MAIN_ROWS if r in noniid.ROWS]}
    asked = named.get(args.noniid_rows) or [r.strip() for r in args.noniid_rows.split(",") if r.strip()]
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
    args.per_sample_s = _per_task(ap, "--per-sample-s", args.per_sample_s, float, KNOWN_TASKS)
    if any(not (math.isfinite(v) and v > 0) for v in args.per_sample_s.values()):
        ap.error(f"--per-sample-s must give positive seconds per sample, got {args.per_sample_s}")
    if "equal-fedavg" not in args.noniid_rows:
        ap.error("the non-IID target and every ratio are against Equal + FedAvg: keep 'equal-fedavg' in --noniid-rows")
    if not args.noniid_alphas or any(not (math.isfinite(a) and a > 0) for a in args.noniid_alphas):
        ap.error(f"--noniid-alphas must be positive numbers, got {args.noniid_alphas}")
    if args.noniid_seeds < 2 or min(args.noniid_rounds.values()) < 1 or args.noniid_measured_seeds < 0 \
            or args.noniid_round_cap < 1:
        ap.error("--noniid-seeds must be >= 2, --noniid-rounds >= 1, --noniid-round-cap >= 1 and "
                 "--noniid-measured-seeds >= 0")
    if args.noniid_measured_rows is None:
        args.noniid_measured_rows = [r for r in noniid.MEASURED_ROWS if r in args.noniid_rows] or ["equal-fedavg"]
    else:
        measured = [r.strip() for r in args.noniid_measured_rows.split(",") if r.strip()]
        if "equal-fedavg" not in measured or any(r not in args.noniid_rows for r in measured):
            ap.error(f"--noniid-measured-rows must hold 'equal-fedavg' and rows of --noniid-rows only, got {measured}")
        args.noniid_measured_rows = measured
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


def modelled_unit(task: str, saved: dict[str, float], given: dict[str, float], measured: dict[str, float],
                  where: Path) -> float:
    """The modelled clock's host seconds per sample for ``task``: ``--per-sample-s``'s (``given``), else the one the
    work folder's runs used (``saved``), else this invocation's calibration (``measured``), else calibrated now.
    A given unit other than the saved one stops the command with the fix: the saved runs were timed on the other."""
    if task in given:
        if task in saved and saved[task] != given[task]:
            raise SystemExit(f"{where} holds {task} runs on a modelled clock of {saved[task]!r} s per sample, not the "
                             f"{given[task]!r} of --per-sample-s; pass --fresh or another --work")
        return given[task]
    if task in saved:
        return saved[task]
    return measured[task] if task in measured else calibrate(task)


def _stop_on_sigterm() -> None:
    """SIGTERM ends the command like Ctrl-C, so its worker processes are stopped too."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def noniid_lines(args: argparse.Namespace, work: Path, figs: Path, per_sample: dict[str, float], machine: str,
                 commit: str, command: str, date: str, part: str = "main") -> list[str]:
    """One part of the non-IID section (:mod:`experiments.noniid`, :mod:`experiments.noniid_parts`): its own
    settings check, calibration and provenance."""
    from experiments import noniid
    from experiments.inprocess import load_task
    from experiments.noniid_parts import part_args

    args = part_args(args, part)

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
        calib[t] = modelled_unit(t, calib, args.per_sample_s, per_sample, path)
    path.write_text(json.dumps({"settings": settings, "per_sample_s": calib}, indent=1))
    tasks = {*args.noniid_tasks, args.noniid_measured_task}
    metric_of = {t: load_task(t).metric for t in tasks}
    higher_of = {t: bool(load_task(t).higher_is_better) for t in tasks}
    provenance = [f"- **Command**: `{command}`; **date** {date}; **commit** `{commit}`; {machine}.",
                  "- **Calibration** (host CPU s per training sample, the modelled clock's unit): "
                  + ", ".join(f"{t} {calib[t]:.3e}" for t in sorted(calib)) + "."]
    return noniid.run(args, work, calib, metric_of, higher_of, figs, provenance, part=part)


def noniid_parts(args: argparse.Namespace) -> list[str]:
    """The parts of the non-IID section this invocation renders (``--noniid-part``)."""
    from experiments.noniid_parts import PARTS

    return list(PARTS) if args.noniid_part == "all" else [args.noniid_part]


def _command(argv: Sequence[str] | None) -> str:
    """The command line as the page states it (``argv``: a caller's arguments, else the process's)."""
    return "python -m experiments.reproduce " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                   else sys.argv[1:]))


def _folders(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(out, work)`` resolved, ``work`` emptied first with ``--fresh`` and created."""
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    if args.fresh and work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    return out, work


def _provenance(command: str) -> tuple[str, str, str]:
    """``(machine, commit, date)`` of this invocation, printed with the command."""
    machine, commit = machine_line(), git_commit()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"[reproduce] {command}\n[reproduce] {machine}; commit {commit}", flush=True)
    return machine, commit, date


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    if args.only_noniid:
        return main_noniid_only(args, argv, started)
    command = _command(argv)
    out, work = _folders(args)
    # What the cached PMA and sweep runs depend on (DDP/HFL files carry their own settings in their names).
    settings = {k: getattr(args, k) for k in ("tasks", "scenarios", "policies", "seeds", "rounds", "budget", "clock",
                                              "sweep_task", "measured_task", "measured_scenario", "measured_rounds")}
    settings_path = work / "settings.json"
    if settings_path.exists() and json.loads(settings_path.read_text()).get("settings") != json.loads(
            json.dumps(settings)):
        raise SystemExit(f"{work} holds runs of other settings; pass --fresh or another --work")
    machine, commit, date = _provenance(command)
    tasks_needed = sorted(set(args.tasks) | {args.sweep_task})
    from experiments.inprocess import load_task

    metric_of = {t: load_task(t).metric for t in {*tasks_needed, args.measured_task}}
    higher_better = {t: bool(load_task(t).higher_is_better) for t in {*tasks_needed, args.measured_task}}
    per_sample: dict[str, float] = {}
    if args.clock == "modelled":
        saved = json.loads(settings_path.read_text()).get("per_sample_s", {}) if settings_path.exists() else {}
        for t in tasks_needed:
            per_sample[t] = modelled_unit(t, saved, args.per_sample_s, {}, settings_path)
            source = ("given" if t in args.per_sample_s else f"reused from {settings_path}" if t in saved
                      else "calibrated now")
            print(f"[reproduce] calibration: {t}: {per_sample[t]:.3e} host CPU s per training sample ({source})",
                  flush=True)
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
    extra: list[str] = []
    for part in noniid_parts(args) if args.noniid else []:
        extra += [*([""] if extra else []),
                  *noniid_lines(args, work, out / "results", per_sample, machine, commit, command, date, part)]
    if not args.noniid and (out / "results.md").exists():
        from experiments.noniid_parts import kept_parts

        extra = kept_parts((out / "results.md").read_text())  # each part keeps its own command and provenance
    wall = time.perf_counter() - started
    page = write_page(out, args, rows, per_sample, metric_of, higher_better, ddp, hfl, wall, earlier, earlier_commits,
                      machine, commit, command, date, extra)
    note_wall()
    print(f"[reproduce] wrote {page} and {out / 'results'}/ in {fmt_s(wall)} (wall)", flush=True)
    return 0


def main_noniid_only(args: argparse.Namespace, argv: Sequence[str] | None, started: float) -> int:
    """``--only-noniid``: run the non-IID section and replace it in the existing page (the rest is kept as it is)."""
    from experiments.noniid_parts import splice_part

    command = _command(argv)
    out, work = _folders(args)
    machine, commit, date = _provenance(command)
    if argv is None:
        _stop_on_sigterm()
    page = out / "results.md"
    text = page.read_text() if page.exists() else "# Results\n"
    for part in noniid_parts(args):  # each part replaced as it finishes: an interrupted command keeps the others
        text = splice_part(text, noniid_lines(args, work, out / "results", {}, machine, commit, command, date, part),
                           part)
        page.write_text(text)
    print(f"[reproduce] replaced the non-IID section ({', '.join(noniid_parts(args))}) of {page} in "
          f"{fmt_s(time.perf_counter() - started)} (wall)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
