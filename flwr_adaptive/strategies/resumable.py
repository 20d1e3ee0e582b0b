"""Flower's round loop with a checkpoint after every round: a ServerApp that dies resumes.

Contract
--------
:class:`ResumableRun` runs the same loop as ``flwr.serverapp.strategy.Strategy.start`` (train,
federated evaluation, centralized ``evaluate_fn``) for any Message-API strategy, and after every
round writes a checkpoint under ``state_dir``:

- ``model-checkpoint.npz`` — the global model's arrays (by name, in order);
- ``run-checkpoint.json`` — the last completed round, the run's ``num_rounds``, the
  centralized evaluation metrics of every round so far, and ``extra`` (what the app adds).

Both are written to a temporary file and renamed into place (a crash leaves the old or the new
checkpoint, never half of one); the JSON is written last and names the model file's digest, so a
model file that does not match its JSON is refused. A write that fails (disk full) is one error
line and the run goes on; the next round writes both again (a restart in between resumes from the
last checkpoint written, or refuses a model file that its JSON does not name, with the fix).
A ServerApp started with the same ``state_dir`` (and the same ``num_rounds``) loads the model and
continues at the next round with the true round numbers (the strategy, the clients' configs and
``evaluate_fn`` see rounds
``k+1..num_rounds``); the strategy's own state (the adaptive controller) is resumed by the
strategy from the same folder. A checkpoint of a run that finished all its rounds is not resumed:
the new run starts from ``initial_arrays`` (the controller state is still the strategy's to
resume). A checkpoint of a different ``num_rounds`` is refused with the fix in the message.

Cost
----
One write of the model (``numpy.savez``) and one small JSON per round.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from flwr_adaptive.strategies.core import log
from flwr_adaptive.strategies.state_file import write_or_log

__all__ = ["ResumableRun", "Checkpoint", "MODEL_FILE", "RUN_FILE"]

MODEL_FILE = "model-checkpoint.npz"
RUN_FILE = "run-checkpoint.json"
_VERSION = 1


class Checkpoint:
    """What a completed round leaves: round number, model, metrics so far, the app's extras."""

    def __init__(
        self,
        server_round: int,
        num_rounds: int,
        arrays: ArrayRecord,
        metrics: Mapping[int, Mapping[str, Any]],
        extra: Mapping[str, Any],
    ) -> None:
        self.server_round = server_round
        self.num_rounds = num_rounds
        self.arrays = arrays
        self.metrics = {int(k): dict(v) for k, v in metrics.items()}
        self.extra = dict(extra)

    @property
    def finished(self) -> bool:
        """Whether the checkpointed run completed all its rounds."""
        return self.server_round >= self.num_rounds


def _arrays_to_bytes(arrays: ArrayRecord) -> tuple[bytes, list[str]]:
    names = list(arrays.keys())
    buf = io.BytesIO()
    # numpy's stub types savez's keyword-only allow_pickle, so mypy cannot rule it out of **dict
    np.savez(buf, **{f"a{i}": arrays[name].numpy() for i, name in enumerate(names)})  # type: ignore[arg-type]
    return buf.getvalue(), names


def _arrays_from_bytes(data: bytes, names: list[str]) -> ArrayRecord:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return ArrayRecord(OrderedDict((name, Array(np.asarray(npz[f"a{i}"]))) for i, name in enumerate(names)))


