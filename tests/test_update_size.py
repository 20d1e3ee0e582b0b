"""The update-size screen: a reply whose normalised update is far longer than the round's is skipped."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adaptive_support as sup
from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.update_size import MAX_UPDATE_RATIO, outsized, update_length
from test_normalized_strategy import _fedavg, message_round, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

X = [np.array([1.0, -2.0, 0.5])]


def test_update_length_and_outsized_by_hand():
    x = np.array([1.0, 1.0])
    pairs = [(np.array([4.0, 5.0]), x), (np.array([7, 9]), np.array([0, 0])), (np.ones(3), np.ones(2))]
    assert update_length(pairs) == 5.0  # integer arrays and another shape are not an update to measure
    assert outsized({"a": 1.0, "b": 2.0, "c": 3.0, "d": 100.0}, 10.0) == {"d": 50.0}  # the lower median, 2
    assert outsized({"a": 1.0, "b": 2.0, "c": 19.0}, 10.0) == {}  # 9.5× a median of 2 is not above 10× …
    assert outsized({"a": 1.0, "b": 2.0, "c": 21.0}, 10.0) == {"c": 10.5}  # … 10.5× is
    assert outsized({"a": 1.0, "d": 1e30}, 10.0) == {}  # no median of 2
    assert outsized({"a": 0.0, "b": 0.0, "c": 5.0}, 10.0) == {}  # nothing moved: no scale to judge by
    assert outsized({"a": 1.0, "b": 2.0, "c": 1e30}, math.inf) == {}  # turned off
    # half the round, not a majority: with the average of the middle two (5e29) each was 2× it and kept
    assert outsized({"a": 1.0, "b": 1.2, "c": 1e30, "d": 1e30}, 100.0) == {"c": 1e30 / 1.2, "d": 1e30 / 1.2}
    # a decoy far beyond the rest does not raise the lower median while the liars are fewer than half
    assert set(outsized({"a": 1.0, "b": 1.1, "c": 1.2, "d": 1.3, "x": 60.0, "y": 5000.0, "z": 1e30}, 100.0)) == {"y", "z"}
    # one pass: judged again without the 101, two near-zero liars of 5 were the lower median and every
    # honest reply was skipped in turn; now only the one beyond 100× the smallest honest step is
    assert outsized({"a": 1.0, "b": 3.0, "c": 101.0, "x": 1e-9, "y": 1e-9}, 100.0) == {"c": 101.0}
    assert outsized({"a": 1.0, "b": 1.0, "c": math.inf}, 100.0) == {"c": math.inf}  # an overflowed length
    assert update_length([(np.full(4, 1e200), np.zeros(4))]) == math.inf


def _honest(i):
    return [X[0] + 0.1 * np.array([1.0 + i, -1.0, 0.5 * i])]


@pytest.mark.parametrize("api", ["message", "legacy"])
@pytest.mark.parametrize("lie", ["scaled", "poisoned"])
def test_one_scaled_or_poisoned_update_of_six_is_skipped_and_the_round_is_the_others_average(api, lie, caplog):
    # Seen from a user's app: one node of six multiplied its model by 1e30. Finite, so it passed screening,
    # and the global model was that reply's for the rest of the run. Or it sent x − 500·(an honest update).
    liar = [X[0] * 1e30] if lie == "scaled" else [X[0] - 500 * (_honest(0)[0] - X[0])]
    per_node = [(dict(steps=4), _honest(i)) for i in range(5)] + [(dict(steps=4), liar)]
    strategy = _strategy(api, 6)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        out = _round(api, strategy, per_node)
    # every node took the same steps: FedAvg of the five honest ones, exactly
    np.testing.assert_allclose(out[0], np.mean([_honest(i)[0] for i in range(5)], axis=0), rtol=1e-12)
    said = [line for line in sup.adaptive_lines(caplog) if "max_update_ratio" in line]
    assert len(said) == 1 and "partition 5" in said[0]
    row = strategy.history.iloc[-1]
    assert row["short_skipped"] == 100  # its quota is counted as not processed, not lost silently
    assert row["update_ratio"] > 100  # the round's largest average step over the median: the liar's


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_node_with_twenty_times_the_steps_is_not_outsized_once_normalised(api):
    # Honest steps grow with the quota (here the data: 10, 10 and 200 samples, one step per 5): under
    # normalised aggregation each update counts as its average step
    per_node = [(dict(steps=2, samples=10, data_size=10), _honest(0)),
                (dict(steps=2, samples=10, data_size=10), _honest(1)),
                (dict(steps=40, samples=200, data_size=200), [X[0] + 20 * (_honest(2)[0] - X[0])])]
    strategy = _strategy(api, 3, quota=200)
    _round(api, strategy, per_node)
    assert strategy.history.iloc[-1]["short_skipped"] == 0


@pytest.mark.parametrize("api", ["message", "legacy"])
@pytest.mark.parametrize("weighting", ["samples", "data-size"])
def test_the_other_weightings_judge_whole_updates_a_scaled_model_is_skipped_a_longer_honest_one_kept(api, weighting):
    # Seen through flwr run (helper-56): apps/hfl weighs by samples, and one silo's × 1e30 model was the
    # global model from round 1 (the screen judged only normalised rounds); the whole update is judged here
    strategy = _strategy(api, 4, weighting=weighting)
    scaled = _round(api, strategy, [(dict(steps=4), _honest(i)) for i in range(3)] + [(dict(steps=4), [X[0] * 1e30])])
    np.testing.assert_allclose(scaled[0], np.mean([_honest(i)[0] for i in range(3)], axis=0), rtol=1e-12)
    assert strategy.history.iloc[-1]["skipped"] == 1 and strategy.history.iloc[-1]["update_ratio"] > 1e29
    # a node whose update is 20× an honest one (a fast node's larger quota) is kept: 20× is inside the ratio
    strategy = _strategy(api, 4, weighting=weighting)
    longer = [X[0] + 20 * (_honest(0)[0] - X[0])]
    _round(api, strategy, [(dict(steps=4), _honest(i)) for i in range(3)] + [(dict(steps=80), longer)])
    assert strategy.history.iloc[-1]["skipped"] == 0 and 10 < strategy.history.iloc[-1]["update_ratio"] < 30


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.integers(1, 200), min_size=3, max_size=8),
       tilt=st.lists(st.floats(0.5, 2.0), min_size=8, max_size=8))
def test_property_honest_steps_of_any_count_are_never_outsized(steps, tilt):
    # an honest update is its step count (one a sample: its data) times a step of comparable length (within
    # 4× of each other; the non-IID experiments' honest steps reach ~30× their round's median)
    strategy = AdaptiveStrategy(_fedavg(len(steps)), budget=200 * len(steps), policy="equal")
    per_node = [(dict(steps=s, samples=s, data_size=s), [X[0] + s * t * 0.001 * np.array([1.0, -1.0, 0.5])])
                for s, t in zip(steps, tilt)]
    message_round(strategy, X, per_node)
    assert strategy.history.iloc[-1]["short_skipped"] == 0
    assert 1.0 <= strategy.history.iloc[-1]["update_ratio"] <= 4.0 + 1e-9  # the steps' own spread, whatever the counts
    assert MAX_UPDATE_RATIO == 100.0


def _strategy(api, n, quota=100, **kw):
    if api == "message":
        return AdaptiveStrategy(_fedavg(n), budget=quota * n, policy="equal", **kw)
    from flwr.server.strategy import FedAvg

    return LegacyAdaptiveStrategy(FedAvg(min_fit_clients=n, min_available_clients=n), budget=quota * n,
                                  policy="equal", **kw)


def _round(api, strategy, per_node):
    if api == "message":
        return message_round(strategy, X, per_node)
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

    from test_strategy_core import _Manager

    pairs = strategy.configure_fit(1, ndarrays_to_parameters(X), _Manager([11 + i for i in range(len(per_node))]))
    results = []
    for i, ((proxy, _), (kw, model)) in enumerate(zip(pairs, per_node)):
        kw = dict(kw)
        metrics = telemetry(kw.pop("samples", 100), i, **kw)
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(model), 1, metrics)))
    params, _ = strategy.aggregate_fit(1, results, [])
    return parameters_to_ndarrays(params)


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_with_an_unbounded_rescale_an_outsized_update_is_skipped_before_the_factors(api):
    # Skipped after rescaling, such a reply's steps stayed in τ_eff (the others at 0.875); skipped as outsized,
    # the factors are the three others' own: equal steps, FedAvg's 0.5
    from test_normalized_strategy import F32, _precision_round, _precision_strategy

    per_node = [(dict(steps=10), [np.full(2, 0.5, dtype=np.float32)]) for _ in range(3)]
    per_node.append((dict(steps=5), [np.full(2, 3e38, dtype=np.float32)]))
    strategy = _precision_strategy(api, 4)
    strategy.max_rescale = math.inf
    got = _precision_round(api, strategy, F32, per_node, rnd=1)
    np.testing.assert_allclose(got[0], 0.5, rtol=1e-6)
    assert strategy.history.iloc[-1]["clients"] == 3 and strategy.history.iloc[-1]["skipped"] == 1


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_two_colluders_of_four_sending_scaled_models_are_both_skipped(api):
    per_node = [(dict(steps=4), _honest(i)) for i in range(2)] + [(dict(steps=4), [X[0] * 1e30])] * 2
    strategy = _strategy(api, 4)
    out = _round(api, strategy, per_node)
    np.testing.assert_allclose(out[0], np.mean([_honest(i)[0] for i in range(2)], axis=0), rtol=1e-12)
    assert strategy.history.iloc[-1]["short_skipped"] == 200


def test_a_subclass_setting_max_update_ratio_on_its_class_is_obeyed_and_bad_values_fail_early():
    class Unscreened(AdaptiveStrategy):
        max_update_ratio = math.inf  # a class attribute hides the strategy's descriptor: it must still count

    strategy = Unscreened(_fedavg(4), budget=400, policy="equal")
    message_round(strategy, X, [(dict(steps=4), _honest(i)) for i in range(3)] + [(dict(steps=4), [X[0] * 1e3])])
    assert strategy.history.iloc[-1]["short_skipped"] == 0
    strategy = AdaptiveStrategy(_fedavg(4), budget=400, policy="equal")
    for bad in (None, 0.5, -1, float("nan")):
        with pytest.raises(ValueError, match="max_update_ratio"):
            strategy.max_update_ratio = bad


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_round_of_two_replies_is_judged_with_the_earlier_rounds_lengths(api, caplog):
    # Seen through flwr run (helper-62): 4 nodes sampled 2 a round (Flower's min_train_nodes is 2); one
    # multiplied its model by 1e30 in round 4, no line was logged and the model was its reply from then on
    strategy = _strategy(api, 2)

    def play(rnd, per_node):
        if api == "message":
            return message_round(strategy, X, per_node, rnd=rnd)
        return _round(api, strategy, per_node)

    play(1, [(dict(steps=4), _honest(0)), (dict(steps=4), _honest(1))])
    assert strategy.history.iloc[-1]["skipped"] == 0  # two lengths and nothing earlier: not judged
    with caplog.at_level(logging.WARNING, logger="flwr"):
        out = play(2, [(dict(steps=4), _honest(2)), (dict(steps=4), [X[0] * 1e30])])
    np.testing.assert_allclose(out[0], _honest(2)[0], rtol=1e-12)  # the honest reply alone
    said = [line for line in sup.adaptive_lines(caplog) if "max_update_ratio" in line]
    assert len(said) == 1 and "partition 1" in said[0] and "earlier rounds'" in said[0]
    assert strategy.history.iloc[-1]["skipped"] == 1
    # an honest round of two after it is kept (the skipped node on probation: 1 sample): the liar's
    # entry is one of four, not the median
    play(3, [(dict(steps=4), _honest(3)), (dict(steps=4, samples=1), _honest(4))])
    assert strategy.history.iloc[-1]["skipped"] == 0


def test_a_small_round_after_one_without_step_counts_keeps_its_honest_replies():
    # helper-64: round 1's replies said no steps (samples stood in: per-sample lengths), round 2's said 8; judged
    # against round 1's per-sample entries (256x longer per unit) both honest replies were skipped
    strategy = AdaptiveStrategy(_fedavg(2), budget=4096, policy="equal")
    update = [X[0] + 0.5 * np.array([1.0, -1.0, 0.5])]
    message_round(strategy, X, [(dict(samples=2048), update), (dict(samples=2048), update)], rnd=1)
    assert strategy.aggregation.last_unit == "sample"
    message_round(strategy, X, [(dict(samples=2048, steps=8), update), (dict(samples=2048, steps=8), update)], rnd=2)
    assert strategy.aggregation.last_unit == "step" and strategy.history.iloc[-1]["skipped"] == 0


def test_the_small_round_reference_holds_one_entry_per_node_and_judges_only_the_round():
    from flwr_adaptive.strategies.update_size import UpdateSizeScreen

    screen = UpdateSizeScreen()

    def judge(lengths, work=None):
        screen.start({"w": np.zeros(1)})
        for node, length in lengths.items():
            screen.value_check(node)("w", np.array([length]))
        return screen.skip(1, list(lengths), work or {}, 10.0, str)

    assert judge({"a": 1.0, "b": 2.0}) == set()  # round 1 of a 2-of-4 sample: 2 lengths only
    assert judge({"c": 1.5, "d": 30.0}) == {"d"}  # beside a, b, c and d: the lower median is 1.5; 20x
    assert screen.latest["d"] == ("update", 30.0)  # skipped, still its entry: each node holds one
    assert judge({"a": 1.2, "b": 12.0}) == set()  # the lower median of 1.2, 12, and earlier 1.5, 30 is 1.5: 8x
    # a normalised round judges average steps and keeps them apart from whole updates
    assert judge({"a": 4.0, "c": 40.0}, work={"a": 4.0, "c": 40.0}) == set()  # steps of 1: no earlier steps
    assert screen.latest["c"] == ("step", 1.0)
    # samples standing in for unsaid steps are a unit of their own (helper-64: per-sample entries judged
    # later per-step ones, 8 steps of 64 samples each, and both honest replies were skipped)
    assert judge({"a": 512.0, "b": 512.0}, work={"a": 512.0, "b": 512.0}) == set()
    screen.latest = {n: ("sample", 1.0) for n in "ab"}
    screen.start({"w": np.zeros(1)})
    for node in "ab":
        screen.value_check(node)("w", np.array([512.0]))
    assert screen.skip(2, ["a", "b"], {"a": 8.0, "b": 8.0}, 10.0, str, unit="step") == set()


def test_a_resumed_server_judges_its_first_small_round_with_the_saved_lengths():
    import json

    from flwr_adaptive.strategies.state_store import StateFileError

    first = _strategy("message", 2)
    message_round(first, X, [(dict(steps=4), _honest(0)), (dict(steps=4), _honest(1))], rnd=1)
    message_round(first, X, [(dict(steps=4), _honest(2)), (dict(steps=4), _honest(3))], rnd=2)
    saved = json.loads(json.dumps(first.state_dict()))  # as the state file holds it
    assert sorted(n for n, _, _ in saved["update_lengths"]) == [100, 101]
    resumed = _strategy("message", 2)
    resumed.load_state_dict(saved)
    assert resumed.update_size.latest == first.update_size.latest  # JSON keeps the floats exactly
    message_round(resumed, X, [(dict(steps=4), _honest(4)), (dict(steps=4), [X[0] * 1e30])], rnd=3)
    assert resumed.history.iloc[-1]["skipped"] == 1  # judged from its first round, not left unscreened
    # a tampered entry is refused like any malformed state; a state written before the lengths were kept resumes
    for bad in (["x", "step", 1.0], [100, "furlong", 1.0], [100, "step", -1.0], [100, "step", float("nan")]):
        with pytest.raises(StateFileError, match="saved update length"):
            _strategy("message", 2).load_state_dict({**saved, "update_lengths": [bad] if bad[0] != "x" else "x"})
    old = {k: v for k, v in saved.items() if k != "update_lengths"}
    again = _strategy("message", 2)
    again.load_state_dict(old)
    assert again.update_size.latest == {}
