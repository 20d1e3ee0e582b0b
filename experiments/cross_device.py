"""Cross-device scenario: 1,000 emulated nodes, a fraction sampled per round, on the virtual clock.

The adaptive strategy (``AdaptiveStrategy`` around Flower's ``FedAvg(fraction_train=F)``) is
driven directly: ``configure_train`` on a grid listing the population, one fabricated reply per
message (the telemetry a wrapped client sends), ``aggregate_train``. No Ray, no training: a node's
round takes ``samples × base_s × slowdown × jitter`` device seconds (virtual clock, see
docs/energy.md), where the node's slowdown comes from

- ``testbed``: one of the 11 cited testbed boards (``flwr_adaptive.devices.TESTBED``), drawn per
  node, with its watts;
- ``lognormal``: a wide population, ``slowdown = exp(σ·z)`` (σ = 1 by default: the slowest tenth
  of the devices is ≥ 3.6× the median, the fastest tenth ≤ 1/3.6).

Every policy faces the same sampled nodes and the same jitter draws (seeded by round and node).
Each node holds ``data_size`` samples and data is private (``allow_cycling=False``). The budget is
``per_node ×`` the sampled nodes, so Equal gives each sampled node ``per_node`` samples.

Printed per population and fraction: the mean round time (makespan, virtual seconds) over the
rounds from ``--from-round`` on, per policy and relative to Equal; for the adaptive policies the
share of sampled, previously measured nodes that still had an estimate when sampled; samples the
rounds did not process (should be 0). ``Time-only, median prior`` is Time-only with first-seen
nodes priced at the median cost (what the controller does alone) instead of the cautious prior.

Usage: ``python -m experiments.cross_device`` (``--quick`` for a small, fast form).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from flwr_adaptive import keys
from flwr_adaptive.devices import TESTBED
from flwr_adaptive.strategies import AdaptiveStrategy

POPULATIONS = ("testbed", "lognormal")
POLICY_LABELS = {"equal": "Equal", "time": "Time-only", "time-median-prior": "Time-only, median prior",
                 "low-energy": "Low-energy", "min-energy": "min-energy"}


@dataclass(frozen=True)
class Scenario:
    """Settings of one cross-device run (defaults: the table in docs/scale.md)."""

    population: str = "lognormal"
    nodes: int = 1000
    fraction: float = 0.1
    rounds: int = 30
    from_round: int = 5
    per_node: int = 64  # Equal's samples per sampled node; budget = per_node × sampled nodes
    data_size: int = 256  # local samples per node (cycling off: a quota never exceeds it)
    base_s: float = 0.002  # host seconds per sample before the device's slowdown
    sigma: float = 1.0  # lognormal population: σ of log(slowdown)
    jitter: float = 0.05  # per round and node: σ of the lognormal run-to-run factor
    seed: int = 0

    @property
    def sampled(self) -> int:
        return max(1, int(self.nodes * self.fraction))


class _Grid:
    """The part of Flower's Grid that configure_train asks: the connected node ids."""

    def __init__(self, node_ids: Sequence[int]) -> None:
        self.node_ids = list(node_ids)

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)


@contextlib.contextmanager
def _message_identity() -> Iterator[None]:
    """Flower's Message needs a run identity, which its runtimes set; set one while driving directly."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._run_id, TaskIdentity._task_id, TaskIdentity._node_id)
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._task_id, TaskIdentity._node_id = saved


def devices(s: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(slowdown, active watts, idle watts)`` of every node."""
    rng = np.random.default_rng([s.seed, 1])
    if s.population == "testbed":
        pick = rng.integers(0, len(TESTBED), s.nodes)
        return (np.array([TESTBED[i].slowdown for i in pick]), np.array([TESTBED[i].active_w for i in pick]),
                np.array([TESTBED[i].idle_w for i in pick]))
    if s.population == "lognormal":
        slowdown = np.exp(s.sigma * rng.standard_normal(s.nodes))
        active = 4.0 * np.exp(0.5 * rng.standard_normal(s.nodes))
        return slowdown, active, np.full(s.nodes, 1.0)
    raise ValueError(f"unknown population {s.population!r}; choose one of {', '.join(POPULATIONS)}")


class MedianPriorStrategy(AdaptiveStrategy):
    """Time-only with first-seen nodes at the median cost (no cautious prior): the yardstick."""

    def prior_caps(self, node_ids, ids, caps, probation):
        return caps


