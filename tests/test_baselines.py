"""The baselines' defining behaviours, through their real Flower code paths, without Ray.

``SimGrid`` stands in for the ServerApp's Grid: each node "trains" in-process and reports the
device time ``quota × its per-sample cost`` (powers of two, so virtual times are exact), active
energy ``active_w × time`` and its idle watts. Flower's own ``Strategy.start`` drives the
synchronous strategies; ``FedAsyncStrategy.start`` drives itself.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from flwr_adaptive.controller import Report
from flwr_adaptive.static_profiling_controller import StaticProfilingController


pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


class SimGrid:
    """In-process nodes ``100 + partition``; every call's messages are recorded in ``sent``.

    Parameters
    ----------
    cost_s : list of float
        Device seconds per sample of each partition.
    active_w, idle_w : list of float, optional
        Watts per partition (default 10 and 1).
    value : list of float, optional
        Each partition returns a model whose every entry is this value (default: the partition id).
    loss : list of float or None
        ``keys.TRAIN_LOSS`` per partition (None: the metric is not sent).
    fail : set of int
        Partitions whose every reply is an error.
    drift : dict, optional
        ``{partition: (from_round, factor)}``: cost × factor for ``keys.ROUND`` >= from_round.
    """

    def __init__(self, cost_s, active_w=None, idle_w=None, value=None, loss=None, fail=(), drift=None):
        n = len(cost_s)
        self.cost_s = list(cost_s)
        self.active_w = list(active_w or [10.0] * n)
        self.idle_w = list(idle_w or [1.0] * n)
        self.value = list(value if value is not None else range(n))
        self.loss = loss if loss is not None else [1.0] * n
        self.fail = set(fail)
        self.drift = dict(drift or {})
        self.partition = {100 + i: i for i in range(n)}
        self.sent: list[dict] = []

    def get_node_ids(self):
        return list(self.partition)

    def time_of(self, pid: int, quota: int, rnd: int) -> float:
        start, factor = self.drift.get(pid, (math.inf, 1.0))
        return quota * self.cost_s[pid] * (factor if rnd >= start else 1.0)

    def send_and_receive(self, messages, timeout=None):
        from flwr.app import ArrayRecord, Error, Message, MetricRecord, RecordDict

        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            pid = self.partition[node]
            config = dict(msg.content["config"])
            model = msg.content["arrays"].to_numpy_ndarrays()
            self.sent.append({"node": node, "pid": pid, "config": config, "model": model})
            if pid in self.fail:
                out.append(Message(Error(code=1, reason=f"partition {pid} always fails"), reply_to=msg))
                continue
            quota = int(config[keys.QUOTA])
            t = self.time_of(pid, quota, int(config[keys.ROUND]))
            metrics = {"num-examples": quota, keys.SAMPLES: quota, keys.TIME_S: t, keys.CPU_TIME_S: t,
                       keys.WALL_TIME_S: t, keys.ENERGY_J: self.active_w[pid] * t, keys.DATA_SIZE: 100_000,
                       keys.PARTITION_ID: pid, keys.QUOTA_CAPPED: 0, keys.IDLE_W: self.idle_w[pid],
                       keys.VIRTUAL_CLOCK: 1}
            if self.loss[pid] is not None:
                metrics[keys.TRAIN_LOSS] = float(self.loss[pid])
            arrays = ArrayRecord([np.full_like(a, self.value[pid], dtype=float) for a in model])
            out.append(Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)}), reply_to=msg))
        return out

    def quotas(self, rnd: int) -> dict[int, int]:
        """``{partition: quota}`` sent with ``keys.ROUND == rnd``."""
        return {s["pid"]: s["config"][keys.QUOTA] for s in self.sent if s["config"][keys.ROUND] == rnd}

    def rounds(self) -> list[int]:
        return sorted({s["config"][keys.ROUND] for s in self.sent})


def fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def run(strategy, grid, rounds, evaluate_fn=None, train_config=None):
    from flwr.app import ArrayRecord, ConfigRecord

    return strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=rounds,
                          train_config=ConfigRecord(train_config or {}), evaluate_fn=evaluate_fn)


def quiet(caplog):
    caplog.set_level("WARNING", logger="flwr")


@contextlib.contextmanager
def flwr_level(level):
    """Flower's logger at ``level`` inside the block; its previous level restored after."""
    logger = logging.getLogger("flwr")
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


