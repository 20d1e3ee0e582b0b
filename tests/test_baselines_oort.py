"""Oort-like selection, the baseline, through its Flower strategy: it selects k (the rounded fraction)
and splits equally, excludes the slowest but still explores, scores by samples × reported loss
(by samples, with a warning, without the loss metric), explores by reported data size, retries a
failed node. Through ``SimGrid`` (``baselines_support``), Flower's own ``Strategy.start``, no Ray."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flwr_adaptive import keys

from baselines_support import SimGrid, fedavg, quiet, run

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


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
