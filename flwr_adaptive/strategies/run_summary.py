"""The ``summary-<policy>.json`` a ServerApp writes: how a script knows that a run finished.

Contract
--------
``flwr run`` exits 0 even when the run failed, so scripts that drive it (this repository's
``experiments``, a user's CI) read this file instead. :class:`RunSummary` writes it at the
start with ``"status": "started"`` (and the ServerApp's ``pid`` and ``host``), keeps one entry
per evaluated round (``add_round``; ``write()`` after a round makes the status ``"running"``)
and, in ``finish``, sets ``"status"`` to ``"finished"`` only when every round ran (else
``"incomplete"``), or to ``"failed"`` with an ``"error"`` when no round aggregated a single reply
(the model is still the initial one: e.g. a timeout shorter than a round). ``check()`` then raises,
so the ServerApp ends as failed (``flwr list`` shows ``finished:failed``) rather than normally.
Inside ``with summary.guard():`` an exception (or Flower stopping the ServerApp) writes
``"failed"`` with the error before it propagates. A ServerApp killed outright (SIGKILL, a lost
machine) cannot write: its file stays ``"started"``/``"running"`` with the last round it
completed and ``updated_at``, which is what a reader checks.
:func:`rounds_trained` counts the rounds of a strategy's history that aggregated a reply.
Without an ``out_dir`` nothing is written; the dict is still kept in ``data``. Writes are atomic
(:func:`~flwr_adaptive.strategies.state_file.write_atomic`).

Cost
----
One small JSON write at the start, after each round the app writes, and at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr_adaptive.strategies.state_file import write_atomic

if TYPE_CHECKING:
    from flwr_adaptive.strategies.resumable import Checkpoint

__all__ = ["RunSummary", "rounds_trained"]


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

    def __init__(self, out_dir: str | os.PathLike | None, policy: str, task: str, config: Mapping[str, Any]) -> None:
        self.path = None if out_dir is None else Path(out_dir) / f"summary-{policy}.json"
        self.data: dict[str, Any] = {
            "policy": policy,
            "status": "started",
            "task": task,
            "rounds": [],
            "config": dict(config),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        self.write()

    def add_round(self, server_round: int, metrics: Mapping[str, Any]) -> None:
        """Record the holdout metrics after ``server_round`` (0: the initial model)."""
        self.data["rounds"].append({"round": server_round, **{k: float(v) for k, v in metrics.items()}})
        if server_round > 0 and self.data["status"] == "started":
            self.data["status"] = "running"

    def resume_from(self, checkpoint: Checkpoint | None) -> int:
        """Carry a resumable run's checkpoint into the summary; returns the round it resumes after.

        ``0`` (and nothing recorded) for a fresh run: no checkpoint, or one of a run that finished.
        Otherwise ``"resumed_from"`` is set and the checkpoint's evaluated rounds are added.
        """
        if checkpoint is None or checkpoint.finished:
            return 0
        self.data["resumed_from"] = checkpoint.server_round
        for server_round, metrics in sorted(checkpoint.metrics.items()):
            self.add_round(server_round, metrics)
        return checkpoint.server_round

    def fail(self, error: str) -> None:
        """Close the run as ``"failed"`` with ``error`` (what went wrong)."""
        self.data["status"] = "failed"
        self.data["error"] = error
        self.write()

    @contextlib.contextmanager
    def guard(self) -> Iterator[RunSummary]:
        """Mark the summary ``"failed"`` when the block raises (also SystemExit/KeyboardInterrupt)."""
        try:
            yield self
        except BaseException as err:
            if self.data["status"] != "failed":  # check() already wrote why
                self.fail(f"{type(err).__name__}: {err}")
            raise

    def finish(self, done: bool, server_wall_s: float, trained_rounds: int | None = None) -> str:
        """Close the run and return its status.

        ``"failed"`` when ``trained_rounds == 0`` (no reply was aggregated in any round), else
        ``"finished"`` when ``done`` (every round ran), else ``"incomplete"``.
        """
        self.data["server_wall_s"] = server_wall_s
        if trained_rounds is not None:
            self.data["rounds_trained"] = int(trained_rounds)
        if trained_rounds == 0:
            self.data["status"] = "failed"
            self.data["error"] = (
                "no reply was aggregated in any round: the model is the initial one. Check "
                "the server log for skipped replies; a round timeout shorter than a "
                "round's training, clients that fail, or no connected node are the usual "
                "causes"
            )
        else:
            self.data["status"] = "finished" if done else "incomplete"
        self.write()
        return self.data["status"]

    def check(self) -> None:
        """Raise ``RuntimeError`` with the summary's error when the run failed (call after ``finish``)."""
        if self.data["status"] == "failed":
            where = f" (summary: {self.path})" if self.path is not None else ""
            raise RuntimeError(f"run of policy {self.data['policy']!r} failed: {self.data['error']}{where}")

    def write(self) -> None:
        """Write the file now, atomically (no-op without ``out_dir``)."""
        if self.path is None:
            return
        self.data["updated_at"] = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.data, indent=1))


def rounds_trained(strategy: Any) -> int:
    """Rounds of ``strategy.history`` that aggregated at least one reply (its ``clients`` column)."""
    history = strategy.history
    if len(history) == 0 or "clients" not in history:
        return 0
    return int((history["clients"] > 0).sum())
