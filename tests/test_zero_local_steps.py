"""Zero local steps: a quota below the batch size still trains (one batch); a reply of 0 steps is not aggregated,
and 0 steps on every reply of round 1 stops the run with the fix."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from adaptive_support import FakeGrid
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from flwr_adaptive import keys
from flwr_adaptive.clients import quota_loader
from flwr_adaptive.clients.data import QuotaWindow, close_window, open_window, quota_data
from flwr_adaptive.clients.telemetry import telemetry_train


def _message(config):
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "config": ConfigRecord(config)}),
                   dst_node_id=7, message_type="train")


def _context(partition_id=3):
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=7, node_config={"partition-id": partition_id}, state=RecordDict(), run_config={})


def _user_loader(size=200, batch_size=32, drop_last=True):
    """What a PyTorch user builds in ``client_fn``: batches of 32, the partial last one dropped."""
    x = torch.arange(size, dtype=torch.float32).reshape(-1, 1)
    return DataLoader(TensorDataset(x, torch.ones(size, 1)), batch_size=batch_size, shuffle=True, drop_last=drop_last)


def _train(loader, record):
    """A Message-API train function: one SGD step per batch of ``quota_data(loader)``."""

    def train(msg, context):
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        model = torch.nn.Linear(1, 1)
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        sizes = []
        for xb, yb in quota_data(loader):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            sizes.append(len(xb))
        record["batches"] = sizes
        record["moved"] = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord({})}), reply_to=msg)

    return train


@pytest.fixture(autouse=True)
def _fresh_warning():
    quota_loader._WARNED.clear()
    yield
    quota_loader._WARNED.clear()


def test_a_quota_below_the_batch_size_with_drop_last_is_read_as_one_batch_and_takes_a_step(flower_identity, caplog):
    # Prepare: a slow node's quota of 20 samples at the user's batch size 32, no reference quota (scale_batch_size
    # False: Static, Oort-like, or set by the user); torch's own DataLoader over 20 samples yields no batch here
    assert len(DataLoader(TensorDataset(torch.zeros(20)), batch_size=32, drop_last=True)) == 0
    record = {}
    wrapped = telemetry_train(_train(_user_loader(), record))
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        reply = wrapped(_message({keys.QUOTA: 20, keys.ROUND: 1}), _context(3))
    # Assert: one batch holding the whole quota, one optimizer step counted and reported, the model moved
    metrics = reply.content["metrics"]
    assert record["batches"] == [20] and record["moved"]
    assert metrics[keys.LOCAL_STEPS] == 1 and metrics[keys.SAMPLES] == 20
    said = [r.getMessage() for r in caplog.records if "drop_last" in r.getMessage()]
    assert len(said) == 1
    assert all(part in said[0] for part in ("partition 3", "quota of 20", "batch size 32", "min_quota"))


@pytest.mark.parametrize("built_inside", [True, False])
def test_the_loader_keeps_one_batch_built_in_or_outside_the_call_and_drops_a_partial_batch_after_a_full_one(
    built_inside,
):
    # Prepare: the user's loader, wrapped before the window opens (client_fn) or inside it
    user = _user_loader()
    outside = None if built_inside else quota_data(user)
    lengths, sizes = [], []
    for quota in (20, 50, 64, 1):
        token = open_window(QuotaWindow(quota, seed=1, partition=0, server_round=1))
        try:
            # Execute
            loader = quota_data(user) if built_inside else outside
            lengths.append(len(loader))
            sizes.append([len(b[0]) for b in loader])
        finally:
            close_window(token)
    # Assert: below the batch size one partial batch; above it drop_last drops the partial last batch as torch does
    assert lengths == [1, 1, 2, 1]
    assert sizes == [[20], [32], [32, 32], [1]]


def test_without_drop_last_or_with_a_full_batch_nothing_changes_and_nothing_is_said(caplog):
    token = open_window(QuotaWindow(20, seed=1, partition=0, server_round=1))
    try:
        with caplog.at_level(logging.WARNING, logger="flwr"):
            assert [len(b[0]) for b in quota_data(_user_loader(drop_last=False))] == [20]
            assert [len(b[0]) for b in quota_data(_user_loader(batch_size=20))] == [20]
    finally:
        close_window(token)
    assert not [r for r in caplog.records if "drop_last" in r.getMessage()]


@settings(max_examples=60, deadline=None)
@given(quota=st.integers(1, 150), batch_size=st.integers(1, 64), drop_last=st.booleans())
def test_every_non_empty_quota_gives_at_least_one_batch_and_otherwise_torchs_batches(quota, batch_size, drop_last):
    # Prepare
    user = _user_loader(size=150, batch_size=batch_size, drop_last=drop_last)
    window = QuotaWindow(quota, seed=2, partition=0, server_round=1)
    token = open_window(window)
    try:
        # Execute
        loader = quota_data(user)
        sizes = [len(b[0]) for b in loader]
        length = len(loader)
    finally:
        close_window(token)
    # Assert: torch's batches, except that a quota below one batch is one batch rather than none; the
    # window counts the samples those batches hold (the reply's samples: trained, not only selected)
    full, rest = divmod(quota, batch_size)
    torch_sizes = [batch_size] * full + ([rest] if rest and not drop_last else [])
    assert sizes == (torch_sizes or [quota]) and length == len(sizes)
    assert window.samples - (window.dropped or 0) == sum(sizes)


def test_a_dropped_partial_batch_is_not_reported_as_trained(flower_identity):
    # A quota of 150 read in batches of 32 with drop_last: torch trains 4 batches, 128 samples. Reporting the
    # 150 selected made the node's cost per sample look 15 % lower than the work it did.
    record = {}
    wrapped = telemetry_train(_train(_user_loader(), record))
    metrics = wrapped(_message({keys.QUOTA: 150, keys.ROUND: 1}), _context(3)).content["metrics"]
    assert record["batches"] == [32] * 4
    assert metrics[keys.SAMPLES] == 128 and metrics[keys.LOCAL_STEPS] == 4 and metrics[keys.NUM_EXAMPLES] == 128


# ----------------------------------------------------------------------------- the user's own loader: 0 steps said
def _own_loader_train(dataset, record, drop_last=True):
    """A train function building its own DataLoader over the lazy view (``DataLoader(quota_data(ds), B)``)."""

    def train(msg, context):
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        record["batches"] = 0
        for xb, yb in DataLoader(quota_data(dataset), batch_size=32, drop_last=drop_last):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            record["batches"] += 1
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord({})}), reply_to=msg)

    return train


def test_an_own_loader_that_reads_none_of_the_quota_reports_zero_steps_with_the_fix(flower_identity, caplog):
    from flwr_adaptive.clients import telemetry

    # Prepare: the user's own DataLoader (batch 32, drop_last) over the lazy view of a quota of 20
    telemetry._SAID.discard("no-read")
    dataset, record = _user_loader().dataset, {}
    wrapped = telemetry_train(_own_loader_train(dataset, record))
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        reply = wrapped(_message({keys.QUOTA: 20, keys.ROUND: 1}), _context(4))
    # Assert: no batch, and the reply says 0 steps (which the strategy skips: below), not "unknown" (-1),
    # which it would average in as trained
    metrics = reply.content["metrics"]
    assert record["batches"] == 0 and metrics[keys.LOCAL_STEPS] == 0 and metrics[keys.SAMPLES] == 20
    said = [r.getMessage() for r in caplog.records if "read none of the 20 samples" in r.getMessage()]
    assert len(said) == 1 and "partition 4" in said[0] and "drop_last=False" in said[0]
    # the same loop without drop_last reads its quota: one step, counted
    assert telemetry_train(_own_loader_train(dataset, record, drop_last=False))(
        _message({keys.QUOTA: 20, keys.ROUND: 1}), _context(4)).content["metrics"][keys.LOCAL_STEPS] == 1


def test_a_call_that_reads_its_quota_without_a_torch_optimizer_keeps_its_steps_unknown(flower_identity):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    # Prepare: loops that read the selection but step by hand (or without torch): their steps are not 0
    def by_items(msg, context):
        view = quota_data(_user_loader().dataset)
        _ = [view[i] for i in range(len(view))]
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord({})}), reply_to=msg)

    def by_arrays(msg, context):
        x, y = quota_data((np.zeros((200, 1)), np.ones(200)))
        _ = float((x[:, 0] - y).sum())
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord({})}), reply_to=msg)

    for train in (by_items, by_arrays):
        # Execute
        metrics = telemetry_train(train)(_message({keys.QUOTA: 20, keys.ROUND: 1}), _context()).content["metrics"]
        # Assert
        assert metrics[keys.LOCAL_STEPS] == keys.UNKNOWN and metrics[keys.SAMPLES] == 20


def test_a_view_pickled_for_dataloader_workers_counts_as_read():
    import pickle

    window = QuotaWindow(20, seed=1, partition=0, server_round=1)
    token = open_window(window)
    try:
        view = quota_data(_user_loader().dataset)
        assert len(view) == 20 and not window.read  # its length alone is not a read
        pickle.dumps(view)  # what a worker receives: it reads there, out of sight
    finally:
        close_window(token)
    assert window.read


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
@pytest.mark.parametrize("drop_last", [False, True])
def test_forked_dataloader_workers_that_read_the_quota_count_as_read(flower_identity, drop_last):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    # Prepare: the user's own DataLoader with forked workers (Linux's default: the view is not pickled, its items
    # are read in the workers) and a hand-written update (no torch optimizer: the steps cannot be counted)
    dataset, batches = _user_loader().dataset, []

    def train(msg, context):
        model = torch.nn.Linear(1, 1)
        loader = DataLoader(quota_data(dataset), batch_size=32, drop_last=drop_last, num_workers=2,
                            multiprocessing_context="fork")
        for xb, yb in loader:
            model.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
            batches.append(len(xb))
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord({})}), reply_to=msg)

    # Execute: a quota of 20 (below the batch size)
    metrics = telemetry_train(train)(_message({keys.QUOTA: 20, keys.ROUND: 1}), _context()).content["metrics"]
    # Assert: read in one batch, steps unknown (averaged in as trained); with drop_last no batch: 0 steps (skipped)
    if drop_last:
        assert batches == [] and metrics[keys.LOCAL_STEPS] == 0
    else:
        assert batches == [20] and metrics[keys.LOCAL_STEPS] == keys.UNKNOWN


# ----------------------------------------------------------------------------- the server: a reply of 0 steps
@pytest.mark.parametrize("api", ["message", "legacy"])
@pytest.mark.parametrize("weighting", ["normalized", "samples"])
def test_a_reply_claiming_zero_local_steps_is_skipped_not_aggregated_as_trained(api, weighting, caplog, flower_identity):
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.serverapp.strategy import FedAvg
    from test_batch_scaling import _legacy_round
    from test_normalized_strategy import message_round

    from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy

    # Prepare: three nodes at equal quotas (100 of 300); the third sends its model back unchanged (0.0), saying
    # it took 0 steps (a count of its own: the wrapper never reports 0)
    x = [np.array([0.0])]
    per_node = [({"samples": 100, "steps": 4}, [np.array([3.0])]), ({"samples": 100, "steps": 4}, [np.array([3.0])]),
                ({"samples": 100, "steps": 0}, [np.array([0.0])])]
    kw = dict(budget=300, trust=False, weighting=weighting)
    if api == "message":
        strategy = AdaptiveStrategy(FedAvg(fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3), **kw)
    else:
        strategy = LegacyAdaptiveStrategy(LegacyFedAvg(min_fit_clients=3, min_available_clients=3), **kw)
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        out = message_round(strategy, x, per_node) if api == "message" else _legacy_round(strategy, x, per_node)
    # Assert: the reply is skipped with the reason; only the two that trained are averaged (not 2/3 of their move)
    said = [r.getMessage() for r in caplog.records if keys.LOCAL_STEPS in r.getMessage()]
    assert said and "must be >= 1" in said[0] and "skipped" in said[0] and "drop_last=True" in said[0]
    assert len(strategy.last_weights) == 2
    if api == "message":
        np.testing.assert_allclose(out[0], [3.0])


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_zero_steps_on_every_reply_of_round_one_stops_the_run_with_the_fix(api, flower_identity):
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from test_dropin_mistakes import NODES, PARTS, _configure, _fedavg, _legacy_round
    from test_strategy_core import reply, telemetry

    from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
    from flwr_adaptive.strategies.setup_check import SetupError

    def zero(samples, partition):
        return {**telemetry(samples, 0.1, partition), keys.LOCAL_STEPS: 0}

    # Prepare: every node's loop read no batch of its round-1 quota (100 samples, its batch size above it)
    fix = r"(?s)every node .* read none of its quota and took no optimizer step .*quota_data\(DataLoader\("
    # Execute / Assert: the first round stops the run instead of skipping every reply in every round
    if api == "message":
        strategy = AdaptiveStrategy(_fedavg(), budget=400)
        msgs = _configure(strategy, 1, FakeGrid(NODES))
        with pytest.raises(SetupError, match=fix):
            strategy.aggregate_train(1, [reply(m, zero(100, PARTS[m.metadata.dst_node_id])) for m in msgs])
    else:
        strategy = LegacyAdaptiveStrategy(LegacyFedAvg(min_fit_clients=3, min_available_clients=3), budget=300)
        with pytest.raises(SetupError, match=fix):
            _legacy_round(strategy, lambda cid, ins: zero(100, cid - 11))


def test_a_second_loader_in_the_call_does_not_change_the_samples_trained(flower_identity):
    # a train-loss pass over the quota at batch 64 without drop_last after training at batch 32 with it:
    # 128 were trained, and the second loader's remainder (0) no longer overwrote the first's (22)
    record = {}
    train = _train(_user_loader(), record)

    def train_then_measure(msg, context):
        reply = train(msg, context)
        record["eval"] = sum(len(b[0]) for b in quota_data(_user_loader(batch_size=64, drop_last=False)))
        return reply

    metrics = telemetry_train(train_then_measure)(_message({keys.QUOTA: 150, keys.ROUND: 1}), _context(3))
    assert record["eval"] == 150 and metrics.content["metrics"][keys.SAMPLES] == 128



def test_a_quota_thrown_away_while_training_on_the_full_data_is_a_set_up_error(flower_identity):
    # Seen through flwr run (helper-62): `quota_data(trainloader)` without `trainloader = `; every node trained
    # on all its data, the replies reported the quotas as trained and the split adapted on made-up numbers
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    dataset = _user_loader().dataset

    def train(msg, context):
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        quota_data(loader)  # the result thrown away (its shuffled view selects the quota at once)
        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for xb, yb in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord({})}), reply_to=msg)

    with pytest.raises(RuntimeError, match=r"flwr-adaptive set-up error:.*trainloader = quota_data\(trainloader\)"):
        telemetry_train(train)(_message({keys.QUOTA: 20, keys.ROUND: 1}), _context(4))
