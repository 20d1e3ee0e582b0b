"""The `flwr run` driver of the comparisons (experiments.compare): watchdog and process records.

No Flower here: fake commands stand in for `flwr run` (the real path is tests/test_app.py).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from experiments import compare


def _gone(pid: int, grace_s: float = 10.0) -> bool:
    # A killed process can take a moment to die on a loaded machine: poll, do not sample once.
    deadline = time.monotonic() + grace_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


class _Link:
    env = {**os.environ}


def test_a_silent_hang_is_killed_with_its_children_by_the_watchdog(tmp_path, monkeypatch):
    # Prepare: a "flwr" that starts a child, writes its PID to a file and both sleep silently
    fake = tmp_path / "flwr"
    child_pid = tmp_path / "child.pid"
    # (sh, not Python: it starts in milliseconds even on a loaded machine, so the child exists
    # well before the watchdog fires)
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > '{child_pid}'\nexec sleep 300\n")
    fake.chmod(0o755)
    monkeypatch.setattr(compare, "console_script", lambda name: str(fake))
    args = argparse.Namespace(rounds=1, budget=10, task="mnist", seed=0, jitter=0.0, clients=2,
                              cpus_per_client=1, run_timeout=8.0)  # the child is up long before, even on a loaded machine
    memory = compare.MemoryPeak()
    outcome = []

    def execute():
        try:
            compare.run_policy(_Link(), memory, "equal", args, tmp_path)
        except SystemExit as err:
            outcome.append(str(err))

    # Execute: in a thread, so that a missing watchdog fails the test instead of hanging it
    worker = threading.Thread(target=execute, daemon=True)
    worker.start()
    worker.join(120)
    # Assert: it stopped with the timeout named, and the command and its child are gone
    roots = [pid for pid in memory.roots if pid != os.getpid()]
    try:
        assert not worker.is_alive(), "run_policy still waits for a silent command"
        assert len(outcome) == 1 and "ran past 8 s (wall clock) and was killed" in outcome[0]
        assert len(roots) == 1 and _gone(roots[0])
        assert _gone(int(child_pid.read_text()))
    finally:
        for pid in roots + ([int(child_pid.read_text())] if child_pid.exists() else []):
            if not _gone(pid):
                psutil.Process(pid).kill()


def test_stream_command_returns_the_exit_code_and_logs_every_line(tmp_path):
    # Prepare
    lines = []
    # Execute
    code = compare.stream_command(["sh", "-c", "echo one; echo two; exit 3"], env=dict(os.environ),
                                  log_path=tmp_path / "log", timeout_s=60, on_line=lines.append)
    # Assert
    assert code == 3
    assert lines == ["one\n", "two\n"] and (tmp_path / "log").read_text() == "one\ntwo\n"


def test_commands_and_the_superlink_run_outside_the_repository(tmp_path, monkeypatch):
    # Prepare: a package in the working directory of the SuperLink (and so of its Ray workers) can
    # shadow the app's own; `flwr run` gets the app by absolute path
    lines, started = [], {}

    class Started:  # stands in for the SuperLink process: records how it was started
        returncode = None

        def __init__(self, cmd, **kwargs):
            started.update(kwargs)
            kwargs["stdout"].write("Uvicorn running on 127.0.0.1\n")
            kwargs["stdout"].flush()

        def poll(self):
            return None

    link = compare.LocalSuperLink(tmp_path / "run")
    monkeypatch.setattr(compare.subprocess, "Popen", Started)
    # Execute
    link.start(timeout_s=5)
    monkeypatch.undo()
    compare.stream_command(["sh", "-c", "pwd"], env=dict(os.environ), log_path=tmp_path / "log", timeout_s=60,
                           on_line=lines.append)
    # Assert
    assert Path(started["cwd"]) == tmp_path / "run" and compare.REPO not in Path(started["cwd"]).parents
    assert Path(lines[0].strip()).resolve() == tmp_path.resolve()
    assert compare.PMA_APP.is_absolute()


def test_seen_processes_is_a_snapshot_that_later_additions_do_not_disturb():
    # Prepare: iterating the record while the sampler adds a process used to raise
    # "dictionary changed size during iteration"; here the addition happens mid-iteration.
    memory = compare.MemoryPeak()
    memory.processes()  # this process (and whatever children it has right now)
    before = list(memory.seen_processes())
    memory.add_root(os.getppid())
    # Execute
    seen = []
    for pid in memory.seen_processes():
        memory.processes()  # what the sampler thread does meanwhile (adds the parent's tree)
        seen.append(pid)
    # Assert
    assert seen == before and os.getpid() in seen and os.getppid() not in seen
    assert os.getppid() in memory.seen_processes()


class _FakeSuperLink:
    """Stands in for compare.LocalSuperLink: a silent ``sleep`` as the SuperLink process."""

    def __init__(self, workdir):
        self.port, self.home, self.env = 0, workdir, {**os.environ}
        self.proc = None

    def start(self):
        import subprocess

        self.proc = subprocess.Popen(["sleep", "300"])


def test_the_hfl_driver_kills_a_silent_run_with_its_children_and_records_every_process(
        tmp_path, monkeypatch, capsys):
    import json

    from experiments import hfl as hfl_app

    # Prepare: a "flwr" that prints one [hfl] round line, starts a child, then both hang silently
    fake = tmp_path / "flwr"
    child_pid = tmp_path / "child.pid"
    fake.write_text("#!/bin/sh\n"  # sh starts in milliseconds even on a loaded machine
                    "echo '[hfl] round 1 (virtual clock): CV of rank compute time per silo {0: 0.100} "
                    "(mean 0.100)'\n"
                    f"sleep 300 &\necho $! > '{child_pid}'\nexec sleep 300\n")
    fake.chmod(0o755)
    monkeypatch.setattr(compare, "console_script", lambda name: str(fake))
    monkeypatch.setattr(compare, "LocalSuperLink", _FakeSuperLink)
    out = tmp_path / "out"
    outcome = []

    def execute():
        try:
            hfl_app.main(["--policies", "time", "--rounds", "2", "--run-timeout", "8", "--out", str(out)])
        except SystemExit as err:
            outcome.append(str(err))

    # Execute: in a thread, so that a missing watchdog fails the test instead of hanging it
    worker = threading.Thread(target=execute, daemon=True)
    worker.start()
    worker.join(120)
    # Assert: stopped with the timeout named, progress printed, every process recorded and gone
    recorded = [pid for pid, _ in json.loads((out / "processes.json").read_text())] \
        if (out / "processes.json").exists() else []
    try:
        assert not worker.is_alive(), "the HFL driver still waits for a silent command"
        assert len(outcome) == 1 and "ran past 8 s (wall clock) and was killed" in outcome[0]
        assert "[Time-only] round 1/2: mean CV of rank compute time inside the silos 0.100 (virtual clock)" \
            in capsys.readouterr().out
        assert int(child_pid.read_text()) in recorded and len(recorded) >= 3  # SuperLink, flwr, its child
        assert all(_gone(pid) for pid in recorded)
    finally:
        for pid in recorded + ([int(child_pid.read_text())] if child_pid.exists() else []):
            if not _gone(pid):
                psutil.Process(pid).kill()


# --------------------------------------------------------------------------- the table ./run.sh prints
def _history(out_dir, policy, makespan, energy, idle, cv):
    import pandas as pd

    pd.DataFrame({"round": range(1, len(makespan) + 1), "makespan_s": makespan, "energy_j": energy,
                  "idle_j": idle, "cv_busy": cv}).to_csv(out_dir / f"history-{policy}.csv", index=False)


def _summaries():
    """Equal first (the ratios' base), then Time-only (paper), whose last round has no metrics, then a
    run that recorded no rounds at all."""
    return {
        "equal": {"rounds": [{"round": 0, "loss": 2.3}, {"round": 2, "loss": 0.5, "accuracy": 0.8}], "wall_s": 30.0},
        "time-paper": {"rounds": [{"round": 0, "loss": 2.3}, {"round": 2}], "wall_s": 28.5},
        "min-energy": {"rounds": [], "wall_s": 1.0},
    }


def _histories(out_dir):
    _history(out_dir, "equal", [4.0, 6.0], [100.0, 140.0], [10.0, 30.0], [0.5, 0.3])
    _history(out_dir, "time-paper", [4.0, 3.0], [100.0, 110.0], [10.0, 5.0], [0.5, 0.1])
    _history(out_dir, "min-energy", [5.0], [60.0], [0.0], [0.2])


def test_comparison_table_sums_the_virtual_clock_and_divides_by_the_first_policy(tmp_path):
    import math

    # Prepare: two rounds of Equal and Time-only (paper), one of Min-energy, all hand-written
    _histories(tmp_path)
    # Execute
    table = compare.comparison_table(tmp_path, _summaries())
    # Assert: one row per policy in the order run, labelled; totals summed over the rounds, CV
    # averaged; the final round's holdout metrics (NaN where missing); ratios to the first row
    assert list(table.index) == ["Equal", "Time-only (paper)", "Min-energy"]
    equal, time_only, min_energy = (table.loc[p] for p in table.index)
    assert (equal["rounds"], time_only["rounds"], min_energy["rounds"]) == (2, 2, 1)
    assert (equal["makespan_s (virtual)"], time_only["makespan_s (virtual)"]) == (10.0, 7.0)
    assert (equal["energy_j (virtual)"], time_only["energy_j (virtual)"]) == (240.0, 210.0)
    assert (equal["idle_j (virtual)"], time_only["idle_j (virtual)"]) == (40.0, 15.0)
    assert (equal["mean CV busy"], time_only["mean CV busy"]) == pytest.approx((0.4, 0.3))
    assert (equal["final holdout loss"], equal["final holdout acc"]) == (0.5, 0.8)
    assert math.isnan(time_only["final holdout loss"]) and math.isnan(time_only["final holdout acc"])
    assert math.isnan(min_energy["final holdout loss"])
    assert (equal["run wall_s"], time_only["run wall_s"]) == (30.0, 28.5)
    assert (equal["makespan vs first"], equal["energy vs first"]) == (1.0, 1.0)
    assert time_only["makespan vs first"] == pytest.approx(0.7)
    assert time_only["energy vs first"] == pytest.approx(210 / 240)
    assert (min_energy["makespan vs first"], min_energy["energy vs first"]) == pytest.approx((0.5, 0.25))


def test_the_comparison_command_prints_and_saves_that_table(tmp_path, monkeypatch, capsys):
    import pandas as pd

    # Prepare: run_policies (the flwr runs) replaced by the hand-written files and summaries
    def fake_runs(policies, args, out_dir):
        _histories(out_dir)
        return {p: _summaries()[p] for p in policies}, compare.MemoryPeak(), 0

    monkeypatch.setattr(compare, "run_policies", fake_runs)
    # Execute
    code = compare.main(["--policies", "equal,time-paper", "--rounds", "2", "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    # Assert: the printed rows and the CSV are the table, with the clocks named
    assert code == 0
    saved = pd.read_csv(tmp_path / "out" / "comparison.csv").set_index("policy")
    assert list(saved.index) == ["Equal", "Time-only (paper)"]
    assert saved.loc["Time-only (paper)", "makespan vs first"] == pytest.approx(0.7)
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines() if line.startswith(("Equal", "Time-only"))}
    assert rows["Equal"][1:4] == ["2", "10.000", "240.000"]
    assert rows["Time-only (paper)"][2:5] == ["2", "7.000", "210.000"]
    assert rows["Time-only (paper)"][-2:] == ["0.700", "0.875"]
    assert "makespan and energy: VIRTUAL clock" in text and "run wall_s: WALL clock" in text
