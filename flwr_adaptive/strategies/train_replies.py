"""The Message API's train replies screened one by one: usable ones with their reports, the rest skipped.

Contract
--------
:func:`screen_replies` is :meth:`AdaptiveStrategy.screen_train_replies
<flwr_adaptive.strategies.adaptive_strategy.AdaptiveStrategy.screen_train_replies>`. Each reply
is attributed to its node (``strategy.sender_of``); a reply from a node not sent a quota this
round, or a node's second reply, is logged and ignored. The rest are skipped with a reason and
one log line, never raised: ``"error"`` (an error reply), ``"invalid"`` (not exactly one
ArrayRecord and one MetricRecord; too large to screen, on sizes before any value is read,
:func:`~flwr_adaptive.strategies.screening.size_reason`; telemetry
:func:`~flwr_adaptive.strategies.reports.parse_report` refuses; arrays unlike the model sent or
not finite, ``strategy._usable_arrays``), ``"no-reply"`` (a node sent a quota that did not
answer: lost, or late past the round timeout, then on probation next round). A node's partition
is learned (``strategy.note_partition``) even when the rest of its reply is unusable, and each
reply's arrival is timed (``SentRound.note_arrival``). Returns the kept replies, their reports
(in the same order) and ``{node: reason}`` of the skipped.

Cost
----
O(replies × metric keys) for the size screen and the telemetry parse, plus the array screen
(``array_screening``); one record split per reply, no record views.
"""

from __future__ import annotations

from collections.abc import Hashable
from logging import WARNING
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, Message, MetricRecord

from flwr_adaptive.strategies.core import log
from flwr_adaptive.strategies.records import split_records
from flwr_adaptive.strategies.reports import ClientReport, parse_report
from flwr_adaptive.strategies.screening import record_sizes, size_reason

if TYPE_CHECKING:
    from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy

__all__ = ["screen_replies"]


def screen_replies(
    strategy: AdaptiveStrategy, server_round: int, replies: list[Message]
) -> tuple[list[Message], list[ClientReport], dict[Hashable, str]]:
    """``(kept replies, their reports, {skipped node: reason})`` of one round (module doc)."""
    skipped: dict[Hashable, str] = {}
    candidates: list[tuple[Message, ClientReport]] = []
    answered: set[Hashable] = set()
    records_of: dict[int, tuple[ArrayRecord, MetricRecord]] = {}  # id(reply) -> its records
    strategy._records_of = records_of
    strategy.sent_round.arrived_s = {}
    for msg in replies:
        node = strategy.sender_of(msg)
        if node not in strategy._assigned:
            log(
                WARNING,
                "[adaptive] round %s: reply from node %s that was not sent a quota this round: skipped",
                server_round,
                node,
            )
            continue
        if node in answered:
            log(
                WARNING,
                "[adaptive] round %s: %s replied more than once; only its first reply counts",
                server_round,
                strategy.who(node),
            )
            continue
        answered.add(node)
        strategy.sent_round.note_arrival(node, msg)
        if msg.has_error():
            skipped[node] = "error"
            log(
                WARNING,
                "[adaptive] round %s: %s failed: %s; skipped",
                server_round,
                strategy.who(node),
                msg.error.reason,
            )
            continue
        array_items, metric_items = split_records(msg.content)  # one pass, no record views
        if len(array_items) != 1 or len(metric_items) != 1:
            skipped[node] = "invalid"
            log(
                WARNING,
                "[adaptive] round %s: %s replied with %d ArrayRecords and %d MetricRecords (expected 1 and 1); skipped",
                server_round,
                strategy.who(node),
                len(array_items),
                len(metric_items),
            )
            continue
        metrics = metric_items[0][1]
        if reason := size_reason(
            metrics,
            record_sizes(array_items[0][1]),
            strategy.sent_model.layout,
            strategy.lists_sized_elsewhere,
        ):
            skipped[node] = "invalid"
            log(WARNING, "[adaptive] round %s: node %s: %s; skipped unread", server_round, node, reason)
            continue
        strategy._records_of[id(msg)] = (array_items[0][1], metrics)
        strategy.note_partition(node, metrics)
        try:
            report = parse_report(node, metrics, strategy.assigned_quota(node))
        except ValueError as err:
            skipped[node] = "invalid"
            log(WARNING, "[adaptive] round %s: %s; skipped", server_round, err)
            continue
        candidates.append((msg, report))
    kept_pairs = strategy._usable_arrays(server_round, candidates, skipped)
    for node in strategy._assigned:
        if node not in answered:
            skipped[node] = "no-reply"
            limit = getattr(strategy, "_round_limit", None)
            log(
                WARNING,
                "[adaptive] round %s: no reply from %s (%s); skipped%s",
                server_round,
                strategy.who(node),
                "timeout or lost"
                if limit is None
                else f"late: past the round timeout of {limit[0]:.1f} s = "
                + (
                    "the ceiling, no prediction yet"
                    if limit[1] is None or strategy.round_timeout is None
                    else f"{strategy.round_timeout.factor:g} x the predicted {limit[1]:.1f} s within "
                    f"[{strategy.round_timeout.floor_s:g}, {strategy.round_timeout.ceiling_s:g}] s"
                ),
                "" if limit is None else ", on probation next round",
            )
    return [m for m, _ in kept_pairs], [r for _, r in kept_pairs], skipped
