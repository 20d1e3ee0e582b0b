"""The comparison plot reads the histories experiments.compare writes."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.plots import load_histories, plot_comparison


def write_history(folder, policy, makespans):
    rounds = pd.DataFrame({"round": range(1, len(makespans) + 1), "makespan_s": makespans,
                           "energy_j": [10.0] * len(makespans), "cv_busy": [0.1] * len(makespans),
                           "clock": ["virtual"] * len(makespans)})
    rounds.to_csv(folder / f"history-{policy}.csv", index=False)
    clients = pd.DataFrame({"round": [len(makespans)] * 2, "partition_id": [0, 1], "quota": [70, 30]})
    clients.to_csv(folder / f"history-{policy}-clients.csv", index=False)


def test_plot_has_every_policy_and_is_a_png(tmp_path):
    write_history(tmp_path, "equal", [2.0, 2.0, 2.0])
    write_history(tmp_path, "time", [2.0, 1.0, 1.0])

    out = plot_comparison(tmp_path)

    assert set(load_histories(tmp_path)) == {"equal", "time"}
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_histories_say_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `python -m experiments.compare` first"):
        plot_comparison(tmp_path)
