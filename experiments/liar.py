"""Lying clients against the server strategies: their share and the true round makespan, per round.

Ten honest nodes (the testbed's first ten devices, per-sample cost = 1 ms × slowdown, ±5 %
seeded jitter) and one liar that really runs at the honest median speed but reports ``--lie``
seconds per sample (default 1e-9). Replies are fabricated in-process (no simulation engine), so
the figures are exact and quick. The clock is the **virtual** one: every time below is what the
emulated devices would take, computed from their true costs; the strategies only see the claims.

For each strategy (the Message-API ``AdaptiveStrategy`` with the time policy, Oort, FedAsync) it
runs four federations with the same seeds: {liar, the liar reporting honestly} × {cost trust on
(default), off}. Per round it prints the liar's share of the samples and the ratio of the true
makespan to the federation where the liar reports honestly (same strategy, same defence). For
FedAsync a round is a round-equivalent (``budget`` samples mixed) and its makespan the true
virtual time at which it closes. The last column is the price of the defence when nobody lies
(true makespan with trust on / off, honest federation). Target: ratio ≤ 1.5 from round 3 on.

Then the scenarios of ``SCENARIOS`` (one summary row per strategy each; the liars' claims are a
fraction of the honest median's per-sample time, and every liar really runs at that median):

- ``sybil``: 3 colluding nodes of 11 (8 honest) claim the honest median / 4.2, every round: beyond
  the 4× plausible range but inside the 16× absurd one, so the group rule takes them at the edge of
  the range (the honest median / 4), as it would a coalition claiming just inside it: their figures
  are held to the inside bound for 3 colluders, ``R (3 + Σ) / (3 R + Σ)``, not to their fair share;
- ``sybil-absurd``: the same 3 colluders at the honest median / 20, beyond the absurd range: the
  group rule takes them at the honest median (they earn nothing);
- ``intermittent``: a deployment (wall-clock telemetry, the server's send/receive stamps with
  Flower's polls: 0–3 s for the SuperNode to pick the instruction up, 5 s of process start-up,
  the reply pulled on the next 3-s tick), one liar of 11 at the median / 3.9 that lies in two
  rounds of three (jobs 1, 2, 4, 5, …);
- ``inside``: one liar of 11 at the median / 3.9 (just inside the 4× plausible range), every round,
  on the virtual clock.

A summary row gives the liars' mean share from round 3 on next to their fair share (their share
when they report honestly) and the worst makespan ratio from round 3 on, trust on and off. FedAsync
runs the virtual-clock replay; in a deployment it would run ``order="arrival"``, where the
server's clock times every job and no claim is weighed, so it has no ``intermittent`` row. HFL
(``HierarchicalAdaptiveStrategy``, :class:`SiloFederation`) runs every node as a silo of
``RANKS`` ranks, the liars being rank 0 of the liar silos; its share is the lying ranks' share of
all samples and its makespan the slowest silo's round (a silo's budget is split among its own
ranks only, so that is all a lying rank can take and slow down).

Run: ``python -m experiments.liar`` (``--quick``: 5 rounds, 2 seeds, the suite's form).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from datetime import datetime, timezone
from typing import Any, Hashable

import numpy as np

from flwr_adaptive import keys
from flwr_adaptive.devices import TESTBED

BASE_S = 1e-3  # seconds per sample of a slowdown-1 device
WALL_BASE_S = 0.06  # the deployment's: a median node's equal share takes ~30 s of compute
BUDGET = 2200
LIAR = 11
START_S = 5.0  # per message: Flower 1.42 starts a fresh flwr-clientapp process (imports, data loading)
RANKS = 3  # HFL: ranks per silo
HFL_STEPS = 10  # HFL: DDP steps per silo round (so each rank gets at least 10 samples)
POLL_S = 3.0  # Flower 1.42: the SuperNode polls for instructions, the ServerApp pulls replies, every 3 s


class Federation:
    """Fabricated clients: true per-sample costs, some of them lying; replies to the server's messages.

    ``honest`` nodes ``1..honest`` run at the testbed's slowdowns; ``liars`` more nodes run at the
    honest median. A liar claims ``lie`` seconds per sample (``claim=f``: ``f`` × the honest
    median) in the jobs whose number is not a multiple of 3 when ``intermittent``, else in all.
    ``wall=True`` is a deployment: wall-clock telemetry and the server's stamps (``delivered_at``).
    """

    def __init__(self, lie: float | None, seed: int = 0, *, honest: int = 10, liars: int = 1,
                 claim: float | None = None, intermittent: bool = False, wall: bool = False) -> None:
        base = WALL_BASE_S if wall else BASE_S
        costs = [base * d.slowdown for d in TESTBED[:honest]]
        self.true = {i + 1: c for i, c in enumerate(costs)}
        self.median = float(np.median(costs))
        self.liars = set(range(honest + 1, honest + liars + 1))
        for node in self.liars:
            self.true[node] = self.median
        self.lie = self.median * claim if claim is not None and lie is not None else lie
        self.intermittent = intermittent
        self.wall = wall
        self.seed = seed
        self._jobs: dict[int, int] = {}

    @property
    def nodes(self) -> list[int]:
        return sorted(self.true)

    def duration(self, node: int, samples: int) -> float:
        """The true seconds ``node`` takes for ``samples``; its k-th job draws the same jitter in every run."""
        self._jobs[node] = k = self._jobs.get(node, 0) + 1
        z = np.random.default_rng([self.seed, node, k]).standard_normal()
        return samples * self.true[node] * float(np.exp(0.05 * z))

    def job(self, msg: Any) -> tuple[int, float]:
        """``(samples, true seconds)`` of the job ``msg`` asks for."""
        q = int(msg.content["config"][keys.QUOTA])
        return q, self.duration(msg.metadata.dst_node_id, q)

    def lies_now(self, node: int) -> bool:
        """Whether ``node``'s latest job is reported with a lie."""
        return (node in self.liars and self.lie is not None
                and not (self.intermittent and self._jobs.get(node, 0) % 3 == 0))

    def observed(self, node: int, true_s: float) -> float:
        """Seconds from the server's send to its pull of the reply (deployment: Flower's polls)."""
        rng = np.random.default_rng([self.seed, node, self._jobs.get(node, 0), 7])
        arrived = rng.uniform(0.0, POLL_S) + START_S + true_s
        phase = rng.uniform(0.0, POLL_S)
        return phase + POLL_S * math.ceil((arrived - phase) / POLL_S)

    def reply(self, msg: Any, true_s: float) -> Any:
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        node = msg.metadata.dst_node_id
        quota = int(msg.content["config"][keys.QUOTA])
        claimed = quota * self.lie if self.lies_now(node) else true_s
        metrics = {keys.NUM_EXAMPLES: quota, keys.SAMPLES: quota, keys.TIME_S: claimed, keys.CPU_TIME_S: claimed,
                   keys.WALL_TIME_S: claimed, keys.ENERGY_J: keys.UNMEASURED_ENERGY, keys.DATA_SIZE: 100_000,
                   keys.PARTITION_ID: node, keys.QUOTA_CAPPED: 0, keys.IDLE_W: 2.0,
                   keys.VIRTUAL_CLOCK: 0 if self.wall else 1, keys.TRAIN_LOSS: 1.0}
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord(metrics)}),
                       reply_to=msg)


