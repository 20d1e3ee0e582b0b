"""How a kept reply becomes (or does not become) the controller's observation.

Contract
--------
Two components and one rule of the round coordinator (:class:`~flwr_adaptive.strategies.core.AdaptiveCore`):

- :class:`HeldReasons` says why a kept reply is aggregated but **not** observed, or ``None``:

  ``"over-quota"``  it trained on more than its quota without ``quota_data``: its cost per
                    sample is unknown.
  ``"cold-start"``  the client's first call in its process (``keys.COLD_START``): imports and
                    first-call set-up would bill a one-off start-up as slowness. Held when the
                    round has warm reports (simulation: actors are reused, so its next call is
                    warm). In a round where every report is cold (Flower's deployment runtime
                    starts a fresh process per message, so the start-up is paid every round and
                    is part of the cost; or the first round of a simulation) the reports are
                    observed, so the split adapts from round 2; only a participant's first cold
                    report beyond ``outlier_ratio`` times the round's median (at least 3
                    reports) is held, as a one-off.
  ``"outlier"``     the participant's first observation, more than ``outlier_ratio`` times the
                    round's median time per sample (at least 3 reports).

- :class:`ServerOverheads` keeps, per controller id, the last ``window`` values of what the
  server waited for a node beyond its reported compute (``observed − compute``, at least 0;
  wall-clock reports only: a virtual clock has no wall time to compare with); their **median** is
  the participant's fixed per-round time (``AllocationController.set_fixed_time``), which
  smooths out Flower's 3-s polling steps. What the client never reports (a fresh ClientApp
  process per message, polling, transfers) thus enters the affine model's fixed term, while the
  reported compute keeps setting its per-sample term; the call's one-off set-up the client
  reports (``keys.SETUP_S``) is added to the same value. The partition-keyed values survive a
  resume (``state()`` / ``load()``).

- :func:`believe_without_setup`: the trust rules applied to the compute that reaches the
  controller. Where a claimed set-up moves into the fixed term, each claim is judged without it
  (and the server's observation without the same part) and the set-up is added back: judged
  whole, a client that called 90 % of its time set-up was believed and then reached the
  controller at a tenth of its per-sample cost (its quota swung to 3.6× the fair share, the
  round with it; ``tests/test_setup_time.py``).

Cost
----
O(1) per reply (a median over at most ``window`` values); :func:`believe_without_setup` one
copy of each claim besides the rules' own cost.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["HeldReasons", "ServerOverheads", "believe_without_setup"]


def believe_without_setup(
    trust: CostTrust,
    server_round: int,
    claims: Sequence[ClientReport],
    observed: Mapping[Hashable, float],
    estimate_of: Callable[[Hashable], float | None],
    setups: Mapping[Hashable, float],
    population: Sequence[tuple[float, float | None]] = (),
) -> dict[Hashable, ClientReport]:
    """``trust.believe`` of ``claims`` judged without their ``setups`` (seconds of each ``time_s``),
    beside the ``population``'s per-sample costs (known nodes not in the round: ``CostTrust.believe``).

    The believed report of a node the rules changed is the believed compute plus its set-up
    (``setup_s`` = that set-up, so ``setup_part`` gives it back exactly); one they believed is
    the claim itself. Without any set-up: ``trust.believe`` as it is.
    """
    if not any(setups.values()):
        return trust.believe(server_round, claims, observed, estimate_of, population)
    steady = [replace(r, time_s=r.time_s - setups.get(r.node_id, 0.0), setup_s=None) for r in claims]
    seen = {n: t - setups.get(n, 0.0) for n, t in observed.items()}
    believed = trust.believe(server_round, steady, seen, estimate_of, population)
    out: dict[Hashable, ClientReport] = {}
    for r, s in zip(claims, steady):
        b = believed[r.node_id]
        setup = setups.get(r.node_id, 0.0)
        out[r.node_id] = r if b is s else replace(b, time_s=b.time_s + setup, setup_s=setup)
    return out


class HeldReasons:
    """Which kept replies are not taken as cost estimates (see the module docstring)."""

    def __init__(self) -> None:
        self.outliers_held: set[Hashable] = set()  # controller ids whose first report was held once
        self.cold_seen: set[Hashable] = set()  # controller ids that sent a cold-start report

    def reason(
        self,
        report: ClientReport,
        key: Hashable,
        *,
        warm: bool,
        median: float | None,
        estimated: bool,
        outlier_ratio: float,
    ) -> str | None:
        """Why ``report`` (of controller id ``key``) is not observed, or ``None`` to observe it.

        ``warm``: the round has a warm report; ``median``: the round's median time per sample
        (``None`` under 3 reports); ``estimated``: ``key`` has an estimate already.
        """
        if report.over_quota:
            return "over-quota"
        if report.cold_start:
            first_cold = key not in self.cold_seen
            self.cold_seen.add(key)
            if warm:
                return "cold-start"
            if (
                first_cold
                and median is not None
                and median > 0
                and report.time_s / report.samples > outlier_ratio * median
            ):
                return "cold-start"
        if (
            median is not None
            and median > 0
            and not estimated
            and key not in self.outliers_held
            and report.time_s / report.samples > outlier_ratio * median
        ):
            self.outliers_held.add(key)
            return "outlier"
        return None


class ServerOverheads:
    """Each participant's recent server-observed overheads, whose median is its fixed time."""

    def __init__(self) -> None:
        self.by_key: dict[Hashable, deque[float]] = {}  # controller id -> recent observed overheads

    def note(
        self, key: Hashable, believed: ClientReport, seconds: float | None, window: int, setup: float = 0.0
    ) -> float | None:
        """Add ``seconds − compute`` (0 when not timed) plus the reported one-off ``setup`` for
        ``key``; returns the new median (``None``: neither timed nor any set-up: nothing added)."""
        timed = seconds is not None and math.isfinite(seconds) and not believed.virtual_clock
        if not (timed or setup > 0):
            return None
        history = self.by_key.get(key)
        if history is None:
            history = self.by_key[key] = deque(maxlen=window)
        history.append((max(float(seconds) - believed.time_s, 0.0) if timed and seconds is not None else 0.0) + setup)
        return float(np.median(history))

    def fixed(self) -> dict[Hashable, float]:
        """Each participant's fixed per-round overhead in use (the median of its recent ones), seconds."""
        return {k: float(np.median(v)) for k, v in self.by_key.items() if v}

    def forget(self, key: Hashable) -> None:
        """Drop a controller id that will never be used again."""
        self.by_key.pop(key, None)

    def state(self) -> list[list]:
        """``[[partition id, [seconds, ...]], ...]``: what survives a resume (partition-keyed only)."""
        return [[k, list(v)] for k, v in self.by_key.items() if type(k) is int and v]

    def load(self, overheads: Mapping[int, list[float]], window: int) -> dict[int, float]:
        """Restore saved overheads; returns each participant's median (its fixed time)."""
        medians = {}
        for key, values in overheads.items():
            self.by_key[key] = deque(values, maxlen=window)
            medians[key] = float(np.median(values))
        return medians
