"""Flower client side: measure each round's training and train exactly the quota the server sent.

- :func:`telemetry_train` decorates a Message-API ``@app.train()`` function (put it *under*
  ``@app.train()``); :class:`TelemetryClient` wraps a legacy ``NumPyClient``. Both measure the
  training (time, energy, samples) and report it in the reply's metrics.
- :func:`quota_data` gives the training loop exactly this round's quota of the local data.
- :func:`quota_batch_size` gives the batch size for the quota when the strategy scales batches
  (``scale_batch_size=True``: every node takes the reference quota's local steps; ``"shrink"``, the
  default with private data: the nodes below it do, the others keep the user's batch size).
- :func:`node_partition` reads a SuperNode's ``partition-id``/``num-partitions`` (the identity
  that survives restarts) with the ``--node-config`` fix in the error when they are missing.
- :func:`silo_train` runs one HFL-DDP silo round on k local DDP ranks (imports torch on first use).

The DDP regime lives in :mod:`flwr_adaptive.clients.ddp`, the project's tasks in
:mod:`flwr_adaptive.clients.tasks`.
"""

from importlib import import_module
from typing import Any

__all__ = [
    "telemetry_train",
    "TelemetryClient",
    "quota_data",
    "quota_batch_size",
    "mark_warm",
    "mark_step",
    "node_partition",
    "silo_train",
]

# Imported on first use: the Flower wrappers need flwr, silo_train needs torch.distributed, and
# the DDP regime (flwr_adaptive.clients.ddp, torch only) must import on a GPU host without flwr.
_HOME = {
    "telemetry_train": "telemetry",
    "TelemetryClient": "telemetry",
    "quota_data": "data",
    "quota_batch_size": "data",
    "mark_warm": "telemetry",
    "mark_step": "telemetry",
    "node_partition": "node",
    "silo_train": "silo",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
