"""The strategy's own cost per round at cross-device scale, next to FedAvg's (wall clock).

Flower's ``FedAvg(fraction_train=F)`` and ``AdaptiveStrategy`` around the same ``FedAvg`` are
driven directly, without Ray or a SuperLink: ``configure_train`` on a grid listing the
population, one fabricated reply per message (a two-float model and the telemetry a wrapped
client sends), ``aggregate_train``. The replies are built outside the timed calls. Per row:

- ``fedavg ms``: FedAvg's ``configure_train + aggregate_train`` per round;
- ``adaptive ms``: the same through ``AdaptiveStrategy`` (FedAvg runs inside it);
- ``own ms`` = adaptive − fedavg: what the plugin adds per round (screening, controller, history,
  state), and ``own µs/node``: that per sampled node;
- ``controller ms``: the controller's ``observe`` calls and one ``allocate`` alone, per round.

Round 1 (registration of every sampled node, the equal split) is timed apart from the mean of
the later rounds. Each figure is the median of ``--repeat`` runs of the rounds. The machine is
shared: read the ratios within one run, not the absolute times across runs.

Usage: ``python -m experiments.scale`` (``--quick``: the two smaller rows, what the test runs).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from typing import Sequence

import numpy as np
import pandas as pd

from flwr_adaptive import keys
from flwr_adaptive.controller import AllocationController, Report
from flwr_adaptive.strategies import AdaptiveStrategy

from experiments.cross_device import _Grid, _message_identity

SIZES = ((100, 1_000), (1_000, 10_000), (10_000, 100_000))  # (sampled nodes, population)


def _replies(messages, slowdown: dict[int, float]):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    out = []
    for m in messages:
        node = m.metadata.dst_node_id
        config = next(iter(m.content.config_records.values()), {})
        samples = int(config.get(keys.QUOTA, 64))
        t = 0.002 * samples * slowdown[node]
        metrics = {keys.SAMPLES: samples, keys.TIME_S: t, keys.CPU_TIME_S: t, keys.WALL_TIME_S: t,
                   keys.ENERGY_J: -1.0, keys.DATA_SIZE: -1, keys.PARTITION_ID: node % 10**9,
                   keys.QUOTA_CAPPED: 0, keys.IDLE_W: -1.0, keys.VIRTUAL_CLOCK: 1, "num-examples": samples}
        out.append(Message(RecordDict({"arrays": ArrayRecord([np.zeros(2, dtype=np.float32)]),
                                       "metrics": MetricRecord(metrics)}), reply_to=m))
    return out


def _rounds(make, sampled: int, population: int, rounds: int, seed: int) -> list[float]:
    """Seconds of configure_train + aggregate_train in each round (replies built untimed)."""
    from flwr.app import ArrayRecord, ConfigRecord

    node_ids = [10**9 + i for i in range(population)]
    slowdown = dict(zip(node_ids, np.exp(np.random.default_rng(seed).standard_normal(population)).tolist()))
    grid = _Grid(node_ids)
    arrays, config = ArrayRecord([np.zeros(2, dtype=np.float32)]), ConfigRecord({})
    strategy = make(sampled / population)
    random.seed(seed)
    times = []
    for rnd in range(1, rounds + 1):
        gc.collect()
        t0 = time.perf_counter()
        msgs = list(strategy.configure_train(rnd, arrays, config, grid))
        t1 = time.perf_counter()
        replies = _replies(msgs, slowdown)
        t2 = time.perf_counter()
        strategy.aggregate_train(rnd, replies)
        t3 = time.perf_counter()
        times.append((t1 - t0) + (t3 - t2))
    return times


def _fedavg(fraction: float):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_train=fraction, fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=1)


def _controller_rounds(sampled: int, population: int, rounds: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    slowdown = np.exp(rng.standard_normal(population))
    ctrl = AllocationController.from_policy("time", 64 * sampled)
    times = []
    for _ in range(rounds):
        ids = rng.choice(population, sampled, replace=False).tolist()
        t0 = time.perf_counter()
        quotas = ctrl.allocate(ids)
        for p in ids:
            ctrl.observe(p, Report(time_s=float(0.002 * quotas[p] * slowdown[p]) or 1e-9, samples=max(quotas[p], 1)))
        times.append(time.perf_counter() - t0)
    return times


def measure(sampled: int, population: int, rounds: int = 4, repeat: int = 3, seed: int = 0) -> dict:
    """One row: FedAvg vs the adaptive strategy at ``sampled`` of ``population`` nodes."""
    def adaptive(fraction: float) -> AdaptiveStrategy:
        s = AdaptiveStrategy(_fedavg(fraction), budget=64 * sampled, policy="time")
        s.trust = None  # fabricated replies carry no delivery stamps to weigh
        return s

    runs = {"fedavg": [], "adaptive": [], "controller": []}
    with _message_identity():
        for r in range(repeat):
            runs["fedavg"].append(_rounds(_fedavg, sampled, population, rounds, seed + r))
            runs["adaptive"].append(_rounds(adaptive, sampled, population, rounds, seed + r))
            runs["controller"].append(_controller_rounds(sampled, population, rounds, seed + r))
    first = {k: float(np.median([t[0] for t in v])) for k, v in runs.items()}
    later = {k: float(np.median([np.mean(t[1:]) for t in v])) for k, v in runs.items()}
    own = later["adaptive"] - later["fedavg"]
    return {"sampled": sampled, "population": population,
            "fedavg_ms": 1e3 * later["fedavg"], "adaptive_ms": 1e3 * later["adaptive"], "own_ms": 1e3 * own,
            "own_us_per_node": 1e6 * own / sampled, "own_share": own / later["adaptive"],
            "controller_ms": 1e3 * later["controller"],
            "round1_fedavg_ms": 1e3 * first["fedavg"], "round1_adaptive_ms": 1e3 * first["adaptive"]}


def format_table(df: pd.DataFrame) -> str:
    lines = ["Strategy cost per round (wall clock, driven directly, two-float model; rounds 2+ averaged)",
             "| sampled / population | fedavg ms | adaptive ms | own ms | own µs/node | own share | controller ms "
             "| round 1: fedavg / adaptive ms |", "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.sampled:,} / {r.population:,} | {r.fedavg_ms:.1f} | {r.adaptive_ms:.1f} | {r.own_ms:.1f} "
                     f"| {r.own_us_per_node:.0f} | {r.own_share:.0%} | {r.controller_ms:.2f} "
                     f"| {r.round1_fedavg_ms:.0f} / {r.round1_adaptive_ms:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the two smaller sizes, 3 rounds, 1 repeat")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.rounds < 2 or args.repeat < 1:
        ap.error("--rounds must be >= 2 and --repeat >= 1")
    sizes, rounds, repeat = (SIZES[:2], 3, 1) if args.quick else (SIZES, args.rounds, args.repeat)
    import logging

    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # one INFO line per round and node set would be the benchmark
    try:
        df = pd.DataFrame([measure(s, p, rounds, repeat) for s, p in sizes])
    finally:
        flwr_logger.setLevel(level)
    print(format_table(df))
    return df


if __name__ == "__main__":
    main()
