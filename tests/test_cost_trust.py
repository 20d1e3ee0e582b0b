"""Cost trust on a hostile claim: server evidence, plausibility and the growth cap.

A node's claimed cost is timed by what the server observed once it was suspect two rounds (an
honest node late by polling is not suspected), a claim below 1/4 of the others' median is taken
at the range's edge (1/4 of it) and one below 1/16 at that median, a drop is capped, a fast group
is held only up to ``max_group`` of the nodes; ``trust=`` takes a bool or a ``CostTrust`` only,
and the Message strategy reads the arrival time the SuperLink stamps. Hand-made claims
(``_claim``) or replies (``hostile_support``). The coalition and strike rules are in
``test_trust_rules.py``.
"""

from __future__ import annotations

import math

import pytest

from flwr_adaptive import keys

from hostile_support import BUDGET, PARTS, configure, fedavg, reply, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def _claim(node, time_s, samples=100, virtual=False):
    from flwr_adaptive.strategies.reports import ClientReport

    return ClientReport(node_id=node, partition_id=node, quota=samples, samples=samples, time_s=time_s,
                        cpu_time_s=time_s, wall_time_s=time_s, energy_j=None, data_size=None, capped=False,
                        idle_w=None, virtual_clock=virtual)


def test_server_evidence_times_a_node_by_what_the_server_observed_after_two_rounds(caplog):
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: 5 s of transport/start-up for everyone; node 4 claims 0.2 s but really takes 9 s
    trust = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    claims = [_claim(1, 8.0), _claim(2, 9.0), _claim(3, 8.5), _claim(4, 0.2)]
    observed = {1: 13.0, 2: 14.0, 3: 13.5, 4: 14.0}
    # Execute
    first = trust.believe(1, claims, observed)
    second = trust.believe(2, claims, observed)
    virtual = trust.believe(3, [_claim(n, c.time_s, virtual=True) for n, c in zip(range(1, 5), claims)], observed)
    # Assert: one suspect round is not enough; the second times node 4 by the observation minus the
    # common overhead (median of observed - claimed = 5 s); honest nodes are untouched; no server
    # clock applies to virtual-clock telemetry
    assert first[4].time_s == 0.2
    assert second[4].time_s == pytest.approx(9.0) and [second[n].time_s for n in (1, 2, 3)] == [8.0, 9.0, 8.5]
    assert virtual[4].time_s == 0.2
    assert sum("server observed" in r.getMessage() for r in caplog.records) == 1


def test_server_evidence_does_not_suspect_an_honest_node_that_polling_made_late():
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: four honest nodes compute 1.3 s; the server pulls replies every 3 s, so three are seen
    # at 3 s; node 3 picked its instruction up one SuperNode poll late and missed the pull that followed
    # (8.9 s): 7.2 s beyond the common overhead of 1.7 s, 5.9 s beyond its claim, every round.
    claims = [_claim(n, 1.3) for n in (1, 2, 3, 4)]
    observed = {1: 3.0, 2: 3.0, 3: 8.9, 4: 3.0}
    # Execute
    trust = CostTrust()
    believed = [trust.believe(r, claims, observed) for r in (1, 2, 3)]
    tight = CostTrust(evidence_min_s=1.0)
    too_tight = [tight.believe(r, claims, observed) for r in (1, 2)]
    # Assert: the default (two 3-s polls) believes it; a 1-s margin would time it by the polls
    assert all(b[3].time_s == 1.3 for b in believed)
    assert too_tight[1][3].time_s == pytest.approx(8.9 - 1.7)


def test_plausibility_and_growth_cap_bound_a_liars_claim():
    from flwr_adaptive.strategies.trust import CostTrust

    trust = CostTrust()
    claims = [_claim(1, 0.2), _claim(2, 0.3), _claim(3, 0.25), _claim(4, 1e-9)]
    believed = trust.believe(1, claims, estimate_of=lambda n: {4: 0.0025}.get(n))
    # Assert: 1e-9 s is far below 1/4 of the others' median (0.25 s): taken at that median; a node
    # claiming 0.06 s (just inside 1/4) with an estimate of 0.0025 s/sample may halve at most
    assert believed[4].time_s == pytest.approx(0.25)
    inside = trust.believe(2, claims[:3] + [_claim(4, 0.07)], estimate_of=lambda n: {4: 0.0025}.get(n))
    assert inside[4].time_s == pytest.approx(0.125)
    assert [believed[n].time_s for n in (1, 2, 3)] == [0.2, 0.3, 0.25]
    with pytest.raises(ValueError, match="plausible_range must be a number >= 1"):
        CostTrust(plausible_range=0.5)


