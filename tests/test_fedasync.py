"""FedAsync: staleness functions match their formulas; stale updates move the model less."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive.fedasync_mixer import FedAsyncMixer, VirtualClockQueue, staleness_weight


@pytest.mark.parametrize(
    "kind, staleness, a, b, expected",
    [
        ("constant", 7, 0.5, 4, 1.0),
        ("polynomial", 0, 0.5, 4, 1.0),
        ("polynomial", 3, 0.5, 4, 4 ** -0.5),
        ("hinge", 4, 10, 4, 1.0),
        ("hinge", 6, 10, 4, 1 / (10 * 2 + 1)),
    ],
)
def test_staleness_functions_match_their_formulas(kind, staleness, a, b, expected):
    assert staleness_weight(kind, staleness, a, b) == pytest.approx(expected)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["polynomial", "hinge"]), st.integers(0, 50))
def test_property_staleness_weight_never_increases(kind, staleness):
    assert staleness_weight(kind, staleness + 1) <= staleness_weight(kind, staleness) <= 1.0


def test_mix_is_the_fedasync_update():
    mixer = FedAsyncMixer(alpha=0.5, staleness="constant")
    model = [np.array([0.0, 2.0]), np.array([[1.0]])]
    update = [np.array([2.0, 4.0]), np.array([[3.0]])]
    mixed = mixer.mix(model, update, base_version=0)
    np.testing.assert_allclose(mixed[0], [1.0, 3.0])
    np.testing.assert_allclose(mixed[1], [[2.0]])
    assert mixer.version == 1


def test_stale_update_moves_the_model_less():
    # Prepare: the same update arrives fresh, or 5 versions stale.
    model, update = [np.zeros(3)], [np.ones(3)]
    fresh, stale = FedAsyncMixer(alpha=0.6), FedAsyncMixer(alpha=0.6)
    stale.version = 5

    # Execute
    moved_fresh = np.abs(fresh.mix(model, update, base_version=0)[0]).sum()
    moved_stale = np.abs(stale.mix(model, update, base_version=0)[0]).sum()

    # Assert: polynomial a = 0.5: 0.6 vs 0.6 / sqrt(6).
    assert moved_fresh == pytest.approx(3 * 0.6)
    assert moved_stale == pytest.approx(3 * 0.6 / np.sqrt(6))


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="unknown staleness function 'linear'"):
        FedAsyncMixer(staleness="linear")
    with pytest.raises(ValueError, match="alpha must lie in"):
        FedAsyncMixer(alpha=0.0)
    with pytest.raises(ValueError, match="newer than the model"):
        FedAsyncMixer().mix([np.zeros(1)], [np.zeros(1)], base_version=3)
    with pytest.raises(ValueError, match="does not match"):
        FedAsyncMixer().mix([np.zeros(2)], [np.zeros(3)], base_version=0)


def test_virtual_clock_queue_orders_by_finish_time_then_submission():
    queue = VirtualClockQueue()
    queue.push("slow", 9.0)
    queue.push("fast", 1.0, payload="x")
    queue.push("tie", 9.0)
    assert [queue.pop()[0] for _ in range(3)] == ["fast", "slow", "tie"]
    assert queue.peek_time() == float("inf")
