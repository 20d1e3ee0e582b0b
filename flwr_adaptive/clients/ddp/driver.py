"""The DDP round loop's bookkeeping: which split each round gets, and what a round measured.

Contract
--------
:class:`RoundDriver` owns what lives *between* rounds: the policy, the
:class:`~flwr_adaptive.controller.AllocationController` (per-rank ids ``0..world-1``, time-only by
default), and the position in the shared index stream. ``plan()`` gives the next
:class:`~flwr_adaptive.clients.ddp.worker.RoundPlan`; ``observe(telemetry)`` feeds the ranks' reports to the
controller (which re-splits the per-rank quotas for the next round) and advances the stream.
It does no I/O and knows no processes, so the local launcher, the ``torchrun`` entry point and a
Flower silo client all use it the same way.

Policies: ``"equal"`` (no controller: the budget split evenly), the controller's policies
(``"time"``, ``"low-energy"``, ``"energy"``, ``"min-energy"``; see docs/controller.md: affine costs
by default, whose fixed part is each rank's per-step overhead times the steps; ``paper=True`` is
the paper's per-sample model) and ``"ema"`` (the per-step EMA batch-sizing baseline; its split
moves inside the round, so the driver hands out equal quotas that only fix each step's global
batch).

Cost
----
O(world) per round plus one ``allocate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flwr_adaptive.clients.ddp.worker import RankTelemetry, RoundPlan
from flwr_adaptive.controller import POLICIES, AllocationController
from flwr_adaptive.schedule import step_makespan

__all__ = ["DDP_POLICIES", "ddp_controller", "equal_quotas", "RoundDriver", "round_summary"]

DDP_POLICIES = ("equal", *[p for p in POLICIES if p != "equal"], "ema")


def ddp_controller(budget: int, steps: int, policy: str = "time", **kwargs: Any) -> AllocationController:
    """A controller for per-rank DDP quotas: ``min_quota`` defaults to ``steps``, ``deadband`` to 0.02.

    With ``min_quota = steps`` every rank gets at least one sample per step, so no rank idles
    through a step (a smaller ``min_quota`` is allowed: the worker handles empty batches). The
    deadband is below the controller's general default (0.05) because in DDP every step pays
    for an imbalance while re-splitting costs nothing (no data or model moves between rounds);
    it only has to absorb timing noise.
    """
    kwargs.setdefault("min_quota", steps)
    kwargs.setdefault("deadband", 0.02)
    return AllocationController.from_policy(policy, budget, **kwargs)


def equal_quotas(budget: int, world: int) -> list[int]:
    """``budget`` split evenly over ``world`` ranks (the first ``budget mod world`` get one more)."""
    base, extra = divmod(int(budget), int(world))
    return [base + (1 if i < extra else 0) for i in range(world)]


class RoundDriver:
    """Plans DDP rounds and learns from their telemetry.

    Parameters
    ----------
    world : int
        Number of ranks.
    budget : int
        Samples per round over all ranks: ``>= steps``, and with an adaptive policy ``>= world ×
        min_quota`` (``min_quota`` defaults to ``steps``).
    steps : int
        Optimizer steps per round, the same on every rank.
    policy : str
        One of :data:`DDP_POLICIES`.
    slowdowns, active_watts : list of float, optional
        Emulated per-rank slowness (``>= 1``) and active watts, passed on in every plan.
    idle_watts : list of float, optional
        Each rank's idle watts while it waits for the others (``"min-energy"`` prices waiting
        with them; ``None`` entries: unknown).
    seed : int
        Shuffling seed of the shared index stream.
    ema_smoothing : float
        EMA weight of the ``"ema"`` baseline.
    controller : AllocationController, optional
        Use this controller instead of ``ddp_controller(budget, steps, policy, **controller_kwargs)``.
    **controller_kwargs
        Passed to :func:`ddp_controller` (e.g. ``deadband``, ``smoothing``).
    """

    def __init__(
        self,
        world: int,
        budget: int,
        steps: int,
        policy: str = "time",
        slowdowns: Sequence[float] | None = None,
        active_watts: Sequence[float | None] | None = None,
        seed: int = 0,
        ema_smoothing: float = 0.5,
        controller: AllocationController | None = None,
        idle_watts: Sequence[float | None] | None = None,
        **controller_kwargs: Any,
    ) -> None:
        if policy not in DDP_POLICIES:
            raise ValueError(f"policy must be one of {DDP_POLICIES}, got {policy!r}")
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError(f"world must be an int >= 1, got {world!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an int >= 1, got {steps!r}")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < steps:
            raise ValueError(
                f"budget must be an int >= steps ({steps}), got {budget!r}: every step needs at least one sample"
            )
        self.world, self.budget, self.steps, self.policy = world, budget, steps, policy
        self.slowdowns = None if slowdowns is None else [float(s) for s in slowdowns]
        self.active_watts = None if active_watts is None else list(active_watts)
        self.seed = seed
        self.ema_smoothing = ema_smoothing
        self.position = 0
        self.round = 0
        self.ranks = list(range(world))
        self.controller = controller
        if controller is None and policy in POLICIES and policy != "equal":
            min_quota = controller_kwargs.get("min_quota", steps)
            need = (
                world * min_quota if isinstance(min_quota, int) else sum(int(min_quota.get(r, 0)) for r in self.ranks)
            )
            if budget < need:
                raise ValueError(
                    f"budget {budget} cannot give each of the {world} ranks min_quota {min_quota!r} "
                    f"(default: one sample per step, steps={steps}): it needs budget >= {need}; raise the "
                    "budget, lower steps, or pass a smaller min_quota (the worker handles empty batches)"
                )
            self.controller = ddp_controller(budget, steps, policy, **controller_kwargs)
        if idle_watts is not None:
            if len(idle_watts) != world:
                raise ValueError(f"idle_watts needs one entry per rank ({world}), got {len(idle_watts)}")
            if self.controller is not None:
                for rank, watts in zip(self.ranks, idle_watts):
                    self.controller.set_idle_power(rank, watts)

    def quotas(self) -> list[int]:
        """This round's per-rank quotas (commits the controller's split)."""
        if self.controller is None:
            return equal_quotas(self.budget, self.world)
        split = self.controller.allocate(self.ranks)
        return [int(split[r]) for r in self.ranks]

    def plan(self) -> RoundPlan:
        """The next round's plan (identical for every rank)."""
        self.round += 1
        return RoundPlan(
            quotas=self.quotas(),
            steps=self.steps,
            start=self.position,
            seed=self.seed,
            slowdowns=self.slowdowns,
            active_watts=self.active_watts,
            balancing="ema" if self.policy == "ema" else "schedule",
            ema_smoothing=self.ema_smoothing,
        )

    def observe(self, telemetry: Sequence[RankTelemetry]) -> None:
        """Feed every rank's report to the controller and advance the index stream."""
        self.position += sum(t.samples for t in telemetry)
        if self.controller is None:
            return
        for t in telemetry:
            if t.samples > 0 and t.time_s > 0:
                self.controller.observe(t.rank, t.report())


