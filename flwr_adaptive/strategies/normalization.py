"""Aggregation weights and normalised (FedNova) updates for the adaptive strategies, from untrusted replies.

Contract
--------
:class:`AggregationWeights` is a component of the round coordinator
(:class:`~flwr_adaptive.strategies.core.AdaptiveCore`, which exposes its settings ``weighting``,
``weight_cap``, ``data_sizes``, ``step_tolerance`` and its ``last_weights`` / ``last_scales`` as
its own attributes); the API classes call the coordinator's ``weights`` / ``update_scales``, per
round and on the kept replies only:

- ``weights(round, reports)``: each reply's aggregation weight, by ``self.weighting``:

  ``"samples"``     samples processed this round (bounded by the quota the server sent);
  ``"data-size"``   the local data size the client claims, **capped**;
  ``"normalized"``  the same capped data weight p_i (FedNova's data share), used with the
                    rescaling below; with ``objective="equal-split"`` (the default) at most
                    the round's ``equal_share`` (set by ``begin_round``: what the equal split
                    trains of a node, :func:`equal_split_level`): the objective of FedAvg under
                    the equal split, which no claim can exceed.

  The cap (``weight_cap``, default 2): a claim above ``weight_cap ×`` the median claim of the
  round's kept replies (at least 3) is clipped to it, with one warning naming the node and its
  partition (:func:`flwr_adaptive.normalized_averaging.capped_weights`). A partition whose size
  the operator set (``data_sizes = {partition id: size}``) is bounded by that size instead. A reply without a data
  size is weighted by its samples (one warning). Weights are ints (the legacy ``num_examples``
  is an int) and at least 1.
- ``update_scales(round, reports, weights)``: with ``"normalized"``, ``{node: τ_eff/‖a_i‖₁}``,
  the factor the API class applies to the node's model change before the inner strategy
  aggregates (:func:`flwr_adaptive.normalized_averaging.rescale_update`); empty otherwise.
  ‖a_i‖₁ comes from the reply's local steps, momentum and proximal α = lr × μ. Steps come from
  the coordinator's ``local_steps(reports)`` (the claim, kept within ``step_tolerance`` of the round's steps per
  sample, or of its median steps too when ``equal_steps`` (``scale_batch_size=True``), with
  ``max(samples, step_reference)`` for the samples when ``step_reference`` (``scale_batch_size="shrink"``;
  or the samples themselves, whichever reading clips fewer claims: loops that ignore the reference),
  one warning per node clipped; a round of fewer than 3 replies is judged against the medians of its
  replies and every other connected node's latest claim, ``peer_steps`` / ``peer_optimizers``; the
  hierarchical strategy overrides it with the steps it sent). When a kept reply does
  not say its steps, the round uses every reply's **samples** in their place (right for one batch
  size and one pass over the quota; one warning): a mix of units would be wrong. Unknown momentum
  counts as plain SGD; a μ > 0 with an unknown learning
  rate is left out (one warning each). ``max_rescale`` (default 8, 2 for min-energy with private data:
  :func:`default_max_rescale`; ``math.inf``: FedNova) clips every factor at
  that value, so a client held at a step or two is not extrapolated to the round's τ_eff: the
  objective then weighs it ``∝ p_i·min(τ_eff, max_rescale·‖a_i‖₁)`` (derivation in
  :mod:`flwr_adaptive.normalized_averaging`).

Cost
----
O(replies) numpy per round; the rescaling itself is one pass over each rescaled model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from flwr_adaptive import keys
from flwr_adaptive.normalized_averaging import (
    MAX_RESCALE,
    STEP_TOLERANCE,
    WEIGHT_CAP,
    capped_weights,
    check_max_rescale,
    local_work,
    normalized_plan,
    plausible_steps,
    plausible_work,
)
from flwr_adaptive.strategies.reports import ClientReport

__all__ = [
    "OBJECTIVES",
    "WEIGHTINGS",
    "AggregationWeights",
    "check_objective_applies",
    "MIN_ENERGY_MAX_RESCALE",
    "check_rescale_applies",
    "checked_max_rescale",
    "checked_objective",
    "checked_weighting",
    "default_max_rescale",
    "default_weighting",
    "equal_split_level",
]

#: The aggregation weightings; the first is the default with private data (``allow_cycling=False``).
WEIGHTINGS = ("normalized", "samples", "data-size")

#: The objectives of the normalised rule (its data weights p_i); the first is the default.
OBJECTIVES = ("equal-split", "data-size")


def equal_split_level(budget: int, caps: Sequence[int | None]) -> int | None:
    """What the equal split trains of a node at most: the level L with Σ_i min(cap_i, L) = min(budget, Σ caps).

    ``caps``: each node's local data size when quotas are capped at it (``None``: not capped).
    ``policy="equal"`` gives node i ``min(cap_i, L)``: the budget evenly, a small node's unused share
    to the others (water-filling); every node capped (the budget exceeds their data): the largest
    cap. ``None`` for no nodes. Integer: the remainder the split hands out one by one is left out.
    """
    if not caps:
        return None
    known = sorted(int(c) for c in caps if c is not None)
    remaining, left = int(budget), len(caps)
    for c in known:
        if c * left > remaining:
            break
        remaining, left = remaining - c, left - 1
    if left == 0:
        return max(known)
    return max(1, remaining // left)


def checked_objective(objective: str) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`, else a ValueError with the choices."""
    if objective not in OBJECTIVES:
        raise ValueError(
            f"objective must be one of {OBJECTIVES}, got {objective!r}: 'equal-split' weighs each node at most "
            "what the equal split trains of it (the objective of FedAvg under the equal split), "
            "'data-size' by its claimed data size"
        )
    return objective


