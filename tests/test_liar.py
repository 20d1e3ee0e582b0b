"""The liar benchmark's quick form: one client reporting 1e-9 s per sample cannot take the federation."""

from __future__ import annotations


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
