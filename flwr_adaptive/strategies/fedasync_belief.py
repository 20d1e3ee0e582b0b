"""What FedAsync's server believes of each claimed job duration (the cost-trust rules per job).

Contract
--------
:class:`FedAsyncBelief` turns the claims of the jobs that FedAsync's virtual-clock replay
receives into the durations it times them by, through a :class:`~flwr_adaptive.strategies.trust.CostTrust`
(``None``: every claim as made). A wave (the first one: every node's first reply together;
later: one reply) is judged together with the latest believed per-sample times of the other
nodes, so an absurdly fast claim is taken at their median (one less far below, inside
``absurd_range``, at the plausible range's edge, as a claim just inside it) and a liar cannot
jump the queue and take most of the samples.

The growth cap (``max_drop``) counts per round-equivalent, as the synchronous strategies' counts
per round: its reference is the node's highest belief since the last round-equivalent closed
(:meth:`FedAsyncBelief.close_round`). Were it the node's latest job, a node believed ``k`` times
per round-equivalent could fall ``max_drop**k`` per round-equivalent, and one caught by the
plausibility rule would be back at its lie one job later. A node's first claim is capped against
the median of the judged claims (its reference before it has one): the synchronous strategies'
first round is split equally before any claim, whereas here the first wave's claims time the
first jobs, and a liar inside the plausible range would otherwise run up its lead (the true time
it owes) from the first job on.

Cost
----
One ``CostTrust.believe`` over the wave and the other nodes' latest reports per wave: O(N log N)
for N nodes; two dict entries per node.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["FedAsyncBelief"]


class FedAsyncBelief:
    """The believed durations of FedAsync's jobs (see the module contract).

    Parameters
    ----------
    trust : CostTrust or None
        The rules; ``None`` believes every claim.
    """

    def __init__(self, trust: CostTrust | None) -> None:
        self.trust = trust
        self._latest: dict[Hashable, ClientReport] = {}  # each node's latest believed report
        # The growth cap's reference per node (per-sample seconds): its highest belief since the last
        # round-equivalent closed, reset to its latest belief at each close.
        self._cap_ref: dict[Hashable, float] = {}

    def judge(self, job_number: int, wave: Sequence[ClientReport]) -> dict[Hashable, float]:
        """``{node: the job's duration on the virtual clock as the server believes it}``.

        Parameters
        ----------
        job_number : int
            The highest job number of the wave (the log lines' round).
        wave : sequence of ClientReport
            One accepted report per node of the wave.
        """
        if self.trust is None or not wave:
            return {r.node_id: r.time_s for r in wave}
        mine = {r.node_id for r in wave}
        others = [r for n, r in self._latest.items() if n not in mine]
        reports = [*wave, *others]
        prior = float(np.median([r.time_s / r.samples for r in reports]))
        believed = self.trust.believe(
            job_number,
            reports,
            estimate_of=lambda n: self._cap_ref.get(n, prior) if n in mine else None,
        )
        out: dict[Hashable, float] = {}
        for r in wave:
            node = r.node_id
            b = believed[node]
            self._latest[node] = b
            self._cap_ref[node] = max(self._cap_ref.get(node, prior), b.time_s / b.samples)
            out[node] = b.time_s
        return out

    def close_round(self) -> None:
        """A round-equivalent closed: each node's growth-cap reference is its latest belief."""
        self._cap_ref = {n: r.time_s / r.samples for n, r in self._latest.items()}