# =========================================================================== static profiling
def test_static_split_never_changes_after_the_profiling_round_while_adaptive_follows_drift(tmp_path, caplog):
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

    # Prepare: 4 devices, 1:2:4:4 seconds per sample; device 0 becomes 16x slower from round 2 on.
    # state_dir on: the state is saved (and the controller flushed) after every round.
    quiet(caplog)
    costs = [2.0 ** -10, 2.0 ** -9, 2.0 ** -8, 2.0 ** -8]
    static_grid, adaptive_grid = (SimGrid(costs, drift={0: (2, 16.0)}) for _ in range(2))
    static = StaticProfilingStrategy(fedavg(4), budget=1000, state_dir=tmp_path)
    adaptive = AdaptiveStrategy(fedavg(4), budget=1000, policy="time")

    # Execute
    run(static, static_grid, rounds=5)
    run(adaptive, adaptive_grid, rounds=5)

    # Assert: round 1 equal; rounds 2..5 the split of round 1's measurement (1 : 1/2 : 1/4 : 1/4),
    # although device 0 reported 16x slower from round 2 on; the adaptive strategy moved away.
    assert static_grid.quotas(1) == {0: 250, 1: 250, 2: 250, 3: 250}
    assert all(static_grid.quotas(r) == {0: 500, 1: 250, 2: 125, 3: 125} for r in (2, 3, 4, 5))
    assert static.frozen
    assert adaptive_grid.quotas(5)[0] < 100
    assert list(static.history["policy"]) == ["static"] * 5
    assert (static.history["quota_sum"] == 1000).all()
    assert static.history["makespan_s"].iloc[-1] > 2 * adaptive.history["makespan_s"].iloc[-1]


def test_static_controller_state_keeps_the_freeze():
    # Prepare: profile one round, freeze, save.
    ctrl = StaticProfilingController(300)
    ctrl.allocate(["a", "b"])
    ctrl.observe("a", Report(time_s=150.0, samples=150))
    ctrl.observe("b", Report(time_s=300.0, samples=150))
    frozen_split = ctrl.allocate(["a", "b"])
    state = json.loads(json.dumps(ctrl.state_dict()))

    # Execute: a restarted controller gets drifting reports.
    again = StaticProfilingController(300)
    again.load_state_dict(state)
    again.observe("a", Report(time_s=1500.0, samples=150))

    # Assert
    assert again.frozen
    assert again.allocate(["a", "b"]) == frozen_split == {"a": 200, "b": 100}


def test_static_counts_profiling_rounds_by_reports_not_by_allocations():
    # Prepare: the Flower strategy's round 1 does not call allocate (equal split by node id).
    ctrl = StaticProfilingController(300, deadband=0.0)
    ctrl.observe("a", Report(time_s=150.0, samples=150))
    ctrl.observe("b", Report(time_s=300.0, samples=150))
    # Execute
    round2 = ctrl.allocate(["a", "b"])
    ctrl.observe("a", Report(time_s=1500.0, samples=200))  # drift seen in round 2: ignored
    round3 = ctrl.allocate(["a", "b"])
    # Assert
    assert round2 == round3 == {"a": 200, "b": 100}


def test_static_rejects_a_policy_without_cost_weights():
    from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

    with pytest.raises(ValueError, match="policy must be one of time, low-energy, energy, got 'equal'"):
        StaticProfilingStrategy(budget=10, policy="equal")


# =========================================================================== Oort-like selection
SPEEDS = [2.0 ** -10 * f for f in (1.0, 1.0, 1.25, 1.25, 1.5, 1.5, 1.75, 2.0, 2.0, 2.5, 16.0)]


