"""The baselines side by side: ``flwr run apps/pma`` once per policy on the emulated testbed, one table.

Contract
--------
``python -m experiments.baselines`` runs the repository's Flower App (``apps/pma``,
the emulated 11-device PMA federation) through the real ``flwr run`` path (private SuperLink,
offline: :mod:`experiments.compare`) once per policy — Equal, Static, Oort-like, FedAsync,
Time-only, Low-energy, Energy-only, all processing ``budget`` samples per round (per
round-equivalent for FedAsync) on the same task, seed and device jitter — and prints:

- the **target**: Equal's holdout loss after 80 % of its rounds (``--target-at``);
- per policy: rounds, **virtual time and energy to reach the target** (summed over the rounds up
  to the first evaluation at or below it; "not reached" otherwise), totals over the whole run,
  final holdout loss and accuracy, and participants excluded (per round on average, and never
  selected), plus the wall time of each run;
- how often Oort-like selection picked each device.

Clocks: makespan and energy are on the VIRTUAL clock (device time from the testbed profiles,
:mod:`flwr_adaptive.devices`); energy is active energy plus idle power while waiting for the round's
slowest participant. Devices that Oort leaves out of a round are not counted by its strategy; the
column "energy to target, excluded idle incl." adds their idle power for the round's makespan (as
if they stayed powered on). FedAsync has no waits except at the end. Run wall times are WALL clock.

Cost
----
About 20 s of ``flwr run`` start-up per policy plus the rounds: a few minutes for the 7 policies
on a 2-core machine. Progress is printed per round.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.compare import REPO, add_run_arguments, fresh_out_dir, require_positive, run_policies
from flwr_adaptive.devices import get_testbed
from flwr_adaptive.strategies.registry import LABELS

__all__ = ["POLICY_ORDER", "LABELS", "target_loss", "baseline_table", "oort_selection_table", "main"]

POLICY_ORDER = ("equal", "static", "oort", "fedasync", "time", "low-energy", "energy")


def _losses(summary: dict[str, Any]) -> dict[int, float]:
    """``{round: holdout loss}`` from a run summary (round 0 = the initial model)."""
    return {int(r["round"]): float(r["loss"]) for r in summary.get("rounds", []) if "loss" in r}


def target_loss(equal_summary: dict[str, Any], rounds: int, target_at: float = 0.8) -> tuple[int, float]:
    """``(round, loss)``: Equal's holdout loss after ``ceil(target_at · rounds)`` rounds."""
    if not 0.0 < target_at <= 1.0:
        raise ValueError(f"target_at must lie in (0, 1], got {target_at}")
    r = max(1, math.ceil(target_at * rounds - 1e-9))
    losses = _losses(equal_summary)
    if r not in losses:
        raise ValueError(f"Equal's summary has no holdout loss for round {r}; rerun Equal for {rounds} rounds")
    return r, losses[r]


def _excluded_idle_j(policy: str, hist: pd.DataFrame, clients: pd.DataFrame | None, n: int,
                     idle_w: dict[int, float]) -> pd.Series:
    """Per round: idle joules of devices left out of the round, had they stayed on (Oort only)."""
    if policy != "oort" or clients is None or clients.empty:
        return pd.Series(0.0, index=hist.index)
    out = []
    for _, row in hist.iterrows():
        chosen = set(clients.loc[clients["round"] == row["round"], "partition_id"].dropna().astype(int))
        out.append(sum(idle_w[p % len(idle_w)] for p in range(n) if p not in chosen) * row["makespan_s"])
    return pd.Series(out, index=hist.index)


def baseline_table(histories: dict[str, pd.DataFrame], clients: dict[str, pd.DataFrame | None],
                   summaries: dict[str, dict[str, Any]], rounds: int, n_clients: int,
                   target_at: float = 0.8, idle_w: dict[int, float] | None = None) -> tuple[pd.DataFrame, float, int]:
    """One row per policy (see the module docstring); returns ``(table, target loss, target round)``.

    Parameters
    ----------
    histories, clients : dict
        Per policy: the strategy's per-round history and per-client rows (``history-<p>.csv``
        and ``history-<p>-clients.csv`` as the Flower App writes them).
    summaries : dict
        Per policy: the App's ``summary-<p>.json`` (holdout metrics by round).
    rounds, n_clients : int
        Rounds of every run and clients of the federation.
    target_at : float
        Share of Equal's rounds after which its holdout loss is the target.
    idle_w : dict, optional
        ``{device index: idle watts}`` of the testbed (``partition % len``) for Oort's excluded idle.
    """
    if "equal" not in summaries:
        raise ValueError("the target is Equal's holdout loss: include 'equal' in the policies")
    t_round, target = target_loss(summaries["equal"], rounds, target_at)
    idle_w = idle_w or {i: p.idle_w for i, p in enumerate(get_testbed())}
    rows = []
    for policy, hist in histories.items():
        hist = hist.sort_values("round").reset_index(drop=True)
        losses = _losses(summaries[policy])
        reached = next((r for r in sorted(losses) if r >= 1 and losses[r] <= target), None)
        upto = hist[hist["round"] <= reached] if reached is not None else hist.iloc[0:0]
        extra = _excluded_idle_j(policy, hist, clients.get(policy), n_clients, idle_w)
        cl = clients.get(policy)
        if policy == "fedasync":
            ok = cl[cl["status"] == "ok"] if cl is not None and not cl.empty else pd.DataFrame()
            used = set(ok["partition_id"].dropna().astype(int)) if len(ok) else set()
            excluded_per_round = float(n_clients - len(used))
            never = n_clients - len(used)
        else:
            excluded_per_round = float((n_clients - hist["clients"]).mean())
            seen = set(cl["partition_id"].dropna().astype(int)) if cl is not None and not cl.empty else set()
            never = n_clients - len(seen)
        final = losses[max(losses)] if losses else math.nan
        acc = [r.get("accuracy") for r in summaries[policy].get("rounds", [])]
        nan = math.nan
        rows.append({
            "policy": LABELS.get(policy, policy),
            "rounds": len(hist),
            "rounds to target": reached if reached is not None else nan,
            "time to target s (virtual)": upto["makespan_s"].sum() if reached is not None else nan,
            "energy to target J (virtual)": upto["energy_j"].sum() if reached is not None else nan,
            "energy to target, excluded idle incl. J": (upto["energy_j"].sum() + extra[upto.index].sum()
                                                        if reached is not None else nan),
            "total time s (virtual)": hist["makespan_s"].sum(),
            "total energy J (virtual)": hist["energy_j"].sum(),
            "final holdout loss": final,
            "final holdout acc": acc[-1] if acc and acc[-1] is not None else nan,
            "excluded / round": excluded_per_round,
            "never selected": never,
            "run wall s": summaries[policy].get("wall_s", nan),
        })
    return pd.DataFrame(rows).set_index("policy"), target, t_round


