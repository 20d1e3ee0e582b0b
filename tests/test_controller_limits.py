"""AllocationController under hostile input: limits, refused calls, state files, ageing, pruning.

The stateful property test drives one controller through random interleavings of joins,
leaves, bounds, groups, budgets up to ``MAX_BUDGET``, hostile reports and state round trips, and
checks after every step what the controller promises: exact per-group sums within bounds, no
exception other than a ``ValueError`` naming the field, a JSON round trip that changes nothing,
and a state left exactly as it was by every refused call.
"""

from __future__ import annotations

import copy
import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from flwr_adaptive.controller import (
    MAX_BUDGET,
    MAX_PER_SAMPLE,
    MIN_PER_SAMPLE,
    POLICIES,
    AllocationController,
    Report,
)


def snapshot(ctrl: AllocationController) -> str:
    return json.dumps(ctrl.state_dict(), sort_keys=True)


def report_for(n: int, per_sample_s: float, per_sample_j: float | None = None) -> Report:
    return Report(time_s=n * per_sample_s, energy_j=None if per_sample_j is None else n * per_sample_j, samples=n)


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


# ----------------------------------------------------------------------------- state files
def saved_state() -> tuple[AllocationController, dict]:
    ctrl = AllocationController(100, deadband=0.0)
    ctrl.observe("a", Report(time_s=1.0, samples=10))
    ctrl.observe(2, Report(time_s=3.0, samples=10))
    ctrl.allocate(["a", 2])
    ctrl.set_max_quota("a", 90)
    return ctrl, json.loads(json.dumps(ctrl.state_dict()))


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


# ----------------------------------------------------------------------------- ageing by own history
def test_node_sampled_every_tenth_round_keeps_its_estimate():
    # Prepare: 20 nodes, 2 sampled per round in turn; node k costs (k + 1) ms per sample.
    ctrl = AllocationController(200, deadband=0.0, forget_after=3)
    per_sample = {k: 1e-3 * (k + 1) for k in range(20)}

    # Execute: 40 rounds, each node trains in 4 of them.
    measured_when_sampled = []
    for rnd in range(40):
        sampled = [2 * (rnd % 10), 2 * (rnd % 10) + 1]
        known = ctrl.estimates()
        measured_when_sampled += [p in known for p in sampled]
        quotas = ctrl.allocate(sampled)
        for p in sampled:
            ctrl.observe(p, report_for(quotas[p], per_sample[p]))

    # Assert: after the first pass every returning node still had its estimate.
    assert all(measured_when_sampled[20:])
    assert quotas[18] > quotas[19]  # split by their estimates (19 vs 20 ms per sample), not equal


def test_node_left_unanswered_forget_after_times_is_new_again():
    # Prepare: "a" answers every quota; "slow" (9× slower) answers none after its first report.
    ctrl = AllocationController(100, deadband=0.0, forget_after=2)
    ctrl.observe("slow", report_for(10, 9.0))

    def round_(ids):
        quotas = ctrl.allocate(ids)
        ctrl.observe("a", report_for(quotas["a"], 1.0))
        return quotas

    round_(["a"])  # slow is not asked: it does not age
    round_(["a"])
    assert "slow" in ctrl.estimates()

    # Execute
    asked_once = round_(["a", "slow"])  # 1 unanswered
    asked_twice = round_(["a", "slow"])  # 2 unanswered: forgotten at the next allocate
    after = round_(["a", "slow"])

    # Assert: split by its estimate while fresh, then the median (a's) like a newcomer.
    assert asked_once == asked_twice == {"a": 90, "slow": 10}
    assert after == {"a": 50, "slow": 50}


def test_zero_quota_does_not_count_as_unanswered():
    # "slow" gets 0 samples (min_quota=0, cost clipped high) and so cannot answer.
    ctrl = AllocationController(10, deadband=0.0, forget_after=1, min_quota=0, cost_clip=1000.0)
    ctrl.observe("slow", report_for(10, 1000.0))
    ctrl.observe("a", report_for(10, 1.0))
    for _ in range(3):
        quotas = ctrl.allocate(["a", "slow"])
        ctrl.observe("a", report_for(quotas["a"], 1.0))
    assert quotas["slow"] == 0 and "slow" in ctrl.estimates()