def test_oort_selects_k_splits_equally_and_excludes_the_slowest_but_still_explores(caplog):
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    # Prepare: 11 devices, the last one 16x slower than the fastest; 60 % = 7 selected per round.
    quiet(caplog)
    grid = SimGrid(SPEEDS)
    strategy = OortStrategy(fedavg(11), budget=700, fraction=0.6, seed=3)

    # Execute
    run(strategy, grid, rounds=40)

    # Assert: 7 per round, 100 samples each (equal split), 4 excluded per round.
    per_round = [grid.quotas(r) for r in grid.rounds()]
    assert [len(q) for q in per_round] == [7] * 40
    assert all(sorted(q.values()) == [100] * 7 for q in per_round)
    assert list(strategy.history["excluded"]) == [4] * 40
    # Every device was tried (exploration), and the slowest is picked rarely once it is known.
    counts = strategy.selection_counts()
    assert set(counts) == set(range(11)) and sum(counts.values()) == 7 * 40
    first_seen = next(r for r, q in enumerate(per_round) if 10 in q)
    later = sum(10 in q for q in per_round[first_seen + 1:])
    fast_mean = np.mean([counts[p] for p in range(4)])
    assert later <= 0.2 * fast_mean
    assert strategy.selector.preferred_duration < 100 * SPEEDS[10]
    assert list(strategy.history["policy"].unique()) == ["oort"]


def test_oort_utility_is_samples_times_the_reported_loss(caplog):
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    # Prepare: equal speeds; partitions 0-4 report loss 2.0, partitions 5-9 loss 0.5.
    quiet(caplog)
    grid = SimGrid([2.0 ** -10] * 10, loss=[2.0] * 5 + [0.5] * 5)
    strategy = OortStrategy(fedavg(10), budget=500, fraction=0.5, seed=0)

    # Execute
    run(strategy, grid, rounds=30)

    # Assert: the arm of a node that trained 100 samples at loss 2.0 has reward 100 * 2.0, and
    # exploitation prefers the high-loss half.
    arms = strategy.selector.arms
    assert {arms[100 + p].reward for p in range(5)} == {100 * 2.0}
    assert {arms[100 + p].reward for p in range(5, 10)} == {100 * 0.5}
    counts = strategy.selection_counts()
    assert sum(counts[p] for p in range(5)) > 2 * sum(counts[p] for p in range(5, 10))


def test_oort_without_loss_metric_scores_by_samples_and_warns(caplog):
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    # Prepare
    grid = SimGrid([2.0 ** -10] * 5, loss=[None] * 5)
    strategy = OortStrategy(fedavg(5), budget=300, fraction=0.6)
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        run(strategy, grid, rounds=2)
    # Assert: 3 selected, 100 samples each: reward 100
    assert {a.reward for a in strategy.selector.arms.values() if a.count} == {100.0}
    assert sum("reports no 'train-loss' metric" in r.getMessage() for r in caplog.records) == 1


class BrokenClockGrid(SimGrid):
    """A SimGrid whose nodes report NaN time (a broken meter) in round 1, and data sizes."""

    def __init__(self, cost_s, data_size):
        super().__init__(cost_s)
        self.data_size = data_size

    def send_and_receive(self, messages, timeout=None):
        out = super().send_and_receive(messages, timeout)
        for msg in out:
            metrics = msg.content["metrics"]
            pid = self.partition[msg.metadata.src_node_id]
            metrics[keys.DATA_SIZE] = self.data_size[pid]
            if self.sent[-1]["config"][keys.ROUND] == 1:
                metrics[keys.TIME_S] = math.nan
        return out


