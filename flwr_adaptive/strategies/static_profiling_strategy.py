"""Static profiling baseline: measure every participant once, then keep that split for good.

Contract
--------
:class:`StaticProfilingStrategy` is :class:`strategies.AdaptiveStrategy` (Message API) whose
controller is a :class:`~flwr_adaptive.static_profiling_controller.StaticProfilingController`: round 1 hands out the
equal split and measures every participant; from round 2 on the split computed from that one
measurement (with the weights of ``policy``, Time-only by default) is fixed for the rest of the
run. Later telemetry is still validated, logged and kept in the history, but never moves the
split, so the baseline cannot follow drift (a device that throttles in round 5 keeps its round-1
share). A node that joins later, or failed in round 1, gets the median profiled cost. History rows
and log lines carry ``policy = "static"``.

This answers "why not just profile once?": on a testbed without drift it matches the adaptive
policy; with drift or noisy first measurements it does not.

Cost
----
As the adaptive strategy; after round 1 the controller only validates reports.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from flwr.app import Context
from flwr.serverapp.strategy import Strategy

from flwr_adaptive.controller import POLICIES
from flwr_adaptive.static_profiling_controller import StaticProfilingController
from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy
from flwr_adaptive.strategies.normalization import OBJECTIVES
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["StaticProfilingStrategy", "STATIC"]

STATIC = "static"  # the policy name in run configs, history rows and log lines


class StaticProfilingStrategy(AdaptiveStrategy):
    """Profile once with the equal split, then keep the resulting split fixed.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy, optional
        The wrapped strategy: samples nodes and aggregates (default ``FedAvg()``).
    budget : int, optional
        Samples per round, split among the sampled nodes (sums to it exactly).
    budget_per_node : int, optional
        Instead of ``budget``: samples per training node; each round's budget is this times the
        number of nodes sampled, so the load per node does not depend on how many are sampled.
    policy : str (default: "time")
        Weights used to turn the profiled costs into the fixed split (``"time"``,
        ``"low-energy"`` or ``"energy"``; ``"equal"`` would never use the profile).
    profile_rounds : int (default: 1)
        Rounds whose telemetry is used before the split freezes.
    smoothing : float (default: 0.5)
        EMA weight of the newest per-sample cost while profiling.
    deadband : float, optional
        As for ``AdaptiveStrategy`` (applies while profiling); ``None``: 0, the split follows
        the profile exactly.
    weighting : str, optional
        ``"normalized"``, ``"samples"`` or ``"data-size"``, as for ``AdaptiveStrategy``. Default
        (``None``): ``"normalized"`` when ``allow_cycling=False``, ``"samples"`` when True.
    max_rescale : float, optional
        With ``weighting="normalized"``: the largest factor a node's update is scaled by, as for
        ``AdaptiveStrategy`` (``None``: the policy's default; ``math.inf``: FedNova's, unbounded).
    objective : str (default: "equal-split")
        As for :class:`~flwr_adaptive.strategies.AdaptiveStrategy`.
    allow_cycling : bool (default: False)
        Let a client whose quota exceeds its local data cycle through it again; when False each
        quota is capped at the data size the client reports.
    min_quota : int (default: 1)
        Smallest quota any client gets.
    cost_clip : float (default: 100.0)
        Each cost ratio to the median is clipped to ``[1/cost_clip, cost_clip]``.
    trust : CostTrust or bool (default: True)
        Which claimed costs the server believes: ``True`` the default rules, a ``CostTrust(...)``
        to tune them, ``False`` every claim (see ``AdaptiveStrategy``).
    state_dir : str or Path, optional
        Folder where the strategy state is saved after every round and resumed from.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state``.

    Frozen estimates never expire (no ``forget_after``).
    """

    controller: StaticProfilingController  # built by make_controller

    #: Why ``scale_batch_size`` stays False here (``round_quotas.ScaleBatchSize`` refuses another value).
    keeps_batch_size = "a baseline"

    def __init__(
        self,
        strategy: Strategy | None = None,
        *,
        budget: int | None = None,
        budget_per_node: int | None = None,
        policy: str = "time",
        profile_rounds: int = 1,
        smoothing: float = 0.5,
        deadband: float | None = None,
        weighting: str | None = None,
        max_rescale: float | None = None,
        objective: str = OBJECTIVES[0],
        allow_cycling: bool = False,
        min_quota: int = 1,
        cost_clip: float = 100.0,
        trust: CostTrust | bool = True,
        state_dir: str | os.PathLike | None = None,
        context: Context | None = None,
    ) -> None:
        weighted = [p for p, v in POLICIES.items() if v.objective == "weighted" and (v.w_time or v.w_energy)]
        if policy not in weighted:
            raise ValueError(
                f"StaticProfilingStrategy needs cost weights: policy must be one of "
                f"{', '.join(weighted)}, got {policy!r}"
            )
        if isinstance(profile_rounds, bool) or not isinstance(profile_rounds, int) or profile_rounds < 1:
            raise ValueError(f"profile_rounds must be an int >= 1, got {profile_rounds!r}")
        self.profile_rounds = profile_rounds
        super().__init__(
            strategy,
            budget=budget,
            budget_per_node=budget_per_node,
            policy=policy,
            smoothing=smoothing,
            deadband=deadband,
            weighting=weighting,
            max_rescale=max_rescale,
            objective=objective,
            allow_cycling=allow_cycling,
            min_quota=min_quota,
            scale_batch_size=False,  # a baseline: the user's batch size
            cost_clip=cost_clip,
            trust=trust,
            state_dir=state_dir,
            context=context,
        )

    def make_controller(self) -> StaticProfilingController:
        """A controller that freezes its estimates after ``profile_rounds`` reported rounds."""
        weights = POLICIES[self.policy]
        kwargs = {k: v for k, v in self._controller_kwargs.items() if k != "forget_after"}
        return StaticProfilingController(
            self.budget, profile_rounds=self.profile_rounds, w_time=weights.w_time, w_energy=weights.w_energy, **kwargs
        )

    @property
    def frozen(self) -> bool:
        """True once the split no longer follows telemetry."""
        return self.controller.frozen

    def account(
        self, server_round: int, reports: Sequence[ClientReport], skipped: Mapping[Hashable, str]
    ) -> dict[str, Any]:
        """The adaptive strategy's round figures, labelled ``static``."""
        row = super().account(server_round, reports, skipped)
        row["policy"] = STATIC
        return row

    def summary(self) -> None:
        """Log that the split freezes, then the adaptive strategy's summary."""
        from logging import INFO

        from flwr_adaptive.strategies.core import log

        log(
            INFO,
            "\t├──> Static profiling: split fixed after %d profiled round(s) (%s weights)",
            self.profile_rounds,
            self.policy,
        )
        super().summary()
