"""Oort-like selection baseline: train on the fastest useful participants, drop the rest.

Contract
--------
:class:`OortStrategy` is :class:`strategies.AdaptiveStrategy` (Message API) with two changes:

- ``participants()`` picks ``k = round(fraction · nodes)`` of the nodes the inner strategy
  sampled with :class:`~flwr_adaptive.oort_selector.OortSelector` (Lai et al., "Oort: Efficient Federated
  Learning via Guided Participant Selection", OSDI '21): statistical utility × system penalty
  ``(T / t_i)^α`` for participants slower than the preferred round duration ``T``, exploration of
  never-tried nodes with a decaying share (ranked by the ``keys.DATA_SIZE`` they reported, as
  Oort ranks by data size; a node that never replied has size 0 there), and the pacer that
  relaxes ``T``. The other nodes sit the round out (no message).
- The budget is split **equally** among the selected (Oort chooses *who* trains, it does not
  re-split work): the controller runs the Equal policy over the selected nodes. There is no
  probation (``uses_probation = False``): a node whose reply was skipped gets the same equal
  share as the others when it is next selected, and that reply updates its arm like any other
  (a probe of ``min_quota`` samples would make a slow device look fast).

After each round every kept reply updates its node's arm: utility ``|B_i|·sqrt(mean loss²)``
(Oort's statistical utility, :func:`~flwr_adaptive.oort_selector.statistical_utility`), approximated with
the round's mean training loss ``keys.TRAIN_LOSS`` that the user's train function reports (the
square of the mean is a lower bound of the mean of squares; with per-sample losses unknown this is
the closest the telemetry gets); and duration = the client's own compute time ``keys.TIME_S``
(device time on the virtual clock in the emulated testbed). A node without a loss metric is
scored by its sample count and a warning is logged once. Selector defaults are Oort's own; see
:mod:`flwr_adaptive.oort_selector` for each value and its source.

``selection_counts()`` says how often each participant (by partition id) was selected; history
rows carry ``policy = "oort"``, ``candidates`` and ``excluded`` (candidates not selected).

The selector's arms are keyed by node id (node ids are stable within a run); the selection state
is not part of ``state_dict``, so a restarted ServerApp starts exploring again. The candidates are
put in a canonical order before selecting, so under one ``seed`` the same candidates and replies
give the same choice in every run (the inner strategy's own sampling, with ``fraction_train < 1``,
draws from Python's global ``random``: seed it to fix the candidates too).

Cost
----
As the adaptive strategy, plus one ``OortSelector.select`` per round (O(P log P)).
"""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Mapping, Sequence
from logging import INFO
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp.strategy import Strategy

from flwr_adaptive import keys
from flwr_adaptive.oort_selector import OortSelector, statistical_utility
from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy
from flwr_adaptive.strategies.core import log
from flwr_adaptive.strategies.normalization import OBJECTIVES
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["OortStrategy", "OORT", "DEFAULT_FRACTION"]

OORT = "oort"  # the policy name in run configs, history rows and log lines
DEFAULT_FRACTION = 0.6  # share of the nodes selected per round (ours; Oort sets k per experiment)


