"""Static profiling: measure every participant once, then never adapt again (a baseline).

Contract
--------
The first ``profile_rounds`` rounds *that report* run like the adaptive controller (round 1 is
the equal split); their reports fix each participant's per-sample cost for the rest of the run.
A profiling round ends at the first ``allocate`` after its reports; from then on reports are
validated and ignored, so the split cannot follow drift — which is what this baseline exists to
show. Counting rounds by their reports, not by ``allocate`` calls, matters inside the Flower
strategy: its round 1 hands out the equal split without calling ``allocate``, and counting calls
would silently profile round 2 as well. When the participant set changes, the frozen costs are
re-split over the new set (the budget is still conserved); a participant never profiled gets the
median cost, as in the adaptive controller. ``state_dict`` keeps whether profiling is over.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

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
        self._profiled = 0  # allocate() calls that closed a profiling round
        self._reported = False  # a profiling report arrived since the last allocate()

    @property
    def frozen(self) -> bool:
        """True once the profiling rounds are over (reports are then ignored)."""
        return self._profiled >= self.profile_rounds

    def allocate(self, participants: Sequence[ParticipantId]) -> dict[ParticipantId, int]:
        """As ``AllocationController.allocate``; the first call after reports closes a profiling round."""
        # A flag, not ``_pending``: ``state_dict`` (saved after every round) flushes ``_pending``.
        if self._reported:
            self._profiled += 1
            self._reported = False
        return super().allocate(participants)

    def state_dict(self) -> dict[str, Any]:
        """The controller's state plus how many profiling rounds are done."""
        return {**super().state_dict(), "profiled_rounds": self._profiled, "reported": self._reported}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict`` output (a state without ``profiled_rounds`` counts as unprofiled)."""
        profiled, reported = state.get("profiled_rounds", 0), state.get("reported", False)
        if isinstance(profiled, bool) or not isinstance(profiled, int) or profiled < 0:
            raise ValueError(
                f"controller state field 'profiled_rounds': expected an int >= 0, got {profiled!r}; "
                "delete the state file to start afresh"
            )
        if not isinstance(reported, bool):
            raise ValueError(
                f"controller state field 'reported': expected true or false, got {reported!r}; "
                "delete the state file to start afresh"
            )
        super().load_state_dict(state)  # validates the rest before changing anything
        self._profiled = profiled
        self._reported = reported

    def observe(self, participant: ParticipantId, report: Report) -> None:
        """Validate the report; record it only during the profiling rounds."""
        if self.frozen:
            self._validate(
                participant,
                report,
                getattr(report, "time_s", None),
                getattr(report, "energy_j", None),
                getattr(report, "samples", None),
            )
            return
        super().observe(participant, report)
        self._reported = True
