"""The round coordinator both Flower strategy APIs share: quotas out, telemetry in, state kept.

Design
------
:class:`AdaptiveCore` is the one object that owns a run's quotas, telemetry, history and state;
the API adapters (``AdaptiveStrategy``, ``LegacyAdaptiveStrategy`` and the strategies built on
them) are this coordinator plus Flower's ``Strategy`` interface, and add only what their API's
messages need (configure, screen, aggregate). The coordinator composes small components, each
in its own file with its own contract, instead of inheriting a mixin stack:

- ``self.nodes`` (:class:`~flwr_adaptive.strategies.partitions.PartitionMap`): node id ↔
  partition id, ownership and takeover, probation, forgetting departed node ids;
- ``self.aggregation`` (:class:`~flwr_adaptive.strategies.normalization.AggregationWeights`):
  aggregation weights and normalised (FedNova) factors of the kept replies;
- ``self.tables`` (:class:`~flwr_adaptive.strategies.history.RunHistory`): the round and client
  tables and their per-round CSV (``history_path``);
- ``self.update_size`` (:class:`~flwr_adaptive.strategies.update_size.UpdateSizeScreen`): each
  reply's update measured at screening, the outsized ones skipped (``settled_weights``);
- ``self.store`` (:class:`~flwr_adaptive.strategies.state_store.StateStore`): the state file
  and ``context.state``, and the checks a saved state passes (``state_store.parse_state``);
- :mod:`~flwr_adaptive.strategies.core_state`: the state saved, restored and forgotten (node-id
  churn);
- :mod:`~flwr_adaptive.strategies.round_log`: the round's history row and its log lines;
- :mod:`~flwr_adaptive.strategies.round_quotas`: quotas out, the round's split (``quotas_for``);
- :mod:`~flwr_adaptive.strategies.observe_round`: telemetry in, a round's replies turned into
  the controller's observations (``observe_replies``, ``believed_reports``).

The settings and tables users and subclasses reach (``controller``, ``budget``, ``weighting``,
``data_sizes``, ``history``, ``state_dict()``…) stay attributes of the strategy; the hooks a
baseline overrides (``make_controller``, ``participants``, ``quotas_for``, ``prior_caps``,
``observe_replies``, ``held_reason``, ``weights``, ``local_steps``, ``account``…) stay methods.

Contract
--------
- ``quotas_for(round, nodes)`` returns ``{node_id: samples}`` summing to ``budget`` exactly: the
  equal split while no node's partition is known (round 1 of every ServerApp run), then the
  controller's split keyed by **partition id** (reported by the clients; unlike node ids it
  survives a restart), within each node's data size when cycling is off (a node that never
  replied: a provisional size, ``quota_bounds``). A node absent from the split gets no message:
  when ``budget`` cannot give every node ``min_quota`` only ``budget // min_quota`` train, those
  that waited longest first; when it exceeds the nodes' local data each trains on all of it.
  With ``min_local_steps = k`` each node's quota is at least k steps of its batch size learnt
  from its replies, within the equal share (``strategies.step_floor``).
- ``observe_replies(round, reports)`` learns each node's partition and data size and feeds one
  :class:`~flwr_adaptive.controller.Report` per client (as ``trust`` believes it, with its idle
  watts) to the controller; replies that would mislead it are held back (``held_reason``), an
  observation it rejects is logged and dropped. ``weights`` / ``update_scales`` give each kept
  reply its aggregation weight and normalised factor (``settled_weights``: after the update-size
  screen); ``participants`` chooses who trains among
  the sampled nodes (all here; selection baselines override it).
- Faults: a node whose reply was skipped (error, timeout, invalid telemetry) is on probation for
  its next round (unless ``uses_probation = False``): it gets ``probe_quota()`` samples, its
  share is re-split among the others, and its next good reply (not observed) ends it.
- ``end_round``: one log line, one history row (samples not processed counted:
  ``short_capped``, ``short_untrained``, ``short_skipped``, ``short_unassigned``), one row per client, and the state
  saved to ``state_dir`` and/or ``context.state``; a resumed state's estimates are checked
  against each participant's first reply like a claim. Memory and the state file stay linear
  in the partitions plus the connected nodes, whatever the node-id churn (docs/scale.md).

Cost
----
Per round: one ``allocate`` and one ``observe`` per client (see the controller), a few numpy
reductions, and one small JSON write when ``state_dir`` is set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np

from flwr_adaptive._logging import logger
from flwr_adaptive.controller import AllocationController
from flwr_adaptive.strategies import core_state, round_log
from flwr_adaptive.strategies.delegation import CheckedSetting, Delegated
from flwr_adaptive.strategies.history import RunHistory
from flwr_adaptive.strategies.normalization import (
    WEIGHTINGS,
    AggregationWeights,
    checked_max_rescale,
    checked_objective,
    checked_weighting,
    claimed_steps,
    default_weighting,
    equal_split_level,
)
from flwr_adaptive.strategies.observation import HeldReasons, ServerOverheads
from flwr_adaptive.strategies.observe_round import believed_reports, check_resumed, observe_round
from flwr_adaptive.strategies.options import checked_budget
from flwr_adaptive.strategies.partitions import PartitionMap
from flwr_adaptive.strategies.quota_bounds import QuotaBounds, pick_trainers
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.round_quotas import FollowedSetting, split_round
from flwr_adaptive.strategies.state_store import CONTEXT_STATE_KEY, STATE_FILE, StateStore
from flwr_adaptive.strategies.step_floor import StepFloor, checked_floor
from flwr_adaptive.strategies.trust import CostTrust, TrustSetting
from flwr_adaptive.strategies.update_size import UpdateSizeScreen, checked_update_ratio

__all__ = ["AdaptiveCore", "WEIGHTINGS", "STATE_FILE", "CONTEXT_STATE_KEY", "log"]


def log(level: int, msg: str, *args: Any) -> None:
    """Log on Flower's logger (see :mod:`flwr_adaptive._logging`), as ``flwr.common.logger.log`` does."""
    logger.log(level, msg, *args)


