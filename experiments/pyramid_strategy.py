"""A PyramidFL-style baseline: fast clients fill the round with extra local work.

Contract
--------
Li et al., "PyramidFL: A Fine-grained Client Selection Framework for Efficient Federated
Learning" (MobiCom 2022) let the clients that would otherwise wait for the round's slowest one
run more local iterations: a client's work **grows with its speed** instead of the server
splitting a fixed budget. :class:`PyramidStrategy` is that rule on this repository's Message-API
strategy (selection is left out: every node trains, as in the other rows it is compared with):

- round 1: the equal split of ``budget`` (nothing is measured yet);
- from round 2: the round's deadline is the time the slowest node takes for its equal share
  ``budget / N`` at its last measured cost per sample; every node ``i`` gets
  ``⌊deadline / τ_i⌋`` samples (``τ_i``: its last measured cost per sample, as the strategy
  believed it), so every node finishes near the deadline and a node ``k×`` faster than the
  slowest processes about ``k×`` the equal share. Rounds last about as long as Equal's; the
  total samples per round exceed ``budget``. Compare it with the others at **equal wall
  (virtual) time**, i.e. by time to a target, not per round.
- a node's extra work is more passes over its own data (``allow_cycling=True``: PyramidFL's
  extra local iterations); no data moves between nodes.
- aggregation: the inner strategy's, weighted by ``weighting`` (``"samples"`` by default:
  FedAvg over the samples each node processed, as PyramidFL aggregates).

Cost
----
One pass over the nodes per round on top of :class:`~flwr_adaptive.strategies.AdaptiveStrategy`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from flwr_adaptive.strategies import AdaptiveStrategy

__all__ = ["PyramidStrategy", "PYRAMID"]

PYRAMID = "pyramid"


class PyramidStrategy(AdaptiveStrategy):
    """Equal split in round 1, then every node fills the slowest node's equal-share time.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy, optional
        The wrapped strategy (default ``FedAvg()``).
    budget : int
        The equal split's total: the slowest node's work per round is ``budget / N``.
    weighting : str (default: "samples")
        As for :class:`~flwr_adaptive.strategies.AdaptiveStrategy`.
    **kwargs
        Other :class:`~flwr_adaptive.strategies.AdaptiveStrategy` options (``smoothing`` …);
        ``policy`` is ``"equal"`` and ``allow_cycling`` is ``True`` by construction.
    """

    def __init__(self, strategy=None, *, budget: int, weighting: str = "samples", **kwargs) -> None:
        # The controller keeps the equal split ("equal" policy); the extra work is decided in quotas_for.
        super().__init__(strategy, budget=budget, policy="equal", weighting=weighting, allow_cycling=True, **kwargs)

    def quotas_for(self, server_round: int, node_ids: Sequence[Hashable]) -> dict[Hashable, int]:
        """The equal split, scaled per node so that each one works until the slowest one's equal share ends."""
        equal = super().quotas_for(server_round, node_ids)
        nodes = list(equal)
        costs = [self._seconds_per_sample.get(k) for k in self._keys(nodes)]
        if not nodes or any(c is None or not (c > 0 and math.isfinite(c)) for c in costs):
            return equal  # someone is not measured yet: no deadline can be set
        deadline = max(equal[n] * c for n, c in zip(nodes, costs))
        return {n: max(equal[n], int(deadline / c)) for n, c in zip(nodes, costs)}
