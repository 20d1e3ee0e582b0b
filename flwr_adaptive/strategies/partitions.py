"""What the server knows about each node id, and the one rule that keys a node in the controller.

Contract
--------
:class:`PartitionMap` is the round coordinator's (:class:`~flwr_adaptive.strategies.core.AdaptiveCore`)
book of node ids, which Flower draws at random and changes when a SuperNode restarts:

- ``partition_of`` (node id → the partition id it first reported this run: ``claim``), ``owner`` (partition id →
  the node keyed by it), ``last_trained`` (node id → last round it was sent a quota),
  ``probation`` (node ids whose last round failed), ``unavailable`` (node ids whose last assigned
  round got no usable answer, or that the grid no longer lists), ``replied`` (node ids with a
  valid reply this run) and ``node_keys`` (the provisional ``"node-<id>"`` controller ids handed
  out).
- ``keys(node_ids)``: a node's controller id is its partition id once known, else
  ``"node-<id>"``; the first node keyed by a partition owns it, a node claiming the partition of an
  owner that is gone takes it over (one info line), a second claimant of a live owner is kept
  apart as ``"node-<id>"`` (one warning naming both). The same answer in every call of a run.
- ``inherit_vacancies``: a node of unknown partition (a restarted SuperNode under a new node id,
  before its first reply) is keyed by the partition that lost its node, so nobody's quota moves.
- ``forget(live)``: drops every per-node entry of node ids that left (Flower never reuses one) and
  releases their partitions; memory stays linear in the live nodes (docs/scale.md).

Cost
----
O(nodes of the call) per ``keys``; ``forget`` scans the per-node maps only when more ids are
tracked than are live.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from logging import INFO
from typing import Any

from flwr_adaptive import keys as wire_keys
from flwr_adaptive._logging import logger

__all__ = ["PartitionMap"]


class PartitionMap:
    """Node id ↔ partition id, ownership, faults and forgetting (see the module docstring).

    Parameters
    ----------
    warn_once : callable
        ``warn_once(tag, msg, *args)``: the coordinator's once-per-run warning (the duplicate
        partition-id line is shown once per node).
    """

    def __init__(self, warn_once: Callable[..., None]) -> None:
        self._warn_once = warn_once
        self.partition_of: dict[Hashable, int] = {}  # node id -> partition id (this run)
        self.owner: dict[int, Hashable] = {}  # partition id -> the node keyed by it (see keys)
        self.last_trained: dict[Hashable, int] = {}  # node id -> last round it was sent a quota
        self.probation: set[Hashable] = set()  # node ids that failed in their last round
        self.unavailable: set[Hashable] = set()  # node ids whose last assigned round got no usable answer
        self.replied: set[Hashable] = set()  # node ids with a valid reply this run
        self.node_keys: set[str] = set()  # "node-<id>" controller ids handed to the controller

    def keys(self, node_ids: Iterable[Hashable]) -> list[Hashable]:
        """Controller ids of these nodes: the one rule, the same answer in every call of a run.

        A node's key is its partition id once known, else ``"node-<id>"``. The first node keyed
        with a partition owns it. A node that claims the partition of an owner that is gone (its
        last assigned round ended in an error or without a reply: a SuperNode restarts with a new
        node id) takes the partition over, with its estimate, quotas and cap (logged once). A
        second node claiming the partition of a live owner is keyed ``"node-<id>"`` (its own
        estimate, quotas and cap) and a warning names both. ``forget`` releases the partitions of
        owners the grid no longer lists.
        """
        out: list[Hashable] = []
        for n in node_ids:
            part = self.partition_of.get(n)
            owner = None if part is None else self.owner.setdefault(part, n)
            if part is not None and owner is not None and owner != n and owner in self.unavailable:
                logger.log(
                    INFO,
                    "[adaptive] node %s takes over partition %s from node %s, which is gone (no usable "
                    "answer in its last round): it continues that partition's estimate",
                    n,
                    part,
                    owner,
                )
                self.owner[part] = owner = n
                self.probation.discard(n)
            if owner is not None and owner != n:
                self._warn_once(
                    f"dup-{part}-{n}",
                    "[adaptive] node %s claims partition id %s, which "
                    "node %s already has: it is kept apart as node-%s; set a distinct "
                    "partition-id in each SuperNode's --node-config",
                    n,
                    part,
                    owner,
                    n,
                )
            out.append(part if owner == n else f"node-{n}")
        return out

    def inherit_vacancies(
        self, server_round: int, node_ids: list[Hashable], ids: list[Hashable], committed: Iterable[Hashable]
    ) -> list[Hashable]:
        """Give a node of unknown partition the slot of a partition whose node is gone.

        A SuperNode restarted with the same ``partition-id`` comes back under a new node id, and
        its partition is known only from its first reply. Until then it is keyed by the
        partition that lost its node (in ``committed``, the controller's split; not keyed by any
        node of this round; its owner gone or released), so everyone else keeps their quota and it
        gets what its partition had: no equal round, no re-split for a restart. Several newcomers
        take the vacant partitions in order (node id ↔ partition id); newcomers beyond them keep
        their provisional ``"node-<id>"`` slot. Its reply then keys it by what it reports
        (``keys``): the same partition is taken over, another one is its own.
        """
        new = [i for i, k in enumerate(ids) if type(k) is str and node_ids[i] not in self.replied]
        if not new:
            return ids
        taken = set(ids)
        vacant = sorted(
            p
            for p in committed
            if type(p) is int and p not in taken and (self.owner.get(p) is None or self.owner[p] in self.unavailable)
        )
        if not vacant:
            return ids
        out = list(ids)
        for i, part in zip(sorted(new, key=lambda i: str(node_ids[i])), vacant):
            out[i] = part
            logger.log(
                INFO,
                "[adaptive] round %s: node %s (partition not known yet) trains with the quota of "
                "partition %s, whose node is gone, until its reply names its partition",
                server_round,
                node_ids[i],
                part,
            )
        return out

    def note_partition(self, node_id: Hashable, metrics: Mapping[str, Any]) -> None:
        """Learn ``node_id``'s partition from a reply even when the rest of it is unusable."""
        value = metrics.get(wire_keys.PARTITION_ID)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
            and value == int(value)
        ):
            self.claim(node_id, int(value))

    def claim(self, node_id: Hashable, partition: int) -> None:
        """``node_id`` says it holds ``partition``: the first claim of a node id stands for the run.

        A SuperNode's ``node_config`` is fixed for its life (a restart brings a new node id), so a
        node id that names another partition later is not believed (one warning): were it, a client
        naming a fresh partition every round would add a controller slot, a cap and an owner entry
        per round, the server's state growing with the rounds instead of the nodes.
        """
        held = self.partition_of.setdefault(node_id, partition)
        if held != partition:
            self._warn_once(
                f"partition-change-{node_id}",
                "[adaptive] node %s claims partition %s but claimed partition %s before: a SuperNode's "
                "partition does not change within a run; it stays keyed by partition %s",
                node_id,
                partition,
                held,
                held,
            )

    def who(self, node_id: Hashable) -> str:
        """How a line about one node names it: ``"partition 3 (node <id>)"`` once its partition is
        known (what the operator configured, first; the node id after it matches Flower's own
        lines, but is random and changes on restart), else ``"node <id>"``."""
        part = self.partition_of.get(node_id)
        return f"node {node_id}" if part is None else f"partition {part} (node {node_id})"

    def note_outcomes(self, skipped: Mapping[Hashable, str], answered: Iterable[Hashable]) -> None:
        """Remember which nodes are gone (error or no reply: e.g. Flower's NODE_UNAVAILABLE) and
        which answered, before the round's replies are observed (see ``keys``)."""
        self.unavailable |= {n for n, why in skipped.items() if why in ("error", "no-reply")}
        self.unavailable -= set(answered)

    def note_connected(self, node_ids: Iterable[Hashable]) -> None:
        """Nodes the grid no longer lists are gone (their partition may be taken over)."""
        connected = set(node_ids)
        self.unavailable |= {n for n in self.owner.values() if n not in connected}

    def forget(self, live_node_ids: Iterable[Hashable]) -> list[Hashable]:
        """Drop every per-node entry of the node ids not in ``live_node_ids``; returns them.

        Flower never reuses a node id (a restarted node gets a new one), so what is kept about a
        departed id is dead weight: its partition mapping, last-trained round, probation and
        availability. The partition it owned is released, so the same partition coming back
        under a new node id is keyed by the partition again (its estimate resumes) instead of
        being kept apart as a second claimant. Scans only when more node ids are tracked than
        are live, so at most as many departed ids as live ones are kept.
        """
        live = live_node_ids if isinstance(live_node_ids, (set, frozenset)) else set(live_node_ids)
        if len(self.last_trained) <= len(live):
            return []
        gone = [n for n in self.last_trained if n not in live]
        for n in gone:
            self.last_trained.pop(n, None)
            self.partition_of.pop(n, None)
            self.replied.discard(n)
            self.probation.discard(n)
            self.unavailable.discard(n)
        gone_set = set(gone)
        for part in [p for p, owner in self.owner.items() if owner in gone_set]:
            del self.owner[part]
        return gone
