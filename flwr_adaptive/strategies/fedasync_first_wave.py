"""FedAsync's first wave on a real deployment: held unmixed until it can be judged as one group.

Contract
--------
In ``"arrival"`` order the update-size screen (:class:`~flwr_adaptive.strategies.update_size.LatestUpdates`)
judges each reply against the other nodes' latest lengths. Before any reply is in there is nothing
to judge against, and judged as they come the first replies would be the reference: liars need not
train, so they reply first (2 liars of 5 were the median of the first 3; every honest node was then
skipped and dropped). :class:`FirstWave` buffers the accepted replies; :meth:`FirstWave.release`
hands them over as one group once

- every live node's first job has replied or failed once (a silent node holds the wave for one
  ``timeout``, its first job's, not for its retries; a node that got no first job, the samples
  having run out, has answered), and
- 3 replies are held, or no job is in flight any more (the retries have replied or failed too).

After that (anything judged), with the screen off (``ratio = inf``) or with fewer than 3 live
nodes, every reply is handed over at the next release. The waiting nodes idle meanwhile: the
strategy counts that as their idle energy.

Cost
----
A set of at most the run's node ids, and the held jobs (references, not copies) until the wave
is released; O(nodes) per release.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence

from flwr_adaptive.strategies.fedasync_jobs import Job
from flwr_adaptive.strategies.update_size import MIN_JUDGED, LatestUpdates

__all__ = ["FirstWave"]


class FirstWave:
    """The accepted replies not yet judged by size, and which nodes' first jobs have answered.

    Parameters
    ----------
    nodes : Sequence[int]
        The nodes the first wave was sent to.
    updates : LatestUpdates
        The strategy's screen; holding ends once it has judged anything.
    """

    def __init__(self, nodes: Sequence[int], updates: LatestUpdates) -> None:
        self.nodes = list(nodes)
        self.updates = updates
        self.held: list[Job] = []
        self.heard: set[int] = set()

    @property
    def screened(self) -> bool:
        """Whether the wave is held at all (a finite ratio and at least 3 nodes)."""
        return len(self.nodes) >= MIN_JUDGED and math.isfinite(self.updates.ratio)

    def answered(self, node: int) -> None:
        """``node``'s job replied, failed, timed out or could not be pushed."""
        self.heard.add(node)

    def hold(self, job: Job) -> None:
        """Buffer an accepted reply until the next :meth:`release`."""
        self.heard.add(job.node)
        self.held.append(job)

    def is_open(self, dropped: Container[int], in_flight: int) -> bool:
        """Whether the held replies must wait (see the module's contract)."""
        if self.updates.latest or not self.screened:
            return False
        live = [n for n in self.nodes if n not in dropped]
        if len(live) < MIN_JUDGED:
            return False
        return any(n not in self.heard for n in live) or (len(self.held) < MIN_JUDGED and in_flight > 0)

    def release(self, dropped: Container[int], in_flight: int) -> list[Job]:
        """The held replies to judge as one group now, or ``[]`` while the wave is open."""
        if self.is_open(dropped, in_flight):
            return []
        released, self.held = self.held, []
        return released
