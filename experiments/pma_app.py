"""The emulated 11-device PMA federation as a Flower App: ``flwr run .`` at the repository root.

Contract
--------
``server_app`` and ``client_app`` (named in ``[tool.flwr.app.components]`` of pyproject.toml)
run periodic model averaging on one of the project's tasks (``task``, default MNIST, offline)
over ``num-clients`` emulated devices of the testbed (:data:`flwr_adaptive.devices.TESTBED`,
device ``partition-id % 11``), with the policy chosen by run config::

    flwr run . <connection> -c "policy='equal'"      # equal | time | low-energy | energy
                                                     # | static | oort | fedasync (baselines)

- Client: the Flower-generated shape plus our three additions: ``@telemetry_train`` with an
  :class:`~flwr_adaptive.energy.EmulatedMeter` for its device (virtual clock; CPU time of the
  training thread, torch on one thread), ``quota_data`` over its IID partition, and
  ``Task.train`` on exactly those samples.
- Server: the policy's strategy from :func:`strategies.registry.build_strategy` (the adaptive
  strategy around FedAvg, or a baseline), centralized evaluation on the task's holdout after every
  round (every round-equivalent for FedAsync), and, when ``out-dir`` is set, ``history-<policy>.csv`` (per
  round), ``history-<policy>-clients.csv`` (per client) and ``summary-<policy>.json`` written
  there. ``summary`` holds ``"status": "finished"`` only when every round ran: ``flwr run``
  exits 0 even when a run failed, so callers check that file.

Run config keys (defaults in pyproject.toml): ``policy``, ``num-server-rounds``, ``budget``,
``task``, ``num-clients``, ``smoothing``, ``deadband``, ``weighting``, ``allow-cycling``,
``jitter``, ``seed``, ``lr`` (0 = the task's default), ``timeout``, ``out-dir``, ``state-dir``,
and for the baselines ``oort-fraction``, ``fedasync-alpha``, ``fedasync-staleness``.

Cost
----
Per round: ``budget`` samples of training spread over the clients, one holdout evaluation on the
server, one small CSV/JSON write. Each client process loads the task's data once (cached).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import numpy as np

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from clients.data import quota_data
from clients.tasks import get_task
from clients.telemetry import telemetry_train
from experiments.run_summary import RunSummary
from flwr_adaptive.devices import get_testbed
from flwr_adaptive import keys
from flwr_adaptive.energy import EmulatedMeter
from strategies.registry import build_strategy

__all__ = ["server_app", "client_app", "DEFAULTS"]

DEFAULTS: dict[str, Any] = {
    "policy": "time", "num-server-rounds": 10, "budget": 2200, "task": "mnist", "num-clients": 11,
    "smoothing": 0.5, "deadband": 0.05, "weighting": "samples", "allow-cycling": True, "jitter": 0.05,
    "seed": 0, "lr": 0.0, "timeout": 600.0, "out-dir": "", "state-dir": "",
    "oort-fraction": 0.6, "fedasync-alpha": 0.6, "fedasync-staleness": "polynomial",
}

# CPU time of the training thread: with torch on one thread all of the work runs there, and the
# Ray worker's own background threads (heartbeats, object transfer) stay out of the measurement.
_CPU_CLOCK = time.thread_time


def _cfg(context: Context) -> dict[str, Any]:
    return {**DEFAULTS, **dict(context.run_config)}


@functools.lru_cache(maxsize=4)
def _task(name: str):
    import torch

    torch.set_num_threads(1)
    return get_task(name, source="offline")


@functools.lru_cache(maxsize=64)
def _partition(name: str, partition_id: int, num_partitions: int, seed: int):
    return _task(name).load(partition_id, num_partitions, seed=seed)[0]


@functools.lru_cache(maxsize=4)
def _profiles(jitter: float):
    return get_testbed(jitter_sigma=jitter)


def _meter(context: Context, server_round: int) -> EmulatedMeter:
    """The node's emulated device; jitter seeded by (seed, partition, round): reproducible runs."""
    cfg = _cfg(context)
    profiles = _profiles(float(cfg["jitter"]))
    pid = int(context.node_config["partition-id"])
    rng = np.random.default_rng([int(cfg["seed"]), pid, int(server_round)])
    return EmulatedMeter(profiles[pid % len(profiles)], cpu_clock=_CPU_CLOCK, rng=rng)


@functools.lru_cache(maxsize=4)
def _warm_up(name: str) -> None:
    """One throw-away training step per process: torch's lazy set-up is not device time."""
    task = _task(name)
    data = task.data()[0]
    task.train(task.make_model(seed=0), data, np.arange(min(2, len(data))))


client_app = ClientApp()


@telemetry_train(meter=_meter, cpu_clock=_CPU_CLOCK)
def _train_quota(msg: Message, context: Context) -> Message:
    """The measured part: train the received model on this round's quota of the partition."""
    cfg = _cfg(context)
    task = _task(cfg["task"])
    pid, n = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    train_set = _partition(cfg["task"], pid, n, int(cfg["seed"]))
    model = task.make_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    indices = quota_data(np.arange(len(train_set)))
    lr = float(msg.content["config"].get("lr", 0.0)) or None
    stats = task.train(model, train_set, indices, lr=lr)
    metrics = MetricRecord({keys.TRAIN_LOSS: float(stats["loss"]), keys.NUM_EXAMPLES: int(stats["samples"])})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Per-process set-up first (cached, not measured: one simulation process serves many
    emulated devices, and its first call would otherwise bill them the imports), then the
    measured training on the quota."""
    cfg = _cfg(context)
    _warm_up(cfg["task"])
    _partition(cfg["task"], int(context.node_config["partition-id"]),
               int(context.node_config["num-partitions"]), int(cfg["seed"]))
    return _train_quota(msg, context)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` of PMA with the adaptive strategy and the chosen policy."""
    cfg = _cfg(context)
    task = _task(cfg["task"])
    _, holdout = task.data()
    n = int(cfg["num-clients"])
    out_dir = Path(cfg["out-dir"]) if cfg["out-dir"] else None
    policy = str(cfg["policy"])
    summary = RunSummary(out_dir, policy, cfg["task"], {k: cfg[k] for k in DEFAULTS})
    strategy = build_strategy(
        policy, inner=FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n),
        budget=int(cfg["budget"]), num_nodes=n, seed=int(cfg["seed"]),
        oort_fraction=float(cfg["oort-fraction"]), fedasync_alpha=float(cfg["fedasync-alpha"]),
        fedasync_staleness=str(cfg["fedasync-staleness"]), smoothing=float(cfg["smoothing"]),
        deadband=float(cfg["deadband"]), weighting=str(cfg["weighting"]),
        allow_cycling=bool(cfg["allow-cycling"]), state_dir=cfg["state-dir"] or None)
    model = task.make_model(seed=int(cfg["seed"]))

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        metrics = task.evaluate(model, holdout)
        summary.add_round(server_round, metrics)
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    started = time.perf_counter()
    strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                   num_rounds=int(cfg["num-server-rounds"]), timeout=float(cfg["timeout"]),
                   train_config=ConfigRecord({"lr": float(cfg["lr"])}), evaluate_fn=evaluate)
    wall = time.perf_counter() - started
    if out_dir is not None:
        strategy.save_history(out_dir / f"history-{policy}.csv")
    summary.finish(len(strategy.history) == int(cfg["num-server-rounds"]), wall)