class ResumableRun:
    """``Strategy.start`` with a checkpoint after every round under ``state_dir``.

    Parameters
    ----------
    state_dir : str or Path, optional
        Where the checkpoint lives (the adaptive strategy's state file can share the folder).
        ``None``: no checkpoint, the loop is ``Strategy.start``'s.
    on_round : callable, optional
        ``on_round(server_round, arrays, metrics)`` after each round's checkpoint (``metrics``:
        the centralized evaluation of that round or ``None``); e.g. append history rows.

    Examples
    --------
    ::

        run = ResumableRun(state_dir)
        result = run.start(strategy, grid, ArrayRecord(model.state_dict()), num_rounds=10,
                           evaluate_fn=evaluate)
    """

    def __init__(
        self,
        state_dir: str | os.PathLike | None,
        on_round: Callable[[int, ArrayRecord, MetricRecord | None], None] | None = None,
    ) -> None:
        self.state_dir = None if state_dir is None or str(state_dir) == "" else Path(state_dir)
        self.on_round = on_round
        self.resumed_from = 0  # the round the last start() resumed after (0: a fresh run)
        self.metrics: dict[int, dict[str, Any]] = {}  # centralized evaluation per round, across restarts
        self.extra: dict[str, Any] = {}

    # ------------------------------------------------------------------ checkpoint files
    def load(self) -> Checkpoint | None:
        """The checkpoint in ``state_dir`` (``None`` when there is none)."""
        if self.state_dir is None or not (self.state_dir / RUN_FILE).exists():
            return None
        run_path, model_path = self.state_dir / RUN_FILE, self.state_dir / MODEL_FILE
        try:
            meta = json.loads(run_path.read_text())
            data = model_path.read_bytes()
        except (OSError, ValueError) as err:
            raise ValueError(
                f"checkpoint in {self.state_dir} is unreadable ({err}); delete {run_path} and "
                f"{model_path} to start the run afresh"
            ) from err
        if meta.get("version") != _VERSION:
            raise ValueError(
                f"checkpoint {run_path} has version {meta.get('version')!r}, this release reads "
                f"{_VERSION}; delete it to start afresh"
            )
        if hashlib.sha256(data).hexdigest() != meta.get("model_sha256"):
            raise ValueError(
                f"{model_path} does not match {run_path} (a different run's model?); delete both "
                "to start the run afresh"
            )
        arrays = _arrays_from_bytes(data, list(meta["names"]))
        return Checkpoint(
            int(meta["round"]),
            int(meta["num_rounds"]),
            arrays,
            {int(k): v for k, v in meta.get("metrics", {}).items()},
            meta.get("extra", {}),
        )

    def save(self, server_round: int, num_rounds: int, arrays: ArrayRecord) -> None:
        """Write the checkpoint of a completed round (model first, then the JSON naming it).

        Never raises for a failed write (``state_file.write_or_log``): the run matters more than
        its checkpoint.
        """
        if self.state_dir is None:
            return
        data, names = _arrays_to_bytes(arrays)
        # The model file is valid only with the JSON written next, which names its digest and
        # syncs the folder for both.
        what = f"the checkpoint of round {server_round}"
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # write_or_log below says why the folder cannot be written
        if not write_or_log(self.state_dir / MODEL_FILE, data, what, sync_dir=False):
            return  # the old JSON still names the old model file, which is intact
        meta = {
            "version": _VERSION,
            "round": int(server_round),
            "num_rounds": int(num_rounds),
            "names": names,
            "model_sha256": hashlib.sha256(data).hexdigest(),
            "saved_at": time.time(),
            "metrics": {str(k): v for k, v in self.metrics.items()},
            "extra": self.extra,
        }
        write_or_log(self.state_dir / RUN_FILE, json.dumps(meta), what)

    # ------------------------------------------------------------------ the loop
    def start(
        self,
        strategy: Strategy,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run rounds ``k+1..num_rounds`` (``k``: the checkpoint's round, else 0); see the module doc.

        Parameters are ``Strategy.start``'s; ``evaluate_fn`` is called for round 0 only on a fresh
        run, and after every round with the true round number.
        """
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise ValueError(f"num_rounds must be an int >= 1, got {num_rounds!r}")
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        arrays, done = initial_arrays, 0
        checkpoint = self.load()
        if checkpoint is not None and checkpoint.num_rounds != num_rounds:
            assert self.state_dir is not None  # the checkpoint was read from it
            raise ValueError(
                f"the checkpoint in {self.state_dir} is of a run of {checkpoint.num_rounds} rounds "
                f"(round {checkpoint.server_round} done), this run asks for {num_rounds}: run with "
                f"num-server-rounds={checkpoint.num_rounds} to resume it, or delete "
                f"{self.state_dir / RUN_FILE} to start afresh"
            )
        if checkpoint is not None and checkpoint.finished:
            log(
                INFO,
                "[adaptive] the checkpoint in %s is of a finished run (%d rounds): starting a new run from "
                "the initial model",
                self.state_dir,
                checkpoint.num_rounds,
            )
        elif checkpoint is not None:
            arrays, done = checkpoint.arrays, checkpoint.server_round
            self.metrics, self.extra = checkpoint.metrics, checkpoint.extra
            log(
                WARNING,
                "[adaptive] resuming the run from its checkpoint in %s: round %d of %d was the last "
                "completed; the model of that round is loaded",
                self.state_dir,
                done,
                num_rounds,
            )
        self.resumed_from = done
        log(INFO, "Starting %s strategy (rounds %d..%d):", type(strategy).__name__, done + 1, num_rounds)
        strategy.summary()
        result = Result()
        result.arrays = arrays
        if evaluate_fn is not None and done == 0:
            res = evaluate_fn(0, arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[0] = res
                self.metrics[0] = dict(res)
        if hasattr(strategy, "timed_grid"):  # round_timeout: each training round's own timeout
            grid = strategy.timed_grid(grid)
        for current_round in range(done + 1, num_rounds + 1):
            log(INFO, "")
            log(INFO, "[ROUND %s/%s]", current_round, num_rounds)
            replies = grid.send_and_receive(
                messages=strategy.configure_train(current_round, arrays, train_config, grid), timeout=timeout
            )
            new_arrays, train_metrics = strategy.aggregate_train(current_round, replies)
            if new_arrays is not None:
                arrays = result.arrays = new_arrays
            if train_metrics is not None:
                result.train_metrics_clientapp[current_round] = train_metrics
            eval_messages = list(strategy.configure_evaluate(current_round, arrays, evaluate_config, grid))
            if eval_messages:
                eval_replies = grid.send_and_receive(messages=eval_messages, timeout=timeout)
                eval_metrics = strategy.aggregate_evaluate(current_round, eval_replies)
                if eval_metrics is not None:
                    result.evaluate_metrics_clientapp[current_round] = eval_metrics
            res = evaluate_fn(current_round, arrays) if evaluate_fn is not None else None
            if res is not None:
                result.evaluate_metrics_serverapp[current_round] = res
                self.metrics[current_round] = dict(res)
            self.save(current_round, num_rounds, arrays)
            if self.on_round is not None:
                self.on_round(current_round, arrays, res)
        return result
