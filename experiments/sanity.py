"""Benchmark: centralized sanity run of every task — can each model learn its data at all?

Usage: ``.venv/bin/python -m experiments.sanity [--tasks mnist weather sentiment]
[--source offline] [--epochs mnist=3 ...] [--threads 1]``

Each task trains one model on its whole training part (a seeded shuffle per epoch, the task's
default batch size and learning rate), evaluates on the fixed holdout after every epoch, and
prints a table next to the targets (docs/tasks.md): MNIST ≥ 90 % holdout accuracy, sentiment ≥ 65 %
(and above the majority class), weather MSE below the persistence forecast, and each run
(loading included) ≤ 60 s of **wall** time. Times are wall clock (``time.perf_counter``) and
process CPU time (``time.process_time``), torch on ``--threads`` threads. Exit status 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

from flwr_adaptive.clients.tasks import get_task

DEFAULT_EPOCHS = {"mnist": 3, "weather": 3, "sentiment": 2, "fashion-mnist": 1}
WALL_LIMIT_S = 60.0


def _baseline_and_pass(name: str, metrics: dict, holdout) -> tuple[str, float, bool, str]:
    if name == "weather":
        base = metrics["persistence_mse"]
        return "persistence MSE", base, metrics["mse"] < base, "< persistence"
    share = np.bincount(holdout.labels).max() / len(holdout)
    if name == "sentiment":
        return "majority class", share, metrics["accuracy"] >= max(0.65, share + 0.05), ">= 0.65"
    if name == "fashion-mnist":  # harder than digits: ≈ 0.84 after one epoch
        return "majority class", share, metrics["accuracy"] >= 0.80, ">= 0.80"
    return "majority class", share, metrics["accuracy"] >= 0.90, ">= 0.90"


def run_task(name: str, source: str, epochs: int, seed: int = 0) -> dict:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    task = get_task(name, source=source)
    train, holdout = task.load(0, 1, seed=seed)
    model = task.make_model(seed=seed)
    load_wall = time.perf_counter() - wall0
    rng = np.random.default_rng(seed)
    metrics: dict = {}
    for epoch in range(1, epochs + 1):
        stats = task.train(model, train, rng.permutation(len(train)))
        metrics = task.evaluate(model, holdout)
        print(f"[sanity] {name}: epoch {epoch}/{epochs} train loss {stats['loss']:.4f}, holdout "
              f"{task.metric} {metrics[task.metric]:.4f} "
              f"({time.perf_counter() - wall0:.1f} s wall so far)", flush=True)
    wall = time.perf_counter() - wall0
    baseline_name, baseline, ok, target = _baseline_and_pass(name, metrics, holdout)
    return {
        "task": name,
        "data": train.source,
        "train": len(train),
        "holdout": len(holdout),
        "epochs": epochs,
        "metric": task.metric,
        "value": metrics[task.metric],
        "baseline": f"{baseline_name} {baseline:.4f}",
        "target": target,
        "load s (wall)": load_wall,
        "total s (wall)": wall,
        "total s (cpu)": time.process_time() - cpu0,
        "pass": bool(ok and wall <= WALL_LIMIT_S),
    }


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["mnist", "weather", "sentiment"])
    parser.add_argument("--source", default="offline", choices=["auto", "hub", "offline"])
    parser.add_argument("--epochs", nargs="*", default=[], metavar="TASK=N",
                        help="epochs per task, e.g. mnist=5 (defaults: %s)" % DEFAULT_EPOCHS)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    epochs = dict(DEFAULT_EPOCHS)
    for item in args.epochs:
        key, _, value = item.partition("=")
        if not value.isdigit() or int(value) < 1:
            parser.error(f"--epochs {item!r}: use TASK=N with N >= 1, e.g. mnist=3")
        epochs[key] = int(value)
    torch.set_num_threads(args.threads)
    rows = [run_task(name, args.source, epochs.get(name, 1), args.seed) for name in args.tasks]
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20,
                           "display.max_colwidth", 48, "display.float_format", "{:.3f}".format):
        print(f"\nCentralized sanity runs (torch threads={args.threads}; times: wall = "
              f"time.perf_counter, cpu = time.process_time; limit {WALL_LIMIT_S:.0f} s wall)")
        print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    raise SystemExit(0 if main()["pass"].all() else 1)
