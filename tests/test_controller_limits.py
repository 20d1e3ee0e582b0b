"""AllocationController refuses what it cannot compute, and a refused call changes nothing.

Hand-computed cases: reports outside the computable range (underflowing, overflowing, huge or
missing values), bounds and budgets beyond int64 or ``MAX_BUDGET``, participant ids that are not
ids; each refusal is a ``ValueError`` naming the participant and the field, and the state is
left exactly as it was. A property: the constructor, given hostile numbers for every parameter,
raises nothing but a ``ValueError`` naming the parameter.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive.controller import (
    MAX_BUDGET,
    MAX_PER_SAMPLE,
    MIN_PER_SAMPLE,
    AllocationController,
    Report,
)

from controller_support import report_for, snapshot


# ----------------------------------------------------------------------------- hand-computed: reports
def test_underflowing_time_is_refused_and_allocate_still_splits():
    # Prepare: 5e-324 s over 2 samples is 0.0 s per sample: the median could not normalise it.
    ctrl = AllocationController(100)

    # Execute
    with pytest.raises(ValueError, match=r"participant 'a': time_s=5e-324 over samples=2 is 0.0 per sample"):
        ctrl.observe("a", Report(time_s=5e-324, samples=2))
    quotas = ctrl.allocate(["a", "b"])

    # Assert: nothing was recorded, the round splits evenly.
    assert quotas == {"a": 50, "b": 50}
    assert ctrl.estimates() == {}


def test_two_of_three_nodes_sending_underflowing_times_leave_the_third_measured():
    ctrl = AllocationController(300, deadband=0.0)
    for pid in ("a", "b"):
        with pytest.raises(ValueError, match="time_s"):
            ctrl.observe(pid, Report(time_s=5e-324, samples=2))
    ctrl.observe("c", Report(time_s=2.0, samples=100))

    quotas = ctrl.allocate(["a", "b", "c"])

    # c is the only estimate, hence the median: everyone gets cost 1.
    assert quotas == {"a": 100, "b": 100, "c": 100}
    assert set(ctrl.estimates()) == {"c"}


@pytest.mark.parametrize(
    "report, field",
    [
        (Report(time_s=1.0, samples=10**400), "samples=10000000000000000000"),
        (Report(time_s=1.0, samples=MAX_BUDGET + 1), "samples=9007199254740992 exceeds MAX_BUDGET"),
        (Report(time_s=10**400, samples=10), "time_s must be a finite number, got an integer beyond float range"),
        (Report(time_s=1e308, samples=1), "time_s=1e+308 over samples=1 is 1e+308 per sample"),
        (Report(time_s=1e-300, samples=10), "time_s=1e-300 over samples=10"),
        (Report(time_s=1.0, energy_j=5e-324, samples=2), "energy_j=5e-324 over samples=2 is 0.0 per sample"),
        (Report(time_s=1.0, energy_j=None, samples=2), "energy_j is None but w_energy=0.25"),
    ],
)
def test_reports_outside_the_computable_range_are_refused_and_change_nothing(report, field):
    # Prepare: an energy-weighted controller with one measured participant and a committed split.
    ctrl = AllocationController.from_policy("low-energy", 100)
    ctrl.observe("x", Report(time_s=1.0, energy_j=1.0, samples=10))
    ctrl.allocate(["x", "node-7"])
    before = snapshot(ctrl)

    # Execute
    with pytest.raises(ValueError) as err:
        ctrl.observe("node-7", report)

    # Assert: the message names the participant and the field; the state is untouched and usable.
    assert "participant 'node-7'" in str(err.value) and field in str(err.value)
    assert len(str(err.value)) < 400  # a 400-digit value is shortened
    assert snapshot(ctrl) == before
    assert sum(ctrl.allocate(["x", "node-7"]).values()) == 100


def test_per_sample_limits_are_inclusive():
    ctrl = AllocationController(10, deadband=0.0)
    ctrl.observe("fast", Report(time_s=MIN_PER_SAMPLE * 4, samples=4))
    ctrl.observe("slow", Report(time_s=MAX_PER_SAMPLE, samples=1))
    assert ctrl.estimates()["fast"][0] == pytest.approx(MIN_PER_SAMPLE)
    assert sum(ctrl.allocate(["fast", "slow"]).values()) == 10


def test_zero_energy_is_fine_when_energy_is_not_weighted():
    ctrl = AllocationController(10, w_time=1.0, w_energy=0.0)
    ctrl.observe("a", Report(time_s=1.0, energy_j=0.0, samples=5))
    assert ctrl.estimates() == {"a": (0.2, 0.0)}


# ----------------------------------------------------------------------------- hand-computed: bounds, budgets, ids
def test_max_quota_beyond_int64_is_clamped_and_the_slot_stays_usable():
    ctrl = AllocationController(100, deadband=0.0)
    ctrl.allocate(["a", "b"])

    ctrl.set_max_quota("a", 2**63)
    ctrl.set_max_quota("b", 10**19)
    quotas = ctrl.allocate(["a", "b", "c"])

    assert sum(quotas.values()) == 100
    assert json.loads(json.dumps(ctrl.state_dict()))["max_quota"] == [["a", MAX_BUDGET], ["b", MAX_BUDGET]]


def test_min_quota_sums_beyond_int64_are_refused_with_the_exact_sum():
    # Prepare: 1,100 participants whose min_quota is MAX_BUDGET: the int64 sum would wrap around.
    ids = list(range(1100))
    ctrl = AllocationController(10, min_quota=MAX_BUDGET)
    before = snapshot(ctrl)

    # Execute / Assert
    with pytest.raises(ValueError, match=rf"budget 10 is below the sum of min_quota {1100 * MAX_BUDGET} over 1100"):
        ctrl.allocate(ids)
    assert snapshot(ctrl) == before  # no participant was registered by the refused call


def test_largest_budget_is_split_exactly():
    ctrl = AllocationController(MAX_BUDGET, deadband=0.0, min_quota=0)
    for pid, tau in enumerate([1e-3, 3e-3, 7e-3, 2e-2]):
        ctrl.observe(pid, report_for(10, tau))
    ctrl.set_max_quota(3, 12345)

    quotas = ctrl.allocate(list(range(6)))

    assert sum(quotas.values()) == MAX_BUDGET
    assert quotas[3] == 12345
    assert quotas[0] == pytest.approx(3 * quotas[1], rel=1e-9)


def test_numpy_integer_ids_are_stored_as_int():
    ctrl = AllocationController({"s": 100, 2: 10}, groups={np.int64(1): "s", np.int32(5): np.int64(2)})
    ctrl.observe(np.int64(1), Report(time_s=1.0, samples=10))
    ctrl.set_max_quota(np.uint8(1), 80)
    ctrl.set_group(np.int16(9), "s")

    quotas = ctrl.allocate([np.int64(1), 5, 9])
    state = json.loads(json.dumps(ctrl.state_dict()))

    assert [type(p) for p in quotas] == [int, int, int]
    assert state["ids"] == [1, 5, 9]
    assert state["groups"] == [[1, "s"], [5, 2], [9, "s"]]


def test_refused_allocate_registers_nobody_and_keeps_the_split():
    ctrl = AllocationController(100, max_quota={"tiny": 1, "b": 1})
    first = ctrl.allocate(["a", "b"])
    ctrl.observe("a", Report(time_s=1.0, samples=50))
    before = snapshot(ctrl)

    with pytest.raises(ValueError, match=r"budget 100 is above the sum of max_quota 2"):
        ctrl.allocate(["tiny", "b", ])

    assert snapshot(ctrl) == before
    assert ctrl.current == first


def test_refused_set_group_changes_nothing():
    ctrl = AllocationController({"s": 10}, groups={"a": "s"})
    before = snapshot(ctrl)
    for call in (lambda: ctrl.set_group("a", "t", budget=MAX_BUDGET + 1),
                 lambda: ctrl.set_group("a", "t", budget=-1),
                 lambda: ctrl.set_group("a", (1, 2), budget=5),
                 lambda: ctrl.set_group(1.5, "s")):
        with pytest.raises(ValueError):
            call()
    assert snapshot(ctrl) == before and ctrl.groups == {"a": "s"} and ctrl.budget == {"s": 10}


def test_an_unhashable_participant_id_is_refused_with_value_error_and_changes_nothing():
    # Prepare
    ctrl = AllocationController(10)
    ctrl.observe("a", Report(time_s=1.0, samples=10))
    ctrl.allocate(["a"])
    before = snapshot(ctrl)
    # Execute / Assert: a ValueError naming the id (not a TypeError out of a dict lookup)
    for bad in (["a"], {"a": 1}):
        with pytest.raises(ValueError, match="participant id must be str or int"):
            ctrl.observe(bad, Report(time_s=1.0, samples=10))
    assert snapshot(ctrl) == before


def test_a_lone_string_is_refused_where_a_list_of_ids_is_expected():
    # Prepare: "ab" would otherwise be read as the two participants "a" and "b"
    ctrl = AllocationController(10)
    ctrl.allocate(["a", "b"])
    before = snapshot(ctrl)
    # Execute / Assert
    for call in (ctrl.allocate, ctrl.costs, ctrl.forget, ctrl.prune):
        with pytest.raises(ValueError, match=r"pass \['ab'\] for one participant"):
            call("ab")
    assert snapshot(ctrl) == before


def test_costs_registers_nobody():
    ctrl = AllocationController(10)
    ctrl.observe("a", Report(time_s=1.0, samples=10))
    ctrl.costs(["a", "b", "c"])
    assert json.loads(snapshot(ctrl))["ids"] == ["a"]


# ----------------------------------------------------------------------------- constructor property
hostile_numbers = st.one_of(
    st.integers(-5, 10**6), st.just(2**53), st.just(2**63), st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.just("3"), st.none(),
)


@settings(max_examples=300, deadline=None)
@given(budget=hostile_numbers, smoothing=hostile_numbers, deadband=hostile_numbers, cost_clip=hostile_numbers,
       w_time=hostile_numbers, w_energy=hostile_numbers, min_quota=hostile_numbers, max_quota=hostile_numbers,
       forget_after=hostile_numbers)
def test_property_constructor_refuses_with_value_error_only(**kwargs):
    try:
        ctrl = AllocationController(**kwargs)
    except ValueError as err:
        assert re.search(r"budget|smoothing|deadband|cost_clip|w_time|w_energy|min_quota|max_quota|forget_after",
                         str(err))
        return
    assert 0 <= ctrl.budget <= MAX_BUDGET
    json.dumps(ctrl.state_dict())
