"""Oversized replies are rejected on their sizes before any value is read (the bench prints the cost:
``python -m experiments.bench_replies``); counted here by reads, never by time."""

from __future__ import annotations

import numpy as np
import pytest

import adaptive_support as sup
from hostile_support import BUDGET, HOSTILE, NODES, PARTS, configure, fedavg, honest_round, reply, telemetry

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


class CountingList(list):
    """A metric list that counts how often its entries are read (iteration or indexing)."""

    reads = 0

    def __iter__(self):
        CountingList.reads += 1
        return super().__iter__()

    def __getitem__(self, i):
        CountingList.reads += 1
        return super().__getitem__(i)


def _round_with(strategy, hostile_metrics=None, hostile_record=None):
    """Round 2's replies: honest, but node HOSTILE's metrics get ``hostile_metrics`` and, when
    given, its arrays are ``hostile_record``."""
    from flwr.app import Message, MetricRecord, RecordDict

    msgs, q = configure(strategy, 2)
    replies = []
    for m in msgs:
        n = m.metadata.dst_node_id
        metrics = telemetry(q[n], q[n] * 0.001 * (PARTS[n] + 1), PARTS[n])
        if n == HOSTILE and hostile_record is not None:
            replies.append(Message(RecordDict({"arrays": hostile_record, "metrics": MetricRecord(
                {"num-examples": 1, **metrics, **(hostile_metrics or {})})}), reply_to=m))
        elif n == HOSTILE:
            replies.append(reply(m, {**metrics, **(hostile_metrics or {})}))
        else:
            replies.append(reply(m, metrics, value=PARTS[n] + 1))
    return replies, q


@pytest.mark.parametrize("case", ["long-list", "many-keys", "array-bytes"])
def test_an_oversized_reply_is_skipped_on_its_sizes_with_one_line_before_any_value_is_read(case, caplog):
    from flwr.app import Array, ArrayRecord

    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.screening import MAX_METRIC_KEYS, MAX_METRIC_VALUES

    # Prepare: an honest round 1; in round 2 node HOSTILE sends one list just over the values limit,
    # more keys than allowed, or an array that declares the model's shape but holds 5,000x its bytes
    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, deadband=0.0)
    honest_round(strategy, 1)
    long_list = CountingList([0.5] * (MAX_METRIC_VALUES + 1))
    extra = {"long-list": {"per-sample-loss": long_list},
             "many-keys": {f"k{i}": 0.5 for i in range(MAX_METRIC_KEYS)}}.get(case, {})
    record = None
    if case == "array-bytes":
        big = Array(np.zeros(10_000))
        record = ArrayRecord({"0": Array(dtype=big.dtype, shape=(2,), stype=big.stype, data=big.data)})
    replies, _ = _round_with(strategy, extra, record)
    CountingList.reads = 0  # building the MetricRecord read the entries once (Flower's type check)
    caplog.clear()
    # Execute
    arrays, _ = strategy.aggregate_train(2, replies)
    # Assert: skipped as invalid, not one entry of its list read, one line naming the node and the size;
    # the round completed with the three others
    assert CountingList.reads == 0
    clients = strategy.client_history
    assert clients[(clients["round"] == 2) & (clients["node_id"] == HOSTILE)]["status"].tolist() == ["invalid"]
    lines = [line for line in sup.adaptive_lines(caplog) if str(HOSTILE) in line]
    assert len(lines) == 1 and "skipped unread" in lines[0]
    assert {"long-list": "metric values", "many-keys": "metric keys", "array-bytes": "bytes"}[case] in lines[0]
    row = strategy.history.iloc[-1]
    assert (row["clients"], row["skipped"]) == (3, 1)
    assert np.all(np.isfinite(arrays.to_numpy_ndarrays()[0]))


