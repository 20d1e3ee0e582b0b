"""Static profiling: measure every participant once, then never adapt again (a baseline).

Contract
--------
The first ``profile_rounds`` rounds run like the adaptive controller (round 1 is the equal split);
their reports fix each participant's per-sample cost for the rest of the run. Later reports are
ignored, so the split cannot follow drift — which is what this baseline exists to show. When the
participant set changes, the frozen costs are re-split over the new set (the budget is still
conserved); a participant never profiled gets the median cost, as in the adaptive controller.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping

from flwr_adaptive.controller import AllocationController, ParticipantId, Report

__all__ = ["StaticProfilingController"]


class StaticProfilingController(AllocationController):
    """An ``AllocationController`` whose estimates freeze after ``profile_rounds`` rounds.

    Parameters
    ----------
    budget : int or dict
        As for ``AllocationController``.
    profile_rounds : int
        Rounds whose reports are used (default 1: the equal-split round).
    **kwargs
        Other ``AllocationController`` arguments; ``smoothing`` applies within the profiling
        rounds. ``forget_after`` is disabled: frozen estimates never expire.
    """

    def __init__(self, budget: int | Mapping[Hashable, int], profile_rounds: int = 1, **kwargs: Any) -> None:
        if profile_rounds < 1:
            raise ValueError(f"profile_rounds must be >= 1, got {profile_rounds}")
        kwargs.setdefault("deadband", 0.0)
        kwargs["forget_after"] = 2**62
        super().__init__(budget, **kwargs)
        self.profile_rounds = profile_rounds

    @property
    def frozen(self) -> bool:
        """True once the profiling rounds are over (reports are then ignored)."""
        return self._round > self.profile_rounds

    def observe(self, participant: ParticipantId, report: Report) -> None:
        """Validate the report; record it only during the profiling rounds."""
        if self.frozen:
            self._validate(participant, report, getattr(report, "time_s", None),
                           getattr(report, "energy_j", None), getattr(report, "samples", None))
            return
        super().observe(participant, report)
