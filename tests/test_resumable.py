"""ResumableRun: Flower's round loop with a checkpoint per round; a dead ServerApp resumes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.strategies.resumable import MODEL_FILE, RUN_FILE, ResumableRun
from flwr_adaptive.strategies.run_summary import RunSummary


class StepGrid:
    """Two nodes whose training adds 1 to every weight; the grid dies when asked to send ``die_at``."""

    def __init__(self, die_at: int | None = None) -> None:
        self.die_at = die_at
        self.rounds: list[int] = []

    def get_node_ids(self):
        return [11, 12]

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in messages:
            if msg.metadata.message_type.startswith("train"):
                rnd = int(msg.content["config"]["server-round"])
                if rnd == self.die_at:
                    raise KeyboardInterrupt("the ServerApp process is gone")
                self.rounds.append(rnd)
                w = msg.content["arrays"].to_numpy_ndarrays()[0]
                reply = Message(RecordDict({"arrays": ArrayRecord([w + 1.0]),
                                            "metrics": MetricRecord({"num-examples": 10})}), reply_to=msg)
                reply.metadata.__dict__["_src_node_id"] = msg.metadata.dst_node_id
                replies.append(reply)
        return replies


def _evaluate(seen):
    def evaluate(server_round, arrays):
        seen.append(server_round)
        return MetricRecord({"w": float(arrays.to_numpy_ndarrays()[0][0])})

    return evaluate


def _strategy():
    return FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=2, min_train_nodes=2)


def test_a_run_that_dies_resumes_at_the_next_round_from_the_checkpointed_model(tmp_path, flower_identity):
    # Prepare: a 4-round run whose ServerApp dies while sending round 3
    initial = ArrayRecord([np.zeros(3)])
    first, seen1 = StepGrid(die_at=3), []
    with pytest.raises(KeyboardInterrupt):
        ResumableRun(tmp_path).start(_strategy(), first, initial, num_rounds=4, evaluate_fn=_evaluate(seen1))
    meta = json.loads((tmp_path / RUN_FILE).read_text())
    # Execute: a new ServerApp with the same state dir
    second, seen2, after = StepGrid(), [], []
    run = ResumableRun(tmp_path, on_round=lambda r, a, m: after.append((r, float(m["w"]))))
    result = run.start(_strategy(), second, initial, num_rounds=4, evaluate_fn=_evaluate(seen2))
    # Assert: rounds 1-2 ran before the crash, 3-4 after, with the true round numbers and the model
    assert meta["round"] == 2 and first.rounds == [1, 1, 2, 2] and seen1 == [0, 1, 2]
    assert run.resumed_from == 2 and second.rounds == [3, 3, 4, 4] and seen2 == [3, 4]
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], np.full(3, 4.0))
    assert after == [(3, 3.0), (4, 4.0)]
    assert sorted(run.metrics) == [0, 1, 2, 3, 4]  # the metrics of the earlier rounds came back too


def test_a_finished_checkpoint_starts_a_new_run_from_the_initial_model(tmp_path, flower_identity):
    # Prepare: one finished 2-round run
    initial = ArrayRecord([np.zeros(2)])
    ResumableRun(tmp_path).start(_strategy(), StepGrid(), initial, num_rounds=2)
    # Execute
    grid, seen = StepGrid(), []
    result = ResumableRun(tmp_path).start(_strategy(), grid, initial, num_rounds=2, evaluate_fn=_evaluate(seen))
    # Assert
    assert grid.rounds == [1, 1, 2, 2] and seen == [0, 1, 2]
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], np.full(2, 2.0))


def test_a_checkpoint_of_another_length_or_a_mismatched_model_is_refused_with_the_fix(tmp_path, flower_identity):
    # Prepare: a run that died after round 1 of 3
    initial = ArrayRecord([np.zeros(2)])
    with pytest.raises(KeyboardInterrupt):
        ResumableRun(tmp_path).start(_strategy(), StepGrid(die_at=2), initial, num_rounds=3)
    # Execute / Assert: another num_rounds names the one to use
    with pytest.raises(ValueError, match="num-server-rounds=3"):
        ResumableRun(tmp_path).start(_strategy(), StepGrid(), initial, num_rounds=5)
    # ... and a model file that is not the one the JSON names is refused
    (tmp_path / MODEL_FILE).write_bytes(b"not the model")
    with pytest.raises(ValueError, match="does not match"):
        ResumableRun(tmp_path).load()


def test_without_a_state_dir_it_is_the_plain_loop_and_writes_nothing(tmp_path, flower_identity):
    grid = StepGrid()
    result = ResumableRun(None).start(_strategy(), grid, ArrayRecord([np.zeros(1)]), num_rounds=2)
    assert grid.rounds == [1, 1, 2, 2] and list(tmp_path.iterdir()) == []
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], np.full(1, 2.0))


def test_the_summary_says_running_after_a_round_and_failed_with_the_error(tmp_path):
    # Prepare
    summary = RunSummary(tmp_path, "time", "lite", {"budget": 10})
    # Execute: one round, then the run raises inside the guard
    summary.add_round(0, {"loss": 1.0})
    summary.add_round(1, {"loss": 0.5})
    summary.write()
    running = json.loads((tmp_path / "summary-time.json").read_text())
    with pytest.raises(RuntimeError):
        with summary.guard():
            raise RuntimeError("no nodes left")
    failed = json.loads((tmp_path / "summary-time.json").read_text())
    # Assert
    assert running["status"] == "running" and running["rounds"][-1] == {"round": 1, "loss": 0.5}
    assert failed["status"] == "failed" and failed["error"] == "RuntimeError: no nodes left"
    assert isinstance(failed["pid"], int) and failed["updated_at"] >= running["updated_at"]


def test_history_appended_per_round_is_the_whole_history_even_across_a_spill(tmp_path):
    # Prepare: a history whose client rows spill to disk every 3 rows (mid-round, too)
    from flwr_adaptive.strategies.history import ClientRows, HistoryMixin

    class Rows(HistoryMixin):
        def __init__(self):
            self._round_rows, self._client_rows = [], ClientRows(limit=3)

    history, path = Rows(), tmp_path / "history-time.csv"
    # Execute: 4 rounds of 2 clients, appended after each round
    for rnd in range(1, 5):
        history._round_rows.append({"round": rnd, "makespan_s": float(rnd)})
        for node in (7, 8):
            history._client_rows.append({"round": rnd, "node_id": node, "quota": 10 * rnd})
        history.append_history(path, rnd)
    # Assert: every row once, in order, with one header
    import pandas as pd

    rounds, clients = pd.read_csv(path), pd.read_csv(tmp_path / "history-time-clients.csv")
    assert rounds["round"].tolist() == [1, 2, 3, 4]
    assert list(zip(clients["round"], clients["node_id"])) == [(r, n) for r in range(1, 5) for n in (7, 8)]
    assert history._client_rows.spilled > 0


def test_the_summary_carries_a_checkpoint_of_an_unfinished_run_and_ignores_a_finished_one():
    from flwr_adaptive.strategies.resumable import Checkpoint

    # Prepare
    metrics = {0: {"loss": 2.0}, 2: {"loss": 1.0}, 1: {"loss": 1.5}}
    unfinished = Checkpoint(2, 5, ArrayRecord(), metrics, {})
    finished = Checkpoint(5, 5, ArrayRecord(), metrics, {})
    fresh, resumed, done = (RunSummary(None, "time", "lite", {}) for _ in range(3))
    # Execute / Assert
    assert fresh.resume_from(None) == 0 and "resumed_from" not in fresh.data and fresh.data["rounds"] == []
    assert done.resume_from(finished) == 0 and done.data["rounds"] == []
    assert resumed.resume_from(unfinished) == 2 and resumed.data["resumed_from"] == 2
    assert [r["round"] for r in resumed.data["rounds"]] == [0, 1, 2]
    assert resumed.data["rounds"][1]["loss"] == 1.5 and resumed.data["status"] == "running"


def test_a_disk_full_in_one_round_costs_one_error_line_and_the_next_round_checkpoints(
    tmp_path, flower_identity, monkeypatch, caplog
):
    import os

    # Prepare: fsync fails with ENOSPC while round 2 is checkpointed (evaluate_fn runs just before)
    real_fsync, full = os.fsync, {"on": False}

    def fsync(fd):
        if full["on"]:
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    def evaluate(server_round, arrays):
        full["on"] = server_round == 2
        return MetricRecord({"w": float(arrays.to_numpy_ndarrays()[0][0])})

    grid = StepGrid()
    # Execute
    result = ResumableRun(tmp_path).start(_strategy(), grid, ArrayRecord([np.zeros(3)]), num_rounds=3,
                                          evaluate_fn=evaluate)
    # Assert: every round ran, one error line for round 2, round 3's checkpoint is the one on disk
    assert grid.rounds == [1, 1, 2, 2, 3, 3]
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], np.full(3, 3.0))
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "round 2" in errors[0] and "No space left" in errors[0]
    assert json.loads((tmp_path / RUN_FILE).read_text())["round"] == 3
    assert sorted(os.listdir(tmp_path)) == sorted([MODEL_FILE, RUN_FILE])
