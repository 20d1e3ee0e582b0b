"""Round timeouts from the prediction: k × the predicted makespan within [floor, ceiling]; a late node is a timeout."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from adaptive_support import FakeGrid
from flwr_adaptive import keys
from flwr_adaptive.strategies import AdaptiveStrategy
from flwr_adaptive.strategies.round_timeout import RoundTimeout, TimedGrid
from test_strategy_core import play_round, quotas_of, reply, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

NODES = [501, 502, 503, 504]
PARTS = {501: 0, 502: 1, 503: 2, 504: 3}
COSTS = {0: 0.01, 1: 0.01, 2: 0.02, 3: 0.04}  # seconds per sample: slowdowns 1, 1, 2, 4


def _strategy(timeout: RoundTimeout | None) -> AdaptiveStrategy:
    from flwr.serverapp.strategy import FedAvg

    return AdaptiveStrategy(FedAvg(min_train_nodes=1, min_available_nodes=1), budget=800, deadband=0.0,
                            round_timeout=timeout)


def test_the_timeout_is_factor_times_the_prediction_clipped_to_floor_and_ceiling():
    rt = RoundTimeout(factor=3, floor_s=10, ceiling_s=100)
    assert rt.seconds(2.0) == 10.0 and rt.seconds(5.0) == 15.0 and rt.seconds(50.0) == 100.0
    assert rt.seconds(None) == 100.0 and rt.seconds(float("nan")) == 100.0  # nothing predicted yet: ceiling
    for bad, match in [(dict(factor=1.0), "factor=1.0 must be > 1"), (dict(floor_s=0), "0 < floor_s <= ceiling_s"),
                       (dict(floor_s=20, ceiling_s=10), "0 < floor_s <= ceiling_s"),
                       (dict(ceiling_s=float("inf")), "ceiling_s=inf must be a finite number")]:
        with pytest.raises(ValueError, match=match):
            RoundTimeout(**bad)
    with pytest.raises(ValueError, match="round_timeout must be a .*RoundTimeout"):
        _strategy(3.0)


def test_each_round_s_timeout_follows_the_controller_s_predicted_makespan():
    strategy, grid = _strategy(RoundTimeout(factor=3, floor_s=0.5, ceiling_s=600)), FakeGrid(NODES)
    q1, _ = play_round(strategy, grid, 1, COSTS, PARTS)
    assert strategy.round_timeout_s() == 600.0  # round 1: no estimate, the ceiling
    for rnd in (2, 3):
        q, _ = play_round(strategy, grid, rnd, COSTS, PARTS)
    from flwr.app import ArrayRecord, ConfigRecord

    msgs = list(strategy.configure_train(4, ArrayRecord([np.zeros(2)]), ConfigRecord({}), grid))
    q4 = quotas_of(msgs)
    # exact per-sample costs: the slowest node's compute is max(q × cost) (no overhead observed here)
    predicted = max(q4[n] * COSTS[PARTS[n]] for n in NODES)
    assert strategy.round_timeout_s() == pytest.approx(3 * predicted, rel=1e-6)
    assert 3 * predicted > 0.5  # the factor decided, not the floor


class RecordingGrid(FakeGrid):
    """A grid whose send_and_receive answers every node but ``late`` and records the timeout it got."""

    def __init__(self, node_ids, late=None):
        super().__init__(node_ids)
        self.late, self.timeouts = late, []

    def send_and_receive(self, messages, *, timeout=None):
        self.timeouts.append(timeout)
        return [reply(m, telemetry(m.content["config"][keys.QUOTA], 0.01 * m.content["config"][keys.QUOTA],
                                   PARTS[m.metadata.dst_node_id]))
                for m in messages if m.metadata.dst_node_id != self.late]


def test_a_late_node_misses_the_predicted_timeout_is_logged_and_put_on_probation(caplog):
    from flwr.app import ArrayRecord, ConfigRecord

    caplog.set_level(logging.INFO, logger="flwr")
    strategy = _strategy(RoundTimeout(factor=2, floor_s=0.1, ceiling_s=60))
    grid = RecordingGrid(NODES)
    timed = strategy.timed_grid(grid)
    assert isinstance(timed, TimedGrid) and strategy.timed_grid(timed) is timed
    arrays = ArrayRecord([np.zeros(2)])
    for rnd in (1, 2):
        msgs = list(strategy.configure_train(rnd, arrays, ConfigRecord({}), timed))
        strategy.aggregate_train(rnd, timed.send_and_receive(msgs, timeout=3600))
    assert grid.timeouts[0] == 60.0  # round 1: the ceiling (below start's 3600)
    # round 3: partition 3's node hangs
    grid.late = 504
    msgs = list(strategy.configure_train(3, arrays, ConfigRecord({}), timed))
    q3 = quotas_of(msgs)
    caplog.clear()
    strategy.aggregate_train(3, timed.send_and_receive(msgs, timeout=3600))
    expected = 2 * max(q3[n] * 0.01 for n in NODES)
    assert grid.timeouts[-1] == pytest.approx(expected, rel=1e-6)
    late = [r.getMessage() for r in caplog.records if "no reply from" in r.getMessage()]
    assert late == [f"[adaptive] round 3: no reply from partition 3 (node 504) (late: past the round timeout of "
                    f"{expected:.1f} s = 2 x the predicted {expected / 2:.1f} s within [0.1, 60] s); skipped, "
                    "on probation next round"]
    q4 = quotas_of(strategy.configure_train(4, arrays, ConfigRecord({}), timed))
    assert q4[504] == 1 and sum(q4.values()) == 800  # probation: the probe quota, the others take the rest


def test_without_the_option_the_timeout_is_the_caller_s():
    from flwr.app import ArrayRecord, ConfigRecord

    strategy = _strategy(None)
    grid = RecordingGrid(NODES)
    assert strategy.timed_grid(grid) is grid and strategy.round_timeout_s() is None  # Flower's own loop
    strategy.server_time = True  # the server-side times want the TimedGrid's stamps
    timed = strategy.timed_grid(grid)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), timed))
    timed.send_and_receive(msgs, timeout=3600)
    assert isinstance(timed, TimedGrid) and grid.timeouts == [3600]


class FlowerLikeGrid:
    """Push/pull like Flower's grids (a module name under ``flwr.``): node i's reply is ready after
    ``ready[i]`` seconds of a fake clock that each sleep advances."""

    __module__ = "flwr.fake_grid"

    def __init__(self, clock, ready):
        self.clock, self.ready, self.pushed, self.pulls = clock, ready, {}, 0

    def get_node_ids(self):
        return list(NODES)

    def push_messages(self, messages):
        ids = []
        for i, m in enumerate(messages):
            m.metadata.__dict__["_message_id"] = f"m{i}"
            self.pushed[f"m{i}"] = (m, self.clock.now)
            ids.append(f"m{i}")
        return ids

    def pull_messages(self, ids):
        self.pulls += 1
        out = []
        for i in list(ids):
            m, t0 = self.pushed[i]
            if self.clock.now - t0 >= self.ready[m.metadata.dst_node_id]:
                out.append(reply(m, telemetry(m.content["config"][keys.QUOTA], 1.0, PARTS[m.metadata.dst_node_id],
                                              virtual=0)))
        return out


class FakeClock:
    """The ServerApp's wall clock in the tests below: each sleep advances it (``clock`` fixture)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    from flwr_adaptive.strategies import round_timeout as rt

    fake = FakeClock()
    monkeypatch.setattr(rt.time, "time", lambda: fake.now)  # the time module itself: the grids' sleeps too
    monkeypatch.setattr(rt.time, "sleep", fake.sleep)
    return fake


