"""Telemetry in for HFL-DDP: a round's silo replies turned into per-rank controller observations.

Contract
--------
:func:`observe_silo_round` is :meth:`HierarchicalAdaptiveStrategy.observe_replies
<flwr_adaptive.strategies.hierarchical_adaptive_strategy.HierarchicalAdaptiveStrategy.observe_replies>`:
each rank that trained is observed under its rank id (``silo_reports.rank_id``) in its silo's
group, its claim as the server believes it (:func:`_believed_ranks`: judged against the other ranks
of its silo and its own estimate). A silo's start-up round (``keys.COLD_START`` after a warm reply,
a failed round or none) seeds ranks without an estimate and is replaced by their next warm report;
ranks that already have one keep it. A resumed rank estimate is checked by the rank's first warm
reply (``strategy._check_resumed``). An observation the controller refuses is logged and dropped
(the silo's update is still aggregated); the silo replies observed are returned.

Cost
----
One ``estimates()`` per round, one ``observe`` and one trust judgement per silo's ranks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from logging import INFO, WARNING
from typing import TYPE_CHECKING

from flwr_adaptive.strategies.core import log
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.silo_reports import RankReport, rank_id

if TYPE_CHECKING:
    from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy

__all__ = ["observe_silo_round"]


def observe_silo_round(
    strategy: HierarchicalAdaptiveStrategy, server_round: int, reports: Sequence[ClientReport]
) -> list[ClientReport]:
    """Observe this round's silo replies per rank; returns the replies observed (module doc)."""
    accepted = []
    estimated = strategy.controller.estimates()
    discarded: list[str] = []  # resumed rank estimates this round's replies contradict
    for r in reports:
        if r.partition_id is not None:
            strategy.nodes.claim(r.node_id, r.partition_id)
        silo = strategy._keys([r.node_id])[0]
        ranks = strategy._rank_reports.get(r.node_id, [])
        if not ranks:
            continue  # not screened by screen_train_replies: nothing per rank to learn from
        strategy._ranks_of[silo] = len(ranks)
        # a start-up round: cold after a warm reply, a failed round or none; cold after cold is
        # the silo's normal (it starts its ranks for every message)
        first_cold = r.cold_start and not strategy._cold_before.get(silo, False)
        strategy._cold_before[silo] = r.cold_start
        # estimates from a start-up round are replaced by the next warm round (or start-up round)
        replaced = (
            [rid for rid in (rank_id(silo, k.rank) for k in ranks if k.samples > 0) if rid in strategy._cold_seeded]
            if first_cold or not r.cold_start
            else []
        )
        if replaced:
            strategy.controller.forget(replaced)
            strategy._unverified.difference_update(replaced)  # learned again from this round
        believed = _believed_ranks(strategy, server_round, r, silo, ranks, estimated)
        ok = True
        kept = []  # ranks whose estimate this start-up round leaves as it was
        for rank in ranks:
            rid = rank_id(silo, rank.rank)
            if (strategy.controller.groups or {}).get(rid) != silo:
                strategy.controller.set_group(rid, silo, strategy.silo_budget(silo))
            if rank.samples == 0:
                continue  # an idle rank measured nothing; its estimate carries over
            if first_cold and rid in estimated and rid not in strategy._cold_seeded:
                kept.append(rid)  # a restarted silo: its ranks' start-up would read as slowness
                continue
            if rid in strategy._unverified and not first_cold:
                # A resumed rank estimate is a claim until a warm reply confirms it, as for the flat
                # strategies (a start-up round would read as a contradiction: it is checked at the next).
                discarded += strategy._check_resumed(rid, estimated.get(rid), believed[rid])
            if first_cold:
                strategy._cold_seeded.add(rid)
            else:
                strategy._cold_seeded.discard(rid)
            try:
                strategy.controller.observe(rid, believed[rid].to_report())
            except ValueError as err:
                ok = False
                log(WARNING, "[hfl] round %s: observation of rank %s dropped: %s", server_round, rid, err)
                continue
            if r.idle_w is not None:  # one figure for the silo (screened: finite, >= 0), shared evenly
                strategy.controller.set_idle_power(rid, r.idle_w / len(ranks))
        if kept:
            log(
                INFO,
                "[hfl] round %s: silo %s started its ranks again; the start-up round is not observed for "
                "%s (their estimates are kept)",
                server_round,
                silo,
                ", ".join(kept),
            )
        if ok:
            accepted.append(r)
    if discarded:
        log(
            WARNING,
            "[hfl] round %s: the resumed state is contradicted by this round's replies for %d rank(s) (%s): "
            "their saved estimates are more than %g× off their reported times, so they are learned again "
            "from these replies (a tampered or stale state file)",
            server_round,
            len(discarded),
            "; ".join(discarded[:5]) + ("…" if len(discarded) > 5 else ""),
            strategy.trust.plausible_range if strategy.trust is not None else math.inf,
        )
    return accepted


def _believed_ranks(
    strategy: HierarchicalAdaptiveStrategy,
    server_round: int,
    report: ClientReport,
    silo: Hashable,
    ranks: Sequence[RankReport],
    estimated: Mapping[Hashable, tuple[float, float | None]],
) -> dict[str, ClientReport]:
    """``{rank id: its claim as the server believes it}`` for the ranks that trained (``strategy.trust``).

    Each rank's claim is judged against the *other ranks of its silo* (plausibility, groups)
    and its own estimate (growth cap), as the flat strategies judge nodes: the silo's split
    is among those ranks, so they are the reference, and a faster rank elsewhere says nothing
    about this silo's hardware. A rank's estimate from a start-up round or an unconfirmed
    resumed state caps nothing (it is not history). Fewer than ``min_group + 1`` ranks that
    trained: nothing to compare, the claims stand.
    """
    claims = [
        replace(report, node_id=rank_id(silo, k.rank), time_s=k.time_s, samples=k.samples, energy_j=k.energy_j)
        for k in ranks
        if k.samples > 0
    ]
    if strategy.trust is None:
        return {str(c.node_id): c for c in claims}
    judged_from = strategy.trust.min_group + 1
    if 0 < len(claims) < judged_from and (tag := f"hfl-unjudged-{silo}") not in strategy._warned:
        strategy._warned.add(tag)
        log(
            INFO,
            "[hfl] silo %s: %d rank(s) trained, so their time and energy claims are not judged against each "
            "other (trust compares from %d ranks; only each rank's growth over its own estimate is capped): a "
            "rank that under-reports takes more of its silo's budget and slows the round; run %d or more ranks "
            "per silo to have them judged",
            silo,
            len(claims),
            judged_from,
            judged_from,
        )

    def estimate(rid: Hashable) -> float | None:
        est = estimated.get(rid)
        return None if est is None or rid in strategy._unverified or rid in strategy._cold_seeded else est[0]

    return {str(k): v for k, v in strategy.trust.believe(server_round, claims, None, estimate).items()}
