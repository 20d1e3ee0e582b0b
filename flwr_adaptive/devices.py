"""Device profiles, the emulated heterogeneous testbed and the virtual clock.

Contract
--------
A :class:`DeviceProfile` says how much slower than *this host* a device computes (``slowdown``),
what it draws while computing (``active_w``) and while waiting (``idle_w``), how much one run
differs from the next (lognormal ``jitter_sigma``) and, optionally, from which round on its
slowdown changes (drift). The virtual clock turns the host CPU seconds of the real work into
device seconds::

    device_s = cpu_s × slowdown_at(profile, round) × exp(jitter_sigma · z),   z ~ N(0, 1)

and active energy is ``active_w × device_s``. In a synchronized round every participant then
draws ``idle_w`` until the slowest one finishes; :func:`flwr_adaptive.accounting.account_round`
does that bookkeeping.

The jitter factor is drawn once per participant per round (run-to-run variation: thermal
state, background load), not per sample, so it does not average out inside a round.

Why a virtual clock: on a shared machine the wall time of concurrently simulated clients is
inflated 1.6–4× by contention, while each process's own CPU time (``time.process_time``, torch
on one thread) stays close to what the work costs. Every number derived here is on the virtual
clock and says so where it is printed.

Cost
----
``device_time`` and ``slowdown_at`` are O(1).

Sources of the testbed figures
------------------------------
Speeds come from one benchmark family so that devices are comparable: the single-threaded
7-zip MIPS rating collected by sbc-bench (one row per device, quoted in each profile). The
slowdown is ``HOST_7ZIP_SINGLE_MIPS / device rating`` where the host rating was measured on the
development machine with ``7zz b -mmt1`` (see :data:`HOST_7ZIP_SINGLE_MIPS`). Power figures
come from public measurements quoted next to the number; a figure we could not find is marked
``estimate=True`` with its reasoning instead of a citation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Citation",
    "DeviceProfile",
    "TESTBED",
    "HOST_7ZIP_SINGLE_MIPS",
    "get_testbed",
    "slowdown_at",
    "jitter_factor",
    "device_time",
]

HOST_7ZIP_SINGLE_MIPS = 4126.0
"""Single-threaded 7-zip rating ("Tot" MIPS) of the host that the slowdowns are relative to.