def test_replies_are_pulled_every_half_second_and_timed_on_the_server_s_clock(clock):
    from flwr.app import ArrayRecord, ConfigRecord

    strategy = _strategy(RoundTimeout(factor=2, floor_s=5, ceiling_s=60))
    grid = FlowerLikeGrid(clock, {501: 1.2, 502: 2.0, 503: 3.1, 504: 70.0})
    timed = strategy.timed_grid(grid)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), timed))
    strategy._sent_at = clock.now  # configure_train stamped the wall clock; the fake clock starts here
    replies = list(timed.send_and_receive(msgs, timeout=3600))
    # node 504 hangs: the round stops at the ceiling (60 s, round 1), not at start's 3600 s
    answered = {grid.pushed[r.metadata.reply_to_message_id][0].metadata.dst_node_id for r in replies}
    assert answered == {501, 502, 503}
    assert clock.now - 1000.0 == pytest.approx(60.0)
    strategy.aggregate_train(1, replies)
    # each arrival on the server's clock, to the next 0.5-s pull (Flower's own loop: 3-s steps)
    observed = strategy.observed_seconds(list(strategy._believed.values()))
    assert {n: round(v, 1) for n, v in observed.items()} == {501: 1.5, 502: 2.0, 503: 3.5}


class DeploymentLikeGrid(FlowerLikeGrid):
    """Named like Flower's grid to a SuperLink in another process (``flwr run``'s ServerApp)."""

    __module__ = "flwr.superlink.grid.http_grid"

    def send_and_receive(self, messages, *, timeout=None):
        """Flower's own loop: push, then pull every 3 s until every reply is in (no arrival times)."""
        pending, replies = set(self.push_messages(messages)), []
        while pending:
            got = list(self.pull_messages(pending))
            replies += got
            pending -= {m.metadata.reply_to_message_id for m in got}
            if pending:
                time.sleep(3)
        return replies


