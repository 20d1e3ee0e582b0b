"""Evaluation replies screened before the inner strategy averages them, in both Flower APIs.

Contract
--------
The inner strategy's evaluation average divides by the sum of the replies' weights, so one
negative or non-numeric weight could stop the run or flip the metric, and Flower's
``Strategy.start`` does not catch it. Both functions keep a node's first reply only and skip,
with one log line each (never an exception):

- :func:`kept_evaluate_replies` (Message API): an error reply, one without exactly one
  MetricRecord, one too large to screen (``screening.size_reason``), and, when the inner strategy
  weights by a key (``weighted_by_key``: FedAvg and its subclasses), one without it or with a
  weight that is not a finite number in ``[0, MAX_COUNT]``.
- :func:`kept_evaluate_results` (legacy API): a result whose ``num_examples`` is not an int in
  ``[0, MAX_COUNT]`` or whose loss is not a finite number.

Both return ``None`` when the kept replies weigh 0 in total (no aggregate this round, one line).

Cost
----
O(replies × metric keys) for the size screen; nothing is copied.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from logging import WARNING
from typing import cast

from flwr.app import Message
from flwr.common import EvaluateRes
from flwr.server.client_proxy import ClientProxy

from flwr_adaptive._logging import logger
from flwr_adaptive.strategies.screening import check_weight, size_reason

__all__ = ["kept_evaluate_replies", "kept_evaluate_results"]


def kept_evaluate_replies(
    server_round: int, replies: Iterable[Message], weight_key: str | None
) -> list[Message] | None:
    """The usable evaluation replies (``None``: they weigh 0 in total); see the module docstring."""
    kept: list[Message] = []
    seen: set[Hashable] = set()
    for msg in replies:
        node = msg.metadata.src_node_id
        if node in seen:
            logger.log(
                WARNING,
                "[adaptive] round %s: node %s sent more than one evaluation reply; only its first counts",
                server_round,
                node,
            )
            continue
        seen.add(node)
        if msg.has_error() or len(msg.content.metric_records) != 1:
            logger.log(
                WARNING,
                "[adaptive] round %s: evaluation reply of node %s skipped (%s)",
                server_round,
                node,
                msg.error.reason if msg.has_error() else "expected one MetricRecord",
            )
            continue
        if reason := size_reason(next(iter(msg.content.metric_records.values()))):
            logger.log(
                WARNING,
                "[adaptive] round %s: evaluation reply of node %s skipped unread (%s)",
                server_round,
                node,
                reason,
            )
            continue
        if weight_key is not None:
            metrics = next(iter(msg.content.metric_records.values()))
            reason = (
                check_weight(weight_key, metrics[weight_key]) if weight_key in metrics else f"no weight {weight_key!r}"
            )
            if reason is not None:
                logger.log(
                    WARNING,
                    "[adaptive] round %s: evaluation reply of node %s skipped (%s)",
                    server_round,
                    node,
                    reason,
                )
                continue
        kept.append(msg)
    if (
        weight_key is not None
        and kept
        # check_weight above let through numbers only
        and not sum(cast(float, next(iter(m.content.metric_records.values()))[weight_key]) for m in kept)
    ):
        logger.log(
            WARNING,
            "[adaptive] round %s: the evaluation replies weigh %r = 0 in total; no evaluation aggregate this round",
            server_round,
            weight_key,
        )
        return None
    return kept


def kept_evaluate_results(
    server_round: int,
    results: list[tuple[ClientProxy, EvaluateRes]],
    node_id_of: Callable[[ClientProxy], Hashable],
) -> list[tuple[ClientProxy, EvaluateRes]] | None:
    """The usable legacy evaluation results (``None``: they weigh 0 examples in total)."""
    kept, seen = [], set()
    for proxy, res in results:
        node = node_id_of(proxy)
        if node in seen:
            logger.log(
                WARNING,
                "[adaptive] round %s: client %s returned more than one evaluation result; only its first counts",
                server_round,
                node,
            )
            continue
        seen.add(node)
        count = res.num_examples
        reason = (
            check_weight("num_examples", count) if type(count) is int else f"num_examples must be an int, got {count!r}"
        )
        if reason is None and (
            isinstance(res.loss, bool) or not isinstance(res.loss, (int, float)) or not math.isfinite(res.loss)
        ):
            reason = f"loss must be a finite number, got {res.loss!r}"
        if reason is not None:
            logger.log(
                WARNING,
                "[adaptive] round %s: evaluation result of client %s skipped (%s)",
                server_round,
                node,
                reason,
            )
            continue
        kept.append((proxy, res))
    if kept and not sum(res.num_examples for _, res in kept):
        logger.log(
            WARNING,
            "[adaptive] round %s: the evaluation results weigh 0 examples in total; no evaluation aggregate this round",
            server_round,
        )
        return None
    return kept
