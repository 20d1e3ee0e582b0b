"""How much of the HFL rank CV is the emulation's noise, and how much the controller's.

``python -m experiments.hfl_noise DIR [DIR ...]`` reads the per-rank histories that
``python -m experiments.hfl --policies equal,...`` wrote into each ``DIR``. Equal holds every
rank's quota fixed (the budget split evenly, every round), so its ranks' time per sample moves
between rounds only with the emulation's noise. From those traces it prints (virtual clock, the
clock the runs recorded):

- **fixed-quota noise**: the mean and largest round-to-round change of a rank's time per sample;
- **noise floor**: the CV of the ranks' compute time inside each silo in rounds >= 3 if every
  rank's quota were set from its *mean* time per sample over rounds >= 2 (an oracle that knows
  each rank's true speed but not the round's noise): no controller that reacts to measurements
  can expect to beat it;
- **start-up round**: round 1's time per sample over the mean of rounds >= 3 (the ranks were
  started in round 1);
- **trace replay**: each controller policy run offline on the same traces (a rank's time in a
  round = its quota × the time per sample measured in that round; round 2 replaces the start-up
  round, as in the strategy), CV over rounds >= 3: what the controller adds on top of the floor,
  on identical noise (a per-sample cost model: the traces cannot say how a fixed cost would have
  moved at other quotas);
- next to it, the CV the runs themselves measured (``history-<policy>.csv``), when present;
- below, each rank's fixed cost per round: a line fitted to its rounds >= 2 in every policy's
  run (the adaptive policies move its quota).

``python -m experiments.hfl_noise --probe`` instead runs one silo of 2 ranks alone (no Flower;
MNIST partition 1 of 2, the testbed slowdowns of silo 1, 300 samples per rank over 10 steps)
for ``--rounds`` rounds at fixed quotas and prints the same fixed-quota noise and floor for the
rank times as measured (slowdown × CPU seconds of every step) and as reported (host spikes
capped, :func:`flwr_adaptive.clients.silo.despiked_steps`), from the same steps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from flwr_adaptive.controller import AllocationController, Report

#: label -> controller of one silo (budget 600 split among its ranks, min quota = 10 steps)
REPLAY_POLICIES: dict[str, Callable[[int, int], AllocationController]] = {
    # the hierarchical strategy's default: no deadband for rank splits
    "time": lambda budget, lo: AllocationController.from_policy("time", budget, min_quota=lo, deadband=0.0),
    "time, deadband 0.02": lambda budget, lo: AllocationController.from_policy("time", budget, min_quota=lo,
                                                                                deadband=0.02),
    "time-paper": lambda budget, lo: AllocationController.from_policy("time", budget, min_quota=lo, paper=True),
    "time-paper, deadband 0": lambda budget, lo: AllocationController.from_policy(
        "time", budget, min_quota=lo, paper=True, deadband=0.0),
}


def rate_traces(directory: Path) -> list[np.ndarray]:
    """Per silo, a ``(rounds, ranks)`` array of seconds per sample from the Equal run in ``directory``."""
    ranks = pd.read_csv(Path(directory) / "history-equal-ranks.csv")
    ranks = ranks[ranks["samples"] > 0].assign(rate=lambda d: d["time_s"] / d["samples"])
    return [g.pivot(index="round", columns="rank", values="rate").sort_index().to_numpy()
            for _, g in ranks.groupby("partition_id")]


def cv(times: np.ndarray) -> np.ndarray:
    """CV (population std / mean) of each row."""
    times = np.atleast_2d(times)
    return times.std(axis=1) / times.mean(axis=1)


def oracle_cv(trace: np.ndarray) -> np.ndarray:
    """Per round, the CV of a split proportional to ``1 / mean rate over rounds >= 2``."""
    mean = trace[1:].mean(axis=0) if len(trace) > 1 else trace.mean(axis=0)
    return cv(trace / mean)


def replay(trace: np.ndarray, make: Callable[[int, int], AllocationController], budget: int = 600,
           min_quota: int = 10) -> np.ndarray:
    """Per round, the CV of the controller's split on the trace (time = quota × measured rate).

    Round 1 is the ranks' start-up round: as in the hierarchical strategy, it seeds the split
    of round 2 and round 2's observations replace it.
    """
    ctrl = make(budget, min_quota)
    ids = list(range(trace.shape[1]))
    out = []
    for r, rates in enumerate(trace, start=1):
        q = ctrl.allocate(ids)
        n = np.array([q[i] for i in ids])
        t = n * rates
        out.append(float(cv(t)[0]))
        if r == 2:
            ctrl.forget(ids)
        for i in ids:
            ctrl.observe(i, Report(time_s=float(t[i]), samples=int(n[i])))
    return np.array(out)


def startup_ratio(trace: np.ndarray) -> np.ndarray:
    """Per rank, round 1's time per sample over the mean of rounds >= 3 (the start-up round's excess)."""
    return trace[0] / trace[2:].mean(axis=0)


def fixed_costs(directories: list[Path], budget: int = 600) -> pd.DataFrame:
    """Per (silo, rank), the least-squares line ``seconds = fixed + per_sample × samples`` over
    rounds >= 2 of every policy's ``history-*-ranks.csv`` in ``directories`` (the adaptive runs
    move the quotas, which identifies both terms), and the fixed share of a rank's round at an
    even split of ``budget``. Pool only runs of the same devices: the testbed spread (its ranks'
    slowdowns do not depend on the seed), without ``--drift-round``."""
    frames = [pd.read_csv(path) for d in directories for path in sorted(Path(d).glob("history-*-ranks.csv"))]
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[(rows["round"] >= 2) & (rows["samples"] > 0)]
    out = []
    for (silo, rank), g in rows.groupby(["partition_id", "rank"]):
        n, t = g["samples"].to_numpy(float), g["time_s"].to_numpy(float)
        if np.ptp(n) == 0:
            continue  # one quota only (Equal): the line is not identified
        per_sample, fixed = np.polyfit(n, t, 1)
        ranks = rows.loc[rows["partition_id"] == silo, "rank"].nunique()
        even = budget / ranks
        out.append({"silo": silo, "rank": rank, "rounds": len(n), "samples": f"{n.min():.0f}-{n.max():.0f}",
                    "fixed_s": fixed, "per_sample_s": per_sample,
                    "fixed share at an even split": fixed / (fixed + per_sample * even)})
    return pd.DataFrame(out)


def summarise(directories: list[Path], budget: int = 600, min_quota: int = 10) -> pd.DataFrame:
    """One row per figure (see the module doc); columns: mean over the runs' silos, and per run."""
    rows = []
    for d in directories:
        traces = rate_traces(d)
        change = np.concatenate([np.abs(t[2:] / t[1:-1] - 1.0).ravel() for t in traces if len(t) > 2])
        figures = {"fixed-quota noise: mean |round-to-round change| of s/sample (rounds >= 3)": change.mean(),
                   "fixed-quota noise: largest change": change.max(),
                   "noise floor: CV, split by each rank's mean speed (rounds >= 3)":
                       np.mean([oracle_cv(t)[2:].mean() for t in traces]),
                   "start-up round: its s/sample over the mean of rounds >= 3":
                       np.mean([startup_ratio(t).mean() for t in traces if len(t) > 2])}
        for label, make in REPLAY_POLICIES.items():
            figures[f"replay: {label} (rounds >= 3)"] = np.mean([replay(t, make, budget, min_quota)[2:].mean()
                                                                  for t in traces])
        for path in sorted(Path(d).glob("history-*.csv")):
            name = path.stem[len("history-"):]
            if name.endswith(("-ranks", "-clients")):
                continue
            hist = pd.read_csv(path)
            figures[f"measured in the run: {name} (rounds >= 3)"] = hist[hist["round"] >= 3]["rank_cv_mean"].mean()
        rows.append(pd.Series(figures, name=Path(d).name))
    table = pd.concat(rows, axis=1)
    table.insert(0, "mean", table.mean(axis=1))
    table.insert(1, "spread (max - min)", table.iloc[:, 1:].max(axis=1) - table.iloc[:, 1:].min(axis=1))
    return table