def default_weighting(weighting: str | None, allow_cycling: bool) -> str:
    """The weighting a strategy uses: ``weighting`` when given, else the default for the data setting.

    ``None`` (the strategies' default) resolves to ``"normalized"`` with private data
    (``allow_cycling=False``: quotas move between data owners, so the objective must not move with
    them) and to ``"samples"`` with data shared in a trusted domain (``allow_cycling=True``: any
    client may take any sample, the paper's PMA setting).

    Raises
    ------
    ValueError
        An unknown weighting.
    """
    if weighting is None:
        return "samples" if allow_cycling else "normalized"
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
    return weighting


def checked_weighting(strategy: Any, weighting: str | None) -> str:
    """``weighting`` set on ``strategy`` after construction, checked as the constructor checks it: ``None``
    is the strategy's ``none_weighting`` when it has one, else the default for its data setting; an unknown
    one, or one beside a ``max_rescale`` it ignores, is refused with the fix (:func:`default_weighting`,
    :func:`check_rescale_applies`). A ``max_rescale`` left to its default is resolved again for the
    strategy's data setting now (``allow_cycling`` may have changed since)."""
    if weighting is None:
        weighting = getattr(strategy, "none_weighting", None)
    cycling = bool(getattr(strategy, "allow_cycling", False))
    resolved = default_weighting(weighting, cycling)
    default = default_max_rescale(None, str(getattr(strategy, "policy", "")), cycling)
    # the cap as the user gave it: a default resolved for another data setting is no choice of theirs
    given = vars(strategy).get(_MAX_RESCALE_GIVEN)
    check_rescale_applies(given, resolved, default)
    if given is None and _MAX_RESCALE_GIVEN in vars(strategy):  # no cap asked for: the default follows the setting
        strategy.aggregation.max_rescale = default
    return resolved


def claimed_steps(reports: Sequence[ClientReport]) -> list[int] | None:
    """Each reply's local steps as claimed, or ``None`` when a reply does not say them."""
    if any(r.steps is None for r in reports):
        return None
    return [int(r.steps) for r in reports]  # type: ignore[arg-type]


