"""What the ServerApp and the ClientApp share: run config defaults, the task, the emulated devices.

Every node is one emulated device of the 11-board testbed (device ``partition-id % 11``): its
:class:`~flwr_adaptive.energy.EmulatedMeter` turns the CPU seconds of the training thread into
device seconds and joules (the virtual clock). Data is one IID partition of the task's offline
training set per node.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
from flwr.app import Context

from flwr_adaptive.clients.tasks import get_task
from flwr_adaptive.clients.telemetry import mark_warm
from flwr_adaptive.devices import get_testbed
from flwr_adaptive.energy import EmulatedMeter

__all__ = ["DEFAULTS", "CPU_CLOCK", "run_config", "load_task", "load_partition", "device_meter", "warm_up"]

DEFAULTS: dict[str, Any] = {
    "policy": "time", "num-server-rounds": 10, "budget": 2200, "task": "mnist", "num-clients": 11,
    "smoothing": 0.5, "deadband": -1.0, "slack": -1.0, "paper": False, "weighting": "samples", "allow-cycling": True, "jitter": 0.05,
    "seed": 0, "lr": 0.0, "timeout": 600.0, "out-dir": "", "state-dir": "",
    "oort-fraction": 0.6, "fedasync-alpha": 0.6, "fedasync-staleness": "polynomial",
}
"""The run config keys of ``pyproject.toml`` with their defaults (a test keeps the two equal)."""

# CPU time of the training thread: with torch on one thread all of the work runs there, and the
# Ray worker's own background threads (heartbeats, object transfer) stay out of the measurement.
CPU_CLOCK = time.thread_time


def run_config(context: Context) -> dict[str, Any]:
    """The run config with every key present (``DEFAULTS`` under ``context.run_config``)."""
    return {**DEFAULTS, **dict(context.run_config)}


@functools.lru_cache(maxsize=4)
def load_task(name: str):
    """The task (cached per process); torch on one thread so that CPU time is the work's."""
    import torch

    torch.set_num_threads(1)
    return get_task(name, source="offline")


@functools.lru_cache(maxsize=64)
def load_partition(name: str, partition_id: int, num_partitions: int, seed: int):
    """This node's training partition (cached per process)."""
    return load_task(name).load(partition_id, num_partitions, seed=seed)[0]


@functools.lru_cache(maxsize=4)
def _profiles(jitter: float):
    return get_testbed(jitter_sigma=jitter)


def device_meter(context: Context, server_round: int) -> EmulatedMeter:
    """The node's emulated device; jitter seeded by (seed, partition, round): reproducible runs."""
    cfg = run_config(context)
    profiles = _profiles(float(cfg["jitter"]))
    pid = int(context.node_config["partition-id"])
    rng = np.random.default_rng([int(cfg["seed"]), pid, int(server_round)])
    return EmulatedMeter(profiles[pid % len(profiles)], cpu_clock=CPU_CLOCK, rng=rng)


@functools.lru_cache(maxsize=4)
def warm_up(name: str) -> None:
    """One throw-away training step per process: torch's lazy set-up is not device time."""
    task = load_task(name)
    data = task.data()[0]
    task.train(task.make_model(seed=0), data, np.arange(min(2, len(data))))
    mark_warm()  # the measured calls of this process are warm: none is reported as a cold start
