"""One factory from a policy name to a server strategy: the adaptive policies and the baselines.

Contract
--------
``build_strategy(policy, budget=..., ...)`` returns an object with Flower's ``Strategy.start``
signature plus ``history`` / ``client_history`` / ``save_history`` (one row per round, or per
round-equivalent for FedAsync), so one ServerApp runs any policy chosen by run config:

============  ============================================================  ======================
policy        what it does                                                  class
============  ============================================================  ======================
equal         every node gets budget / nodes (no adaptation)                 AdaptiveStrategy
time          split ∝ 1 / time per sample, re-measured every round          AdaptiveStrategy
low-energy    0.75·time + 0.25·energy cost                                  AdaptiveStrategy
energy        split ∝ 1 / energy per sample                                 AdaptiveStrategy
min-energy    least active + idle energy, rounds ≤ (1 + slack) × shortest   AdaptiveStrategy
static        time-only split from round 1's measurement, then fixed        StaticProfilingStrategy
oort          Oort-like selection of ``oort_fraction`` of the nodes,       OortStrategy
              equal split among them
fedasync      asynchronous mixing on the virtual clock, equal-share jobs    FedAsyncStrategy
============  ============================================================  ======================

Cost: construction only.
"""

from __future__ import annotations

import os
from typing import Any

from flwr.app import Context
from flwr.serverapp.strategy import Strategy

from flwr_adaptive.controller import POLICIES
from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy
from flwr_adaptive.strategies.fedasync_strategy import FEDASYNC, FedAsyncStrategy
from flwr_adaptive.strategies.normalization import OBJECTIVES
from flwr_adaptive.strategies.oort_strategy import DEFAULT_FRACTION, OORT, OortStrategy
from flwr_adaptive.strategies.static_profiling_strategy import STATIC, StaticProfilingStrategy
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["POLICY_NAMES", "BASELINES", "LABELS", "PAPER_SUFFIX", "run_name", "parse_run_name", "build_strategy"]

BASELINES = (STATIC, OORT, FEDASYNC)
POLICY_NAMES = (*POLICIES, *BASELINES)
LABELS = {
    "equal": "Equal",
    "time": "Time-only",
    "low-energy": "Low-energy",
    "energy": "Energy-only",
    "min-energy": "Min-energy",
    STATIC: "Static",
    OORT: "Oort-like",
    FEDASYNC: "FedAsync",
}

#: A run of a paper's policy with ``paper=True`` is named ``<policy>-paper`` (files, tables).
PAPER_SUFFIX = "-paper"
_PAPER_POLICIES = ("time", "low-energy", "energy")
LABELS.update({p + PAPER_SUFFIX: LABELS[p] + " (paper)" for p in _PAPER_POLICIES})


#: Options of ``build_strategy`` that a baseline does not take and that change what a run means
#: (set to anything but the default, they are refused rather than silently ignored). The
#: estimation knobs ``smoothing`` and ``deadband`` are let through: one sweep sets them for all.
_UNUSED = {
    STATIC: ("forget_after", "slack", "paper", "min_local_steps", "scale_batch_size"),
    OORT: ("cost_clip", "forget_after", "slack", "paper", "min_local_steps", "scale_batch_size"),
    FEDASYNC: (
        "slack",
        "paper",
        "weighting",
        "max_rescale",
        "objective",
        "min_quota",
        "min_local_steps",
        "scale_batch_size",
        "forget_after",
        "cost_clip",
        "state_dir",
        "context",
    ),
}


def run_name(policy: str, paper: bool = False) -> str:
    """The name of a run of ``policy`` (``"time-paper"`` with ``paper=True``): files and table rows."""
    return policy + PAPER_SUFFIX if paper else policy


def parse_run_name(name: str) -> tuple[str, bool]:
    """``(policy, paper)`` of a run name: ``"time-paper"`` → ``("time", True)``, ``"time"`` → ``("time", False)``."""
    if name.endswith(PAPER_SUFFIX) and name[: -len(PAPER_SUFFIX)] in _PAPER_POLICIES:
        return name[: -len(PAPER_SUFFIX)], True
    return name, False