def test_oort_explores_by_the_data_size_nodes_reported(caplog):
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    # Prepare: 6 equal nodes, 3 per round; round 1's three replies are unusable (NaN time) so
    # nobody is explored yet, but the three reported 50,000 local samples.
    quiet(caplog)
    grid = BrokenClockGrid([2.0 ** -10] * 6, data_size=[50_000] * 6)
    strategy = OortStrategy(fedavg(6), budget=300, fraction=0.5, seed=0)
    # Execute
    run(strategy, grid, rounds=2)
    # Assert: round 2 explores the nodes whose size is known (the others count as size 0)
    round1, round2 = set(grid.quotas(1)), set(grid.quotas(2))
    assert len(round1) == 3 and round2 == round1
    assert [strategy.selector.arms[100 + p].count for p in range(6)] == [int(p in round1) for p in range(6)]


class FirstRoundFailGrid(SimGrid):
    """A SimGrid whose partitions in ``fail_first`` reply with an error in round 1 only."""

    def __init__(self, cost_s, fail_first):
        super().__init__(cost_s)
        self.fail_first = set(fail_first)

    def send_and_receive(self, messages, timeout=None):
        from flwr.app import Error, Message

        out = []
        for msg in messages:
            pid = self.partition[msg.metadata.dst_node_id]
            if pid in self.fail_first and msg.content["config"][keys.ROUND] == 1:
                self.sent.append({"node": msg.metadata.dst_node_id, "pid": pid, "model": None,
                                  "config": dict(msg.content["config"])})
                out.append(Message(Error(code=1, reason=f"partition {pid} lost its connection"), reply_to=msg))
            else:
                out.extend(super().send_and_receive([msg], timeout))
        return out


def test_oort_retries_a_failed_node_with_an_equal_share_and_learns_its_real_duration(caplog):
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    # Prepare: the 16x slower device fails in round 1; every node is selected every round
    quiet(caplog)
    cost = [2.0 ** -10] * 3 + [16 * 2.0 ** -10]
    grid = FirstRoundFailGrid(cost, fail_first={3})
    strategy = OortStrategy(fedavg(4), budget=400, fraction=1.0)
    # Execute
    run(strategy, grid, rounds=2)
    # Assert: no probe of min_quota samples; its arm holds the time of a full equal share
    assert grid.quotas(2) == {0: 100, 1: 100, 2: 100, 3: 100}
    assert strategy.selector.arms[103].duration == 100 * cost[3]
    assert strategy.client_history.set_index(["round", "node_id"]).loc[(2, 103), "status"] == "ok"


@pytest.mark.parametrize("fraction, n, k", [(0.6, 11, 7), (0.6, 5, 3), (0.01, 5, 1), (1.0, 4, 4)])
def test_oort_k_is_the_rounded_fraction(fraction, n, k):
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    assert OortStrategy(budget=10, fraction=fraction).k_for(n) == k


def test_oort_rejects_bad_fraction():
    from flwr_adaptive.strategies.oort_strategy import OortStrategy

    with pytest.raises(ValueError, match=r"fraction must lie in \(0, 1\]"):
        OortStrategy(budget=10, fraction=0.0)


# =========================================================================== FedAsync
# Three devices with 2^-10, 2^-9, 2^-8 s per sample and 128-sample jobs: 0.125, 0.25, 0.5 s.
ASYNC_COSTS = [2.0 ** -10, 2.0 ** -9, 2.0 ** -8]


def _fedasync(**kw):
    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    return FedAsyncStrategy(budget=384, min_nodes=3, **kw)