Measured on the development machine (AMD EPYC, Zen 4, 2 vCPUs under KVM) with
``7zz b -mmt1`` (7-Zip 26.02, Debian 12). sbc-bench reports the same rating for the devices
(with the p7zip/7-Zip build of each board's distribution; versions differ, which we accept as
noise of a few percent). On another host the same *relative* speeds hold, only the absolute
slowdowns shift: pass a different ``host_mips`` to :func:`get_testbed`.
"""

_SBC_BENCH = "https://github.com/ThomasKaiser/sbc-bench/blob/master/Sorted-Results.md"


@dataclass(frozen=True)
class Citation:
    """Where one figure of a profile comes from.

    Parameters
    ----------
    figure : str
        Which field it supports: ``"slowdown"``, ``"active_w"`` or ``"idle_w"``.
    url : str or None
        The public page the figure was read from; ``None`` for an estimate.
    quote : str
        The sentence or table row next to the number (for an estimate: the reasoning).
    estimate : bool
        ``True`` when no public source was found and the figure is our estimate.
    """

    figure: str
    url: str | None
    quote: str
    estimate: bool = False

    def short(self, width: int = 48) -> str:
        """A one-line form for tables: the host of the address, or ``estimate``."""
        if self.estimate or not self.url:
            return "estimate"
        host = self.url.split("://", 1)[-1].split("/", 1)[0].removeprefix("www.")
        if "sbc-bench" in self.url:
            host = "sbc-bench (7-zip 1T)"
        return host[:width]


@dataclass(frozen=True)
class DeviceProfile:
    """One emulated device.

    Parameters
    ----------
    name : str
        Short unique id (used as the participant id in experiments).
    arch : str
        ``"arm64"``, ``"riscv64"`` or ``"x86_64"``.
    slowdown : float
        Device seconds per host CPU second for the same work (> 0; 2.0 = half as fast).
    active_w, idle_w : float
        Whole-board watts while computing and while waiting (>= 0).
    jitter_sigma : float
        σ of the lognormal run-to-run factor ``exp(σ·z)`` (median 1); 0 disables jitter.
    drift_from_round : int, optional
        From this round on (1-based, inclusive) the device's slowdown is ``drift_slowdown``
        (an absolute value, not a multiplier) — e.g. thermal throttling or a co-located job.
    drift_slowdown : float, optional
        The slowdown after the drift; required exactly when ``drift_from_round`` is given.
    model : str
        The hardware this profile stands for (board, SoC).
    citations : tuple of Citation
        Where ``slowdown``, ``active_w`` and ``idle_w`` come from.
    """

    name: str
    arch: str
    slowdown: float
    active_w: float
    idle_w: float
    jitter_sigma: float = 0.0
    drift_from_round: int | None = None
    drift_slowdown: float | None = None
    model: str = ""
    citations: tuple[Citation, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for fname in ("slowdown", "active_w", "idle_w", "jitter_sigma"):
            value = getattr(self, fname)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.integer, np.floating))
                or not math.isfinite(value)
            ):
                raise ValueError(f"device {self.name!r}: {fname} must be a finite number, got {value!r}")
        if not self.slowdown > 0:
            raise ValueError(f"device {self.name!r}: slowdown must be > 0, got {self.slowdown!r}")
        for fname in ("active_w", "idle_w", "jitter_sigma"):
            if getattr(self, fname) < 0:
                raise ValueError(f"device {self.name!r}: {fname} must be >= 0, got {getattr(self, fname)!r}")
        if (self.drift_from_round is None) != (self.drift_slowdown is None):
            raise ValueError(
                f"device {self.name!r}: give both drift_from_round and drift_slowdown, or neither "
                f"(got {self.drift_from_round!r} and {self.drift_slowdown!r})"
            )
        if self.drift_from_round is not None:
            if (
                isinstance(self.drift_from_round, bool)
                or not isinstance(self.drift_from_round, (int, np.integer))
                or self.drift_from_round < 1
            ):
                raise ValueError(
                    f"device {self.name!r}: drift_from_round must be an int >= 1 (rounds are "
                    f"1-based), got {self.drift_from_round!r}"
                )
            if not (
                isinstance(self.drift_slowdown, (int, float))
                and math.isfinite(self.drift_slowdown)
                and self.drift_slowdown > 0
            ):
                raise ValueError(
                    f"device {self.name!r}: drift_slowdown must be a finite number > 0, got {self.drift_slowdown!r}"
                )

    def source(self, figure: str) -> Citation | None:
        """The citation of ``figure`` (``"slowdown"``, ``"active_w"``, ``"idle_w"``), if any."""
        return next((c for c in self.citations if c.figure == figure), None)


# --------------------------------------------------------------------------- the 11-device testbed
def _speed(row: str) -> Citation:
    return Citation("slowdown", _SBC_BENCH, row)


def _mips(row: str) -> float:
    """The single-threaded 7-zip rating: the sixth column of an sbc-bench sorted-results row."""
    return float(row.split("|")[6].strip().strip("*"))


_RAW: list[dict[str, Any]] = [
    dict(
        name="rpi5",
        arch="arm64",
        model="Raspberry Pi 5 (BCM2712, 4× Cortex-A76 @ 2.4 GHz)",
        speed="| [Raspberry Pi 5 B (BCM2712)](results/8-NK.txt) | 2400 MHz | 6.6 | Bookworm arm64 | **11830** | 3305 | 1368160 | 6025 | 9985 | 15.42 |",  # noqa: E501 (a quoted benchmark row)
        active_w=14.2,
        idle_w=4.7,
        power=[
            Citation(
                "active_w",
                "https://www.devreviewhub.com/RaspberryPi5",
                "The Raspberry Pi 5's power consumption is slightly higher than that of the Pi 4, with idle "
                "power draw around 4.7W. Under heavy load, this can increase to approximately 14.2W.",
            ),
            Citation("idle_w", "https://www.devreviewhub.com/RaspberryPi5", "... with idle power draw around 4.7W."),
        ],
    ),
    dict(
        name="rpi4",
        arch="arm64",
        model="Raspberry Pi 4 B (BCM2711, 4× Cortex-A72 @ 1.8 GHz)",
        speed="| [Raspberry Pi 4 B (BCM2711)](results/3Gia.txt) | 1800 MHz | 5.10 | Raspberry Pi OS Buster | **6550** | 1897 | 77830 | 2780 | 3080 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=5.4,
        idle_w=2.2,
        power=[
            Citation(
                "active_w",
                "https://chipwired.com/raspberry-pi-power-use/",
                "High load | 5.4W | 5.1W | 6.3W |  (table row; first column = USB-C tester; 'A Raspberry Pi "
                "uses between 1.8W and 5.4W of power when measured at the USB power supply.')",
            ),
            Citation(
                "idle_w",
                "https://chipwired.com/raspberry-pi-power-use/",
                "Idle load | 2.2W | 2.3W | 3.0W |  (table row; first column = USB-C tester)",
            ),
        ],
    ),
    dict(
        name="rpi3b+",
        arch="arm64",
        model="Raspberry Pi 3 B+ (BCM2837B0, 4× Cortex-A53 @ 1.4 GHz)",
        speed="| [Raspberry Pi 3 B+ (BCM2837B0)](results/1iI5.txt) | original | 4.9 | Raspbian Stretch | **3600** | 1076 | 42700 | 1230 | 1640 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=5.1,
        idle_w=1.9,
        power=[
            Citation(
                "active_w",
                "https://lumotechgateless.pages.dev/114740.html",
                "Raspberry-Pi 3 B+ | Maximum CPU Load | 980 mA (5.1 W) |  (table reproducing the PiDramble "
                "power benchmarks)",
            ),
            Citation(
                "idle_w",
                "https://lumotechgateless.pages.dev/114740.html",
                "Raspberry-Pi 3 B+ | Idle | 350 mA (1.9 W) |",
            ),
        ],
    ),
    dict(
        name="rpi-zero2w",
        arch="arm64",
        model="Raspberry Pi Zero 2 W (RP3A0, 4× Cortex-A53 @ 1.0 GHz)",
        speed="| [Raspberry Pi Zero 2 (RP3A0)](results/3E85.txt) | 1000 MHz | 5.10 | Raspberry Pi OS Buster | **3030** | 838 | 29860 | 1300 | 1570 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=2.6,
        idle_w=0.6,
        power=[
            Citation(
                "active_w",
                None,
                "Derived, not measured as such: andrejacobs.org measured that the Zero 2 W 'Consumes about "
                "270mA (1.4 Watts) more than Zero W' under load, and the PiDramble table gives the Pi Zero "
                "'Maximum CPU Load | 240 mA (1.2 W)'; 1.2 W + 1.4 W = 2.6 W.",
                estimate=True,
            ),
            Citation(
                "idle_w",
                "https://www.cnx-software.com/2021/12/09/raspberry-pi-zero-2-w-power-consumption/",
                "That's about 120 mA @ 5V, or 600 mW.",
            ),
        ],
    ),
    dict(
        name="jetson-nano",
        arch="arm64",
        model="NVIDIA Jetson Nano (4× Cortex-A57 @ 1.48 GHz; CPU only)",
        speed="| [Jetson Nano](results/4rLX.txt) | 1480 MHz | 4.9 | Bullseye arm64 | **5260** | 1578 | 531940 | 3730 | 8870 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=10.0,
        idle_w=2.0,
        power=[
            Citation(
                "active_w",
                "https://xiaopingtou.net/article-89752.html",
                "It supports two power modes, such as 5W and MaxN(10W). [...] The default mode is 10W (ID 0). "
                "(copy of NVIDIA's Jetson Nano power-management guide; 10 W is the module's power budget in "
                "the default mode, used here as its draw under load)",
            ),
            Citation(
                "idle_w",
                None,
                "No idle measurement found. Quad-core Cortex-A5x boards of the same class idle at 1.9-2.2 W "
                "(Pi 3 B+ and Pi 4 rows above); 2.0 W assumed.",
                estimate=True,
            ),
        ],
    ),
    dict(
        name="rk3588",
        arch="arm64",
        model="Rockchip RK3588 board (4× A76 @ 2.35 GHz + 4× A55; Radxa ROCK 5B / Turing RK1)",
        speed="| [Radxa ROCK 5B (RK3588)](results/41BH.txt) | 2350/1830 MHz | 5.10 | Focal arm64 | **16450** | 3146 | 1337540 | 10830 | 29220 | 25.31 |",  # noqa: E501 (a quoted benchmark row)
        active_w=11.0,
        idle_w=4.5,
        power=[
            Citation(
                "active_w",
                "https://turingpi.com/?p=721854",
                "Power efficiency: 4-5W idle per node, 10-12W under full load (Turing RK1, the same RK3588 "
                "SoC as the ROCK 5B whose speed is used; midpoint taken)",
            ),
            Citation(
                "idle_w",
                "https://turingpi.com/?p=721854",
                "Power efficiency: 4-5W idle per node, 10-12W under full load (midpoint taken)",
            ),
        ],
    ),
    dict(
        name="visionfive2",
        arch="riscv64",
        model="StarFive VisionFive 2 (JH7110, 4× SiFive U74 @ 1.5 GHz)",
        speed="| [VisionFive V2 (JH7110)](results/4xOY.txt) | 1500 MHz | 5.15 | Sid riscv64 | **4180** | 1197 | 25080 | 880 | 770 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=5.0,
        idle_w=2.5,
        power=[
            Citation(
                "active_w",
                None,
                "No measurement found. Four in-order U74 cores at 1.5 GHz on a 5 V / 3 A USB-C board: taken "
                "to draw like the Pi 3 B+ / Pi 4 class under load (5.1-5.4 W measured above); 5.0 W assumed.",
                estimate=True,
            ),
            Citation(
                "idle_w",
                None,
                "No measurement found; boards of this class idle at 1.9-2.2 W, plus the PCIe/NVMe and dual "
                "Ethernet of this board; 2.5 W assumed.",
                estimate=True,
            ),
        ],
    ),
    dict(
        name="licheepi4a",
        arch="riscv64",
        model="Sipeed Lichee Pi 4A (T-Head TH1520, 4× XuanTie C910)",
        speed="| [Lichee Pi 4A (T-Head TH1520)](results/4xYE.txt) | 1990 MHz | 5.10 | Bookworm riscv64 | **5260** | 1592 | 43820 | 4350 | 14760 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=7.0,
        idle_w=3.0,
        power=[
            Citation(
                "active_w",
                None,
                "No measurement found. Four out-of-order C910 cores near 2 GHz plus an NPU on a 12 V board: "
                "between the Pi 5-class and RK3588-class boards under load; 7 W assumed.",
                estimate=True,
            ),
            Citation(
                "idle_w",
                None,
                "No measurement found; a 12 V board with a SoM, Wi-Fi and dual Ethernet; 3 W assumed.",
                estimate=True,
            ),
        ],
    ),
    dict(
        name="bpi-f3",
        arch="riscv64",
        model="Banana Pi BPI-F3 (SpacemiT K1, 8× X60 @ 1.6 GHz)",
        speed="| [BPi F3 (SpacemiT K1)](results/8to7qX.txt) | 1600 MHz | 6.1 | Mantic riscv64 | **6750** | 978 | 27260 | 2620 | 7180 | - |",  # noqa: E501 (a quoted benchmark row)
        active_w=6.16,
        idle_w=2.92,
        power=[
            Citation(
                "active_w",
                "https://m.elecfans.com/article/3868129.html",
                "CPU重载场景功耗 | 6161.40 |  (whole-board mW under heavy CPU load, SpacemiT K1 reference "
                "board DEB1 — same SoC as the BPI-F3)",
            ),
            Citation(
                "idle_w",
                "https://m.elecfans.com/article/3868129.html",
                "Bianbu desktop主界面功耗 | 2917.46 |  (whole-board mW idling at the desktop)",
            ),
        ],
    ),
    dict(
        name="radxa-x4",
        arch="x86_64",
        model="Radxa X4 (Intel N100, 4× Gracemont @ 3.4 GHz)",
        speed="| [Radxa X4 (N100)](results/XObB.txt) | 3400 MHz | 6.8 | Noble amd64 | **8010** | 3580 | 1231100 | 8140 | 7970 | 21.40 |",  # noqa: E501 (a quoted benchmark row)
        active_w=15.0,
        idle_w=5.0,
        power=[
            Citation(
                "active_w",
                None,
                "Derived from a limit, not a measurement: N100 boards ship with 'both PL1 and PL2 set to 15 W "
                "by default' (forum.level1techs.com, Intel N100 power limits thread); 15 W assumed for the "
                "board under sustained load.",
                estimate=True,
            ),
            Citation(
                "idle_w",
                None,
                "No idle measurement of this board found; Intel's own low-power NUCs idle 'around 5W' "
                "(AnandTech, NUC BOX-N97 review); 5 W assumed.",
                estimate=True,
            ),
        ],
    ),
    dict(
        name="n5105-minipc",
        arch="x86_64",
        model="Intel Celeron N5105 mini PC (4× Tremont @ 2.9 GHz)",
        speed="| [Celeron N5105](results/3Qf7.txt) | 2900/2000 MHz | 5.13 | Focal amd64 | **11450** | 3059 | 811760 | 7710 | 9290 | 21.79 |",  # noqa: E501 (a quoted benchmark row)
        active_w=27.5,
        idle_w=14.0,
        power=[
            Citation(
                "active_w",
                "https://ora.it.com/n5105-power-consumption/how-much-power-does-the-n5105-use",
                "The Intel N5105 processor, when integrated into a mini PC system, typically demonstrates a "
                "power consumption ranging from 14W at idle to 25-30W under full load. (midpoint taken)",
            ),
            Citation(
                "idle_w",
                "https://ora.it.com/n5105-power-consumption/how-much-power-does-the-n5105-use",
                "... ranging from 14W at idle to 25-30W under full load.",
            ),
        ],
    ),
]


def get_testbed(
    jitter_sigma: float = 0.05,
    host_mips: float = HOST_7ZIP_SINGLE_MIPS,
    drift: Mapping[str, tuple[int, float]] | None = None,
) -> tuple[DeviceProfile, ...]:
    """The 11-device testbed (6 Arm, 3 RISC-V, 2 x86 boards) with a chosen jitter.

    Parameters
    ----------
    jitter_sigma : float
        Lognormal σ of every device's run-to-run factor (0 = deterministic).
    host_mips : float
        Single-threaded 7-zip rating of the host whose CPU seconds are scaled; each device's
        slowdown is ``host_mips / device rating``.
    drift : dict, optional
        ``{device name: (from_round, new_slowdown)}`` to make some devices change speed.

    Returns
    -------
    tuple of DeviceProfile
        In a fixed order (fastest boards are not first on purpose: the order carries no meaning).
    """
    if not (isinstance(host_mips, (int, float)) and math.isfinite(host_mips) and host_mips > 0):
        raise ValueError(f"host_mips must be a finite number > 0, got {host_mips!r}")
    drift = dict(drift or {})
    unknown = sorted(set(drift) - {r["name"] for r in _RAW})
    if unknown:
        raise ValueError(f"drift names unknown devices {unknown}; choose from {[r['name'] for r in _RAW]}")
    profiles = []
    for raw in _RAW:
        d_round, d_slow = drift.get(raw["name"], (None, None))
        profiles.append(
            DeviceProfile(
                name=raw["name"],
                arch=raw["arch"],
                model=raw["model"],
                slowdown=round(host_mips / _mips(raw["speed"]), 4),
                active_w=raw["active_w"],
                idle_w=raw["idle_w"],
                jitter_sigma=jitter_sigma,
                drift_from_round=d_round,
                drift_slowdown=d_slow,
                citations=(_speed(raw["speed"]), *raw["power"]),
            )
        )
    return tuple(profiles)


TESTBED: tuple[DeviceProfile, ...] = get_testbed()
"""The default testbed: 11 devices, jitter σ = 0.05, no drift (see :func:`get_testbed`)."""


# --------------------------------------------------------------------------- the virtual clock
def slowdown_at(profile: DeviceProfile, round: int) -> float:
    """The device's slowdown in ``round`` (1-based): ``drift_slowdown`` from ``drift_from_round`` on."""
    if profile.drift_from_round is not None and round >= profile.drift_from_round:
        return float(profile.drift_slowdown)  # type: ignore[arg-type]
    return float(profile.slowdown)


def jitter_factor(profile: DeviceProfile, rng: np.random.Generator | None = None) -> float:
    """One lognormal run-to-run factor ``exp(σ·z)`` (exactly 1.0 without drawing when σ = 0)."""
    if profile.jitter_sigma == 0:
        return 1.0
    rng = np.random.default_rng() if rng is None else rng
    return float(math.exp(profile.jitter_sigma * rng.standard_normal()))


def device_time(profile: DeviceProfile, cpu_s: float, round: int, rng: np.random.Generator | None = None) -> float:
    """Virtual-clock seconds for work that took ``cpu_s`` host CPU seconds in ``round``.

    ``cpu_s × slowdown_at(profile, round) × jitter_factor(profile, rng)``. Pass a seeded
    ``numpy.random.Generator`` for reproducible jitter (one normal draw per call when σ > 0).
    """
    if (
        isinstance(cpu_s, bool)
        or not isinstance(cpu_s, (int, float, np.integer, np.floating))
        or not math.isfinite(cpu_s)
        or cpu_s < 0
    ):
        raise ValueError(f"device {profile.name!r}: cpu_s must be a finite number >= 0, got {cpu_s!r}")
    return float(cpu_s) * slowdown_at(profile, round) * jitter_factor(profile, rng)
