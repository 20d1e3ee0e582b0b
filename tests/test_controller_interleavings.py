"""AllocationController under random interleavings of hostile calls (a hypothesis state machine).

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
from hypothesis import HealthCheck, settings
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

from controller_support import snapshot


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
