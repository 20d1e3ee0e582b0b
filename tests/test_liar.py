"""The liar benchmark's quick form: one client reporting 1e-9 s per sample cannot take the federation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def test_liar_quick_bounds_the_liars_share_and_the_true_makespan(capsys):
    from experiments import liar

    # Execute
    rows = liar.main(["--quick", "--scenarios", ""])
    # Assert: without cost trust the liar takes most of the budget and the makespan (the attack is
    # real); with it, from round 3 on, its share stays at or below its fair 1/11 and the true
    # makespan near the same federation's with the liar honest, for every strategy
    late = [r for r in rows if "round" in r and r["round"] >= 3]  # the per-round rows (scenarios follow)
    adaptive = [r for r in late if r["strategy"] == "adaptive"]
    assert min(r["liar_share_no_trust"] for r in adaptive) > 0.5
    assert min(r["ratio_no_trust"] for r in adaptive) > 3.0
    # docs/security.md: adaptive ratio 1.01, liar share 0.076 (1e-9 s/sample is held at the others'
    # median). Measured by this quick form, 3 runs: adaptive 1.003 / 0.076, FedAsync 1.000 / 0.091,
    # Oort 1.000 / 0.143 (selected every round: 1 of the 60 % selected), every time (virtual clock,
    # seeded: exact). Margins: a few % (a liar taking one more fair share would be 0.18 / 0.29).
    worst = {k: (max(r["ratio"] for r in late if r["strategy"] == k),
                 max(r["liar_share"] for r in late if r["strategy"] == k)) for k in ("adaptive", "fedasync", "oort")}
    assert worst["adaptive"][0] <= 1.03 and worst["adaptive"][1] <= 0.085, worst
    assert worst["fedasync"][0] <= 1.03 and worst["fedasync"][1] <= 1 / 11 + 0.005, worst
    assert worst["oort"][0] <= 1.03 and worst["oort"][1] <= 0.16, worst
    assert "worst ratio from round 3 on" in capsys.readouterr().out


def _colluders_bound(fed, claim_factor):
    """The inside bound for ``k`` colluders believed at ``1/R`` of their true time: ``R (k + S) / (k R + S)``
    for the makespan and ``k R / (k R + S)`` for their share (S: a liar's per-sample time over each
    honest node's, summed). The rules only ever raise a claim, so ``R`` is at most the claimed factor."""
    k = len(fed.liars)
    s = sum(fed.median / fed.true[n] for n in fed.nodes if n not in fed.liars)
    return claim_factor * (k + s) / (k * claim_factor + s), k * claim_factor / (k * claim_factor + s)


def test_liar_quick_scenarios_colluders_and_an_intermittent_liar_are_bounded(capsys):
    from experiments import liar

    # Execute
    rows = liar.main(["--quick", "--scenarios", "sybil,sybil-absurd,intermittent"])
    # Assert: without trust the colluders take twice their fair share and the rounds 2x longer (the
    # attack is real); with it, from round 3 on, each strategy keeps absurd colluders (median / 20,
    # beyond the 16x absurd range) and the intermittent liar within 1.5x their fair share and the
    # makespan within 1.5x; an honest federation pays nothing for the rules
    scenarios = {(r["scenario"], r["strategy"]): r for r in rows if "scenario" in r}
    every = ("adaptive", "oort", "fedasync", "hfl")
    assert set(scenarios) == {(s, k) for s in ("sybil", "sybil-absurd") for k in every} | {
        ("intermittent", k) for k in ("adaptive", "oort", "hfl")}
    for kind in ("adaptive", "fedasync"):
        for name in ("sybil", "sybil-absurd"):
            sybil = scenarios[name, kind]
            assert sybil["share_no_trust"] > 1.7 * sybil["fair_share"] and sybil["ratio_no_trust"] > 2.0
    for (name, kind), row in scenarios.items():
        assert row["defence_cost"] <= 1.05
        if name != "sybil":
            assert row["share"] <= 1.5 * row["fair_share"] and row["ratio"] <= 1.5, (name, kind, row)
    # Colluders at the median / 4.2 (beyond the 4x range, inside the 16x absurd one) are taken at the
    # edge of the range, as a coalition claiming just inside it would be: they are held to the inside
    # bound for 3 colluders, not to their fair share (before the edge tier they were taken at the median
    # and these rows were held to 1.5x fair and 1.5x, like the absurd ones above). Measured by this
    # quick form (seeded: exact): adaptive share 0.565, ratio 2.22; FedAsync 0.470, 2.04 (bound 2.35,
    # share 0.577); Oort 0.428, 0.96; HFL 0.176, 1.57 (trust off 0.187, 1.71).
    ratio_bound, share_bound = _colluders_bound(liar.Federation(None, **liar.SCENARIOS["sybil"][1]), 4.2)
    for kind in ("adaptive", "fedasync"):
        row = scenarios["sybil", kind]
        assert row["ratio"] <= ratio_bound and row["share"] <= share_bound, (kind, row, ratio_bound, share_bound)
    # Oort splits equally among the nodes it selects (a lie moves the selection only); HFL's lying ranks
    # take only their silos' samples (test below): neither does worse with the rules than without
    assert scenarios["sybil", "oort"]["share"] <= scenarios["sybil", "oort"]["share_no_trust"]
    assert scenarios["sybil", "oort"]["ratio"] <= 1.5
    hfl = scenarios["sybil", "hfl"]
    assert hfl["share"] <= hfl["share_no_trust"] and hfl["ratio"] <= hfl["ratio_no_trust"]
    assert "fair share" in capsys.readouterr().out


def test_liar_quick_hfl_a_lying_rank_takes_only_its_own_silos_samples():
    from experiments import liar

    # Execute: a lying rank in 3 silos of 11 (sybil: median / 4.2; sybil-absurd: / 20), one in 1 silo
    # lying 2 rounds in 3 (intermittent)
    names = ("sybil", "sybil-absurd", "intermittent")
    rows = [r for r in liar.main(["--quick", "--scenarios", ",".join(names)]) if r.get("strategy") == "hfl"]
    # Assert: without the rules, the design's bound. A silo's budget is split among its own ranks only,
    # so a lying rank holds at most its silo's budget less the other ranks' smallest quota (one sample
    # per step); its silo's round then lasts at most that many samples at the liar's true time, against
    # the honest federation's round (its slowest silo, which every round waits for). With them (each
    # rank judged against its silo's other ranks), the flat strategies' targets for absurd and
    # intermittent liars. Measured by this quick form (seeded: exact): trust off, sybil share 0.187
    # (fair 0.095), ratio 1.71; sybil-absurd 0.242, 2.13; intermittent 0.051 (0.041), 1.65; trust on,
    # 0.176, 1.57; 0.085, 1.21; 0.047, 1.43.
    fed = liar.SiloFederation(None)
    silo_budget = liar.BUDGET // len(fed.nodes)
    most = silo_budget - (liar.RANKS - 1) * liar.HFL_STEPS
    honest_round = max(silo_budget / sum(1 / c for c in costs) for costs in fed.ranks.values())
    for name, row, liars in zip(names, rows, (3, 3, 1)):
        assert row["fair_share"] < row["share_no_trust"] <= liars * most / liar.BUDGET
        assert 1.5 < row["ratio_no_trust"] <= most * fed.median / honest_round * 1.2  # +-5 % jitter on both sides
        if name == "sybil":
            # median / 4.2: inside the 16x absurd range, a lying rank is taken at the edge of the range
            # against its silo-mates (or believed, where its silo-mates' median is within 4.2x): the rules
            # only raise its claim, so it does no worse than with every claim believed (before the edge
            # tier: held to 1.5x its fair share and 1.5x, 0.105 and 1.43 here)
            assert row["share"] <= row["share_no_trust"] and row["ratio"] <= row["ratio_no_trust"]
        else:
            assert row["share"] <= 1.5 * row["fair_share"] and row["ratio"] <= 1.5


def test_liar_quick_inside_the_range_fedasync_is_no_worse_than_adaptive():
    from experiments import liar

    # Execute: one liar at the honest median / 3.9, just inside the 4x plausible range
    rows = {r["strategy"]: r for r in liar.main(["--quick", "--scenarios", "inside"]) if "scenario" in r}
    # Assert: unseen by the rules, so both strategies pay for it, below the design's bound
    # R (1 + S) / (R + S) (S: the liar's per-sample time over each honest node's, summed); FedAsync no
    # worse than adaptive. Measured by this quick form (seeded: exact): adaptive 2.93, FedAsync 2.46.
    # Before the edge tier (2.29, 1.15) a round whose jitter put the fixed claim beyond the range took
    # it at the median; now such a round takes it at the edge of the range, no lower than its claim, so
    # FedAsync's figure is no longer held to 1.5 (its ratio was asserted <= 1.5 then), only to the bound.
    fed = liar.Federation(None)
    s = sum(fed.median / fed.true[n] for n in fed.nodes if n not in fed.liars)
    bound = 3.9 * (1 + s) / (3.9 + s)
    for kind in ("adaptive", "fedasync"):
        assert rows[kind]["ratio_no_trust"] > 2.5  # the lie is worth something
        assert rows[kind]["ratio"] <= bound
    assert rows["fedasync"]["ratio"] <= rows["adaptive"]["ratio"], rows
    assert rows["fedasync"]["share"] <= rows["adaptive"]["share"], rows


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


def test_every_strategy_takes_trust_as_an_argument():
    # Prepare
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import CostTrust, build_strategy

    tuned = CostTrust(plausible_range=8.0)
    # Execute / Assert: True = the default rules, a CostTrust as given, False = believe every claim
    for policy in ("time", "static", "oort", "fedasync"):
        assert isinstance(build_strategy(policy, budget=100, strategy=FedAvg()).trust, CostTrust)
        assert build_strategy(policy, budget=100, strategy=FedAvg(), trust=tuned).trust is tuned
        assert build_strategy(policy, budget=100, strategy=FedAvg(), trust=False).trust is None
    with pytest.raises(ValueError, match=r"trust must be True .*False .*CostTrust\(\.\.\.\).*got 'yes'"):
        build_strategy("time", budget=100, trust="yes")


def test_trust_false_believes_a_liar_that_the_default_rules_hold_back():
    # Prepare: node 0 claims 1/1000 of the others' per-sample time
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.reports import ClientReport

    reports = [ClientReport(i, i, 100, 100, 100 * (0.001 if i == 0 else 1.0), 0.0, 0.0, None, 1000, False, 1.0, True)
               for i in range(6)]
    # Execute
    as_claimed = AdaptiveStrategy(budget=600, trust=False).believed_reports(1, reports)
    held = AdaptiveStrategy(budget=600).believed_reports(1, reports)
    # Assert
    assert as_claimed[0].time_s == pytest.approx(0.1)
    assert held[0].time_s == pytest.approx(100.0)  # the others' median, not the claim


def test_oort_selection_is_the_same_in_every_run_under_one_seed(flower_identity):
    import random

    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from experiments import liar
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    # Prepare: the liar federation (nobody lies); Flower's inner FedAvg shuffles the sampled nodes with
    # Python's global random, seeded differently in each run
    def selections(global_seed):
        random.seed(global_seed)
        fed = liar.Federation(None)
        grid = liar.Grid(fed)
        strategy = OortStrategy(FedAvg(fraction_evaluate=0.0, min_train_nodes=11, min_available_nodes=11),
                                budget=liar.BUDGET, seed=0)
        out = []
        for rnd in range(1, 7):
            msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
            out.append(sorted(m.metadata.dst_node_id for m in msgs))
            strategy.aggregate_train(rnd, grid.send_and_receive(msgs))
        return out

    # Execute
    runs = [selections(s) for s in (1, 2, 3)]
    # Assert: one choice per round whatever order the inner strategy handed the candidates over in
    assert runs[0] == runs[1] == runs[2]
    assert len({tuple(r) for r in runs[0]}) > 1  # and the selection does move between rounds
