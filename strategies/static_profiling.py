"""Static profiling baseline: measure every participant once, then keep that split for good.

Contract
--------
:class:`StaticProfilingStrategy` is :class:`strategies.AdaptiveStrategy` (Message API) whose
controller is a :class:`~flwr_adaptive.static.StaticProfilingController`: round 1 hands out the
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

from typing import Any, Hashable, Mapping, Sequence

from flwr_adaptive.controller import POLICIES
from flwr_adaptive.static import StaticProfilingController
from strategies.message import AdaptiveStrategy
from strategies.reports import ClientReport

__all__ = ["StaticProfilingStrategy", "STATIC"]

STATIC = "static"  # the policy name in run configs, history rows and log lines


class StaticProfilingStrategy(AdaptiveStrategy):
    """Profile once with the equal split, then keep the resulting split fixed.

    Parameters
    ----------
    inner : flwr.serverapp.strategy.Strategy, optional
        Samples nodes and aggregates (default ``FedAvg()``), as in ``AdaptiveStrategy``.
    budget : int
        Samples per round, split among the sampled nodes (sums to it exactly).
    policy : str (default: "time")
        Weights used to turn the profiled costs into the fixed split (``"time"``,
        ``"low-energy"`` or ``"energy"``; ``"equal"`` would never use the profile).
    profile_rounds : int (default: 1)
        Rounds whose telemetry is used before the split freezes.
    **kwargs
        ``smoothing``, ``deadband``, ``weighting``, ``allow_cycling``, ``min_quota``,
        ``cost_clip``, ``state_dir``, ``context``: see :class:`strategies.core.AdaptiveCore`.
        ``forget_after`` is ignored: frozen estimates never expire.
    """

    def __init__(self, inner: Any = None, *, budget: int, policy: str = "time", profile_rounds: int = 1,
                 **kwargs: Any) -> None:
        if policy == "equal" or policy not in POLICIES:
            raise ValueError(f"StaticProfilingStrategy needs cost weights: policy must be one of "
                             f"{', '.join(p for p in POLICIES if p != 'equal')}, got {policy!r}")
        if isinstance(profile_rounds, bool) or not isinstance(profile_rounds, int) or profile_rounds < 1:
            raise ValueError(f"profile_rounds must be an int >= 1, got {profile_rounds!r}")
        self.profile_rounds = profile_rounds
        super().__init__(inner, budget=budget, policy=policy, **kwargs)

    def make_controller(self) -> StaticProfilingController:
        """A controller that freezes its estimates after ``profile_rounds`` reported rounds."""
        weights = POLICIES[self.policy]
        kwargs = {k: v for k, v in self._controller_kwargs.items() if k != "forget_after"}
        return StaticProfilingController(self.budget, profile_rounds=self.profile_rounds,
                                         w_time=weights.w_time, w_energy=weights.w_energy, **kwargs)

    @property
    def frozen(self) -> bool:
        """True once the split no longer follows telemetry."""
        return self.controller.frozen

    def account(self, server_round: int, reports: Sequence[ClientReport],
                skipped: Mapping[Hashable, str]) -> dict[str, Any]:
        """The adaptive strategy's round figures, labelled ``static``."""
        row = super().account(server_round, reports, skipped)
        row["policy"] = STATIC
        return row

    def summary(self) -> None:
        """Log that the split freezes, then the adaptive strategy's summary."""
        from logging import INFO

        from strategies.core import log

        log(INFO, "\t├──> Static profiling: split fixed after %d profiled round(s) (%s weights)",
             self.profile_rounds, self.policy)
        super().summary()