def test_replies_at_the_limits_are_kept_and_screened_as_usual():
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.screening import MAX_METRIC_KEYS, MAX_METRIC_VALUES

    # Prepare: the hostile node sends exactly the largest reply allowed (its keys are not sent by the
    # others, so they are left out of the average; the reply itself is kept)
    strategy = AdaptiveStrategy(fedavg(), budget=BUDGET, deadband=0.0)
    honest_round(strategy, 1)
    base = len(telemetry(1, 1.0, 0)) + 1  # telemetry + num-examples
    room = MAX_METRIC_KEYS - base
    extra = {f"k{i}": 0.5 for i in range(room - 1)}
    extra["per-sample-loss"] = [0.5] * (MAX_METRIC_VALUES - (MAX_METRIC_KEYS - 1))
    replies, _ = _round_with(strategy, extra)
    # Execute
    strategy.aggregate_train(2, replies)
    # Assert
    assert strategy.history.iloc[-1]["clients"] == 4


def test_size_reason_reads_lengths_only():
    from flwr_adaptive.strategies.screening import MAX_METRIC_VALUES, size_reason

    # Prepare / Execute / Assert: lists, strings and bytes count by length; keys sized elsewhere as one
    assert size_reason({"a": [1.0] * 10, "b": 2}) is None
    assert "metric values" in size_reason({"a": "x" * (MAX_METRIC_VALUES + 1)})
    assert size_reason({"ranks": CountingList([1] * (MAX_METRIC_VALUES + 1))}, sized_elsewhere={"ranks"}) is None
    reference = {"0": ((10,), "float64")}
    assert size_reason({}, {"0": 80 + 128}, reference) is None
    assert "holds 1000080 bytes" in size_reason({}, {"0": 1_000_080}, reference)
    assert "2 arrays, the model has 1" in size_reason({}, {"0": 80, "1": 80}, reference)


def test_the_legacy_strategy_and_fedasync_skip_an_oversized_reply_unread():
    from flwr.server.strategy import FedAvg

    from flwr_adaptive.strategies import LegacyAdaptiveStrategy
    from flwr_adaptive.strategies.screening import MAX_METRIC_KEYS
    from hostile_support import _legacy_round

    # Prepare: the legacy API's client HOSTILE sends more keys than allowed
    strategy = LegacyAdaptiveStrategy(FedAvg(min_fit_clients=4, min_available_clients=4), budget=BUDGET)
    _legacy_round(strategy, 1)
    many = {f"k{i}": 0.5 for i in range(MAX_METRIC_KEYS)}
    # Execute
    q, _ = _legacy_round(strategy, 2, {HOSTILE: lambda m, a: ({**m, **many}, a, [])})
    # Assert
    row = strategy.history.iloc[-1]
    assert (row["clients"], row["samples"]) == (3, sum(q[n] for n in NODES if n != HOSTILE))


def test_fedasync_retries_a_job_whose_reply_is_oversized():
    from flwr.app import ArrayRecord

    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy
    from flwr_adaptive.strategies.screening import MAX_METRIC_VALUES
    from experiments import liar

    # Prepare: the liar federation, node 3's first job replies with an over-long list
    fed = liar.Federation(None)
    grid = liar.Grid(fed)
    real = fed.reply
    sent = {"done": False}

    def reply_once_oversized(msg, true_s):
        out = real(msg, true_s)
        if msg.metadata.dst_node_id == 3 and not sent["done"]:
            sent["done"] = True
            out.content["metrics"]["per-sample-loss"] = CountingList([0.5] * (MAX_METRIC_VALUES + 1))
            CountingList.reads = 0
        return out

    fed.reply = reply_once_oversized
    strategy = FedAsyncStrategy(budget=liar.BUDGET, min_nodes=11)
    # Execute
    strategy.start(grid, ArrayRecord([np.zeros(2)]), num_rounds=2)
    # Assert: the job failed without its list being read and was retried; every sample was processed
    rows = strategy.client_history
    assert CountingList.reads == 0
    assert (rows["status"].str.contains("metric values")).sum() == 1
    assert rows.loc[rows["status"] == "ok", "samples"].sum() == 2 * liar.BUDGET
