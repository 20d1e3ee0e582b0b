"""Equal steps, scaled batches: the reference quota on the wire (both APIs) and the client's batch size."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from adaptive_support import FakeGrid
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from flwr_adaptive import keys
from flwr_adaptive.clients import quota_batch_size, quota_data, telemetry_train
from flwr_adaptive.clients.batch_scaling import scaled_batch_size
from flwr_adaptive.clients.data import QuotaWindow, close_window, open_window, select_indices
from flwr_adaptive.strategies import AdaptiveStrategy, LegacyAdaptiveStrategy
from flwr_adaptive.strategies.registry import build_strategy

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py

X = [np.array([1.0, -2.0])]


def steps(samples: int, batch: int) -> int:
    """Optimizer steps of one pass over ``samples`` in batches of ``batch`` (the last one partial)."""
    return math.ceil(samples / batch)


# ----------------------------------------------------------------------------- the batch size
def test_the_scaled_batch_size_by_hand():
    # reference 100 at batch 32: 4 steps. Quota 400: ceil(32·400/100) = 128, ceil(400/128) = 4 steps
    assert scaled_batch_size(32, 400, 100, None) == 128 and steps(400, 128) == 4
    # quota 6: ceil(32·6/100) = ceil(1.92) = 2, 3 steps
    assert scaled_batch_size(32, 6, 100, None) == 2 and steps(6, 2) == 3
    assert scaled_batch_size(32, 100, 100, None) == 32  # the reference quota keeps the user's batch size
    assert scaled_batch_size(32, 1, 100, None) == 1  # never below one sample
    # the cap: quota 1600 wants 512 (16×); at most 8 × 32 = 256, so 7 steps instead of 4
    assert scaled_batch_size(32, 1600, 100, None) == 512
    assert scaled_batch_size(32, 1600, 100) == 256 and steps(1600, 256) == 7
    assert scaled_batch_size(32, 400, 100, 2.0) == 64
    # no reference (or nothing to read): the user's batch size
    assert scaled_batch_size(32, 400, None) == 32 and scaled_batch_size(32, 0, 100) == 32


def test_the_batch_size_arguments_are_checked():
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        scaled_batch_size(0, 10, 10)
    with pytest.raises(ValueError, match="max_scale must be a number >= 1 or None"):
        scaled_batch_size(32, 10, 10, 0.5)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 256), st.integers(1, 5000), st.integers(1, 20000), st.sampled_from([None, 1.0, 2.5, 8.0]))
def test_property_steps_never_exceed_the_references_unless_the_cap_binds(batch, reference, samples, cap):
    # Execute
    got = scaled_batch_size(batch, samples, reference, cap)
    # Assert: at least one sample a batch; the reference's steps at most, unless the cap holds the batch
    assert got >= 1
    if steps(samples, got) > steps(reference, batch):
        assert cap is not None and got == max(1, int(cap * batch))
    if cap is not None:
        assert got <= max(1, int(cap * batch))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 300), st.integers(1, 400), st.integers(1, 300),
       st.sampled_from([None, 2.0, 8.0]), st.booleans())
def test_property_a_scaled_loader_reads_every_sample_of_the_quota_once(batch, size, quota, reference, cap, shuffle):
    # Prepare: local data of `size`, the round's quota (>= 1: a zero quota gets no message) and reference
    loader = DataLoader(TensorDataset(torch.arange(size)), batch_size=batch, shuffle=shuffle)
    token = open_window(QuotaWindow(quota, seed=3, partition=1, server_round=2, reference=reference))
    try:
        # Execute
        scaled = quota_data(loader, max_batch_scale=cap)
        batches = [b[0].tolist() for b in scaled]
    finally:
        close_window(token)
    # Assert: the selection (the quota, capped at the data), each sample once; the reference's steps at most
    selected, _ = select_indices(size, quota, seed=3, partition=1, server_round=2)
    assert sorted(i for b in batches for i in b) == sorted(selected.tolist())
    assert scaled.batch_size == scaled_batch_size(batch, len(selected), reference, cap)
    if len(batches) > steps(reference, batch):
        assert cap is not None and scaled.batch_size == int(cap * batch)


# ----------------------------------------------------------------------------- the client wrapper
def _message(config):
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "config": ConfigRecord(config)}),
                   dst_node_id=7, message_type="train")


def _context():
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=7, node_config={"partition-id": 1}, state=RecordDict(), run_config={})


def _loader_train(size: int, seen: dict):
    """A train function over a DataLoader of batch 32 through ``quota_data``, one SGD step per batch."""

    def train(msg, context):
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        loader = quota_data(DataLoader(TensorDataset(torch.ones(size, 2)), batch_size=32))
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen["batches"] = []
        for (x,) in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            seen["batches"].append(len(x))
        seen["helper"] = quota_batch_size(32)
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]),
                                   "metrics": MetricRecord({"num-examples": sum(seen["batches"])})}), reply_to=msg)

    return train


def test_the_wrapped_loader_takes_the_references_steps_and_reports_them():
    # Prepare: quota 400 with reference 100 (4 steps of 32)
    seen: dict = {}
    config = {keys.QUOTA: 400, keys.REFERENCE_QUOTA: 100, keys.ROUND: 1}
    # Execute
    reply = telemetry_train(_loader_train(1000, seen))(_message(config), _context())
    # Assert: batches of 128 (3 full and 16), 4 steps reported as taken; the helper gives the same size
    assert seen["batches"] == [128, 128, 128, 16] and seen["helper"] == 128
    assert reply.content["metrics"][keys.LOCAL_STEPS] == 4 and reply.content["metrics"][keys.SAMPLES] == 400


def test_the_batch_follows_the_samples_selected_when_the_quota_exceeds_the_data():
    seen: dict = {}
    config = {keys.QUOTA: 400, keys.REFERENCE_QUOTA: 100, keys.ROUND: 1}
    telemetry_train(_loader_train(50, seen))(_message(config), _context())  # capped at 50: ceil(32·50/100) = 16
    assert seen["batches"] == [16, 16, 16, 2] and seen["helper"] == 16


def test_without_a_reference_the_users_batch_size_is_kept():
    seen: dict = {}
    telemetry_train(_loader_train(1000, seen))(_message({keys.QUOTA: 100, keys.ROUND: 1}), _context())
    assert seen["batches"] == [32, 32, 32, 4] and seen["helper"] == 32
    assert quota_batch_size(32) == 32  # outside a wrapped call


@pytest.mark.parametrize("bad", ["100", -3, 0, 2.5, True, float("nan")])
def test_a_malformed_reference_falls_back_to_the_users_batch_size_with_a_warning(bad, caplog):
    # Prepare
    seen: dict = {}
    config = {keys.QUOTA: 100, keys.REFERENCE_QUOTA: bad, keys.ROUND: 1}
    from flwr_adaptive.clients import batch_scaling

    batch_scaling._WARNED.clear()
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        reply = telemetry_train(_loader_train(1000, seen))(_message(config), _context())
    # Assert: trained at batch 32, said why once, never raised
    assert seen["batches"] == [32, 32, 32, 4] and reply.content["metrics"][keys.LOCAL_STEPS] == 4
    assert any("reference-quota" in r.getMessage() and "user's batch size" in r.getMessage() for r in caplog.records)


def test_a_loader_built_before_the_call_scales_when_it_is_read_legacy_client():
    from flwr.client import NumPyClient

    from flwr_adaptive.clients import TelemetryClient

    # Prepare: the legacy examples' pattern: quota_data(trainloader) in client_fn, read in fit
    loader = quota_data(DataLoader(TensorDataset(torch.arange(1000)), batch_size=32))

    class Client(NumPyClient):
        def fit(self, parameters, config):
            sizes = [len(b[0]) for b in loader]
            return parameters, sum(sizes), {"sizes": str(sizes), "steps": len(loader),
                                            "helper": quota_batch_size(32)}

    client = TelemetryClient(Client(), _context())
    # Execute
    _, n, scaled = client.fit(X, {keys.QUOTA: 6, keys.REFERENCE_QUOTA: 100, keys.ROUND: 1})
    _, _, plain = client.fit(X, {keys.QUOTA: 70, keys.ROUND: 2})
    # Assert: quota 6 in batches of ceil(32·6/100) = 2 (3 steps); without a reference batches of 32
    assert (n, scaled["sizes"], scaled["steps"], scaled["helper"]) == (6, "[2, 2, 2]", 3, 2)
    assert (plain["sizes"], plain["steps"], plain["helper"]) == ("[32, 32, 6]", 3, 32)
    assert loader.batch_size == 32  # built outside the call: the attribute stays the user's
    assert [len(b[0]) for b in loader][:2] == [32, 32] and len(loader) == 32  # outside: all 1000 samples


# ----------------------------------------------------------------------------- the strategies
def _fedavg(n):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)


def _message_configs(strategy):
    from flwr.app import ArrayRecord, ConfigRecord

    msgs = strategy.configure_train(1, ArrayRecord(X), ConfigRecord(), FakeGrid([100, 101, 102]))
    return [dict(m.content["config"]) for m in msgs]


def _legacy_configs(strategy):
    from flwr.common import ndarrays_to_parameters
    from test_strategy_core import _Manager

    return [dict(ins.config) for _, ins in strategy.configure_fit(1, ndarrays_to_parameters(X),
                                                                   _Manager(["11", "12", "13"]))]


def _legacy(**kw):
    from flwr.server.strategy import FedAvg

    return LegacyAdaptiveStrategy(FedAvg(min_fit_clients=3, min_available_clients=3), budget=301, **kw)


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_the_reference_quota_is_on_the_wire_only_when_asked(api):
    # Prepare: 301 samples over 3 nodes: the equal share 301 // 3 = 100
    if api == "message":
        make, configs = (lambda **kw: AdaptiveStrategy(_fedavg(3), budget=301, **kw)), _message_configs
    else:
        make, configs = _legacy, _legacy_configs
    # Execute
    scaled, plain = configs(make(scale_batch_size=True)), configs(make(scale_batch_size=False))
    # Assert
    assert [c[keys.REFERENCE_QUOTA] for c in scaled] == [100, 100, 100]
    assert sorted(c[keys.QUOTA] for c in scaled) == [100, 100, 101]
    assert all(keys.REFERENCE_QUOTA not in c for c in plain)


def test_the_reference_is_the_share_of_the_samples_trained_when_the_budget_exceeds_the_data():
    from flwr.app import ArrayRecord, ConfigRecord
    from test_strategy_core import COSTS, NODES, PARTS, play_round

    # Prepare: 4 nodes of 100 samples each, budget 1000 (cycling off): round 2 trains each on its
    # 100 samples; a reference of 1000 // 4 = 250 would read them in batches of ceil(32·100/250) = 13,
    # 8 steps each instead of the 4 an equal split takes at 32
    strategy = AdaptiveStrategy(_fedavg(4), budget=1000, scale_batch_size=True)
    grid = FakeGrid(NODES)
    play_round(strategy, grid, 1, COSTS, PARTS, data_size=100)
    # Execute
    msgs = list(strategy.configure_train(2, ArrayRecord(X), ConfigRecord(), grid))
    # Assert: every node holds the reference, so keeps the user's batch size
    configs = [dict(m.content["config"]) for m in msgs]
    assert [c[keys.QUOTA] for c in configs] == [100] * 4
    assert [c[keys.REFERENCE_QUOTA] for c in configs] == [100] * 4
    assert scaled_batch_size(32, 100, configs[0][keys.REFERENCE_QUOTA]) == 32


@pytest.mark.parametrize("make", [
    lambda **kw: AdaptiveStrategy(budget=10, **kw),
    lambda **kw: LegacyAdaptiveStrategy(budget=10, **kw),
    lambda **kw: build_strategy("time", budget=10, **kw),
], ids=["message", "legacy", "build-time"])
def test_scale_batch_size_reaches_the_strategies_and_is_checked(make):
    assert make(scale_batch_size=False).scale_batch_size is False and make(scale_batch_size=True).scale_batch_size is True
    for bad in ("no", 1):
        with pytest.raises(ValueError, match="scale_batch_size must be True, False or .shrink."):
            make(scale_batch_size=bad)


@pytest.mark.parametrize("policy", ["static", "oort", "fedasync"])
def test_baselines_refuse_scale_batch_size_rather_than_ignoring_it(policy):
    with pytest.raises(ValueError, match=f"scale_batch_size does not apply to policy '{policy}'"):
        build_strategy(policy, budget=10, scale_batch_size=True)


# ----------------------------------------------------------------------------- plausible equal steps
def test_equal_steps_at_unequal_samples_are_plausible_only_when_asked_for():
    from flwr_adaptive.normalized_averaging import plausible_steps

    # Prepare: 4 steps each for 400, 100, 100, 25 and 12 samples (scaled batches); m = median steps per
    # sample = 0.04, so by samples alone 400 samples should take 400·0.04/2 = 8 steps at least
    steps, samples = [4, 4, 4, 4, 4], [400, 100, 100, 25, 12]
    # Execute / Assert
    by_samples, clipped = plausible_steps(steps, samples)
    assert by_samples.tolist() == [8, 4, 4, 4, 4] and clipped.tolist() == [True, False, False, False, False]
    equal, clipped = plausible_steps(steps, samples, equal_steps=True)
    assert equal.tolist() == [4, 4, 4, 4, 4] and not clipped.any()
    # a liar is still bounded: 1 step is raised to median/2 = 2 steps, 1000 lowered to 400·0.04·2 = 32
    liar, clipped = plausible_steps([1, 4, 4, 4, 1000], [400, 100, 100, 25, 12], equal_steps=True)
    assert liar.tolist() == [2, 4, 4, 4, 8] and clipped.tolist() == [True, False, False, False, True]


@pytest.mark.parametrize("api", ["message", "legacy"])
def test_scaled_batches_are_aggregated_unrescaled_and_without_a_warning(api, caplog):
    from test_normalized_strategy import message_round

    # Prepare: round 1 (equal quotas of 100), equal steps (4) on 100, 25 and 10 samples (scaled batches);
    # the models moved by 1, 2, 3
    x = [np.array([0.0])]
    # (each holds what it read: a quota of 100 above a node's data selects all of it)
    per_node = [({"samples": s, "steps": 4, "data_size": s}, [np.array([float(d)])]) for s, d in ((100, 1), (25, 2), (10, 3))]
    make = ((lambda **kw: AdaptiveStrategy(_fedavg(3), budget=301, trust=False, **kw)) if api == "message"
            else (lambda **kw: _legacy(trust=False, **kw)))
    scaled, plain = make(scale_batch_size=True), make(scale_batch_size=False)
    # Execute
    with caplog.at_level(logging.WARNING, logger="flwr"):
        if api == "message":
            message_round(scaled, x, per_node)
        else:
            _legacy_round(scaled, x, per_node)
    said = [r.getMessage() for r in caplog.records if "steps per sample" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flwr"):
        message_round(plain, x, per_node) if api == "message" else _legacy_round(plain, x, per_node)
    # Assert: with scale_batch_size every factor is 1 and nothing is said; without it the 100-sample
    # node's 4 steps are taken as implausibly few (m = 4/25: raised to 100·m/2 = 8) and it is scaled down
    assert said == [] and set(scaled.last_scales.values()) == {1.0}
    assert any("steps per sample" in r.getMessage() for r in caplog.records)
    assert min(plain.last_scales.values()) < 1.0


def _legacy_round(strategy, x, per_node):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from test_normalized_strategy import telemetry
    from test_strategy_core import _Manager

    pairs = strategy.configure_fit(1, ndarrays_to_parameters(x), _Manager(["11", "12", "13"]))
    ok = Status(Code.OK, "")
    results = [(proxy, FitRes(ok, ndarrays_to_parameters(model), 1,
                              telemetry(kw["samples"], i, steps=kw["steps"], data_size=kw.get("data_size", 1000))))
               for i, ((proxy, _), (kw, model)) in enumerate(zip(pairs, per_node))]
    strategy.aggregate_fit(1, results, [])


@pytest.mark.parametrize("bad", [0, 0.5, -1, "8", True, float("nan")])
@pytest.mark.parametrize("kind", ["loader", "dataset", "array"])
def test_quota_data_refuses_a_bad_max_batch_scale_at_the_call_not_at_the_first_reference(bad, kind):
    # Outside any training call (no reference yet): the mistake must not wait for a round.
    data = {"loader": DataLoader(TensorDataset(torch.zeros(6, 2)), batch_size=2),
            "dataset": TensorDataset(torch.zeros(6, 2)), "array": np.zeros((6, 2))}[kind]
    with pytest.raises(ValueError, match="max_batch_scale must be a number >= 1 or None"):
        quota_data(data, max_batch_scale=bad)