def test_fedasync_replays_the_virtual_clock_and_restarts_clients_at_once(caplog):
    # Prepare
    quiet(caplog)
    grid = SimGrid(ASYNC_COSTS, active_w=[10.0, 5.0, 2.0], idle_w=[1.0, 1.0, 1.0], value=[1.0, 2.0, 4.0])
    strategy = _fedasync(alpha=0.5, staleness="polynomial", a=0.5)
    evaluated = []

    # Execute: 2 round-equivalents = 768 samples = six 128-sample jobs.
    result = run(strategy, grid, rounds=2, train_config={"lr": 0.25},
                 evaluate_fn=lambda r, arrays: evaluated.append(r))

    # Assert: the timeline, worked out by hand.
    #   t=0     A, B, C start              t=0.125 A mixes (staleness 0), restarts
    #   t=0.25  B mixes (1), restarts; A mixes (1), restarts with the last 128 samples
    #   t=0.375 A mixes (0): no work left  t=0.5   C mixes (4), B mixes (3)
    jobs = strategy.client_history
    assert list(jobs["partition_id"]) == [0, 1, 0, 0, 2, 1]
    assert list(jobs["staleness"]) == [0, 1, 1, 0, 4, 3]
    assert list(jobs["start_s"]) == [0.0, 0.0, 0.125, 0.25, 0.0, 0.25]
    assert list(jobs["finish_s"]) == [0.125, 0.25, 0.25, 0.375, 0.5, 0.5]
    assert list(jobs["alpha_t"]) == pytest.approx([0.5 * (s + 1) ** -0.5 for s in jobs["staleness"]])
    # each job's config: the quota, the node's own job number, the run's train config
    assert [(s["pid"], s["config"][keys.ROUND]) for s in grid.sent] == [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (0, 3)]
    assert all(s["config"][keys.QUOTA] == 128 and s["config"]["lr"] == 0.25 for s in grid.sent)
    # round-equivalents: 0.25 s each; energy = active (pro-rated at the boundary) + A's idle at the end
    hist = strategy.history
    assert list(hist["makespan_s"]) == [0.25, 0.25]
    assert list(hist["samples"]) == [384, 384]
    assert list(hist["active_j"]) == pytest.approx([10 * 0.25 + 5 * 0.25 + 2 * 0.25, 10 * 0.125 + 5 * 0.25 + 2 * 0.25])
    assert list(hist["idle_j"]) == pytest.approx([0.0, 1.0 * 0.125])
    assert evaluated == [0, 1, 2]
    # the model is the FedAsync mix of the updates in that order
    x = 0.0
    for pid, s in zip(jobs["partition_id"], jobs["staleness"]):
        w = 0.5 * (s + 1) ** -0.5
        x = (1 - w) * x + w * [1.0, 2.0, 4.0][pid]
    np.testing.assert_allclose(result.arrays.to_numpy_ndarrays()[0], np.full(3, x))


def test_fedasync_stale_update_moves_the_model_less(caplog):
    # Prepare: C (staleness 4) and B (staleness 3) arrive last; both mixes are recorded.
    quiet(caplog)
    grid = SimGrid(ASYNC_COSTS, value=[1.0, 1.0, 1.0])
    strategy = _fedasync(alpha=0.6, staleness="hinge", a=10.0, b=2.0)
    # Execute
    run(strategy, grid, rounds=2)
    # Assert: hinge: staleness <= 2 mixes with alpha, 3 and 4 with alpha / (10 (s - 2) + 1)
    alpha_t = dict(zip(strategy.client_history["staleness"], strategy.client_history["alpha_t"]))
    assert alpha_t[0] == alpha_t[1] == 0.6
    assert alpha_t[3] == pytest.approx(0.6 / 11) and alpha_t[4] == pytest.approx(0.6 / 21)


def test_fedasync_failing_node_is_dropped_and_the_others_do_its_work(caplog):
    # Prepare: partition 1 errors on every job.
    grid = SimGrid(ASYNC_COSTS, fail={1})
    strategy = _fedasync()
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        run(strategy, grid, rounds=2)
    # Assert: 2 failures then dropped; all 768 samples processed by partitions 0 and 2.
    jobs = strategy.client_history
    assert list(jobs[jobs["status"] != "ok"]["node_id"]) == [101, 101]
    ok = jobs[jobs["status"] == "ok"]
    assert set(ok["partition_id"]) == {0, 2} and ok["samples"].sum() == 768
    assert len(strategy.history) == 2
    assert any("dropped for the rest of the run" in r.getMessage() for r in caplog.records)


