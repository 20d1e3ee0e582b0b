"""AllocationController.set_min_quota: one participant's lower bound, set and removed later."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flwr_adaptive.controller import AllocationController, Report

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def observe_all(ctrl: AllocationController, per_sample: dict) -> None:
    for pid, tau in per_sample.items():
        ctrl.observe(pid, Report(time_s=10 * tau, samples=10))


def test_a_floor_set_later_binds_and_removing_it_restores_the_default():
    # Prepare: "slow" costs 1000x the others (clipped at cost_clip=100): the split gives it 5 of 1000.
    ctrl = AllocationController(1000, deadband=0.0)
    observe_all(ctrl, {"a": 1.0, "b": 1.0, "slow": 1000.0})
    unfloored = ctrl.allocate(["a", "b", "slow"])
    assert unfloored["slow"] == 5

    # Execute: a floor of 100 samples for the registered slot, then none.
    ctrl.set_min_quota("slow", 100)
    floored = ctrl.allocate(["a", "b", "slow"])
    ctrl.set_min_quota("slow", None)
    restored = ctrl.allocate(["a", "b", "slow"])

    # Assert: hand-computed: the floor binds and the rest is split 1:1; then the split without it.
    assert floored == {"a": 450, "b": 450, "slow": 100}
    assert restored == unfloored


def test_a_floor_set_before_the_participant_is_seen_applies_at_its_registration():
    ctrl = AllocationController(1000, deadband=0.0)
    ctrl.set_min_quota("new", 300)
    observe_all(ctrl, {"a": 1.0, "b": 1.0})

    quotas = ctrl.allocate(["a", "b", "new"])

    assert quotas["new"] >= 300 and sum(quotas.values()) == 1000


def test_a_changed_floor_releases_the_deadband():
    # Prepare: a wide deadband holds the split while nothing changes.
    ctrl = AllocationController(1000, deadband=0.5)
    observe_all(ctrl, {"a": 1.0, "b": 1.0, "slow": 1000.0})
    first = ctrl.allocate(["a", "b", "slow"])
    observe_all(ctrl, {"a": 1.0, "b": 1.0, "slow": 1000.0})

    # Execute: a floor far above the held quota.
    ctrl.set_min_quota("slow", 200)
    second = ctrl.allocate(["a", "b", "slow"])

    # Assert: the held split breaks the new bound, so it is not kept.
    assert first["slow"] < 200
    assert second["slow"] == 200 and sum(second.values()) == 1000


def test_a_floor_above_the_participants_cap_is_refused_naming_it():
    ctrl = AllocationController(1000, deadband=0.0)
    ctrl.set_max_quota("slow", 50)
    ctrl.set_min_quota("slow", 60)

    with pytest.raises(ValueError, match=r"'slow'.*min_quota 60 exceeds max_quota 50"):
        ctrl.allocate(["a", "slow"])


def test_an_invalid_floor_is_refused_naming_the_participant():
    ctrl = AllocationController(1000)
    with pytest.raises(ValueError, match="min_quota for participant 'x'"):
        ctrl.set_min_quota("x", -1)


def test_floors_summing_above_the_budget_fail_loudly_and_register_nobody():
    # The controller does not scale an infeasible floor: it refuses the split (the strategies cap
    # each node's step floor at the equal share, so theirs always fit; tests/test_step_floor.py).
    ctrl = AllocationController(100, deadband=0.0)
    ctrl.set_min_quota("a", 60)
    ctrl.set_min_quota("b", 60)

    with pytest.raises(ValueError, match="min_quota"):
        ctrl.allocate(["a", "b"])
    assert ctrl.current == {}


@PROPERTY
@given(
    st.lists(st.floats(1e-3, 1.0), min_size=2, max_size=12),
    st.integers(0, 5000),
    st.data(),
)
def test_property_budget_is_conserved_and_every_quota_meets_its_floor(per_sample, budget, data):
    # Prepare: random costs; a random floor (or none) per participant, set after the first split.
    ids = list(range(len(per_sample)))
    ctrl = AllocationController(budget, deadband=0.0, min_quota=0)
    observe_all(ctrl, dict(zip(ids, per_sample)))
    ctrl.allocate(ids)
    floors = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 1000)), min_size=len(ids), max_size=len(ids)))
    for pid, floor in zip(ids, floors):
        ctrl.set_min_quota(pid, floor)
    lower = [0 if f is None else f for f in floors]  # None: the default min_quota=0

    # Execute / Assert: feasible floors give an exact split above them; infeasible ones raise.
    if sum(lower) <= budget:
        quotas = ctrl.allocate(ids)
        assert sum(quotas.values()) == budget
        assert all(quotas[p] >= lo for p, lo in zip(ids, lower))
    else:
        before = ctrl.current
        with pytest.raises(ValueError, match="min_quota"):
            ctrl.allocate(ids)
        assert ctrl.current == before
