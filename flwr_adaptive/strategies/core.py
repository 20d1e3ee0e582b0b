"""The API-free half of the adaptive strategy: quotas out, telemetry in, history and state kept.

Contract
--------
:class:`AdaptiveCore` holds what both Flower strategy APIs share (``flwr_adaptive.strategies.adaptive_strategy`` and
``flwr_adaptive.strategies.legacy_adaptive_strategy`` mix it into Flower's ``Strategy`` classes):

- ``quotas_for(round, nodes)`` returns ``{node_id: samples}`` summing to ``budget`` exactly. The
  first time it sees a set of nodes whose partitions it does not know yet (round 1 of every
  ServerApp run) it returns the equal split keyed by node id; from then on the controller's split
  keyed by **partition id**, which clients report and which, unlike node ids, survives a restart.
  A node absent from the split gets no message that round: when ``budget`` cannot give every node
  ``min_quota``, only ``budget // min_quota`` nodes train, those that waited longest first (one
  warning says so); when it exceeds the nodes' local data (cycling off) each trains on all of it.
- ``observe_replies(round, reports)`` learns each node's partition id, sets ``max_quota`` to the
  local data size when cycling is off, and feeds one :class:`~flwr_adaptive.controller.Report` per
  client to the controller, with the client's idle watts when it reports them (the min-energy
  policy prices waiting with them). An observation the controller rejects is logged and dropped.
- Unknown data sizes (cycling off): a node that never replied is capped at a provisional size
  (``flwr_adaptive.priors.provisional_caps``: a low quantile of the sizes reported so far, raised
  so that the caps hold the budget). Samples that still go unprocessed are never lost silently:
  the history row counts them (``short_capped``: above a capped node's data, ``short_skipped``:
  quotas of skipped nodes, ``short_unassigned``: budget nobody was given) and the round's log line
  says so (a warning when nodes were capped).
- Bounded state: a node's ``"node-<id>"`` controller slot is forgotten once it is keyed by its
  partition id, and ``forget_departed(live node ids)`` (called before every round) drops what
  is kept about node ids that left; client history rows beyond a limit are spilled to a
  temporary CSV (``history.ClientRows``). Memory and the state file stay linear in the
  partitions plus the connected nodes, whatever the node-id churn (docs/scale.md).
- ``weights(round, reports)`` gives each kept reply its aggregation weight and
  ``update_scales(round, reports, weights)`` the factor of its model change under normalised
  aggregation (``flwr_adaptive.strategies.normalization``; "Aggregation weights" in
  docs/integration.md).
- ``participants(round, nodes)`` chooses who trains among the nodes the inner strategy sampled
  (all of them here; selection baselines override it).
- Faults: a node whose reply was skipped (error, timeout, invalid telemetry) is on probation for
  its next round (unless the class sets ``uses_probation = False``): it gets ``probe_quota()``
  (the minimum quota) and its share is re-split among the others; its next good reply ends the
  probation (that probe is not observed: a few samples measure overhead, not cost per sample).
- After each round: one log line (makespan, energy, CV of busy time, min/median/max quota and,
  with at most ``quota_line_max_nodes`` nodes, every quota by partition; lines about one node
  name its partition once known, ``who()``), one history row (appended to ``history_path``
  when set), one row per client, and the controller state saved to ``state_dir`` (JSON) and/or
  the ServerApp ``context.state`` so that a restarted ServerApp resumes it. A state write that
  fails (disk full) is one error line and is tried again next round: the run goes on. A
  resumed state is untrusted like a claim: each participant's saved estimate is checked against
  its first observed reply (``_check_resumed``) and dropped when ``plausible_range`` off.

Cost
----
Per round: one ``allocate`` and one ``observe`` per client (see the controller: under 1 ms at
1,000 clients), a few numpy reductions, and one small JSON write when ``state_dir`` is set.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np

from flwr_adaptive import keys
from flwr_adaptive._logging import logger
from flwr_adaptive.accounting import account_round
from flwr_adaptive.controller import POLICIES, AllocationController, Report
from flwr_adaptive.priors import cautious_cost, provisional_caps
from flwr_adaptive.strategies.history import ClientRows, HistoryMixin
from flwr_adaptive.strategies.normalization import WEIGHTINGS, NormalizedAggregation, default_weighting
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.state_file import StateFileError, check_state_dir, read_state, set_aside, write_or_log
from flwr_adaptive.strategies.trust import CostTrust, resolve_trust

__all__ = ["AdaptiveCore", "WEIGHTINGS", "STATE_FILE", "CONTEXT_STATE_KEY", "log"]

STATE_FILE = "adaptive-state.json"
CONTEXT_STATE_KEY = "flwr-adaptive"
_STATE_VERSION = 1


def log(level: int, msg: str, *args: Any) -> None:
    """Log on Flower's logger (see :mod:`flwr_adaptive._logging`), as ``flwr.common.logger.log`` does."""
    logger.log(level, msg, *args)


