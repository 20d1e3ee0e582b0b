"""The named controller policies: the paper's weightings of time and energy, and what goes beyond them.

Contract
--------
:data:`POLICIES` maps a policy name to a :class:`Policy`, whose ``controller_kwargs`` are the
``AllocationController`` arguments it stands for. The paper's estimation and deadband
(:data:`PAPER_SETTINGS`) are one swap away (``paper=True``), so every named policy can be run
as the paper runs it. The names and their settings are part of the public API: the strategies,
the experiments and the docs refer to them.

Cost
----
Constants only; nothing is computed at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Policy", "POLICIES", "PAPER_SETTINGS", "BEYOND_PAPER", "OBJECTIVES", "COST_MODELS", "DEADBAND_RULES"]

OBJECTIVES = ("weighted", "min-energy")
COST_MODELS = ("per-sample", "affine")
DEADBAND_RULES = ("tv", "gain")

#: The estimation and deadband the paper uses; ``from_policy(..., paper=True)`` applies it.
PAPER_SETTINGS: dict[str, Any] = {"cost_model": "per-sample", "drift": None, "deadband_rule": "tv"}


@dataclass(frozen=True)
class Policy:
    """A named controller configuration: the paper's weightings of time and energy, and beyond.

    ``w_time == w_energy == 0`` with ``objective="weighted"`` is the Equal policy: costs are
    ignored and the budget is split evenly (bounds and groups still apply). The remaining fields
    are the controller arguments of the same names (see :class:`AllocationController`).
    """

    name: str
    w_time: float
    w_energy: float
    objective: str = "weighted"
    slack: float = 0.1
    cost_model: str = "per-sample"
    drift: float | None = None
    deadband_rule: str = "tv"
    deadband: float | None = None  # None: the controller's default

    def controller_kwargs(self, paper: bool = False) -> dict[str, Any]:
        """The controller arguments of this policy; ``paper=True`` swaps in ``PAPER_SETTINGS``."""
        kwargs = dict(
            w_time=self.w_time,
            w_energy=self.w_energy,
            objective=self.objective,
            slack=self.slack,
            cost_model=self.cost_model,
            drift=self.drift,
            deadband_rule=self.deadband_rule,
        )
        if self.deadband is not None and not paper:
            kwargs["deadband"] = self.deadband
        if paper:
            kwargs.update(PAPER_SETTINGS)
        return kwargs


#: What the named policies use beyond the paper's weights (measured better by
#: ``python -m experiments.split_quality``): fitted fixed + per-sample costs, a step change
#: followed at once, the split kept while re-splitting gains < 2 % (or less than jitter fakes).
BEYOND_PAPER: dict[str, Any] = {"cost_model": "affine", "drift": 0.3, "deadband_rule": "gain", "deadband": 0.02}

POLICIES: dict[str, Policy] = {
    "equal": Policy("equal", 0.0, 0.0),
    "time": Policy("time", 1.0, 0.0, **BEYOND_PAPER),
    "low-energy": Policy("low-energy", 0.75, 0.25, **BEYOND_PAPER),
    "energy": Policy("energy", 0.0, 1.0, **BEYOND_PAPER),
    # Beyond the paper: the least active + idle energy within rounds at most 10 % longer than the
    # shortest possible, on fitted fixed + per-sample costs that follow a step change at once; the
    # split is kept while re-splitting gains < 2 % (or less than the reports' own jitter fakes).
    "min-energy": Policy(
        "min-energy",
        0.0,
        0.0,
        objective="min-energy",
        slack=0.1,
        cost_model="affine",
        drift=0.3,
        deadband_rule="gain",
        deadband=0.02,
    ),
}
