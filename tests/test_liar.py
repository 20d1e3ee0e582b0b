"""The liar benchmark's quick form: one client reporting 1e-9 s per sample cannot take the federation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def test_liar_quick_bounds_the_liars_share_and_the_true_makespan(capsys):
    from experiments import liar

    # Execute
    rows = liar.main(["--quick"])
    # Assert: without cost trust the liar takes most of the budget and the makespan (the attack is
    # real); with it, from round 3 on, its share stays near its fair 1/11 and the true makespan
    # within 1.5x of the same federation with the liar honest, for every strategy
    late = [r for r in rows if r["round"] >= 3]
    adaptive = [r for r in late if r["strategy"] == "adaptive"]
    assert min(r["liar_share_no_trust"] for r in adaptive) > 0.5
    assert min(r["ratio_no_trust"] for r in adaptive) > 3.0
    assert max(r["ratio"] for r in late) <= 1.5
    assert max(r["liar_share"] for r in late if r["strategy"] != "oort") <= 2 / 11
    assert "worst ratio from round 3 on" in capsys.readouterr().out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]) | st.floats(1e-6, 1e6), min_size=2, max_size=40))
def test_median_of_others_is_the_median_without_each_entry(values):
    from flwr_adaptive.strategies.trust import _median_of_others

    # Prepare
    values = np.array(values)
    # Execute
    got = _median_of_others(values)
    # Assert: against the definition, ties included
    expected = [np.median(np.delete(values, i)) for i in range(len(values))]
    assert got.tolist() == expected


def test_plausibility_takes_no_median_per_report(monkeypatch):
    # Prepare: 60 reports, one liar; count the medians the rule takes (one per report made it
    # quadratic: 11 s per round at 5,000 reports)
    from flwr_adaptive.strategies.reports import ClientReport
    from flwr_adaptive.strategies.trust import CostTrust

    reports = [ClientReport(i, i, 100, 100, 100 * (0.001 if i == 0 else 1.0 + i / 100), 0.0, 0.0, None, 1000,
                            False, 1.0, True) for i in range(60)]
    calls = []
    median = np.median
    monkeypatch.setattr(np, "median", lambda *a, **k: calls.append(1) or median(*a, **k))
    # Execute
    believed = CostTrust().believe(1, reports)
    # Assert: the liar is taken at the others' median, with a constant number of medians
    assert believed[0].time_s == pytest.approx(100 * float(median([1.0 + i / 100 for i in range(1, 60)])))
    assert len(calls) <= 2