def test_fedasync_judges_the_first_wave_as_one_group(caplog):
    # Prepare: the fastest device (partition 2, 1c per sample) is processed after partitions 0 (3c)
    # and 1 (6c) in the first wave (node order). Against those two alone (median 4.5c) its claim would look
    # implausible (< 4.5c / 4); against the whole wave (median of 3c, 6c, 1.5c = 3c) it is not.
    c = 2.0 ** -10
    grid = SimGrid([3 * c, 6 * c, 1 * c, 1.5 * c])
    strategy = _fedasync()
    # Execute: 3 round-equivalents of 384 samples = twelve 96-sample jobs
    with caplog.at_level("WARNING", logger="flwr"):
        run(strategy, grid, rounds=3)
    # Assert: its claim is not judged implausible (it would be taken at the median, 2.25c), so it
    # finishes first and does the most jobs. Its jobs judged in round-equivalent 1 (sent before it
    # closes at 288c) run at half the wave's median, 1.125c: the growth cap starts from that median,
    # as the synchronous strategies' first round is equal. The jobs sent after run at its claim.
    jobs = strategy.client_history
    fastest = jobs[jobs["partition_id"] == 2]
    assert list(fastest["start_s"] / c) == [0.0, 108.0, 216.0, 324.0, 420.0]
    assert list((fastest["finish_s"] - fastest["start_s"]) / c) == [108.0, 108.0, 108.0, 96.0, 96.0]
    assert strategy.history["elapsed_s"].iloc[0] == 288 * c
    assert jobs.groupby("partition_id").size().idxmax() == 2
    assert "not believed" not in caplog.text


def test_fedasync_growth_cap_counts_per_round_equivalent_not_per_job():
    # Prepare: 8 equal devices (1c per sample, 96-sample jobs, round-equivalents of 768 samples);
    # partition 0 claims 16x less from its job 2 on. Only the growth cap judges (plausibility off).
    import math

    from flwr_adaptive.strategies import CostTrust
    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    c = 2.0 ** -10
    grid = SimGrid([c] * 8, drift={0: (2, 1 / 16)})
    strategy = FedAsyncStrategy(budget=768, min_nodes=8, trust=CostTrust(plausible_range=math.inf))
    # Execute
    with flwr_level(logging.ERROR):
        run(strategy, grid, rounds=3)
    # Assert: job 2 (sent in round-equivalent 1, reference 1c) at c/2; round-equivalent 1 closes at
    # 96c, so jobs 3 and 4 (both sent before round-equivalent 2 closes at 192c, reference c/2) at c/4.
    # Capped per job, job 4 would run at c/8 (48 -> 24 -> 12c): 2^k faster per round-equivalent.
    jobs = strategy.client_history
    node = jobs[jobs["partition_id"] == 0]
    assert list(strategy.history["elapsed_s"] / c) == [96.0, 192.0, 288.0]
    assert list(node["start_s"] / c) == [0.0, 96.0, 144.0, 168.0]
    assert list((node["finish_s"] - node["start_s"]) / c) == [96.0, 48.0, 24.0, 24.0]


def test_fedasync_holds_back_a_liar_in_the_first_wave(caplog):
    # Prepare: partition 0 claims 1/1000 of the others' per-sample time and is processed first (node order).
    c = 2.0 ** -10
    grid = SimGrid([c / 1000, c, c, c])
    strategy = _fedasync()
    # Execute
    with caplog.at_level("WARNING", logger="flwr"):
        run(strategy, grid, rounds=2)
    # Assert: taken at the others' median, so it cannot jump the queue and take most of the jobs.
    jobs = strategy.client_history
    assert jobs[jobs["partition_id"] == 0]["finish_s"].iloc[0] == 96 * c
    assert jobs.groupby("partition_id").size().max() == 2
    assert "node 100 claims" in caplog.text and "not believed" in caplog.text


def test_fedasync_rejects_bad_settings():
    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    with pytest.raises(ValueError, match="unknown staleness function 'linear'"):
        FedAsyncStrategy(budget=10, staleness="linear")
    with pytest.raises(ValueError, match="alpha must lie in"):
        FedAsyncStrategy(budget=10, alpha=1.5)
    with pytest.raises(ValueError, match="budget must be a positive int"):
        FedAsyncStrategy(budget=0)


