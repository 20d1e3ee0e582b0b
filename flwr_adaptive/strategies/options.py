"""The checks of the parameters every adaptive strategy shares, before anything is built.

Contract
--------
:func:`checked_budget` raises ``ValueError`` naming the parameter, its value and the fix for: not
exactly one of ``budget`` / ``budget_per_node``, a budget that is not a positive int, an unknown
``policy`` or ``weighting``, ``slack`` with a policy that does not minimise energy, a ``paper`` or
``allow_cycling`` that is not a bool (``"no"`` would read as True), a ``min_quota`` below 1 or
above the budget. It returns the first round's budget (``budget_per_node`` until a round says how many
nodes train) and ``budget_per_node`` as ints. :func:`check_not_adaptive` refuses an adaptive
strategy as the wrapped one. The components check their own parameters (``StateStore``:
``state_dir`` and ``context``; ``resolve_trust``: ``trust``).

Cost
----
A few comparisons, once per strategy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flwr_adaptive.controller import POLICIES
from flwr_adaptive.strategies.normalization import WEIGHTINGS

__all__ = ["check_not_adaptive", "checked_budget"]


def checked_budget(
    budget: Any,
    budget_per_node: Any,
    *,
    policy: str,
    weighting: str | None,
    slack: float | None,
    paper: Any,
    allow_cycling: Any,
    min_quota: Any,
) -> tuple[int, int | None]:
    """``(budget, budget_per_node)`` as ints, or ``ValueError`` with the fix (see the module docstring)."""
    if (budget is None) == (budget_per_node is None):
        raise ValueError(
            "pass either budget= (samples per round, split among the nodes training that "
            "round) or budget_per_node= (samples per training node: the round's budget "
            f"scales with the nodes sampled), not {'both' if budget is not None else 'neither'}"
        )
    if budget_per_node is not None:
        if (
            isinstance(budget_per_node, bool)
            or not isinstance(budget_per_node, (int, np.integer))
            or budget_per_node < 1
        ):
            raise ValueError(
                f"budget_per_node must be a positive int (samples per training node and round), got {budget_per_node!r}"
            )
        budget = int(budget_per_node)  # until the first round says how many nodes train
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be a positive int (samples per round), got {budget!r}")
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if weighting is not None and weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
    if slack is not None and POLICIES[policy].objective != "min-energy":
        minimal = [p for p, v in POLICIES.items() if v.objective == "min-energy"]
        raise ValueError(
            f"slack={slack!r} applies to policy {' or '.join(map(repr, minimal))} only, not "
            f"{policy!r}: drop slack or choose that policy"
        )
    if not isinstance(paper, bool):
        raise ValueError(f"paper must be True or False, got {paper!r}")
    if not isinstance(allow_cycling, (bool, np.bool_)):  # "no" would read as True
        raise ValueError(f"allow_cycling must be True or False, got {allow_cycling!r}")
    floors = min_quota.values() if isinstance(min_quota, dict) else [min_quota]
    if any(isinstance(f, (int, np.integer)) and not isinstance(f, bool) and f < 1 for f in floors):
        raise ValueError(
            f"min_quota must be >= 1, got {min_quota!r}: a node Flower sampled would be given 0 samples, sent "
            "nothing and left out of the round (its data with it) without a reply to show it; keep the default "
            "min_quota=1, or sample fewer nodes in the inner strategy (e.g. FedAvg(fraction_train=...))"
        )
    if isinstance(min_quota, (int, np.integer)) and not isinstance(min_quota, bool) and min_quota > budget:
        raise ValueError(
            f"min_quota={min_quota} exceeds the {'budget_per_node' if budget_per_node else 'budget'} "
            f"of {budget} samples: no node could train; lower min_quota or raise the budget"
        )
    return int(budget), None if budget_per_node is None else int(budget_per_node)


def check_not_adaptive(strategy: Any, outer: str) -> None:
    """Refuse an adaptive strategy as the one ``outer`` wraps: the outer layer's telemetry screen takes
    the replies' keys first, so the inner one saw none and stopped round 1 telling the user to wrap the
    ClientApp, which was wrapped."""
    if any(cls.__name__ == "AdaptiveCore" for cls in type(strategy).__mro__):
        raise ValueError(
            f"strategy is already an adaptive strategy ({type(strategy).__name__}): {outer} wraps a Flower "
            f"strategy once, e.g. {outer}(FedAvg(), budget=...); pass the inner strategy's own options to this one"
        )