class AdaptiveCore(HistoryMixin, NormalizedAggregation):
    """Quota allocation, telemetry bookkeeping and state shared by both strategy APIs.

    Parameters
    ----------
    budget : int or None
        Samples per round, split among the clients that train that round (sums to it exactly).
        With a strategy that samples nodes (``fraction_train < 1``) those are the sampled ones.
    budget_per_node : int, optional
        Instead of ``budget``: samples per training node; each round's budget is this times the
        number of nodes sampled, so the load per node stays the same whatever the sampling.
    policy : str (default: "time")
        One of ``flwr_adaptive.controller.POLICIES``: ``"equal"`` (no adaptation), ``"time"``,
        ``"low-energy"``, ``"energy"``, ``"min-energy"``. Energy policies need clients that
        measure energy; ``"min-energy"`` also counts the idle watts the clients report.
    smoothing : float (default: 0.5)
        EMA weight of the newest per-sample cost.
    deadband : float, optional
        Hold the current split while re-splitting gains less than this (see
        ``AllocationController``); 0 re-splits every round. ``None``: the policy's default (2 %
        predicted gain for the named policies, a 5 % move of the budget with ``paper=True``).
    slack : float, optional
        ``policy="min-energy"`` only: rounds may last up to ``1 + slack`` times the shortest
        possible (``math.inf``: no limit). ``None``: the policy's default (0.1).
    paper : bool (default: False)
        The paper's estimation and deadband (per-sample costs, no drift detection, the
        total-variation deadband) instead of the named policy's (see
        ``AllocationController.from_policy``).
    weighting : str, optional
        Aggregation of the updates (``flwr_adaptive.strategies.normalization``): ``"normalized"``
        (FedNova: data weights, updates rescaled by their local work, so the federated objective
        does not move when quotas move between owners of non-IID data), ``"samples"`` processed
        this round (FedAvg; right when any client may take any sample) or ``"data-size"`` (the
        claimed local data size, no rescaling). Default (``None``): ``"normalized"`` when
        ``allow_cycling=False`` (private data), ``"samples"`` when ``allow_cycling=True``.
    allow_cycling : bool (default: False)
        Let a client whose quota exceeds its local data cycle through it again. When False the
        strategy caps each client's quota at the data size it reports.
    min_quota : int (default: 1)
        Smallest quota any client gets.
    forget_after, cost_clip : see ``AllocationController``.
    trust : CostTrust or bool (default: True)
        Which claimed costs the server believes: ``True`` the default rules, a ``CostTrust(...)``
        to tune them, ``False`` every claim (see ``AdaptiveStrategy``).
    state_dir : str or Path, optional
        Folder where the controller state is saved after every round (``adaptive-state.json``)
        and from which a restarted ServerApp resumes it.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state`` and resumed from it.
    """

    #: Whether a node whose reply was skipped is put on probation (``probe_quota()`` samples, its
    #: share re-split among the others) for its next round. Strategies whose shares cannot move
    #: between nodes (silos) or that split equally (selection baselines) turn it off: a failed
    #: node then simply gets its usual share next time.
    uses_probation: bool = True

    def __init__(
        self,
        budget: int | None,
        policy: str = "time",
        *,
        budget_per_node: int | None = None,
        smoothing: float = 0.5,
        deadband: float | None = None,
        slack: float | None = None,
        paper: bool = False,
        weighting: str | None = None,
        allow_cycling: bool = False,
        min_quota: int = 1,
        forget_after: int = 3,
        cost_clip: float = 100.0,
        trust: CostTrust | bool = True,
        state_dir: str | os.PathLike | None = None,
        context: Any = None,
    ) -> None:
        if (budget is None) == (budget_per_node is None):
            raise ValueError(
                "pass either budget= (samples per round, split among the nodes training that "
                "round) or budget_per_node= (samples per training node: the round's budget "
                f"scales with the nodes sampled), not {'both' if budget is not None else 'neither'}"
            )
        if budget_per_node is not None:
            if (
                isinstance(budget_per_node, bool)
                or not isinstance(budget_per_node, (int, np.integer))
                or budget_per_node < 1
            ):
                raise ValueError(
                    f"budget_per_node must be a positive int (samples per training node and round), "
                    f"got {budget_per_node!r}"
                )
            budget = int(budget_per_node)  # until the first round says how many nodes train
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
            raise ValueError(f"budget must be a positive int (samples per round), got {budget!r}")
        self.budget_per_node = None if budget_per_node is None else int(budget_per_node)
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        if weighting is not None and weighting not in WEIGHTINGS:
            raise ValueError(f"unknown weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
        if slack is not None and POLICIES[policy].objective != "min-energy":
            minimal = [p for p, v in POLICIES.items() if v.objective == "min-energy"]
            raise ValueError(
                f"slack={slack!r} applies to policy {' or '.join(map(repr, minimal))} only, not "
                f"{policy!r}: drop slack or choose that policy"
            )
        if not isinstance(paper, bool):
            raise ValueError(f"paper must be True or False, got {paper!r}")
        if not isinstance(allow_cycling, (bool, np.bool_)):  # "no" would read as True
            raise ValueError(f"allow_cycling must be True or False, got {allow_cycling!r}")
        if isinstance(min_quota, (int, np.integer)) and not isinstance(min_quota, bool) and min_quota > budget:
            raise ValueError(
                f"min_quota={min_quota} exceeds the {'budget_per_node' if budget_per_node else 'budget'} "
                f"of {budget} samples: no node could train; lower min_quota or raise the budget"
            )
        self.budget = int(budget)
        self.policy = policy
        self.paper = paper
        self.allow_cycling = bool(allow_cycling)
        self.weighting = default_weighting(weighting, self.allow_cycling)
        self.last_scales: dict[Hashable, float] = {}
        self.last_weights: dict[Hashable, int] = {}
        self.min_quota = min_quota
        # deadband / slack left out when None: the policy's own default applies.
        self._controller_kwargs = dict(
            smoothing=smoothing, min_quota=min_quota, forget_after=forget_after, cost_clip=cost_clip
        )
        self._controller_kwargs.update({k: v for k, v in (("deadband", deadband), ("slack", slack)) if v is not None})
        self.controller = self.make_controller()
        if state_dir is not None and not isinstance(state_dir, (str, os.PathLike)):
            raise ValueError(
                f"state_dir must be a folder path (str or pathlib.Path), got {type(state_dir).__name__} "
                f"{state_dir!r}; pass e.g. state_dir='adaptive-state', or None to keep no state file"
            )
        if context is not None and not hasattr(context, "state"):
            raise ValueError(
                f"context must be the ServerApp's flwr.app.Context (the one @app.main() receives), got "
                f"{type(context).__name__} {context!r}: pass context=context, or None"
            )
        self.state_path = None if not state_dir else check_state_dir(state_dir) / STATE_FILE
        self.context = context
        self._partition_of: dict[Hashable, int] = {}  # node id -> partition id (this run)
        self._owner: dict[int, Hashable] = {}  # partition id -> the node keyed by it (see _keys)
        self._assigned: dict[Hashable, int] = {}  # this round's quotas by node id
        self._caps: dict[Hashable, int] = {}  # controller id -> local data size (cycling off)
        self._probation: set[Hashable] = set()  # node ids that failed in their last round
        self._unavailable: set[Hashable] = set()  # node ids whose last assigned round got no usable answer
        self._last_trained: dict[Hashable, int] = {}  # node id -> last round it was sent a quota
        self._replied: set[Hashable] = set()  # node ids with a valid reply this run
        self._sizes: np.ndarray | None = None  # the values of _caps (cached for provisional caps)
        self._node_keys: set[str] = set()  # "node-<id>" controller ids handed to the controller
        self._seconds_per_sample: dict[Hashable, float] = {}  # controller id -> last observed cost
        self._recent_costs: deque[float] = deque(maxlen=4096)  # the population's recent costs (priors)
        self._round_rows: list[dict[str, Any]] = []
        self._client_rows = ClientRows()  # bounded in memory, older rows spilled to a temporary CSV
        self._rounds_done = 0  # rounds observed, across resumptions
        self._warned: set[str] = set()
        #: What the server believes of each claim (see ``flwr_adaptive.strategies.trust``).
        self.trust: CostTrust | None = resolve_trust(trust)
        self._believed: dict[Hashable, ClientReport] = {}  # this round's reports as believed
        self._held: dict[Hashable, str] = {}  # this round: node id -> why its report was not observed
        self._outliers_held: set[Hashable] = set()  # controller ids whose first report was held once
        self._cold_seen: set[Hashable] = set()  # controller ids that sent a cold-start report
        #: Controller ids whose estimate came from a resumed state and no reply has checked yet:
        #: a state file is untrusted input too (see ``_check_resumed``).
        self._unverified: set[Hashable] = set()
        self._overheads: dict[Hashable, deque[float]] = {}  # controller id -> recent observed overheads
        self._resume()

    # ------------------------------------------------------------------ overridable hooks
    def make_controller(self) -> AllocationController:
        """The controller for ``self.policy`` (baselines override this or the hooks below)."""
        return AllocationController.from_policy(self.policy, self.budget, paper=self.paper, **self._controller_kwargs)

    def participants(self, server_round: int, node_ids: Sequence[Hashable]) -> list[Hashable]:
        """Who trains this round among the nodes the inner strategy sampled: all of them."""
        return list(node_ids)

    def quotas_for(self, server_round: int, node_ids: Sequence[Hashable]) -> dict[Hashable, int]:
        """``{node_id: quota}`` summing to ``budget``; nodes left out of it get no train message.

        The equal split while no partition is known (round 1), the controller's split after. A
        node that failed last round is on probation: it gets ``probe_quota()`` samples and its
        share is re-split among the others; one good reply lifts the probation. When the budget
        cannot give every node ``min_quota`` (see ``trainers``) only some nodes train; when it
        exceeds all their local data (cycling off) every node trains on all of it.
        """
        if self.budget_per_node is not None:
            self.set_round_budget(self.budget_per_node * len(node_ids))
        node_ids = self.trainers(server_round, list(node_ids))
        self._round_keys: dict[Hashable, Hashable] = {}
        if not node_ids:
            return {}
        probe = self.probe_quota()
        probation = [n for n in node_ids if n in self._probation]
        if len(probation) == len(node_ids):
            probation = []  # nobody healthy to take the share: everyone tries again, observed
            self._probation -= set(node_ids)
        known = any(n in self._partition_of for n in node_ids)
        ids = self._inherit_vacancies(server_round, node_ids, self._keys(node_ids)) if known else node_ids
        caps = [probe if n in probation else (self._caps.get(k) if known else None) for n, k in zip(node_ids, ids)]
        full = [c for c in caps if c is not None]
        if len(full) == len(caps) and self.budget > sum(full):
            split = self._all_local_data(node_ids, full, server_round)
        elif not known:
            equal = AllocationController(
                self.budget,
                w_time=0.0,
                w_energy=0.0,
                deadband=0.0,
                min_quota=self.min_quota,
                max_quota={n: probe for n in probation},
            )
            split = equal.allocate(node_ids)
        else:
            if not self.allow_cycling:
                caps = self._with_provisional_caps(node_ids, caps)
            if self.policy != "equal":
                caps = self.prior_caps(node_ids, ids, caps, probation)
            self._node_keys.update(k for k in ids if type(k) is str)
            for k, c in zip(ids, caps):
                self.controller.set_max_quota(k, c)
            by_key = self.controller.allocate(ids)
            split = {n: by_key[k] for n, k in zip(node_ids, ids)}
            self._round_keys = dict(zip(node_ids, ids))  # for the round's predicted makespan
        quotas = {n: q for n, q in split.items() if q > 0}  # a zero quota trains nothing: no message
        for n in quotas:
            self._last_trained[n] = server_round
        return quotas

    def _inherit_vacancies(self, server_round: int, node_ids: list[Hashable], ids: list[Hashable]) -> list[Hashable]:
        """Give a node of unknown partition the slot of a partition whose node is gone.

        A SuperNode restarted with the same ``partition-id`` comes back under a new node id, and
        its partition is known only from its first reply. Until then it is keyed by the
        partition that lost its node (committed in the controller's split, not keyed by any node
        of this round, its owner gone or released), so everyone else keeps their quota and it
        gets what its partition had: no equal round, no re-split for a restart. Several newcomers
        take the vacant partitions in order (node id ↔ partition id); newcomers beyond them keep
        their provisional ``"node-<id>"`` slot. Its reply then keys it by what it reports
        (``_keys``): the same partition is taken over, another one is its own.
        """
        new = [i for i, k in enumerate(ids) if type(k) is str and node_ids[i] not in self._replied]
        if not new:
            return ids
        taken = set(ids)
        vacant = sorted(
            p
            for p in self.controller.current
            if type(p) is int and p not in taken and (self._owner.get(p) is None or self._owner[p] in self._unavailable)
        )
        if not vacant:
            return ids
        out = list(ids)
        for i, part in zip(sorted(new, key=lambda i: str(node_ids[i])), vacant):
            out[i] = part
            log(
                INFO,
                "[adaptive] round %s: node %s (partition not known yet) trains with the quota of "
                "partition %s, whose node is gone, until its reply names its partition",
                server_round,
                node_ids[i],
                part,
            )
        return out

    def _with_provisional_caps(self, node_ids: list[Hashable], caps: list[int | None]) -> list[int | None]:
        """Cap the nodes that never replied at a provisional data size (cycling off).

        A node's data size is learned from its first reply; before it, the node gets a low
        quantile of the sizes reported so far (``flwr_adaptive.priors.provisional_caps``), raised
        just enough for the caps to hold the budget, instead of no cap at all (it would take
        what capped nodes leave and lose the samples beyond its data). A node that replied
        without a size stays uncapped.
        """
        fresh = [c is None and n not in self._replied for n, c in zip(node_ids, caps)]
        if not any(fresh):
            return caps
        if self._sizes is None:
            self._sizes = np.fromiter(self._caps.values(), dtype=np.int64, count=len(self._caps))
        # a replied node of unknown size can take any remainder: count it as holding the budget
        masked = [None if f else (self.budget if c is None else c) for f, c in zip(fresh, caps)]
        filled = provisional_caps(masked, self.budget, self._sizes)
        return [filled[i] if f else c for i, (f, c) in enumerate(zip(fresh, caps))]

    def set_round_budget(self, budget: int) -> None:
        """This round's budget (``budget_per_node`` × the nodes sampled): the split sums to it."""
        self.budget = int(budget)
        self.controller.budget = self.budget  # a new budget is always re-split (no deadband)

    def prior_caps(
        self, node_ids: list[Hashable], ids: list[Hashable], caps: list[int | None], probation: Sequence[Hashable]
    ) -> list[int | None]:
        """Cap the nodes never measured at the share their cautious prior cost earns.

        The controller prices a participant without an estimate at the median cost. When ``k``
        such nodes train together the slowest of them is expected near the ``1 − 1/(k+1)``
        quantile of the population's costs (``flwr_adaptive.priors.cautious_cost``, over the
        last 4,096 observed costs per sample) and would set the round's makespan. Each is capped
        at ``budget × (1/τ_q) / (Σ_measured 1/τ_i + k/τ_q)``: the samples it finishes, at that
        quantile, when the measured nodes finish theirs; what it does not take goes to the
        measured nodes. With one newcomer this is the median share (no change); the caps are
        dropped when they could not hold the budget. Override to return ``caps`` unchanged for
        the controller's median prior.
        """
        fresh = [
            i for i, (n, k) in enumerate(zip(node_ids, ids)) if k not in self._seconds_per_sample and n not in probation
        ]
        if not fresh or len(fresh) == len(ids) or len(self._recent_costs) < 2:
            return caps
        tau_q = cautious_cost(np.fromiter(self._recent_costs, dtype=float, count=len(self._recent_costs)), len(fresh))
        measured = [self._seconds_per_sample[k] for k in ids if k in self._seconds_per_sample]
        if not (tau_q > 0 and all(t > 0 for t in measured)):
            return caps
        speed = sum(1.0 / t for t in measured) + len(fresh) / tau_q
        cap = max(int(self.budget / (tau_q * speed)), self.probe_quota())
        out = list(caps)
        for i in fresh:
            c = out[i]
            out[i] = cap if c is None else min(c, cap)
        full = [c for c in out if c is not None]
        if len(full) == len(out) and sum(full) < self.budget:
            return caps  # the measured nodes cannot take the rest: keep the median prior
        return out

    def trainers(self, server_round: int, node_ids: Sequence[Hashable]) -> list[Hashable]:
        """The nodes that train this round: all of them, unless the budget is too small.

        ``budget`` samples give at most ``budget // max(min_quota, 1)`` nodes their minimum
        quota. With more nodes than that, the ones that trained least recently are picked (ties
        in node-id order), so each node trains, and is measured, every few rounds; the others
        sit the round out (no message, no probation).
        """
        floor = max(self._min_of(), 1)
        room = self.budget // floor
        if len(node_ids) <= room:
            return list(node_ids)
        self._warn_once(
            "too-small",
            "[adaptive] budget %d samples cannot give each of the %d nodes "
            "min_quota %d: %d nodes train per round, the ones that waited longest first, "
            "the others sit the round out; raise the budget to at least %d or lower "
            "min_quota to train every node every round",
            self.budget,
            len(node_ids),
            floor,
            room,
            len(node_ids) * floor,
        )
        order = sorted(
            range(len(node_ids)),
            key=lambda i: (self._last_trained.get(node_ids[i], 0), type(node_ids[i]).__name__, node_ids[i]),
        )
        chosen = set(order[:room])
        return [n for i, n in enumerate(node_ids) if i in chosen]

    def note_partition(self, node_id: Hashable, metrics: Mapping[str, Any]) -> None:
        """Learn ``node_id``'s partition from a reply even when the rest of it is unusable."""
        value = metrics.get(keys.PARTITION_ID)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
            and value == int(value)
        ):
            self._partition_of[node_id] = int(value)

    def who(self, node_id: Hashable) -> str:
        """How a line about one node names it: ``"partition 3 (node <id>)"`` once its partition is
        known (what the operator configured, first; the node id after it matches Flower's own
        lines, but is random and changes on restart), else ``"node <id>"``."""
        part = self._partition_of.get(node_id)
        return f"node {node_id}" if part is None else f"partition {part} (node {node_id})"

    def partition_of(self, node_id: Hashable) -> int | None:
        """The partition id ``node_id`` reported this run (``None``: not known yet)."""
        return self._partition_of.get(node_id)

    def probe_quota(self) -> int:
        """Samples given to a node on probation (it failed last round): the smallest quota."""
        return max(self._min_of(), 1)

    def observe_replies(self, server_round: int, reports: Sequence[ClientReport]) -> list[ClientReport]:
        """Feed the controller; returns the reports it accepted.

        Probes (replies of nodes on probation) are not observed; an observation the controller
        refuses is logged and dropped (the update itself is still aggregated). Reports that would
        mislead the controller are held back (aggregated, not observed; see ``held_reason``).
        """
        accepted = []
        self._believed = self.believed_reports(server_round, reports)
        stale = []  # "node-<id>" keys of nodes now keyed by their partition: never used again
        self._held = {}
        warm = any(not r.cold_start for r in reports)
        per_sample = [r.time_s / r.samples for r in reports if not r.over_quota]
        median = float(np.median(per_sample)) if len(per_sample) >= 3 else None
        estimated = self.controller.estimates() if median is not None or self._unverified else {}
        discarded: list[str] = []  # resumed estimates this round's replies contradict
        observed = self.observed_seconds(reports) if self.server_time else {}
        for r in reports:
            self._replied.add(r.node_id)
            if r.partition_id is not None:
                self._partition_of[r.node_id] = r.partition_id
                if f"node-{r.node_id}" in self._node_keys and self._keys([r.node_id])[0] == r.partition_id:
                    stale.append(f"node-{r.node_id}")
            if r.node_id in self._probation:
                continue  # a probe of min_quota samples says "alive", not what a sample costs
            key = self._keys([r.node_id])[0]
            if not self.allow_cycling and r.data_size is not None:
                try:
                    self.controller.set_max_quota(key, max(r.data_size, self._min_of()))
                    self._caps[key] = max(r.data_size, self._min_of())
                    self._sizes = None
                except (ValueError, OverflowError) as err:
                    log(
                        WARNING,
                        "[adaptive] round %s: data size %r of node %s not used as its quota cap: %s",
                        server_round,
                        r.data_size,
                        r.node_id,
                        err,
                    )
            reason = self.held_reason(r, key, warm=warm, median=median, estimated=key in estimated)
            if reason is not None:
                self._held[r.node_id] = reason
                continue
            if key in self._unverified:
                discarded += self._check_resumed(key, estimated.get(key), self._believed.get(r.node_id, r))
            try:
                self.controller.observe(key, self.server_report(key, self._believed.get(r.node_id, r), observed))
            except ValueError as err:
                log(WARNING, "[adaptive] round %s: observation of node %s dropped: %s", server_round, r.node_id, err)
                continue
            if r.idle_w is not None:  # parse_report screened it: finite, >= 0
                self.controller.set_idle_power(key, r.idle_w)
            believed = self._believed.get(r.node_id, r)
            self._seconds_per_sample[key] = believed.time_s / believed.samples
            self._recent_costs.append(self._seconds_per_sample[key])
            accepted.append(r)
        self._forget_keys(stale)
        self._warn_held(server_round, reports)
        if discarded:
            log(
                WARNING,
                "[adaptive] round %s: the resumed state is contradicted by this round's replies for %d "
                "participant(s) (%s): their saved estimates are more than %g× off what the server believes of "
                "their replies, so they are learned again from these replies (a tampered or stale state file)",
                server_round,
                len(discarded),
                "; ".join(discarded[:5]) + ("…" if len(discarded) > 5 else ""),
                self.trust.plausible_range if self.trust is not None else math.inf,
            )
        return accepted

    def _check_resumed(
        self, key: Hashable, saved: tuple[float, float | None] | None, believed: ClientReport
    ) -> list[str]:
        """Check a resumed estimate against the participant's first observed reply, like a claim.

        A state file is untrusted input: edited to give one node 1e-12 s per sample it would hand
        that node the budget for as long as the smoothing takes to forget it. Its first observed
        reply (as ``self.trust`` believes it) is the check: a saved time (or energy) per sample
        more than ``plausible_range`` times off the believed one is dropped and the reply observed
        as a first report, so the split is right from the next round. Without ``trust`` the state
        is believed like every claim. Returns ``["<key>: saved x, believed y"]`` when dropped.
        """
        self._unverified.discard(key)
        if self.trust is None or saved is None or not math.isfinite(self.trust.plausible_range):
            return []
        bound = self.trust.plausible_range
        pairs = [(saved[0], believed.time_s / believed.samples, "s")]
        if saved[1] is not None and believed.energy_j is not None and saved[1] > 0 and believed.energy_j > 0:
            pairs.append((saved[1], believed.energy_j / believed.samples, "J"))
        for old, new, unit in pairs:
            if not (new / bound <= old <= new * bound):
                self.controller.forget([key])
                return [f"{key}: saved {old:.3g} {unit}, believed {new:.3g} {unit} per sample"]
        return []

    def observed_seconds(self, reports: Sequence[ClientReport]) -> dict[Hashable, float]:
        """Seconds the server itself observed per node this round (none here: the Message API has them)."""
        return {}

    #: Whether the time the server waits for a node (message out → reply in) beyond its reported
    #: compute enters its cost as a fixed per-round term (see ``server_report``). Off by default:
    #: where Flower's own overhead dwarfs the compute and scatters (a loaded machine: tens of
    #: seconds of ClientApp start-up against a 1-s compute) its noise would drive the split.
    server_time: bool = False

    #: Rounds of observed overhead per participant whose median is its fixed per-round term.
    overhead_window: int = 5

    def server_report(self, key: Hashable, believed: ClientReport, observed: Mapping[Hashable, float]) -> Report:
        """The controller's observation (the believed compute); the node's fixed overhead set beside it.

        What the server waits for a node is its compute plus a per-round overhead the client
        never reports (a fresh ClientApp process per message: start-up and imports, slower on a
        slower device; the SuperNode's and the ServerApp's polling; transfers). Each round that
        the server timed it (``observed``, wall-clock reports only: a virtual clock has no wall
        time to compare with), ``observed − compute`` (at least 0) joins the participant's last
        ``overhead_window`` values, and their **median** is the participant's fixed time
        (``AllocationController.set_fixed_time``): the reported compute keeps setting the
        affine model's per-sample term, the observed remainder is added to its fixed term
        (``a``), and the median smooths out Flower's 3-s polling steps. The compute was already
        bounded by the server's evidence (``trust``); the remainder is the server's own
        measurement. The call's own one-off set-up the client reports (``keys.SETUP_S``:
        ``ClientReport.setup_part``) moves from the compute into the same fixed term when the
        controller models one (affine costs, min-energy), so it does not inflate the
        per-sample term.
        """
        history = self._overheads.get(key)
        seconds = observed.get(believed.node_id)
        timed = seconds is not None and math.isfinite(seconds) and not believed.virtual_clock
        c = self.controller
        setup = believed.setup_part() if c.objective != "weighted" or c.cost_model == "affine" else 0.0
        if timed or setup > 0:
            if history is None:
                history = self._overheads[key] = deque(maxlen=self.overhead_window)
            history.append(
                (max(float(seconds) - believed.time_s, 0.0) if timed and seconds is not None else 0.0) + setup
            )
            self.controller.set_fixed_time(key, float(np.median(history)))
        return believed.to_report(setup)

    def fixed_overheads(self) -> dict[Hashable, float]:
        """Each participant's fixed per-round overhead in use (the median of its recent ones), seconds."""
        return {k: float(np.median(v)) for k, v in self._overheads.items() if v}

    def believed_reports(self, server_round: int, reports: Sequence[ClientReport]) -> dict[Hashable, ClientReport]:
        """``{node: report as believed}`` by ``self.trust`` (probes excluded: they time overhead)."""
        claims = [r for r in reports if r.node_id not in self._probation]
        if self.trust is None or not claims:
            return {r.node_id: r for r in claims}
        for r in claims:
            if r.partition_id is not None:
                self._partition_of.setdefault(r.node_id, r.partition_id)
        estimates = self.controller.estimates()
        key_of = dict(zip([r.node_id for r in claims], self._keys([r.node_id for r in claims])))

        def estimate(node: Hashable) -> float | None:
            # a resumed estimate no reply has confirmed is a claim, not history: no cap relative to it
            est = None if key_of[node] in self._unverified else estimates.get(key_of[node])
            return None if est is None else est[0]

        return self.trust.believe(server_round, claims, self.observed_seconds(claims), estimate)

    #: A participant's first observation whose time per sample exceeds this many times the
    #: round's median is held back once (it gets the median cost until its next report): a
    #: first call that pays start-up costs must not starve it for rounds. Real device spreads
    #: we measured stay well below it; a genuinely slower device is observed from its next round.
    outlier_ratio: float = 10.0

    def held_reason(
        self, report: ClientReport, key: Hashable, *, warm: bool, median: float | None, estimated: bool
    ) -> str | None:
        """Why ``report`` is aggregated but not observed, or ``None`` to observe it.

        - ``"over-quota"``: it trained on more than its quota without ``quota_data``: its cost
          per sample is unknown.
        - ``"cold-start"``: the client's first call in its process (``keys.COLD_START``):
          imports and first-call set-up would bill a one-off start-up as slowness. Held when the
          round has warm reports (simulation: actors are reused, so its next call is warm). In a
          round where every report is cold (Flower's deployment runtime starts a fresh process
          per message, so the start-up is paid every round and is part of the cost; or the
          first round of a simulation, where every actor starts) the reports are observed, so
          the split adapts from round 2; only a participant's first cold report beyond
          ``outlier_ratio`` times the round's median (at least 3 reports) is held, as a one-off.
        - ``"outlier"``: the participant's first observation, more than ``outlier_ratio`` times
          the round's median time per sample (at least 3 reports).
        """
        if report.over_quota:
            return "over-quota"
        if report.cold_start:
            first_cold = key not in self._cold_seen
            self._cold_seen.add(key)
            if warm:
                return "cold-start"
            if (
                first_cold
                and median is not None
                and median > 0
                and report.time_s / report.samples > self.outlier_ratio * median
            ):
                return "cold-start"
        if (
            median is not None
            and median > 0
            and not estimated
            and key not in self._outliers_held
            and report.time_s / report.samples > self.outlier_ratio * median
        ):
            self._outliers_held.add(key)
            return "outlier"
        return None

    def _warn_held(self, server_round: int, reports: Sequence[ClientReport]) -> None:
        """One warning per round for clients that trained past their quota; one info line for the rest."""
        over = [r for r in reports if self._held.get(r.node_id) == "over-quota"]
        if over:
            log(
                WARNING,
                "[adaptive] round %s: %d client(s) (%s, ...) trained on more samples than their "
                "quota and report no local data size: quota_data is not applied to their training data. "
                "Their updates are aggregated with at most their quota's weight and their cost is not "
                "measured; call quota_data(trainloader) where the client builds its training data "
                "(see docs/integration.md)",
                server_round,
                len(over),
                self.who(over[0].node_id),
            )
        other = {n: why for n, why in self._held.items() if why != "over-quota"}
        if other:
            log(
                INFO,
                "[adaptive] round %s: not taken as cost estimates (aggregated all the same): %s",
                server_round,
                ", ".join(f"{self.who(n)} ({why})" for n, why in list(other.items())[:10]),
            )
        capped = [r for r in reports if r.capped]
        if capped:
            log(
                WARNING,
                "[adaptive] round %s: %d of %d clients had a quota above their local data and "
                "trained on all of it (allow_cycling=False): the budget %d, split among the nodes sampled "
                "this round, exceeds what they hold, so their time is not balanced. Lower the budget, use "
                "budget_per_node with sampling, or set allow_cycling=True",
                server_round,
                len(capped),
                len(reports),
                self.budget,
            )

    # ------------------------------------------------------------------ round bookkeeping
    def begin_round(self, server_round: int, quotas: Mapping[Hashable, int]) -> None:
        """Remember what was assigned (the API classes call this from configure_*)."""
        self._assigned = dict(quotas)

    def predicted_makespan_s(self) -> float | None:
        """Seconds this round is expected to take: the slowest assigned node's predicted compute
        for its quota plus the per-round overhead observed last round (``_overhead_s``);
        ``None`` when a node of the round cannot be predicted (no estimate yet)."""
        keys_of = getattr(self, "_round_keys", {})
        if not self._assigned or any(n not in keys_of for n in self._assigned):
            return None
        by_key = {keys_of[n]: q for n, q in self._assigned.items()}
        predicted = self.controller.predict_seconds(by_key)
        if len(predicted) < len(by_key):
            return None
        return max(predicted.values()) + float(getattr(self, "_overhead_s", 0.0))

    def assigned_quota(self, node_id: Hashable) -> int | None:
        """What ``node_id`` was asked to process this round (``None``: nothing assigned)."""
        return self._assigned.get(node_id)

    def end_round(
        self,
        server_round: int,
        reports: Sequence[ClientReport],
        skipped: Mapping[Hashable, str],
        unobserved: Iterable[Hashable] = (),
    ) -> dict[str, Any]:
        """Account the round, log one line, append history rows and save the state.

        ``reports`` are the replies aggregated this round; ``skipped`` maps the nodes left out to
        a reason; ``unobserved`` names aggregated nodes whose observation the controller refused.
        """
        unobserved = set(unobserved)
        self._rounds_done += 1
        row = self.account(server_round, reports, skipped)
        self._round_rows.append(row)
        for r in reports:
            self._client_rows.append(
                {
                    "round": server_round,
                    "node_id": r.node_id,
                    "partition_id": r.partition_id,
                    "quota": r.quota,
                    "samples": r.samples,
                    "time_s": r.time_s,
                    "cpu_time_s": r.cpu_time_s,
                    "wall_time_s": r.wall_time_s,
                    "energy_j": np.nan if r.energy_j is None else r.energy_j,
                    "data_size": r.data_size,
                    "capped": r.capped,
                    "cold_start": r.cold_start,
                    # the aggregation weight (weight key) and FedNova factor of its model change
                    "agg_weight": self.last_weights.get(r.node_id, np.nan),
                    "agg_scale": self.last_scales.get(r.node_id, 1.0),
                    "status": (
                        "probe"
                        if r.node_id in self._probation
                        else self._held[r.node_id]
                        if r.node_id in self._held
                        else "observation-dropped"
                        if r.node_id in unobserved
                        else "ok"
                    ),
                }
            )
        for node, reason in skipped.items():
            self._client_rows.append(
                {
                    "round": server_round,
                    "node_id": node,
                    "partition_id": self._partition_of.get(node),
                    "quota": self._assigned.get(node),
                    "samples": 0,
                    "time_s": np.nan,
                    "cpu_time_s": np.nan,
                    "wall_time_s": np.nan,
                    "energy_j": np.nan,
                    "data_size": None,
                    "capped": False,
                    "cold_start": False,
                    "agg_weight": np.nan,
                    "agg_scale": np.nan,
                    "status": reason,
                }
            )
        self._probation -= {r.node_id for r in reports}
        if self.uses_probation:
            self._probation |= set(skipped)
        self._round_skipped = dict(skipped)  # the round line shows each skipped node's reason
        self.log_round(row)
        self.save_history_rows(server_round)
        self.save_state()
        return row

    def account(
        self, server_round: int, reports: Sequence[ClientReport], skipped: Mapping[Hashable, str]
    ) -> dict[str, Any]:
        """The round's figures: makespan, busy-time CV, active + idle energy, quota spread.

        Makespan is the slowest kept client's own time; every other kept client idles for the
        difference at its reported idle power. Skipped clients are counted, not timed.
        """
        quotas = np.array(list(self._assigned.values()), dtype=float)
        row: dict[str, Any] = {
            "round": server_round,
            "policy": self.policy,
            "clients": len(reports),
            "skipped": len(skipped),
        }
        makespan, active, idle, cv, clock = math.nan, math.nan, math.nan, math.nan, "none"
        if reports:
            busy = {r.node_id: r.time_s for r in reports}
            # Unknown figures are priced at 0 and the total marked unknown (NaN) below.
            acct = account_round(
                busy,
                active_j={r.node_id: r.energy_j or 0.0 for r in reports},
                idle_w={r.node_id: r.idle_w or 0.0 for r in reports},
            )
            makespan, cv = acct.makespan, acct.cv_busy
            active = acct.total_active_j if all(r.energy_j is not None for r in reports) else math.nan
            idle = acct.total_idle_j if all(r.idle_w is not None for r in reports) else math.nan
            clocks = {r.virtual_clock for r in reports}
            clock = "mixed" if len(clocks) > 1 else ("virtual" if clocks == {True} else "wall")
        row.update(
            {
                "makespan_s": makespan,
                "cv_busy": cv,
                "active_j": active,
                "idle_j": idle,
                "energy_j": active + idle,
                "clock": clock,
                "samples": int(sum(r.samples for r in reports)),
                "quota_min": float(quotas.min()) if len(quotas) else math.nan,
                "quota_median": float(np.median(quotas)) if len(quotas) else math.nan,
                "quota_max": float(quotas.max()) if len(quotas) else math.nan,
                "quota_sum": int(quotas.sum()) if len(quotas) else 0,
            }
        )
        # Where the budget's samples went when fewer were processed: quotas above a node's data
        # (capped), quotas of skipped nodes, and budget no node was given (all local data used).
        row["short_capped"] = int(
            sum(r.quota - r.samples for r in reports if r.quota is not None and r.samples < r.quota)
        )
        row["short_skipped"] = int(sum(self._assigned.get(n) or 0 for n in skipped))
        row["short_unassigned"] = max(self.budget - row["quota_sum"], 0) if len(quotas) else 0
        return row

    def log_round(self, row: Mapping[str, Any]) -> None:
        """The one log line per round (a warning when quotas exceeded some nodes' data)."""
        energy = (
            f"energy {row['energy_j']:.1f} J"
            if math.isfinite(row["energy_j"])
            else f"active energy {row['active_j']:.1f} J"
            if math.isfinite(row["active_j"])
            else "energy unmeasured"
        )
        short = [row.get(k, 0) for k in ("short_capped", "short_skipped", "short_unassigned")]
        # samples the budget held that no node processed, and where they went
        shortfall = (
            f" | {sum(short)} of {self.budget} budgeted samples not processed ({short[0]} above "
            f"capped nodes' data, {short[1]} of skipped nodes, {short[2]} given to nobody)"
            if sum(short)
            else ""
        )
        log(
            WARNING if short[0] else INFO,
            "[adaptive] round %s (%s, %s clock): makespan %.3f s | %s | "
            "CV busy %.3f | quota min/median/max %g/%g/%g | %d clients, %d skipped%s%s",
            row["round"],
            row["policy"],
            row["clock"],
            row["makespan_s"],
            energy,
            row["cv_busy"],
            row["quota_min"],
            row["quota_median"],
            row["quota_max"],
            row["clients"],
            row["skipped"],
            self.quota_listing(),
            shortfall,
        )

    #: Up to this many nodes the round line lists every quota by partition; above, its
    #: min/median/max summary is all.
    quota_line_max_nodes: int = 20

    def quota_listing(self) -> str:
        """The round's quotas by partition for the round line (``""`` above ``quota_line_max_nodes``).

        Ordered by partition id (nodes whose partition is not known yet last, by node id); a
        skipped node's reason is shown beside its quota.
        """
        if not self._assigned or len(self._assigned) > self.quota_line_max_nodes:
            return ""
        skipped = getattr(self, "_round_skipped", {})

        def order(node: Hashable) -> tuple:
            part = self._partition_of.get(node)
            return (part is None, part if part is not None else 0, str(node))

        items = []
        for node in sorted(self._assigned, key=order):
            why = skipped.get(node)
            part = self._partition_of.get(node)
            name = f"node {node}" if part is None else f"partition {part}"  # the ids: in the history
            items.append(f"{name}: {self._assigned[node]}" + (f" ({why})" if why else ""))
        return " | quotas " + ", ".join(items)

    #: CSV the round's history rows are appended to after every round (and its ``-clients``
    #: file beside it); ``None``: kept in memory only (``save_history`` writes them on demand).
    #: The legacy API's round loop belongs to Flower, so this is where it saves its history.
    history_path: str | os.PathLike | None = None

    def save_history_rows(self, server_round: int) -> None:
        """Append this round's rows to ``history_path`` (a fresh run first clears old files).

        A run that resumed saved state continues the files of the run it resumes; a fresh run
        (no state resumed) starts them anew, so two runs never mix in one file.
        """
        if self.history_path is None:
            return
        path = Path(self.history_path)
        if not getattr(self, "_history_started", False):
            self._history_started = True
            if not getattr(self, "_resumed_rounds", 0):
                for old in (path, path.with_name(path.stem + "-clients" + path.suffix)):
                    old.unlink(missing_ok=True)
        try:
            self.append_history(path, server_round)
        except OSError as err:  # a full disk must not stop training: the rows stay in memory
            log(WARNING, "[adaptive] round %s: history not written to %s (%s); kept in memory", server_round, path, err)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything a restarted ServerApp needs, as JSON types (keyed by partition id)."""
        return {
            "version": _STATE_VERSION,
            "policy": self.policy,
            "budget": self.budget,
            "rounds": self._rounds_done,
            "controller": self.controller.state_dict(),
            # node id -> partition: a resumed ServerApp (or one behind a SuperLink restarted on
            # its database: node ids survive) keys its first round by partition, not equally
            "partitions": [[n, p] for n, p in self._partition_of.items() if isinstance(n, (int, str))],
            # partition -> local data size (cycling off): the same bounds, so the split is held
            "caps": [[k, c] for k, c in self._caps.items() if type(k) is int],
            # partition -> its recent server-observed overheads: the fixed terms survive a resume
            "overheads": [[k, list(v)] for k, v in self._overheads.items() if type(k) is int and v],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()`` output.

        The node id → partition map is restored too: nodes that kept their id (a resumed
        ServerApp, a SuperLink restarted on its database) are keyed by partition from the first
        round; a node id that changed is simply unknown until its reply.

        Raises
        ------
        StateFileError
            The state is not one this strategy wrote, or its numbers cannot be computed with
            (another version, a truncated or tampered controller state: non-positive costs,
            quotas that do not sum to the budget…). Nothing is changed then.
        ValueError
            The state was saved under another policy: resuming it would apply one policy's
            estimates to another's objective.
        """
        if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION:
            version = state.get("version") if isinstance(state, Mapping) else None
            raise StateFileError(
                f"unsupported adaptive strategy state version {version!r}; this release reads version {_STATE_VERSION}"
            )
        if state.get("policy") != self.policy:
            raise ValueError(
                f"the saved state was written under policy {state.get('policy')!r}, this "
                f"strategy runs policy {self.policy!r}; resume with policy="
                f"{state.get('policy')!r}, or use a fresh state_dir (or delete the state) to "
                f"start {self.policy!r} from scratch"
            )
        rounds = state.get("rounds")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise StateFileError(f"the saved round count {rounds!r} is not an int >= 0")
        controller = self.make_controller()
        try:
            controller.load_state_dict(copy.deepcopy(state["controller"]))
        except Exception as err:  # noqa: BLE001 - any malformed field: the state is unusable
            raise StateFileError(f"the controller state cannot be loaded ({type(err).__name__}: {err})") from None
        partitions = self._saved_partitions(state.get("partitions", []))
        caps = self._saved_partitions(state.get("caps", []), what="partition data size")
        if any(c < 1 for c in caps.values()):
            raise StateFileError(f"a saved partition data size is < 1: {caps}")
        self._check_controller(controller)
        self.controller = controller
        self._rounds_done = rounds
        self._unverified = set(controller.estimates())
        overheads = self._saved_overheads(state.get("overheads", []))
        self._partition_of.update(partitions)
        self._caps.update(caps)
        self._sizes = None
        for key, values in overheads.items():
            self._overheads[key] = deque(values, maxlen=self.overhead_window)
            self.controller.set_fixed_time(key, float(np.median(values)))

    @staticmethod
    def _saved_overheads(pairs: Any) -> dict[int, list[float]]:
        """The saved ``[[partition id, [seconds, ...]], ...]`` (``StateFileError`` when malformed)."""
        if not isinstance(pairs, list):
            raise StateFileError(f"the saved overheads are not a list of [partition id, [seconds]]: {pairs!r:.200}")
        out: dict[int, list[float]] = {}
        for pair in pairs:
            ok = (
                isinstance(pair, list)
                and len(pair) == 2
                and type(pair[0]) is int
                and isinstance(pair[1], list)
                and 0 < len(pair[1]) <= 1000
                and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1e7
                    for v in pair[1]
                )
            )
            if not ok:
                raise StateFileError(f"a saved overhead entry {pair!r:.200} is not [partition id, [seconds >= 0]]")
            out[pair[0]] = [float(v) for v in pair[1]]
        return out

    @staticmethod
    def _saved_partitions(pairs: Any, what: str = "node partition") -> dict[Hashable, int]:
        """The saved ``[[node id, partition id], ...]`` (``StateFileError`` when malformed).

        Also reads the saved ``[[partition id, data size], ...]`` (``what`` names it in errors).
        """
        if not isinstance(pairs, list):
            raise StateFileError(f"the saved {what}s are not a list of [id, int] pairs: {pairs!r:.200}")
        out: dict[Hashable, int] = {}
        for pair in pairs:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or isinstance(pair[0], bool)
                or not isinstance(pair[0], (int, str))
                or isinstance(pair[1], bool)
                or not isinstance(pair[1], int)
                or pair[1] < 0
            ):
                raise StateFileError(f"a saved {what} {pair!r:.200} is not [id (int or str), int >= 0]")
            out[pair[0]] = pair[1]
        return out

    def _check_controller(self, controller: AllocationController) -> None:
        """Refuse a loaded controller whose numbers cannot be computed with (``StateFileError``).

        Every estimate must be a finite positive time per sample (and a finite energy >= 0), the
        committed split must sum to its budget, and one ``allocate`` over its participants (on a
        copy) must succeed and sum exactly: a truncated array or a tampered quota fails here, at
        start-up, and not in round 2.
        """
        try:
            for pid, (tau, eps) in controller.estimates().items():
                if not (math.isfinite(tau) and tau > 0) or (eps is not None and not (math.isfinite(eps) and eps >= 0)):
                    raise StateFileError(
                        f"participant {pid!r} has cost estimates ({tau!r} s, {eps!r} J per "
                        "sample); they must be finite, the time > 0 and the energy >= 0"
                    )
            current = controller.current
            if any(isinstance(q, bool) or not isinstance(q, int) or q < 0 for q in current.values()):
                raise StateFileError(f"the saved split holds quotas that are not ints >= 0: {current}")
            groups = controller.groups
            budgets = controller.budget if isinstance(controller.budget, dict) else {None: controller.budget}
            sums: dict[Any, int] = {}
            for pid, q in current.items():
                group = None if groups is None else groups.get(pid)
                sums[group] = sums.get(group, 0) + q
            for group, total in sums.items():
                if total not in (0, budgets.get(group)):
                    raise StateFileError(
                        f"the saved split gives {total} samples"
                        f"{'' if group is None else f' to group {group!r}'} for a budget of "
                        f"{budgets.get(group)}"
                    )
            if current:
                probe = copy.deepcopy(controller)
                split = probe.allocate(list(current))
                for group in sums:
                    got = sum(q for pid, q in split.items() if (None if groups is None else groups.get(pid)) == group)
                    if got != budgets.get(group):
                        raise StateFileError(
                            f"the saved state splits {got} samples for a budget of {budgets.get(group)}"
                        )
        except StateFileError:
            raise
        except Exception as err:  # noqa: BLE001 - a state that makes the controller fail is unusable
            raise StateFileError(f"the controller fails on the saved state ({type(err).__name__}: {err})") from None

    def save_state(self) -> None:
        """Write the state to ``state_dir`` (atomically and durably) and/or the ServerApp context.

        A file write that fails (disk full…) is one error line, never an exception: the round's
        aggregate is the run's, the state file keeps the last round written and the next round
        writes it again (``state_file.write_or_log``). The context copy is kept either way.
        """
        if self.state_path is None and self.context is None:
            return
        text = json.dumps(self.state_dict())
        if self.context is not None:
            from flwr.app import ConfigRecord

            self.context.state[CONTEXT_STATE_KEY] = ConfigRecord({"json": text})
        if self.state_path is not None:
            write_or_log(self.state_path, text, f"the strategy state after {self._rounds_done} rounds")

    def _resume(self) -> None:
        """Resume from the ServerApp context, else from ``state_dir``; set aside what cannot be used.

        A state saved under another policy is refused (``ValueError`` at construction, with the
        fix). A file that is empty, truncated, not this strategy's or holds numbers the controller
        cannot compute with is renamed ``<file>.bad-<time>`` with one warning and the strategy
        starts fresh (the costs are learned again in a round or two): never a crash in round 2,
        never a silent use of bad numbers.
        """
        fix = "the strategy starts without it and learns the costs again"
        if self.context is not None and CONTEXT_STATE_KEY in self.context.state:
            where = "the ServerApp context"
            try:
                state = json.loads(self.context.state[CONTEXT_STATE_KEY]["json"])
                self.load_state_dict(state)
            except StateFileError as err:
                log(WARNING, "[adaptive] saved state in %s is unusable: %s; %s", where, err, fix)
                del self.context.state[CONTEXT_STATE_KEY]
                return
            except (KeyError, TypeError, RecursionError) as err:
                log(WARNING, "[adaptive] saved state in %s is unusable (%s); %s", where, err, fix)
                del self.context.state[CONTEXT_STATE_KEY]
                return
            except ValueError as err:
                if isinstance(err, json.JSONDecodeError):
                    log(WARNING, "[adaptive] saved state in %s is not valid JSON (%s); %s", where, err, fix)
                    del self.context.state[CONTEXT_STATE_KEY]
                    return
                raise ValueError(f"{err} (state in {where})") from None
        elif self.state_path is not None:
            where = str(self.state_path)
            try:
                state = read_state(self.state_path, fix)
                if state is None:
                    return
                self.load_state_dict(state)
            except StateFileError as err:
                moved = set_aside(self.state_path)
                log(
                    WARNING,
                    "[adaptive] state file %s is unusable: %s; it was moved to %s and %s",
                    where,
                    str(err).replace(f"; {fix}", ""),
                    moved,
                    fix,
                )
                return
            except ValueError as err:
                raise ValueError(f"{err} (state file {where})") from None
        else:
            return
        self._resumed_rounds = self._rounds_done  # a history_path is continued, not cleared
        log(INFO, "[adaptive] resumed controller state after %d rounds (%s)", self._rounds_done, where)

    # ------------------------------------------------------------------ helpers
    def forget_departed(self, live_node_ids: Iterable[Hashable]) -> list[Hashable]:
        """Drop what is kept about node ids that are no longer connected; returns them.

        Flower never reuses a node id (a restarted node gets a new one), so the per-node maps of
        a departed id are dead weight: its partition mapping, last-trained round, probation and
        its ``"node-<id>"`` controller slot and cap. The partition it owned is released, so the
        same partition coming back under a new node id is keyed by the partition again (its
        estimate resumes) instead of being kept apart as a second claimant. Partition-keyed
        estimates are kept: they are the population's and survive restarts.

        The API classes call this with the grid's node ids before each round. It scans the
        per-node maps only when more node ids are tracked than are connected, so at most as many
        departed ids as live ones are kept (memory linear in live nodes).
        """
        live = live_node_ids if isinstance(live_node_ids, (set, frozenset)) else set(live_node_ids)
        if len(self._last_trained) <= len(live):
            return []
        gone = [n for n in self._last_trained if n not in live]
        for n in gone:
            self._last_trained.pop(n, None)
            self._partition_of.pop(n, None)
            self._replied.discard(n)
            self._probation.discard(n)
            self._unavailable.discard(n)
            self._assigned.pop(n, None)
        gone_set = set(gone)
        for part in [p for p, owner in self._owner.items() if owner in gone_set]:
            del self._owner[part]
        self._forget_keys([k for k in (f"node-{n}" for n in gone) if k in self._node_keys])
        return gone

    def _forget_keys(self, ids: list[str]) -> None:
        """Forget ``"node-<id>"`` controller ids (slot, bounds, cap) that will never be used again."""
        if not ids:
            return
        for k in ids:
            self._node_keys.discard(k)
            self._seconds_per_sample.pop(k, None)
            self._overheads.pop(k, None)  # the controller's fixed time goes with forget(config=True)
            if self._caps.pop(k, None) is not None:
                self._sizes = None
        self.controller.forget(ids, config=True)

    def _min_of(self) -> int:
        return int(self.min_quota) if isinstance(self.min_quota, (int, np.integer)) else 0

    def note_outcomes(self, skipped: Mapping[Hashable, str], answered: Iterable[Hashable]) -> None:
        """Remember which nodes are gone (error or no reply: e.g. Flower's NODE_UNAVAILABLE) and
        which answered, before the round's replies are observed (see ``_keys``)."""
        self._unavailable |= {n for n, why in skipped.items() if why in ("error", "no-reply")}
        self._unavailable -= set(answered)

    def note_connected(self, node_ids: Iterable[Hashable]) -> None:
        """Nodes the grid no longer lists are gone (their partition may be taken over)."""
        connected = set(node_ids)
        self._unavailable |= {n for n in self._owner.values() if n not in connected}

    def _keys(self, node_ids: Iterable[Hashable]) -> list[Hashable]:
        """Controller ids of these nodes: the one rule, the same answer in every call of a run.

        A node's key is its partition id once known, else ``"node-<id>"``. The first node keyed
        with a partition owns it. A node that claims the partition of an owner that is gone (its
        last assigned round ended in an error or without a reply: a SuperNode restarts with a new
        node id) takes the partition over, with its estimate, quotas and cap (logged once). A
        second node claiming the partition of a live owner is keyed ``"node-<id>"`` (its own
        estimate, quotas and cap) and a warning names both. ``forget_departed`` releases the
        partitions of owners the grid no longer lists.
        """
        out: list[Hashable] = []
        for n in node_ids:
            part = self._partition_of.get(n)
            owner = None if part is None else self._owner.setdefault(part, n)
            if part is not None and owner is not None and owner != n and owner in self._unavailable:
                log(
                    INFO,
                    "[adaptive] node %s takes over partition %s from node %s, which is gone (no usable "
                    "answer in its last round): it continues that partition's estimate",
                    n,
                    part,
                    owner,
                )
                self._owner[part] = owner = n
                self._probation.discard(n)
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

    def _all_local_data(self, node_ids: list[Hashable], caps: list[int], server_round: int = 0) -> dict[Hashable, int]:
        """The budget exceeds the nodes' local data (cycling off): each trains on all of it.

        Only reached when every node's data size is known: a node of unknown size is unbounded,
        so the controller can give it what the others leave and the split stays exact. Warns
        every round it happens (under sampling it depends on which nodes were sampled).
        """
        total = sum(caps)
        log(
            WARNING,
            "[adaptive] round %s: budget %d samples exceeds the %d samples of local data of the %d "
            "nodes training this round (allow_cycling=False): every client trains on all its local data, "
            "so no time is balanced; set allow_cycling=True, a budget of at most %d, or budget_per_node "
            "when the strategy samples nodes",
            server_round,
            self.budget,
            total,
            len(node_ids),
            total,
        )
        return dict(zip(node_ids, caps))

    def _warn_once(self, tag: str, msg: str, *args: Any) -> None:
        if tag not in self._warned:
            self._warned.add(tag)
            log(WARNING, msg, *args)