NO_SERVER_TIMES = "this ServerApp gets no reply times from the SuperLink"


def test_a_deployment_grid_without_server_timing_says_trust_has_no_server_evidence(caplog):
    class InMemoryLikeGrid(FlowerLikeGrid):
        __module__ = "flwr.superlink.grid.inmemory_grid"  # the simulation's: its replies carry delivered_at

    def says(strategy, grid) -> bool:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="flwr"):
            strategy.timed_grid(grid)
        return NO_SERVER_TIMES in caplog.text

    deployment = DeploymentLikeGrid(None, {})
    assert says(_strategy(None), deployment)  # the default: Flower's own loop, no reply times
    assert _strategy(None).timed_grid(deployment) is deployment
    assert "TimedGrid(grid, strategy)" in caplog.text and "docs/security.md" in caplog.text
    assert not says(_strategy(None), InMemoryLikeGrid(None, {}))
    assert not says(_strategy(None), FakeGrid(NODES))  # a test's own grid
    believing = _strategy(None)
    believing.trust = False  # no rule to lose
    assert not says(believing, deployment)
    assert not says(_strategy(RoundTimeout()), deployment)  # the TimedGrid times each reply
    timed = TimedGrid(deployment, _strategy(None))
    assert not says(timed.strategy, timed)  # the caller's own TimedGrid, as the line advises


def test_on_a_timed_deployment_grid_a_time_liar_is_priced_by_the_server_s_clock(clock):
    from flwr.app import ArrayRecord, ConfigRecord

    # every node claims 1 s of compute; node 504's reply takes 14 s (a lie inside the plausible range:
    # the claims alone cannot tell it from the others)
    ready = {501: 1.2, 502: 2.0, 503: 3.1, 504: 14.0}

    def believed_504(timed: bool) -> list[float]:
        strategy = _strategy(None)
        grid = DeploymentLikeGrid(clock, ready)
        used = TimedGrid(grid, strategy) if timed else strategy.timed_grid(grid)
        out = []
        for rnd in (1, 2, 3):
            msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), used))
            strategy._sent_at = clock.now
            strategy.aggregate_train(rnd, list(used.send_and_receive(msgs, timeout=3600)))
            out.append(strategy._believed[504].time_s)
        return out

    # observed − the common overhead (the median of observed − claimed: 1.75 s at 0.5-s pulls) is
    # 12.25 s; from its second strike on the server believes that, not the claimed 1 s
    assert believed_504(timed=True)[1:] == [pytest.approx(12.25), pytest.approx(12.25)]
    assert believed_504(timed=False) == [1.0, 1.0, 1.0]  # Flower's own loop: no reply times, the claim stands


def test_a_claim_longer_than_the_server_s_whole_wait_is_taken_at_the_wait(clock, caplog):
    # Seen through flwr run (helper-62): a claimed time-s of 1e12 was believed silently (it only lowered the
    # liar's own quota; its estimate became 1e12 s over its samples)
    from flwr.app import ArrayRecord, ConfigRecord

    class Boasting(DeploymentLikeGrid):
        __module__ = DeploymentLikeGrid.__module__  # Flower's grid, as the TimedGrid sees it

        def pull_messages(self, ids):
            out = super().pull_messages(ids)
            for r in out:
                if self.pushed[r.metadata.reply_to_message_id][0].metadata.dst_node_id == 504:
                    r.content["metrics"][keys.TIME_S] = 1e12
            return out

    strategy = _strategy(None)
    timed = TimedGrid(Boasting(clock, {501: 1.2, 502: 2.0, 503: 3.1, 504: 2.4}), strategy)
    msgs = list(strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), timed))
    strategy._sent_at = clock.now
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_train(1, list(timed.send_and_receive(msgs, timeout=3600)))
    assert strategy._believed[504].time_s == pytest.approx(2.5)  # its reply, pulled at 2.5 s
    assert any("partition 3 (node 504) claims 1e+12 s of compute, more than the 2.5 s the server waited" in m
               for m in caplog.messages)
