"""Energy meters behind one small interface: begin a window, end it, get one measurement.

Contract
--------
Every meter has a ``source`` (``"rapl"``, ``"nvml"``, ``"psutil-model"``, ``"emulated:<device>"``)
and two methods::

    meter.begin_window("fit")
    ...                                    # the work
    m = meter.end_window("fit")            # Measurement(seconds, joules, source, ...)

Windows are named; several may be open at once (nested or overlapping). Ending a window that
is not open, or opening one twice, raises ``ValueError`` naming the window. A meter never
crashes on missing hardware: constructing a hardware meter where the hardware is absent or
unreadable raises :class:`MeterUnavailable` with the reason and, where there is one, the fix;
:func:`auto_meter` catches that, logs it and falls back to the next meter. A hardware read
that fails *during* a run gives ``joules=None`` and a warning, never an exception.

Which clock: hardware meters and the psutil model report **wall** seconds of the window (what
a real deployment waits for) plus the process's CPU seconds; the emulated meter reports
**virtual** seconds (device time, see :mod:`flwr_adaptive.devices`). ``Measurement.clock``
says which, so that every printed number can name its clock.

Meters
------
- :class:`RaplMeter` — Linux powercap sysfs (``/sys/class/powercap``): package and DRAM domains,
  counter wrap-around via ``max_energy_range_uj``. RAPL counts the *whole package*, so with
  several participants on one machine it attributes energy by this process's share of the
  machine's busy CPU time (``attribution="cpu-share"``, the default) and says so in
  ``Measurement.share``.
- :class:`NvmlMeter` — NVIDIA GPUs through the optional ``nvidia-ml-py`` package
  (``pip install flwr-adaptive[nvml]``), using the total-energy counter (Volta and newer).
- :class:`PsutilMeter` — a model for machines without counters: process CPU seconds × a
  per-core power figure (default :data:`DEFAULT_WATTS_PER_CORE`).
- :class:`EmulatedMeter` — the virtual clock of a :class:`~flwr_adaptive.devices.DeviceProfile`.
- :class:`SleepEmulatedMeter` — the same device made real for wall clocks: it sleeps until the
  device's time has passed (a deployment demo on one machine, where the server times rounds).

Cost
----
RAPL: two or four small sysfs reads per window end; NVML: one driver call per GPU; psutil
model and emulated meter: one clock read. Negligible next to a training round.

This module imports only the standard library, numpy and psutil; ``pynvml`` is imported lazily.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flwr_adaptive._logging import logger as log
from flwr_adaptive.devices import DeviceProfile, device_time

__all__ = [
    "Measurement",
    "Meter",
    "MeterUnavailable",
    "RaplMeter",
    "NvmlMeter",
    "PsutilMeter",
    "EmulatedMeter",
    "SleepEmulatedMeter",
    "auto_meter",
    "DEFAULT_WATTS_PER_CORE",
]


DEFAULT_WATTS_PER_CORE = 5.0
"""Watts per fully busy core used by :class:`PsutilMeter` when none is given.

