"""What ``observe`` accepts, the saved state reads back: any accepted sequence round-trips.

The state reader checks a state against the limits of ``flwr_adaptive.limits``; the controller
must never hold what the reader refuses (once ``observe(energy_j=1e300, samples=1)`` with
``w_energy=0`` was accepted, and the state it saved was then refused).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flwr_adaptive.controller import MAX_BUDGET, MAX_PER_SAMPLE, MIN_PER_SAMPLE, AllocationController, Report

#: The paper's controller and every named policy's settings (affine fits, drift, the gain deadband).
CONFIGS = {
    "paper": dict(w_time=0.75, w_energy=0.25),
    "paper-time": dict(w_time=1.0, w_energy=0.0, smoothing=0.3),
    "time": "time",
    "low-energy": "low-energy",
    "energy": "energy",
    "min-energy": "min-energy",
}
IDS = ["a", "b", 7, "d"]


def build(config: str, budget: int = 10_000) -> AllocationController:
    kwargs = CONFIGS[config]
    if isinstance(kwargs, str):
        return AllocationController.from_policy(kwargs, budget)
    return AllocationController(budget, **kwargs)


def roundtrip(ctrl: AllocationController, config: str) -> AllocationController:
    loaded = build(config)
    loaded.load_state_dict(json.loads(json.dumps(ctrl.state_dict())))
    return loaded


# Per-sample costs across the whole accepted range and a little beyond it (refused reports are
# part of the sequence: a refused call must change nothing), including the edges themselves.
PER_SAMPLE = st.one_of(
    st.sampled_from([MIN_PER_SAMPLE, MAX_PER_SAMPLE, 1e-3, 2e-3, 0.5e-150, 2e150]),
    st.floats(1e-160, 1e160),
)
SAMPLES = st.one_of(st.sampled_from([1, 2, 100, MAX_BUDGET]), st.integers(1, 10_000))
ENERGY = st.one_of(st.none(), st.just(0.0), st.sampled_from([1e300, 1.7e308, 5e-324]), PER_SAMPLE)
OBSERVE = st.tuples(st.just("observe"), st.sampled_from(IDS), PER_SAMPLE, ENERGY, SAMPLES)
ALLOCATE = st.tuples(st.just("allocate"), st.lists(st.sampled_from(IDS), min_size=1, max_size=4, unique=True))


def play(ctrl: AllocationController, steps: list) -> None:
    """Apply ``steps``; a refused observe or allocate (ValueError) is skipped, as a caller would."""
    for step in steps:
        try:
            if step[0] == "observe":
                _, pid, per_sample, energy, samples = step
                time_s = per_sample * samples
                energy_j = energy if energy in (None, 0.0, 1e300, 1.7e308, 5e-324) else energy * samples
                ctrl.observe(pid, Report(time_s=time_s, energy_j=energy_j, samples=samples))
            else:
                ctrl.allocate(step[1])
        except ValueError:
            pass


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(OBSERVE, ALLOCATE), max_size=30), final=st.sampled_from([IDS, IDS[:2], ["a", "new"]]))
def test_any_accepted_sequence_saves_a_state_that_loads_and_gives_the_same_next_split(config, steps, final):
    # Prepare: a controller after any sequence of accepted (and refused) calls
    ctrl = build(config)
    play(ctrl, steps)
    # Execute: save, JSON round-trip, load into a fresh controller with the same settings
    loaded = roundtrip(ctrl, config)
    # Assert: the load succeeded, the state is the same, and so is the next split (or its refusal)
    assert json.dumps(loaded.state_dict(), sort_keys=True) == json.dumps(ctrl.state_dict(), sort_keys=True)
    try:
        expected = ctrl.allocate(final)
    except ValueError as err:
        with pytest.raises(ValueError, match="^" + str(err)[:40].replace("(", r"\(").replace("[", r"\[")):
            loaded.allocate(final)
        return
    assert loaded.allocate(final) == expected


def test_huge_unweighted_energy_is_refused_by_observe_so_the_state_round_trips():
    # Prepare: the case that once broke the round trip, Time-only controller (w_energy = 0)
    ctrl = AllocationController(100, w_time=1.0, w_energy=0.0)
    # Execute / Assert: 1e300 J for one sample is beyond MAX_PER_SAMPLE (1e150) J per sample
    with pytest.raises(ValueError, match=r"participant 'a': energy_j=1e\+300 over samples=1 .* above 1e\+150"):
        ctrl.observe("a", Report(time_s=1.0, energy_j=1e300, samples=1))
    # the largest accepted energy (and 0 J, a meter that read nothing) round-trip
    ctrl.observe("a", Report(time_s=1.0, energy_j=MAX_PER_SAMPLE, samples=1))
    ctrl.observe("b", Report(time_s=1.0, energy_j=0.0, samples=1))
    split = ctrl.allocate(["a", "b"])
    loaded = AllocationController(100, w_time=1.0, w_energy=0.0)
    loaded.load_state_dict(json.loads(json.dumps(ctrl.state_dict())))
    assert loaded.estimates() == ctrl.estimates() == {"a": (1.0, MAX_PER_SAMPLE), "b": (1.0, 0.0)}
    assert loaded.allocate(["a", "b"]) == ctrl.allocate(["a", "b"]) == split


def test_a_drift_jump_across_the_float_range_restarts_the_window_instead_of_saving_infinities():
    # Prepare: drift detection on; participant "a" at the dearest accepted cost, then (at a quota
    # 10x away: not judged for drift) at the cheapest
    ctrl = AllocationController.from_policy("time", 1000)
    for per_sample, samples in ((MAX_PER_SAMPLE, 100), (MIN_PER_SAMPLE, 1000)):
        ctrl.observe("a", Report(time_s=per_sample * samples, samples=samples))
        ctrl.observe("b", Report(time_s=1e-3 * samples, samples=samples))
        ctrl.allocate(["a", "b"])
    # Execute: the dearest cost again, at the last quota: a jump of 1e300, judged as drift, would
    # rescale the first observation (1e152 s) by 1e300: beyond float range
    ctrl.observe("a", Report(time_s=MAX_PER_SAMPLE * 1000, samples=1000))
    state = json.loads(json.dumps(ctrl.state_dict()))
    # Assert: the window holds only the new observation, and the state loads
    assert ctrl.drift_count == 1
    window = state["model"]["history"][state["ids"].index("a")]
    assert [obs for obs in window if obs[0] is not None] == [[1000.0, MAX_PER_SAMPLE * 1000, None]]
    loaded = AllocationController.from_policy("time", 1000)
    loaded.load_state_dict(state)
    assert loaded.allocate(["a", "b"]) == ctrl.allocate(["a", "b"])


def test_an_estimate_smoothed_a_rounding_below_the_cheapest_cost_still_loads():
    # Prepare: two reports at exactly MIN_PER_SAMPLE; with smoothing 0.33 the EMA
    # 0.33·x + 0.67·x rounds to one ulp below x
    ctrl = AllocationController(100, smoothing=0.33)
    for _ in range(2):
        ctrl.observe("a", Report(time_s=MIN_PER_SAMPLE, samples=1))
    state = json.loads(json.dumps(ctrl.state_dict()))
    assert state["time_per_sample"][0] < MIN_PER_SAMPLE
    # Execute / Assert: the reader allows the EMA's rounding
    loaded = AllocationController(100, smoothing=0.33)
    loaded.load_state_dict(state)
    assert loaded.estimates() == ctrl.estimates()
