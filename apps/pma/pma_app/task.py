"""What the ServerApp and the ClientApp share: run config defaults, the task, the node's meter.

Which clock measures a node (run config ``clock``, default ``"auto"``):

- in Flower's simulation engine, or with ``clock="virtual"``: the node is one emulated device of
  the 11-board testbed (device ``partition-id % 11``), whose
  :class:`~flwr_adaptive.energy.EmulatedMeter` turns the CPU seconds of the training thread into
  device seconds and joules (the virtual clock; honest on shared cores);
- a SuperNode started with ``--node-config "... device=<board>"``: that board made real by
  sleeping (:class:`~flwr_adaptive.energy.SleepEmulatedMeter`), so the server's wall clock sees
  it: a deployment demo on one machine;
- otherwise (a real deployment, or ``clock="wall"``): this machine's real meter
  (:func:`~flwr_adaptive.energy.auto_meter`: RAPL, NVML, else the psutil model) on the wall clock.

Data is one IID partition of the task's offline training set per node.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from typing import Any, Mapping

import numpy as np
from flwr.app import Context

from flwr_adaptive.clients import node_partition
from flwr_adaptive.clients.tasks import get_task
from flwr_adaptive.clients.telemetry import mark_warm
from flwr_adaptive.devices import get_testbed
from flwr_adaptive.energy import EmulatedMeter, Meter, SleepEmulatedMeter, auto_meter

__all__ = ["DEFAULTS", "CLOCKS", "CPU_CLOCK", "run_config", "load_task", "load_partition", "node_meter",
           "device_meter", "min_nodes", "node_wait_hint", "in_simulation", "warm_up"]

DEFAULTS: dict[str, Any] = {
    "policy": "time", "num-server-rounds": 10, "budget": 2200, "task": "mnist", "num-clients": 11,
    "smoothing": 0.5, "deadband": -1.0, "slack": -1.0, "paper": False, "weighting": "samples", "allow-cycling": True, "jitter": 0.05,
    "seed": 0, "lr": 0.0, "timeout": 600.0, "out-dir": "", "state-dir": "", "clock": "auto", "min-nodes": 0,
    "oort-fraction": 0.6, "fedasync-alpha": 0.6, "fedasync-staleness": "polynomial",
    "fedasync-order": "virtual", "node-wait": 20.0,
}
"""The run config keys of ``pyproject.toml`` with their defaults (a test keeps the two equal)."""

CLOCKS = ("auto", "virtual", "wall")
"""Values of the run config key ``clock`` (see the module docstring)."""

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
    pid, _ = node_partition(context.node_config)
    rng = np.random.default_rng([int(cfg["seed"]), pid, int(server_round)])
    return EmulatedMeter(profiles[pid % len(profiles)], cpu_clock=CPU_CLOCK, rng=rng)


_REAL_METER: list[Meter] = []  # auto_meter() once per process (it logs what it found)


def node_meter(context: Context, server_round: int) -> Meter:
    """The meter of this node for this round (see the module docstring for the rule)."""
    cfg = run_config(context)
    clock = str(cfg["clock"])
    if clock not in CLOCKS:
        raise ValueError(f"run config clock={clock!r} is not one of {', '.join(CLOCKS)}; e.g. -c \"clock='wall'\"")
    board = context.node_config.get("device")
    if board is not None and clock != "virtual":
        by_name = {p.name: p for p in _profiles(float(cfg["jitter"]))}
        if str(board) not in by_name:
            raise ValueError(f"node config device={board!r} is not a testbed board; use one of "
                             f"{', '.join(sorted(by_name))} (or leave device out to measure this machine)")
        pid, _ = node_partition(context.node_config)
        rng = np.random.default_rng([int(cfg["seed"]), pid, int(server_round)])
        return SleepEmulatedMeter(by_name[str(board)], cpu_clock=CPU_CLOCK, rng=rng)
    if clock == "virtual" or (clock == "auto" and in_simulation()):
        return device_meter(context, server_round)
    if not _REAL_METER:
        _REAL_METER.append(auto_meter())
    return _REAL_METER[0]


def in_simulation() -> bool:
    """Whether this process is a worker of Flower's simulation engine (a Ray worker).

    Flower tells a ClientApp nothing about its engine; the simulation runs ClientApps in Ray
    worker processes, which have Ray imported and connected, and a Deployment Engine
    ClientApp process never imports Ray.
    """
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:  # a half-imported or foreign "ray" module: not the simulation engine
        return False


def min_nodes(cfg: Mapping[str, Any]) -> int:
    """Nodes a round waits for: ``min-nodes``, or by default half of ``num-clients`` (at least 1).

    Below the full population, so that a run starts without waiting for every node and goes on
    when a node leaves for good (Flower samples the nodes connected at each round).
    """
    explicit = int(cfg["min-nodes"])
    if explicit < 0:
        raise ValueError(f"run config min-nodes={explicit} must be >= 0 (0: half of num-clients)")
    if explicit > 0:
        return explicit
    return max(1, math.ceil(int(cfg["num-clients"]) / 2))


def node_wait_hint(cfg: Mapping[str, Any]) -> str:
    """The one-line fix when fewer than ``min_nodes(cfg)`` nodes connect (see ``node-wait``)."""
    clients, waits = int(cfg["num-clients"]), min_nodes(cfg)
    return (f"apps/pma expects {clients} nodes (num-clients) and each round waits for {waits} (min-nodes): run with "
            f"--federation-config \"num-supernodes={clients}\" (simulation) or start {clients} SuperNodes, or pass "
            f"-c \"num-clients=2\" for Flower's default local federation of 2; -c \"node-wait=<s>\" waits longer")


@functools.lru_cache(maxsize=4)
def warm_up(name: str) -> None:
    """One throw-away training step per process: torch's lazy set-up is not device time."""
    task = load_task(name)
    data = task.data()[0]
    task.train(task.make_model(seed=0), data, np.arange(min(2, len(data))))
    mark_warm()  # the measured calls of this process are warm: none is reported as a cold start
