"""Hardware energy counters: RAPL (CPU package, DRAM) and NVML (NVIDIA GPUs).

Contract
--------
- :class:`RaplMeter` — Linux powercap sysfs (``/sys/class/powercap``): package and DRAM domains,
  counter wrap-around via ``max_energy_range_uj``. RAPL counts the *whole package*, so with
  several participants on one machine it attributes energy by this process's share of the
  machine's busy CPU time (``attribution="cpu-share"``, the default) and says so in
  ``Measurement.share``.
- :class:`NvmlMeter` — NVIDIA GPUs through the optional ``nvidia-ml-py`` package
  (``pip install flwr-adaptive[nvml]``), using the total-energy counter (Volta and newer); windows
  shorter than ``counter_window_s`` read the power draw instead (the counter advances in steps).

Constructing either where the hardware is absent or unreadable raises
:class:`~flwr_adaptive.meter.MeterUnavailable` with the reason and the fix; a read that fails
*during* a run gives ``joules=None`` and a warning, never an exception. Both report **wall**
seconds plus the process's CPU seconds. Imported from :mod:`flwr_adaptive.energy`, which
re-exports them.

Cost
----
RAPL: two or four small sysfs reads per window end; NVML: one driver call per GPU.

This module imports only the standard library and psutil; ``pynvml`` is imported lazily.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr_adaptive._logging import logger as log
from flwr_adaptive.meter import Measurement, Meter, MeterUnavailable

__all__ = ["RaplMeter", "NvmlMeter"]


# --------------------------------------------------------------------------- RAPL
@dataclass
class _RaplZone:
    name: str  # "package-0", "dram", ...
    energy_path: Path
    max_range_uj: int


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _machine_busy_seconds() -> float:
    import psutil

    t = psutil.cpu_times()
    return float(sum(v for k, v in t._asdict().items() if k not in ("idle", "iowait", "guest", "guest_nice")))


class RaplMeter(Meter):
    """CPU package and DRAM energy from the Linux powercap sysfs tree (Intel RAPL; AMD via the
    same interface on recent kernels).

    Parameters
    ----------
    root : str or Path
        The powercap directory (default ``/sys/class/powercap``; tests pass a fake tree).
    domains : sequence of str
        Which zone names to sum: by default every package (``package-N``) and ``dram`` zone.
        ``core``/``uncore`` sub-zones are inside the package and never added on top.
    attribution : {"cpu-share", "none"}
        ``"cpu-share"``: RAPL counts every process on the package, so the window's energy is
        multiplied by this process's CPU seconds ÷ the machine's busy CPU seconds (clipped to
        [0, 1]); ``Measurement.share`` holds that fraction. ``"none"``: the whole package.
    machine_busy : callable
        Busy CPU seconds of the whole machine (default from ``psutil.cpu_times``, which ticks in
        10 ms steps: the share is coarse for windows under a second); injectable.

    Raises
    ------
    MeterUnavailable
        No powercap tree, no package zone, or the counters are not readable (``energy_uj`` is
        root-only on kernels >= 5.10; the message gives the command that fixes it).
    """

    source = "rapl"

    def __init__(
        self,
        root: str | os.PathLike[str] = "/sys/class/powercap",
        domains: Sequence[str] | None = None,
        attribution: str = "cpu-share",
        machine_busy: Callable[[], float] = _machine_busy_seconds,
        wall_clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        super().__init__(wall_clock, cpu_clock)
        if attribution not in ("cpu-share", "none"):
            raise ValueError(f"attribution must be 'cpu-share' or 'none', got {attribution!r}")
        self.attribution = attribution
        self._machine_busy = machine_busy
        self.root = Path(root)
        self.zones = self._discover(domains)
        self._warned_read = False
        log.info(
            "RAPL meter on %s (%s); it counts the whole package%s",
            self.root,
            ", ".join(z.name for z in self.zones),
            ": energy is attributed by this process's share of machine CPU time" if attribution == "cpu-share" else "",
        )

    def _discover(self, wanted: Sequence[str] | None) -> list[_RaplZone]:
        if not self.root.is_dir():
            raise MeterUnavailable(f"no powercap tree at {self.root} (no RAPL on this machine or kernel)")
        zones: list[_RaplZone] = []
        for zdir in sorted(self.root.glob("*-rapl*:*")):
            name_file = zdir / "name"
            if not name_file.is_file():
                continue
            name = name_file.read_text().strip()
            is_default = name.startswith("package") or name == "dram"
            if (wanted is None and not is_default) or (wanted is not None and name not in wanted):
                continue
            key = name
            if zdir.name.count(":") >= 2:  # a sub-zone: name it after its package ("package-1/dram")
                parent = self.root / zdir.name.rsplit(":", 1)[0] / "name"
                if parent.is_file():
                    key = f"{parent.read_text().strip()}/{name}"
            if any(z.name == key for z in zones):
                continue  # the same zone seen through intel-rapl and intel-rapl-mmio
            energy = zdir / "energy_uj"
            try:
                _read_int(energy)
                max_range = _read_int(zdir / "max_energy_range_uj")
            except PermissionError as exc:
                raise MeterUnavailable(
                    f"RAPL counters are not readable ({exc.filename or energy}: permission denied; "
                    "energy_uj is root-only on Linux >= 5.10). Fix: run as root, or "
                    "`sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj "
                    "/sys/class/powercap/intel-rapl:*:*/energy_uj` (until reboot; a udev rule makes it "
                    "permanent)"
                ) from exc
            except (OSError, ValueError) as exc:
                log.warning("RAPL zone %s skipped: %s", zdir, exc)
                continue
            zones.append(_RaplZone(key, energy, max_range))
        if not any(z.name.startswith("package") for z in zones) and (wanted is None or not zones):
            raise MeterUnavailable(f"no readable RAPL package zone under {self.root}")
        missing = sorted(set(wanted or ()) - {z.name.rsplit("/", 1)[-1] for z in zones})
        if missing:
            log.warning("RAPL domains %s not found under %s; measuring %s", missing, self.root, [z.name for z in zones])
        return zones

    def _snapshot(self) -> Any:
        readings: dict[str, int | None] = {}
        for z in self.zones:
            try:
                readings[z.name] = _read_int(z.energy_path)
            except (OSError, ValueError) as exc:
                readings[z.name] = None
                if not self._warned_read:
                    log.warning("RAPL read of %s failed (%s); this window has no energy", z.energy_path, exc)
                    self._warned_read = True
        busy = self._machine_busy() if self.attribution == "cpu-share" else None
        return self._wall(), self._cpu(), busy, readings

    def _measure(self, start: Any, end: Any) -> Measurement:
        w0, c0, b0, r0 = start
        w1, c1, b1, r1 = end
        cpu = c1 - c0
        domains: dict[str, float] = {}
        complete = True
        for z in self.zones:
            a, b = r0.get(z.name), r1.get(z.name)
            if a is None or b is None:
                complete = False
                continue
            delta = b - a
            if delta < 0:  # the counter wrapped once (windows are far shorter than a wrap period)
                delta += z.max_range_uj
            domains[z.name] = delta / 1e6
        if not complete:
            return Measurement(w1 - w0, None, self.source, "wall", cpu, None, domains)
        total = sum(domains.values())
        share = None
        if self.attribution == "cpu-share":
            busy = b1 - b0
            share = min(1.0, max(0.0, cpu / busy)) if busy > 0 else 1.0
            total *= share
        return Measurement(w1 - w0, total, self.source, "wall", cpu, share, domains)


# --------------------------------------------------------------------------- NVML
class NvmlMeter(Meter):
    """GPU energy from NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``).

    Parameters
    ----------
    gpus : sequence of int, optional
        GPU indices to sum (default: all GPUs that have the counter).
    nvml : module, optional
        The ``pynvml`` module (from ``nvidia-ml-py``); injectable for tests.
    counter_window_s : float
        Windows shorter than this are measured as the GPU's power draw
        (``nvmlDeviceGetPowerUsage``, the mean of the window's two edges) × the window's length
        instead of the counter's difference. Why: the counter advances in steps (every 100 ms on
        an H200, ≈ 70 J at full load), so a few-millisecond window, such as one DDP step, reads 0 or
        a whole step's energy; the power reading is smooth. Longer windows read the counter (its
        step is then ≤ 10 % of the window at the default 1 s). ``0`` always reads the counter.

    Raises
    ------
    MeterUnavailable
        ``nvidia-ml-py`` missing, no driver/GPU, or no GPU with an energy counter (pre-Volta).

    Notes
    -----
    The counter covers the whole GPU: several processes sharing one GPU each see all of its
    energy (no attribution is attempted). A GPU whose power cannot be read falls back to the
    counter for short windows too.
    """

    source = "nvml"

    def __init__(
        self,
        gpus: Sequence[int] | None = None,
        nvml: Any = None,
        counter_window_s: float = 1.0,
        wall_clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        super().__init__(wall_clock, cpu_clock)
        if (
            isinstance(counter_window_s, bool)
            or not isinstance(counter_window_s, (int, float))
            or not 0.0 <= counter_window_s < math.inf
        ):
            raise ValueError(f"counter_window_s must be a finite number of seconds >= 0, got {counter_window_s!r}")
        self.counter_window_s = float(counter_window_s)
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[no-redef]
            except ImportError as exc:
                raise MeterUnavailable(
                    "NVML needs the optional package nvidia-ml-py: pip install 'flwr-adaptive[nvml]'"
                ) from exc
        self._nvml = nvml
        try:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # NVMLError subclasses: no driver, no GPU
            raise MeterUnavailable(f"NVML could not start ({exc}); no NVIDIA driver or GPU here") from exc
        indices = list(range(count)) if gpus is None else list(gpus)
        bad = [i for i in indices if not 0 <= i < count]
        if bad:
            raise ValueError(f"GPU indices {bad} do not exist; this machine has {count} GPU(s)")
        self._handles: list[tuple[int, Any]] = []
        for i in indices:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except Exception as exc:
                log.warning("GPU %d has no total-energy counter (%s); it is not measured", i, exc)
                continue
            self._handles.append((i, handle))
        if not self._handles:
            raise MeterUnavailable("no GPU with an NVML total-energy counter (it needs Volta or newer)")
        self._warned_read = False

    def _snapshot(self) -> Any:
        readings: dict[str, tuple[float | None, float | None]] = {}  # (counter mJ, power mW)
        for i, handle in self._handles:
            try:
                counter = float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            except Exception as exc:
                counter = None
                if not self._warned_read:
                    log.warning("NVML energy read of GPU %d failed (%s); this window has no energy", i, exc)
                    self._warned_read = True
            try:
                power = float(self._nvml.nvmlDeviceGetPowerUsage(handle)) if self.counter_window_s > 0 else None
            except Exception:  # no power reading: short windows fall back to the counter
                power = None
            readings[f"gpu{i}"] = (counter, power)
        return self._wall(), self._cpu(), readings

    def _measure(self, start: Any, end: Any) -> Measurement:
        w0, c0, r0 = start
        w1, c1, r1 = end
        seconds = w1 - w0
        domains: dict[str, float] = {}
        for gpu, (e0, p0) in r0.items():
            e1, p1 = r1.get(gpu, (None, None))
            if seconds < self.counter_window_s and p0 is not None and p1 is not None:
                domains[gpu] = (p0 + p1) / 2000.0 * seconds
            elif e0 is not None and e1 is not None:
                domains[gpu] = (e1 - e0) / 1000.0
        joules = sum(domains.values()) if len(domains) == len(r0) else None
        return Measurement(seconds, joules, self.source, "wall", c1 - c0, None, domains)
