"""The Zeus meter: fakes of ZeusMonitor for exact figures, and Zeus itself (its own fallbacks) where installed."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

import pytest

from flwr_adaptive.energy import MeterUnavailable, PsutilMeter, auto_meter
from flwr_adaptive.zeus_meter import ZeusMeter


@dataclass
class FakeMeasurement:
    time: float
    gpu_energy: dict
    cpu_energy: dict | None = None
    dram_energy: dict | None = None
    soc_energy: object = None


class FakeMonitor:
    """ZeusMonitor's window interface over a fake clock; each window uses 10 J per GPU per second."""

    def __init__(self, gpu_indices=(0, 1), cpu_indices=(0,), fail_end=False):
        self.gpu_indices, self.cpu_indices, self.soc_is_present = list(gpu_indices), list(cpu_indices), False
        self.now, self.open, self.fail_end, self.calls = 0.0, {}, fail_end, []

    def begin_window(self, key, sync_execution=True):
        if key in self.open:
            raise ValueError(f"Measurement window '{key}' already exists")
        self.calls.append(("begin", key, sync_execution))
        self.open[key] = self.now

    def end_window(self, key, sync_execution=True, cancel=False):
        if self.fail_end:
            raise RuntimeError("NVML read failed")
        elapsed = self.now - self.open.pop(key)
        return FakeMeasurement(elapsed, {i: 10.0 * elapsed for i in self.gpu_indices},
                               {i: 2.0 * elapsed for i in self.cpu_indices} or None,
                               {i: 0.5 * elapsed for i in self.cpu_indices} or None)


def test_a_window_is_zeus_time_and_the_sum_of_every_domain_it_measured():
    monitor = FakeMonitor()
    meter = ZeusMeter(monitor=monitor)
    meter.begin_window("fit")
    monitor.now = 3.0
    m = meter.end_window("fit")
    assert m.source == "zeus" and m.clock == "wall" and m.seconds == 3.0
    assert m.domains == {"gpu0": 30.0, "gpu1": 30.0, "cpu0": 6.0, "dram0": 1.5}
    assert m.joules == pytest.approx(67.5)
    # our windows are prefixed in Zeus (a user's own "fit" window cannot collide) and synchronised
    assert monitor.calls[0][1].endswith(":fit") and monitor.calls[0][1] != "fit" and monitor.calls[0][2] is True


def test_window_misuse_is_a_value_error_and_a_failed_read_is_no_energy_not_a_crash(caplog):
    meter = ZeusMeter(monitor=FakeMonitor())
    meter.begin_window("a")
    with pytest.raises(ValueError, match="window 'a' is already open on the zeus meter"):
        meter.begin_window("a")
    with pytest.raises(ValueError, match="window 'b' is not open on the zeus meter"):
        meter.end_window("b")
    broken = ZeusMeter(monitor=FakeMonitor(fail_end=True))
    broken.begin_window("fit")
    with caplog.at_level(logging.WARNING, logger="flwr"):
        m = broken.end_window("fit")
    assert m.joules is None and m.seconds >= 0
    assert any("Zeus could not end window 'fit'" in r.getMessage() for r in caplog.records)


def test_a_monitor_with_nothing_to_measure_is_unavailable():
    with pytest.raises(MeterUnavailable, match="Zeus found no GPU, no readable RAPL counter"):
        ZeusMeter(monitor=FakeMonitor(gpu_indices=(), cpu_indices=()))


def test_auto_meter_chooses_zeus_first_when_it_has_counters_and_falls_back_when_not(tmp_path):
    asked = []

    def factory(gpus, cpus):
        asked.append(gpus)
        return FakeMonitor()

    assert auto_meter("cuda:1", zeus=factory, rapl_root=tmp_path).source == "zeus" and asked == [[1]]
    assert auto_meter("cpu", zeus=factory, rapl_root=tmp_path).source == "zeus" and asked[-1] == []
    empty = auto_meter("cpu", zeus=lambda g, c: FakeMonitor((), ()), rapl_root=tmp_path)
    assert isinstance(empty, PsutilMeter)  # no RAPL tree at tmp_path either: the model
    assert isinstance(auto_meter("cpu", zeus=False, rapl_root=tmp_path), PsutilMeter)


@pytest.mark.skipif(importlib.util.find_spec("zeus") is None, reason="zeus not installed (pip install '.[zeus]')")
def test_real_zeus_on_this_machine_measures_or_falls_back_by_its_own_rules(tmp_path):
    # Zeus' own fallbacks: no GPU here -> no GPUs; RAPL without root -> no CPUs; then our meter is
    # unavailable and auto_meter goes on; on a machine with counters it measures a window
    try:
        meter = ZeusMeter(gpu_indices=[], sync_execution=False)
    except MeterUnavailable as err:
        assert "Zeus found no" in str(err) or "Zeus could not start" in str(err)
        assert auto_meter("cpu", rapl_root=tmp_path).source == "psutil-model"
        return
    meter.begin_window("w")
    m = meter.end_window("w")
    assert m.source == "zeus" and m.seconds >= 0 and (m.joules is None or m.joules >= 0)
