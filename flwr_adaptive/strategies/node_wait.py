"""Waiting for nodes without waiting forever: progress lines, then a failed run with the fix.

Contract
--------
Flower's Message-API strategies wait for ``min_available_nodes`` in ``sample_nodes``: a loop that
logs "Waiting for nodes to connect" every second and never gives up, so a ``flwr run`` of an app
that expects more nodes than the federation has (Flower's default local federation starts 2)
hangs. :func:`wait_for_nodes` is the bounded version the adaptive strategies call before the
inner strategy samples:

- it returns the connected node ids as soon as at least ``needed`` are connected (at once when
  they already are: no sleep, no log line);
- while fewer are connected it logs, at the start and then every ``log_every_s`` seconds (at most
  30), how many are connected, how many are needed, how long it gives up after, and the
  ``hint`` (what to pass to get the nodes);
- after ``timeout_s`` seconds it raises :class:`NodeWaitError` whose one-line message says how
  many were connected, how many were needed and the ``hint``. Raised in the ServerApp, it ends the
  run as failed (``flwr list`` shows ``finished:failed``); it is never retried.

:func:`nodes_needed` reads how many nodes an inner strategy waits for (``min_available_nodes``
and ``min_train_nodes`` of Flower's FedAvg family; 0 for a strategy that has neither).

Cost
----
One ``grid.get_node_ids()`` per poll (every ``poll_s`` seconds while waiting; one call when
enough nodes are connected).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from logging import INFO
from typing import Any

from flwr_adaptive._logging import logger

__all__ = [
    "DEFAULT_NODE_WAIT_S",
    "MAX_LOG_INTERVAL_S",
    "NodeWaitError",
    "ClientManagerNodes",
    "nodes_needed",
    "wait_for_nodes",
]

#: Seconds a round waits for its nodes before the run fails (``AdaptiveStrategy.node_wait_s``).
DEFAULT_NODE_WAIT_S = 600.0

#: The longest gap between two progress lines while waiting.
MAX_LOG_INTERVAL_S = 30.0


class NodeWaitError(RuntimeError):
    """Fewer nodes than a round needs connected within the wait: the run fails (message: the fix)."""


class ClientManagerNodes:
    """A legacy ``ClientManager`` seen as :func:`wait_for_nodes` sees a grid: its connected ids."""

    def __init__(self, client_manager: Any) -> None:
        self.client_manager = client_manager

    def get_node_ids(self) -> list[Any]:
        return list(self.client_manager.all())


def nodes_needed(strategy: Any) -> int:
    """Nodes ``strategy`` (a Flower Message-API strategy) waits for before it samples.

    Flower's ``sample_nodes`` waits until ``max(min_available_nodes, sample_size)`` are
    connected, and ``sample_size`` is at least ``min_train_nodes``; the legacy ``FedAvg``'s
    ``configure_fit`` waits for ``max(min_available_clients, min_fit_clients)`` (the
    ClientManager's ``wait_for``, a silent day-long wait). A strategy without these attributes
    waits for none.
    """
    names = ("min_available_nodes", "min_train_nodes", "min_available_clients", "min_fit_clients")
    counts = [getattr(strategy, name, 0) for name in names]
    return max([int(c) for c in counts if isinstance(c, int) and not isinstance(c, bool)] + [0])


def wait_for_nodes(
    grid: Any,
    needed: int,
    *,
    timeout_s: float = DEFAULT_NODE_WAIT_S,
    hint: str = "",
    what: str = "the round",
    log_every_s: float = 10.0,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """The connected node ids, once at least ``needed`` are connected; :class:`NodeWaitError` after ``timeout_s``.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        What ``get_node_ids()`` is called on.
    needed : int
        Nodes to wait for (``<= 0``: none; returns at once).
    timeout_s : float (default: 600)
        Seconds before giving up (``math.inf``: wait for ever, still logging).
    hint : str
        What the operator should pass or do (e.g. ``--federation-config "num-supernodes=11"``);
        in every progress line and in the error.
    what : str
        Who waits, for the messages (``"round 1"``, ``"fedasync"``).
    log_every_s : float (default: 10)
        Seconds between progress lines (capped at :data:`MAX_LOG_INTERVAL_S`).
    poll_s : float (default: 1)
        Seconds between two looks at the grid.
    clock, sleep : callables
        Injected in tests (a fake clock makes the log times and the deadline exact).

    Raises
    ------
    NodeWaitError
        Fewer than ``needed`` nodes connected after ``timeout_s`` seconds.
    """
    nodes = list(grid.get_node_ids())
    if len(nodes) >= needed:
        return nodes
    every = min(float(log_every_s), MAX_LOG_INTERVAL_S)
    fix = f"; {hint}" if hint else ""
    start = clock()
    next_log = start
    while True:
        now = clock()
        if now >= next_log:
            logger.log(
                INFO,
                "[adaptive] %s waits for %d nodes: %d connected after %.0f s (the run fails after %.0f s)%s",
                what,
                needed,
                len(nodes),
                now - start,
                timeout_s,
                fix,
            )
            next_log = now + every
        if now - start >= timeout_s:
            raise NodeWaitError(
                f"{what} needs {needed} connected nodes, {len(nodes)} connected after {now - start:.0f} s "
                f"(node wait {timeout_s:.0f} s){fix}"
            )
        sleep(min(poll_s, max(timeout_s - (now - start), 0.0)) or poll_s)
        nodes = list(grid.get_node_ids())
        if len(nodes) >= needed:
            logger.log(INFO, "[adaptive] %s: %d nodes connected (%d needed)", what, len(nodes), needed)
            return nodes
