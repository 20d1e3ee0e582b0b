"""The adaptive strategy for Flower's Message API (``flwr.serverapp.strategy``).

Contract
--------
:class:`AdaptiveStrategy` wraps an inner Message-API strategy (``FedAvg`` by default; ``FedProx``,
``FedAdam``… work too) and changes three things:

- ``configure_train`` lets the inner strategy sample nodes and build its messages, then gives
  every node **its own** ``ConfigRecord`` carrying its quota (``keys.QUOTA``), whether it may cycle
  its data (``keys.ALLOW_CYCLING``), the round (``keys.ROUND``) and, with ``scale_batch_size``, the
  round's reference quota (``keys.REFERENCE_QUOTA``). The inner strategy's own config entries (e.g.
  FedProx's ``proximal-mu``) are kept.
- ``aggregate_train`` screens the replies **before** delegating (see
  :mod:`flwr_adaptive.strategies.train_replies` and :mod:`flwr_adaptive.strategies.screening`):
  a reply with an error, without exactly one ArrayRecord and one MetricRecord, with invalid
  telemetry, or whose arrays differ from the model sent (names, shapes, dtypes) or hold NaN/inf,
  or that is too large to screen (metric keys, list lengths, array bytes against the model sent:
  checked on sizes before any value is read) is logged and skipped (the inner FedAvg would raise
  on it, or average NaN into the model, and ``Strategy.start`` does not catch it); a second reply
  of the same node is ignored; metric keys that not every kept reply sends alike are left out of
  the metric average (never the reply). Replies are attributed by ``reply_to`` (Flower's
  NODE_UNAVAILABLE error reply comes from the SuperLink); nodes that did not answer within
  ``start(timeout=...)`` are logged too. A node listed twice by the grid is sent one message. The kept
  replies' telemetry feeds the controller, their weight key (``weighted_by_key``) is set per ``weighting``, and the
  inner strategy aggregates them; with ``weighting="normalized"`` each kept model is first
  rescaled to FedNova's step from the model sent this round
  (:mod:`flwr_adaptive.strategies.normalization`, :mod:`flwr_adaptive.strategies.sent_model`), so the
  inner strategy's own server-side logic (server learning rate, momentum, robust rules) applies to FedNova's update.
  A bad client never stops a round; the next round's split covers every node the inner strategy samples,
  so a node that is gone leaves its share to the others.
  A set-up mistake of the client app (no telemetry wrapper, the wrong decorator order, no
  ``quota_data``) shows on every reply of the first round and stops the run there with the fix
  (:mod:`flwr_adaptive.strategies.setup_check`).
- The round's aggregated train metrics: the inner strategy aggregates the user's own metrics
  (the telemetry keys are removed first) and the telemetry is added under names that say how it
  was combined (:mod:`flwr_adaptive.strategies.train_metrics`).

Everything else (evaluation, ``summary``) is the inner strategy's; evaluation replies are screened
for errors, duplicates and inconsistent keys the same way.

Cost
----
One ``RecordDict`` and ``ConfigRecord`` per node per round (the ArrayRecord is shared, not
copied); screening is O(replies × keys); see ``flwr_adaptive.strategies.core`` for the controller's share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable, Iterable, Sequence
from logging import INFO, WARNING

from flwr.app import ArrayRecord, ConfigRecord, ConfigRecordValues, Context, Message, MetricRecord
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Strategy

from flwr_adaptive import keys
from flwr_adaptive.strategies.array_screening import usable_arrays
from flwr_adaptive.strategies.core import AdaptiveCore, log
from flwr_adaptive.strategies.delegation import Delegated
from flwr_adaptive.strategies.evaluate_screening import kept_evaluate_replies
from flwr_adaptive.strategies.history import checked_history_path
from flwr_adaptive.strategies.node_wait import DEFAULT_NODE_WAIT_S, nodes_needed, wait_for_nodes
from flwr_adaptive.strategies.normalization import (
    OBJECTIVES,
    check_objective_applies,
    default_max_rescale,
)
from flwr_adaptive.strategies.options import check_not_adaptive
from flwr_adaptive.strategies.records import replace_record, with_config, with_model_dtypes
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.round_quotas import ScaleBatchSize, node_references
from flwr_adaptive.strategies.round_timeout import RoundTimeout, timed_grid
from flwr_adaptive.strategies.screening import describe_removed, harmonize_metrics
from flwr_adaptive.strategies.sent_model import SentModel
from flwr_adaptive.strategies.sent_round import SentRound
from flwr_adaptive.strategies.setup_check import CLIENT_SETUP, SetupCheck, setup_mistake
from flwr_adaptive.strategies.step_floor import default_min_local_steps
from flwr_adaptive.strategies.train_metrics import STRIPPED_KEYS, strip_telemetry, telemetry_metrics
from flwr_adaptive.strategies.train_replies import screen_replies
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["AdaptiveStrategy"]


class AdaptiveStrategy(AdaptiveCore, Strategy):
    """Adaptive sample allocation around a Message-API strategy.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy, optional
        The wrapped strategy that samples nodes and aggregates (default: ``FedAvg()``).
    budget : int, optional
        Samples per round, split among the sampled nodes (sums to it exactly).
    budget_per_node : int, optional
        Instead of ``budget``: samples per training node; each round's budget is this times the
        number of nodes sampled, so the load per node does not depend on how many are sampled.
    policy : str (default: "time")
        ``"equal"``, ``"time"``, ``"low-energy"``, ``"energy"`` or ``"min-energy"`` (see
        ``POLICIES``). ``"min-energy"`` minimises active + idle energy within ``slack``.
    smoothing : float (default: 0.5)
        EMA weight of the newest per-sample cost.
    deadband : float, optional
        Keep the current split while re-splitting gains less than this (see
        ``AllocationController``); 0 re-splits every round. ``None``: the policy's default
        (a 2 % predicted gain for the named policies; a 5 % move of the budget with ``paper=True``).
    slack : float, optional
        ``policy="min-energy"`` only: rounds may last up to ``1 + slack`` times the shortest
        possible (``math.inf``: no limit). ``None``: the policy's default (0.1).
    paper : bool (default: False)
        The paper's estimation and deadband (per-sample costs, no drift detection, the
        total-variation deadband) instead of the named policy's.
    weighting : str, optional
        How updates are aggregated: ``"normalized"`` (FedNova: each update weighs its owner's
        data share, rescaled by its local work, so the objective does not move with the quotas),
        ``"samples"`` processed this round, or ``"data-size"`` (claimed local data size, no
        rescaling). Default (``None``): ``"normalized"`` when ``allow_cycling=False`` (private
        data), ``"samples"`` when ``allow_cycling=True`` (data shared in a trusted domain).
        Claimed data sizes are capped at ``weight_cap`` (2) × the round's median claim.
    max_rescale : float, optional
        With ``weighting="normalized"``: the largest factor a node's model change is scaled by
        (>= 1). FedNova scales a node that took few local steps up to the round's mean local work
        (momentum 0.9: one step next to ten-step nodes is scaled about 35×), and its minibatch
        noise with it; the cap bounds that, and the node's share of the objective becomes
        ``∝ p_i·min(τ_eff, max_rescale·‖a_i‖₁)`` instead of its data share p_i (between FedNova
        and data-size FedAvg; ``flwr_adaptive.normalized_averaging``). ``None`` (default): 8, the
        non-IID sweep's choice (docs/results.md): it keeps a slow owner of a class whose factor
        stays below it and bounds the 1-2-step nodes of a wide fleet; 2 for
        ``policy="min-energy"`` with ``allow_cycling=False``, whose split parks its energy-hungry
        nodes at a few samples (``flwr_adaptive.strategies.normalization.default_max_rescale``).
        ``math.inf``: FedNova's factors, unbounded.
    objective : str (default: "equal-split")
        With ``weighting="normalized"``: the data weights p_i of the objective the rule keeps.
        ``"equal-split"``: each node's claimed data size, at most what the equal split would train
        of it this round (the budget evenly, a small node's unused share to the others): the
        objective FedAvg optimises under ``policy="equal"``, so moving quota does not change the
        objective the equal split had, and no claim weighs more than a fair share. On
        label-skewed data it kept the worst class at or above Equal's at the same time in every
        seed, where ``"data-size"`` fell up to 8.8 points below (docs/results.md, "The normalised rule's
        objective"). ``"data-size"``: the claimed size, capped (see ``weighting``): the pooled
        data's objective, which weighs a node with more data more than the equal split did.
    allow_cycling : bool (default: False)
        Let a client whose quota exceeds its local data cycle through it again; when False each
        quota is capped at the data size the client reports.
    min_quota : int (default: 1)
        Smallest quota any client gets (>= 1: 0 would send a sampled node nothing).
    min_local_steps : int, optional
        A floor in local optimizer steps: from its second round on, every trained node's quota
        is at least this many steps of its own batch size (learnt from the local steps and
        samples its replies report, ``keys.LOCAL_STEPS``; until a node's batch size is known it
        has no floor), within the round's equal share (so the floors always fit the budget, and
        a node under-claiming its steps gains at most Equal's quota) and its data size. The
        split then never holds a slow node at one or two steps while the others take ten, which
        would leave its update extrapolated (``"normalized"``) or its data under-weighted
        (``"samples"``). 0: no floor (``flwr_adaptive.strategies.step_floor``). ``None``
        (default): 0 for every policy (the nodes a split holds below the equal share shrink their
        batches instead, ``scale_batch_size``).
    scale_batch_size : bool, "shrink" or None (default: None)
        ``None``: ``"shrink"`` with the normalised weighting (the default with private data) and
        no step floor, else ``False`` (a floor learns each node's batch size from its replies, so
        shrunk batches would lower it: ``True`` or ``"shrink"`` with a floor is refused). ``None``
        is resolved again when ``weighting`` or ``min_local_steps`` is set on the strategy later;
        an explicit value is kept.
        ``False``: no reference quota is sent.
        ``True``: send every node the round's reference quota (``keys.REFERENCE_QUOTA``: the
        equal share, budget // nodes trained, or of the samples trained when the budget exceeds
        the nodes' data) with its own. A client using ``quota_data`` on a DataLoader (or
        ``quota_batch_size`` in its own loop) then reads its quota in batches scaled by quota /
        reference, so every node takes the local steps an equal split would give it: a fast node
        takes bigger batches, not more steps, which on private non-IID data keeps FedAvg's
        objective without rescaling updates (``flwr_adaptive.clients.batch_scaling``).
        ``"shrink"``: node i is sent ``max(reference, quota_i)``, so only the nodes below the
        equal share shrink their batches (and take the reference's steps); the others keep the
        user's batch size and take more steps, which the normalised rule corrects. The
        telemetry still reports the steps taken, so a client that ignores it is aggregated as
        without it.
    forget_after : int (default: 3)
        A participant that has not reported for this many of its rounds is treated as new.
    cost_clip : float (default: 100.0)
        Each cost ratio to the median is clipped to ``[1/cost_clip, cost_clip]``.
    trust : CostTrust or bool (default: True)
        What the server believes of each claimed cost (see ``flwr_adaptive.strategies.trust``):
        ``True`` the default rules (a claim below 1/4 of the others' median is taken at 1/4 of it,
        one below 1/16 at the median, an estimate falls at most 2× per round, the server's own
        timing bounds a claim), a ``CostTrust(...)`` to tune them (one per strategy: it keeps
        per-node strikes), ``False`` to believe every claim (clients you control).
    state_dir : str or Path, optional
        Folder where the controller state is saved after every round and resumed from.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state``.
    round_timeout : RoundTimeout, optional
        Each training round's timeout from the prediction: ``factor`` × the predicted makespan
        (compute + the overhead observed last round), within ``[floor_s, ceiling_s]``
        (``flwr_adaptive.strategies.round_timeout``); ``start(timeout=...)`` stays the upper
        bound. A node that misses it is skipped and on probation like any timeout (logged).
    history_path : str or Path, optional
        CSV to which every round's history row is appended as the round ends (its per-client
        rows go to ``<stem>-clients.csv`` beside it); a fresh run starts the files anew, a
        resumed one continues them. Needs no call after the last round (the legacy API's loop
        is Flower's); ``save_history(path)`` writes the same tables on demand.

    Examples
    --------
    The one line that changes in a ServerApp generated by ``flwr new``::

        strategy = AdaptiveStrategy(FedAvg(fraction_train=fraction_train), budget=6000)
    """

    #: Checked when set (after construction too); keeps the plausibility rule in step (``round_quotas``).
    scale_batch_size = ScaleBatchSize()

    def __init__(
        self,
        strategy: Strategy | None = None,
        *,
        budget: int | None = None,
        budget_per_node: int | None = None,
        policy: str = "time",
        smoothing: float = 0.5,
        deadband: float | None = None,
        slack: float | None = None,
        paper: bool = False,
        weighting: str | None = None,
        max_rescale: float | None = None,
        objective: str = OBJECTIVES[0],
        allow_cycling: bool = False,
        min_quota: int = 1,
        min_local_steps: int | None = None,
        scale_batch_size: bool | str | None = None,
        forget_after: int = 3,
        cost_clip: float = 100.0,
        trust: CostTrust | bool = True,
        state_dir: str | os.PathLike | None = None,
        context: Context | None = None,
        history_path: str | os.PathLike | None = None,
        round_timeout: RoundTimeout | None = None,
    ) -> None:
        self.strategy = FedAvg() if strategy is None else strategy
        #: This round's messages, their send time and the replies' arrival (``sent_round``).
        self.sent_round = SentRound()
        #: This round's model: what replies' arrays are screened and rescaled against (``sent_model``).
        self.sent_model = SentModel()
        if not isinstance(self.strategy, Strategy):
            legacy = type(self.strategy).__module__.startswith("flwr.server.strategy")
            raise ValueError(
                f"strategy must be a flwr.serverapp.strategy.Strategy (e.g. AdaptiveStrategy(FedAvg(), budget=...) "
                f"with FedAvg from flwr.serverapp.strategy), got {type(self.strategy).__name__} {self.strategy!r:.80}"
                + (
                    "; for a flwr.server.strategy one use flwr_adaptive.strategies.LegacyAdaptiveStrategy"
                    if legacy
                    else ""
                )
            )
        check_not_adaptive(self.strategy, type(self).__name__)
        default_max_rescale(max_rescale, policy, allow_cycling)  # a bad value fails before anything is built
        min_local_steps = default_min_local_steps(min_local_steps, policy, allow_cycling)
        AdaptiveCore.__init__(
            self,
            budget,
            policy,
            budget_per_node=budget_per_node,
            smoothing=smoothing,
            deadband=deadband,
            slack=slack,
            paper=paper,
            weighting=weighting,
            allow_cycling=allow_cycling,
            min_quota=min_quota,
            forget_after=forget_after,
            cost_clip=cost_clip,
            trust=trust,
            state_dir=state_dir,
            context=context,
        )
        self.history_path = checked_history_path(history_path)
        self.max_rescale = max_rescale  # resolved by the setting, which keeps the value given
        check_objective_applies(objective, self.weighting)
        self.objective = objective
        self.min_local_steps = min_local_steps
        #: Send the round's reference quota so that clients scale their batch size (``round_quotas``).
        self.scale_batch_size = scale_batch_size  # resolved, and equal_steps set, by ScaleBatchSize
        self._references: dict[Hashable, int] = {}  # this round's reference quota per node, when scale_batch_size
        #: Stops a run whose client app was set up wrongly, in its first round (``setup_check``).
        self.setup_check = SetupCheck("message")
        if round_timeout is not None and not isinstance(round_timeout, RoundTimeout):
            raise ValueError(
                f"round_timeout must be a flwr_adaptive.strategies.round_timeout.RoundTimeout, got "
                f"{type(round_timeout).__name__} {round_timeout!r}; "
                "e.g. RoundTimeout(factor=3, floor_s=30, ceiling_s=600)"
            )
        self.round_timeout = round_timeout
        self._round_limit: tuple[float, float | None] | None = None  # (timeout, predicted) of this round

    #: Seconds ``configure_train`` waits for the nodes the inner strategy needs (its
    #: ``min_available_nodes`` / ``min_train_nodes``) before the run fails with
    #: :class:`~flwr_adaptive.strategies.node_wait.NodeWaitError` (Flower's own wait never ends);
    #: a progress line at least every 30 s meanwhile. Set it on the instance to change it.
    node_wait_s: float = DEFAULT_NODE_WAIT_S
    #: What the operator should pass to get the nodes (in the progress lines and the error).
    node_wait_hint: str = "start more SuperNodes, or lower the inner strategy's min_available_nodes / min_train_nodes"

    #: When this round's messages were sent, and when the TimedGrid pulled each reply (``sent_round``).
    _sent_at = Delegated("sent_round", "sent_at")
    _reply_times = Delegated("sent_round", "reply_times")

    def start(self, grid: Grid, *args, **kwargs):
        """Flower's ``Strategy.start`` on a ``TimedGrid`` (replies pulled every 0.5 s and timed on
        this clock; with ``round_timeout`` each training round waits at most ``round_timeout_s()``)."""
        return super().start(self.timed_grid(grid), *args, **kwargs)

    def timed_grid(self, grid: Grid) -> Grid:
        """``grid`` wrapped in a :class:`TimedGrid` when ``round_timeout`` or ``server_time`` is
        on, else unchanged: see :func:`~flwr_adaptive.strategies.round_timeout.timed_grid`."""
        return timed_grid(grid, self)

    def round_timeout_s(self) -> float | None:
        """This round's timeout in seconds (``None`` without ``round_timeout``): see ``RoundTimeout``."""
        if self.round_timeout is None:
            return None
        predicted = self.predicted_makespan_s()
        limit = self.round_timeout.seconds(predicted)
        self._round_limit = (limit, predicted)
        return limit

    #: Metric keys removed from each kept reply before the inner strategy aggregates the metrics
    #: (:mod:`flwr_adaptive.strategies.train_metrics`); their aggregate is added under named keys.
    stripped_metric_keys: frozenset = STRIPPED_KEYS

    @property
    def weighted_by_key(self) -> str:
        """The metric key the inner strategy weights by (Flower's ``num-examples``)."""
        return getattr(self.strategy, "weighted_by_key", keys.NUM_EXAMPLES)

    def summary(self) -> None:
        """Log the adaptive settings, then the inner strategy's summary."""
        budget = (
            f"budget={self.budget_per_node} samples per training node/round"
            if self.budget_per_node
            else f"budget={self.budget} samples/round"
        )
        log(
            INFO,
            "\t├──> Adaptive allocation: policy=%s, %s, weighting=%s, allow_cycling=%s",
            self.policy,
            budget,
            self.weighting,
            self.allow_cycling,
        )
        log(INFO, "\t├──> Inner strategy: %s", type(self.strategy).__name__)
        self.strategy.summary()

    # ------------------------------------------------------------------ train
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The inner strategy's messages, each with its own ConfigRecord carrying its quota.

        First waits (at most ``node_wait_s``) for the nodes the inner strategy needs, so that its
        own endless wait never starts (see :mod:`flwr_adaptive.strategies.node_wait`).
        """
        wait_for_nodes(
            grid,
            nodes_needed(self.strategy),
            timeout_s=self.node_wait_s,
            hint=self.node_wait_hint,
            what=f"round {server_round}",
        )
        messages = self._one_per_node(
            server_round, list(self.strategy.configure_train(server_round, arrays, config, grid))
        )
        try:
            connected = set(grid.get_node_ids())
        except Exception:  # noqa: BLE001 - a grid that cannot list its nodes: ownership stays as it is
            connected = None
        if connected is not None:
            self.note_connected(connected)
            self.forget_departed(connected)  # bounded state under node-id churn (docs/scale.md)
        self.sent_model.start(arrays)  # replies are screened against it; normalised aggregation rescales from it
        chosen = self.participants(server_round, [m.metadata.dst_node_id for m in messages])
        quotas = self.quotas_for(server_round, chosen)
        self.begin_round(server_round, quotas)
        self.aggregation.step_reference, self._references = node_references(
            self.scale_batch_size, self.budget, quotas, self.min_local_steps
        )
        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node in quotas:
                out.append(self._with_quota(msg, quotas[node], server_round))
        # The Grid sets each message's id in place when it sends it: replies are matched to nodes
        # through ``reply_to`` (Flower's own error replies come from the SuperLink, not the node).
        self.sent_round.start({m.metadata.dst_node_id: m for m in out}, time.time())
        return out

    def _one_per_node(self, server_round: int, messages: list[Message]) -> list[Message]:
        """The messages with one per destination: a node listed twice trains (and counts) once."""
        seen: set[Hashable] = set()
        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node in seen:
                log(
                    WARNING,
                    "[adaptive] round %s: node %s was listed twice by the grid; it is sent one message",
                    server_round,
                    node,
                )
                continue
            seen.add(node)
            out.append(msg)
        return out

    def sender_of(self, msg: Message) -> Hashable:
        """The node a reply answers for: by ``reply_to`` (the message we sent it), else its source
        (``SentRound.sender_of``: Flower's error reply for a node gone offline counts as that node's)."""
        return self.sent_round.sender_of(msg)

    def _with_quota(self, msg: Message, quota: int, server_round: int) -> Message:
        """``msg`` with the node's quota, ``allow_cycling``, the round and (``scale_batch_size``) the round's
        reference quota in its config (``records.with_config``)."""
        extra: dict[str, ConfigRecordValues] = {
            keys.QUOTA: int(quota),
            keys.ALLOW_CYCLING: self.allow_cycling,
            keys.ROUND: server_round,
        }
        reference = self._references.get(msg.metadata.dst_node_id)
        if reference is not None:
            extra[keys.REFERENCE_QUOTA] = reference
        return with_config(msg, extra, getattr(self.strategy, "configrecord_key", "config"))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen the replies, observe the telemetry, set weights, let the inner aggregate.

        Raises
        ------
        SetupError
            In the first round with replies, when every reply shows the same set-up mistake of
            the client app (see :mod:`flwr_adaptive.strategies.setup_check`).
        """
        replies = list(replies)
        # first: a set-up mistake stops the run with one error, not a warning per reply
        self.setup_check.check_setup(server_round, *self.setup_evidence(replies))
        kept, reports, skipped = self.screen_train_replies(server_round, replies)
        self._note_overhead(reports)
        self.note_outcomes(skipped, [r.node_id for r in reports])
        accepted = self.observe_replies(server_round, reports)
        settled, weights, scales = self.settled_weights(server_round, reports, skipped)
        left = {r.node_id for r in settled}
        kept, reports = [m for m, r in zip(kept, reports) if r.node_id in left], settled
        overflowed = set()  # only with max_rescale=inf: screening refuses a reply a bounded factor can overflow
        for msg, report in zip(kept, reports):
            self._records_of[id(msg)][1][self.weighted_by_key] = weights[report.node_id]
            if scales.get(report.node_id, 1.0) != 1.0 and (reason := self._rescale(msg, scales[report.node_id])):
                skipped[report.node_id] = "invalid"
                overflowed.add(report.node_id)
                log(WARNING, "[adaptive] round %s: %s: %s; skipped", server_round, self.who(report.node_id), reason)
        if overflowed:
            pairs = [(m, r) for m, r in zip(kept, reports) if r.node_id not in overflowed]
            kept, reports = [m for m, _ in pairs], [r for _, r in pairs]
        self.harmonize(server_round, kept, [r.node_id for r in reports], train=True)
        for msg in kept:  # the inner strategy averages the user's own metrics only
            strip_telemetry(
                next(iter(msg.content.metric_records.values())),
                keep=self.weighted_by_key,
                stripped=self.stripped_metric_keys,
            )
        arrays, metrics = self.strategy.aggregate_train(server_round, kept) if kept else (None, None)
        if arrays is not None and (sent := self.sent_model.numpy()) is not None:
            arrays = with_model_dtypes(arrays, sent)  # the model keeps its dtypes (integer buffers too)
        if kept:
            metrics = MetricRecord({**(dict(metrics) if metrics is not None else {}), **telemetry_metrics(reports)})
        observed = {r.node_id for r in accepted}
        self.end_round(server_round, reports, skipped, [r.node_id for r in reports if r.node_id not in observed])
        return arrays, metrics

    def _rescale(self, msg: Message, scale: float) -> str | None:
        """Replace the reply's model x_i by ``x + scale·(x_i − x)`` (x: the model sent this round,
        :meth:`SentModel.rescaled`); why the reply cannot be averaged (``None``: it can)."""
        record = self._records_of[id(msg)][0]
        new, reason = self.sent_model.rescaled(record, scale, self.aggregation.max_rescale)
        if new is not None:
            replace_record(msg, record, new)
            self._records_of[id(msg)] = (new, self._records_of[id(msg)][1])
        return reason

    def setup_evidence(self, replies: list[Message]) -> tuple[dict[Hashable, str | None], dict[Hashable, str]]:
        """What each reply says about the client app's set-up (see ``SetupCheck.check_setup``)."""
        mistakes: dict[Hashable, str | None] = {}
        reasons: dict[Hashable, str] = {}
        for msg in replies:
            node = self.sender_of(msg)
            if node not in self._assigned:
                continue
            if msg.has_error():
                reason = msg.error.reason or ""
                if keys.SETUP_ERROR_MARK in reason or msg.error.code == ErrorCode.LOAD_CLIENT_APP_EXCEPTION:
                    mistakes[node], reasons[node] = CLIENT_SETUP, reason
                continue  # other errors (a crash in training) say nothing about the set-up
            records = list(msg.content.metric_records.values())
            mistakes[node] = setup_mistake(records[0] if records else {}, self.assigned_quota(node))
        return mistakes, reasons

    def screen_train_replies(
        self, server_round: int, replies: list[Message]
    ) -> tuple[list[Message], list[ClientReport], dict[Hashable, str]]:
        """Split replies into usable ones (with their reports) and skipped ones (with a reason)."""
        return screen_replies(self, server_round, replies)

    def _note_overhead(self, reports: Sequence[ClientReport]) -> None:
        """The per-round overhead the server saw: the median of (observed − reported compute)."""
        observed = self.observed_seconds(reports)
        gaps = [max(observed[r.node_id] - r.time_s, 0.0) for r in reports if r.node_id in observed]
        if gaps:
            self._overhead_s = float(sorted(gaps)[len(gaps) // 2])

    def observed_seconds(self, reports: Sequence[ClientReport]) -> dict[Hashable, float]:
        """Per node, the seconds the server observed between its instruction and its reply
        (``SentRound.note_arrival``)."""
        return self.sent_round.observed(r.node_id for r in reports)

    def _usable_arrays(
        self, server_round: int, pairs: list[tuple[Message, ClientReport]], skipped: dict[Hashable, str]
    ) -> list[tuple[Message, ClientReport]]:
        """Keep the replies whose arrays match the model sent, are finite and can be rescaled within
        their dtype (``array_screening``)."""
        bound = self.sent_model.bound(self.aggregation.weighting, self.aggregation.max_rescale)
        self.update_size.start(self.sent_model.numpy())
        return usable_arrays(
            server_round,
            pairs,
            skipped,
            self.sent_model.layout,
            getattr(self, "_records_of", {}),
            self.who,
            lambda node: self.update_size.value_check(node, bound),
        )

    _records_of: dict[int, tuple[ArrayRecord, MetricRecord]]  # this round: id(reply) -> its records (screening)

    #: Metric keys whose lists a subclass bounds by length itself before reading them (the size
    #: screen counts each as one value): HFL's per-rank lists.
    lists_sized_elsewhere: frozenset = frozenset()

    #: Whether list metrics must have one length across replies (Flower's default metric average
    #: zips them strictly); the hierarchical strategy's per-rank lists differ in length.
    strict_metric_lists: bool = True

    def harmonize(self, server_round: int, kept: list[Message], nodes: list[Hashable], train: bool) -> None:
        """Make the kept replies' metric keys consistent, in place, for the inner aggregation.

        Consistency is decided on what aggregation needs: every reply keeps the keys all kept
        replies carry (telemetry and the weight key were validated already); a key only some send
        is removed from those replies with one log line. Nobody is skipped for an extra key, so a
        colluding majority cannot get an honest minority left out.
        """
        required = (
            {self.weighted_by_key, *keys.TELEMETRY_KEYS}
            if train
            else {self.strategy.weighted_by_key}
            if hasattr(self.strategy, "weighted_by_key")
            else set()
        )
        removed = harmonize_metrics([m.content for m in kept], required, self.strict_metric_lists)
        if removed:
            log(
                WARNING,
                "[adaptive] round %s: metric keys not sent alike by every kept reply are left out "
                "of the %s metric average (the nodes named sent them missing, not finite or of another kind "
                "than the others): %s",
                server_round,
                "train" if train else "evaluation",
                describe_removed(removed, nodes),
            )

    # ------------------------------------------------------------------ evaluate
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The inner strategy's evaluation messages, unchanged."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Drop error replies, unusable weights and inconsistent keys, then the inner strategy aggregates.

        The screen is :func:`~flwr_adaptive.strategies.evaluate_screening.kept_evaluate_replies`;
        weights summing to 0 give no aggregate (``None``) for the round.
        """
        kept = kept_evaluate_replies(server_round, replies, getattr(self.strategy, "weighted_by_key", None))
        if kept is None:
            return None
        self.harmonize(server_round, kept, [m.metadata.src_node_id for m in kept], train=False)
        return self.strategy.aggregate_evaluate(server_round, kept) if kept else None