class OortStrategy(AdaptiveStrategy):
    """Oort's participant selection around a Message-API strategy; equal split among the selected.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy, optional
        The wrapped strategy: samples the candidate nodes and aggregates (default ``FedAvg()``; use
        ``fraction_train=1.0`` so that every node is a candidate).
    budget : int, optional
        Samples per round, split equally among the selected nodes.
    budget_per_node : int, optional
        Instead of ``budget``: samples per training node; each round's budget is this times the
        number of nodes selected, so the load per node does not depend on how many are sampled.
    fraction : float (default: 0.6)
        Share of the candidates selected per round: ``k = max(1, round(fraction · candidates))``.
    selector : OortSelector, optional
        A configured selector (default ``OortSelector(seed=seed)``: Oort's defaults).
    seed : int (default: 0)
        Seed of the default selector's sampling.
    weighting : str, optional
        ``"normalized"``, ``"samples"`` or ``"data-size"``, as for ``AdaptiveStrategy``. Default
        (``None``): ``"normalized"`` when ``allow_cycling=False``, ``"samples"`` when True.
    max_rescale : float, optional
        With ``weighting="normalized"``: the largest factor a node's update is scaled by, as for
        ``AdaptiveStrategy`` (``None``: the policy's default, 8 here; ``math.inf``: FedNova's, unbounded).
    objective : str (default: "equal-split")
        As for :class:`~flwr_adaptive.strategies.AdaptiveStrategy`.
    allow_cycling : bool (default: False)
        Let a client whose quota exceeds its local data cycle through it again; when False each
        quota is capped at the data size the client reports.
    min_quota : int (default: 1)
        Smallest quota any selected client gets.
    trust : CostTrust or bool (default: True)
        Which claimed costs the server believes: ``True`` the default rules, a ``CostTrust(...)``
        to tune them, ``False`` every claim (see ``AdaptiveStrategy``).
    state_dir : str or Path, optional
        Folder where the strategy state is saved after every round and resumed from.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state``.

    The split among the selected nodes is always equal (no ``policy``).
    """

    uses_probation = False  # Oort splits equally among the selected: a retried node gets its share
    outlier_ratio = math.inf  # no cost estimate to protect: the selector times every arm itself

    #: Why ``scale_batch_size`` stays False here (``round_quotas.ScaleBatchSize`` refuses another value).
    keeps_batch_size = "a baseline"

    def __init__(
        self,
        strategy: Strategy | None = None,
        *,
        budget: int | None = None,
        budget_per_node: int | None = None,
        fraction: float = DEFAULT_FRACTION,
        selector: OortSelector | None = None,
        seed: int = 0,
        weighting: str | None = None,
        max_rescale: float | None = None,
        objective: str = OBJECTIVES[0],
        allow_cycling: bool = False,
        min_quota: int = 1,
        trust: CostTrust | bool = True,
        state_dir: str | os.PathLike | None = None,
        context: Context | None = None,
    ) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must lie in (0, 1] (share of the nodes selected per round), got {fraction!r}")
        self.fraction = float(fraction)
        self.selector = selector if selector is not None else OortSelector(seed=seed)
        self._losses: dict[Hashable, float] = {}
        self._candidates = 0
        super().__init__(
            strategy,
            budget=budget,
            budget_per_node=budget_per_node,
            policy="equal",
            weighting=weighting,
            max_rescale=max_rescale,
            objective=objective,
            allow_cycling=allow_cycling,
            min_quota=min_quota,
            scale_batch_size=False,  # a baseline: the user's batch size
            trust=trust,
            state_dir=state_dir,
            context=context,
        )

    # ------------------------------------------------------------------ hooks
    def k_for(self, candidates: int) -> int:
        """How many of ``candidates`` nodes train this round."""
        return max(1, min(candidates, int(math.floor(self.fraction * candidates + 0.5))))

    def participants(self, server_round: int, node_ids: Sequence[Hashable]) -> list[Hashable]:
        """Oort's pick of ``k_for(len(node_ids))`` nodes (independent of the order they come in)."""
        # The inner strategy hands its sample over in random order (Flower's sample_nodes shuffles
        # with the global ``random``), and the selector's draws depend on the order it is given:
        # a canonical order makes the choice a function of the candidates and ``seed`` alone.
        node_ids = sorted(node_ids, key=lambda n: (type(n).__name__, n))
        self._candidates = len(node_ids)
        if not node_ids:
            return []
        return self.selector.select(node_ids, self.k_for(len(node_ids)))

    def screen_train_replies(
        self, server_round: int, replies: list[Message]
    ) -> tuple[list[Message], list[ClientReport], dict[Hashable, str]]:
        """The adaptive screening, plus each reply's data size and each kept reply's training loss.

        The data size is registered from every reply that reports one, usable or not: a node
        whose telemetry was unusable stays unexplored, and Oort explores by data size.
        """
        for msg in replies:
            node = msg.metadata.src_node_id
            if node in self._assigned and not msg.has_error() and len(msg.content.metric_records) == 1:
                size = next(iter(msg.content.metric_records.values())).get(keys.DATA_SIZE)
                if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                    self.selector.register(node, size)
        kept, reports, skipped = super().screen_train_replies(server_round, replies)
        self._losses = {}
        for msg in kept:
            metrics = next(iter(msg.content.metric_records.values()))
            loss = metrics.get(keys.TRAIN_LOSS)
            if isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss) and loss >= 0:
                self._losses[msg.metadata.src_node_id] = float(loss)
        return kept, reports, skipped

    def observe_replies(self, server_round: int, reports: Sequence[ClientReport]) -> list[ClientReport]:
        """Feed the controller (bounds, history), then each replying node's Oort arm."""
        accepted = super().observe_replies(server_round, reports)
        for r in reports:
            if r.node_id in self._probation:
                continue  # a probe (subclasses with probation): its few samples time the overhead only
            loss = self._losses.get(r.node_id)
            if loss is None:
                self._warn_once(
                    "oort-loss",
                    "[adaptive] oort: node %s reports no %r metric; its utility "
                    "is its sample count (report the mean training loss for Oort's utility)",
                    r.node_id,
                    keys.TRAIN_LOSS,
                )
                utility = float(r.samples)
            else:
                utility = statistical_utility(r.samples, loss * loss)
            self.selector.update(r.node_id, utility, self._believed.get(r.node_id, r).time_s)
        return accepted

    # ------------------------------------------------------------------ reporting
    def account(
        self, server_round: int, reports: Sequence[ClientReport], skipped: Mapping[Hashable, str]
    ) -> dict[str, Any]:
        """The round's figures, labelled ``oort``, with candidates and excluded counts."""
        row = super().account(server_round, reports, skipped)
        row["policy"] = OORT
        row["candidates"] = self._candidates
        row["excluded"] = self._candidates - len(self._assigned)
        row["preferred_duration_s"] = self.selector.preferred_duration
        return row

    def selection_counts(self) -> dict[Hashable, int]:
        """``{participant: rounds selected}``, keyed by partition id when known (else node id)."""
        out: dict[Hashable, int] = {}
        for node, count in self.selector.selected_count.items():
            key = self._keys([node])[0]
            out[key] = out.get(key, 0) + count
        return out

    def summary(self) -> None:
        """Log the selection settings, then the adaptive strategy's summary."""
        s = self.selector
        log(
            INFO,
            "\t├──> Oort-like selection: %.0f %% of the nodes per round, penalty alpha=%g, "
            "T at the %g-th duration percentile, exploration %g (x%g per round, floor %g), pacer step %d "
            "delta %g",
            100 * self.fraction,
            s.round_penalty,
            s.round_threshold,
            s.exploration,
            s.exploration_decay,
            s.exploration_min,
            s.pacer_step,
            s.pacer_delta,
        )
        super().summary()
