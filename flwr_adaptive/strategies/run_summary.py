"""The ``summary-<policy>.json`` a ServerApp writes: how a script knows that a run finished.

Contract
--------
``flwr run`` exits 0 even when the run failed, so scripts that drive it (this repository's
``experiments``, a user's CI) read this file instead. :class:`RunSummary` writes it at the
start with ``"status": "started"``, keeps one entry per evaluated round (``add_round``) and, in
``finish``, sets ``"status"`` to ``"finished"`` only when every round ran (else
``"incomplete"``). Without an ``out_dir`` nothing is written; the dict is still kept in ``data``.

Cost
----
One small JSON write at the start and one at the end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

__all__ = ["RunSummary"]


class RunSummary:
    """One ServerApp run's summary: policy, task, config, holdout metrics per round, status.

    Parameters
    ----------
    out_dir : str or Path, optional
        Folder of ``summary-<policy>.json`` (created when needed); ``None``: keep it in memory.
    policy : str
        The run's policy (names the file).
    task : str
        The task trained.
    config : mapping
        The run config the ServerApp used (JSON types).
    """

    def __init__(self, out_dir: str | os.PathLike | None, policy: str, task: str,
                 config: Mapping[str, Any]) -> None:
        self.path = None if out_dir is None else Path(out_dir) / f"summary-{policy}.json"
        self.data: dict[str, Any] = {"policy": policy, "status": "started", "task": task, "rounds": [],
                                     "config": dict(config)}
        self.write()

    def add_round(self, server_round: int, metrics: Mapping[str, Any]) -> None:
        """Record the holdout metrics after ``server_round`` (0: the initial model)."""
        self.data["rounds"].append({"round": server_round, **{k: float(v) for k, v in metrics.items()}})

    def finish(self, done: bool, server_wall_s: float) -> None:
        """Close the run: ``"finished"`` when ``done`` (every round ran), else ``"incomplete"``."""
        self.data["server_wall_s"] = server_wall_s
        self.data["status"] = "finished" if done else "incomplete"
        self.write()

    def write(self) -> None:
        """Write the file now (no-op without ``out_dir``)."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=1))
