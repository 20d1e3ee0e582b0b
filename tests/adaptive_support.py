"""Shared helpers of the adaptive-strategy tests: fake clocks, counted data, emulated devices.

Imported by the test modules and, inside Ray actors, by the client apps they build (Ray gives its
workers the driver's ``sys.path``, which holds ``tests/``).
"""

from __future__ import annotations

import contextlib
import logging
import math

import numpy as np

from flwr_adaptive.devices import DeviceProfile
from flwr_adaptive.energy import EmulatedMeter, Measurement

COST_S = 2.0 ** -10  # fake CPU seconds per sample read: a power of two keeps sums exact
SLOWDOWNS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
PROFILES = tuple(DeviceProfile(f"dev{i}", "x86_64", slowdown=s, active_w=10.0 + i, idle_w=2.0)
                 for i, s in enumerate(SLOWDOWNS))


class FakeClock:
    """Seconds as the test decides them."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


CPU_CLOCK = FakeClock()  # one per process: advanced only by counted reads


class CountingData:
    """A map-style dataset whose every read is counted and costs ``COST_S`` on ``clock``."""

    def __init__(self, size: int, clock: FakeClock = CPU_CLOCK, value: float = 0.0) -> None:
        self.size, self.clock, self.value = size, clock, value
        self.reads: list[int] = []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> float:
        if not 0 <= i < self.size:
            raise IndexError(i)
        self.reads.append(int(i))
        self.clock.now += COST_S
        return self.value


def emulated_meter(context, server_round):
    """The node's emulated device (by partition id) on the per-process fake CPU clock."""
    return EmulatedMeter(PROFILES[context.node_config["partition-id"] % len(PROFILES)], cpu_clock=CPU_CLOCK)


class NaNMeter:
    """A broken meter: its windows last NaN seconds."""

    def begin_window(self, name):
        pass

    def end_window(self, name):
        return Measurement(math.nan, None, "broken", "wall")


def adaptive_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "[adaptive]" in r.getMessage()]


@contextlib.contextmanager
def quiet_flower():
    """Keep Flower's per-round INFO lines out of the test output (warnings stay), then restore."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def weighted_mean(values, weights) -> float:
    values, weights = np.asarray(values, float), np.asarray(weights, float)
    return float((values * weights).sum() / weights.sum())


class FakeGrid:
    """The part of Flower's ``Grid`` a strategy's ``configure_train`` asks: the node ids."""

    def __init__(self, node_ids):
        self.node_ids = list(node_ids)

    def get_node_ids(self):
        return list(self.node_ids)


def start_every_node(grid, n: int) -> list:
    """Wait until ``n`` nodes are connected and send each one query (the ClientApp must answer it).

    Starting every simulation actor first keeps actor start-up out of the rounds under test.
    """
    import time

    from flwr.app import Message, RecordDict

    while len(nodes := list(grid.get_node_ids())) < n:
        time.sleep(0.1)
    grid.send_and_receive([Message(RecordDict(), dst_node_id=node, message_type="query") for node in nodes])
    return nodes
