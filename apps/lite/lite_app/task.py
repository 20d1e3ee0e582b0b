"""What the ServerApp and the ClientApp share: run config defaults, data, model, node config.

The model is a linear regression (8 features + bias) trained by mini-batch SGD on synthetic data:
each partition draws 200 samples of ``y = x·w* + noise`` from its own seed. Training a quota costs
microseconds of numpy; the node's cost is emulated by sleeping ``sample-cost-s × slowdown`` per
sample (``slowdown`` from the SuperNode's ``--node-config``, default 1), so the server's wall
clock sees slower nodes as it would see slower machines. Only numpy and Flower are imported: a
ClientApp process starts fast.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

__all__ = ["DEFAULTS", "FEATURES", "PARTITION_SIZE", "run_config", "partition", "holdout", "initial_weights",
           "sgd", "mse", "slowdown", "min_nodes"]

DEFAULTS: dict[str, Any] = {
    "policy": "time", "num-server-rounds": 5, "budget": 300, "sample-cost-s": 0.01, "min-nodes": 0,
    "num-clients": 3, "smoothing": 0.5, "seed": 0, "lr": 0.1, "timeout": 600.0,
    "out-dir": "", "state-dir": "", "mark-warm": True, "startup-s": 0.0, "round-timeout-factor": 0.0,
    "round-timeout-floor-s": 30.0, "server-time": False,
}
"""The run config keys of ``pyproject.toml`` with their defaults."""

FEATURES = 8
PARTITION_SIZE = 200
_TRUE_W = np.linspace(-1.0, 1.0, FEATURES + 1)  # the last entry is the bias


def run_config(context: Any) -> dict[str, Any]:
    """The run config with every key present (``DEFAULTS`` under ``context.run_config``)."""
    return {**DEFAULTS, **dict(context.run_config)}


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(n, FEATURES))
    y = x @ _TRUE_W[:-1] + _TRUE_W[-1] + 0.1 * rng.normal(size=n)
    return x, y


def partition(partition_id: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Partition ``partition_id``'s training samples (features, targets)."""
    return _draw(np.random.default_rng([seed, 1, partition_id]), PARTITION_SIZE)


def holdout(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The server's holdout set."""
    return _draw(np.random.default_rng([seed, 2]), 500)


def initial_weights() -> np.ndarray:
    """Zeros (features + bias)."""
    return np.zeros(FEATURES + 1)


def mse(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Mean squared error of weights ``w`` on ``(x, y)``."""
    return float(np.mean((x @ w[:-1] + w[-1] - y) ** 2))


def sgd(w: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float, batch: int = 16) -> tuple[np.ndarray, float]:
    """One pass of mini-batch SGD over ``(x, y)`` in order; the new weights and the mean loss."""
    w = w.astype(float).copy()
    losses = []
    for start in range(0, len(x), batch):
        xb, yb = x[start:start + batch], y[start:start + batch]
        err = xb @ w[:-1] + w[-1] - yb
        losses.append(float(np.mean(err ** 2)))
        w[:-1] -= lr * 2 * xb.T @ err / len(xb)
        w[-1] -= lr * 2 * float(np.mean(err))
    return w, float(np.mean(losses)) if losses else 0.0


def slowdown(node_config: Mapping[str, Any]) -> float:
    """The node's emulated slowdown (``--node-config slowdown=k``, default 1, must be >= 1)."""
    value = node_config.get("slowdown", 1.0)
    try:
        k = float(value)
    except (TypeError, ValueError):
        k = math.nan
    if not math.isfinite(k) or k < 1.0:
        raise ValueError(f"node config slowdown={value!r} must be a number >= 1 (sleeping cannot speed a "
                         "node up); e.g. --node-config \"partition-id=0 num-partitions=3 slowdown=3\"")
    return k


def min_nodes(cfg: Mapping[str, Any]) -> int:
    """Nodes a round waits for: ``min-nodes``, or by default half of ``num-clients`` (at least 1)."""
    explicit = int(cfg["min-nodes"])
    if explicit < 0:
        raise ValueError(f"run config min-nodes={explicit} must be >= 0 (0: half of num-clients)")
    if explicit > 0:
        return explicit
    return max(1, math.ceil(int(cfg["num-clients"]) / 2))
