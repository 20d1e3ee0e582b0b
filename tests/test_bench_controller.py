"""The controller benchmark's quick form: every policy next to the paper's controller, in one run."""

from __future__ import annotations

from experiments.bench_controller import PAPER, main
from flwr_adaptive.controller import POLICIES


def test_bench_controller_quick_prints_every_policy_beside_the_paper_controller(capsys):
    # Execute
    table, churn = main(["--quick"])
    out = capsys.readouterr().out
    # Assert: one row per named policy plus the paper's controller, a column per size and its
    # ratio to the paper's controller (which is 1 for the paper's own row)
    assert list(table.index) == [PAPER, "time", "low-energy", "min-energy"] + [
        p for p in POLICIES if p not in ("time", "low-energy", "min-energy")
    ]
    assert {"100 (ms)", "1,000 (ms)", "100 / paper", "1,000 / paper", "1,000 cpu (ms)", "meets targets"} <= set(table.columns)
    assert (table["1,000 cpu (ms)"] > 0).all()
    assert (table["1,000 (ms)"] > 0).all()
    assert table.loc[PAPER, "1,000 / paper"] == 1.0
    assert table["meets targets"].isin(["yes", "NO"]).all()
    assert "wall clock" in out and PAPER in out
    assert len(churn) == 2 and (churn["total (ms)"] > 0).all()
