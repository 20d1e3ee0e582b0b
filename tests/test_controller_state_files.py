"""AllocationController state files: a tampered, foreign or non-state file is refused naming the field
(and the fix: delete the state file) without changing the controller; a version-1 file is converted."""

from __future__ import annotations

import json

import pytest

from flwr_adaptive.controller import AllocationController, Report

from controller_support import snapshot


def saved_state() -> tuple[AllocationController, dict]:
    ctrl = AllocationController(100, deadband=0.0)
    ctrl.observe("a", Report(time_s=1.0, samples=10))
    ctrl.observe(2, Report(time_s=3.0, samples=10))
    ctrl.allocate(["a", 2])
    ctrl.set_max_quota("a", 90)
    return ctrl, json.loads(json.dumps(ctrl.state_dict()))


_WINDOWS = [[[10, 2.0, 3.0]] * 6] * 2  # fit windows of both participants (what drift detection keeps)
_LINES = [[None] * 4] * 2


@pytest.mark.parametrize(
    "corrupt, field",
    [
        (lambda s: s.update(time_per_sample=[-0.1, 0.3]), "time_per_sample[0]"),
        (lambda s: s.update(time_per_sample=[0.0, 0.3]), "time_per_sample[0]"),
        (lambda s: s.update(time_per_sample=[0.1, "0.3"]), "time_per_sample[1]"),
        (lambda s: s.update(time_per_sample=[0.1, 1e999]), "time_per_sample[1]"),
        (lambda s: s.update(time_per_sample=[0.1]), "time_per_sample"),
        (lambda s: s.update(energy_per_sample=[None, None, None]), "energy_per_sample"),
        (lambda s: s.update(ids=["a", "a"]), "ids"),
        (lambda s: s.update(ids=["a", 2.5]), "ids[1]"),
        (lambda s: s.update(unanswered=[0, -1]), "unanswered[1]"),
        (lambda s: s.update(round=-3), "round"),
        (lambda s: s.pop("unanswered"), "unanswered"),
        (lambda s: s.update(max_quota=[["a", -5]]), "max_quota[0]"),
        (lambda s: s.update(max_quota=[["a"]]), "max_quota"),
        (lambda s: s["current"].update(quota=[60, 60]), "current.quota"),
        (lambda s: s["current"].update(quota=[100]), "current.quota"),
        (lambda s: s["current"].update(slots=[0, 7]), "current.slots[1]"),
        (lambda s: s["current"].update(slots=[0, 0]), "current.slots"),
        (lambda s: s["current"].update(groups=["x", "y"]), "current.groups"),
        (lambda s: s.update(groups=[["a", "s"]], budget=[["s", 100]]), "groups"),
        (lambda s: s["policy"].update(w_time=0.75, w_energy=0.25), "policy"),
        (lambda s: s["policy"].update(objective="min-energy"), "policy"),
        (lambda s: s.update(model={"history": [[[1, 2, 3]] * 5], "fit": []}), "model.history"),
        (lambda s: s.update(model={"history": [[[10, -2.0, 3]] * 6], "fit": [[None] * 4]}), "model.history"),
        (lambda s: s.update(model={"history": [[[10, 2.0, 3]] * 6], "fit": []}), "model.fit"),
        (lambda s: s.update(model={"history": [], "fit": [], "idle_w": [["a", -1.0]]}), "model.idle_w[0]"),
        (lambda s: s.update(current=[]), "current"),
        (lambda s: s["model"].update(scatter_slots=[0]), "model.scatter_slots"),  # no fit windows
        (lambda s: s["model"].update(scatter_slots="0"), "model.scatter_slots"),
        (lambda s: s["model"].update(history=_WINDOWS, fit=_LINES, scatter_slots=[1, 2]), "model.scatter_slots[1]"),
        (lambda s: s["model"].update(history=_WINDOWS, fit=_LINES, scatter_slots=[True]), "model.scatter_slots[0]"),
        (lambda s: s["model"].update(history=_WINDOWS, fit=_LINES, scatter_slots=[1, 1]), "model.scatter_slots"),
    ],
)
def test_tampered_state_is_refused_naming_the_field_and_changes_nothing(corrupt, field):
    # Prepare: a controller in a known state, and a tampered copy of a saved state.
    _, state = saved_state()
    corrupt(state)
    ctrl = AllocationController(100, deadband=0.0)
    ctrl.observe("z", Report(time_s=1.0, samples=10))
    ctrl.allocate(["z"])
    before = snapshot(ctrl)

    # Execute
    with pytest.raises(ValueError) as err:
        ctrl.load_state_dict(state)

    # Assert
    assert f"controller state field {field!r}" in str(err.value)
    assert "delete the state file" in str(err.value)
    assert snapshot(ctrl) == before


@pytest.mark.parametrize("state", [None, [], "garbage", {"version": 99}, {}])
def test_state_that_is_not_a_state_is_refused(state):
    ctrl = AllocationController(100)
    with pytest.raises(ValueError, match="controller state"):
        ctrl.load_state_dict(state)


def test_state_saved_under_another_policy_is_refused():
    _, state = saved_state()
    ctrl = AllocationController.from_policy("low-energy", 100)
    with pytest.raises(ValueError, match=r"'policy': saved under \{'w_time': 1.0, 'w_energy': 0.0, .*"
                                         r"this controller has \{'w_time': 0.75, 'w_energy': 0.25, .*another policy"):
        ctrl.load_state_dict(state)


def test_version_1_state_is_converted_rounds_since_last_report_become_unanswered_quotas():
    # A version-1 state: "b" last reported 2 rounds ago, "a" in the last round, "c" never.
    v1 = {
        "version": 1, "round": 5, "ids": ["a", "b", "c"],
        "time_per_sample": [0.1, 0.2, None], "energy_per_sample": [None, None, None],
        "last_report": [5, 3, -1], "max_quota": [],
        "current": {"slots": [0, 1, 2], "quota": [50, 25, 25], "min_quota": [1, 1, 1],
                    "max_quota": [2**63 - 1] * 3, "budget": 100, "groups": None},
        "groups": None, "budget": 100,
    }
    ctrl = AllocationController(100, deadband=0.0, forget_after=3)

    ctrl.load_state_dict(v1)
    first = ctrl.allocate(["a", "b", "c"])  # b: 2 unanswered, still fresh
    second = ctrl.allocate(["a", "b", "c"])  # b: 3 unanswered → forgotten; a: 2

    assert json.loads(snapshot(ctrl))["version"] == 2
    assert first["a"] > first["b"]
    assert "b" not in ctrl.estimates() and "a" in ctrl.estimates()
    assert second["b"] == second["c"]
