"""``scale_batch_size=None`` follows ``weighting`` and ``min_local_steps`` set after construction; explicit values stay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_batch_shrinking import _fedavg, _legacy, _wire

from flwr_adaptive.strategies import AdaptiveStrategy, HierarchicalAdaptiveStrategy
from flwr_adaptive.strategies.normalization import WEIGHTINGS
from flwr_adaptive.strategies.registry import build_strategy

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

SPLIT = (200, 70, 30)  # round 1's split forced by _wire; the equal share 300 // 3 = 100


def _make(api, **kw):
    return AdaptiveStrategy(_fedavg(3), budget=300, **kw) if api == "message" else _legacy(**kw)


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_the_default_follows_a_weighting_set_after_construction_both_ways(api):
    # Prepare: the default with private data ("normalized": "shrink")
    strategy = _make(api)
    assert strategy.scale_batch_size == "shrink"
    # Execute: switched to the samples rule, whose fast nodes' extra steps nothing corrects
    strategy.weighting = "samples"
    # Assert: as if built with weighting="samples": nothing scaled, nothing sent
    assert strategy.scale_batch_size is False and strategy.aggregation.equal_steps is False
    assert _wire(api, strategy, SPLIT) == {200: None, 70: None, 30: None}
    # and the other way: built with "samples" (False), switched to the normalised rule: "shrink" on the wire
    other = _make(api, weighting="samples")
    assert other.scale_batch_size is False
    other.weighting = "normalized"
    assert other.scale_batch_size == "shrink"
    assert _wire(api, other, SPLIT) == {200: 200, 70: 100, 30: 100}


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_the_default_follows_a_step_floor_set_after_construction(api):
    strategy = _make(api)
    strategy.min_local_steps = 1  # a floor learns batch sizes from replies: no shrunk batches under it
    assert strategy.scale_batch_size is False
    assert _wire(api, strategy, SPLIT) == {200: None, 70: None, 30: None}
    strategy.min_local_steps = 0
    assert strategy.scale_batch_size == "shrink"
    assert _wire(api, strategy, SPLIT) == {200: 200, 70: 100, 30: 100}


@pytest.mark.parametrize("api", ["message", "legacy"])
@pytest.mark.parametrize("explicit", [False, True, "shrink"])
def test_an_explicit_value_is_never_changed_by_a_later_weighting(api, explicit):
    strategy = _make(api, scale_batch_size=explicit)
    for weighting in ("samples", "data-size", "normalized", "samples"):
        strategy.weighting = weighting
        assert strategy.scale_batch_size == explicit and strategy.aggregation.equal_steps is (explicit is True)


@pytest.mark.parametrize("api", ["message", "legacy"])
@pytest.mark.parametrize("explicit", [True, "shrink"])
def test_a_step_floor_under_explicit_scaling_is_refused_when_set_and_changes_nothing(api, explicit):
    strategy = _make(api, scale_batch_size=explicit)
    with pytest.raises(ValueError, match=f"scale_batch_size={explicit!r} does not combine with min_local_steps=2.*Pass"):
        strategy.min_local_steps = 2
    assert strategy.min_local_steps == 0 and strategy.scale_batch_size == explicit
    strategy.scale_batch_size = None  # handing the choice back: the floor now turns scaling off
    strategy.min_local_steps = 2
    assert strategy.scale_batch_size is False and strategy.min_local_steps == 2


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_a_later_weighting_is_checked_as_at_construction(api):
    strategy = _make(api, max_rescale=4.0)
    with pytest.raises(ValueError, match="unknown weighting 'sample'"):
        strategy.weighting = "sample"
    with pytest.raises(ValueError, match="max_rescale=4.0 has no effect with weighting='samples'"):
        strategy.weighting = "samples"
    assert strategy.weighting == "normalized" and strategy.scale_batch_size == "shrink"
    with pytest.raises(ValueError, match="min_local_steps must be an int >= 0"):
        strategy.min_local_steps = -1
    assert strategy.min_local_steps == 0


@pytest.mark.parametrize("make", [lambda: build_strategy("static", budget=10), lambda: build_strategy("oort", budget=10),
                                  lambda: HierarchicalAdaptiveStrategy(budget=10, steps=2)])
def test_strategies_at_the_users_batch_size_stay_at_it_whatever_is_set_later(make):
    strategy = make()
    for weighting in ("samples", "normalized"):
        strategy.weighting = weighting
        assert strategy.scale_batch_size is False
    strategy.min_local_steps = 1
    strategy.min_local_steps = 0
    assert strategy.scale_batch_size is False


_SETTING = st.one_of(
    st.tuples(st.just("weighting"), st.sampled_from(WEIGHTINGS)),
    st.tuples(st.just("min_local_steps"), st.integers(0, 2)),
    st.tuples(st.just("scale_batch_size"), st.sampled_from([None, False, True, "shrink"])),
)


@settings(max_examples=40, deadline=None)
@given(changes=st.lists(_SETTING, max_size=6))
def test_after_any_settings_scale_batch_size_is_what_the_constructor_gives_for_them(changes):
    # Prepare
    strategy, given_now = AdaptiveStrategy(_fedavg(3), budget=300), {"scale_batch_size": None}
    for name, value in changes:
        before = (strategy.weighting, strategy.min_local_steps, strategy.scale_batch_size)
        # Execute
        try:
            setattr(strategy, name, value)
        except ValueError:
            # Assert: a refused setting changes nothing
            assert (strategy.weighting, strategy.min_local_steps, strategy.scale_batch_size) == before
            continue
        given_now[name] = value
        # Assert: the same as a strategy built with these settings (the user's scale_batch_size as given)
        built = AdaptiveStrategy(_fedavg(3), budget=300, weighting=strategy.weighting,
                                 min_local_steps=strategy.min_local_steps,
                                 scale_batch_size=given_now["scale_batch_size"])
        assert strategy.scale_batch_size == built.scale_batch_size
        assert strategy.aggregation.equal_steps is built.aggregation.equal_steps


@pytest.mark.parametrize("api", ["message", "legacy", "silos"])
def test_weighting_none_set_later_is_the_constructors_default(api):
    strategy = HierarchicalAdaptiveStrategy(budget=10, steps=2) if api == "silos" else _make(api, weighting="samples")
    strategy.weighting = "data-size"
    strategy.weighting = None
    assert strategy.weighting == "normalized"  # private data (and silos, which own theirs)
    shared = AdaptiveStrategy(_fedavg(3), budget=300, allow_cycling=True) if api != "legacy" else _legacy(
        allow_cycling=True)
    shared.weighting = "normalized"
    shared.weighting = None
    assert shared.weighting == "samples" and shared.scale_batch_size is False  # data shared in a trusted domain
