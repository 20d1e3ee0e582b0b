"""experiments.split_quality --quick: the new policies reach the exact optima the MILP computes."""

from __future__ import annotations

from experiments import split_quality


def test_quick_benchmark_scores_the_policies_against_the_milp_optima(capsys):
    # Execute
    table = split_quality.main(["--quick"])
    # Assert: one table row per (row, policy) with the quick sets, printed
    cell = {(r.row, r.policy): r for r in table.itertuples()}
    assert "min-energy slack=inf" in capsys.readouterr().out
    assert {r.sets for r in table.itertuples()} == {3}
    # unconstrained min-energy is exact on noise-free per-sample devices (the MILP's minimum)
    assert cell["energy / min energy", "min-energy slack=inf"].worst < 1 + 1e-6
    assert cell["energy / min energy within slack 0.1", "min-energy slack=0.1"].worst < 1 + 1e-6
    assert cell["makespan / min makespan", "min-energy slack=0.1"].worst <= 1.1 + 1e-9
    # every paper policy spends more energy than the minimum (this is what the new policy buys)
    for paper in ("time (paper)", "low-energy (paper)", "energy (paper)"):
        assert cell["energy / min energy", paper].median > 1.01
    # fitted fixed costs and drift detection beat the paper's estimation where it is known to lag
    new, paper = "time affine+drift+gain", "time (paper)"
    for row in ("affine 40%: worst makespan rounds 6+", "drift: worst makespan rounds 6+"):
        assert cell[row, new].worst < cell[row, paper].worst
    assert cell["drift: worst makespan rounds 6+", new].worst <= 1.05
    assert cell["jitter 5%: re-splits from round 7", new].median <= cell["jitter 5%: re-splits from round 7", paper].median