def check_rescale_applies(max_rescale: float | None, weighting: str, default: float | None = MAX_RESCALE) -> None:
    """Refuse a ``max_rescale`` other than the default (``None`` or ``default``) where no update is rescaled.

    Only ``weighting="normalized"`` rescales updates; with ``"samples"`` or ``"data-size"`` (and
    ``allow_cycling=True``, whose default is ``"samples"``) a cap would be accepted and do nothing.
    """
    if weighting != "normalized" and max_rescale not in (None, default):
        raise ValueError(
            f"max_rescale={max_rescale!r} has no effect with weighting={weighting!r}: only "
            "weighting='normalized' rescales updates (allow_cycling=True defaults to 'samples'); "
            "pass weighting='normalized' or leave max_rescale out"
        )


#: Where a strategy keeps ``max_rescale`` as the user gave it (``None``: the default), for later checks
#: and for resolving the default again when the data setting changes (:func:`checked_weighting`).
_MAX_RESCALE_GIVEN = "_max_rescale_given"


def checked_max_rescale(strategy: Any, value: Any) -> float:
    """``max_rescale`` set on ``strategy``, resolved and checked: ``None`` is the policy's default
    (:func:`default_max_rescale`; ``math.inf`` is unbounded), and a cap beside a weighting that rescales
    nothing is refused (:func:`check_rescale_applies`). The value as given is kept for
    :func:`checked_weighting`."""
    policy, cycling = str(getattr(strategy, "policy", "")), bool(getattr(strategy, "allow_cycling", False))
    resolved = default_max_rescale(value, policy, cycling)
    check_rescale_applies(value, strategy.weighting, default_max_rescale(None, policy, cycling))
    vars(strategy)[_MAX_RESCALE_GIVEN] = value
    return resolved


#: ``max_rescale`` of ``policy="min-energy"`` with private data when the user names none. The
#: min-energy split parks its energy-hungry nodes at ``min_quota``; with their batches shrunk
#: (``scale_batch_size="shrink"``, the default without a step floor) they take up to the round's
#: steps on a few samples each (at most one per sample), and a cap of 2 keeps those noisy updates
#: from being extrapolated 8× (every task, testbed and wide fleet, Dirichlet(0.3), 5 seeds: every
#: seed reached Equal's accuracy, in 0.34-0.53× its time; the cap of 8 lost an MNIST wide-fleet
#: seed and was slower in all other cells but one; docs/integration.md, "Min-energy with private
#: data").
MIN_ENERGY_MAX_RESCALE = 2.0


def default_max_rescale(value: Any, policy: str, allow_cycling: bool) -> float:
    """``max_rescale`` as used: ``value`` checked, or for ``None`` the policy's default.

    Parameters
    ----------
    value : float or None
        What the user passed: a number >= 1 (``math.inf``: FedNova's factors, unbounded);
        ``None``: :data:`MIN_ENERGY_MAX_RESCALE` for ``policy="min-energy"`` with private data,
        :data:`~flwr_adaptive.normalized_averaging.MAX_RESCALE` (8) otherwise.
    policy : str
        The strategy's policy.
    allow_cycling : bool
        ``False``: private data.

    Raises
    ------
    ValueError
        ``value`` is neither ``None`` nor a number >= 1.
    """
    if value is None:
        return MIN_ENERGY_MAX_RESCALE if policy == "min-energy" and not allow_cycling else MAX_RESCALE
    return float(check_max_rescale(value))  # type: ignore[arg-type]


def check_objective_applies(objective: str, weighting: str) -> None:
    """Refuse an ``objective`` other than the default where no data weight is chosen by it.

    Only ``weighting="normalized"`` weighs by an objective's data weights; with ``"samples"`` or
    ``"data-size"`` the setting would be accepted and do nothing.
    """
    if weighting != "normalized" and checked_objective(objective) != OBJECTIVES[0]:
        raise ValueError(
            f"objective={objective!r} has no effect with weighting={weighting!r}: only weighting='normalized' "
            "keeps an objective ('data-size' weighting already weighs by the claimed sizes); pass "
            "weighting='normalized' or leave objective out"
        )


