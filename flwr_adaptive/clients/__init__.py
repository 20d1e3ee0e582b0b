"""Flower client side: measure each round's training and train exactly the quota the server sent.

- :func:`telemetry_train` decorates a Message-API ``@app.train()`` function (put it *under*
  ``@app.train()``); :class:`TelemetryClient` wraps a legacy ``NumPyClient``. Both measure the
  training (time, energy, samples) and report it in the reply's metrics.
- :func:`quota_data` gives the training loop exactly this round's quota of the local data.
- :func:`node_partition` reads a SuperNode's ``partition-id``/``num-partitions`` (the identity
  that survives restarts) with the ``--node-config`` fix in the error when they are missing.
- :func:`silo_train` runs one HFL-DDP silo round on k local DDP ranks (imports torch on first use).

The DDP regime lives in :mod:`flwr_adaptive.clients.ddp`, the project's tasks in
:mod:`flwr_adaptive.clients.tasks`.
"""

from typing import Any

from flwr_adaptive.clients.node import node_partition
from flwr_adaptive.clients.telemetry import TelemetryClient, mark_warm, quota_data, telemetry_train

__all__ = ["telemetry_train", "TelemetryClient", "quota_data", "mark_warm", "node_partition", "silo_train"]


def __getattr__(name: str) -> Any:
    # silo_train needs torch.distributed: import it only when asked, so that a client that only
    # decorates its train function starts without it.
    if name == "silo_train":
        from flwr_adaptive.clients.silo import silo_train

        return silo_train
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
