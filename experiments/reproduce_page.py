"""The results page of ``python -m experiments.reproduce``: ``<out>/results.md``, its CSVs and plots.

Contract
--------
:func:`write_page` writes ``<out>/results.md`` from an invocation's per-round rows, with the DDP and
HFL results and the non-IID section's lines it is handed, and ``results/runs.csv``, ``sweep.csv``,
``measured.csv`` and the PNG plots beside it: provenance (command, date, commit, :func:`git_commit`,
:func:`machine_line`, wall time, the reused runs), the set-up, the headline, the PMA tables per task
and scenario, the measured-clock section (:func:`measured_section`, :func:`measured_verdict`), the
w_e sweep (:func:`sweep_verdict`), the controller's overhead, DDP, HFL, non-IID, then the file
list. The per-run figures and intervals are :mod:`experiments.reproduce_figures`'s.

Cost
----
Milliseconds for the tables; about a second per plot.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.inprocess import fmt_s, idle_model_note
from experiments.reproduce_ddp_hfl import hfl_section
from experiments.reproduce_figures import (
    FROM_ROUND,
    SETTLED_ROUND,
    _md_table,
    clock_agreement,
    fmt_ci,
    mean_ci,
    order_agreement,
    round_spikes,
    run_summaries,
    settled_cv,
    target_round,
    with_change_vs_equal,
)
from experiments.reproduce_plots import plot_convergence, plot_cv, plot_sweep
from experiments.reproduce_runs import (
    JITTER_SIGMA,
    REPO,
    REUSED,
    SWEEP_W,
    WIDE_SIGMA,
    extra_controller_policies,
    label,
    scenario_profiles,
)

FEDSCALE_URL = ("https://github.com/SymbioticLab/FedScale/blob/27d7cd3d81ffcbcfe8716758aa8d67f0b11a982c/"
                "fedscale/cloud/internal/client_metadata.py")


def machine_line() -> str:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import flwr
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return (f"{cpu or 'unknown CPU'}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, torch {torch.__version__}, flwr {flwr.__version__}; "
            f"load average at start {load:.1f}")


#: What the command writes into the repository (``--out docs``): a change there is its own output, not a change of
#: the code that produced the figures.
OUTPUTS = ("docs/results.md", "docs/results")


def git_commit() -> str:
    """The commit the figures come from, ``"(with uncommitted changes)"`` when tracked files other than
    :data:`OUTPUTS` differ from it (a part regenerated after another would otherwise call its own commit dirty)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in OUTPUTS)], cwd=REPO, capture_output=True,
                               text=True).stdout.strip()
        return sha + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


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


def write_page(out: Path, args: argparse.Namespace, rows: pd.DataFrame, per_sample: dict[str, float],
               metric_of: dict[str, str], higher_better: dict[str, bool], ddp: dict | None, hfl: dict | None,
               wall_s: float, earlier_walls: Sequence[float], earlier_commits: Sequence[str], machine: str,
               commit: str, command: str, date: str, noniid: Sequence[str] = ()) -> Path:
    """Write ``out/results.md`` and the plots under ``out/results/``; returns the page's path.

    ``noniid``: the lines of the non-IID section (:func:`experiments.reproduce.noniid_lines`), placed before "Files".
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
    # The header's reuse speaks of the earlier invocations with these settings (settings.json): the IID sections.
    # The non-IID section states its own (its runs, settings and file are its own).
    reused = {k: v for k, v in REUSED.items() if not k.startswith("non-IID")}
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
          + (f". It reused finished runs ({', '.join(f'{k}: {v}' for k, v in reused.items() if v)}) of "
             f"{len(earlier_walls)} earlier invocation(s) with the same settings"
             + (f" (commit {', '.join(sorted(set(earlier_commits)))})" if earlier_commits else "")
             + f", whose wall time was {fmt_s(sum(earlier_walls))} in all" if any(reused.values()) and earlier_walls
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
          "  - *testbed*: the 11 cited boards of `flwr_adaptive.devices` "
          f"({idle_model_note(scenario_profiles('testbed', 0))}), "
          f"jitter σ = {JITTER_SIGMA:g} per device and round.",
          "  - *wide*: 11 devices whose slowdowns are the testbed's median × exp(σ·z), z ~ N(0, 1), "
          f"σ = {WIDE_SIGMA:g}, "
          "drawn anew for every seed (seed 0: "
          f"{idle_model_note(scenario_profiles('wide', 0))}), with the testbed boards' watts. Why lognormal: "
          f"FedScale's runtime (Lai et al., \"FedScale\", ICML 2022) samples client compute speed from a lognormal "
          f"([`client_metadata.py`, `get_completion_time_lognormal`]({FEDSCALE_URL}): \"assumes that client "
          "computation speed is a lognormal distribution (see PAPAYA / GFL papers)\", "
          "`np.random.lognormal(1, tail_skew)` with `tail_skew = 0.6` by default). σ = 1 is wider than that default "
          "on purpose: it is the spread of a fleet with phones several generations apart; the testbed's own "
          "σ of log-slowdown is given above.",
          "- **Target loss**: per (task, scenario, seed), Equal's holdout loss after "
          f"{target_round(args.rounds)} of its "
          f"{args.rounds} rounds (80 %); time and energy to target are summed up to the first round at or below it "
          "(\"reached\" counts the seeds where that happened; the mean is over those).",
          "- **Busy-time CV**: std / mean of the devices' compute time in a round, averaged from round "
          f"{FROM_ROUND} on.",
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
