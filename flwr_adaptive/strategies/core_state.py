"""The round coordinator's state: what it saves after every round, how a restart gets it back, and
what it forgets of nodes that left.

Contract
--------
:func:`state_of` is everything a restarted ServerApp needs, as JSON types keyed by partition id
(``state_store.encode_state``): the policy, budget and rounds done, the controller, the node id →
partition map, the quota caps, the fixed overheads and the population's step / optimizer claims.
:func:`restore` checks a state first (``state_store.parse_state``: nothing changes when it is
refused) and then hands each component its part: the controller and its resumed estimates (marked
unverified: each is checked against its participant's first reply, like a claim), the cautious cap's
costs (a resumed node whose first reply is a cold start keeps its saved share, not a newcomer's), the
partition map, caps, overheads and claims. :func:`forget_departed` drops what is kept about node ids
no longer connected (the node book releases their partitions: the same partition under a new node id
resumes its estimate), so memory and the state file stay linear in the partitions plus the connected
nodes, whatever the node-id churn.

Cost
----
One ``parse_state`` (one ``allocate`` on a copy of the controller) at start-up; per round, one
``encode_state`` and one pass over the departed node ids.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from flwr_adaptive.strategies.state_store import encode_state, parse_state

if TYPE_CHECKING:
    from flwr_adaptive.strategies.core import AdaptiveCore

__all__ = ["state_of", "restore", "forget_departed", "forget_keys"]


def state_of(core: AdaptiveCore) -> dict[str, Any]:
    """``core``'s state as JSON types (:meth:`AdaptiveCore.state_dict`)."""
    return encode_state(
        core.policy,
        core.budget,
        core._rounds_done,
        core.controller,
        core.nodes.partition_of,
        core.bounds.caps,
        core.overheads.state(),
        (core.aggregation.peer_steps, core.aggregation.peer_optimizers),
        core.update_size.latest,
    )


def restore(core: AdaptiveCore, state: Mapping[str, Any]) -> None:
    """Resume ``core`` from :func:`state_of` output, checked first (:meth:`AdaptiveCore.load_state_dict`)."""
    saved = parse_state(state, core.policy, core.make_controller())
    core.controller = saved.controller
    core._rounds_done = saved.rounds
    core._unverified = set(saved.controller.estimates())
    for key, (seconds, _) in saved.controller.estimates().items():
        # priced as the controller prices it: a resumed node whose first reply is held (a cold start)
        # is not capped at a newcomer's cautious share for as long as it has not been observed again
        core.bounds.note_cost(key, seconds)
    core.nodes.partition_of.update(saved.partitions)
    core.bounds.update_caps(saved.caps)
    for key, fixed in core.overheads.load(saved.overheads, core.overhead_window).items():
        core.controller.set_fixed_time(key, fixed)
    steps, optimizers = saved.peer_claims
    core.aggregation.peer_steps.update(steps)
    core.aggregation.peer_optimizers.update(optimizers)
    core.update_size.latest.update(saved.update_lengths)


def forget_departed(core: AdaptiveCore, live_node_ids: Iterable[Hashable]) -> list[Hashable]:
    """Drop what ``core`` keeps about node ids not in ``live_node_ids``; returns them.

    The node book forgets them and releases their partitions (``PartitionMap.forget``); their
    assigned quota, ``"node-<id>"`` controller slot and cap go too, and every departed node's claims
    and update length kept to screen small rounds.
    """
    live = live_node_ids if isinstance(live_node_ids, (set, frozenset)) else set(live_node_ids)
    gone = core.nodes.forget(live)
    for n in gone:
        core._assigned.pop(n, None)
    core.aggregation.retain(live)
    core.update_size.retain(live)
    forget_keys(core, [k for k in (f"node-{n}" for n in gone) if k in core.nodes.node_keys])
    return gone


def forget_keys(core: AdaptiveCore, ids: list[str]) -> None:
    """Forget ``"node-<id>"`` controller ids (slot, bounds, step floor, overheads, fixed time)."""
    if not ids:
        return
    for k in ids:
        core.nodes.node_keys.discard(k)
        core.bounds.forget(k)
        core.step_floor.forget(k)
        core.overheads.forget(k)  # the controller's fixed time goes with forget(config=True)
    core.controller.forget(ids, config=True)
