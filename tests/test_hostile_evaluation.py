"""Evaluation replies: one with an unusable weight (negative, huge, NaN, infinite, a list) or loss is
skipped with one log line and the others are averaged (Message and legacy API); replies that
weigh nothing give no aggregate instead of a division by zero."""

from __future__ import annotations

import math

import numpy as np
import pytest

import adaptive_support as sup
from adaptive_support import FakeGrid
from hostile_support import BUDGET, NODES, _proxy_class

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


BAD_EVAL_WEIGHTS = [-3, -1e300, math.nan, math.inf, [1, 2]]


@pytest.mark.parametrize("weight", BAD_EVAL_WEIGHTS)
def test_one_evaluation_reply_with_an_unusable_weight_is_skipped_and_the_others_averaged(weight, caplog):
    # Prepare: 4 evaluation replies; the first weighs `weight` (-3 cancels the others' 3)
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(FedAvg(fraction_evaluate=1.0, min_evaluate_nodes=4, min_available_nodes=4),
                                budget=BUDGET)
    msgs = list(strategy.configure_evaluate(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(NODES)))
    replies = [Message(RecordDict({"metrics": MetricRecord({"num-examples": weight if i == 0 else 1,
                                                            "eval_loss": float(i)})}), reply_to=m)
               for i, m in enumerate(msgs)]
    hostile = msgs[0].metadata.dst_node_id
    # Execute
    metrics = strategy.aggregate_evaluate(1, replies)
    # Assert: the mean of the three others' losses, one line naming the hostile node
    assert metrics["eval_loss"] == pytest.approx(2.0)
    lines = [line for line in sup.adaptive_lines(caplog) if str(hostile) in line and "skipped" in line]
    assert len(lines) == 1 and "num-examples" in lines[0]


@pytest.mark.parametrize("count, loss", [(-3, 1.0), (0, math.nan)])
def test_legacy_evaluation_result_with_an_unusable_count_or_loss_is_skipped(count, loss):
    # Prepare: 4 evaluation results; the first is hostile (-3 cancels the others' 3 examples)
    from flwr.common import Code, EvaluateRes, Status
    from flwr.server.strategy import FedAvg

    from flwr_adaptive.strategies import LegacyAdaptiveStrategy

    Proxy = _proxy_class()
    strategy = LegacyAdaptiveStrategy(FedAvg(), budget=BUDGET)
    results = [(Proxy(str(n)), EvaluateRes(Status(Code.OK, ""), loss if i == 0 else float(i),
                                           count if i == 0 else 1, {}))
               for i, n in enumerate(NODES)]
    # Execute
    loss_aggregated, _ = strategy.aggregate_evaluate(1, results, [])
    # Assert: the mean of the three others' losses
    assert loss_aggregated == pytest.approx(2.0)


def test_evaluation_replies_weighing_nothing_give_no_aggregate():
    # Prepare: every evaluation reply weighs 0 examples (e.g. empty evaluation sets)
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.strategies import AdaptiveStrategy

    strategy = AdaptiveStrategy(FedAvg(fraction_evaluate=1.0, min_evaluate_nodes=4, min_available_nodes=4),
                                budget=BUDGET)
    msgs = list(strategy.configure_evaluate(1, ArrayRecord([np.zeros(2)]), ConfigRecord({}), FakeGrid(NODES)))
    replies = [Message(RecordDict({"metrics": MetricRecord({"num-examples": 0, "eval_loss": 1.0})}), reply_to=m)
               for m in msgs]
    # Execute / Assert: no division by zero out of the inner FedAvg
    assert strategy.aggregate_evaluate(1, replies) is None