# ----------------------------------------------------------------------------- bounded state
def test_forget_and_prune_drop_participants_and_a_returning_one_is_new():
    ctrl = AllocationController(90, deadband=0.0)
    for pid, tau in (("a", 1.0), ("b", 2.0), ("gone", 9.0)):
        ctrl.observe(pid, report_for(10, tau))
    ctrl.set_max_quota("gone", 5)
    ctrl.allocate(["a", "b", "gone"])

    ctrl.forget(["gone", "never-seen"])
    assert set(ctrl.estimates()) == {"a", "b"} and ctrl.current == {}
    assert ctrl.prune(keep=["a"], config=True) == ["b", "gone"]  # gone: its max_quota entry

    state = json.loads(snapshot(ctrl))
    assert state["ids"] == ["a"] and state["max_quota"] == []
    assert ctrl.allocate(["a", "gone"]) == {"a": 45, "gone": 45}  # a's estimate is the median


def test_slots_without_estimate_do_not_accumulate_under_node_id_churn():
    # Prepare: every round 10 new node ids are allocated and only half of them ever report.
    ctrl = AllocationController(1000, deadband=0.0)
    sizes = []

    # Execute: 200 rounds of churn; the strategy prunes nodes after 5 rounds of absence.
    for rnd in range(200):
        nodes = [f"node-{rnd}-{k}" for k in range(10)]
        quotas = ctrl.allocate(nodes)
        for k, p in enumerate(nodes):
            if k % 2 == 0:
                ctrl.observe(p, report_for(quotas[p], 1e-3 * (k + 1)))
        if rnd >= 5:
            ctrl.forget([f"node-{rnd - 5}-{k}" for k in range(10)])
        sizes.append(len(json.loads(snapshot(ctrl))["ids"]))

    # Assert: bounded by the live window (5 rounds × 5 reporters + the current 10), not growing.
    assert max(sizes) <= 40
    assert sizes[-1] == sizes[100]


def test_first_round_registration_in_bulk_matches_one_by_one():
    ids = [f"n{k}" for k in range(500)]
    bulk, single = AllocationController(5000, deadband=0.0), AllocationController(5000, deadband=0.0)
    for k, p in enumerate(ids):
        bulk.observe(p, report_for(10, 1e-3 * (1 + k % 7)))
        single.observe(p, report_for(10, 1e-3 * (1 + k % 7)))
        single.estimates()  # flushes: registers this one participant
    assert bulk.allocate(ids) == single.allocate(ids)
    assert bulk.state_dict() == single.state_dict()


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


# ----------------------------------------------------------------------------- stateful property
POOL = [0, 1, 2, 3, "a", "b", "c", "node-9"]
GROUP_NAMES = ["s1", "s2", 7]
valid_times = st.floats(1e-4, 1e3)
hostile_times = st.sampled_from([5e-324, 1e-320, 0.0, -1.0, math.nan, math.inf, 1e308, 10**400, "1.0", True])
valid_samples = st.integers(1, 10_000)
hostile_samples = st.sampled_from([0, -3, MAX_BUDGET + 1, 10**400, 2.5, True, np.int64(7), MAX_BUDGET])
energies = st.one_of(st.none(), st.floats(0.0, 1e3), st.sampled_from([5e-324, -1.0, math.nan, math.inf, 0.0]))
budgets = st.one_of(st.integers(0, 300), st.sampled_from([MAX_BUDGET, MAX_BUDGET - 1, 2**52 + 1]))
bounds = st.one_of(st.integers(0, 60), st.sampled_from([2**63, 10**19, MAX_BUDGET]))


