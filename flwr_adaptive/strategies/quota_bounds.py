"""What bounds a participant's quota before the controller splits the budget.

Contract
--------
:class:`QuotaBounds` is the round coordinator's (:class:`~flwr_adaptive.strategies.core.AdaptiveCore`)
record of each controller id's local data size (``caps``, cycling off) and last observed cost per
sample (``seconds_per_sample``), with the population's recent costs (the last 4,096). From them:

- ``provisional(...)``: a node that never replied is capped at a provisional data size, a low
  quantile of the sizes reported so far (:func:`flwr_adaptive.priors.provisional_caps`), raised
  just enough for the caps to hold the budget, instead of no cap at all (it would take what capped
  nodes leave and lose the samples beyond its data). A node that replied without a size stays
  uncapped.
- ``cautious(...)``: ``k`` nodes never measured, training together, are each capped at the share
  their cautious prior cost earns: the slowest of them is expected near the ``1 − 1/(k+1)``
  quantile of the recent costs (:func:`flwr_adaptive.priors.cautious_cost`, ``τ_q``), so each gets
  ``budget × (1/τ_q) / (Σ_measured 1/τ_i + k/τ_q)``; what it does not take goes to the measured
  nodes. With one newcomer this is the median share (no change); the caps are dropped when they
  could not hold the budget.
- :func:`pick_trainers`: ``budget`` samples give at most ``budget // min_quota`` nodes their
  minimum quota; with more nodes than that, the ones that trained least recently train (ties in
  node-id order), so each node trains, and is measured, every few rounds (one warning says so).
- :func:`all_local_data`: when the budget exceeds the nodes' known local data (cycling off),
  each trains on all of it, with a warning every round it happens.

Cost
----
O(nodes of the round) per call; the sizes array is rebuilt only after a size changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from logging import WARNING

import numpy as np

from flwr_adaptive._logging import logger
from flwr_adaptive.priors import cautious_cost, provisional_caps

__all__ = ["QuotaBounds", "pick_trainers", "all_local_data", "RECENT_COSTS"]

#: Observed costs per sample kept for the population's cautious prior.
RECENT_COSTS = 4096


class QuotaBounds:
    """Data sizes and observed costs per controller id, and the caps drawn from them."""

    def __init__(self) -> None:
        self.caps: dict[Hashable, int] = {}  # controller id -> local data size (cycling off)
        self.seconds_per_sample: dict[Hashable, float] = {}  # controller id -> last observed cost
        self.recent_costs: deque[float] = deque(maxlen=RECENT_COSTS)  # the population's recent costs (priors)
        self._sizes: np.ndarray | None = None  # the values of caps (cached for provisional caps)

    def set_cap(self, key: Hashable, size: int) -> None:
        """``key``'s local data size (its quota bound when cycling is off)."""
        self.caps[key] = size
        self._sizes = None

    def update_caps(self, caps: Mapping[Hashable, int]) -> None:
        """Several data sizes at once (a resumed state)."""
        self.caps.update(caps)
        self._sizes = None

    def note_cost(self, key: Hashable, seconds_per_sample: float) -> None:
        """``key``'s newest observed (believed) cost per sample."""
        self.seconds_per_sample[key] = seconds_per_sample
        self.recent_costs.append(seconds_per_sample)

    def forget(self, key: Hashable) -> None:
        """Drop what is kept about a controller id that will never be used again."""
        self.seconds_per_sample.pop(key, None)
        if self.caps.pop(key, None) is not None:
            self._sizes = None

    def provisional(
        self, node_ids: Sequence[Hashable], caps: list[int | None], replied: set[Hashable], budget: int
    ) -> list[int | None]:
        """``caps`` with the nodes that never replied capped at a provisional data size."""
        fresh = [c is None and n not in replied for n, c in zip(node_ids, caps)]
        if not any(fresh):
            return caps
        if self._sizes is None:
            self._sizes = np.fromiter(self.caps.values(), dtype=np.int64, count=len(self.caps))
        # a replied node of unknown size can take any remainder: count it as holding the budget
        masked = [None if f else (budget if c is None else c) for f, c in zip(fresh, caps)]
        filled = provisional_caps(masked, budget, self._sizes)
        return [filled[i] if f else c for i, (f, c) in enumerate(zip(fresh, caps))]

    def cautious(
        self,
        node_ids: Sequence[Hashable],
        ids: Sequence[Hashable],
        caps: list[int | None],
        probation: Sequence[Hashable],
        budget: int,
        probe: int,
    ) -> list[int | None]:
        """``caps`` with the nodes never measured capped at their cautious prior share (at least ``probe``)."""
        fresh = [
            i for i, (n, k) in enumerate(zip(node_ids, ids)) if k not in self.seconds_per_sample and n not in probation
        ]
        if not fresh or len(fresh) == len(ids) or len(self.recent_costs) < 2:
            return caps
        tau_q = cautious_cost(np.fromiter(self.recent_costs, dtype=float, count=len(self.recent_costs)), len(fresh))
        measured = [self.seconds_per_sample[k] for k in ids if k in self.seconds_per_sample]
        if not (tau_q > 0 and all(t > 0 for t in measured)):
            return caps
        speed = sum(1.0 / t for t in measured) + len(fresh) / tau_q
        cap = max(int(budget / (tau_q * speed)), probe)
        out = list(caps)
        for i in fresh:
            c = out[i]
            out[i] = cap if c is None else min(c, cap)
        full = [c for c in out if c is not None]
        if len(full) == len(out) and sum(full) < budget:
            return caps  # the measured nodes cannot take the rest: keep the median prior
        return out


def pick_trainers(
    node_ids: Sequence[Hashable],
    budget: int,
    floor: int,
    last_trained: Mapping[Hashable, int],
    warn_once: Callable[..., None],
) -> list[Hashable]:
    """The nodes that train: all, or the ``budget // floor`` that trained least recently (one warning).

    Ties in node-id order; the result keeps ``node_ids``' order. The others sit the round out
    (no message, no probation).
    """
    room = budget // floor
    if len(node_ids) <= room:
        return list(node_ids)
    warn_once(
        "too-small",
        "[adaptive] budget %d samples cannot give each of the %d nodes "
        "min_quota %d: %d nodes train per round, the ones that waited longest first, "
        "the others sit the round out; raise the budget to at least %d or lower "
        "min_quota to train every node every round",
        budget,
        len(node_ids),
        floor,
        room,
        len(node_ids) * floor,
    )
    order = sorted(
        range(len(node_ids)),
        key=lambda i: (last_trained.get(node_ids[i], 0), type(node_ids[i]).__name__, node_ids[i]),
    )
    chosen = set(order[:room])
    return [n for i, n in enumerate(node_ids) if i in chosen]


def all_local_data(
    server_round: int, node_ids: Sequence[Hashable], caps: Sequence[int], budget: int
) -> dict[Hashable, int]:
    """The budget exceeds the nodes' local data (cycling off): each trains on all of it (a warning).

    Only reached when every node's data size is known: a node of unknown size is unbounded, so
    the controller can give it what the others leave and the split stays exact. Warns every round
    it happens (under sampling it depends on which nodes were sampled).
    """
    total = sum(caps)
    logger.log(
        WARNING,
        "[adaptive] round %s: budget %d samples exceeds the %d samples of local data of the %d "
        "nodes training this round (allow_cycling=False): every client trains on all its local data, "
        "so no time is balanced; set allow_cycling=True, a budget of at most %d, or budget_per_node "
        "when the strategy samples nodes",
        server_round,
        budget,
        total,
        len(node_ids),
        total,
    )
    return dict(zip(node_ids, caps))
