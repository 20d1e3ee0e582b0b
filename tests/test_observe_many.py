"""``observe_many`` is a loop of ``observe``: same refusals and messages, same state bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flwr_adaptive.controller import MAX_BUDGET, AllocationController, Report
from flwr_adaptive.static_profiling_controller import StaticProfilingController

CASES = {
    "paper": lambda b: AllocationController(b, w_time=0.75, w_energy=0.25),
    "time": lambda b: AllocationController.from_policy("time", b),
    "min-energy": lambda b: AllocationController.from_policy("min-energy", b),
    "paper-time": lambda b: AllocationController.from_policy("time", b, paper=True),
    "affine-tv": lambda b: AllocationController(b, cost_model="affine", drift=0.3),
}
#: What a hostile or broken client may send in one field (each refused, or judged by observe).
BAD_TIME = [-1.0, 0.0, float("nan"), float("inf"), 1e-200, 1e200]
BAD_SAMPLES = [0, -3, MAX_BUDGET + 1]
BAD_ENERGY = [-1.0, float("nan"), float("inf"), -5e-324, 1e200, 0.0, -0.0]


def loop(ctrl, ids, samples, time_s, energy_j):
    """The reference: one ``observe`` per row, stopping at the first refusal."""
    for i, p in enumerate(ids):
        ctrl.observe(
            p, Report(time_s=time_s[i], energy_j=None if energy_j is None else energy_j[i], samples=samples[i])
        )


def refusal(call, *args):
    try:
        call(*args)
    except ValueError as exc:
        return str(exc)
    return None


def state(ctrl):
    return json.dumps(ctrl.state_dict(), sort_keys=True, default=str)  # floats by repr: bit for bit


def random_round(rng, pool, live, w_energy_zero):
    """Reports of a round as (ids, samples, time_s, energy_j), arrays or lists, a few rows broken."""
    k = int(rng.integers(0, 2 * len(pool)))
    ids = [live[int(i)] for i in rng.integers(0, len(live), k)] if rng.random() < 0.5 else list(live)
    if rng.random() < 0.3:  # new participants, some twice
        ids += [pool[int(i)] for i in rng.integers(0, len(pool), 3)]
    k = len(ids)
    samples = rng.integers(1, 400, k)
    time_s = samples * rng.lognormal(-5, 1, k)
    energy = None if (w_energy_zero and rng.random() < 0.3) else time_s * rng.lognormal(1.5, 0.5, k)
    if rng.random() < 0.4 and k:  # break one field of one row
        i = int(rng.integers(0, k))
        which = rng.integers(0, 3)
        if which == 0:
            time_s[i] = BAD_TIME[int(rng.integers(0, len(BAD_TIME)))]
        elif which == 1:
            samples[i] = BAD_SAMPLES[int(rng.integers(0, len(BAD_SAMPLES)))]
        elif energy is not None:
            energy[i] = BAD_ENERGY[int(rng.integers(0, len(BAD_ENERGY)))]
    form = rng.integers(0, 3)
    if form == 1:  # Python lists: what observe's fast path sees
        samples, time_s = samples.tolist(), time_s.tolist()
        energy = None if energy is None else energy.tolist()
    elif form == 2:  # float32 times, uint32 samples where they fit
        time_s = time_s.astype(np.float32)
        samples = samples.astype(np.uint32) if (samples >= 0).all() and samples.max(initial=0) < 2**32 else samples
    return ids, samples, time_s, energy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), case=st.sampled_from(sorted(CASES)))
def test_observe_many_is_a_loop_of_observe_bit_for_bit_including_refusals(seed, case):
    # Prepare: two identical controllers, a pool of int and str ids
    rng = np.random.default_rng(seed)
    pool = [f"n{i}" if i % 2 else i for i in range(int(rng.integers(2, 30)))]
    live = pool[: max(1, len(pool) // 2)]
    make = CASES[case]
    one, many = make(100 * len(pool)), make(100 * len(pool))
    w_energy_zero = one.w_energy == 0.0
    for _ in range(8):
        # Execute: the same reports through observe one by one and through observe_many
        q1, q2 = one.allocate(live), many.allocate(live)
        assert q1 == q2
        args = random_round(rng, pool, live, w_energy_zero)
        assert refusal(loop, one, *args) == refusal(many.observe_many, *args)
        # Assert: the same state bit for bit, and so the same next split
        assert state(one) == state(many)
        live = list(dict.fromkeys(live + [p for p in args[0] if p in one._store.index]))


def test_a_refused_row_raises_observes_message_and_the_rows_before_it_stay_recorded():
    # Prepare: three participants, the second one's time is negative
    ctrl, ref = AllocationController(300, deadband=0.0), AllocationController(300, deadband=0.0)
    ids, samples, time_s = [0, 1, 2], np.array([100, 100, 100]), np.array([1.0, -1.0, 2.0])
    ctrl.allocate(ids), ref.allocate(ids)
    # Execute
    with pytest.raises(ValueError) as got:
        ctrl.observe_many(ids, samples, time_s)
    # Assert: observe's own message; participant 0 recorded, 2 not
    assert str(got.value) == "participant 1: time_s must be > 0, got -1.0"
    assert list(ctrl.estimates()) == [0]
    ref.observe(0, Report(time_s=1.0, energy_j=None, samples=100))
    assert state(ctrl) == state(ref)


def test_a_tiny_negative_energy_in_an_array_is_refused_as_observe_refuses_it():
    # Prepare: -5e-324 J over 2 samples is -0.0 per sample: observe's validation (numpy
    # scalars) refuses the negative energy, so the vectorised check must not accept it
    ctrl = AllocationController(10)
    # Execute + Assert
    with pytest.raises(ValueError, match="energy_j must be >= 0"):
        ctrl.observe_many([7], np.array([2]), np.array([1.0]), np.array([-5e-324]))
    assert ctrl.estimates() == {}


def test_clean_arrays_are_recorded_as_one_block_and_mismatched_lengths_are_refused():
    # Prepare
    ctrl = AllocationController(1000)
    ids = list(range(10))
    ctrl.allocate(ids)
    # Execute: clean columns, the ids of the last allocate
    ctrl.observe_many(ids, np.full(10, 100), np.linspace(1.0, 2.0, 10), None)
    # Assert: one block, no per-row records; applied at the next allocate
    assert len(ctrl._store.pending_blocks) == 1 and not ctrl._store.pending
    assert sorted(ctrl.estimates()) == ids
    with pytest.raises(ValueError, match="time_s has 2 entries but ids has 3"):
        ctrl.observe_many([1, 2, 3], [1, 1, 1], [1.0, 1.0])


def test_a_subclass_with_its_own_observe_gets_its_observe_called_per_row():
    # Prepare: the static profiling controller overrides observe (it profiles once)
    one = StaticProfilingController(300, w_time=1.0)
    many = StaticProfilingController(300, w_time=1.0)
    ids = [0, 1, 2]
    one.allocate(ids), many.allocate(ids)
    samples, time_s = [100, 100, 100], [1.0, 2.0, 3.0]
    # Execute
    loop(one, ids, samples, time_s, None)
    many.observe_many(ids, samples, time_s)
    # Assert
    assert state(one) == state(many)