class SiloFederation(Federation):
    """HFL: every node is a silo of ``RANKS`` ranks (one DDP group); in a liar silo, rank 0 lies.

    Honest silo ``s`` runs ranks on the testbed's devices ``(s - 1 + 3 r) mod 10``; a liar silo
    (nodes after the honest ones) the same, with rank 0 replaced by a liar at the honest median
    that claims as :class:`Federation`'s liars do. Each rank draws its own jitter. The silo's round
    lasts as long as its slowest rank (DDP waits for it at every step); its reply carries the
    per-rank lists (``keys.SILO_RANK_KEYS``) and, as its own time, the slowest rank's claim.
    """

    def __init__(self, lie: float | None, seed: int = 0, **federation: Any) -> None:
        super().__init__(lie, seed, **federation)
        base = WALL_BASE_S if self.wall else BASE_S
        self.ranks = {
            node: [self.median if (node in self.liars and r == 0) else base * TESTBED[(node - 1 + 3 * r) % 10].slowdown
                   for r in range(RANKS)]
            for node in self.nodes
        }
        self.liar_samples: list[int] = []  # per job, in send order: samples of the lying ranks
        self._last: dict[int, tuple[list[int], list[float]]] = {}  # node -> its latest job's quotas, true times

    def job(self, msg: Any) -> tuple[int, float]:
        from flwr_adaptive.clients.silo import split_budget

        config = msg.content["config"]
        node = msg.metadata.dst_node_id
        budget = int(config[keys.QUOTA])
        quotas = split_budget(budget, RANKS, config.get(keys.RANK_QUOTAS))
        self._jobs[node] = k = self._jobs.get(node, 0) + 1
        times = [q * c * float(np.exp(0.05 * np.random.default_rng([self.seed, node, k, r]).standard_normal()))
                 for r, (q, c) in enumerate(zip(quotas, self.ranks[node]))]
        self._last[node] = (quotas, times)
        self.liar_samples.append(quotas[0] if node in self.liars else 0)
        return budget, max(times)

    def reply(self, msg: Any, true_s: float) -> Any:
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        node = msg.metadata.dst_node_id
        quotas, times = self._last[node]
        claimed = [q * self.lie if (r == 0 and self.lies_now(node)) else t
                   for r, (q, t) in enumerate(zip(quotas, times))]
        metrics = {keys.NUM_EXAMPLES: sum(quotas), keys.SAMPLES: sum(quotas), keys.TIME_S: max(claimed),
                   keys.CPU_TIME_S: sum(claimed), keys.WALL_TIME_S: max(claimed),
                   keys.ENERGY_J: keys.UNMEASURED_ENERGY, keys.DATA_SIZE: 100_000, keys.PARTITION_ID: node,
                   keys.QUOTA_CAPPED: 0, keys.IDLE_W: 2.0, keys.VIRTUAL_CLOCK: 0 if self.wall else 1,
                   keys.TRAIN_LOSS: 1.0, keys.RANK_SAMPLES: list(quotas), keys.RANK_TIME_S: claimed,
                   keys.RANK_ENERGY_J: [keys.UNMEASURED_ENERGY] * RANKS, keys.RANK_WAIT_S: [0.0] * RANKS}
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord(metrics)}),
                       reply_to=msg)


