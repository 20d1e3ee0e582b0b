"""The meter interface: named windows over injectable clocks, one :class:`Measurement` per window.

Contract
--------
Every meter (:mod:`flwr_adaptive.energy` lists them, :func:`flwr_adaptive.energy.auto_meter`
picks one) has a ``source`` and two methods::

    meter.begin_window("fit")
    ...                                    # the work
    m = meter.end_window("fit")            # Measurement(seconds, joules, source, ...)

Windows are named; several may be open at once (nested or overlapping). Ending a window that
is not open, or opening one twice, raises ``ValueError`` naming the window and the meter. A
subclass implements ``_snapshot()`` (read its counters at a window edge) and ``_measure(start,
end)``; the clocks (``time.perf_counter``, ``time.process_time``) are injectable so that tests
get exact values. A meter that cannot work here raises :class:`MeterUnavailable` with the reason
and, where there is one, the fix, at construction.

Cost
----
Two dictionary operations per window besides the subclass's counter reads.

This module imports only the standard library.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Measurement", "Meter", "MeterUnavailable"]


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
