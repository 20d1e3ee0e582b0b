"""A node that under-claims its local steps to raise its step floor gains at most Equal's quota.

``StepFloor`` reads a node's batch size from the (samples, local steps) its replies claim: fewer
steps claimed mean a larger batch, so a larger floor (``k × B_hi``). The floor is bounded by the
round's equal share, so the most a lying slow node buys is Equal's quota, and the other nodes'
quotas still sum with it to the budget. The split itself may still move it above its floor while
its affine line is unidentified (all its reports at one quota): excitation (``excitation.STEP``,
2 % a move) can give it a pair's step and the step of the one left over, 104 of the equal 100 in
round 4 (102 or 104, by the order Flower's FedAvg samples the nodes in).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from adaptive_support import FakeGrid
from test_normalized_strategy import reply, telemetry

from flwr_adaptive.excitation import STEP
from flwr_adaptive.strategies import AdaptiveStrategy

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

X = [np.array([1.0, -2.0])]
NODES = [100, 101, 102]
BUDGET = 300


def quotas(min_local_steps: int, liar_steps: int | None, rounds: int = 4) -> list[list[int]]:
    """Each round's quotas; node 100 is 8x slower and claims ``liar_steps`` local steps for any
    quota (``None``: the truth, batches of 32), the others report the truth."""
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive import keys

    inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3)
    strategy = AdaptiveStrategy(inner, budget=BUDGET, deadband=0.0, trust=False, min_local_steps=min_local_steps)
    out = []
    for rnd in range(1, rounds + 1):
        msgs = list(strategy.configure_train(rnd, ArrayRecord(X), ConfigRecord(), FakeGrid(NODES)))
        quota = {m.metadata.dst_node_id: int(m.content["config"][keys.QUOTA]) for m in msgs}
        out.append([quota[n] for n in NODES])
        replies = []
        for m in msgs:
            node = m.metadata.dst_node_id
            samples = quota[node]
            lying = node == 100 and liar_steps is not None
            steps = min(liar_steps, samples) if lying else -(-samples // 32)
            metrics = telemetry(samples, NODES.index(node), steps=steps)
            for key in ("time-s", "cpu-time-s", "wall-time-s"):
                metrics[key] = 0.001 * (8.0 if node == 100 else 1.0) * samples
            replies.append(reply(m, metrics, X))
        strategy.aggregate_train(rnd, replies)
    return out


@pytest.mark.parametrize("k", [2, 3])
def test_an_under_claimed_step_count_buys_at_most_the_equal_share(k):
    # Prepare / Execute: the slow node claims 2 local steps for whatever it is given (B_hi =
    # samples - 1: the floor k x B_hi is far above the equal share 100)
    honest, lying = quotas(k, None), quotas(k, 2)
    # Assert: the lie lifts the slow node above its honest floor, to Equal's 100 and at most two
    # excitation steps beyond; every round's quotas sum to the budget
    share = BUDGET // len(NODES)
    assert honest[0] == lying[0] == [share] * 3
    for rnd in range(1, 4):
        assert honest[rnd][0] <= lying[rnd][0] <= share + 2 * math.ceil(STEP * share)
        assert sum(lying[rnd]) == sum(honest[rnd]) == BUDGET
    assert lying[1][0] == lying[2][0] == share > honest[1][0]