class Grid:
    """The Grid surface the strategies use, answered by a :class:`Federation` (records true times)."""

    def __init__(self, fed: Federation) -> None:
        self.fed = fed
        self.jobs: list[tuple[int, int, float]] = []  # (node, samples, true seconds), in send order

    def get_node_ids(self) -> list[int]:
        return self.fed.nodes

    def send_and_receive(self, messages, timeout=None):
        out = []
        sent = time.time()  # the strategy stamped its send a moment ago (configure_train)
        for m in messages:
            node = m.metadata.dst_node_id
            q, t = self.fed.job(m)
            self.jobs.append((node, q, t))
            reply = self.fed.reply(m, t)
            if self.fed.wall:
                stamp = datetime.fromtimestamp(sent + self.fed.observed(node, t), tz=timezone.utc)
                reply.metadata.delivered_at = stamp.isoformat()
            out.append(reply)
        return out


def _identity() -> None:
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity._run_id, TaskIdentity._task_id, TaskIdentity._node_id = 1, 1, 0


def run_sync(kind: str, lie: float | None, trust: bool, rounds: int, seed: int,
             **federation: Any) -> list[tuple[float, float]]:
    """``[(liars' share, true makespan)]`` per round of the adaptive (time) or Oort strategy."""
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    fed = Federation(lie, seed, **federation)
    grid = Grid(fed)
    n = len(fed.nodes)
    inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)
    strategy = (AdaptiveStrategy(inner, budget=BUDGET, policy="time", trust=trust) if kind == "adaptive"
                else OortStrategy(inner, budget=BUDGET, seed=seed, trust=trust))
    out = []
    for rnd in range(1, rounds + 1):
        msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
        start = len(grid.jobs)
        replies = grid.send_and_receive(msgs)
        strategy.aggregate_train(rnd, replies)
        jobs = grid.jobs[start:]
        out.append((sum(q for node, q, _ in jobs if node in fed.liars) / BUDGET, max(t for _, _, t in jobs)))
    return out