def trained_at_least(report: ClientReport) -> int:
    """The samples a reply's step claim is judged by: its claim, but at least ``min(quota, data size)``
    when it says both (what ``quota_data`` selects without cycling), so that claiming fewer samples
    does not lower the bound on its steps (and so enlarge its update's factor) unless it also
    claims less data, which lowers its own weight."""
    if report.quota is None or report.data_size is None:
        return int(report.samples)
    return max(int(report.samples), min(int(report.quota), int(report.data_size)))


class AggregationWeights:
    """Weights and FedNova rescaling factors of the kept replies (see the module docstring).

    Parameters
    ----------
    weighting : str
        One of ``WEIGHTINGS`` (resolved: see :func:`default_weighting`).
    warn_once : callable
        ``warn_once(tag, msg, *args)``: the coordinator's once-per-run warning.
    """

    def __init__(self, weighting: str, warn_once: Callable[..., None]) -> None:
        self.weighting = weighting
        self._warn_once = warn_once
        #: A claimed data size counts for at most this many times the round's median claim (``None``: no cap).
        self.weight_cap: float | None = WEIGHT_CAP
        #: ``{partition id: data size}`` the operator knows (e.g. from the partitioning it ran): such a
        #: partition's weight is its claim bounded by this size, and the median cap does not apply to it.
        self.data_sizes: dict[int, int] | None = None
        #: A claimed step count per sample is kept within this factor of the round's median.
        self.step_tolerance: float = STEP_TOLERANCE
        #: The clients were asked to take equal steps (``scale_batch_size``): equal steps are plausible too.
        self.equal_steps: bool = False
        #: This round's reference quota when only slow nodes shrink their batches (``scale_batch_size="shrink"``):
        #: a node's steps follow ``max(samples, reference)`` samples at the user's batch size. ``None``: not asked.
        self.step_reference: int | None = None
        #: Largest factor a normalised update is scaled by (>= 1; ``math.inf`` or ``None``: FedNova's, unbounded;
        #: the strategies resolve their own ``None`` to the policy's default before it reaches this component).
        self.max_rescale: float | None = MAX_RESCALE
        #: The normalised rule's data weights p_i (:data:`OBJECTIVES`): ``"equal-split"`` bounds each at
        #: ``equal_share``, ``"data-size"`` leaves the capped claim.
        self.objective: str = OBJECTIVES[0]
        #: This round's equal share: what the equal split would train of a node at most
        #: (:func:`equal_split_level`), set by the round's ``begin_round``; ``None`` before the first
        #: round or where no budget is split (silos).
        self.equal_share: int | None = None
        #: The factors of the last round's normalised aggregation, ``{node id: τ_eff / ‖a_i‖₁}``.
        self.last_scales: dict[Hashable, float] = {}
        #: The local work ‖a_i‖₁ each update of the last round is normalised by, ``{node id: work}``: its
        #: update over this is its average step (what ``update_size`` compares, whatever the rescale cap).
        self.last_work: dict[Hashable, float] = {}
        #: What ``last_work`` counts: ``"step"``, or ``"sample"`` in a round where a reply did not say its
        #: steps and samples stood in for them (average steps of the two units do not compare).
        self.last_unit = "step"
        #: The last round's aggregation weights, ``{node id: weight}`` (``client_history``'s ``agg_weight``).
        self.last_weights: dict[Hashable, int] = {}
        #: Each connected node's latest step claim, ``{node id: (steps per sample, steps per max(samples,
        #: reference), steps)}``, and optimizer claim, ``{node id: (momentum, α)}``, as claimed (clipped or
        #: not): the medians a round of fewer than 3 replies is screened against. Every claim is kept, so a
        #: minority of liars stays a minority of the medians; storing only the claims that passed let two
        #: colluders who replied first hold the medians for good (``retain`` drops departed nodes). Saved in
        #: the state file (``state_store.encode_state``), so a resumed server screens its small rounds too.
        self.peer_steps: dict[Hashable, tuple[float, ...]] = {}
        self.peer_optimizers: dict[Hashable, tuple[float, ...]] = {}

    def retain(self, live_node_ids: Collection[Hashable]) -> None:
        """Keep the claims of the connected nodes only."""
        for kept in (self.peer_steps, self.peer_optimizers):
            for n in [n for n in kept if n not in live_node_ids]:
                del kept[n]

    @staticmethod
    def _peers(kept: Mapping[Hashable, tuple[float, ...]], reports: Sequence[ClientReport]) -> list[tuple[float, ...]]:
        """The kept claims of the nodes outside this round (none needed for a round of 3 or more)."""
        if len(reports) >= 3:
            return []
        here = {r.node_id for r in reports}
        return [v for k, v in kept.items() if k not in here]

    def weights(self, server_round: int, reports: Sequence[ClientReport]) -> dict[Hashable, int]:
        """Aggregation weight of each kept reply, by ``weighting`` (claimed sizes capped)."""
        if self.weighting == "samples":
            self.last_weights = {r.node_id: r.samples for r in reports}
            return dict(self.last_weights)
        claims = []
        for r in reports:
            if r.data_size is None:
                self._warn_once(
                    "data-size",
                    "[adaptive] weighting=%r but node %s does not report its data size (no quota_data?); "
                    "weighting it by samples",
                    self.weighting,
                    r.node_id,
                )
                claims.append(r.samples)
            else:
                claims.append(r.data_size)
        share = self.share_bound()
        # The equal share first: the median cap then judges what is left (a claim above the share is
        # honest data the equal split would not have trained either, not a reason to warn).
        bounded, clipped = capped_weights([min(c, share) for c in claims], self.weight_cap)
        sizes = self.data_sizes or {}
        for i, r in enumerate(reports):
            known = sizes.get(r.partition_id) if r.partition_id is not None else None
            if known is not None:  # the operator's size is the bound: no median cap, never above it
                bounded[i], clipped[i] = min(float(claims[i]), float(known), share), False
        for r, claim, w, was in zip(reports, claims, bounded, clipped):
            if was:
                self._warn_once(
                    f"weight-cap-{r.partition_id if r.partition_id is not None else r.node_id}",
                    "[adaptive] round %s: node %s (partition %s) claims a data size of %d, above %g× the "
                    "median claim of this round's nodes: its aggregation weight is capped at %d (a claimed "
                    "size is not checked; set strategy.weight_cap to change the bound, None to trust claims)",
                    server_round,
                    r.node_id,
                    r.partition_id,
                    claim,
                    self.weight_cap,
                    int(w),
                )
        self.last_weights = {r.node_id: max(int(math.floor(w)), 1) for r, w in zip(reports, bounded)}
        return dict(self.last_weights)

    def share_bound(self) -> float:
        """The bound ``"equal-split"`` puts on a normalised data weight this round (else ``inf``)."""
        if self.weighting == "normalized" and self.objective == "equal-split" and self.equal_share is not None:
            return float(self.equal_share)
        return math.inf

    def update_scales(
        self,
        server_round: int,
        reports: Sequence[ClientReport],
        weights: dict[Hashable, int],
        local_steps: Callable[[Sequence[ClientReport]], list[int] | None] = claimed_steps,
    ) -> dict[Hashable, float]:
        """``{node: τ_eff/‖a_i‖₁}`` with ``weighting="normalized"`` (else ``{}``); ``local_steps``
        gives each reply's steps (``None``: a reply does not say them)."""
        self.last_scales, self.last_work, self.last_unit = {}, {}, "step"
        if self.weighting != "normalized" or not reports:
            return {}
        samples = np.array([r.samples for r in reports], dtype=float)
        steps = local_steps(reports)
        if steps is None:
            missing = [r.node_id for r in reports if r.steps is None]
            self._warn_once(
                "no-steps",
                "[adaptive] round %s: weighting='normalized' but %d client(s) (node %s, ...) do not report "
                "their local optimizer steps (%s): every client's samples stand in for its steps this round "
                "(exact for one batch size and one pass over the quota). Wrap the client with "
                "flwr_adaptive.clients.telemetry, which counts torch optimizer steps, or report the key yourself",
                server_round,
                len(missing),
                missing[0],
                keys.LOCAL_STEPS,
            )
            tau, self.last_unit = samples, "sample"
        else:
            trained = np.array([trained_at_least(r) for r in reports], dtype=float)
            tau, clipped = plausible_steps(
                np.array(steps, dtype=float),
                trained,
                self.step_tolerance,
                equal_steps=self.equal_steps,
                reference=self.step_reference,
                peers=self._peers(self.peer_steps, reports),
            )
            by_reference = np.maximum(trained, float(self.step_reference or 1))
            for r, was, t, n, e, claim in zip(reports, clipped, tau, trained, by_reference, steps):
                self.peer_steps[r.node_id] = (claim / n, claim / e, float(claim))
                if was:
                    self._warn_once(
                        f"steps-{r.partition_id if r.partition_id is not None else r.node_id}",
                        "[adaptive] round %s: node %s (partition %s) claims %d local steps for %d samples, "
                        "outside %g× this round's steps per sample: %g steps are used for its update's scale",
                        server_round,
                        r.node_id,
                        r.partition_id,
                        r.steps,
                        r.samples,
                        self.step_tolerance,
                        t,
                    )
        rho = np.array([r.momentum or 0.0 for r in reports], dtype=float)
        alphas = []
        for r in reports:
            alpha = r.proximal_alpha
            if alpha is None:
                self._warn_once(
                    "no-lr",
                    "[adaptive] node %s reports a proximal mu but no learning rate: its proximal term is "
                    "left out of the normalisation (report the key %r)",
                    r.node_id,
                    keys.LOCAL_LR,
                )
                alpha = 0.0
            alphas.append(alpha)
        work, implausible = plausible_work(
            tau,
            rho,
            np.array(alphas, dtype=float),
            self.step_tolerance,
            peers=self._peers(self.peer_optimizers, reports),
        )
        # A claim of more work than the bound only lengthens its own normalisation (a smaller factor for
        # its own update): it is believed there, and bounded only in τ_eff, every node's step length. So an
        # honest momentum node beside plain-SGD ones keeps FedNova's share of the objective.
        claimed = local_work(tau, rho, np.array(alphas, dtype=float))
        own = np.where(implausible & np.isfinite(claimed) & (claimed > work), claimed, work)
        for r, was, a, mine, steps_used, momentum, alpha in zip(reports, implausible, work, own, tau, rho, alphas):
            self.peer_optimizers[r.node_id] = (float(momentum), float(alpha))
            if not was:
                continue
            claim = (server_round, r.node_id, r.partition_id, r.momentum, r.lr, r.proximal_mu, int(steps_used))
            head = (
                "[adaptive] round %s: node %s (partition %s) claims an optimizer (momentum %s, lr %s, proximal mu %s)"
            )
            if mine > a:
                why = (
                    " whose local work for its %d steps, %.4g, is above %g× that of the round's median optimizer: its "
                    "own update is normalised by its claim, and the round's step length counts it at %.4g"
                )
                args: tuple[Any, ...] = (*claim, mine, self.step_tolerance, a)
            else:
                why = (
                    " whose local work for its %d steps lies outside %g× that of the round's median optimizer (or is "
                    "not a positive number): %.4g is used for its update's scale. If your nodes really run different "
                    "optimizers, raise strategy.step_tolerance"
                )
                args = (*claim, self.step_tolerance, a)
            self._warn_once(f"work-{r.partition_id if r.partition_id is not None else r.node_id}", head + why, *args)
        _, _, scale = normalized_plan([weights[r.node_id] for r in reports], own, self.max_rescale, step_work=work)
        self.last_scales = {r.node_id: float(s) for r, s in zip(reports, scale)}
        self.last_work = {r.node_id: float(a) for r, a in zip(reports, own)}
        return dict(self.last_scales)
