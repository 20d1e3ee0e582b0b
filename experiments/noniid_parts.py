"""The parts of the non-IID section: what each part runs by default, its markers, its file and its lines.

Contract
--------
The results page's non-IID section comes in parts (:data:`PARTS`), each between its own markers
and with its own CSV, so that one part can be regenerated from its own runs without the others'
(``python -m experiments.reproduce --only-noniid --noniid-part NAME``; the full command renders
every part). ``main`` is the section of :func:`experiments.noniid_page.section`. ``baselines``
runs the baselines against Equal + FedAvg and Time-only as a user gets it on the tasks where the
main part did not run them (:data:`BASELINE_ROWS`, :data:`BASELINE_TASKS`, the first α only, no
measured clock) and renders them with the main part's table code (:func:`baselines_section`).
:func:`part_args` turns the command's arguments into one part's; :func:`splice_part` puts a
part's lines into the page, replacing that part only.

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

#: The baselines the main part's α = 0.3 plan left unrun on MNIST and sentiment, with the reference and the
#: adaptive default (rerun in the same invocation, so that its figures and the baselines' share their runs).
BASELINE_ROWS = ("equal-fedavg", "fedasync", "min-energy-data-size", "min-energy-normalised", "min-energy-norm-nofloor",
                 "oort", "static", "time-fedprox", "time-data-size", "time-norm-cap8-shrink")
#: The quick form's baselines part (the suite): the reference, the default, two baselines of the main part's quick
#: rows (their runs are reused) and one that only this part runs.
QUICK_BASELINE_ROWS = ("equal-fedavg", "fedasync", "time-fedprox", "time-norm-cap8-shrink")
BASELINE_TASKS = ("mnist", "sentiment")


@dataclass(frozen=True)
class Part:
    """One part of the non-IID section: its markers on the page and its CSV under ``results/``."""

    name: str
    start: str
    end: str
    csv: str


PARTS = {
    "main": Part("main", MARK_START, MARK_END, "noniid.csv"),
    "baselines": Part("baselines", "<!-- noniid-baselines:start -->", "<!-- noniid-baselines:end -->",
                      "noniid-baselines.csv"),
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
        For ``baselines``: a copy with its rows (:data:`BASELINE_ROWS`, quick: :data:`QUICK_BASELINE_ROWS`), its
        tasks (:data:`BASELINE_TASKS` among ``--tasks``, all of ``--tasks`` when it has none of them), the first α
        and no measured-clock runs.
    """
    if name not in PARTS:
        raise ValueError(f"unknown non-IID part {name!r}; choose from {list(PARTS)}")
    if name == "main":
        return args
    out = copy.copy(args)
    if not getattr(args, "noniid_rows_given", False):
        out.noniid_rows, out.noniid_left_out = available_rows(QUICK_BASELINE_ROWS if args.quick else BASELINE_ROWS)
    if not getattr(args, "noniid_tasks_given", False):
        out.noniid_tasks = [t for t in BASELINE_TASKS if t in args.tasks] or list(args.tasks)
    out.noniid_alphas = list(args.noniid_alphas[:1])
    out.noniid_measured_seeds = 0
    return out


def splice_part(page: str, lines: Sequence[str], name: str) -> str:
    """``page`` with part ``name`` replaced by ``lines``; a part new to the page goes after the main part (before
    ``## Files`` when the page has no main part)."""
    part = PARTS[name]
    after = None if name == "main" else MARK_END
    return splice(page, lines, start=part.start, end=part.end, after=after)


def baselines_section(args: Any, summary: pd.DataFrame, metric_of: dict[str, str], higher_of: dict[str, bool],
                      left_out: Sequence[str], provenance: Sequence[str]) -> list[str]:
    """The ``baselines`` part's lines, between its markers.

    Parameters
    ----------
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
    part = PARTS["baselines"]
    rows = [n for n in args.noniid_rows if n in set(summary["row"])] if len(summary) else []
    alpha = args.noniid_alphas[0]
    default = default_row("time")
    tasks = ", ".join(args.noniid_tasks)
    L = [part.start, f"### Baselines on private data ({tasks})", "", *provenance, "",
         "The set-up of the section above (Dirichlet(α) private data, quotas capped at a node's data, runs to Equal + "
         "FedAvg's virtual time, the same target and worst group), for the baselines it did not run on these tasks, "
         f"at α = {alpha:g}, {args.noniid_seeds} paired seeds per (task, scenario), virtual clock. Equal + FedAvg "
         f"and \"{ROWS[default].label}\" (Time-only as a user gets it) are rerun in the same invocation: every ratio "
         "here is against this part's own Equal + FedAvg runs. This part is rendered on its own "
         "(`--noniid-part baselines`), so the section above is kept as it is.", ""]
    L += left_out_lines(left_out)
    if not rows:
        return [*L, "No run of this part finished.", "", part.end]
    L += headline(summary, rows, args.noniid_tasks, args.scenarios, alpha, level="####")
    L += task_tables(summary, rows, args.noniid_tasks, args.scenarios, [alpha], metric_of, higher_of, level="####")
    return [*L, f"Files: `results/{part.csv}` (one line per run, every figure above).", "", part.end]