def run_hfl(lie: float | None, trust: bool, rounds: int, seed: int,
            **federation: Any) -> list[tuple[float, float]]:
    """``[(lying ranks' share of all samples, true makespan)]`` per round of the hierarchical strategy."""
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import (
        HierarchicalAdaptiveStrategy,
        aggregate_silo_metrics,
    )

    fed = SiloFederation(lie, seed, **federation)
    grid = Grid(fed)
    n = len(fed.nodes)
    inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n,
                   train_metrics_aggr_fn=aggregate_silo_metrics)
    # each silo's budget is a flat node's equal share, so a round trains the flat federation's BUDGET
    strategy = HierarchicalAdaptiveStrategy(inner, budget=BUDGET // n, steps=HFL_STEPS, trust=trust)
    out = []
    for rnd in range(1, rounds + 1):
        msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
        start = len(grid.jobs)
        strategy.aggregate_train(rnd, grid.send_and_receive(msgs))
        jobs = grid.jobs[start:]
        out.append((sum(fed.liar_samples[start:]) / sum(q for _, q, _ in jobs), max(t for _, _, t in jobs)))
    return out


def run_fedasync(lie: float | None, trust: bool, rounds: int, seed: int,
                 **federation: Any) -> list[tuple[float, float]]:
    """``[(liars' share, true time the round-equivalent closes)]`` of FedAsync."""
    from flwr.app import ArrayRecord

    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    fed = Federation(lie, seed, **federation)
    grid = Grid(fed)
    strategy = FedAsyncStrategy(budget=BUDGET, min_nodes=len(fed.nodes), trust=trust)
    strategy.start(grid, ArrayRecord([np.zeros(2)]), num_rounds=rounds)
    # True timeline: each node runs its jobs back to back; a job's true end is its node's running sum.
    ends: dict[Hashable, float] = {}
    true_end = []
    for node, _, t in grid.jobs:
        ends[node] = ends.get(node, 0.0) + t
        true_end.append(ends[node])
    by_order = {}
    for i, (node, q, _) in enumerate(grid.jobs):
        by_order.setdefault(node, []).append(i)
    out = []
    rows = strategy.client_history
    rows = rows[rows["status"] == "ok"]
    seen: dict[Hashable, int] = {}
    job_index = []
    for node in rows["node_id"]:  # the order in which jobs were mixed
        k = seen.get(node, 0)
        seen[node] = k + 1
        job_index.append(by_order[node][k])
    samples_by_round = rows.assign(idx=job_index).groupby("round")
    for rnd in range(1, rounds + 1):
        if rnd not in samples_by_round.groups:
            out.append((math.nan, math.nan))
            continue
        g = samples_by_round.get_group(rnd)
        share = g.loc[g["node_id"].isin(fed.liars), "samples"].sum() / g["samples"].sum()
        done = rows.assign(idx=job_index)
        done = done[done["round"] <= rnd]
        out.append((float(share), max(true_end[i] for i in done["idx"])))
    return out


#: name -> (strategies, Federation arguments); every liar really runs at the honest median.
SCENARIOS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "sybil": (("adaptive", "oort", "fedasync", "hfl"), {"honest": 8, "liars": 3, "claim": 1 / 4.2}),
    "sybil-absurd": (("adaptive", "oort", "fedasync", "hfl"), {"honest": 8, "liars": 3, "claim": 1 / 20}),
    "intermittent": (("adaptive", "oort", "hfl"), {"honest": 10, "liars": 1, "claim": 1 / 3.9, "intermittent": True,
                                            "wall": True}),
    "inside": (("adaptive", "oort", "fedasync", "hfl"), {"honest": 10, "liars": 1, "claim": 1 / 3.9}),
}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--lie", type=float, default=1e-9, help="seconds per sample the liar reports")
    parser.add_argument("--seeds", type=int, default=5, help="runs averaged per figure (jitter, Oort's sampling)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)} ('' for none)")
    parser.add_argument("--quick", action="store_true", help="5 rounds, 2 seeds (the test suite's form)")
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else args.rounds
    seeds = 2 if args.quick else args.seeds
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    _identity()
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # the liar's warnings, once per node and rule, are not the table
    try:
        rows = _table(args.lie, rounds, seeds)
        return rows + _scenario_table(names, rounds, seeds) if names else rows
    finally:
        flwr_logger.setLevel(level)


def _runs(kind: str, rounds: int, seeds: int, lie: float, **federation: Any) -> dict[tuple[bool, bool], np.ndarray]:
    """``{(lying, trust): seeds × rounds × (share, makespan)}``."""
    runs = {}
    for lie_on in (True, False):
        for trust in (True, False):
            run = {"fedasync": run_fedasync, "hfl": run_hfl}.get(kind, lambda *a, **k: run_sync(kind, *a, **k))
            runs[lie_on, trust] = np.array([run(lie if lie_on else None, trust, rounds, seed, **federation)
                                            for seed in range(seeds)])
    return runs


