"""The client side: the quota data helper and the telemetry wrappers (no simulation engine)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive import keys
from flwr_adaptive.devices import DeviceProfile
from flwr_adaptive.energy import EmulatedMeter, SleepEmulatedMeter

import adaptive_support as sup
from flwr_adaptive.clients.data import QuotaWindow, close_window, current_window, open_window, quota_data, select_indices
from flwr_adaptive.clients.telemetry import TelemetryClient, telemetry_train




def _train_message(config: dict, node_id: int = 7):
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "config": ConfigRecord(config)}),
                   dst_node_id=node_id, message_type="train")


def _context(partition_id: int | None = 2, node_id: int = 7):
    from flwr.app import Context, RecordDict

    node_config = {} if partition_id is None else {"partition-id": partition_id, "num-partitions": 6}
    return Context(run_id=1, node_id=node_id, node_config=node_config, state=RecordDict(), run_config={})


# --------------------------------------------------------------------------- selection
@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 300), quota=st.integers(0, 1000), cycling=st.booleans(),
       seed=st.integers(0, 2**31), rnd=st.integers(0, 50))
def test_selection_holds_exactly_the_quota_or_the_capped_data(size, quota, cycling, seed, rnd):
    # Execute
    idx, capped = select_indices(size, quota, allow_cycling=cycling, seed=seed, partition=3, server_round=rnd)
    # Assert
    assert ((0 <= idx) & (idx < size)).all()
    if quota <= size:
        assert len(idx) == quota and not capped and len(set(idx.tolist())) == quota
    elif cycling:
        assert len(idx) == quota and not capped
        counts = np.bincount(idx, minlength=size)  # whole passes, then part of one more
        assert counts.max() - counts.min() <= 1 and counts.min() == quota // size
    else:
        assert capped and sorted(idx.tolist()) == list(range(size))
    again, _ = select_indices(size, quota, allow_cycling=cycling, seed=seed, partition=3, server_round=rnd)
    np.testing.assert_array_equal(idx, again)  # seeded: the same triple, the same order


def test_selection_changes_with_the_round_and_without_quota_is_everything_in_order():
    # Execute
    a, _ = select_indices(100, 50, seed=1, partition=2, server_round=1)
    b, _ = select_indices(100, 50, seed=1, partition=2, server_round=2)
    everything, capped = select_indices(7, None)
    # Assert
    assert a.tolist() != b.tolist()
    assert everything.tolist() == list(range(7)) and not capped


def test_selection_rejects_negative_inputs():
    with pytest.raises(ValueError, match="quota must be >= 0, got -1"):
        select_indices(10, -1)
    with pytest.raises(ValueError, match="local data size must be >= 0"):
        select_indices(-2, 1)


# --------------------------------------------------------------------------- the data helper
def test_quota_data_on_arrays_tuples_and_lists_selects_the_same_samples():
    # Prepare
    x, y = np.arange(50) * 10, np.arange(50)
    token = open_window(QuotaWindow(12, seed=4, partition=1, server_round=3))
    try:
        # Execute
        xs, ys = quota_data((x, y))
        listed = quota_data(list(range(50)))
        only_y = quota_data(y)
        window = current_window()
    finally:
        close_window(token)
    # Assert
    assert len(xs) == 12 and (xs == ys * 10).all()
    assert listed == ys.tolist() and (only_y == ys).all()
    assert (window.size, window.samples, window.capped) == (50, 12, False)


def test_quota_data_outside_a_window_refuses_arrays_and_passes_datasets_through():
    # Prepare
    data = sup.CountingData(9, clock=sup.FakeClock())
    # Execute
    view = quota_data(data)
    # Assert
    assert len(view) == 9 and [view[i] for i in range(9)] == [0.0] * 9
    with pytest.raises(ValueError, match="inside the wrapped train function"):
        quota_data(np.arange(5))
    with pytest.raises(ValueError, match="equal length"):
        token = open_window(QuotaWindow(2))
        try:
            quota_data((np.arange(5), np.arange(6)))
        finally:
            close_window(token)
    with pytest.raises(ValueError, match="cannot select from int"):
        quota_data(5)


def test_lazy_view_resolves_against_the_window_active_when_read_and_pickles_its_selection():
    # Prepare: built outside any window, as a NumPyClient builds its data in client_fn
    data = sup.CountingData(40, clock=sup.FakeClock())
    view = quota_data(data)
    token = open_window(QuotaWindow(6, seed=0, partition=0, server_round=1))
    try:
        # Execute
        inside = len(view)
        read = [view[i] for i in range(len(view))]
        frozen = pickle.loads(pickle.dumps(view))  # what a DataLoader worker receives
    finally:
        close_window(token)
    # Assert
    assert inside == 6 and len(read) == 6
    expected, _ = select_indices(40, 6, seed=0, partition=0, server_round=1)
    assert data.reads == expected.tolist()
    assert len(frozen) == 6 and len(view) == 40  # the copy keeps the selection; the view is open again


def test_quota_data_rebuilds_a_dataloader_with_its_settings():
    import torch
    from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

    # Prepare
    ds = TensorDataset(torch.arange(100))
    loader = DataLoader(ds, batch_size=8, shuffle=True, drop_last=False)
    token = open_window(QuotaWindow(20, seed=1, partition=0, server_round=1))
    try:
        # Execute
        quota_loader = quota_data(loader)
        seen = torch.cat([b[0] for b in quota_loader]).tolist()
        n_batches, n_data = len(quota_loader), len(quota_loader.dataset)
    finally:
        close_window(token)
    # Assert
    expected, _ = select_indices(100, 20, seed=1, partition=0, server_round=1)
    assert sorted(seen) == sorted(expected.tolist())  # the quota, reshuffled by the user's shuffle
    assert (quota_loader.batch_size, n_batches, n_data) == (8, 3, 20)
    weighted = DataLoader(ds, sampler=WeightedRandomSampler([1.0] * 100, 10))
    with pytest.raises(ValueError, match="custom sampler"):
        quota_data(weighted)
    # the fix names the batch size that keeps the strategy's batch scaling (scale_batch_size, "shrink" by default)
    for loader in (weighted, DataLoader(ds, batch_size=None)):
        with pytest.raises(ValueError, match=r"quota_batch_size\(B\)"):
            quota_data(loader)


# --------------------------------------------------------------------------- the Message-API wrapper
def _counting_train(data_size: int, clock: sup.FakeClock, record: dict):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    def train(msg, context):
        data = sup.CountingData(data_size, clock=clock)
        view = quota_data(data)
        for i in range(len(view)):
            view[i]
        record["reads"] = len(data.reads)
        clock.now += 0.5  # model set-up, outside the data: part of the measured call
        return Message(RecordDict({"arrays": msg.content["arrays"],
                                   "metrics": MetricRecord({"train_loss": 0.25, "num-examples": len(view)})}),
                       reply_to=msg)

    return train


def test_wrapped_train_reads_the_quota_and_reports_exact_telemetry(flower_identity):
    # Prepare: a device 3x slower than the host drawing 8 W / 1.5 W idle, on a fake CPU clock
    clock, record = sup.FakeClock(), {}
    profile = DeviceProfile("slow", "arm64", slowdown=3.0, active_w=8.0, idle_w=1.5)
    meter = EmulatedMeter(profile, cpu_clock=clock)
    wrapped = telemetry_train(_counting_train(500, clock, record), meter=meter, cpu_clock=clock, wall_clock=clock)
    # Execute
    reply = wrapped(_train_message({keys.QUOTA: 64, keys.ALLOW_CYCLING: False, keys.ROUND: 2}), _context(2))
    metrics = reply.content["metrics"]
    # Assert
    cpu = 64 * sup.COST_S + 0.5
    assert record["reads"] == 64
    assert metrics[keys.SAMPLES] == 64 and metrics["num-examples"] == 64 and metrics["train_loss"] == 0.25
    assert metrics[keys.CPU_TIME_S] == cpu and metrics[keys.WALL_TIME_S] == cpu
    assert metrics[keys.TIME_S] == cpu * 3.0 and metrics[keys.ENERGY_J] == cpu * 3.0 * 8.0
    assert metrics[keys.DATA_SIZE] == 500 and metrics[keys.PARTITION_ID] == 2
    assert metrics[keys.QUOTA_CAPPED] == 0 and metrics[keys.IDLE_W] == 1.5 and metrics[keys.VIRTUAL_CLOCK] == 1
    assert current_window() is None


def test_a_sleep_emulated_device_makes_the_call_last_its_device_time_on_the_wall_clock(flower_identity):
    # Prepare: a 3x slower device realised by sleeping; the wall clock is the CPU clock plus naps
    clock, record, naps = sup.FakeClock(), {}, []

    def wall() -> float:
        return clock.now + sum(naps)

    profile = DeviceProfile("slow", "arm64", slowdown=3.0, active_w=8.0, idle_w=1.5)
    meter = SleepEmulatedMeter(profile, cpu_clock=clock, wall_clock=wall, sleep=naps.append)
    wrapped = telemetry_train(_counting_train(500, clock, record), meter=meter, cpu_clock=clock, wall_clock=wall)
    # Execute
    reply = wrapped(_train_message({keys.QUOTA: 64, keys.ALLOW_CYCLING: False, keys.ROUND: 2}), _context(2))
    metrics = reply.content["metrics"]
    # Assert: the reported time is wall time including the nap (what the server waits for)
    cpu = 64 * sup.COST_S + 0.5
    assert naps == [pytest.approx(2 * cpu)]
    assert metrics[keys.CPU_TIME_S] == pytest.approx(cpu)
    assert metrics[keys.WALL_TIME_S] == pytest.approx(3 * cpu) and metrics[keys.TIME_S] == pytest.approx(3 * cpu)
    assert metrics[keys.ENERGY_J] == pytest.approx(3 * cpu * 8.0) and metrics[keys.VIRTUAL_CLOCK] == 0


def test_wrapped_train_without_a_quota_trains_on_all_data_and_still_reports(flower_identity):
    # Prepare: plain FedAvg sends no quota; no partition id in the node config
    clock, record = sup.FakeClock(), {}
    wrapped = telemetry_train(_counting_train(300, clock, record), meter=sup.NaNMeter(), cpu_clock=clock,
                              wall_clock=clock)
    # Execute
    metrics = wrapped(_train_message({"lr": 0.1}), _context(None)).content["metrics"]
    # Assert
    assert record["reads"] == 300 and metrics[keys.SAMPLES] == 300 and metrics[keys.DATA_SIZE] == 300
    assert metrics[keys.PARTITION_ID] == keys.UNKNOWN and metrics[keys.ENERGY_J] == keys.UNMEASURED_ENERGY
    assert metrics[keys.TIME_S] == metrics[keys.WALL_TIME_S]  # a broken meter's NaN: wall time instead
    assert set(keys.TELEMETRY_KEYS) <= set(metrics.keys())


@pytest.mark.parametrize("cycling, samples, capped", [(False, 40, 1), (True, 100, 0)])
def test_wrapped_train_caps_or_cycles_a_quota_above_the_local_data(flower_identity, cycling, samples, capped):
    # Prepare
    clock, record = sup.FakeClock(), {}
    wrapped = telemetry_train(_counting_train(40, clock, record), meter=sup.NaNMeter(), cpu_clock=clock,
                              wall_clock=clock)
    # Execute
    metrics = wrapped(_train_message({keys.QUOTA: 100, keys.ALLOW_CYCLING: cycling, keys.ROUND: 1}),
                      _context(0)).content["metrics"]
    # Assert
    assert record["reads"] == samples and metrics[keys.SAMPLES] == samples
    assert metrics[keys.QUOTA_CAPPED] == capped


def test_a_failing_meter_falls_back_to_wall_time_and_unmeasured_energy(flower_identity):
    # Prepare
    class Unplugged:
        def begin_window(self, name):
            raise OSError("powercap vanished")

    clock, record = sup.FakeClock(), {}
    wrapped = telemetry_train(_counting_train(10, clock, record), meter=Unplugged(), cpu_clock=clock, wall_clock=clock)
    # Execute
    metrics = wrapped(_train_message({keys.QUOTA: 4, keys.ROUND: 1}), _context(1)).content["metrics"]
    # Assert
    assert metrics[keys.TIME_S] == metrics[keys.WALL_TIME_S] == 4 * sup.COST_S + 0.5
    assert metrics[keys.ENERGY_J] == keys.UNMEASURED_ENERGY and metrics[keys.VIRTUAL_CLOCK] == 0


def test_an_exception_of_the_train_function_propagates_and_closes_the_window(flower_identity):
    # Prepare
    def broken(msg, context):
        quota_data(np.arange(3))
        raise RuntimeError("out of memory")

    wrapped = telemetry_train(broken, meter=sup.NaNMeter())
    # Execute / Assert
    with pytest.raises(RuntimeError, match="out of memory"):
        wrapped(_train_message({keys.QUOTA: 2, keys.ROUND: 1}), _context(1))
    assert current_window() is None


def test_meter_spec_must_be_a_meter_or_a_factory():
    with pytest.raises(ValueError, match="meter must be None"):
        telemetry_train(meter=42)
    with pytest.raises(ValueError, match="meter must be None"):
        TelemetryClient(object(), meter="rapl")


# --------------------------------------------------------------------------- NumPyClient wrapper
def test_telemetry_client_trains_lazy_data_on_the_quota_and_adds_metrics():
    from flwr.client import NumPyClient

    # Prepare: data wrapped in client_fn, outside any window (the legacy pattern)
    clock = sup.FakeClock()

    class Client(NumPyClient):
        def __init__(self, data):
            self.data = data

        def fit(self, parameters, config):
            values = [self.data[i] for i in range(len(self.data))]
            return parameters, len(values), {"mine": 1.0}

        def evaluate(self, parameters, config):
            return 0.5, 3, {}

    data = sup.CountingData(200, clock=clock)
    client = TelemetryClient(Client(quota_data(data)), _context(4),
                             meter=lambda ctx, rnd: EmulatedMeter(sup.PROFILES[ctx.node_config["partition-id"]],
                                                                  cpu_clock=clock),
                             cpu_clock=clock, wall_clock=clock)
    # Execute
    params, n, metrics = client.fit([np.ones(2)], {keys.QUOTA: 30, keys.ROUND: 5})
    # Assert
    assert n == 30 and len(data.reads) == 30 and metrics["mine"] == 1.0
    assert metrics[keys.SAMPLES] == 30 and metrics[keys.CPU_TIME_S] == 30 * sup.COST_S
    assert metrics[keys.TIME_S] == 30 * sup.COST_S * sup.SLOWDOWNS[4]
    assert client.evaluate([np.ones(2)], {}) == (0.5, 3, {})
