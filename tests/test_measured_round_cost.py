"""experiments.measured_round_cost: the per-row figures from hand-made runs, and its quick form."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments import measured_round_cost as mrc


def _rounds(makespans, accuracies):
    rows = [{"round": 0, "makespan_s": math.nan, "accuracy": 0.1, "virtual_time_s": 0.0}]
    t = 0.0
    for r, (m, a) in enumerate(zip(makespans, accuracies), start=1):
        t += m
        rows.append({"round": r, "makespan_s": m, "accuracy": a, "virtual_time_s": t})
    return pd.DataFrame(rows)


def _clients(per_round):
    """``per_round``: ``[(partition, samples, time_s, cpu_time_s), ...]`` repeated in rounds 1 and 2."""
    return pd.DataFrame([{"round": r, "partition_id": p, "samples": n, "time_s": t, "cpu_time_s": c}
                         for r in (1, 2) for p, n, t, c in per_round])


def test_summarise_reads_the_slow_nodes_cpu_per_sample_and_the_time_to_equals_accuracy():
    # Prepare: Equal (rounds of 1 s, final accuracy 0.9: target 0.89) and a row of 0.5 s rounds reaching 0.89 in
    # round 2; node 1 is the slow one (time 4× its CPU time), node 0 not (1×)
    equal = (_rounds([1.0, 1.0, 1.0], [0.5, 0.8, 0.9]),
             _clients([(0, 100, 0.02, 0.02), (1, 100, 0.08, 0.02)]))
    fast = (_rounds([0.5, 0.5, 0.5], [0.6, 0.89, 0.9]),
            _clients([(0, 150, 0.03, 0.03), (1, 50, 0.06, 0.015)]))

    # Execute
    lines = mrc.summarise({("equal-fedavg", 0): equal, ("time-samples", 0): fast}, slowest=1, from_round=1)

    # Assert: rounds 0.5 × Equal's; the slow node's CPU per sample 0.015 / 50 = 0.3 ms (Equal's 0.2 ms), all nodes
    # 0.045 / 200 = 0.225 ms; the target 0.9 − 0.01 first met in round 2 at 1.0 s against Equal's round 3 at 3.0 s
    row = lines.set_index("row").loc["time-samples"]
    assert row["round × Equal"] == pytest.approx(0.5)
    assert row["CPU ms / sample, 1 slowest"] == pytest.approx(0.3)
    assert row["samples / call, 1 slowest"] == pytest.approx(50.0)
    assert lines.set_index("row").loc["equal-fedavg", "CPU ms / sample, 1 slowest"] == pytest.approx(0.2)
    assert row["CPU ms / sample, all"] == pytest.approx(0.225)
    assert (row["round at target"], row["time to target × Equal"]) == (2.0, pytest.approx(1.0 / 3.0))


def test_summarise_marks_a_row_that_never_reaches_the_target():
    equal = (_rounds([1.0, 1.0], [0.5, 0.9]), _clients([(0, 100, 0.02, 0.02)]))
    slow = (_rounds([0.5, 0.5], [0.5, 0.6]), _clients([(0, 100, 0.02, 0.02)]))
    row = mrc.summarise({("equal-fedavg", 0): equal, ("time-norm-cap8-shrink", 0): slow}, slowest=1,
                        from_round=1).set_index("row").loc["time-norm-cap8-shrink"]
    assert math.isnan(row["round at target"]) and math.isnan(row["time to target × Equal"])


def test_quick_form_runs_the_three_rows_on_the_measured_clock(capsys):
    assert mrc.main(["--quick"]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] and line.split()[0]
             in mrc.ROWS}
    assert set(table) == set(mrc.ROWS) and "MEASURED clock" in out
    assert float(table["equal-fedavg"][0]) == 1.0
    # a measured-clock ratio, not asserted (0.62 here unloaded, 0.97 once under CI's load: 0.3-s rounds on a
    # shared machine); the rows' figures are there and positive
    assert all(0 < float(table[row][0]) < math.inf for row in ("time-samples", "time-norm-cap8-shrink"))


def test_bad_arguments_are_refused_with_the_bounds(capsys):
    with pytest.raises(SystemExit):
        mrc.main(["--rounds", "3"])
    with pytest.raises(SystemExit):
        mrc.main(["--rows", "time-samples,no-such-row"])
    assert "unknown rows ['no-such-row']" in capsys.readouterr().err