def test_server_evidence_needs_the_claim_exceeded_by_evidence_min_s_and_a_group(caplog):
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare (scripts/mutation.sh survivors: the seconds margin computed as a ratio, and a group of
    # min_group + 1 = 3 timed nodes relaxed to 2). Node 4 claims 0.5 s; the server's evidence
    # implies 5 s: 10x its claim but only 4.5 s above it, inside the 7-s margin of two polls.
    trust = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    claims = [_claim(1, 8.0), _claim(2, 9.0), _claim(3, 8.5), _claim(4, 0.5)]
    observed = {1: 13.0, 2: 14.0, 3: 13.5, 4: 10.0}  # common overhead 5 s: node 4 implies 5 s
    # Execute
    inside = [trust.believe(r, claims, observed)[4].time_s for r in (1, 2, 3)]
    pair = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    two = [pair.believe(r, [_claim(1, 8.0), _claim(4, 0.2)], {1: 13.0, 4: 30.0})[4].time_s for r in (1, 2, 3)]
    # Assert: both believed as claimed (two timed nodes: no group to take the overhead from)
    assert inside == [0.5, 0.5, 0.5]
    assert two == [0.2, 0.2, 0.2]
    assert not any("server observed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("trust", [0, 1, None, "yes"])
def test_trust_that_is_not_a_bool_or_a_cost_trust_is_refused(trust):
    from flwr_adaptive.strategies.trust import resolve_trust

    # 0 and 1 are not False and True (scripts/mutation.sh: `trust is False` -> `== False` survived)
    with pytest.raises(ValueError, match="trust must be True"):
        resolve_trust(trust)


@pytest.mark.parametrize("what", ["time", "energy"])
def test_plausible_range_boundary_is_one_quarter_of_the_others_median(what, caplog):
    from dataclasses import replace

    from flwr_adaptive.strategies import AdaptiveStrategy

    # Prepare: docs/security.md: a per-sample cost below the other nodes' median divided by
    # plausible_range (4) is not believed; it is taken at the edge of the range (median / 4) down to
    # median / absurd_range (16), and at the median below that. The others claim 0.2, 0.3, 0.25 s per
    # 100 samples (median 0.25): the edge for node 4 is 0.0625 s, the absurd bound 0.015625 s.
    def claims(fourth):
        out = [_claim(1, 0.2), _claim(2, 0.3), _claim(3, 0.25), _claim(4, fourth)]
        if what == "energy":  # the same rule on joules; times all equal so only energy can be held
            out = [replace(c, time_s=0.25, energy_j=c.time_s) for c in out]
        return out

    def believed(fourth):
        caplog.clear()
        trust = AdaptiveStrategy(budget=10).trust  # the strategy's default rules
        got = trust.believe(1, claims(fourth))[4]
        return got.time_s if what == "time" else got.energy_j

    def said():
        return [r.getMessage() for r in caplog.records if "not believed" in r.getMessage()]

    # Execute / Assert: just inside (0.063 s, 1/3.97 of the median) and at the bound: believed as
    # claimed, nothing said (a rule made inclusive would say the claim at the bound is not believed)
    assert believed(0.063) == 0.063 and not said()
    assert believed(0.0625) == 0.0625 and not said()
    # just outside (0.062 s, 1/4.03), and exactly at the absurd bound (1/16): taken at the edge, 0.0625
    assert believed(0.062) == pytest.approx(0.0625)
    assert len(said()) == 1 and "taken at the range's edge" in said()[0]
    assert believed(0.015625) == pytest.approx(0.0625)
    # just below the absurd bound (0.0156 s, 1/16.03): absurd, taken at the others' median
    assert believed(0.0156) == pytest.approx(0.25)
    assert len(said()) == 1 and "absurd (beyond 16×) and taken at that median" in said()[0]


def test_a_claim_beyond_the_range_is_logged_with_its_tier_and_the_fix(caplog):
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: the others' median is 1 s per 100 samples; node 4 claims 1/8 of it (inside 16x),
    # node 5 1/1000 (absurd); with only 4 others each is judged against the median of the other four
    claims = [_claim(1, 1.0), _claim(2, 1.0), _claim(3, 1.0), _claim(4, 0.125)]
    trust = CostTrust()
    # Execute
    edge = trust.believe(1, claims)[4].time_s
    again = trust.believe(2, claims)[4].time_s
    absurd = trust.believe(3, claims[:3] + [_claim(4, 0.001)])[4].time_s
    lines = [r.getMessage() for r in caplog.records]
    # Assert: 1/8 is taken at the edge (0.25 s), 1/1000 at the median (1 s); one line per node and
    # tier, each naming the factor and the range to raise it above
    assert edge == pytest.approx(0.25) and again == pytest.approx(0.25) and absurd == pytest.approx(1.0)
    assert len(lines) == 2, lines
    assert "claims 0.00125 s per sample, 8× below the other nodes' median 0.01" in lines[0]
    assert "taken at the range's edge 0.0025 (1/4 of that median)" in lines[0]
    assert "raise CostTrust(plausible_range=...) above 8" in lines[0]
    assert "1e+03× below" in lines[1] and "absurd (beyond 16×)" in lines[1]
    assert "raise CostTrust(plausible_range=..., absurd_range=...) above 1e+03" in lines[1]


def test_absurd_range_is_validated_against_plausible_range():
    from flwr_adaptive.strategies.trust import CostTrust

    # Execute / Assert: at least plausible_range (equal: today's single tier; inf: one tier, the edge)
    assert CostTrust(absurd_range=4.0).absurd_range == 4.0 and CostTrust(absurd_range=math.inf)
    for bad in (3.9, 0.5, True, "16", None):
        with pytest.raises(ValueError, match=r"absurd_range must be a number >= plausible_range \(4.0;"):
            CostTrust(absurd_range=bad)
    # a plausible_range raised past the default 16 says to raise absurd_range with it
    with pytest.raises(ValueError, match=r"\(20.0;.*got 16.0: a plausible_range above .* needs absurd_range"):
        CostTrust(plausible_range=20.0)
    assert CostTrust(plausible_range=20.0, absurd_range=400.0).absurd_range == 400.0
    assert CostTrust(plausible_range=math.inf, absurd_range=16.0)  # rule 2 off: absurd_range unused


def test_the_message_strategy_reads_the_arrival_time_the_superlink_stamps():
    from datetime import datetime, timezone

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET)
    msgs, q = configure(strategy, 1)
    replies = [reply(m, {**telemetry(q[n], 0.5, PARTS[n]), keys.VIRTUAL_CLOCK: 0})
               for m in msgs for n in [m.metadata.dst_node_id]]
    for i, r in enumerate(replies):
        r.metadata.delivered_at = datetime.fromtimestamp(strategy._sent_at + 6.0 + i, tz=timezone.utc).isoformat()
    strategy.aggregate_train(1, replies)
    observed = strategy.observed_seconds([sup_report for sup_report in strategy._believed.values()])
    assert sorted(round(v, 3) for v in observed.values()) == [6.0, 7.0, 8.0, 9.0]


def test_a_fast_majority_is_held_only_up_to_max_group_of_the_nodes(caplog):
    from dataclasses import replace

    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: 9 nodes, 6 claiming ~1/60 of the 3 others' cost. docs/security.md: groups of up to
    # max_group (1/3) of the nodes are judged against the rest; a larger coalition moves the median
    # and is not defended. So the 3 lowest claims are held (at the median of the other 6, 0.51 s)
    # and the other 3 are believed (scripts/mutation.sh: groups of up to max_group + n survived)
    claims = [_claim(i, 1.0 if i <= 3 else 0.01 + 0.001 * i) for i in range(1, 10)]
    # Execute
    believed = CostTrust().believe(1, claims)
    time_lines = [r.getMessage() for r in caplog.records]
    caplog.clear()
    energy = CostTrust().believe(1, [replace(c, time_s=1.0, energy_j=c.time_s) for c in claims])
    energy_lines = [r.getMessage() for r in caplog.records]
    # Assert: the same rule on joules; each log line names its unit
    assert [round(believed[n].time_s, 4) for n in range(1, 10)] == [1.0] * 3 + [0.5095] * 3 + [0.017, 0.018, 0.019]
    assert [round(energy[n].energy_j, 4) for n in range(1, 10)] == [1.0] * 3 + [0.5095] * 3 + [0.017, 0.018, 0.019]
    assert any("claims 0.00014 s per sample" in t for t in time_lines), time_lines
    assert any("claims 0.00014 J per sample" in t for t in energy_lines), energy_lines


def test_a_trust_copied_by_replace_keeps_no_strikes_or_warnings_of_the_one_it_was_copied_from(caplog):
    import dataclasses
    import logging

    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: a tuned trust that has judged a liar (one warning said, one strike held), then copied with one
    # setting changed for a second strategy
    claims = [_claim(1, 8.0), _claim(2, 9.0), _claim(3, 8.5), _claim(4, 0.2)]
    observed = {1: 13.0, 2: 14.0, 3: 13.5, 4: 14.0}
    first = CostTrust(max_drop=math.inf)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        first.believe(1, claims, observed)
        second = dataclasses.replace(first, absurd_range=32.0)
        caplog.clear()
        # Execute: the copy judges the same round
        second.believe(1, claims, observed)
    # Assert: its own state (the copy warns about the node too; one strike each, not two on a shared ledger)
    assert any("node 4 claims" in r.getMessage() for r in caplog.records)
    assert first._strikes[4] == 1.0 and second._strikes[4] == 1.0 and second._strikes is not first._strikes


def test_a_round_of_two_sampled_nodes_is_judged_against_the_known_nodes_it_did_not_sample():
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: Flower sampled 2 of 10 nodes; eight others are known at 1 ms per sample; node 9 claims 1e-9 s
    claims = [_claim(1, 0.1), _claim(9, 1e-7)]
    population = [(0.001 * (0.9 + 0.025 * i), None) for i in range(8)]
    # Execute
    alone = CostTrust().believe(1, claims)
    judged = CostTrust().believe(1, claims, population=population)
    # Assert: alone, two claims hold no median (believed as claimed); beside the population the absurd claim is
    # taken at the median of the others (node 1 and the eight), the honest one as it came
    assert alone[9].time_s == 1e-7
    assert judged[9].time_s == pytest.approx(100 * 0.001 * (0.9 + 0.025 * 4), rel=1e-9)
    assert judged[1] is claims[0]


def test_a_coalition_that_is_most_of_its_sampled_round_is_judged_against_the_population():
    from flwr_adaptive.strategies.trust import CostTrust

    # Prepare: 3 colluders of 10 nodes (under a third), sampled together with 2 honest ones, claim 1/20 of the
    # honest 1 ms per sample: the majority of the round, so the round's own medians are theirs
    claims = [_claim(n, 0.1) for n in (1, 2)] + [_claim(n, 0.005) for n in (7, 8, 9)]
    population = [(0.001, None)] * 5
    # Execute
    round_only = CostTrust().believe(1, claims)
    judged = CostTrust().believe(1, claims, population=population)
    # Assert: without the population each is judged against a median the colluders moved (taken at the edge of
    # (0.005 + 0.1)/2 / 4: 2.6× its real time under-counted); with it each is absurd (20× > 16×), at the median
    assert [round_only[n].time_s for n in (7, 8, 9)] == [pytest.approx((0.005 + 0.1) / 2 / 4)] * 3
    assert [judged[n].time_s for n in (7, 8, 9)] == [pytest.approx(0.1)] * 3


def test_the_message_strategy_judges_a_sampled_round_beside_the_nodes_it_did_not_sample():
    from hostile_support import liar_share_in_sampled_rounds

    # 10 nodes, Flower samples 2 per round; one claims 1e-9 s per sample from the start
    lying, honest = liar_share_in_sampled_rounds(claim=1e-9), liar_share_in_sampled_rounds(claim=None)
    # its share of the rounds it is in stays near what it earns honestly (it took 199 of 200 before)
    assert max(lying) <= max(honest) + 0.1


def test_a_sampled_node_that_sent_no_reply_does_not_move_the_median_a_liar_is_judged_by(caplog):
    import numpy as np
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    from adaptive_support import FakeGrid

    # Prepare: 5 nodes, all honest in round 1 (partition p is node 501 + p, at 3, 2, 3, 4 and 1 ms per
    # sample); round 2 samples the liar (501, really 3 ms) with 502 and the fast 505, which sends nothing.
    # The population is the known nodes the round did *not* sample (docs/security.md): 505 was sampled, so
    # its 1 ms stays out. Counted in, a node that merely missed the round moves the reference the liar is
    # judged by (median of 2, 3, 4 ms = 3 ms -> of 1, 2, 3, 4 ms = 2.5 ms) and the lie earns a lower cost.
    nodes = [501, 502, 503, 504, 505]
    cost = {501: 0.003, 502: 0.002, 503: 0.003, 504: 0.004, 505: 0.001}
    schedule = {1: nodes, 2: [501, 502, 505]}

    class Sampled(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            return super().configure_train(server_round, arrays, config, FakeGrid(schedule[server_round]))

    strategy = AdaptiveStrategy(Sampled(fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=1),
                                budget=500)
    with caplog.at_level("WARNING", logger="flwr"):
        for rnd in (1, 2):
            # Execute: round 2's liar claims 1e-9 s per sample; 505 does not reply
            msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(nodes)))
            q = {m.metadata.dst_node_id: m.content["config"][keys.QUOTA] for m in msgs}
            replies = [reply(m, telemetry(q[n], q[n] * (1e-9 if (rnd, n) == (2, 501) else cost[n]), nodes.index(n)))
                       for m in msgs for n in [m.metadata.dst_node_id] if (rnd, n) != (2, 505)]
            strategy.aggregate_train(rnd, replies)
    # Assert: the absurd claim is taken at the median of 502's claim and the unsampled 503 and 504 (3 ms):
    # its own cost, so its estimate stays at 3 ms (the lie earns nothing)
    believed = strategy._believed[501]
    assert believed.time_s / believed.samples == pytest.approx(0.003)
    assert strategy.controller.estimates()[0][0] == pytest.approx(0.003)
    lines = [r.getMessage() for r in caplog.records if "partition 0 (node 501) claims 1e-09" in r.getMessage()]
    assert len(lines) == 1 and "the other nodes' median 0.003 " in lines[0]


