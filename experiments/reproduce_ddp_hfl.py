"""The DDP and HFL-DDP sections of ``python -m experiments.reproduce``: their commands, figures and HFL text.

Contract
--------
:func:`run_ddp` runs ``experiments.ddp_benchmark`` and :func:`run_hfl` runs ``experiments.hfl``
(``flwr run apps/hfl``) as subprocesses, per setting and seed; each result is kept under ``--work``
(a rerun reuses it and :data:`experiments.reproduce_runs.REUSED` counts it) and a failed command is
recorded for the page, not raised. :func:`rank_cv_rows` gives the ranks' CV per round and silo,
:func:`hfl_table` and :func:`hfl_headline` the HFL table and sentence, :func:`hfl_section` the page's
HFL-DDP section (the DDP section's text is :func:`experiments.reproduce_page.write_page`'s).

Cost
----
One subprocess per setting and seed (≈ 50 s per ``flwr run`` of apps/hfl); the figures are
milliseconds beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.inprocess import fmt_s
from experiments.reproduce_figures import FROM_ROUND, SETTLED_ROUND, _md_table, fmt_ci, settled_cv
from experiments.reproduce_plots import plot_cv
from experiments.reproduce_runs import REPO, REUSED, WIDE_SIGMA, label

HFL_STEPS = 10  # DDP steps per silo round; the HFL strategy's smallest rank quota is one sample per step


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
                print(f"[reproduce] ddp run {k}/{total} done: {setting}, seed {seed} in "
                      f"{time.perf_counter() - t0:.0f} s "
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
         f"ratio inside a silo {ratio('testbed', 0):.2g}×); *wide*: the wide scenario's lognormal "
         f"σ = {WIDE_SIGMA:g} fleet of each "
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
