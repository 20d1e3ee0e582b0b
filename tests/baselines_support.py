"""Helpers of the baselines' tests (``test_baselines_static.py``, ``test_baselines_oort.py``,
``test_baselines_fedasync.py``): their real Flower code paths, without Ray.

``SimGrid`` stands in for the ServerApp's Grid: each node "trains" in-process and reports the
device time ``quota × its per-sample cost`` (powers of two, so virtual times are exact), active
energy ``active_w × time`` and its idle watts. Flower's own ``Strategy.start`` drives the
synchronous strategies; ``FedAsyncStrategy.start`` drives itself.
"""

from __future__ import annotations

import contextlib
import logging
import math

import numpy as np

from flwr_adaptive import keys


class SimGrid:
    """In-process nodes ``100 + partition``; every call's messages are recorded in ``sent``.

    Parameters
    ----------
    cost_s : list of float
        Device seconds per sample of each partition.
    active_w, idle_w : list of float, optional
        Watts per partition (default 10 and 1).
    value : list of float, optional
        Each partition returns a model whose every entry is this value (default: the partition id).
    loss : list of float or None
        ``keys.TRAIN_LOSS`` per partition (None: the metric is not sent).
    fail : set of int
        Partitions whose every reply is an error.
    drift : dict, optional
        ``{partition: (from_round, factor)}``: cost × factor for ``keys.ROUND`` >= from_round.
    """

    def __init__(self, cost_s, active_w=None, idle_w=None, value=None, loss=None, fail=(), drift=None):
        n = len(cost_s)
        self.cost_s = list(cost_s)
        self.active_w = list(active_w or [10.0] * n)
        self.idle_w = list(idle_w or [1.0] * n)
        self.value = list(value if value is not None else range(n))
        self.loss = loss if loss is not None else [1.0] * n
        self.fail = set(fail)
        self.drift = dict(drift or {})
        self.partition = {100 + i: i for i in range(n)}
        self.sent: list[dict] = []

    def get_node_ids(self):
        return list(self.partition)

    def time_of(self, pid: int, quota: int, rnd: int) -> float:
        start, factor = self.drift.get(pid, (math.inf, 1.0))
        return quota * self.cost_s[pid] * (factor if rnd >= start else 1.0)

    def send_and_receive(self, messages, timeout=None):
        from flwr.app import ArrayRecord, Error, Message, MetricRecord, RecordDict

        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            pid = self.partition[node]
            config = dict(msg.content["config"])
            model = msg.content["arrays"].to_numpy_ndarrays()
            self.sent.append({"node": node, "pid": pid, "config": config, "model": model})
            if pid in self.fail:
                out.append(Message(Error(code=1, reason=f"partition {pid} always fails"), reply_to=msg))
                continue
            quota = int(config[keys.QUOTA])
            t = self.time_of(pid, quota, int(config[keys.ROUND]))
            metrics = {"num-examples": quota, keys.SAMPLES: quota, keys.TIME_S: t, keys.CPU_TIME_S: t,
                       keys.WALL_TIME_S: t, keys.ENERGY_J: self.active_w[pid] * t, keys.DATA_SIZE: 100_000,
                       keys.PARTITION_ID: pid, keys.QUOTA_CAPPED: 0, keys.IDLE_W: self.idle_w[pid],
                       keys.VIRTUAL_CLOCK: 1}
            if self.loss[pid] is not None:
                metrics[keys.TRAIN_LOSS] = float(self.loss[pid])
            arrays = ArrayRecord([np.full_like(a, self.value[pid], dtype=float) for a in model])
            out.append(Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)}), reply_to=msg))
        return out

    def quotas(self, rnd: int) -> dict[int, int]:
        """``{partition: quota}`` sent with ``keys.ROUND == rnd``."""
        return {s["pid"]: s["config"][keys.QUOTA] for s in self.sent if s["config"][keys.ROUND] == rnd}

    def rounds(self) -> list[int]:
        return sorted({s["config"][keys.ROUND] for s in self.sent})


def fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def run(strategy, grid, rounds, evaluate_fn=None, train_config=None):
    from flwr.app import ArrayRecord, ConfigRecord

    return strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=rounds,
                          train_config=ConfigRecord(train_config or {}), evaluate_fn=evaluate_fn)


def quiet(caplog):
    caplog.set_level("WARNING", logger="flwr")


@contextlib.contextmanager
def flwr_level(level):
    """Flower's logger at ``level`` inside the block; its previous level restored after."""
    logger = logging.getLogger("flwr")
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)
