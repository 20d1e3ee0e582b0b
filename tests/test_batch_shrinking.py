"""Slow nodes' batches shrunk (``scale_batch_size="shrink"``): per-node references, batch sizes, the wire, plausibility."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from adaptive_support import FakeGrid
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from flwr_adaptive.clients.batch_scaling import scaled_batch_size
from flwr_adaptive.normalized_averaging import plausible_steps
from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.registry import build_strategy
from flwr_adaptive.strategies.round_quotas import node_references, reference_quota

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

X = [np.array([1.0, -2.0])]


def steps(samples: int, batch: int) -> int:
    """Optimizer steps of one pass over ``samples`` in batches of ``batch`` (the last one partial)."""
    return math.ceil(samples / batch)


# ----------------------------------------------------------------------------- references and batch sizes
def test_per_node_references_and_batch_sizes_by_hand():
    # Prepare: 1100 samples over 4 nodes, split 700 / 300 / 75 / 25: the equal share 1100 // 4 = 275
    quotas = {"a": 700, "b": 300, "c": 75, "d": 25}
    # Execute
    r, shrink = node_references("shrink", 1100, quotas)
    no_step_reference, equal = node_references(True, 1100, quotas)
    # Assert: shrink sends max(275, q), equal steps sends 275 to all, False sends nothing
    assert r == 275 and shrink == {"a": 700, "b": 300, "c": 275, "d": 275}
    assert equal == {n: 275 for n in quotas} and node_references(False, 1100, quotas) == (None, {})
    assert no_step_reference is None  # equal steps: the plausibility rule judges them by its own interval
    # at B = 32 the reference takes ceil(275/32) = 9 steps. Fast nodes keep 32: 22 and 10 steps (the default's)
    batches = {n: scaled_batch_size(32, q, shrink[n]) for n, q in quotas.items()}
    assert batches == {"a": 32, "b": 32, "c": 9, "d": 3}  # c: ceil(32·75/275) = ceil(8.7); d: ceil(2.9)
    assert {n: steps(q, batches[n]) for n, q in quotas.items()} == {"a": 22, "b": 10, "c": 9, "d": 9}
    # with equal steps (True) the fast nodes' batches grow instead: 700 in batches of 82, 9 steps
    assert scaled_batch_size(32, 700, equal["a"]) == 82 and steps(700, 82) == 9


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 128), st.lists(st.integers(1, 3000), min_size=1, max_size=12), st.integers(0, 2000))
def test_property_fast_nodes_keep_the_default_steps_and_slow_ones_take_the_references(batch, qs, slack):
    # Prepare: a round's quotas and a budget at or above their sum (the split sums to it; above: all local data)
    quotas = dict(enumerate(qs))
    budget = sum(qs) + slack
    r, sent = node_references("shrink", budget, quotas)
    ref_steps = steps(r, batch)
    for n, q in quotas.items():
        # Execute: the batch a client computes from its quota and the reference it was sent
        b = scaled_batch_size(batch, q, sent[n])
        got = steps(q, b)
        # Assert: never more steps than the default (the user's batch size) or the reference's, whichever is more,
        # and never fewer than the default (a batch only shrinks) ...
        assert steps(q, batch) <= got <= max(steps(q, batch), ref_steps)
        if q >= r:  # ... a fast node keeps the user's batch size and the default's steps
            assert b == batch and got == steps(q, batch)
        elif b == 1:  # ... a slow node takes the reference's steps, up to one-sample batches (then all q it has)
            assert got == q <= ref_steps
        else:  # batch ceil(B·q/r) < 2·B·q/r: within a factor 2 of the reference's steps, never above
            assert r / (2 * batch) <= got <= ref_steps


# ----------------------------------------------------------------------------- the option and the wire
@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, **kw),
    lambda **kw: build_strategy("time", budget=10, **kw),
], ids=["message", "legacy", "build-time"])
def test_shrink_reaches_the_strategies_and_bad_values_name_the_accepted_ones(make):
    assert make(scale_batch_size="shrink").scale_batch_size == "shrink"
    for bad in ("no", "Shrink", 1):
        with pytest.raises(ValueError, match="scale_batch_size must be True, False or 'shrink'"):
            make(scale_batch_size=bad)


@pytest.mark.parametrize("make", [AdaptiveStrategy, LegacyAdaptiveStrategy,
                                  lambda policy="time", **kw: build_strategy(policy, **kw)],
                         ids=["message", "legacy", "build-time"])
def test_the_default_shrinks_with_the_normalised_rule_only(make):
    assert make(budget=10).scale_batch_size == "shrink"  # private data: weighting "normalized"
    assert make(budget=10, weighting="normalized", allow_cycling=True).scale_batch_size == "shrink"
    for off in (dict(allow_cycling=True), dict(weighting="samples"), dict(weighting="data-size")):
        assert make(budget=10, **off).scale_batch_size is False  # no rule corrects a fast node's extra steps
    # a step floor learns each node's batch size from its replies: shrunk batches would lower it, so no default shrink
    assert make(budget=10, min_local_steps=2).scale_batch_size is False
    assert make(budget=10, policy="min-energy").scale_batch_size == "shrink"  # no floor by default, min-energy too
    assert make(budget=10, policy="min-energy", min_local_steps=1).scale_batch_size is False
    # asked for, the combination is refused with the fix: scaled batches would lower the floor round by round
    for scale in ("shrink", True):
        with pytest.raises(ValueError, match="does not combine with min_local_steps=2.*Pass min_local_steps=0"):
            make(budget=10, min_local_steps=2, scale_batch_size=scale)
        with pytest.raises(ValueError, match="does not combine with min_local_steps=1"):
            make(budget=10, policy="min-energy", min_local_steps=1, scale_batch_size=scale)


def test_a_step_floor_learnt_from_shrunk_batches_decays():
    # Why the combination is refused: a node held at its one-batch floor (B = 32, reference 100) reads it in
    # shrunk batches, so each reply bounds its batch size lower and the next floor follows
    from flwr_adaptive.strategies.step_floor import StepFloor

    seen = {}
    for scale in (False, True):
        floor, q, rounds = StepFloor(1), 100, []
        for _ in range(6):
            b = scaled_batch_size(32, q, max(100, q)) if scale else 32
            floor.note("n", q, steps(q, b))
            rounds.append(q)
            q = floor.quota("n", 100, None) or q
        seen[scale] = rounds
    assert seen == {False: [100, 33, 32, 32, 32, 32], True: [100, 33, 16, 7, 3, 1]}


def test_baselines_and_silos_keep_the_users_batch_size_by_default():
    from flwr_adaptive.strategies import HierarchicalAdaptiveStrategy

    for policy in ("static", "oort"):
        assert build_strategy(policy, budget=10).scale_batch_size is False
    assert HierarchicalAdaptiveStrategy(budget=10, steps=2).scale_batch_size is False


@pytest.mark.parametrize("policy", ["static", "oort", "fedasync"])
def test_baselines_refuse_shrink_rather_than_ignoring_it(policy):
    with pytest.raises(ValueError, match=f"scale_batch_size does not apply to policy '{policy}'"):
        build_strategy(policy, budget=10, scale_batch_size="shrink")


def _fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def _legacy(budget=300, **kw):
    from flwr.server.strategy import FedAvg

    return LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=budget, **kw)


def _wire(api, strategy, split):
    """``{quota: reference sent}`` of round 1 with the split forced to ``split`` (by node position)."""
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.common import ndarrays_to_parameters
    from test_strategy_core import _Manager

    nodes = [100, 101, 102] if api == "message" else ["11", "12", "13"]
    strategy.quotas_for = lambda rnd, chosen: dict(zip(chosen, split))  # an uneven split in round 1
    if api == "message":
        msgs = strategy.configure_train(1, ArrayRecord(X), ConfigRecord(), FakeGrid(nodes))
        configs = [dict(m.content["config"]) for m in msgs]
    else:
        pairs = strategy.configure_fit(1, ndarrays_to_parameters(X), _Manager(nodes))
        configs = [dict(ins.config) for _, ins in pairs]
    return {c[keys.QUOTA]: c.get(keys.REFERENCE_QUOTA) for c in configs}


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_each_node_is_sent_the_larger_of_the_reference_and_its_quota(api):
    make = (lambda **kw: AdaptiveStrategy(_fedavg(3), budget=300, **kw)) if api == "message" else _legacy
    split = (200, 70, 30)  # the equal share 300 // 3 = 100
    # Execute
    shrink = _wire(api, make(scale_batch_size="shrink"), split)
    equal = _wire(api, make(scale_batch_size=True), split)
    plain = _wire(api, make(scale_batch_size=False), split)
    default = _wire(api, make(), split)
    # Assert
    assert shrink == {200: 200, 70: 100, 30: 100}
    assert equal == {200: 100, 70: 100, 30: 100}
    assert plain == {200: None, 70: None, 30: None}
    assert default == shrink  # the default with private data (the normalised weighting)


def test_the_uneven_split_of_a_second_round_is_sent_per_node():
    from flwr.app import ArrayRecord, ConfigRecord
    from test_strategy_core import COSTS, NODES, PARTS, play_round

    # Prepare: node 9001 is 4x faster than 9003/9004 (Time-only): round 2's quotas are uneven
    strategy = AdaptiveStrategy(_fedavg(4), budget=1000, scale_batch_size="shrink")
    grid = FakeGrid(NODES)
    play_round(strategy, grid, 1, COSTS, PARTS)
    # Execute
    msgs = list(strategy.configure_train(2, ArrayRecord(X), ConfigRecord(), grid))
    # Assert: the reference is the equal share 250, raised to the quota of each node above it
    sent = sorted((m.content["config"][keys.QUOTA], m.content["config"][keys.REFERENCE_QUOTA]) for m in msgs)
    assert reference_quota(1000, dict(enumerate(q for q, _ in sent))) == 250
    assert sent == [(125, 250), (125, 250), (250, 250), (500, 500)]


# ----------------------------------------------------------------------------- plausible steps of both kinds
def test_honest_steps_of_fast_and_slow_nodes_are_plausible_with_the_reference_only():
    # Prepare: reference 275 at B = 32 (9 steps); quotas 700, 300 (fast, 22 and 10 steps at 32), 75 and 25
    # shrunk to 9 steps each, 5 and 2 in one-sample batches (5 and 2 steps). e = max(samples, 275)
    claimed, samples = [22, 10, 9, 9, 5, 2], [700, 300, 75, 25, 5, 2]
    # Execute
    by_samples, clipped_samples = plausible_steps(claimed, samples)
    shrink, clipped = plausible_steps(claimed, samples, reference=275)
    # Assert: by samples alone (m = median(steps/samples) = (9/75 + 9/25)/2 = 0.24) the fast nodes look like too
    # few steps (700·0.24/2 = 84 > 22, 300·0.24/2 = 36 > 10: their updates would be scaled down)
    assert clipped_samples.tolist() == [True, True, False, False, False, False]
    assert by_samples[:2].tolist() == pytest.approx([84.0, 36.0])
    # with the reference all are honest: m = 9/275, and the 2-sample node's lower bound 275·m/2 = 4.5 is held
    # at its 2 samples (one-sample batches: it cannot take more steps than it has samples)
    assert shrink.tolist() == claimed and not clipped.any()


def test_with_the_reference_a_liar_is_still_bounded():
    # m = median(steps / e) = 9/275; 1000 steps for 25 samples: at most max(275·m·2, median steps 9) = 18;
    # 1 step for 700 samples: at least 700·m/2 = 11.45
    out, clipped = plausible_steps([1, 10, 9, 1000, 5], [700, 300, 75, 25, 5], reference=275)
    assert out[0] == pytest.approx(700 * 9 / 275 / 2) and out[3] == pytest.approx(18.0)
    assert clipped.tolist() == [True, False, False, True, False]


def test_a_loop_that_ignores_the_reference_is_not_clipped():
    # Prepare: quotas 40, 40, 40, 80, 800 at budget 1000 (reference 200); the client's loop reads its quota
    # in batches of the user's 32 whatever it is sent (DataLoader(quota_data(dataset), batch_size=32)):
    # 2, 2, 2, 3 and 25 steps. By e = max(samples, 200) alone m = 2/200 and the fast node's bound is
    # max(800·m·2, median 2) = 16: its honest 25 would be cut and its update scaled up 25/16 times
    quotas = [40, 40, 40, 80, 800]
    r = reference_quota(1000, dict(enumerate(quotas)))
    claimed = [steps(q, 32) for q in quotas]
    # Execute
    out, clipped = plausible_steps(claimed, quotas, reference=r)
    # Assert: the steps it would take without a reference are admitted, as without one
    assert r == 200 and claimed == [2, 2, 2, 3, 25]
    assert out.tolist() == claimed and not clipped.any()


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 128), st.lists(st.integers(1, 3000), min_size=3, max_size=12), st.integers(0, 2000),
       st.integers(0, 200))
def test_property_the_round_reads_its_claims_the_way_that_clips_fewer(batch, qs, slack, lie):
    # Prepare: a round's quotas, references, and two fleets: one scales its batches (quota_data on a
    # DataLoader), the other reads its quotas in batches of the user's size; node 0 claims `lie` steps (0: honest)
    quotas = dict(enumerate(qs))
    r, sent = node_references("shrink", sum(qs) + slack, quotas)
    fleets = ([steps(q, scaled_batch_size(batch, q, sent[n])) for n, q in quotas.items()], [steps(q, batch) for q in qs])
    for fleet in fleets:
        claimed = [lie or fleet[0], *fleet[1:]]
        # Execute
        _, clipped = plausible_steps(claimed, qs, reference=r)
        _, by_samples = plausible_steps(claimed, qs)
        e = [max(q, r) for q in qs]
        _, by_e = plausible_steps(claimed, e)
        # Assert: never more claims clipped than by the better of the two readings (the by-e reading's bound
        # is also held at samples_i, so it clips at most what plausible_steps(claimed, e) does)
        assert clipped.sum() <= min(by_samples.sum(), by_e.sum())


def test_a_bad_reference_is_refused():
    with pytest.raises(ValueError, match="reference quota must be >= 1"):
        plausible_steps([1, 2, 3], [1, 2, 3], reference=0)


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_an_honest_shrunk_round_is_aggregated_without_a_step_warning(api, caplog):
    from test_batch_scaling import _legacy_round
    from test_normalized_strategy import message_round

    # Prepare: round 1 (equal quotas of 100 at budget 301, the reference 100 = 4 steps of 32); node 0 honest at
    # 4 steps of its 100, node 1 read 25 in batches of 8 (4 steps), node 2 read 3 in one-sample batches (3 steps)
    x = [np.array([0.0])]
    # (each holds what it read: a quota of 100 above a node's data selects all of it)
    per_node = [({"samples": s, "steps": k, "data_size": s}, [np.array([float(d)])])
                for s, k, d in ((100, 4, 1), (25, 4, 2), (3, 3, 3))]
    make = ((lambda **kw: AdaptiveStrategy(_fedavg(3), budget=301, trust=False, **kw)) if api == "message"
            else (lambda **kw: _legacy(budget=301, trust=False, **kw)))
    shrunk, plain = make(), make(scale_batch_size=False)  # the default with private data: "shrink"
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        message_round(shrunk, x, per_node) if api == "message" else _legacy_round(shrunk, x, per_node)
    said = [r.getMessage() for r in caplog.records if "steps per sample" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flwr"):
        message_round(plain, x, per_node) if api == "message" else _legacy_round(plain, x, per_node)
    # Assert: nothing said with the reference; without it the 100-sample node's 4 steps look too few
    assert said == []
    assert any("steps per sample" in r.getMessage() for r in caplog.records)
    # the factors are FedNova's on the honest steps: τ_eff = Σ p_i τ_i over τ_i (p by data size: 100, 25, 3, the
    # 100 capped at 2 × the median 25)
    tau, p = np.array([4.0, 4.0, 3.0]), np.array([50.0, 25.0, 3.0])
    assert sorted(shrunk.last_scales.values()) == pytest.approx(sorted((p @ tau / p.sum()) / tau))


# ----------------------------------------------------------------------------- the attribute set after construction
@pytest.mark.parametrize("api", ["message", "legacy"])
def test_scale_batch_size_set_after_construction_is_checked_and_keeps_the_rule_in_step(api, caplog):
    from test_batch_scaling import _legacy_round
    from test_normalized_strategy import message_round

    # Prepare: constructed with the default ("shrink"), then switched to equal steps; a round of equal steps (4) on
    # 100, 25 and 10 samples (scaled batches), as in test_batch_scaling's round built with scale_batch_size=True
    x = [np.array([0.0])]
    per_node = [({"samples": s, "steps": 4}, [np.array([float(d)])]) for s, d in ((100, 1), (25, 2), (10, 3))]
    strategy = (AdaptiveStrategy(_fedavg(3), budget=301, trust=False) if api == "message"
                else _legacy(budget=301, trust=False))
    assert strategy.scale_batch_size == "shrink"
    strategy.scale_batch_size = True
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        message_round(strategy, x, per_node) if api == "message" else _legacy_round(strategy, x, per_node)
    # Assert: the equal steps are plausible (every factor 1, nothing said), as when passed to the constructor
    assert not [r for r in caplog.records if "steps per sample" in r.getMessage()]
    assert set(strategy.last_scales.values()) == {1.0}
    # a bad value is refused as at construction; None resolves by the weighting now
    with pytest.raises(ValueError, match="scale_batch_size must be True, False or .shrink."):
        strategy.scale_batch_size = "no"
    strategy.scale_batch_size = False
    assert strategy.aggregation.equal_steps is False
    strategy.weighting = "samples"
    strategy.scale_batch_size = None
    assert strategy.scale_batch_size is False


@pytest.mark.parametrize("policy", ["static", "oort"])
def test_a_baseline_refuses_scale_batch_size_set_after_construction(policy):
    strategy = build_strategy(policy, budget=10)
    for value in ("shrink", True):
        with pytest.raises(ValueError, match="trains at the user's batch size .a baseline.: scale_batch_size must be"):
            strategy.scale_batch_size = value
    strategy.scale_batch_size = None  # a baseline's default is False
    assert strategy.scale_batch_size is False


@pytest.mark.parametrize("scale", [False, "shrink"])
def test_claiming_fewer_samples_does_not_lower_the_bound_on_steps(scale):
    from test_normalized_strategy import message_round

    # Prepare: 5 nodes at quotas of 100 (budget 500), each holding 1000 samples: honest replies 100 samples in
    # 10 steps; node 4 took its 10 steps too but claims 1 sample and 1 step (samples are bounded above only),
    # which by its claimed samples is plausible (plausible_steps([10, 10, 10, 10, 1], [100] * 4 + [1]) keeps it)
    x = [np.array([0.0])]
    per_node = [({"samples": 100, "steps": 10}, [np.array([1.0])]) for _ in range(4)]
    per_node.append(({"samples": 1, "steps": 1}, [np.array([1.0])]))
    strategy = AdaptiveStrategy(_fedavg(5), budget=500, trust=False, scale_batch_size=scale)
    # Execute
    message_round(strategy, x, per_node)
    # Assert: it is judged by the min(quota, data size) = 100 samples it said it holds and was sent, so its 1
    # step is raised to 100 · 0.1 / 2 = 5 and its factor is τ_eff / 5 = (4·10 + 5) / 5 / 5 = 1.8 (was
    # max_rescale, 8, with the honest nodes at 0.82)
    factors = sorted(strategy.last_scales.values())
    assert factors == pytest.approx([0.9] * 4 + [1.8])


def test_silos_refuse_scale_batch_size_set_after_construction():
    from flwr_adaptive.strategies import HierarchicalAdaptiveStrategy

    strategy = HierarchicalAdaptiveStrategy(budget=10, steps=2)
    for value in ("shrink", True):
        with pytest.raises(ValueError, match="its silos run the steps sent.: scale_batch_size must be False"):
            strategy.scale_batch_size = value
    assert strategy.scale_batch_size is False


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_step_floor_under_shrink_is_refused_when_set_and_one_set_on_the_component_stops_the_next_round(api):
    # The constructor refuses the pair; so does the attribute set later (the default, None, follows the floor
    # instead: test_scale_follows_settings), and a floor set past it must not decay silently either.
    make = (lambda: AdaptiveStrategy(_fedavg(3), budget=300, scale_batch_size="shrink")) if api == "message" else (
        lambda: _legacy(scale_batch_size="shrink"))
    strategy = make()
    with pytest.raises(ValueError, match="scale_batch_size='shrink' does not combine with min_local_steps=1.*Pass"):
        strategy.min_local_steps = 1
    strategy.step_floor.steps = 1  # past the attribute: the round itself refuses
    with pytest.raises(ValueError, match="scale_batch_size='shrink' does not combine with min_local_steps=1.*Pass"):
        _wire(api, strategy, [30, 70, 200])
    strategy.step_floor.steps = 0
    assert sorted(_wire(api, strategy, [30, 70, 200]).items()) == [(30, 100), (70, 100), (200, 200)]
