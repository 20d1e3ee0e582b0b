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

Files: the interface (:class:`Measurement`, :class:`Meter`, :class:`MeterUnavailable`) is in
:mod:`flwr_adaptive.meter`, the hardware counters (RAPL, NVML) in
:mod:`flwr_adaptive.hardware_meters`, the models and :func:`auto_meter` here; every name is
imported from ``flwr_adaptive.energy``.

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
from collections.abc import Callable
from typing import Any

import numpy as np

from flwr_adaptive._logging import logger as log
from flwr_adaptive.devices import DeviceProfile, device_time
from flwr_adaptive.hardware_meters import NvmlMeter, RaplMeter
from flwr_adaptive.meter import Measurement, Meter, MeterUnavailable

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