def oort_selection_table(clients: pd.DataFrame, rounds: int, n_clients: int) -> pd.DataFrame:
    """How often Oort-like selection picked each participant (device of the testbed by partition)."""
    testbed = get_testbed()
    counts = clients[clients["status"].isin(["ok", "probe"])].groupby("partition_id")["round"].nunique()
    rows = []
    for p in range(n_clients):
        dev = testbed[p % len(testbed)]
        c = int(counts.get(p, 0))
        rows.append({"partition": p, "device": dev.name, "slowdown": dev.slowdown, "selected rounds": c,
                     "share of rounds": c / rounds})
    return pd.DataFrame(rows).set_index("partition").sort_values("slowdown")


def _read(out_dir: Path, policy: str) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    hist = pd.read_csv(out_dir / f"history-{policy}.csv")
    path = out_dir / f"history-{policy}-clients.csv"
    return hist, (pd.read_csv(path) if path.exists() else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default=",".join(POLICY_ORDER),
                    help="comma-separated, must include equal (the target's reference): " + ", ".join(POLICY_ORDER))
    add_run_arguments(ap, out=REPO / "results" / "baselines", run_timeout_s=900.0,
                      budget_help="samples per round (per round-equivalent for FedAsync)")
    ap.add_argument("--target-at", type=float, default=0.8, help="target = Equal's holdout loss after this share of its rounds")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in LABELS]
    if bad or "equal" not in policies:
        ap.error(f"--policies must include equal and name only {', '.join(POLICY_ORDER)}; got {policies}")
    policies = ["equal"] + [p for p in policies if p != "equal"]
    require_positive(ap, args, ("rounds", "budget", "clients", "cpus_per_client"))
    if args.jitter < 0 or not 0 < args.target_at <= 1:
        ap.error(f"--jitter must be >= 0 and --target-at in (0, 1]; got {args.jitter} and {args.target_at}")

    started = time.perf_counter()
    out_dir = fresh_out_dir(args.out)
    print(f"== Baselines: `flwr run apps/pma` per policy, {args.clients} emulated devices, {args.rounds} rounds of "
          f"{args.budget} samples, task {args.task} (offline), seed {args.seed}, jitter {args.jitter} ==", flush=True)
    summaries, memory, left = run_policies(policies, args, out_dir)
    histories, clients = {}, {}
    for policy in policies:
        histories[policy], clients[policy] = _read(out_dir, policy)
    table, target, t_round = baseline_table(histories, clients, summaries, args.rounds, args.clients, args.target_at)
    table.to_csv(out_dir / "baselines.csv")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(f"\n== Target: Equal's holdout loss after round {t_round} of {args.rounds} = {target:.4f} ==")
    print("Time and energy: VIRTUAL clock (device time from the testbed profiles), summed over rounds up to the first "
          "evaluation at or below the target (FedAsync: round-equivalents of the same samples); energy = active + "
          "idle while waiting; run wall s: WALL clock.")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    if "oort" in policies and clients.get("oort") is not None:
        print(f"\n== Oort-like selection: rounds each device was selected (of {args.rounds}) ==")
        print(oort_selection_table(clients["oort"], args.rounds, args.clients).to_string(
            float_format=lambda v: f"{v:.3f}"))
    if "fedasync" in policies:
        h = histories["fedasync"]
        print(f"\nFedAsync: mean staleness {h['staleness_mean'].mean():.2f} model versions (max "
              f"{int(h['staleness_max'].max())}); {len(clients['fedasync'])} jobs.")
    print(f"\nThis command: {time.perf_counter() - started:.1f} s wall clock; peak resident memory "
          f"{memory.peak_bytes / 2**30:.2f} GB (sum of RSS over the run's processes); processes left running: {left}")
    print(f"CSV: {out_dir / 'baselines.csv'}; per-round histories, summaries and logs in {out_dir}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
