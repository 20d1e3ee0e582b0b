"""The parts of the non-IID section: what each part runs by default, its markers, its file and its lines.

Contract
--------
The results page's non-IID section comes in parts (:data:`PARTS`), each between its own markers
and with its own CSV, so that one part can be regenerated from its own runs without the others'
(``python -m experiments.reproduce --only-noniid --noniid-part NAME``; the full command renders
every part). ``main`` is the section of :func:`experiments.noniid_page.section`. ``baselines``
runs the baselines the main part does not run against Equal + FedAvg and Time-only as a user gets
it, on every task (:data:`BASELINE_ROWS`, :data:`BASELINE_TASKS`, the first α only, no measured
clock) and renders them with the main part's table code (:func:`part_section`);
``batch-scaling`` does the same for the batch-size options of Time-only with the normalised rule
(:data:`BATCH_SCALING_ROWS` on :data:`BATCH_SCALING_TASKS`: the default ``scale_batch_size="shrink"``
against the user's batch size and equal steps); ``trust`` for the cost-trust rules on honest fleets
(:data:`TRUST_ROWS`: the default with its rules, with the rule before the edge and with trust off); ``objective``
for the normalised rule's objectives (:data:`OBJECTIVE_ROWS`: the default, ``"equal-split"``, and ``"data-size"``).
:func:`part_args` turns the command's arguments into one part's; :func:`splice_part` puts a
part's lines into the page, replacing that part only; :func:`kept_parts` reads every part a page holds.

Cost
----
Rendering only (milliseconds); the runs are :func:`experiments.noniid.run`'s.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from experiments.noniid_page import MARK_END, MARK_START, headline, left_out_lines, splice, task_tables
from experiments.noniid_rows import ROWS, available_rows, default_row

#: The baselines the main part does not run (:data:`experiments.noniid_rows.MAIN_ROWS`), with the reference, the
#: adaptive default and the main part's Min-energy and data-size rows (one invocation runs a run two parts plan once).
BASELINE_ROWS = ("equal-fedavg", "fedasync", "min-energy-data-size", "min-energy-normalised", "min-energy-norm-nofloor",
                 "min-energy-norm-shrink", "min-energy-norm-shrink-cap2",
                 "oort", "static", "time-fedprox", "time-data-size", "time-norm-cap8-shrink")
#: The quick form's baselines part (the suite): the reference, the default, two baselines of the main part's quick
#: rows (their runs are reused) and one that only this part runs.
QUICK_BASELINE_ROWS = ("equal-fedavg", "fedasync", "time-fedprox", "time-norm-cap8-shrink")
BASELINE_TASKS = ("mnist", "sentiment", "weather")
#: Time-only + normalised with each ``scale_batch_size`` (False: the user's batch size; True: equal steps; "shrink",
#: the default with private data, with and without the rescale cap) against Equal + FedAvg, on every task.
BATCH_SCALING_ROWS = ("equal-fedavg", "time-norm-cap8", "time-norm-cap8-eqsteps", "time-norm-cap8-shrink",
                      "time-norm-shrink")
#: Its quick form: rows the main part's quick rows run too (nothing runs twice).
QUICK_BATCH_SCALING_ROWS = ("equal-fedavg", "time-norm-cap8", "time-norm-cap8-shrink")
BATCH_SCALING_TASKS = ("mnist", "sentiment", "weather")
#: The default (Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk) with its cost-trust rules, with the
#: rule before the edge (every implausible claim at the median) and with trust off, against Equal + FedAvg.
TRUST_ROWS = ("equal-fedavg", "time-norm-cap8-shrink", "time-norm-cap8-shrink-trust-median",
              "time-norm-cap8-shrink-trust-off")
#: Its quick form: the main part's quick rows' reference and default, and the rule before the edge.
QUICK_TRUST_ROWS = ("equal-fedavg", "time-norm-cap8-shrink", "time-norm-cap8-shrink-trust-median")
TRUST_TASKS = BATCH_SCALING_TASKS
#: The default (its objective "equal-split": data weights at most what the equal split trains of a node) and the
#: same on the objective before it ("data-size": the claimed data size, capped), against Equal + FedAvg.
OBJECTIVE_ROWS = ("equal-fedavg", "time-norm-cap8-shrink", "time-norm-cap8-shrink-datasize")
QUICK_OBJECTIVE_ROWS = OBJECTIVE_ROWS
OBJECTIVE_TASKS = BATCH_SCALING_TASKS


@dataclass(frozen=True)
class Part:
    """One part of the non-IID section: its markers on the page and its CSV under ``results/``."""

    name: str
    start: str
    end: str
    csv: str
    #: Its rows and tasks when the command names none, and its rows in the quick form (empty for ``main``).
    rows: tuple[str, ...] = ()
    quick_rows: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    #: Its heading (the tasks follow in parentheses) and what it runs, for the page.
    title: str = ""
    what: str = ""


PARTS = {
    "main": Part("main", MARK_START, MARK_END, "noniid.csv"),
    "baselines": Part("baselines", "<!-- noniid-baselines:start -->", "<!-- noniid-baselines:end -->",
                      "noniid-baselines.csv", BASELINE_ROWS, QUICK_BASELINE_ROWS, BASELINE_TASKS,
                      "Baselines on private data", "for the baselines it does not run"),
    "batch-scaling": Part("batch-scaling", "<!-- noniid-batch-scaling:start -->", "<!-- noniid-batch-scaling:end -->",
                          "noniid-batch-scaling.csv", BATCH_SCALING_ROWS, QUICK_BATCH_SCALING_ROWS, BATCH_SCALING_TASKS,
                          "Batch sizes with the normalised rule",
                          "for Time-only + normalised (rescale ≤ 8 unless said) with each `scale_batch_size`: `False` "
                          "(every node at the user's batch size, a fast node takes more steps), `True` (every node "
                          "takes an equal split's steps, a fast node in bigger batches) and `\"shrink\"` (only the "
                          "nodes below the equal share shrink their batches to take its steps: the default with "
                          "private data)"),
    "trust": Part("trust", "<!-- noniid-trust:start -->", "<!-- noniid-trust:end -->", "noniid-trust.csv",
                  TRUST_ROWS, QUICK_TRUST_ROWS, TRUST_TASKS, "Cost trust on honest fleets",
                  "for the default (Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk) with its "
                  "cost-trust rules (`trust=True`: a per-sample claim more than 4× below the other nodes' median is "
                  "taken at 4× below it, one more than 16× below at the median), with the rule before that edge (every "
                  "claim more than 4× below taken at the median) and with trust off (`trust=False`: every claim "
                  "believed). Every node here is honest: the testbed's fastest device is 2.25× faster than its median, "
                  "the wide fleet's 3.0–5.7× (seeds 0–4), and a group of the fastest is judged against the median of "
                  "the slower rest, so the wide fleet's fastest nodes are held back by any rule; trust off bounds "
                  "what the rules cost"),
    "objective": Part("objective", "<!-- noniid-objective:start -->", "<!-- noniid-objective:end -->",
                      "noniid-objective.csv", OBJECTIVE_ROWS, QUICK_OBJECTIVE_ROWS, OBJECTIVE_TASKS,
                      "The normalised rule's objective",
                      "for the default (Time-only + normalised, rescale ≤ 8, slow nodes' batches shrunk) with each "
                      "`objective`, the data weights p_i of the objective the rule keeps: `\"equal-split\"`, the "
                      "default (each node's claimed data size, at most what the equal split trains of it: the "
                      "objective Equal + FedAvg optimises), "
                      "and `\"data-size\"`, the default before it (the claimed size, capped at 2× the round's median "
                      "claim: the pooled data's objective)"),
}


def part_args(args: Any, name: str) -> Any:
    """The command's arguments as part ``name`` runs them (``main``: ``args`` themselves).

    Parameters
    ----------
    args : argparse.Namespace
        :func:`experiments.reproduce.parse_args`'s arguments; ``noniid_rows_given`` and ``noniid_tasks_given`` say
        whether ``--noniid-rows`` and ``--noniid-tasks`` were named (they then hold for this part too).
    name : str
        A key of :data:`PARTS`.

    Returns
    -------
    argparse.Namespace
        For the other parts: a copy with the part's rows (:attr:`Part.rows`, quick: :attr:`Part.quick_rows`), its
        tasks (:attr:`Part.tasks` among ``--tasks``, all of ``--tasks`` when it has none of them), the first α
        and no measured-clock runs.
    """
    if name not in PARTS:
        raise ValueError(f"unknown non-IID part {name!r}; choose from {list(PARTS)}")
    if name == "main":
        return args
    part = PARTS[name]
    out = copy.copy(args)
    if not getattr(args, "noniid_rows_given", False):
        out.noniid_rows, out.noniid_left_out = available_rows(part.quick_rows if args.quick else part.rows)
    if not getattr(args, "noniid_tasks_given", False):
        out.noniid_tasks = [t for t in part.tasks if t in args.tasks] or list(args.tasks)
    out.noniid_alphas = list(args.noniid_alphas[:1])
    out.noniid_measured_seeds = 0
    return out


def splice_part(page: str, lines: Sequence[str], name: str) -> str:
    """``page`` with part ``name`` replaced by ``lines``; a part new to the page goes after the nearest part before
    it in :data:`PARTS` that the page has (before ``## Files`` when it has none)."""
    part = PARTS[name]
    order = list(PARTS)
    before = [PARTS[n].end for n in order[: order.index(name)] if PARTS[n].end in page]
    return splice(page, lines, start=part.start, end=part.end, after=before[-1] if before else None)


def kept_parts(page: str) -> list[str]:
    """The lines of every part ``page`` holds (its markers included), in :data:`PARTS`' order with a blank line
    between parts: the non-IID section ``--skip-noniid`` keeps when it rewrites an existing page."""
    lines = page.splitlines()
    kept: list[str] = []
    for part in PARTS.values():
        if part.start in lines and part.end in lines[lines.index(part.start):]:
            start = lines.index(part.start)
            kept += [*([""] if kept else []), *lines[start: lines.index(part.end, start) + 1]]
    return kept


def part_section(name: str, args: Any, summary: pd.DataFrame, metric_of: dict[str, str], higher_of: dict[str, bool],
                 left_out: Sequence[str], provenance: Sequence[str]) -> list[str]:
    """The lines of part ``name`` (not ``main``), between its markers.

    Parameters
    ----------
    name : str
        A key of :data:`PARTS` other than ``main``.
    args : argparse.Namespace
        The part's arguments (:func:`part_args`).
    summary : pandas.DataFrame
        Per-run figures (:func:`experiments.noniid_figures.summarise`) of the part's runs.
    metric_of, higher_of : dict
        Per task: the metric's column and whether higher is better.
    left_out : Sequence[str]
        Rows the installed strategies cannot run.
    provenance : Sequence[str]
        The part's provenance lines (command, date, commit, machine, calibration, wall time, what did not run).
    """
    part = PARTS[name]
    rows = [n for n in args.noniid_rows if n in set(summary["row"])] if len(summary) else []
    alpha = args.noniid_alphas[0]
    default = default_row("time")
    tasks = ", ".join(args.noniid_tasks)
    L = [part.start, f"### {part.title} ({tasks})", "", *provenance, "",
         "The set-up of the section above (Dirichlet(α) private data, quotas capped at a node's data, runs to Equal + "
         f"FedAvg's virtual time, the same target and worst group), {part.what}, "
         f"at α = {alpha:g}, {args.noniid_seeds} paired seeds per (task, scenario), virtual clock. Equal + FedAvg "
         f"and \"{ROWS[default].label}\" (Time-only as a user gets it) are rerun in the same invocation: every ratio "
         "here is against this part's own Equal + FedAvg runs. This part is rendered on its own "
         f"(`--noniid-part {name}`), so the sections above are kept as they are.", ""]
    L += left_out_lines(left_out)
    if not rows:
        return [*L, "No run of this part finished.", "", part.end]
    L += headline(summary, rows, args.noniid_tasks, args.scenarios, alpha, level="####")
    L += task_tables(summary, rows, args.noniid_tasks, args.scenarios, [alpha], metric_of, higher_of, level="####")
    return [*L, f"Files: `results/{part.csv}` (one line per run, every figure above).", "", part.end]
