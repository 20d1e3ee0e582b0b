"""min_local_steps: a floor in local optimizer steps on each node's quota (both APIs, HFL, registry)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from adaptive_support import FakeGrid
from hypothesis import given, settings
from hypothesis import strategies as st
from test_normalized_strategy import reply, telemetry

from flwr_adaptive.strategies import AdaptiveStrategy, HierarchicalAdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.registry import build_strategy
from flwr_adaptive.strategies.step_floor import StepFloor, default_min_local_steps

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

BATCH = 32
SLOW = 8.0  # node 0's cost per sample relative to the others (below the first-reply outlier rule's 10x)
X = [np.array([1.0, -2.0])]


# ----------------------------------------------------------------------------- the batch interval
def test_the_batch_interval_narrows_by_hand():
    floor = StepFloor(4)
    floor.note("a", 100, 4)  # ceil(100/B) = 4: 25 <= B <= 33
    assert floor.batch_range("a") == (25, 33)
    floor.note("a", 40, 2)  # 20 <= B <= 39: no narrower
    assert floor.batch_range("a") == (25, 33)
    floor.note("a", 60, 2)  # 30 <= B <= 59
    assert floor.batch_range("a") == (30, 33)
    # 4 steps of at most 33: 132 samples, bounded by the equal share, then by the cap
    assert floor.quota("a", 1000, None) == 132
    assert floor.quota("a", 100, None) == 100
    assert floor.quota("a", 100, 50) == 50


def test_no_floor_until_the_batch_size_has_an_upper_bound():
    floor = StepFloor(2)
    assert floor.quota("a", 100, None) is None  # no reply yet
    floor.note("a", 7, 1)  # one step of 7: B >= 7, no upper end
    assert floor.batch_range("a") == (7, math.inf)
    assert floor.quota("a", 100, None) is None
    for samples, steps in ((5, None), (5, 0), (3, 5)):  # no steps, none taken, less than a sample a step
        floor.note("b", samples, steps)
    assert floor.batch_range("b") is None
    assert StepFloor(0).quota("a", 100, None) is None  # 0: off


def test_a_reply_outside_the_interval_starts_it_again():
    floor = StepFloor(2)
    floor.note("a", 100, 4)
    floor.note("a", 10, 5)  # the node now runs batches of 2: inconsistent with [25, 33]
    assert floor.batch_range("a") == (2, 2)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 512), st.lists(st.integers(1, 5000), min_size=1, max_size=8), st.integers(1, 20))
def test_property_the_interval_holds_the_true_batch_and_the_floor_gives_its_steps(batch, quotas, k):
    # Prepare: one pass over each quota in batches of `batch` (the last partial), as a torch loader does
    floor = StepFloor(k)
    for q in quotas:
        floor.note("n", q, math.ceil(q / batch))
    lo, hi = floor.batch_range("n")
    # Assert: the true batch size is always inside; a floor, when known and not bounded, is >= k steps
    assert lo <= batch <= hi
    quota = floor.quota("n", 10**9, None)
    if quota is not None:
        assert math.ceil(quota / batch) >= k


# ----------------------------------------------------------------------------- the strategies
def _fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def _timed(samples, partition, slow):
    metrics = telemetry(samples, partition, steps=math.ceil(samples / BATCH))
    per = 0.001 * (SLOW if slow else 1.0)
    for key in ("time-s", "cpu-time-s", "wall-time-s"):
        metrics[key] = per * samples
    return metrics


def message_quotas(strategy, rounds=3):
    """Quotas of each round with node 0 SLOW× slower; every reply steps through batches of BATCH."""
    from flwr.app import ArrayRecord, ConfigRecord

    from flwr_adaptive import keys

    nodes = [100, 101, 102]
    out = []
    for rnd in range(1, rounds + 1):
        msgs = list(strategy.configure_train(rnd, ArrayRecord(X), ConfigRecord(), FakeGrid(nodes)))
        quota = {m.metadata.dst_node_id: int(m.content["config"][keys.QUOTA]) for m in msgs}
        out.append([quota[n] for n in nodes])
        replies = [reply(m, _timed(quota[m.metadata.dst_node_id], nodes.index(m.metadata.dst_node_id),
                                   m.metadata.dst_node_id == 100), X) for m in msgs]
        strategy.aggregate_train(rnd, replies)
    return out


def legacy_quotas(strategy, rounds=3):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from test_strategy_core import _Manager

    from flwr_adaptive import keys

    out = []
    for rnd in range(1, rounds + 1):
        pairs = strategy.configure_fit(rnd, ndarrays_to_parameters(X), _Manager(["11", "12", "13"]))
        quotas = [int(ins.config[keys.QUOTA]) for _, ins in pairs]
        out.append(quotas)
        ok = Status(Code.OK, "")
        results = [(proxy, FitRes(ok, ndarrays_to_parameters(X), 1, _timed(q, i, i == 0)))
                   for i, ((proxy, _), q) in enumerate(zip(pairs, quotas))]
        strategy.aggregate_fit(rnd, results, [])
    return out


def _legacy(**kw):
    from flwr.server.strategy import FedAvg

    inner = FedAvg(min_fit_clients=3, min_available_clients=3)
    return LegacyAdaptiveStrategy(inner, budget=300, deadband=0.0, trust=False, **kw)


@pytest.mark.parametrize("api", ["message", "legacy"])
@pytest.mark.parametrize("weighting", [None, "samples"])
def test_the_slow_node_keeps_its_step_floor_and_the_budget_is_exact(api, weighting):
    # Prepare: budget 300 over 3 nodes; round 1 is equal (100 each: 4 steps of 32, so B <= 33)
    kw = {} if weighting is None else {"weighting": weighting}
    def make(**o):
        if api == "legacy":
            return _legacy(**kw, **o)
        return AdaptiveStrategy(_fedavg(3), budget=300, deadband=0.0, trust=False, **kw, **o)

    run = message_quotas if api == "message" else legacy_quotas

    # Execute
    free, floored = run(make()), run(make(min_local_steps=2))

    # Assert: without a floor the split gives node 0 (8x slower) ~300/17 samples, 1 step. With a
    # 2-step floor, hand-computed: round 2 gets 2 × 33 = 66 (round 1's 100 samples in 4 steps:
    # 25 <= B <= 33); its 66 in 3 steps narrow B to [25, 32], so round 3 gets 64. Sums exact.
    assert free[0] == floored[0] == [100, 100, 100]
    assert [floored[1][0], floored[2][0]] == [66, 64]
    for rnd in (1, 2):
        assert free[rnd][0] < BATCH
        assert sum(free[rnd]) == sum(floored[rnd]) == 300


def test_a_floor_above_the_equal_share_is_bounded_by_it():
    got = message_quotas(AdaptiveStrategy(_fedavg(3), budget=300, deadband=0.0, trust=False, min_local_steps=10))
    assert got[1] == [100, 100, 100]  # 10 × 33 > 300 // 3: every floor is the equal share


def _BUILD_MIN_ENERGY(**kw):
    return build_strategy("min-energy", budget=10, **kw)


@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, **kw),
    lambda **kw: build_strategy("time", budget=10, **kw),
    _BUILD_MIN_ENERGY,
], ids=["message", "legacy", "build-time", "build-min-energy"])
def test_min_local_steps_reaches_the_strategies_and_is_checked(make):
    # no floor by default, min-energy included (its parked nodes shrink their batches instead)
    assert make().min_local_steps == 0
    assert make(allow_cycling=True).min_local_steps == 0  # data shared in a trusted domain: no default floor
    assert make(min_local_steps=0).min_local_steps == 0
    assert make(min_local_steps=4).min_local_steps == 4
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="min_local_steps must be an int >= 0"):
            make(min_local_steps=bad)


@pytest.mark.parametrize("policy", ["static", "oort", "fedasync"])
def test_baselines_refuse_min_local_steps_rather_than_ignoring_it(policy):
    with pytest.raises(ValueError, match=f"min_local_steps does not apply to policy '{policy}'"):
        build_strategy(policy, budget=10, min_local_steps=2)


def test_hfl_silos_run_the_steps_sent_so_a_floor_above_them_is_refused():
    assert HierarchicalAdaptiveStrategy(budget=10, steps=4, min_local_steps=4).steps == 4
    with pytest.raises(ValueError, match="min_local_steps=5 exceeds steps=4.*raise steps"):
        HierarchicalAdaptiveStrategy(budget=10, steps=4, min_local_steps=5)
    with pytest.raises(ValueError, match="min_local_steps must be an int >= 0"):
        HierarchicalAdaptiveStrategy(budget=10, steps=4, min_local_steps=-1)


# ----------------------------------------------------------------------------- min-energy's floor
def _energy_quotas(strategy, api, rounds=3, watts=(10.0, 1.0, 1.0)):
    """Quotas of each round, all nodes equally fast (1 ms a sample), node 0 drawing 10 W, the others 1 W."""
    from flwr_adaptive import keys

    def metrics(i, q):
        out = telemetry(q, i, steps=math.ceil(q / BATCH))
        out[keys.ENERGY_J] = watts[i] * 0.001 * q
        return out

    out = []
    if api == "message":
        from flwr.app import ArrayRecord, ConfigRecord

        nodes = [100, 101, 102]
        for rnd in range(1, rounds + 1):
            msgs = list(strategy.configure_train(rnd, ArrayRecord(X), ConfigRecord(), FakeGrid(nodes)))
            quota = {m.metadata.dst_node_id: int(m.content["config"][keys.QUOTA]) for m in msgs}
            out.append([quota[n] for n in nodes])
            strategy.aggregate_train(rnd, [reply(m, metrics(nodes.index(m.metadata.dst_node_id),
                                                            quota[m.metadata.dst_node_id]), X) for m in msgs])
        return out
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from test_strategy_core import _Manager

    for rnd in range(1, rounds + 1):
        pairs = strategy.configure_fit(rnd, ndarrays_to_parameters(X), _Manager(["11", "12", "13"]))
        quotas = [int(ins.config[keys.QUOTA]) for _, ins in pairs]
        out.append(quotas)
        ok = Status(Code.OK, "")
        strategy.aggregate_fit(rnd, [(proxy, FitRes(ok, ndarrays_to_parameters(X), 1, metrics(i, q)))
                                     for i, ((proxy, _), q) in enumerate(zip(pairs, quotas))], [])
    return out


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_min_energy_keeps_its_energy_hungry_node_at_one_batch_with_a_floor_of_one_step(api):
    # Prepare: budget 300 over 3 equally fast nodes, node 0 drawing 10x the others' watts; no limit on the
    # round's length (slack=inf), so the least-energy split parks node 0 at min_quota (1 sample)
    def make(**kw):
        if api == "legacy":
            from flwr.server.strategy import FedAvg

            inner = FedAvg(min_fit_clients=3, min_available_clients=3)
            return LegacyAdaptiveStrategy(inner, budget=300, policy="min-energy", slack=math.inf, deadband=0.0,
                                          trust=False, **kw)
        return AdaptiveStrategy(_fedavg(3), budget=300, policy="min-energy", slack=math.inf, deadband=0.0,
                                trust=False, **kw)

    # Execute
    floored, default, shared = (_energy_quotas(make(**kw), api)
                                for kw in ({"min_local_steps": 1}, {}, {"allow_cycling": True}))

    # Assert, hand-computed: round 1 is equal (100 samples in 4 steps: 25 <= B <= 33). By default (no floor,
    # private data or shared) node 0 gets 1 sample. With a floor of one step it gets one batch, 1 x 33 = 33 in
    # round 2; those 33 samples in 2 steps narrow B to [25, 32], so round 3 gets 32.
    assert floored[0] == default[0] == shared[0] == [100, 100, 100]
    assert [floored[1][0], floored[2][0]] == [33, 32]
    assert [default[1][0], default[2][0]] == [shared[1][0], shared[2][0]] == [1, 1]
    for rnd in range(3):
        assert sum(floored[rnd]) == sum(default[rnd]) == sum(shared[rnd]) == 300


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["equal", "time", "low-energy", "energy", "min-energy"]), st.booleans(),
       st.one_of(st.none(), st.integers(0, 50)))
def test_property_no_policy_gets_a_default_floor(policy, cycling, value):
    got = default_min_local_steps(value, policy, cycling)
    assert got == (0 if value is None else value)  # a floor the user names is kept, whatever the policy


def test_min_energys_parked_node_shrinks_its_batches_to_the_equal_splits_steps_by_default():
    # Prepare: the energy-hungry node of the test above, parked at 1 sample from round 2 on (private data, no floor)
    from flwr.app import ArrayRecord, ConfigRecord

    from flwr_adaptive import keys

    strategy = AdaptiveStrategy(_fedavg(3), budget=300, policy="min-energy", slack=math.inf, deadband=0.0, trust=False)
    assert _energy_quotas(strategy, "message", rounds=2)[1][0] == 1

    # Execute: the third round's messages
    msgs = list(strategy.configure_train(3, ArrayRecord(X), ConfigRecord(), FakeGrid([100, 101, 102])))

    # Assert: the parked node is sent the equal share (300 // 3) as its reference quota, so quota_data reads its
    # sample in a batch of one (one step: up to the equal split's steps, at most one per sample); the others, above
    # it, are sent their own quotas
    sent = {m.metadata.dst_node_id: (int(m.content["config"][keys.QUOTA]),
                                     int(m.content["config"][keys.REFERENCE_QUOTA])) for m in msgs}
    assert sent[100] == (1, 100)
    assert all(reference == quota > 100 for quota, reference in (sent[101], sent[102]))
    assert strategy.max_rescale == 2.0