class AdaptiveCore:
    """Quota allocation, telemetry bookkeeping and state shared by both strategy APIs.

    Parameters
    ----------
    budget, budget_per_node : int
        Samples per round split among the nodes that train it (sums to it exactly), or instead
        samples per training node (the round's budget scales with the nodes sampled).
    policy : str (default: "time")
        One of ``flwr_adaptive.controller.POLICIES``.
    smoothing, deadband, slack, paper : see ``AllocationController.from_policy``
        ``None`` for ``deadband`` / ``slack``: the policy's default.
    weighting : str, optional
        ``"normalized"``, ``"samples"`` or ``"data-size"`` (``strategies.normalization``);
        ``None``: ``"normalized"`` with ``allow_cycling=False``, else ``"samples"``.
    allow_cycling : bool (default: False)
        Let a quota exceed the client's local data (it cycles); False caps it at the data size.
    min_quota, forget_after, cost_clip : see ``AllocationController``.
    trust : CostTrust or bool (default: True)
        Which claimed costs the server believes (``strategies.trust``).
    state_dir : str or Path, optional
        Folder of the state file saved after every round and resumed from.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state`` and resumed from it.

    The API adapters document each parameter in full (``AdaptiveStrategy``).
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
        budget, self.budget_per_node = checked_budget(
            budget,
            budget_per_node,
            policy=policy,
            weighting=weighting,
            slack=slack,
            paper=paper,
            allow_cycling=allow_cycling,
            min_quota=min_quota,
        )
        self.budget = int(budget)
        self.policy = policy
        self.paper = paper
        self.allow_cycling = bool(allow_cycling)
        self._warned: set[str] = set()
        self.aggregation = AggregationWeights(default_weighting(weighting, self.allow_cycling), self._warn_once)
        self.min_quota = min_quota
        # deadband / slack left out when None: the policy's own default applies.
        self._controller_kwargs = dict(
            smoothing=smoothing, min_quota=min_quota, forget_after=forget_after, cost_clip=cost_clip
        )
        self._controller_kwargs.update({k: v for k, v in (("deadband", deadband), ("slack", slack)) if v is not None})
        self.controller = self.make_controller()
        self.store = StateStore(state_dir, context)
        self.nodes = PartitionMap(self._warn_once)
        self.tables = RunHistory()
        self.bounds = QuotaBounds()
        self.step_floor = StepFloor()  # min_local_steps: off until the API class sets it
        self.holds = HeldReasons()
        self.overheads = ServerOverheads()
        self.update_size = UpdateSizeScreen()  # the API classes start it at screening (normalised weighting)
        self._assigned: dict[Hashable, int] = {}  # this round's quotas by node id
        self._round_keys: dict[Hashable, Hashable] = {}  # this round's node id -> controller id
        self._round_sampled: set[Hashable] = set()  # the node ids this round's split was asked for
        self._rounds_done = 0  # rounds observed, across resumptions
        self.trust = trust
        self._believed: dict[Hashable, ClientReport] = {}  # this round's reports as believed
        self._held: dict[Hashable, str] = {}  # this round: node id -> why its report was not observed
        self._round_skipped: dict[Hashable, str] = {}  # this round: node id -> why it was skipped
        #: Controller ids whose estimate came from a resumed state and no reply has checked yet:
        #: a state file is untrusted input too (see ``_check_resumed``).
        self._unverified: set[Hashable] = set()
        self._resume()

    # ------------------------------------------------------------------ the components' state, as attributes
    #: What the server believes of each claim (``flwr_adaptive.strategies.trust``; set later as ``trust=``).
    trust = TrustSetting()
    weighting = FollowedSetting(
        "aggregation", "weighting", "The weighting in use: normalized, samples or data-size.", checked_weighting
    )
    weight_cap = Delegated("aggregation", "weight_cap", "A claimed data size counts for at most this × the median.")
    data_sizes = Delegated("aggregation", "data_sizes", "``{partition id: data size}`` the operator knows.")
    step_tolerance = Delegated("aggregation", "step_tolerance", "Claimed steps per sample kept within this factor.")
    max_rescale = CheckedSetting(
        "aggregation",
        "max_rescale",
        "Largest normalised-update factor (inf: unbounded; None: the policy's default).",
        checked_max_rescale,
    )
    objective = Delegated(
        "aggregation", "objective", "The normalised rule's data weights (OBJECTIVES).", check=checked_objective
    )
    min_local_steps = FollowedSetting(
        "step_floor", "steps", "Local steps every trained node gets at least (0: no floor).", checked_floor
    )
    last_weights = Delegated("aggregation", "last_weights", "The last round's ``{node id: weight}``.", writable=False)
    last_scales = Delegated("aggregation", "last_scales", "The last round's FedNova factors.", writable=False)
    max_update_ratio = Delegated(
        "update_size",
        "ratio",
        "An average local step above this × the round's lower median is skipped (inf: off).",
        check=checked_update_ratio,
    )
    last_update_ratio = Delegated(
        "update_size",
        "last_ratio",
        "The round's largest average step over the median (NaN: not judged).",
        writable=False,
    )
    #: CSV the round's rows are appended to after every round (its ``-clients`` file beside it);
    #: ``None``: in memory only (``save_history`` writes them on demand). The legacy API's round
    #: loop belongs to Flower, so this is where it saves its history.
    history_path = Delegated("tables", "path", "CSV the rows are appended to after every round, or None.")
    history = Delegated("tables", "history", "One row per round (``pandas.DataFrame``).", writable=False)
    client_history = Delegated("tables", "client_history", "One row per client and round.", writable=False)
    _round_rows = Delegated("tables", "_round_rows", writable=False)
    _client_rows = Delegated("tables", "_client_rows")  # writable: e.g. a smaller ClientRows
    state_path = Delegated("store", "path", "The state file, or None.", writable=False)
    context = Delegated("store", "context", "The ServerApp context the state is kept in, or None.", writable=False)
    # what subclasses and tools read of the node book and the quota bounds
    _partition_of = Delegated("nodes", "partition_of", writable=False)
    _last_trained = Delegated("nodes", "last_trained", writable=False)
    _probation = Delegated("nodes", "probation", writable=False)
    _replied = Delegated("nodes", "replied", writable=False)
    _caps = Delegated("bounds", "caps", writable=False)
    _seconds_per_sample = Delegated("bounds", "seconds_per_sample", writable=False)

    def save_history(self, path: str | os.PathLike) -> None:
        """Write ``history`` to ``path`` and ``client_history`` next to it (CSV)."""
        self.tables.save_history(path)

    def append_history(self, path: str | os.PathLike, server_round: int) -> None:
        """Append the rows of ``server_round`` to ``path`` and its ``-clients`` file (CSV)."""
        self.tables.append_history(path, server_round)

    def _keys(self, node_ids: Iterable[Hashable]) -> list[Hashable]:
        """Controller ids of these nodes (``PartitionMap.keys``: the one rule of a run)."""
        return self.nodes.keys(node_ids)

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
        return split_round(self, server_round, node_ids)

    def _with_provisional_caps(self, node_ids: list[Hashable], caps: list[int | None]) -> list[int | None]:
        """Cap the nodes that never replied at a provisional data size (``QuotaBounds.provisional``)."""
        return self.bounds.provisional(node_ids, caps, self.nodes.replied, self.budget)

    def set_round_budget(self, budget: int) -> None:
        """This round's budget (``budget_per_node`` × the nodes sampled): the split sums to it."""
        self.budget = int(budget)
        self.controller.budget = self.budget  # a new budget is always re-split (no deadband)

    def prior_caps(
        self, node_ids: list[Hashable], ids: list[Hashable], caps: list[int | None], probation: Sequence[Hashable]
    ) -> list[int | None]:
        """Cap the nodes never measured at the share their cautious prior cost earns.

        The controller prices a participant without an estimate at the median cost; ``k`` such
        nodes training together are each capped at what they finish at the ``1 − 1/(k+1)``
        quantile of the recent costs when the measured nodes finish theirs
        (``QuotaBounds.cautious``; one newcomer: the median share). Override to return ``caps``
        unchanged for the controller's median prior.
        """
        return self.bounds.cautious(node_ids, ids, caps, probation, self.budget, self.probe_quota())

    def trainers(self, server_round: int, node_ids: Sequence[Hashable]) -> list[Hashable]:
        """The nodes that train this round: all of them, unless the budget is too small.

        ``budget`` samples give at most ``budget // max(min_quota, 1)`` nodes their minimum
        quota. With more nodes than that, the ones that trained least recently are picked
        (``quota_bounds.pick_trainers``), so each node trains, and is measured, every few rounds;
        the others sit the round out (no message, no probation).
        """
        return pick_trainers(node_ids, self.budget, max(self._min_of(), 1), self.nodes.last_trained, self._warn_once)

    def note_partition(self, node_id: Hashable, metrics: Mapping[str, Any]) -> None:
        """Learn ``node_id``'s partition from a reply even when the rest of it is unusable."""
        self.nodes.note_partition(node_id, metrics)

    def who(self, node_id: Hashable) -> str:
        """How a line about one node names it (``PartitionMap.who``): ``"partition 3 (node <id>)"``
        once its partition is known, else ``"node <id>"``."""
        return self.nodes.who(node_id)

    def partition_of(self, node_id: Hashable) -> int | None:
        """The partition id ``node_id`` reported this run (``None``: not known yet)."""
        return self.nodes.partition_of.get(node_id)

    def probe_quota(self) -> int:
        """Samples given to a node on probation (it failed last round): the smallest quota."""
        return max(self._min_of(), 1)

    def observe_replies(self, server_round: int, reports: Sequence[ClientReport]) -> list[ClientReport]:
        """Feed the controller; returns the reports it accepted.

        Probes (replies of nodes on probation) are not observed; an observation the controller
        refuses is logged and dropped (the update itself is still aggregated). Reports that would
        mislead the controller are held back (aggregated, not observed; see ``held_reason``).
        """
        return observe_round(self, server_round, reports)

    def _check_resumed(
        self, key: Hashable, saved: tuple[float, float | None] | None, believed: ClientReport
    ) -> list[str]:
        """Check a resumed estimate against its participant's first believed reply, like a claim
        (``state_store.contradiction``); returns ``["<key>: saved x, believed y"]`` when dropped
        (it is then learned again from this reply). Without ``trust`` the state is believed."""
        return check_resumed(self, key, saved, believed)

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

    def models_setup(self) -> bool:
        """Whether the controller models a fixed per-round term a reported set-up moves into."""
        c = self.controller
        return c.objective != "weighted" or c.cost_model == "affine"

    def fixed_overheads(self) -> dict[Hashable, float]:
        """Each participant's fixed per-round overhead in use (the median of its recent ones), seconds."""
        return self.overheads.fixed()

    def believed_reports(self, server_round: int, reports: Sequence[ClientReport]) -> dict[Hashable, ClientReport]:
        """``{node: report as believed}`` by ``self.trust`` (probes excluded: they time overhead).

        Where a reported set-up moves into the fixed term (``models_setup``), the rules judge the
        compute without it (the part the controller's per-sample term is learned from), and the
        believed set-up is added back.
        """
        return believed_reports(self, server_round, reports)

    #: A participant's first observation whose time per sample exceeds this many times the
    #: round's median is held back once (it gets the median cost until its next report): a
    #: first call that pays start-up costs must not starve it for rounds. Real device spreads
    #: we measured stay well below it; a genuinely slower device is observed from its next round.
    outlier_ratio: float = 10.0

    def held_reason(
        self, report: ClientReport, key: Hashable, *, warm: bool, median: float | None, estimated: bool
    ) -> str | None:
        """Why ``report`` is aggregated but not observed (``"over-quota"``, ``"cold-start"``,
        ``"outlier"``: ``observation.HeldReasons``), or ``None`` to observe it."""
        return self.holds.reason(
            report, key, warm=warm, median=median, estimated=estimated, outlier_ratio=self.outlier_ratio
        )

    # ------------------------------------------------------------------ weights
    def weights(self, server_round: int, reports: Sequence[ClientReport]) -> dict[Hashable, int]:
        """Aggregation weight of each kept reply, by ``weighting`` (claimed sizes capped; see
        :class:`~flwr_adaptive.strategies.normalization.AggregationWeights`)."""
        return self.aggregation.weights(server_round, reports)

    def local_steps(self, reports: Sequence[ClientReport]) -> list[int] | None:
        """Each reply's local steps as claimed, or ``None`` when a reply does not say them."""
        return claimed_steps(reports)

    def update_scales(
        self, server_round: int, reports: Sequence[ClientReport], weights: dict[Hashable, int]
    ) -> dict[Hashable, float]:
        """``{node: τ_eff/‖a_i‖₁}`` with ``weighting="normalized"`` (else ``{}``), steps from ``local_steps``."""
        return self.aggregation.update_scales(server_round, reports, weights, self.local_steps)

    def settled_weights(
        self, server_round: int, reports: Sequence[ClientReport], skipped: dict[Hashable, str]
    ) -> tuple[list[ClientReport], dict[Hashable, int], dict[Hashable, float]]:
        """The reports to aggregate, their ``weights`` and ``update_scales``: a reply whose update is
        outsized (``update_size``: its average step under the normalised rule, its whole update under
        the others) is skipped (``skipped[node] = "invalid"``) and the round's weights and τ_eff are
        computed again without it."""
        weights = self.weights(server_round, reports)
        scales = self.update_scales(server_round, reports, weights)
        work = self.aggregation.last_work if self.aggregation.weighting == "normalized" else {}
        nodes = [r.node_id for r in reports]
        unit = self.aggregation.last_unit if work else "update"
        far = self.update_size.skip(server_round, nodes, work, self.max_update_ratio, self.who, unit=unit)
        if not far:
            return list(reports), weights, scales
        skipped.update(dict.fromkeys(far, "invalid"))
        reports = [r for r in reports if r.node_id not in far]
        weights = self.weights(server_round, reports)
        return reports, weights, self.update_scales(server_round, reports, weights)

    # ------------------------------------------------------------------ round bookkeeping
    def begin_round(self, server_round: int, quotas: Mapping[Hashable, int]) -> None:
        """Remember what was assigned (the API classes call this from configure_*), and what the
        equal split would train of a node this round (the bound of the ``"equal-split"`` objective)."""
        self._assigned = dict(quotas)
        if self.allow_cycling:
            caps: list[int | None] = [None] * len(quotas)
        elif sum(quotas.values()) < self.budget:  # every node was sent all its data: the quotas are the caps
            caps = [int(q) for q in quotas.values()]
        else:
            caps = [self.bounds.caps.get(self._round_keys.get(n)) for n in quotas]
        self.aggregation.equal_share = equal_split_level(self.budget, caps)

    def predicted_makespan_s(self) -> float | None:
        """Seconds this round is expected to take: the slowest assigned node's predicted compute
        for its quota plus the per-round overhead observed last round (``_overhead_s``);
        ``None`` when a node of the round cannot be predicted (no estimate yet)."""
        keys_of = self._round_keys
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
        book = self.nodes
        self._rounds_done += 1
        row = self.account(server_round, reports, skipped)
        self.tables.add_round(row)
        held = {r.node_id: "probe" for r in reports if r.node_id in book.probation}
        held.update({n: why for n, why in self._held.items() if n not in held})
        for client in round_log.client_rows(
            server_round,
            reports,
            skipped,
            held,
            set(unobserved),
            self.last_weights,
            self.last_scales,
            book.partition_of,
            self._assigned,
        ):
            self.tables.add_client(client)
        book.probation -= {r.node_id for r in reports}
        if self.uses_probation:
            book.probation |= set(skipped)
        self._round_skipped = dict(skipped)  # the round line shows each skipped node's reason
        self.log_round(row)
        self.tables.write_round(server_round)
        self.save_state()
        return row

    def account(
        self, server_round: int, reports: Sequence[ClientReport], skipped: Mapping[Hashable, str]
    ) -> dict[str, Any]:
        """The round's figures (``round_log.round_figures``): makespan, busy-time CV, active + idle
        energy, quota spread, unprocessed samples. Baselines add their own columns."""
        row = round_log.round_figures(server_round, self.policy, self.round_budget(), self._assigned, reports, skipped)
        row["update_ratio"] = self.last_update_ratio
        return row

    def log_round(self, row: Mapping[str, Any]) -> None:
        """The one log line per round (a warning when quotas exceeded some nodes' data)."""
        round_log.log_round(row, self.round_budget(), self.quota_listing())

    def round_budget(self) -> int:
        """The samples this round's quotas share (the round line's "N of ... budgeted"): ``budget``."""
        return self.budget

    #: Up to this many nodes the round line lists every quota by partition; above, its
    #: min/median/max summary is all.
    quota_line_max_nodes: int = 20

    def quota_listing(self) -> str:
        """The round's quotas by partition for the round line (``""`` above ``quota_line_max_nodes``)."""
        owned = {n: p for n, p in self.nodes.partition_of.items() if self.nodes.owner.get(p) == n}
        # a second claimant of a partition is "node <id>" (kept apart, warned), not a second "partition p"
        return round_log.quota_listing(self._assigned, owned, self._round_skipped, self.quota_line_max_nodes)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything a restarted ServerApp needs, as JSON types (keyed by partition id; ``core_state``)."""
        return core_state.state_of(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()`` output, checked first (``core_state.restore``).

        The node id → partition map is restored too: nodes that kept their id are keyed by
        partition from the first round; a node id that changed is unknown until its reply.

        Raises
        ------
        StateFileError
            Not a state this strategy wrote, or numbers the controller cannot compute with.
            Nothing is changed then.
        ValueError
            The state was saved under another policy.
        """
        core_state.restore(self, state)

    def save_state(self) -> None:
        """Write the state to ``state_dir`` (atomically and durably) and/or the ServerApp context.

        A file write that fails (disk full…) is one error line, never an exception: the round's
        aggregate is the run's, the state file keeps the last round written and the next round
        writes it again (``state_file.write_or_log``). The context copy is kept either way.
        """
        if self.store.path is None and self.store.context is None:
            return
        self.store.save(json.dumps(self.state_dict()), self._rounds_done)

    def _resume(self) -> None:
        """Resume from the ServerApp context, else from ``state_dir`` (``StateStore.resume``).

        A state saved under another policy is refused (``ValueError`` at construction, with the
        fix); one that cannot be used is set aside with one warning and the strategy starts fresh.
        """
        where = self.store.resume(self.load_state_dict)
        if where is None:
            return
        self.tables.resumed = bool(self._rounds_done)  # a history_path is continued, not cleared
        log(INFO, "[adaptive] resumed controller state after %d rounds (%s)", self._rounds_done, where)

    # ------------------------------------------------------------------ helpers
    def forget_departed(self, live_node_ids: Iterable[Hashable]) -> list[Hashable]:
        """Drop what is kept about node ids that are no longer connected; returns them
        (``core_state.forget_departed``). The API classes call this with the grid's node ids before
        each round; memory stays linear in the live nodes."""
        return core_state.forget_departed(self, live_node_ids)

    def _forget_keys(self, ids: list[str]) -> None:
        """Forget ``"node-<id>"`` controller ids that will never be used again (``core_state.forget_keys``)."""
        core_state.forget_keys(self, ids)

    def _min_of(self) -> int:
        return int(self.min_quota) if isinstance(self.min_quota, (int, np.integer)) else 0

    def note_outcomes(self, skipped: Mapping[Hashable, str], answered: Iterable[Hashable]) -> None:
        """Remember which nodes are gone (error or no reply) and which answered, before the
        round's replies are observed (``PartitionMap.note_outcomes``)."""
        self.nodes.note_outcomes(skipped, answered)

    def note_connected(self, node_ids: Iterable[Hashable]) -> None:
        """Nodes the grid no longer lists are gone (their partition may be taken over)."""
        self.nodes.note_connected(node_ids)

    def _warn_once(self, tag: str, msg: str, *args: Any) -> None:
        if tag not in self._warned:
            self._warned.add(tag)
            log(WARNING, msg, *args)
