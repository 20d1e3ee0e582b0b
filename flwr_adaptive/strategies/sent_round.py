"""What the Message-API strategy sent this round: which node a reply answers for, and when it came.

Contract
--------
:class:`SentRound` holds the round's training messages by node and the wall-clock time they were
sent (``start``):

- ``sender_of(reply)``: the node a reply answers for, by ``reply_to`` (the message sent to it),
  else its source. Flower answers a message whose node went offline with an error reply from the
  SuperLink (source node id 1) whose ``reply_to`` is our message: it is attributed to that node.
  The grid stamps message ids when it pushes the messages, so the id map is built once per round,
  after the push, not per reply.
- ``note_arrival(node, reply)``: the seconds from sending ``node`` its instruction to the ServerApp
  receiving its reply: server-side evidence the client does not control, which bounds the node's
  compute from above (``trust``) and times its overhead (``server_time``). Read from the reply's
  ``delivered_at`` (stamped by the SuperLink when the ServerApp pulls it: late by up to one pull
  interval), else from the :class:`~flwr_adaptive.strategies.round_timeout.TimedGrid`'s own clock
  (``reply_times``, by the id of the message answered: a ServerApp in its own process gets no
  ``delivered_at``). ``observed(node_ids)`` returns them.

Cost
----
One dictionary per round; O(1) per reply.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any

from flwr.app import Message

__all__ = ["SentRound"]


class SentRound:
    """The round's sent messages, their send time, and the replies' arrival (see the module docstring)."""

    def __init__(self) -> None:
        self.sent: dict[Hashable, Message] = {}  # node id -> the message sent to it this round
        self.sent_at: float | None = None  # wall-clock time the round's messages were sent
        self.reply_times: dict[str, float] = {}  # message id answered -> time its reply was pulled
        self.arrived_s: dict[Hashable, float] = {}  # node id -> seconds from sending to its reply
        self._by_id: tuple[Any, dict[str, Hashable]] | None = None

    def start(self, sent: Mapping[Hashable, Message], now: float) -> None:
        """The round's messages by node, sent at ``now`` (seconds since the epoch)."""
        self.sent = dict(sent)
        self.sent_at = now

    def sender_of(self, msg: Message) -> Hashable:
        """The node a reply answers for: by ``reply_to`` (the message we sent it), else its source."""
        sent = self.sent
        cache = self._by_id
        if (
            cache is None
            or cache[0] is not sent
            or (not cache[1] and sent and next(iter(sent.values())).metadata.message_id)
        ):
            # one map per round (ids are stamped when the grid pushes the messages), not per reply
            cache = self._by_id = (
                sent,
                {m.metadata.message_id: n for n, m in sent.items() if m.metadata.message_id},
            )
        node = cache[1].get(msg.metadata.reply_to_message_id)
        return msg.metadata.src_node_id if node is None else node

    def note_arrival(self, node: Hashable, msg: Message) -> None:
        """Record the seconds from sending ``node`` its instruction to receiving ``msg``."""
        sent_at = self.sent_at
        stamp = getattr(msg.metadata, "delivered_at", "")
        if sent_at is None:
            return
        if not stamp:  # a ServerApp in its own process: the TimedGrid's own clock (see round_timeout)
            pulled = self.reply_times.get(msg.metadata.reply_to_message_id)
            if pulled is not None:
                self.arrived_s[node] = pulled - sent_at
            return
        try:
            arrived = datetime.fromisoformat(stamp).timestamp()
        except (TypeError, ValueError):
            return
        self.arrived_s[node] = arrived - sent_at

    def observed(self, node_ids: Iterable[Hashable]) -> dict[Hashable, float]:
        """Per node, the seconds the server observed between its instruction and its reply."""
        arrived = self.arrived_s
        return {n: arrived[n] for n in node_ids if n in arrived}
