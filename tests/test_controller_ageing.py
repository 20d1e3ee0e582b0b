"""What AllocationController keeps over time: an estimate ages by the participant's own unanswered
quotas (not by rounds it was not asked), ``forget`` / ``prune`` drop participants, and the state
stays bounded under node-id churn."""

from __future__ import annotations

import json

from flwr_adaptive.controller import AllocationController

from controller_support import report_for, snapshot


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
