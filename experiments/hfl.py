"""HFL-DDP through ``flwr run apps/hfl`` once per policy, offline, and one table.

``python -m experiments.hfl`` runs the HFL-DDP Flower App (``apps/hfl``) on a private SuperLink
(see :mod:`experiments.compare`), once per policy, and prints the mean CV of the ranks' compute
time inside the silos per round (virtual clock) and a summary table (see ``--help``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.compare import REPO
from flwr_adaptive.controller import POLICIES
from flwr_adaptive.strategies.registry import LABELS, parse_run_name

if TYPE_CHECKING:  # pandas is imported where the tables are built
    import pandas as pd

APP_DIR = REPO / "apps" / "hfl"

_ROUND_LINE = re.compile(r"\[hfl\] round (\d+) \((\w+) clock\): .*\(mean ([0-9.nan]+)\)")


def flwr_command(policy: str, args: argparse.Namespace, out_dir: Path) -> list[str]:
    """``flwr run apps/hfl`` for ``policy`` (a run name: ``time-paper`` is ``time`` with the paper's
    estimation and deadband) on the ``local`` SuperLink (see ``experiments.compare``)."""
    from experiments.compare import console_script

    name, paper = parse_run_name(policy)
    run_config = (f"policy='{name}' paper={str(paper).lower()} num-server-rounds={args.rounds} num-silos={args.silos} "
                  f"silo-budget={args.budget} steps={args.steps} ranks='{args.ranks}' task='{args.task}' "
                  f"seed={args.seed} drift-round={args.drift_round} drift-factor={float(args.drift_factor)} "
                  f"spread='{args.spread}' deadband={float(args.deadband)} out-dir='{out_dir}'")
    federation = f"num-supernodes={args.silos} client-resources-num-cpus={args.cpus_per_client}"
    return [console_script("flwr"), "run", str(APP_DIR), "local", "--stream", "-c", run_config,
            "--federation-config", federation]


def round_progress(policy: str, line: str, args: argparse.Namespace) -> str | None:
    """The progress line printed for an ``[hfl] round`` log line (else None)."""
    m = _ROUND_LINE.search(line)
    if m is None:
        return None
    return (f"  [{LABELS.get(policy, policy)}] round {m.group(1)}/{args.rounds}: mean CV of rank compute time "
            f"inside the silos {float(m.group(3)):.3f} ({m.group(2)} clock)")


def result_row(label: str, hist: pd.DataFrame, summary: dict, settled_round: int) -> dict:
    """One policy's row of the result table from its per-round history: the rank CV over rounds >= 3
    and, when the run reached it, from ``settled_round`` on (the split after the controller has seen
    ``settled_round - 1`` rounds)."""
    final = summary["rounds"][-1] if summary["rounds"] else {}
    cv = hist.set_index("round")["rank_cv_mean"]
    row = {"policy": label, "rounds": len(hist), "makespan_s (virtual)": hist["makespan_s"].sum(),
           "rank CV, rounds >= 3": cv[cv.index >= 3].mean()}
    if cv.index.max() >= settled_round:
        row[f"rank CV, rounds >= {settled_round}"] = cv[cv.index >= settled_round].mean()
    row.update({"final holdout loss": final.get("loss", float("nan")),
                "final holdout acc": final.get("accuracy", float("nan")), "run wall_s": summary["wall_s"]})
    return row


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.hfl``: the HFL app through ``flwr run`` per policy, and one table."""
    import os

    import pandas as pd

    from experiments.compare import require_positive, run_policies

    ap = argparse.ArgumentParser(description="HFL-DDP through `flwr run apps/hfl` on a private SuperLink, offline: "
                                 "per policy, the CV of the ranks' compute time inside every silo.")
    ap.add_argument("--policies", default="equal,time-paper,time,min-energy",
                    help="comma-separated: equal, time, low-energy, energy, min-energy, or time-paper / "
                         "low-energy-paper / energy-paper (the paper's estimation and deadband)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--silos", type=int, default=3, help="SuperNodes, one silo each")
    ap.add_argument("--ranks", default="2", help="DDP ranks per silo: an int or a comma list cycled over the silos")
    ap.add_argument("--budget", type=int, default=600, help="samples per round of each silo")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per silo round")
    ap.add_argument("--task", default="mnist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread", choices=("testbed", "wide"), default="testbed",
                    help="the ranks' emulated devices: testbed (the 11 cited boards) or wide (11 devices with "
                         "lognormal sigma = 1 slowdowns drawn per --seed, the results' wide scenario)")
    ap.add_argument("--drift-round", type=int, default=0, help="> 0: rank 0 of every silo slows from this round")
    ap.add_argument("--drift-factor", type=float, default=2.0)
    ap.add_argument("--settled-round", type=int, default=7,
                    help="with at least this many rounds, also the rank CV from this round on (the split after "
                         "the controller has seen settled-round - 1 rounds)")
    ap.add_argument("--deadband", type=float, default=-1.0,
                    help="the rank controller's deadband (0: re-split every round); < 0: the strategy's default "
                         "(0; the paper's 5 %% with time-paper)")
    ap.add_argument("--cpus-per-client", type=int, default=os.cpu_count() or 1,
                    help="Ray CPUs per silo; all cores = one actor that keeps every silo's ranks")
    ap.add_argument("--out", default=str(APP_DIR.parent.parent / "results" / "hfl"), help="folder for CSVs and logs")
    ap.add_argument("--run-timeout", type=float, default=900.0, help="seconds before one flwr run is killed")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies or any(parse_run_name(p)[0] not in POLICIES or p not in LABELS for p in policies):
        ap.error(f"--policies must name some of {', '.join(p for p in LABELS if parse_run_name(p)[0] in POLICIES)}, "
                 f"got {args.policies!r}")
    from hfl_app.task import silo_ranks  # noqa: E402  (apps/hfl is on sys.path, see experiments/__init__.py)

    require_positive(ap, args, ("rounds", "silos", "budget", "steps", "cpus_per_client", "settled_round"))
    try:
        for pid in range(args.silos):
            silo_ranks(args.ranks, pid)
    except ValueError as err:
        ap.error(str(err))

    started = time.perf_counter()
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"== HFL-DDP: `flwr run apps/hfl` per policy; {args.silos} silos, ranks {args.ranks!r}, {args.rounds} rounds, "
          f"{args.budget} samples per silo and round over {args.steps} DDP steps, task {args.task}, "
          f"{args.spread} devices, seed {args.seed} (offline) ==",
          flush=True)
    summaries, memory, left = run_policies(policies, args, out_dir, command=flwr_command, progress=round_progress,
                                           app_label="apps/hfl")

    rows, cv_rounds = [], {}
    for policy, summary in summaries.items():
        hist = pd.read_csv(out_dir / f"history-{policy}.csv")
        cv_rounds[LABELS[policy]] = hist.set_index("round")["rank_cv_mean"]
        rows.append(result_row(LABELS[policy], hist, summary, args.settled_round))
    table = pd.DataFrame(rows).set_index("policy")
    table.to_csv(out_dir / "comparison.csv")
    pd.set_option("display.width", 220)
    print("\n== Mean CV of the ranks' compute time inside the silos, per round (VIRTUAL clock: ranks' CPU "
          "seconds x emulated slowdown) ==")
    print(pd.DataFrame(cv_rounds).to_string(float_format=lambda v: f"{v:.3f}"))
    print("\n== Result (makespan: VIRTUAL clock, summed over rounds; run wall_s: WALL clock) ==")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"\nThis command: {time.perf_counter() - started:.1f} s wall clock; peak resident memory of the run's "
          f"processes {memory.peak_bytes / 2**30:.2f} GB (sum of RSS over {memory.peak_procs} processes, DDP ranks "
          f"included); processes left running: {left} (all it had: processes.json)")
    print(f"CSV: {out_dir / 'comparison.csv'}; per-round, per-silo and per-rank histories and logs in {out_dir}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