def _reference_replay(durations: list[float], jobs_total: int) -> list[tuple[float, int]]:
    """(finish, partition) of every job in mix order: an independent event simulation."""
    heap = [(d, k, p) for k, (p, d) in enumerate(enumerate(durations))]
    heapq.heapify(heap)
    seq, out, sent = len(durations), [], len(durations)
    while heap:
        t, _, p = heapq.heappop(heap)
        out.append((t, p))
        if sent < jobs_total:
            heapq.heappush(heap, (t + durations[p], seq, p))
            seq, sent = seq + 1, sent + 1
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=2, max_size=6), st.integers(1, 4))
def test_property_fedasync_mix_order_time_and_energy_match_an_independent_replay(exponents, rounds):
    # Prepare: per-sample costs 2^-(10 - e): exact durations; budget = 64 per node.
    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy

    n = len(exponents)
    costs = [2.0 ** (e - 10) for e in exponents]
    watts = [1.0 + p for p in range(n)]
    grid = SimGrid(costs, active_w=watts, idle_w=[0.5] * n)
    strategy = FedAsyncStrategy(budget=64 * n, min_nodes=n)
    # The replay of the claims as made: costs here span up to 64x, beyond what cost trust believes
    # of honest devices (its bounds are tested in test_hostile_replies and test_liar).
    strategy.trust = None

    # Execute (Flower's INFO lines off for this call only: caplog does not fit a hypothesis test)
    with flwr_level(logging.WARNING):
        run(strategy, grid, rounds=rounds)

    # Assert: same mix order and finish times as the reference; every sample processed once;
    # energy totals = all active work + idle of each device from its last finish to the end.
    jobs = strategy.client_history
    expected = _reference_replay([64 * c for c in costs], rounds * n)
    assert list(zip(jobs["finish_s"], jobs["partition_id"])) == expected
    hist = strategy.history
    end = expected[-1][0]
    assert hist["makespan_s"].sum() == pytest.approx(end)
    assert hist["samples"].sum() == 64 * n * rounds
    last = {p: t for t, p in expected}
    active = sum(watts[p] * 64 * costs[p] for _, p in expected)
    idle = sum(0.5 * (end - last[p]) for p in range(n))
    assert hist["energy_j"].sum() == pytest.approx(active + idle)
    # a job starts where the same device's previous one finished (restart at once)
    for _, rows in jobs.groupby("partition_id"):
        assert list(rows["start_s"])[1:] == list(rows["finish_s"])[:-1]


# =========================================================================== registry
def test_registry_builds_every_policy_and_rejects_unknown_names():
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy
    from flwr_adaptive.strategies.oort_strategy import OortStrategy
    from flwr_adaptive.strategies.registry import POLICY_NAMES, build_strategy
    from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

    # Execute
    built = {p: build_strategy(p, budget=100, num_nodes=3, oort_fraction=0.5, fedasync_alpha=0.3) for p in POLICY_NAMES}
    # Assert
    assert type(built["static"]) is StaticProfilingStrategy and built["static"].policy == "time"
    assert type(built["oort"]) is OortStrategy and built["oort"].fraction == 0.5
    assert type(built["fedasync"]) is FedAsyncStrategy and built["fedasync"].mixer.alpha == 0.3
    assert built["fedasync"].min_nodes == 3
    for p in ("equal", "time", "low-energy", "energy"):
        assert type(built[p]) is AdaptiveStrategy and built[p].policy == p
    with pytest.raises(ValueError, match="unknown policy 'fedprox'; choose one of equal, time, low-energy, energy, "
                                         "min-energy, static, oort, fedasync"):
        build_strategy("fedprox", budget=100)


