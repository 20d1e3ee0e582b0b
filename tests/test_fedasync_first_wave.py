"""FirstWave: FedAsync's first replies on a real deployment are held until they can be judged together."""

from __future__ import annotations

import math

from flwr_adaptive.strategies.fedasync_first_wave import FirstWave
from flwr_adaptive.strategies.fedasync_jobs import Job
from flwr_adaptive.strategies.update_size import LatestUpdates


def job(node: int) -> Job:
    return Job(node=node, index=1, quota=10, start_s=0.0, base_version=0)


def test_the_wave_is_held_until_every_live_node_answered_and_released_once():
    wave = FirstWave([1, 2, 3, 4, 5], LatestUpdates())
    for n in (1, 2, 3):  # the first three replies (a liar's among them) are not the reference
        wave.hold(job(n))
        assert wave.release(dropped=set(), in_flight=2) == []
    wave.answered(4)  # node 4's first job failed: it has answered
    assert wave.release(dropped=set(), in_flight=2) == []  # node 5 is still silent
    assert [j.node for j in wave.release(dropped={5}, in_flight=1)] == [1, 2, 3]  # ... until it is dropped
    wave.hold(job(4))  # node 4's retry
    assert [j.node for j in wave.release(dropped={5}, in_flight=0)] == [4]  # nothing is held twice


def test_fewer_than_three_replies_wait_for_the_retries_in_flight():
    wave = FirstWave([1, 2, 3], LatestUpdates())
    wave.hold(job(1))
    wave.hold(job(2))
    wave.answered(3)  # failed, retried: its retry is in flight
    assert wave.release(dropped=set(), in_flight=1) == []
    assert [j.node for j in wave.release(dropped=set(), in_flight=0)] == [1, 2]


def test_nothing_is_held_without_a_screen_with_two_nodes_or_once_judged():
    off = FirstWave([1, 2, 3], LatestUpdates(math.inf))
    off.hold(job(1))
    assert not off.screened and len(off.release(dropped=set(), in_flight=2)) == 1
    two = FirstWave([1, 2], LatestUpdates())
    two.hold(job(1))
    assert not two.screened and len(two.release(dropped=set(), in_flight=1)) == 1
    judged = LatestUpdates()
    judged.judge({1: 1.0, 2: 1.0, 3: 1.0})
    later = FirstWave([1, 2, 3], judged)
    later.hold(job(1))
    assert len(later.release(dropped=set(), in_flight=2)) == 1
