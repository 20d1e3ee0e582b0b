"""An energy meter backed by Zeus' ``ZeusMonitor``: the counters Zeus knows, where the hardware is.

Contract
--------
:class:`ZeusMeter` is a :class:`~flwr_adaptive.energy.Meter` (named windows, one
:class:`~flwr_adaptive.energy.Measurement` per window) over ``zeus.monitor.ZeusMonitor``
(``pip install 'flwr-adaptive[zeus]'``; Zeus 0.16 reads NVIDIA GPUs through NVML, AMD GPUs through
amdsmi, CPU packages and DRAM through RAPL, Apple silicon and Jetson boards):

- ``begin_window(name)`` / ``end_window(name)`` map to the monitor's windows of the same name
  (prefixed so that a user's own Zeus windows never collide); the measurement's seconds are
  Zeus' window time (wall clock), its joules the sum of every domain Zeus measured (GPUs, CPU
  packages, DRAM, and an SoC's total where Zeus reports one), each in ``Measurement.domains``
  (``gpu0``, ``cpu0``, ``dram0``, ``soc``).
- Construction raises :class:`~flwr_adaptive.energy.MeterUnavailable` (so ``auto_meter`` falls
  back to the next meter, with the reason logged) when Zeus is not installed, cannot start, or
  finds nothing to measure here (no GPU, no readable RAPL, no SoC: e.g. RAPL without root is
  dropped by Zeus itself).
- A window whose read fails in a run gives ``joules=None`` and one warning, never an exception;
  the window's seconds then come from this meter's own wall clock. Opening a window twice or
  ending one that is not open is a ``ValueError`` naming it, as for every meter.

Cost
----
What Zeus' ``begin_window`` / ``end_window`` cost (a few driver or sysfs reads; with
``sync_execution`` a device synchronisation on GPUs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from flwr_adaptive._logging import logger as log
from flwr_adaptive.energy import Measurement, Meter, MeterUnavailable

__all__ = ["ZeusMeter"]


def _energies(values: Any, prefix: str) -> dict[str, float]:
    if not isinstance(values, dict):
        return {}
    return {f"{prefix}{i}": float(e) for i, e in values.items()}


class ZeusMeter(Meter):
    """Time and energy of each window from Zeus' ``ZeusMonitor``.

    Parameters
    ----------
    gpu_indices, cpu_indices : sequence of int, optional
        What Zeus monitors (``None``: everything it finds; ``[]``: none of that kind).
    sync_execution : bool (default: True)
        Let Zeus wait for queued GPU work at each window edge (its default), so a window holds
        exactly the work dispatched inside it.
    monitor : object, optional
        A ready monitor with ``begin_window`` / ``end_window`` (tests pass fakes); default: a
        ``zeus.monitor.ZeusMonitor`` built from the indices above.

    Raises
    ------
    MeterUnavailable
        Zeus is missing or cannot start, or it finds no counter to read on this machine.
    """

    source = "zeus"

    def __init__(
        self,
        gpu_indices: Sequence[int] | None = None,
        cpu_indices: Sequence[int] | None = None,
        sync_execution: bool = True,
        monitor: Any = None,
        wall_clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        super().__init__(wall_clock, cpu_clock)
        if monitor is None:
            try:
                from zeus.monitor import ZeusMonitor
            except ImportError as exc:
                raise MeterUnavailable(f"Zeus is not installed ({exc}): pip install 'flwr-adaptive[zeus]'") from exc
            try:
                monitor = ZeusMonitor(
                    gpu_indices=None if gpu_indices is None else list(gpu_indices),
                    cpu_indices=None if cpu_indices is None else list(cpu_indices),
                )
            except Exception as exc:  # noqa: BLE001 - any start-up failure of Zeus: not usable here
                raise MeterUnavailable(f"Zeus could not start ({type(exc).__name__}: {exc})") from exc
        gpus = list(getattr(monitor, "gpu_indices", []) or [])
        cpus = list(getattr(monitor, "cpu_indices", []) or [])
        soc = bool(getattr(monitor, "soc_is_present", False))
        if not gpus and not cpus and not soc:
            raise MeterUnavailable(
                "Zeus found no GPU, no readable RAPL counter (root is needed on Linux >= 5.10) and no "
                "SoC to measure on this machine"
            )
        self._monitor = monitor
        self.sync_execution = bool(sync_execution)
        self.measured = {"gpus": gpus, "cpus": cpus, "soc": soc}
        self._warned = False

    def _key(self, name: str) -> str:
        return f"flwr-adaptive:{id(self)}:{name}"

    def begin_window(self, name: str) -> None:
        """Start window ``name`` (a Zeus window of the same name)."""
        self._open_window(name, (self._wall(), self._cpu()))
        try:
            self._monitor.begin_window(self._key(name), sync_execution=self.sync_execution)
        except Exception as exc:  # noqa: BLE001 - a read that fails: this window has no energy
            self._warn(f"Zeus could not begin window {name!r} ({exc}); it has no energy")
            self._open[name] = (*self._open[name], False)

    def end_window(self, name: str) -> Measurement:
        """Stop window ``name``; its Zeus measurement (``joules=None`` when Zeus failed)."""
        start = self._close_window(name)
        wall = self._wall() - start[0]
        cpu = self._cpu() - start[1]
        if len(start) > 2:  # its begin failed: nothing to end in Zeus
            return Measurement(wall, None, self.source, "wall", cpu)
        try:
            m = self._monitor.end_window(self._key(name), sync_execution=self.sync_execution)
        except Exception as exc:  # noqa: BLE001 - a read that fails: this window has no energy
            self._warn(f"Zeus could not end window {name!r} ({exc}); it has no energy")
            return Measurement(wall, None, self.source, "wall", cpu)
        domains = {
            **_energies(getattr(m, "gpu_energy", None), "gpu"),
            **_energies(getattr(m, "cpu_energy", None), "cpu"),
            **_energies(getattr(m, "dram_energy", None), "dram"),
        }
        soc_total = getattr(getattr(m, "soc_energy", None), "total_energy", None)
        if isinstance(soc_total, (int, float)) and not isinstance(soc_total, bool):
            domains["soc"] = float(soc_total)
        seconds = float(getattr(m, "time", wall))
        joules = sum(domains.values()) if domains else None
        if joules is not None and not (math.isfinite(joules) and joules >= 0):
            self._warn(f"Zeus measured {joules!r} J in window {name!r}; not a usable energy")
            joules = None
        return Measurement(seconds, joules, self.source, "wall", cpu, None, domains)

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning(message)