def expected_report_ok(w_energy: float, t, e, n) -> bool:
    """The controller's contract for one report, restated independently."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_BUDGET:
        return False
    if isinstance(t, bool) or not isinstance(t, (int, float)) or isinstance(t, int) and abs(t) > 1e308:
        return False
    if not (math.isfinite(t) and MIN_PER_SAMPLE <= t / int(n) <= MAX_PER_SAMPLE):
        return False
    if e is None:
        return w_energy == 0
    if not (math.isfinite(e) and e >= 0):
        return False
    return w_energy == 0 or MIN_PER_SAMPLE <= e / int(n) <= MAX_PER_SAMPLE


class ControllerMachine(RuleBasedStateMachine):
    """A model of bounds, groups and budgets next to a real controller."""

    @initialize(
        policy=st.sampled_from(sorted(POLICIES)),
        grouped=st.booleans(),
        budget=budgets,
        group_budgets=st.dictionaries(st.sampled_from(GROUP_NAMES), budgets, min_size=1),
        min_quota=st.one_of(st.integers(0, 3), st.dictionaries(st.sampled_from(POOL), st.integers(0, 40))),
        max_quota=st.one_of(st.none(), bounds, st.dictionaries(st.sampled_from(POOL), bounds)),
        deadband=st.sampled_from([0.0, 0.05, 0.3]),
        forget_after=st.integers(1, 3),
        cost_clip=st.sampled_from([1.0, 100.0, 1e12]),
        data=st.data(),
    )
    def build(self, policy, grouped, budget, group_budgets, min_quota, max_quota, deadband, forget_after,
              cost_clip, data):
        if isinstance(min_quota, int) and isinstance(max_quota, int) and max_quota < min_quota:
            max_quota = min_quota
        self.kwargs = dict(POLICIES[policy].controller_kwargs(), deadband=deadband, min_quota=min_quota,
                           max_quota=max_quota, forget_after=forget_after, cost_clip=cost_clip)
        if grouped:
            self.groups = {q: data.draw(st.sampled_from(sorted(group_budgets, key=repr))) for q in
                           data.draw(st.lists(st.sampled_from(POOL), unique=True))}
            self.budget = dict(group_budgets)
            self.kwargs.update(budget=dict(self.budget), groups=dict(self.groups))
        else:
            self.groups, self.budget = None, budget
            self.kwargs.update(budget=budget)
        self.ctrl = AllocationController(**self.kwargs)
        self.min_default = min_quota if isinstance(min_quota, int) else 0
        self.min_map = {} if isinstance(min_quota, int) else dict(min_quota)
        self.max_default = max_quota if isinstance(max_quota, int) else None
        self.max_map = dict(max_quota) if isinstance(max_quota, dict) else {}
        self.live: list = []

    # -- the model
    def lo(self, p) -> int:
        return self.min_map.get(p, self.min_default)

    def hi(self, p) -> float:
        bound = self.max_map.get(p, self.max_default)
        return math.inf if bound is None else min(bound, MAX_BUDGET)

    def feasible(self) -> bool:
        if any(self.lo(p) > self.hi(p) for p in self.live):
            return False
        if self.groups is None:
            members = {None: self.live} if self.live else {}
            budget = {None: self.budget}
        else:
            if any(p not in self.groups for p in self.live):
                return False
            members = {}
            for p in self.live:
                members.setdefault(self.groups[p], []).append(p)
            budget = self.budget
        return all(sum(self.lo(p) for p in ps) <= budget[g] <= sum(self.hi(p) for p in ps)
                   for g, ps in members.items())

    def refused(self, call, pattern: str) -> bool:
        """Run ``call``; on a ValueError check it names a field and changed nothing. True if refused."""
        before = snapshot(self.ctrl)
        try:
            call()
        except ValueError as err:
            assert re.search(pattern, str(err)), str(err)
            assert snapshot(self.ctrl) == before
            return True
        return False

    # -- rules
    @rule(p=st.sampled_from(POOL))
    def join(self, p):
        if p not in self.live:
            self.live.append(p)

    @rule(data=st.data())
    def leave(self, data):
        if self.live:
            self.live.remove(data.draw(st.sampled_from(self.live)))

    @rule(p=st.one_of(st.sampled_from(POOL), st.sampled_from([1.5, True, None, np.int64(2)])),
          t=st.one_of(valid_times, hostile_times), n=st.one_of(valid_samples, hostile_samples), e=energies)
    def observe(self, p, t, n, e):
        ok = expected_report_ok(self.ctrl.w_energy, t, e, n) and (type(p) in (str, int) or isinstance(p, np.integer))
        if isinstance(t, (int, float)) and not isinstance(t, bool) and not isinstance(n, bool) \
                and isinstance(n, (int, np.integer)) and n > 0 and ok:
            t = t  # a valid report: keep as drawn
        refused = self.refused(lambda: self.ctrl.observe(p, Report(time_s=t, energy_j=e, samples=n)),
                               r"participant|time_s|samples|energy_j")
        assert refused == (not ok), (p, t, e, n)

    @rule(p=st.sampled_from(POOL), bound=st.one_of(st.none(), bounds, st.sampled_from([-1, 2.5])))
    def set_max_quota(self, p, bound):
        refused = self.refused(lambda: self.ctrl.set_max_quota(p, bound), r"max_quota")
        ok = bound is None or (isinstance(bound, int) and bound >= 0)
        assert refused == (not ok)
        if ok:
            if bound is None:
                self.max_map.pop(p, None)
            else:
                self.max_map[p] = bound

    @precondition(lambda self: self.groups is not None)
    @rule(p=st.sampled_from(POOL), g=st.one_of(st.sampled_from(GROUP_NAMES), st.just((1, 2))),
          budget=st.one_of(st.none(), budgets, st.sampled_from([MAX_BUDGET + 1, -1])))
    def set_group(self, p, g, budget):
        refused = self.refused(lambda: self.ctrl.set_group(p, g, budget), r"group|budget")
        ok = isinstance(g, (str, int)) and (
            (budget is None and g in self.budget) or (budget is not None and 0 <= budget <= MAX_BUDGET))
        assert refused == (not ok)
        if ok:
            self.groups[p] = g
            if budget is not None:
                self.budget[g] = budget

    @rule()
    def allocate(self):
        feasible = self.feasible()
        quotas = None

        def call():
            nonlocal quotas
            quotas = self.ctrl.allocate(list(self.live))

        refused = self.refused(call, r"min_quota|max_quota|budget|group")
        assert refused == (not feasible)
        if refused:
            return
        assert list(quotas) == self.live and all(type(q) is int for q in quotas.values())
        for p, q in quotas.items():
            assert self.lo(p) <= q <= self.hi(p)
        if self.groups is None:
            assert not self.live or sum(quotas.values()) == self.budget
        else:
            for g in {self.groups[p] for p in self.live}:
                assert sum(q for p, q in quotas.items() if self.groups[p] == g) == self.budget[g]

    @rule(data=st.data())
    def report_on_quotas(self, data):
        """The live participants that got samples report plausible times (what a round looks like)."""
        for p, q in self.ctrl.current.items():
            if q > 0 and data.draw(st.booleans()):
                energy = None if self.ctrl.w_energy == 0 and data.draw(st.booleans()) else q * 1e-2
                self.ctrl.observe(p, Report(time_s=q * data.draw(valid_times) / 1e3, energy_j=energy, samples=q))

    @rule()
    def json_round_trip(self):
        state = json.loads(json.dumps(self.ctrl.state_dict()))
        fresh = AllocationController(**self.kwargs)
        fresh.load_state_dict(copy.deepcopy(state))
        assert json.loads(snapshot(fresh)) == state
        self.ctrl = fresh

    @rule(data=st.data())
    def tampered_state(self, data):
        state = json.loads(json.dumps(self.ctrl.state_dict()))
        field = data.draw(st.sampled_from(sorted(state)))
        good = json.loads(json.dumps(state))
        state[field] = data.draw(st.one_of(st.none(), st.integers(-2, 3), st.just([]), st.just([None, -1.0]),
                                           st.just({"slots": [0]}), st.just("x"), st.just([[0, 0]])))
        if not self.refused(lambda: self.ctrl.load_state_dict(state), r"controller state"):
            self.ctrl.load_state_dict(good)  # a harmless edit was accepted: back to what the model knows
            assert json.loads(snapshot(self.ctrl)) == good

    @rule(data=st.data())
    def forget_or_prune(self, data):
        if data.draw(st.booleans()):
            self.ctrl.forget(data.draw(st.lists(st.sampled_from(POOL), max_size=3)))
        else:
            self.ctrl.prune(keep=self.live)
        assert set(json.loads(snapshot(self.ctrl))["ids"]) <= set(POOL)


# 250 runs of up to 60 steps: about 12,000 rule invocations (hypothesis ends some runs early),
# the ≥ 10,000 random cases, in about 8 s on one core.
ControllerMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_property_controller_under_hostile_interleavings = ControllerMachine.TestCase