def probe(rounds: int = 10, slowdowns: tuple[float, ...] | None = None) -> pd.DataFrame:
    """One silo alone at fixed quotas: fixed-quota noise and floor of the raw vs the capped rank clock."""
    import experiments  # noqa: F401  (puts apps/hfl on sys.path)
    from hfl_app.task import silo_devices

    from flwr_adaptive.clients.ddp.tasks import task_spec
    from flwr_adaptive.clients.silo import Silo, despiked_steps

    slow = list(slowdowns) if slowdowns else [max(d.slowdown, 1.0) for d in silo_devices("2", 1)]
    raw, capped = [], []
    with Silo(task_spec("mnist", partition_id=1, num_partitions=2), ranks=len(slow), name="probe") as silo:
        start = 0
        for _ in range(rounds):
            result = silo.train([300] * len(slow), 10, start=start, slowdowns=slow)
            start = result.end
            tel = sorted(result.telemetry, key=lambda t: t.rank)
            raw.append([t.time_s / t.samples for t in tel])
            capped.append([despiked_steps(t.step_compute_s[t.rank], t.batch_sizes).sum() / t.samples for t in tel])
    rows = {}
    for label, trace in (("as measured", np.array(raw)), ("host spikes capped", np.array(capped))):
        change = np.abs(trace[2:] / trace[1:-1] - 1.0)
        rows[label] = {"mean |round-to-round change| (rounds >= 3)": change.mean(), "largest change": change.max(),
                       "noise floor CV (rounds >= 3)": oracle_cv(trace)[2:].mean()}
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="HFL rank CV: the emulation's noise floor vs the controller (virtual "
                                 "clock), from experiments.hfl output folders that include an Equal run")
    ap.add_argument("dirs", nargs="*", help="experiments.hfl --out folders (each with history-equal-ranks.csv)")
    ap.add_argument("--probe", action="store_true", help="one silo alone at fixed quotas: raw vs capped rank clock")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of --probe")
    ap.add_argument("--budget", type=int, default=600, help="samples per silo and round (as in the runs)")
    ap.add_argument("--min-quota", type=int, default=10, help="smallest rank quota (the runs' steps)")
    args = ap.parse_args(argv)
    if args.probe:
        if args.rounds < 4:
            ap.error(f"--rounds must be >= 4, got {args.rounds}")
        print(f"== One silo alone (2 ranks, fixed quotas 300/300, {args.rounds} rounds): rank time per sample, "
              "VIRTUAL clock ==")
        print(probe(args.rounds).to_string(float_format=lambda v: f"{v:.3f}"))
        return 0
    if not args.dirs:
        ap.error("give experiments.hfl --out folders, or --probe")
    missing = [d for d in args.dirs if not (Path(d) / "history-equal-ranks.csv").exists()]
    if missing:
        ap.error(f"no history-equal-ranks.csv in {missing}: run experiments.hfl with equal among --policies")
    table = summarise([Path(d) for d in args.dirs], args.budget, args.min_quota)
    pd.set_option("display.width", 220)
    pd.set_option("display.max_colwidth", 90)
    print("== HFL rank CV inside the silos: emulation noise vs controller (VIRTUAL clock of the runs) ==")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    lines = fixed_costs([Path(d) for d in args.dirs], args.budget)
    if len(lines):
        print("\n== Each rank's fixed cost per round, pooled over the runs' policies and rounds >= 2 (least "
              "squares, VIRTUAL clock) ==")
        print(lines.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
