"""The time the server waits: observed − reported compute is each node's fixed per-round term.

A fake grid stamps each reply's ``delivered_at`` as Flower's SuperLink would (seconds after the
strategy sent the round): compute as the clients report it plus a per-message start-up that
grows with the node's slowness (a slow board imports slowly too) and a polling delay.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from adaptive_support import FakeGrid
from flwr_adaptive import keys
from flwr_adaptive.strategies import AdaptiveStrategy
from test_strategy_core import quotas_of, reply, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

NODES = [501, 502, 503, 504]
PARTS = {501: 0, 502: 1, 503: 2, 504: 3}
SLOW = {0: 1.0, 1: 1.0, 2: 2.0, 3: 4.0}
COST = 0.01  # compute seconds per sample at slowdown 1
STARTUP = 1.0  # seconds per message × slowdown, outside the reported compute
POLL = [0.4, 2.9, 1.7, 0.2, 2.5, 1.1, 0.8, 2.2]  # the 3-s polling's share of each round


def _round(strategy, rnd, virtual=0):
    from flwr.app import ArrayRecord, ConfigRecord

    msgs = list(strategy.configure_train(rnd, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(NODES)))
    q = quotas_of(msgs)
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        k = SLOW[PARTS[n]]
        compute = q[n] * COST * k
        r = reply(m, {**telemetry(q[n], compute, PARTS[n]), keys.VIRTUAL_CLOCK: virtual})
        waited = compute + STARTUP * k + POLL[(rnd + PARTS[n]) % len(POLL)]
        r.metadata.delivered_at = datetime.fromtimestamp(strategy._sent_at + waited, tz=timezone.utc).isoformat()
        replies.append(r)
    strategy.aggregate_train(rnd, replies)
    return {PARTS[n]: v for n, v in q.items()}


def _strategy(**kw) -> AdaptiveStrategy:
    from flwr.serverapp.strategy import FedAvg

    strategy = AdaptiveStrategy(FedAvg(min_train_nodes=1, min_available_nodes=1), budget=800, deadband=0.0,
                                trust=False, **kw)
    strategy.server_time = True  # opt-in (off by default)
    return strategy


def _ideal(overhead: dict) -> float:
    """The balanced round T: Σ max((T − o_i) / (c·k_i), 1) = budget (a node whose fixed time alone
    exceeds T gets the minimum quota), by bisection."""
    lo, hi = 0.0, 100.0
    for _ in range(100):
        t = (lo + hi) / 2
        total = sum(max((t - overhead[p]) / (COST * k), 1.0) for p, k in SLOW.items())
        lo, hi = (t, hi) if total < 800 else (lo, t)
    return hi


def test_the_observed_start_up_becomes_a_fixed_term_and_the_split_balances_what_the_server_waits_for():
    strategy = _strategy()
    splits = [_round(strategy, rnd) for rnd in range(1, 9)]
    # the fixed terms in use: the median of each node's observed − compute, its start-up + polling
    overheads = strategy.fixed_overheads()
    for part, k in SLOW.items():
        assert STARTUP * k <= overheads[part] <= STARTUP * k + 3.0
    # what the server waits for, on average (start-up + the mean polling share)
    waits = {p: STARTUP * k + float(np.mean(POLL)) for p, k in SLOW.items()}

    def round_s(split):
        return max(waits[p] + split[p] * COST * SLOW[p] for p in split)

    compute_only = {p: 800 / SLOW[p] / sum(1 / k for k in SLOW.values()) for p in SLOW}
    ideal = _ideal(waits)
    ratios = [round_s(split) / ideal for split in splits]
    print("round / balanced round, rounds 1..8:", " ".join(f"{r:.3f}" for r in ratios))
    assert max(ratios[5:]) <= 1.10  # from round 6 on (the polling medians settle): within 10 %
    # the compute-only split (the reported compute alone) waits 1.3x longer for the slow start-up
    assert round_s(compute_only) > 1.3 * ideal
    # the slower nodes give up samples for their longer start-up, the fast ones take them
    assert splits[-1][3] < compute_only[3] / 4 and splits[-1][0] > compute_only[0]


def test_without_server_time_only_the_reported_compute_is_balanced():
    strategy = _strategy()
    strategy.server_time = False
    split = [_round(strategy, rnd) for rnd in range(1, 6)][-1]
    compute_only = {p: 800 / SLOW[p] / sum(1 / k for k in SLOW.values()) for p in SLOW}
    assert all(abs(split[p] - compute_only[p]) <= 2 for p in SLOW) and strategy.fixed_overheads() == {}


def test_virtual_clock_reports_are_not_compared_with_the_wall_clock():
    strategy = _strategy()
    for rnd in range(1, 4):
        _round(strategy, rnd, virtual=1)
    assert strategy.fixed_overheads() == {}


def test_the_fixed_terms_survive_a_resumed_serverapp(tmp_path):
    from flwr.serverapp.strategy import FedAvg

    first = _strategy(state_dir=tmp_path)
    for rnd in range(1, 7):
        _round(first, rnd)
    resumed = _strategy(state_dir=tmp_path)
    assert resumed.fixed_overheads() == first.fixed_overheads()
    assert resumed.quotas_for(7, NODES) == first.quotas_for(7, NODES)  # the same split, fixed terms included