def run(policy: str, s: Scenario) -> pd.DataFrame:
    """One policy over ``s.rounds`` rounds; one row per round (virtual clock)."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    slowdown, active_w, idle_w = devices(s)
    node_ids = [10**12 + 7919 * i for i in range(s.nodes)]  # Flower-like large ids; partition = index
    partition = {n: i for i, n in enumerate(node_ids)}
    cls, name = (MedianPriorStrategy, "time") if policy == "time-median-prior" else (AdaptiveStrategy, policy)
    inner = FedAvg(fraction_train=s.fraction, fraction_evaluate=0.0, min_train_nodes=1,
                   min_available_nodes=s.nodes)
    # trust=False: fabricated replies carry no server-side timing evidence to weigh
    strategy = cls(inner, budget=s.per_node * s.sampled, policy=name, allow_cycling=False, trust=False)
    grid = _Grid(node_ids)
    arrays = ArrayRecord([np.zeros(2, dtype=np.float32)])
    measured: set[int] = set()
    rows = []
    random.seed(s.seed)  # FedAvg samples with `random`: every policy sees the same nodes
    with _message_identity():
        for rnd in range(1, s.rounds + 1):
            msgs = list(strategy.configure_train(rnd, arrays, ConfigRecord({}), grid))
            estimates = strategy.controller.estimates()
            returning = [partition[m.metadata.dst_node_id] for m in msgs
                         if partition[m.metadata.dst_node_id] in measured]
            kept = sum(p in estimates for p in returning)
            replies = []
            for m in msgs:
                p = partition[m.metadata.dst_node_id]
                quota = int(m.content["config"][keys.QUOTA])
                samples = min(quota, s.data_size)
                jitter = math.exp(s.jitter * np.random.default_rng([s.seed, rnd, p]).standard_normal())
                t = samples * s.base_s * slowdown[p] * jitter
                metrics = {keys.SAMPLES: samples, keys.TIME_S: t, keys.CPU_TIME_S: t / slowdown[p],
                           keys.WALL_TIME_S: t, keys.ENERGY_J: t * active_w[p], keys.DATA_SIZE: s.data_size,
                           keys.PARTITION_ID: p, keys.QUOTA_CAPPED: int(quota > s.data_size),
                           keys.IDLE_W: float(idle_w[p]), keys.VIRTUAL_CLOCK: 1, "num-examples": samples}
                replies.append(Message(RecordDict({"arrays": ArrayRecord([np.zeros(2, dtype=np.float32)]),
                                                   "metrics": MetricRecord(metrics)}), reply_to=m))
                measured.add(p)
            strategy.aggregate_train(rnd, replies)
            row = strategy.history.iloc[-1]
            rows.append(dict(policy=policy, round=rnd, makespan_s=float(row["makespan_s"]),
                             energy_j=float(row["energy_j"]), sampled=len(msgs), returning=len(returning),
                             with_estimate=kept,
                             not_processed=int(row["short_capped"] + row["short_untrained"] + row["short_skipped"]
                                               + row["short_unassigned"])))
    return pd.DataFrame(rows)


def table(s: Scenario, policies: Sequence[str]) -> pd.DataFrame:
    """One row per policy: mean round time from ``s.from_round`` on, vs Equal, estimates kept."""
    frames = {p: run(p, s) for p in policies}
    base = frames["equal"].query("round >= @s.from_round")["makespan_s"].mean() if "equal" in frames else math.nan
    out = []
    for p, df in frames.items():
        late = df[df["round"] >= s.from_round]
        mean = late["makespan_s"].mean()
        returning = late["returning"].sum()
        out.append({"population": s.population, "F": s.fraction, "policy": POLICY_LABELS.get(p, p),
                    "round_s": mean, "vs_equal": mean / base - 1.0,
                    "returning": late["returning"].mean() / late["sampled"].mean(),
                    "kept_estimate": (late["with_estimate"].sum() / returning) if returning and p != "equal"
                    else math.nan,
                    "not_processed": int(df["not_processed"].sum())})
    return pd.DataFrame(out)


def format_table(df: pd.DataFrame, s: Scenario) -> str:
    lines = [f"Cross-device scenario (virtual clock; {s.nodes} nodes, budget {s.per_node} × sampled nodes, "
             f"{s.data_size} samples per node, rounds {s.from_round}-{s.rounds} averaged, seed {s.seed})",
             "| population | F | policy | round time (s) | vs Equal | sampled nodes measured before "
             "| of those, with an estimate | samples not processed |", "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        kept = "—" if math.isnan(r.kept_estimate) else f"{r.kept_estimate:.0%}"
        vs = "—" if r.policy == "Equal" else f"{r.vs_equal:+.0%}"
        lines.append(f"| {r.population} | {r.F:g} | {r.policy} | {r.round_s:.3f} | {vs} | {r.returning:.0%} "
                     f"| {kept} | {r.not_processed} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200 nodes, 12 rounds (what the test runs)")
    ap.add_argument("--nodes", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.1])
    ap.add_argument("--populations", nargs="+", choices=POPULATIONS, default=list(POPULATIONS))
    ap.add_argument("--policies", nargs="+", choices=list(POLICY_LABELS),
                    default=["equal", "time", "time-median-prior", "low-energy"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    base = Scenario(seed=args.seed)
    if args.quick:
        base = replace(base, nodes=200, rounds=12, from_round=5)
    base = replace(base, nodes=args.nodes or base.nodes, rounds=args.rounds or base.rounds)
    if base.nodes < 1 or base.rounds < base.from_round:
        ap.error(f"--nodes must be >= 1 and --rounds >= {base.from_round}")
    if "equal" not in args.policies:
        args.policies = ["equal", *args.policies]
    frames = []
    for population in args.populations:
        for fraction in args.fractions:
            if not 0.0 < fraction <= 1.0:
                ap.error(f"--fractions must lie in (0, 1], got {fraction}")
            frames.append(table(replace(base, population=population, fraction=fraction), args.policies))
    result = pd.concat(frames, ignore_index=True)
    print(format_table(result, base))
    return result


if __name__ == "__main__":
    main()