def round_summary(telemetry: Sequence[RankTelemetry]) -> dict[str, Any]:
    """What a DDP round measured, over all ranks.

    Returns
    -------
    dict
        ``compute_cv`` (coefficient of variation of the ranks' ``time_s``; on the ranks' compute
        clock), ``wait_share`` (Σ all-reduce seconds / Σ wall seconds of the ranks; wall clock),
        ``makespan_s`` (``Σ_s max_i t_{i,s}`` on the compute clock), ``wall_s`` (the slowest
        rank's wall seconds), ``overrun_share`` (Σ ``overrun_s`` / Σ ``time_s``: how far the wall
        clock fell behind the emulated compute; near 0 when the emulation is faithful),
        ``quotas`` (samples per rank), ``clock``, and per-rank lists ``time_s`` and ``wait_s``.
    """
    tel = sorted(telemetry, key=lambda t: t.rank)
    times = np.array([t.time_s for t in tel])
    mean = float(times.mean()) if len(times) else 0.0
    walls = np.array([t.wall_s for t in tel])
    waits = np.array([t.wait_s for t in tel])
    return {
        "quotas": [t.samples for t in tel],
        "compute_cv": float(times.std() / mean) if mean > 0 else 0.0,
        "wait_share": float(waits.sum() / walls.sum()) if walls.sum() > 0 else 0.0,
        "makespan_s": step_makespan(np.asarray(tel[0].step_compute_s)) if tel else 0.0,
        "wall_s": float(walls.max()) if len(walls) else 0.0,
        "overrun_share": float(sum(t.overrun_s for t in tel) / times.sum()) if times.sum() > 0 else 0.0,
        "clock": tel[0].clock if tel else "",
        "time_s": times.tolist(),
        "wait_s": waits.tolist(),
    }