def _scenario_table(names: list[str], rounds: int, seeds: int) -> list[dict[str, Any]]:
    """One row per scenario and strategy: shares and worst ratios from round 3 on."""
    print()
    print(f"Scenarios (every liar really runs at the honest median; mean of {seeds} seeds, rounds >= 3 of {rounds}; "
          f"ratio = true makespan / the same federation with the liars honest; target share <= 1.5x fair, "
          f"ratio <= 1.5; sybil, inside: the inside bound)")
    print(f"{'scenario':13} {'strategy':9} | {'fair share':>10} | {'share':>6} {'worst ratio':>11} | "
          f"{'no-trust share':>14} {'ratio':>6} | {'defence cost':>12}")
    out = []
    late = slice(2, rounds)
    for name in names:
        kinds, federation = SCENARIOS[name]
        for kind in kinds:
            runs = _runs(kind, rounds, seeds, 1.0, **federation)  # lie=1.0: a placeholder, claim= sets it
            worst = lambda lying, honest: float(np.max(np.mean(lying[:, late, 1] / honest[:, late, 1], axis=0)))  # noqa: E731
            row = {"scenario": name, "strategy": kind,
                   "fair_share": float(np.mean(runs[False, True][:, late, 0])),
                   "share": float(np.mean(runs[True, True][:, late, 0])),
                   "ratio": worst(runs[True, True], runs[False, True]),
                   "share_no_trust": float(np.mean(runs[True, False][:, late, 0])),
                   "ratio_no_trust": worst(runs[True, False], runs[False, False]),
                   "defence_cost": worst(runs[False, True], runs[False, False])}
            out.append(row)
            print(f"{name:13} {kind:9} | {row['fair_share']:>10.3f} | {row['share']:>6.3f} {row['ratio']:>11.2f} | "
                  f"{row['share_no_trust']:>14.3f} {row['ratio_no_trust']:>6.2f} | {row['defence_cost']:>12.2f}")
    return out


def _table(lie_s: float, rounds: int, seeds: int) -> list[dict[str, Any]]:
    print(f"Liar benchmark: 10 honest nodes + 1 liar (true speed: the honest median) reporting {lie_s:g} s/sample; "
          f"budget {BUDGET}; virtual clock; ratio = true makespan / same federation with the liar honest; "
          f"mean of {seeds} seeds")
    print(f"{'strategy':10} {'round':>5} | {'liar share':>10} {'ratio':>6} | {'no-trust share':>14} {'ratio':>6} | "
          f"{'defence cost (honest)':>21}")
    rows = []
    for kind in ("adaptive", "oort", "fedasync"):
        runs = {}
        for lie_on in (True, False):
            for trust in (True, False):
                lie = lie_s if lie_on else None
                runs[lie_on, trust] = np.array([run_fedasync(lie, trust, rounds, seed) if kind == "fedasync"
                                                else run_sync(kind, lie, trust, rounds, seed)
                                                for seed in range(seeds)])  # seeds × rounds × (share, span)
        for r in range(rounds):
            # per seed, then the mean over seeds: each ratio compares runs with the same jitter
            ratio = lambda lying, honest: float(np.mean(lying[:, r, 1] / honest[:, r, 1]))  # noqa: E731
            row = {"strategy": kind, "round": r + 1, "liar_share": float(np.mean(runs[True, True][:, r, 0])),
                   "ratio": ratio(runs[True, True], runs[False, True]),
                   "liar_share_no_trust": float(np.mean(runs[True, False][:, r, 0])),
                   "ratio_no_trust": ratio(runs[True, False], runs[False, False]),
                   "defence_cost": ratio(runs[False, True], runs[False, False])}
            share, share_nt = row["liar_share"], row["liar_share_no_trust"]
            rows.append(row)
            print(f"{kind:10} {r + 1:>5} | {share:>10.3f} {row['ratio']:>6.2f} | {share_nt:>14.3f} "
                  f"{row['ratio_no_trust']:>6.2f} | {row['defence_cost']:>21.2f}")
    for kind in ("adaptive", "oort", "fedasync"):
        late = [r["ratio"] for r in rows if r["strategy"] == kind and r["round"] >= 3]
        print(f"{kind}: worst ratio from round 3 on {max(late):.2f} (target <= 1.5)")
    return rows


if __name__ == "__main__":
    main()