def test_flower_app_defaults_equal_the_pyproject_app_config_and_name_every_policy_option():
    import tomllib
    from pathlib import Path

    from experiments import APPS_DIR
    from pma_app.task import DEFAULTS

    # Prepare: flwr run refuses -c keys that pyproject.toml's app config does not declare.
    config = tomllib.loads((APPS_DIR / "pma" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    # Assert: same keys and the same defaults (a value changed in one place only would make a
    # plain `flwr run apps/pma` and the tests' direct calls of the app disagree)
    assert DEFAULTS == config
    assert {"oort-fraction", "fedasync-alpha", "fedasync-staleness"} <= set(config)


# =========================================================================== the comparison table
def _summary(losses, wall=1.0):
    return {"rounds": [{"round": r, "loss": v, "accuracy": 1.0 - v / 10} for r, v in enumerate(losses)], "wall_s": wall}


def _history(policy, makespans, energies, clients):
    import pandas as pd

    return pd.DataFrame({"round": range(1, len(makespans) + 1), "policy": policy, "makespan_s": makespans,
                         "energy_j": energies, "clients": clients})


def test_baseline_table_measures_time_and_energy_to_equals_loss_at_80_percent():
    import pandas as pd

    from experiments.baselines import baseline_table

    # Prepare: 5 rounds; Equal's loss after round 4 (80 %) is 0.6. Oort reaches it in round 2,
    # excluding devices 2 and 3 of 4 (idle 1 W and 3 W) in every round; FedAsync never does.
    summaries = {"equal": _summary([2.0, 1.0, 0.8, 0.7, 0.6, 0.5]),
                 "oort": _summary([2.0, 0.9, 0.55, 0.5, 0.45, 0.4]),
                 "fedasync": _summary([2.0, 1.5, 1.2, 1.0, 0.9, 0.8])}
    histories = {"equal": _history("equal", [2.0] * 5, [10.0] * 5, [4] * 5),
                 "oort": _history("oort", [1.0] * 5, [4.0] * 5, [2] * 5),
                 "fedasync": _history("fedasync", [0.5] * 5, [3.0] * 5, [8] * 5)}
    oort_rows = pd.DataFrame({"round": [r for r in range(1, 6) for _ in (0, 1)], "partition_id": [0, 1] * 5,
                              "status": "ok"})
    async_rows = pd.DataFrame({"round": [1, 1, 1], "partition_id": [0, 1, 2], "status": ["ok", "ok", "error"]})
    clients = {"equal": None, "oort": oort_rows, "fedasync": async_rows}

    # Execute
    table, target, t_round = baseline_table(histories, clients, summaries, rounds=5, n_clients=4,
                                            idle_w={0: 5.0, 1: 5.0, 2: 1.0, 3: 3.0})

    # Assert
    assert (t_round, target) == (4, 0.6)
    assert table.loc["Equal", "time to target s (virtual)"] == 8.0
    assert table.loc["Equal", "energy to target J (virtual)"] == 40.0
    assert table.loc["Oort-like", "rounds to target"] == 2
    assert table.loc["Oort-like", "time to target s (virtual)"] == 2.0
    assert table.loc["Oort-like", "energy to target J (virtual)"] == 8.0
    assert table.loc["Oort-like", "energy to target, excluded idle incl. J"] == 8.0 + 2 * (1.0 + 3.0) * 1.0
    assert table.loc["Oort-like", "excluded / round"] == 2.0 and table.loc["Oort-like", "never selected"] == 2
    assert np.isnan(table.loc["FedAsync", "time to target s (virtual)"])
    assert table.loc["FedAsync", "total time s (virtual)"] == 2.5
    assert table.loc["FedAsync", "never selected"] == 2  # device 3 never ran, device 2 only failed
    assert table.loc["Oort-like", "final holdout loss"] == 0.4


def test_baseline_table_needs_equal_for_the_target():
    from experiments.baselines import baseline_table

    with pytest.raises(ValueError, match="include 'equal'"):
        baseline_table({}, {}, {"oort": _summary([1.0])}, rounds=1, n_clients=1)
