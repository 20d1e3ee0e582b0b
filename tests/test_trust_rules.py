"""Cost trust against coalitions and intermittent liars: the group rule and slowly forgiven strikes.

The benchmark with strategies around these rules is ``python -m experiments.liar`` (its quick
form runs in tests/test_liar.py); here each rule is checked on hand-made claims.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from flwr_adaptive.devices import TESTBED
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.trust import CostTrust, _references


def _claim(node, time_s, samples=100, virtual=True):
    return ClientReport(node_id=node, partition_id=node, quota=samples, samples=samples, time_s=time_s,
                        cpu_time_s=time_s, wall_time_s=time_s, energy_j=None, data_size=None, capped=False,
                        idle_w=None, virtual_clock=virtual)


HONEST = sorted(d.slowdown for d in TESTBED[:8])  # seconds per 100 samples, say
MEDIAN = float(np.median(HONEST))


def test_three_colluders_of_eleven_cannot_lower_the_median_they_are_judged_by(caplog):
    # Prepare: 8 honest testbed devices and 3 colluders claiming the honest median / 4.2. Judged one
    # by one against "the others' median" (which holds the two other colluders) each one passes:
    # that median is the 3rd/4th fastest honest device's, and median/4.2 is above its quarter.
    claims = [_claim(i, t) for i, t in enumerate(HONEST)] + [_claim(100 + j, MEDIAN / 4.2) for j in range(3)]
    values = np.array([c.time_s for c in claims])
    others = np.median(np.delete(values, len(values) - 1))
    assert MEDIAN / 4.2 > others / 4  # the one-by-one rule alone believes them
    # Execute
    believed = CostTrust(max_drop=math.inf).believe(1, claims)
    # Assert: the three are judged as a group against the 8 others and taken at the honest median;
    # every honest claim is believed as made; one line per colluder
    assert [believed[100 + j].time_s for j in range(3)] == pytest.approx([MEDIAN] * 3)
    assert [believed[i].time_s for i in range(8)] == HONEST
    assert sum("not believed" in r.getMessage() for r in caplog.records) == 3


def test_a_coalition_larger_than_max_group_is_the_median_and_is_believed():
    # Prepare: 4 colluders of 11 with max_group = 1/4 (at most 2 judged as a group)
    claims = [_claim(i, t) for i, t in enumerate(HONEST[:7])] + [_claim(100 + j, MEDIAN / 4.2) for j in range(4)]
    # Execute
    believed = CostTrust(max_drop=math.inf, max_group=0.25).believe(1, claims)
    # Assert: what the design does not defend, stated in docs/security.md
    assert all(believed[100 + j].time_s == MEDIAN / 4.2 for j in range(4))


def test_the_honest_testbed_with_its_jitter_is_believed_as_claimed():
    # Prepare: every honest device of the testbed (a 4.3x spread), ±5 % jitter, 20 draws
    rng = np.random.default_rng(0)
    trust = CostTrust(max_drop=math.inf)
    for draw in range(20):
        costs = [d.slowdown * float(np.exp(0.05 * rng.standard_normal())) for d in TESTBED]
        # Execute
        believed = trust.believe(draw, [_claim(i, c) for i, c in enumerate(costs)])
        # Assert
        assert [believed[i].time_s for i in range(len(costs))] == costs


@settings(max_examples=200, deadline=None)
@given(
    honest=st.lists(st.floats(1.0, 3.9), min_size=3, max_size=30),
    share=st.floats(0.0, 1 / 3),
    lie=st.floats(4.01, 1e6),
)
def test_a_coalition_up_to_max_group_below_the_range_is_taken_at_the_honest_median(honest, share, lie):
    # Prepare: honest claims within a 3.9x spread (no honest claim is implausible), and a coalition
    # of up to a third of all nodes claiming the honest median / lie (lie > 4)
    k = int(share * (len(honest) / (1 - share)))  # coalition size: at most a third of the total
    values = np.array(honest + [float(np.median(honest)) / lie] * k)
    max_group = max(int(len(values) / 3), 1)
    # Execute
    refs = _references(values, 4.0, max_group)
    # Assert: honest claims untouched; every colluder taken at exactly the honest median
    assert np.isnan(refs[: len(honest)]).all()
    assert refs[len(honest):] == pytest.approx([float(np.median(honest))] * k)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 1e6), min_size=3, max_size=40), st.integers(1, 20))
def test_claims_within_the_range_of_each_other_are_never_implausible(values, max_group):
    # Prepare: a federation whose claims span less than plausible_range
    values = np.array(values)
    spread = values.max() / values.min()
    # Execute
    refs = _references(values, spread * 1.0001, max_group)
    # Assert: nobody is below any median / range, so nobody is touched
    assert np.isnan(refs).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 1e6), min_size=3, max_size=40), st.integers(1, 20))
def test_an_implausible_claim_is_only_ever_raised_and_never_above_the_highest_claim(values, max_group):
    values = np.array(values)
    refs = _references(values, 4.0, max_group)
    flagged = ~np.isnan(refs)
    assert (refs[flagged] > values[flagged]).all() and (refs[flagged] <= values.max()).all()


# --------------------------------------------------------------------------- intermittent liars
def _deployment_round(liar_lies: bool):
    """Four honest nodes computing 20 s, one liar computing 20 s that claims 5 s when it lies; 8 s
    of transport and start-up for everyone."""
    claims = [_claim(n, 20.0, virtual=False) for n in (1, 2, 3, 4)] + [_claim(5, 5.0 if liar_lies else 20.0,
                                                                              virtual=False)]
    observed = {n: 28.0 for n in (1, 2, 3, 4, 5)}
    return claims, observed


def test_a_liar_lying_two_rounds_in_three_is_priced_by_the_server_from_its_second_lie_on():
    # Prepare: lies in rounds 1, 2, 4, 5, 7, 8 (honest in 3, 6, 9): a reset after every honest round
    # would let it through in rounds 4 and 7
    trust = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    believed = {}
    # Execute
    for rnd in range(1, 10):
        claims, observed = _deployment_round(rnd % 3 != 0)
        believed[rnd] = trust.believe(rnd, claims, observed)[5].time_s
    # Assert: its first lie is believed (one suspect round is not evidence), every later one is timed by
    # the server (28 s observed - 8 s of common overhead), its honest rounds are believed as made
    assert believed[1] == 5.0
    assert [believed[r] for r in (2, 4, 5, 7, 8)] == pytest.approx([20.0] * 5)
    assert [believed[r] for r in (3, 6, 9)] == [20.0] * 3


def test_one_suspect_round_now_and_then_is_forgiven():
    # Prepare: a node suspect once every five rounds (e.g. an honest node the polls once made look late
    # by more than the margin): one strike, forgiven at 0.25 per clean round, never reaches two
    trust = CostTrust(plausible_range=math.inf, max_drop=math.inf)
    # Execute
    times = []
    for rnd in range(1, 21):
        claims, observed = _deployment_round(rnd % 5 == 0)
        times.append(trust.believe(rnd, claims, observed)[5].time_s)
    # Assert: always believed as claimed
    assert times == [5.0 if rnd % 5 == 0 else 20.0 for rnd in range(1, 21)]


def test_forgive_and_max_group_are_validated():
    with pytest.raises(ValueError, match=r"forgive must be a number in \[0, inf\]"):
        CostTrust(forgive=-1)
    with pytest.raises(ValueError, match=r"max_group must be a number in \[0, 0.5\]"):
        CostTrust(max_group=0.9)


def test_warnings_name_the_partition_the_strategy_knows_and_hfl_names_the_rank(caplog):
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy
    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy

    # Prepare: a strategy whose node 7001 reported partition 3; one implausible claim among 4
    strategy = AdaptiveStrategy(FedAvg(), budget=400)
    strategy.note_partition(7001, {keys.PARTITION_ID: 3})
    claims = [_claim(n, 1.0) for n in (7002, 7003, 7004)] + [_claim(7001, 0.01)]
    # Execute
    strategy.trust.believe(1, claims)
    # Assert: the line names the partition the operator configured, then the node id
    lines = [r.getMessage() for r in caplog.records if "not believed" in r.getMessage()]
    assert len(lines) == 1 and "partition 3 (node 7001) claims" in lines[0], lines
    # HFL's rank ids ("<silo>/<rank>") read as partition and rank; a silo without a partition yet by its node
    hfl = HierarchicalAdaptiveStrategy(budget=400, steps=5)
    assert hfl.trust.who("3/1") == "partition 3, rank 1"
    assert hfl.trust.who("node-7001/0") == "node 7001, rank 0"
    assert CostTrust().who(7001) == "node 7001"  # without a strategy: the node id