An estimate, not a measurement: a server CPU's TDP divided by its cores lies around 3–7 W
(e.g. 280 W / 64 cores = 4.4 W; 270 W / 40 cores = 6.8 W), a desktop part's around 8–11 W and
a laptop's 2–4 W. 5 W sits in the middle of the server range where training usually runs.
Pass ``watts_per_core=`` with your CPU's TDP ÷ cores for a better figure.
"""


@dataclass(frozen=True)
class Measurement:
    """One window's time and energy.

    Parameters
    ----------
    seconds : float
        Length of the window on ``clock``.
    joules : float or None
        Energy of the window (``None`` when it could not be measured).
    source : str
        The meter that produced it (e.g. ``"rapl"``, ``"emulated:rpi4"``).
    clock : str
        ``"wall"`` or ``"virtual"``: which clock ``seconds`` is on.
    cpu_seconds : float or None
        CPU seconds of this process during the window, when known.
    share : float or None
        Fraction of the measured domain's energy attributed to this process (RAPL on a shared
        package); ``None`` when nothing was attributed.
    domains : dict
        Joules per measured domain before attribution (``{"package-0": ..., "dram": ...}``,
        ``{"gpu0": ...}``); empty for models.
    """

    seconds: float
    joules: float | None
    source: str
    clock: str = "wall"
    cpu_seconds: float | None = None
    share: float | None = None
    domains: Mapping[str, float] = field(default_factory=dict, compare=False, hash=False)


class MeterUnavailable(RuntimeError):
    """This meter cannot work here; the message says why and, where there is one, the fix."""


class Meter:
    """Base of all meters: named windows over injectable clocks.

    Subclasses implement ``_snapshot()`` (read the counters at a window edge) and
    ``_measure(start, end)`` (turn two snapshots into a :class:`Measurement`).

    Parameters
    ----------
    wall_clock, cpu_clock : callable
        Seconds now; defaults ``time.perf_counter`` and ``time.process_time``. Tests inject
        fakes so that expected values are exact.
    """

    source = "meter"

    def __init__(
        self, wall_clock: Callable[[], float] = time.perf_counter, cpu_clock: Callable[[], float] = time.process_time
    ) -> None:
        self._wall = wall_clock
        self._cpu = cpu_clock
        self._open: dict[str, Any] = {}

    def begin_window(self, name: str) -> None:
        """Start measuring window ``name``."""
        self._open_window(name, self._snapshot())

    def end_window(self, name: str) -> Measurement:
        """Stop window ``name`` and return its measurement."""
        start = self._close_window(name)
        return self._measure(start, self._snapshot())

    def _open_window(self, name: str, start: Any) -> None:
        """Record ``start`` for window ``name``; ``ValueError`` when it is open already."""
        if name in self._open:
            raise ValueError(f"window {name!r} is already open on the {self.source} meter; end it first")
        self._open[name] = start

    def _close_window(self, name: str) -> Any:
        """The start recorded for window ``name``, now closed; ``ValueError`` when it is not open."""
        if name not in self._open:
            open_ = ", ".join(map(repr, self._open)) or "none"
            raise ValueError(
                f"window {name!r} is not open on the {self.source} meter (open: {open_}); call begin_window first"
            )
        return self._open.pop(name)

    def _snapshot(self) -> Any:
        return (self._wall(), self._cpu())

    def _measure(self, start: Any, end: Any) -> Measurement:  # pragma: no cover - abstract
        raise NotImplementedError


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


# --------------------------------------------------------------------------- psutil model
class PsutilMeter(Meter):
    """A model for machines without energy counters: CPU seconds × watts per busy core.

    ``joules = (process CPU seconds in the window) × watts_per_core``. It ignores idle power,
    memory and frequency scaling: good enough to rank participants by energy per sample on
    similar CPUs, not to report absolute joules.

    Parameters
    ----------
    watts_per_core : float
        Power of one fully busy core (default :data:`DEFAULT_WATTS_PER_CORE`, an estimate).
    """

    source = "psutil-model"

    def __init__(
        self,
        watts_per_core: float = DEFAULT_WATTS_PER_CORE,
        wall_clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        super().__init__(wall_clock, cpu_clock)
        if (
            isinstance(watts_per_core, bool)
            or not isinstance(watts_per_core, (int, float))
            or not math.isfinite(watts_per_core)
            or watts_per_core < 0
        ):
            raise ValueError(f"watts_per_core must be a finite number >= 0, got {watts_per_core!r}")
        self.watts_per_core = float(watts_per_core)

    def _measure(self, start: Any, end: Any) -> Measurement:
        (w0, c0), (w1, c1) = start, end
        cpu = c1 - c0
        return Measurement(w1 - w0, cpu * self.watts_per_core, self.source, "wall", cpu)


# --------------------------------------------------------------------------- emulated device
class EmulatedMeter(Meter):
    """The virtual clock of one emulated device.

    A window's CPU seconds (``cpu_clock`` deltas: the process's own CPU time for the real work,
    torch limited to one thread) become device seconds ``cpu × slowdown_at(round) × jitter``
    and active joules ``active_w × device seconds`` (see :mod:`flwr_adaptive.devices`).
    ``Measurement.clock`` is ``"virtual"``. Idle energy while waiting for others is not part of
    a window: :func:`flwr_adaptive.accounting.account_round` adds it per round.

    The round matters for drift: pass it per window (``begin_window(name, round=r)``) or once
    per round with :meth:`set_round`; without either the round is 1.

    Parameters
    ----------
    profile : DeviceProfile
        The device to emulate.
    cpu_clock : callable
        Process CPU seconds (default ``time.process_time``; tests inject a fake).
    rng : numpy.random.Generator, optional
        Source of the jitter draws (one per window when σ > 0).
    seed : int, optional
        Seed for a new generator when ``rng`` is not given.
    """

    def __init__(
        self,
        profile: DeviceProfile,
        cpu_clock: Callable[[], float] = time.process_time,
        rng: np.random.Generator | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(wall_clock=cpu_clock, cpu_clock=cpu_clock)
        if not isinstance(profile, DeviceProfile):
            raise ValueError(f"profile must be a DeviceProfile, got {type(profile).__name__}")
        self.profile = profile
        self.source = f"emulated:{profile.name}"
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self.round = 1

    def set_round(self, round: int) -> None:
        """Set the round used by later windows (1-based)."""
        if isinstance(round, bool) or not isinstance(round, (int, np.integer)) or round < 1:
            raise ValueError(f"round must be an int >= 1, got {round!r}")
        self.round = int(round)

    def begin_window(self, name: str, round: int | None = None) -> None:
        """Start window ``name``; ``round`` (optional) sets the round for drift first."""
        if round is not None:
            self.set_round(round)
        super().begin_window(name)

    def _measure(self, start: Any, end: Any) -> Measurement:
        (c0, rnd), (c1, _) = start, end
        cpu = max(0.0, c1 - c0)
        seconds = device_time(self.profile, cpu, rnd, self.rng)
        return Measurement(seconds, self.profile.active_w * seconds, self.source, "virtual", cpu)

    def _snapshot(self) -> Any:
        return (self._cpu(), self.round)


class SleepEmulatedMeter(EmulatedMeter):
    """An emulated device made real for wall clocks: the window ends by sleeping the difference.

    For a demonstration on one machine under Flower's Deployment Engine, where the server times
    rounds on its own wall clock: the work of a window took ``w`` wall seconds and ``c`` CPU
    seconds; the device would have needed ``d = device_time(profile, c)`` seconds, so
    ``end_window`` sleeps ``max(0, d - w)`` (as the DDP worker does per step: contention on
    shared cores that already made ``w > d`` is not slept on top). The measurement is on the
    **wall** clock: its seconds are the window's wall time including the sleep (what the
    server waits for); joules are ``active_w × d`` (the device's active power over its own time).

    Parameters
    ----------
    profile, cpu_clock, rng, seed
        As for :class:`EmulatedMeter`.
    wall_clock : callable
        Wall seconds (default ``time.perf_counter``; tests inject a fake).
    sleep : callable
        How to wait (default ``time.sleep``; tests inject a fake that advances the fake clock).
    """

    def __init__(
        self,
        profile: DeviceProfile,
        cpu_clock: Callable[[], float] = time.process_time,
        rng: np.random.Generator | None = None,
        seed: int | None = None,
        wall_clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(profile, cpu_clock=cpu_clock, rng=rng, seed=seed)
        self._wall = wall_clock
        self._sleep = sleep
        self.source = f"emulated-sleep:{profile.name}"

    def begin_window(self, name: str, round: int | None = None) -> None:
        """Start window ``name``; ``round`` (optional) sets the round for drift first."""
        if round is not None:
            self.set_round(round)
        self._open_window(name, (self._cpu(), self.round, self._wall()))

    def end_window(self, name: str) -> Measurement:
        """Sleep until the device's time has passed, then measure the window on the wall clock."""
        c0, rnd, w0 = self._close_window(name)
        cpu = max(0.0, self._cpu() - c0)
        device_s = device_time(self.profile, cpu, rnd, self.rng)
        nap = device_s - (self._wall() - w0)
        if nap > 0:
            self._sleep(nap)
        return Measurement(self._wall() - w0, self.profile.active_w * device_s, self.source, "wall", cpu)


# --------------------------------------------------------------------------- auto
def _zeus_installed() -> bool:
    """Whether the optional ``zeus`` package is importable (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("zeus") is not None


def auto_meter(
    device: str = "cpu",
    profile: DeviceProfile | None = None,
    rapl_root: str | os.PathLike[str] = "/sys/class/powercap",
    nvml: Any = None,
    watts_per_core: float = DEFAULT_WATTS_PER_CORE,
    zeus: Any = None,
    **emulated: Any,
) -> Meter:
    """The best meter available here, logging which one and why the others were skipped.

    Order: an :class:`EmulatedMeter` when ``profile`` is given (emulation was asked for);
    otherwise Zeus (:class:`~flwr_adaptive.zeus_meter.ZeusMeter`, when the ``[zeus]`` extra is
    installed and Zeus finds a counter: GPUs for ``"cuda..."``, CPU packages / DRAM / an SoC),
    then for ``device="cuda..."`` NVML, then RAPL, then the psutil model; for ``"cpu"`` RAPL, then
    the psutil model. Never raises for missing hardware (a ``cuda:<index>`` this
    machine lacks included: logged, then the next meter); a malformed ``device`` is a ValueError.

    Parameters
    ----------
    device : str
        Where the training runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
    profile : DeviceProfile, optional
        Emulate this device on the virtual clock (``emulated`` kwargs go to EmulatedMeter).
    rapl_root, nvml : optional
        Injection points for tests (fake powercap tree, fake ``pynvml`` module).
    zeus : optional
        ``False`` to skip Zeus; a callable ``(gpu_indices, cpu_indices) -> ZeusMonitor-like``
        for tests; ``None`` (default): Zeus when it is installed.
    watts_per_core : float
        For the psutil model fallback.
    """
    if profile is not None:
        meter: Meter = EmulatedMeter(profile, **emulated)
        log.info("energy meter: %s (virtual clock)", meter.source)
        return meter
    candidates: list[tuple[str, Callable[[], Meter]]] = []
    gpus: list[int] | None = []
    if device.startswith("cuda"):
        suffix = device.split(":", 1)[1] if ":" in device else None
        if suffix is not None and not suffix.isdigit():
            raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:<index>'")
        gpus = None if suffix is None else [int(suffix)]
    if zeus is not False and (zeus is not None or _zeus_installed()):

        def make_zeus() -> Meter:
            from flwr_adaptive.zeus_meter import ZeusMeter

            monitor = None if zeus is None else zeus(gpus, None)
            return ZeusMeter(gpu_indices=gpus, monitor=monitor)

        candidates.append(("zeus", make_zeus))
    if device.startswith("cuda"):

        def make_nvml() -> Meter:
            try:
                return NvmlMeter(gpus=gpus, nvml=nvml)
            except ValueError as exc:  # a GPU index this machine lacks: missing hardware
                raise MeterUnavailable(str(exc)) from exc

        candidates.append(("nvml", make_nvml))
    candidates.append(("rapl", lambda: RaplMeter(root=rapl_root)))
    for name, make in candidates:
        try:
            meter = make()
        except MeterUnavailable as exc:
            log.warning("energy meter %s unavailable: %s", name, exc)
            continue
        log.info("energy meter: %s", meter.source)
        return meter
    meter = PsutilMeter(watts_per_core)
    log.info(
        "energy meter: %s (%.1f W per busy core; a model, no hardware counter here)", meter.source, meter.watts_per_core
    )
    return meter
