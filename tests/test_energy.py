"""Energy meters against fake sysfs trees, a fake NVML module and fake clocks."""

from __future__ import annotations

import logging
import os
import types
from pathlib import Path

import numpy as np
import pytest

from flwr_adaptive.devices import DeviceProfile
from flwr_adaptive.energy import (
    DEFAULT_WATTS_PER_CORE,
    EmulatedMeter,
    Measurement,
    MeterUnavailable,
    NvmlMeter,
    PsutilMeter,
    RaplMeter,
    SleepEmulatedMeter,
    auto_meter,
)


class FakeClock:
    """A clock that returns what the test sets."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_zone(root: Path, dirname: str, name: str, energy_uj: int, max_uj: int = 262_143_328_850) -> Path:
    zone = root / dirname
    zone.mkdir(parents=True)
    (zone / "name").write_text(name + "\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zone


def set_energy(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


def rapl(root: Path, **kw) -> tuple[RaplMeter, FakeClock, FakeClock, FakeClock]:
    wall, cpu, busy = FakeClock(100.0), FakeClock(5.0), FakeClock(1000.0)
    meter = RaplMeter(root=root, wall_clock=wall, cpu_clock=cpu, machine_busy=busy, **kw)
    return meter, wall, cpu, busy


# --------------------------------------------------------------------------- RAPL
def test_rapl_sums_package_and_dram_but_not_core(tmp_path):
    # Prepare: a package with core and dram sub-zones
    pkg = make_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    core = make_zone(tmp_path, "intel-rapl:0:0", "core", 500_000)
    dram = make_zone(tmp_path, "intel-rapl:0:1", "dram", 2_000_000)
    meter, wall, cpu, busy = rapl(tmp_path, attribution="none")
    # Execute
    meter.begin_window("fit")
    set_energy(pkg, 4_000_000)   # +3 J
    set_energy(core, 2_500_000)  # +2 J, inside the package: must not be added
    set_energy(dram, 2_500_000)  # +0.5 J
    wall.t += 2.0
    m = meter.end_window("fit")
    # Assert
    assert m.joules == pytest.approx(3.5)
    assert m.domains == pytest.approx({"package-0": 3.0, "package-0/dram": 0.5})
    assert (m.seconds, m.source, m.clock, m.share) == (2.0, "rapl", "wall", None)


def test_rapl_counter_wraparound_uses_max_energy_range(tmp_path):
    # Prepare: a counter 1 J below its wrap point
    pkg = make_zone(tmp_path, "intel-rapl:0", "package-0", 9_000_000, max_uj=10_000_000)
    meter, *_ = rapl(tmp_path, attribution="none")
    meter.begin_window("w")
    # Execute: it wraps and reads 2 J past zero
    set_energy(pkg, 2_000_000)
    m = meter.end_window("w")
    # Assert: 1 J before the wrap + 2 J after
    assert m.joules == pytest.approx(3.0)


def test_rapl_attributes_energy_by_cpu_share_on_a_shared_package(tmp_path):
    # Prepare
    pkg = make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter, wall, cpu, busy = rapl(tmp_path)
    meter.begin_window("fit")
    # Execute: the machine was busy 8 CPU-seconds, this process 2 of them; the package used 40 J
    set_energy(pkg, 40_000_000)
    cpu.t += 2.0
    busy.t += 8.0
    m = meter.end_window("fit")
    # Assert
    assert m.share == pytest.approx(0.25)
    assert m.joules == pytest.approx(10.0)
    assert m.domains["package-0"] == pytest.approx(40.0)
    assert m.cpu_seconds == pytest.approx(2.0)


def test_rapl_permission_denied_explains_the_fix(tmp_path, monkeypatch):
    # Prepare: a tree whose energy file cannot be read
    make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    real_read = Path.read_text

    def deny(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", deny)
    # Execute / Assert
    with pytest.raises(MeterUnavailable, match=r"(?s)permission denied.*chmod a\+r"):
        RaplMeter(root=tmp_path)


def test_auto_meter_falls_back_to_psutil_when_rapl_is_denied(tmp_path, monkeypatch, caplog):
    # Prepare
    make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied", str(self))) if self.name == "energy_uj" else real_read(self, *a, **k))
    # Execute
    with caplog.at_level(logging.INFO, logger="flwr"):
        meter = auto_meter(rapl_root=tmp_path)
    # Assert: it fell back and said why and which
    assert isinstance(meter, PsutilMeter)
    assert "chmod" in caplog.text and "psutil-model" in caplog.text


def test_rapl_without_package_zone_is_unavailable(tmp_path):
    make_zone(tmp_path, "intel-rapl:0:0", "core", 0)
    with pytest.raises(MeterUnavailable, match="no readable RAPL package zone"):
        RaplMeter(root=tmp_path)


def test_rapl_without_powercap_tree_is_unavailable(tmp_path):
    with pytest.raises(MeterUnavailable, match="no powercap tree"):
        RaplMeter(root=tmp_path / "absent")


def test_rapl_missing_requested_dram_measures_the_package_and_warns(tmp_path, caplog):
    # Prepare: no dram zone on this machine
    pkg = make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        meter, *_ = rapl(tmp_path, domains=["package-0", "dram"], attribution="none")
    meter.begin_window("w")
    set_energy(pkg, 1_500_000)
    # Execute
    m = meter.end_window("w")
    # Assert
    assert m.joules == pytest.approx(1.5)
    assert "['dram'] not found" in caplog.text


def test_rapl_two_sockets_keep_both_dram_domains(tmp_path):
    # Prepare: two packages, each with a sub-zone called "dram"
    zones = [make_zone(tmp_path, d, n, 0) for d, n in [
        ("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "dram"),
        ("intel-rapl:1", "package-1"), ("intel-rapl:1:0", "dram")]]
    meter, *_ = rapl(tmp_path, attribution="none")
    meter.begin_window("w")
    for z, uj in zip(zones, [1_000_000, 2_000_000, 3_000_000, 4_000_000]):
        set_energy(z, uj)
    # Execute
    m = meter.end_window("w")
    # Assert
    assert set(m.domains) == {"package-0", "package-0/dram", "package-1", "package-1/dram"}
    assert m.joules == pytest.approx(10.0)


def test_rapl_read_failure_mid_run_gives_no_energy_instead_of_crashing(tmp_path):
    # Prepare
    pkg = make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    meter, wall, *_ = rapl(tmp_path, attribution="none")
    meter.begin_window("w")
    os.remove(pkg / "energy_uj")
    wall.t += 1.0
    # Execute
    m = meter.end_window("w")
    # Assert
    assert m.joules is None and m.seconds == 1.0


# --------------------------------------------------------------------------- NVML
class FakeNvmlError(Exception):
    pass


def fake_nvml(counters_mj: list[float | None], init_fails: bool = False,
              power_mw: list[float | None] | None = None) -> types.SimpleNamespace:
    """A stand-in for ``pynvml``: one entry per GPU; ``None`` = no energy counter (pre-Volta) or,
    in ``power_mw``, no power reading."""
    state = {"mj": list(counters_mj), "mw": list(power_mw) if power_mw is not None else [None] * len(counters_mj)}

    def init():
        if init_fails:
            raise FakeNvmlError("NVML Shared Library Not Found")

    def energy(handle):
        value = state["mj"][handle]
        if value is None:
            raise FakeNvmlError("Not Supported")
        return value

    def power(handle):
        value = state["mw"][handle]
        if value is None:
            raise FakeNvmlError("Not Supported")
        return value

    return types.SimpleNamespace(
        state=state, nvmlInit=init, nvmlDeviceGetCount=lambda: len(state["mj"]),
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetTotalEnergyConsumption=energy,
        nvmlDeviceGetPowerUsage=power)


def test_nvml_sums_gpus_with_a_counter_and_skips_the_others():
    # Prepare: GPU 1 has no total-energy counter
    nvml = fake_nvml([1000.0, None, 5000.0])
    wall = FakeClock()
    meter = NvmlMeter(nvml=nvml, wall_clock=wall, cpu_clock=FakeClock())
    meter.begin_window("fit")
    # Execute
    nvml.state["mj"][0] += 30_000.0  # +30 J
    nvml.state["mj"][2] += 12_500.0  # +12.5 J
    wall.t = 3.0
    m = meter.end_window("fit")
    # Assert
    assert m.joules == pytest.approx(42.5)
    assert m.domains == pytest.approx({"gpu0": 30.0, "gpu2": 12.5})
    assert (m.source, m.seconds) == ("nvml", 3.0)


def test_nvml_short_windows_are_power_times_duration_since_the_counter_advances_in_steps():
    # Prepare: 400 W then 500 W at the edges of a 4 ms window (one DDP step), during which the
    # counter took one of its 100 ms steps (+70 J)
    nvml = fake_nvml([0.0, 0.0], power_mw=[400_000.0, None])
    wall = FakeClock()
    meter = NvmlMeter(nvml=nvml, wall_clock=wall, cpu_clock=FakeClock())
    meter.begin_window("step")
    # Execute
    nvml.state["mj"][0] += 70_000.0
    nvml.state["mj"][1] += 70_000.0
    nvml.state["mw"][0] = 500_000.0
    wall.t = 0.004
    m = meter.end_window("step")
    # Assert: GPU 0 from its power (450 W × 4 ms); GPU 1 has no power reading: its counter
    assert m.domains == pytest.approx({"gpu0": 1.8, "gpu1": 70.0})
    assert m.joules == pytest.approx(71.8)


def test_nvml_windows_of_counter_window_s_or_longer_read_the_counter():
    # Prepare
    nvml = fake_nvml([0.0], power_mw=[300_000.0])
    wall = FakeClock()
    meter = NvmlMeter(nvml=nvml, counter_window_s=1.0, wall_clock=wall, cpu_clock=FakeClock())
    always_counter = NvmlMeter(nvml=nvml, counter_window_s=0.0, wall_clock=wall, cpu_clock=FakeClock())
    meter.begin_window("round")
    always_counter.begin_window("step")
    # Execute
    nvml.state["mj"][0] += 350_000.0
    wall.t = 0.5
    short = always_counter.end_window("step")
    wall.t = 1.0
    long = meter.end_window("round")
    # Assert
    assert long.joules == pytest.approx(350.0)
    assert short.joules == pytest.approx(350.0)


@pytest.mark.parametrize("bad", [-0.1, float("inf"), float("nan"), "1", True])
def test_nvml_counter_window_must_be_a_finite_duration(bad):
    with pytest.raises(ValueError, match="counter_window_s"):
        NvmlMeter(nvml=fake_nvml([0.0]), counter_window_s=bad)


def test_nvml_without_driver_or_counter_is_unavailable():
    with pytest.raises(MeterUnavailable, match="no NVIDIA driver"):
        NvmlMeter(nvml=fake_nvml([0.0], init_fails=True))
    with pytest.raises(MeterUnavailable, match="Volta"):
        NvmlMeter(nvml=fake_nvml([None, None]))


def test_nvml_rejects_a_gpu_index_that_does_not_exist():
    with pytest.raises(ValueError, match=r"GPU indices \[3\] do not exist"):
        NvmlMeter(gpus=[3], nvml=fake_nvml([0.0]))


def test_auto_meter_prefers_nvml_for_cuda_and_rapl_for_cpu(tmp_path):
    # Prepare
    make_zone(tmp_path, "intel-rapl:0", "package-0", 0)
    nvml = fake_nvml([0.0])
    # Execute / Assert
    assert auto_meter("cuda", rapl_root=tmp_path, nvml=nvml).source == "nvml"
    assert auto_meter("cpu", rapl_root=tmp_path, nvml=nvml).source == "rapl"
    assert auto_meter("cuda:0", rapl_root=tmp_path / "none", nvml=fake_nvml([None])).source == "psutil-model"


# --------------------------------------------------------------------------- psutil model
def test_psutil_model_is_cpu_seconds_times_watts_per_core():
    # Prepare
    wall, cpu = FakeClock(10.0), FakeClock(1.0)
    meter = PsutilMeter(watts_per_core=6.0, wall_clock=wall, cpu_clock=cpu)
    meter.begin_window("fit")
    # Execute: 3 s of CPU in 4 s of wall time
    cpu.t += 3.0
    wall.t += 4.0
    m = meter.end_window("fit")
    # Assert
    assert m == Measurement(4.0, 18.0, "psutil-model", "wall", 3.0)
    assert PsutilMeter().watts_per_core == DEFAULT_WATTS_PER_CORE


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "5", True])
def test_psutil_model_rejects_bad_watts(bad):
    with pytest.raises(ValueError, match="watts_per_core"):
        PsutilMeter(watts_per_core=bad)


def test_windows_are_named_and_may_overlap():
    # Prepare
    cpu = FakeClock()
    meter = PsutilMeter(watts_per_core=1.0, wall_clock=cpu, cpu_clock=cpu)
    # Execute
    meter.begin_window("round")
    cpu.t = 1.0
    meter.begin_window("step")
    cpu.t = 3.0
    step = meter.end_window("step")
    cpu.t = 4.0
    whole = meter.end_window("round")
    # Assert
    assert (step.joules, whole.joules) == (2.0, 4.0)


def test_window_misuse_names_the_window():
    meter = PsutilMeter()
    with pytest.raises(ValueError, match="'fit' is not open"):
        meter.end_window("fit")
    meter.begin_window("fit")
    with pytest.raises(ValueError, match="'fit' is already open"):
        meter.begin_window("fit")


# --------------------------------------------------------------------------- emulated
def test_emulated_meter_scales_cpu_time_by_slowdown_and_prices_it():
    # Prepare: no jitter, so the expected values are exact
    profile = DeviceProfile("pi", "arm64", slowdown=3.0, active_w=5.0, idle_w=2.0)
    cpu = FakeClock(7.0)
    meter = EmulatedMeter(profile, cpu_clock=cpu)
    meter.begin_window("fit")
    # Execute
    cpu.t += 0.5
    m = meter.end_window("fit")
    # Assert
    assert m == Measurement(1.5, 7.5, "emulated:pi", "virtual", 0.5)


class FakeSleep:
    """Sleeping advances the fake wall clock and is recorded."""

    def __init__(self, wall: FakeClock) -> None:
        self.wall, self.naps = wall, []

    def __call__(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.wall.t += seconds


def test_sleep_emulated_meter_sleeps_until_the_device_time_has_passed_on_the_wall_clock():
    # Prepare: a 3x slower device; 0.5 CPU s of work that took 0.6 s of wall time
    profile = DeviceProfile("pi", "arm64", slowdown=3.0, active_w=5.0, idle_w=2.0)
    cpu, wall = FakeClock(7.0), FakeClock(100.0)
    sleep = FakeSleep(wall)
    meter = SleepEmulatedMeter(profile, cpu_clock=cpu, wall_clock=wall, sleep=sleep)
    meter.begin_window("fit")
    cpu.t += 0.5
    wall.t += 0.6
    # Execute
    m = meter.end_window("fit")
    # Assert: device time 1.5 s = 0.6 s of work + 0.9 s of sleep; wall clock; joules over device time
    assert sleep.naps == [pytest.approx(0.9)]
    assert m == Measurement(pytest.approx(1.5), pytest.approx(7.5), "emulated-sleep:pi", "wall", 0.5)


def test_sleep_emulated_meter_does_not_sleep_contention_on_top():
    # Prepare: the work already took longer on the wall clock (shared cores) than the device would
    profile = DeviceProfile("pi", "arm64", slowdown=2.0, active_w=4.0, idle_w=1.0)
    cpu, wall = FakeClock(), FakeClock()
    sleep = FakeSleep(wall)
    meter = SleepEmulatedMeter(profile, cpu_clock=cpu, wall_clock=wall, sleep=sleep)
    meter.begin_window("fit", round=1)
    cpu.t += 1.0
    wall.t += 3.0
    # Execute
    m = meter.end_window("fit")
    # Assert: no nap; the wall time is what it was; energy still over the device's own 2 s
    assert sleep.naps == [] and m.seconds == 3.0 and m.joules == 8.0 and m.clock == "wall"
    with pytest.raises(ValueError, match="'fit' is not open"):
        meter.end_window("fit")


def test_emulated_meter_applies_drift_from_the_given_round():
    # Prepare: the device slows from 2× to 6× at round 3
    profile = DeviceProfile("pi", "arm64", 2.0, 4.0, 1.0, drift_from_round=3, drift_slowdown=6.0)
    cpu = FakeClock()
    meter = EmulatedMeter(profile, cpu_clock=cpu)
    seconds = []
    # Execute: round passed per window for rounds 1-2, then set_round for 3-4
    for rnd in (1, 2, 3, 4):
        if rnd <= 2:
            meter.begin_window("fit", round=rnd)
        else:
            meter.set_round(rnd)
            meter.begin_window("fit")
        cpu.t += 1.0
        seconds.append(meter.end_window("fit").seconds)
    # Assert
    assert seconds == [2.0, 2.0, 6.0, 6.0]


def test_emulated_meter_jitter_is_reproducible_with_a_seed_and_lognormal():
    # Prepare
    profile = DeviceProfile("pi", "arm64", 1.0, 1.0, 0.0, jitter_sigma=0.05)

    def draws(seed):
        cpu = FakeClock()
        meter = EmulatedMeter(profile, cpu_clock=cpu, seed=seed)
        out = []
        for _ in range(2000):
            meter.begin_window("w")
            cpu.t += 1.0
            out.append(meter.end_window("w").seconds)
        return np.array(out)

    # Execute
    a, b = draws(7), draws(7)
    # Assert: same seed, same draws; log of the factor has σ ≈ 0.05 and median ≈ 1
    assert np.array_equal(a, b)
    assert np.std(np.log(a)) == pytest.approx(0.05, rel=0.1)
    assert np.median(a) == pytest.approx(1.0, abs=0.01)


def test_emulated_meter_rejects_bad_round():
    meter = EmulatedMeter(DeviceProfile("pi", "arm64", 1.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="round must be an int >= 1"):
        meter.set_round(0)


def test_auto_meter_falls_back_when_the_gpu_index_does_not_exist(tmp_path, caplog):
    # Prepare: one GPU, asked for the tenth; no RAPL
    nvml = fake_nvml([0.0])
    # Execute
    with caplog.at_level("WARNING"):
        meter = auto_meter("cuda:9", rapl_root=tmp_path / "none", nvml=nvml)
    # Assert
    assert meter.source == "psutil-model"
    assert any("nvml unavailable" in r.getMessage() and "GPU indices [9] do not exist" in r.getMessage()
               for r in caplog.records)


def test_auto_meter_rejects_a_malformed_device_naming_it():
    with pytest.raises(ValueError, match="device 'cuda:x': expected 'cpu', 'cuda' or 'cuda:<index>'"):
        auto_meter("cuda:x")


def test_auto_meter_with_a_profile_emulates_it():
    profile = DeviceProfile("pi", "arm64", 2.0, 1.0, 0.0)
    meter = auto_meter(profile=profile, seed=1)
    assert isinstance(meter, EmulatedMeter) and meter.source == "emulated:pi"