def build_strategy(
    policy: str,
    *,
    budget: int | None = None,
    budget_per_node: int | None = None,
    strategy: Strategy | None = None,
    num_nodes: int = 1,
    seed: int = 0,
    oort_fraction: float = DEFAULT_FRACTION,
    fedasync_alpha: float = 0.6,
    fedasync_staleness: str = "polynomial",
    fedasync_order: str = "virtual",
    smoothing: float = 0.5,
    deadband: float | None = None,
    slack: float | None = None,
    paper: bool = False,
    weighting: str | None = None,
    max_rescale: float | None = None,
    objective: str = OBJECTIVES[0],
    allow_cycling: bool = False,
    min_quota: int = 1,
    min_local_steps: int | None = None,
    scale_batch_size: bool | str | None = None,
    forget_after: int = 3,
    cost_clip: float = 100.0,
    trust: CostTrust | bool = True,
    state_dir: str | os.PathLike | None = None,
    context: Context | None = None,
) -> Strategy | FedAsyncStrategy:
    """The strategy for ``policy`` (one of :data:`POLICY_NAMES`).

    Parameters
    ----------
    policy : str
        ``equal``, ``time``, ``low-energy``, ``energy``, ``min-energy``, ``static``, ``oort`` or
        ``fedasync``.
    budget : int, optional
        Samples per round (per round-equivalent for FedAsync).
    budget_per_node : int, optional
        Instead of ``budget`` (synchronous policies): samples per training node, so each round's
        budget scales with the number of nodes sampled or selected.
    strategy : flwr.serverapp.strategy.Strategy, optional
        The wrapped strategy: sampling and aggregation of the synchronous policies (default
        ``FedAvg()``); FedAsync mixes on its own and ignores it.
    num_nodes : int (default: 1)
        Nodes FedAsync waits for before its first wave.
    seed : int (default: 0)
        Seed of Oort's sampling.
    oort_fraction : float (default: 0.6)
        Share of the nodes Oort selects per round.
    fedasync_alpha, fedasync_staleness : float, str
        FedAsync's mixing weight α and staleness function.
    fedasync_order : str (default: "virtual")
        FedAsync's arrival order: ``"virtual"`` replays the virtual clock (emulated testbed),
        ``"arrival"`` mixes live replies as they arrive (a real deployment); see
        :class:`~flwr_adaptive.strategies.FedAsyncStrategy`.
    deadband : float, optional
        ``None``: the policy's default (see :class:`~flwr_adaptive.strategies.AdaptiveStrategy`).
    slack : float, optional
        ``min-energy`` only: rounds may last up to ``1 + slack`` times the shortest possible;
        ``None``: the policy's default (0.1).
    paper : bool (default: False)
        The paper's estimation and deadband for ``time`` / ``low-energy`` / ``energy`` /
        ``min-energy`` (see :class:`~flwr_adaptive.strategies.AdaptiveStrategy`).
    smoothing, weighting, max_rescale, objective, allow_cycling, min_quota, forget_after, cost_clip, trust, state_dir,
    context
        As for :class:`~flwr_adaptive.strategies.AdaptiveStrategy`; each baseline takes the
        ones that apply to it (FedAsync only ``allow_cycling``, Oort no cost options, Static no
        ``forget_after``, ``slack`` or ``paper``: its frozen split is the paper's per-sample one).
    min_local_steps : int, optional
        As for :class:`~flwr_adaptive.strategies.AdaptiveStrategy` (the controller policies
        only: Static, Oort and FedAsync do not take it; ``None``: no floor).
    scale_batch_size : bool, "shrink" or None (default: None)
        As for :class:`~flwr_adaptive.strategies.AdaptiveStrategy` (the controller policies only:
        Static and Oort-like train at the user's batch size, FedAsync too).

    Raises
    ------
    ValueError
        An unknown policy, or an option the chosen baseline does not take (see ``_UNUSED``) set
        to anything but its default (it would be silently ignored).
    """
    if policy not in POLICY_NAMES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    given = {
        "slack": slack is not None,
        "paper": paper is not False,
        "weighting": weighting not in (None, "samples"),  # FedAsync mixes by samples
        "max_rescale": max_rescale is not None,
        "objective": objective != OBJECTIVES[0],
        "min_quota": min_quota != 1,
        "min_local_steps": min_local_steps not in (None, 0),
        "scale_batch_size": scale_batch_size is not None and scale_batch_size is not False,
        "forget_after": forget_after != 3,
        "cost_clip": cost_clip != 100.0,
        "state_dir": bool(state_dir),
        "context": context is not None,
    }
    ignored = [name for name in _UNUSED.get(policy, ()) if given[name]]
    if ignored:
        raise ValueError(
            f"{', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} not apply to policy {policy!r} "
            "(it would be ignored); "
            f"drop {' and '.join(ignored)} or choose a policy that uses it"
        )
    if policy == FEDASYNC:
        if budget_per_node is not None:
            raise ValueError(
                "fedasync dispatches equal-share jobs of budget / nodes samples: pass budget=, not budget_per_node="
            )
        if budget is None:
            raise ValueError("fedasync needs budget= (samples per round-equivalent)")
        return FedAsyncStrategy(
            budget=budget,
            alpha=fedasync_alpha,
            staleness=fedasync_staleness,
            allow_cycling=allow_cycling,
            min_nodes=num_nodes,
            order=fedasync_order,
            trust=trust,
        )
    common: dict[str, Any] = dict(
        budget_per_node=budget_per_node,
        weighting=weighting,
        max_rescale=max_rescale,
        objective=objective,
        allow_cycling=allow_cycling,
        min_quota=min_quota,
        trust=trust,
        state_dir=state_dir,
        context=context,
    )
    if policy == OORT:
        return OortStrategy(strategy, budget=budget, fraction=oort_fraction, seed=seed, **common)
    costs: dict[str, Any] = dict(smoothing=smoothing, deadband=deadband, cost_clip=cost_clip)
    if policy == STATIC:
        return StaticProfilingStrategy(strategy, budget=budget, policy="time", **costs, **common)
    return AdaptiveStrategy(
        strategy,
        budget=budget,
        policy=policy,
        slack=slack,
        paper=paper,
        forget_after=forget_after,
        min_local_steps=min_local_steps,
        scale_batch_size=scale_batch_size,
        **costs,
        **common,
    )