if __name__ == "__main__":
    # `cd tests && python test_cost_trust.py`: the sampled-federation liar's figures (docs/security.md)
    import logging

    from flwr.supercore.task_identity import TaskIdentity

    from hostile_support import liar_share_in_sampled_rounds

    for attr, value in (("_run_id", 1), ("_task_id", 1), ("_node_id", 0)):
        setattr(TaskIdentity, attr, value)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    print("10 nodes, 2 sampled a round: the liar's share of each round it is in, after its first")
    for label, claim in (("claims 1e-9 s per sample", 1e-9), ("honest", None)):
        shares = liar_share_in_sampled_rounds(claim=claim)
        print(f"{label:>25}: {min(shares):.3f}-{max(shares):.3f} ({len(shares)} rounds)")


def test_cold_starts_beside_warm_replies_are_not_the_median_a_warm_node_is_judged_by(caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy

    # Round 1 of a restarted federation (flwr run, helper-52): 3 of 6 nodes start cold (1.5 s of start-up in
    # their time), the fast warm node 0 honestly at 1 ms per sample. Against the cold ones (~8 ms a sample)
    # it was "not believed" and its energy "absurd"; cold replies are held, not observed, and now also stay
    # out of the medians while warm replies are there.
    nodes = [701, 702, 703, 704, 705, 706]
    cost = [0.001, 0.002, 0.002, 0.002, 0.002, 0.002]
    cold = {704, 705, 706}
    strategy = AdaptiveStrategy(fedavg(6), budget=1500, policy="time")
    msgs, q = configure(strategy, 1, nodes)
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        i = nodes.index(n)
        t = q[n] * cost[i] + (1.5 if n in cold else 0.0)
        metrics = {**telemetry(q[n], t, i, energy=q[n] * cost[i] * 10), keys.COLD_START: int(n in cold)}
        replies.append(reply(m, metrics))
    with caplog.at_level("WARNING", logger="flwr"):
        strategy.aggregate_train(1, replies)
    assert not [line for line in caplog.messages if "not believed" in line or "absurd" in line]
    assert strategy.controller.estimates()[0][0] == pytest.approx(0.001)
