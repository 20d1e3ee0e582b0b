"""Round timeouts from the prediction: a hung node no longer holds a round for the fixed ``timeout``.

Contract
--------
:class:`RoundTimeout` turns the round's predicted makespan into its timeout:
``clip(factor × predicted, floor_s, ceiling_s)``. The prediction is the strategy's: the slowest
assigned node's expected compute for its quota (the controller's cost model,
``AllocationController.predict_seconds``) plus the per-round overhead the server observed in the
last round (message out → reply in, minus the reported compute: start-up, polling, transfer). A
round with a node the controller cannot predict yet (the first round, a newcomer) gets
``ceiling_s``. The fixed ``timeout`` passed to ``Strategy.start`` stays an upper bound.

:class:`TimedGrid` applies it: it wraps the ``Grid`` the strategy's rounds run on and gives each
training ``send_and_receive`` the strategy's ``round_timeout_s()`` (evaluation messages keep
the caller's timeout). It also pulls the replies every ``poll_s`` (0.5 s; Flower's own loop
sleeps 3 s, which rounds every round up to 3-s steps) and stamps each reply's arrival on the
ServerApp's clock (``received_at``): the server-observed round time per node that ``trust`` and
the fixed per-round term use, since Flower's ``delivered_at`` stays on the SuperLink. A node
whose reply misses it is handled like any timeout: the round goes
on without it, it is logged (with the timeout and the prediction) and put on probation for its
next round.

:func:`timed_grid` is the strategy's choice: a ``TimedGrid`` when ``round_timeout`` or
``server_time`` is on (or the caller passed one), else the grid unchanged, Flower's own loop. On a
deployment grid that costs ``trust`` its server evidence (no reply times reach the ServerApp), and
one INFO line says so and how to turn it on; it is not on by default because the evidence rule
takes a node's observed time beyond the group's common overhead as its compute, so an honest
node whose ClientApp start-up is much slower than the others' (more than 7 s) would be priced by
its start-up.

Cost
----
One ``predict_seconds`` over the round's quotas (vectorised) per round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from logging import INFO
from typing import Any

from flwr.app import Message, MessageType
from flwr.serverapp import Grid

from flwr_adaptive._logging import logger

__all__ = ["RoundTimeout", "TimedGrid", "timed_grid"]


@dataclass(frozen=True)
class RoundTimeout:
    """Each round's timeout: ``factor`` × the predicted makespan, within ``[floor_s, ceiling_s]``.

    Parameters
    ----------
    factor : float (default: 3.0)
        Multiple of the predicted makespan a round may last (> 1: a node may be that much slower
        than predicted before it counts as late).
    floor_s : float (default: 30.0)
        Shortest timeout (seconds): covers the start-up and polling a prediction may miss.
    ceiling_s : float (default: 3600.0)
        Longest timeout, and the timeout of a round that cannot be predicted yet.
    """

    factor: float = 3.0
    floor_s: float = 30.0
    ceiling_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("factor", "floor_s", "ceiling_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"RoundTimeout {name}={value!r} must be a finite number")
        if self.factor <= 1.0:
            raise ValueError(f"RoundTimeout factor={self.factor!r} must be > 1 (a multiple of the predicted makespan)")
        if not 0 < self.floor_s <= self.ceiling_s:
            raise ValueError(
                f"RoundTimeout needs 0 < floor_s <= ceiling_s, got floor_s={self.floor_s!r}, "
                f"ceiling_s={self.ceiling_s!r}"
            )

    def seconds(self, predicted_s: float | None) -> float:
        """The timeout for a round predicted to last ``predicted_s`` (``None``: unknown → ceiling)."""
        if predicted_s is None or not math.isfinite(predicted_s) or predicted_s <= 0:
            return float(self.ceiling_s)
        return float(min(max(self.factor * predicted_s, self.floor_s), self.ceiling_s))


class TimedGrid(Grid):
    """A ``Grid`` whose training rounds wait ``strategy.round_timeout_s()`` at most.

    Everything else is delegated to the wrapped grid unchanged.
    """

    def __init__(self, grid: Grid, strategy: Any) -> None:
        self.grid = grid
        self.strategy = strategy

    def set_run(self, run: Any) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        return self.grid.run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self) -> Iterable[Any]:
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    #: Seconds between two pulls of the replies (Flower's own ``send_and_receive`` sleeps 3 s).
    poll_s: float = 0.5

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push, then pull every ``poll_s`` until every reply is in or ``timeout`` passed.

        Each reply's arrival is stamped on this process's clock (``received_at``, by the id of
        the message it answers): Flower's ``delivered_at`` does not reach a ServerApp that runs
        in its own process (Flower 1.42's message proto has no such field). A grid that is not
        one of Flower's own (an in-process test grid) answers through its own
        ``send_and_receive``.
        """
        messages = list(messages)
        if messages and all(m.metadata.message_type == MessageType.TRAIN for m in messages):
            limit = self.strategy.round_timeout_s()
            if limit is not None:
                timeout = limit if timeout is None else min(float(timeout), limit)
        self.received_at: dict[str, float] = {}
        self.strategy._reply_times = self.received_at  # the strategy reads its arrival times here
        if not type(self.grid).__module__.startswith("flwr."):
            return self.grid.send_and_receive(messages, timeout=timeout)
        pending = set(self.grid.push_messages(messages))
        end = math.inf if timeout is None else time.time() + float(timeout)
        replies: list[Message] = []
        while pending:
            got = list(self.grid.pull_messages(pending))
            now = time.time()
            for msg in got:
                self.received_at.setdefault(msg.metadata.reply_to_message_id, now)
            replies.extend(got)
            pending.difference_update(msg.metadata.reply_to_message_id for msg in got)
            if not pending or now >= end:
                break
            time.sleep(min(self.poll_s, max(end - now, 0.0)))
        return replies


def timed_grid(grid: Grid, strategy: Any) -> Grid:
    """``grid`` wrapped in a :class:`TimedGrid` when ``strategy.round_timeout`` or
    ``strategy.server_time`` is on; a ``TimedGrid`` as it is; otherwise ``grid`` unchanged (Flower's
    own ``send_and_receive``), with one INFO line when it is a deployment grid and ``trust`` is on:
    the server then has no reply times and trust's first rule (server evidence) cannot apply."""
    if isinstance(grid, TimedGrid):
        return grid
    if strategy.round_timeout is not None or strategy.server_time:
        return TimedGrid(grid, strategy)
    if strategy.trust is not None and _deployment_grid(grid):
        logger.log(
            INFO,
            "[adaptive] trust: this ServerApp gets no reply times from the SuperLink (Flower keeps delivered_at "
            "there), so a claimed compute time is judged by the other nodes' claims and the growth cap, not by "
            "the server's clock (docs/security.md); to time each reply here, pass grid=TimedGrid(grid, strategy) "
            "(flwr_adaptive.strategies.round_timeout) to start(), or set round_timeout or server_time",
        )
    return grid


def _deployment_grid(grid: Grid) -> bool:
    """Flower's grid to a SuperLink in another process (not the simulation's in-memory grid, whose
    replies carry ``delivered_at``, nor a test's own grid)."""
    module = type(grid).__module__
    return module.startswith("flwr.") and "inmemory" not in module
