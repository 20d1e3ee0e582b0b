"""Benchmark: what an oversized reply costs the server's screening (wall clock, this machine).

Usage: ``.venv/bin/python -m experiments.bench_replies [--repeats 5] [--quick]``

Eleven fabricated replies per round (the liar benchmark's federation, no simulation engine) go
through ``AdaptiveStrategy.aggregate_train``; each case makes some of them oversized:

- ``list-10M``: one reply carries a metric list of 10,000,000 entries;
- ``keys-100k``: one reply carries 100,000 metric keys;
- ``array-bytes``: one reply's array declares the model's shape but holds 100× its bytes;
- ``every-reply-list``: every reply but one carries a 1,000,000-entry list.

Replies are built before timing (building them is the client's and Flower's work). The table
prints the best round time of ``--repeats`` and the extra milliseconds over an all-honest round
(target ≤ 50 ms), with the replies skipped. ``--quick`` builds smaller replies that are still
beyond the screening limits (the suite's form).
"""

from __future__ import annotations

import argparse
import gc
import logging
import time
from typing import Any

import numpy as np

from flwr_adaptive import keys

NODES = list(range(1, 12))
BUDGET = 2200
TARGET_MS = 50.0


def _metrics(quota: int, node: int) -> dict[str, Any]:
    t = quota * 1e-3 * (1 + node / 10)
    return {keys.NUM_EXAMPLES: quota, keys.SAMPLES: quota, keys.TIME_S: t, keys.CPU_TIME_S: t,
            keys.WALL_TIME_S: t, keys.ENERGY_J: keys.UNMEASURED_ENERGY, keys.DATA_SIZE: 100_000,
            keys.PARTITION_ID: node, keys.QUOTA_CAPPED: 0, keys.IDLE_W: 2.0, keys.VIRTUAL_CLOCK: 1, "loss": 1.0}


def _strategy():
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    return AdaptiveStrategy(FedAvg(fraction_evaluate=0.0, min_train_nodes=len(NODES),
                                   min_available_nodes=len(NODES)), budget=BUDGET)


def build_round(case: str, size: int, strategy, rnd: int) -> tuple[list, int]:
    """Configure round ``rnd`` and answer every message, ``case`` applied to some replies."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    class Grid:
        def get_node_ids(self):
            return list(NODES)

    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(1000)]), ConfigRecord({}), Grid()))
    replies, hostile = [], 0
    for i, m in enumerate(msgs):
        node = m.metadata.dst_node_id
        metrics = _metrics(int(m.content["config"][keys.QUOTA]), node)
        record = ArrayRecord([np.zeros(1000)])
        oversized = case != "honest" and ((i > 0) if case == "every-reply-list" else (i == 0))
        if oversized and case in ("list-10M", "every-reply-list"):
            metrics["per-sample-loss"] = [0.0] * size
        elif oversized and case == "keys-100k":
            metrics.update({f"k{j}": 0.0 for j in range(size)})
        elif oversized and case == "array-bytes":
            # the model's name, shape and dtype declared, ``size`` values' bytes: only sizes show it
            big = Array(np.zeros(size))
            name = next(iter(record.keys()))
            record = ArrayRecord({name: Array(dtype=big.dtype, shape=(1000,), stype=big.stype, data=big.data)})
        hostile += oversized
        replies.append(Message(RecordDict({"arrays": record, "metrics": MetricRecord(metrics)}), reply_to=m))
    return replies, hostile


#: case -> (size, size in the quick form: still beyond the screening limits, 100× cheaper to build)
CASES = {"honest": (0, 0), "list-10M": (10_000_000, 100_000), "keys-100k": (100_000, 2_000),
         "array-bytes": (100_000, 100_000), "every-reply-list": (1_000_000, 20_000)}


def measure(case: str, size: int, repeats: int) -> dict[str, Any]:
    """Best wall seconds of one ``aggregate_train`` (round 2, after an honest round 1) for ``case``."""
    best, skipped = float("inf"), 0
    for _ in range(repeats):
        strategy = _strategy()
        replies, _ = build_round("honest", 0, strategy, 1)
        strategy.aggregate_train(1, replies)
        replies, _ = build_round(case, size, strategy, 2)
        gc.collect()  # a collection owed to building the replies is not the screening's cost
        start = time.perf_counter()
        strategy.aggregate_train(2, replies)
        best = min(best, time.perf_counter() - start)
        skipped = int(strategy.history.iloc[-1]["skipped"])
        del replies
    return {"case": case, "size": size, "round_ms": 1e3 * best, "skipped": skipped}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="sizes / 100, 2 repeats (the suite's form)")
    args = parser.parse_args(argv)
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity._run_id, TaskIdentity._task_id, TaskIdentity._node_id = 1, 1, 0
    repeats = 2 if args.quick else args.repeats
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # one skip line per oversized reply is not the table
    try:
        rows = [measure(case, sizes[args.quick], repeats) for case, sizes in CASES.items()]
    finally:
        flwr_logger.setLevel(level)
    base = rows[0]["round_ms"]
    print(f"Oversized replies: {len(NODES)} replies per round through AdaptiveStrategy.aggregate_train; wall clock, "
          f"best of {repeats}; extra = round time - the all-honest round's (target <= {TARGET_MS:g} ms)")
    print(f"{'case':18} {'size':>11} | {'round (ms)':>10} {'extra (ms)':>10} | {'skipped':>7}")
    for row in rows:
        row["extra_ms"] = row["round_ms"] - base
        print(f"{row['case']:18} {row['size']:>11,} | {row['round_ms']:>10.1f} {row['extra_ms']:>10.1f} | "
              f"{row['skipped']:>7}")
    return rows


if __name__ == "__main__":
    main()
