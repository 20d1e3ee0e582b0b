"""The adaptive strategy for Flower's legacy Strategy API (``flwr.server.strategy``).

Contract
--------
:class:`LegacyAdaptiveStrategy` wraps an inner legacy strategy (``FedAvg`` by default) and changes
two things:

- ``configure_fit`` lets the inner strategy sample clients and build its ``FitIns``, then returns a
  **distinct** ``FitIns`` per client whose config adds its quota (``keys.QUOTA``),
  ``keys.ALLOW_CYCLING``, ``keys.ROUND`` and (``scale_batch_size``) ``keys.REFERENCE_QUOTA`` to the
  inner strategy's config.
- ``aggregate_fit`` reads each result's telemetry; results with invalid telemetry are logged and
  left out, clients in ``failures`` or without a result (round timeout) are logged; the kept
  results' ``num_examples`` is set per ``weighting`` (with ``"normalized"`` their parameters are
  first rescaled to FedNova's step from the parameters sent: :mod:`flwr_adaptive.strategies.normalization`)
  and the inner strategy aggregates them
  (``failures`` are passed on unchanged, so the inner ``accept_failures`` still applies to them).
  The inner strategy's ``fit_metrics_aggregation_fn`` sees each result's metrics without the
  telemetry keys; the telemetry is added to the aggregate under names that say how it was
  combined (:mod:`flwr_adaptive.strategies.train_metrics`). A set-up mistake of the client app
  (no ``TelemetryClient``, no ``quota_data``) shows on every result of the first round and stops
  the run there with the fix (:mod:`flwr_adaptive.strategies.setup_check`).

Node ids: ``ClientProxy.cid`` is ``str(node_id)`` in Flower ≥ 1.13; it is parsed to ``int`` when
possible. Everything else (evaluation, ``initialize_parameters``, ``evaluate``) is the inner
strategy's.

Cost
----
One ``FitIns`` (a dict copy; parameters shared) per client per round; see ``flwr_adaptive.strategies.core``.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from dataclasses import replace
from logging import WARNING

from flwr.app import Context
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg, Strategy

from flwr_adaptive import keys
from flwr_adaptive.normalized_averaging import rescale_update
from flwr_adaptive.strategies.core import AdaptiveCore, log
from flwr_adaptive.strategies.evaluate_screening import kept_evaluate_results
from flwr_adaptive.strategies.history import checked_history_path
from flwr_adaptive.strategies.node_wait import DEFAULT_NODE_WAIT_S, ClientManagerNodes, nodes_needed, wait_for_nodes
from flwr_adaptive.strategies.normalization import (
    OBJECTIVES,
    check_objective_applies,
    default_max_rescale,
)
from flwr_adaptive.strategies.options import check_not_adaptive
from flwr_adaptive.strategies.reports import ClientReport, parse_report
from flwr_adaptive.strategies.round_quotas import ScaleBatchSize, node_references
from flwr_adaptive.strategies.screening import (
    ArrayLayout,
    at_model_dtype,
    bounded_rescale,
    check_ndarrays,
    lower_precision,
    ndarray_layout,
    size_reason,
    unbounded_rescale,
)
from flwr_adaptive.strategies.setup_check import CLIENT_SETUP, SetupCheck, setup_mistake
from flwr_adaptive.strategies.step_floor import default_min_local_steps
from flwr_adaptive.strategies.train_metrics import telemetry_metrics, user_metrics
from flwr_adaptive.strategies.trust import CostTrust
from flwr_adaptive.strategies.update_size import ValueCheck

__all__ = ["LegacyAdaptiveStrategy", "node_id_of"]


def _connected(client_manager: ClientManager) -> set[Hashable] | None:
    """Node ids of the manager's clients, or ``None`` when it cannot list them."""
    try:
        return {node_id_of(proxy) for proxy in client_manager.all().values()}
    except Exception:  # noqa: BLE001 - any manager of the user's: listing is optional
        return None


def node_id_of(proxy: ClientProxy) -> Hashable:
    """The node id behind a legacy ``ClientProxy`` (int when its cid is numeric)."""
    try:
        return int(proxy.cid)
    except (TypeError, ValueError):
        return proxy.cid


class LegacyAdaptiveStrategy(AdaptiveCore, Strategy):
    """Adaptive sample allocation around a legacy (``flwr.server.strategy``) strategy.

    Parameters
    ----------
    strategy : flwr.server.strategy.Strategy, optional
        The wrapped strategy that samples clients and aggregates (default: ``FedAvg()``).
    budget : int, optional
        Samples per round, split among the sampled clients (sums to it exactly).
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
        Which claimed costs the server believes: ``True`` the default rules, a ``CostTrust(...)``
        to tune them, ``False`` every claim (see ``AdaptiveStrategy``).
    state_dir : str or Path, optional
        Folder where the controller state is saved after every round and resumed from.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state``.
    history_path : str or Path, optional
        CSV to which every round's history row is appended as the round ends (its per-client
        rows go to ``<stem>-clients.csv`` beside it); a fresh run starts the files anew, a
        resumed one continues them. Needs no call after the last round (the legacy API's loop
        is Flower's); ``save_history(path)`` writes the same tables on demand.

    Examples
    --------
    In a ``server_fn``::

        strategy = LegacyAdaptiveStrategy(FedAvg(fraction_fit=1.0), budget=6000)
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=10))
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
    ) -> None:
        self.strategy = FedAvg() if strategy is None else strategy
        if not isinstance(self.strategy, Strategy):
            raise ValueError(
                f"strategy must be a flwr.server.strategy.Strategy, got "
                f"{type(self.strategy).__name__}; for a flwr.serverapp.strategy one use "
                "flwr_adaptive.strategies.AdaptiveStrategy"
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
        #: Stops a run whose client app was set up wrongly, in its first round; its errors name
        #: ``TelemetryClient``, not ``@telemetry_train`` (``setup_check``).
        self.setup_check = SetupCheck("legacy")

    #: Seconds ``configure_fit`` waits for the clients the inner strategy needs
    #: (``min_available_clients`` / ``min_fit_clients``) before the run fails with
    #: :class:`~flwr_adaptive.strategies.node_wait.NodeWaitError` (Flower's own wait is a silent
    #: day); a progress line at least every 30 s meanwhile. Set it on the instance to change it.
    node_wait_s: float = DEFAULT_NODE_WAIT_S
    #: What the operator should pass to get the clients (in the progress lines and the error).
    node_wait_hint: str = "start more SuperNodes, or lower the inner strategy's min_available_clients / min_fit_clients"

    def __repr__(self) -> str:
        return f"LegacyAdaptiveStrategy({self.strategy!r}, budget={self.budget}, policy={self.policy!r})"

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """The inner strategy's initial parameters."""
        return self.strategy.initialize_parameters(client_manager)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """The inner strategy's ``FitIns``, one distinct copy per client with its quota.

        First waits (at most ``node_wait_s``) for the clients the inner strategy needs, so that
        its own silent wait never starts (see :mod:`flwr_adaptive.strategies.node_wait`).
        """
        # A manager that cannot list its clients is neither waited for (its own sampling waits)
        # nor pruned.
        if _connected(client_manager) is not None:
            wait_for_nodes(
                ClientManagerNodes(client_manager),
                nodes_needed(self.strategy),
                timeout_s=self.node_wait_s,
                hint=self.node_wait_hint,
                what=f"round {server_round}",
            )
        connected = _connected(client_manager)
        if connected is not None:
            self.forget_departed(connected)  # bounded state under node-id churn (docs/scale.md)
        pairs = self.strategy.configure_fit(server_round, parameters, client_manager)
        try:
            # the model of this round: the layout screens results, normalised aggregation rescales from it
            self._sent_ndarrays: list | None = parameters_to_ndarrays(parameters)
            self._reference_layout: ArrayLayout | None = ndarray_layout(self._sent_ndarrays)
        except Exception:  # noqa: BLE001 - parameters of another tensor type: results are compared with each other
            self._sent_ndarrays = None
            self._reference_layout = None
        by_node: dict[Hashable, tuple[ClientProxy, FitIns]] = {}
        for proxy, ins in pairs:
            if node_id_of(proxy) in by_node:
                log(
                    WARNING,
                    "[adaptive] round %s: client %s was sampled twice; it is sent one FitIns",
                    server_round,
                    node_id_of(proxy),
                )
                continue
            by_node[node_id_of(proxy)] = (proxy, ins)
        chosen = self.participants(server_round, list(by_node))
        quotas = self.quotas_for(server_round, chosen)
        self.begin_round(server_round, quotas)
        self.aggregation.step_reference, references = node_references(
            self.scale_batch_size, self.budget, quotas, self.min_local_steps
        )
        out = []
        for node, q in quotas.items():
            proxy, ins = by_node[node]
            config: dict[str, Scalar] = {
                **ins.config,
                keys.QUOTA: int(q),
                keys.ALLOW_CYCLING: self.allow_cycling,
                keys.ROUND: server_round,
            }
            if node in references:
                config[keys.REFERENCE_QUOTA] = references[node]
            out.append((proxy, FitIns(ins.parameters, config)))
        return out

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Screen results, observe telemetry, set ``num_examples``, let the inner aggregate.

        Raises
        ------
        SetupError
            In the first round with results, when every result shows the same set-up mistake of
            the client app (see :mod:`flwr_adaptive.strategies.setup_check`).
        """
        # first: a set-up mistake stops the run with one error, not a warning per reply
        self.setup_check.check_setup(server_round, *self.setup_evidence(results, failures))
        kept, reports, skipped = self.screen_fit_results(server_round, results, failures)
        self.note_outcomes(skipped, [r.node_id for r in reports])
        accepted = self.observe_replies(server_round, reports)
        reports, weights, scales = self.settled_weights(server_round, reports, skipped)
        left = {r.node_id for r in reports}
        kept = [(proxy, res) for proxy, res in kept if node_id_of(proxy) in left]
        # the inner strategy's metric function sees the user's own metrics, not the telemetry
        reweighted, overflowed = [], set()
        for proxy, res in kept:
            node = node_id_of(proxy)
            parameters, reason = self._rescaled(res.parameters, scales.get(node, 1.0))
            if reason:
                skipped[node] = "invalid"
                overflowed.add(node)
                log(WARNING, "[adaptive] round %s: %s: %s; skipped", server_round, self.who(node), reason)
                continue
            reweighted.append(
                (
                    proxy,
                    replace(
                        res, parameters=parameters, num_examples=int(weights[node]), metrics=user_metrics(res.metrics)
                    ),
                )
            )
        reports = [r for r in reports if r.node_id not in overflowed]
        if reweighted:
            params, metrics = self.strategy.aggregate_fit(server_round, reweighted, failures)
            params = self._at_model_dtypes(params)
            metrics = {**(metrics or {}), **telemetry_metrics(reports)}
        else:
            params, metrics = None, {}
        observed = {r.node_id for r in accepted}
        self.end_round(server_round, reports, skipped, [r.node_id for r in reports if r.node_id not in observed])
        return params, metrics

    def _at_model_dtypes(self, params: Parameters | None) -> Parameters | None:
        """The aggregate with every array the average moved off the model's dtype put back at it
        (``screening.at_model_dtype``: a float64 model whose first reply was float32 came back float32,
        and every float64 reply of the next round was refused)."""
        sent = getattr(self, "_sent_ndarrays", None)
        if params is None or sent is None:
            return params
        arrays = parameters_to_ndarrays(params)
        if len(arrays) != len(sent) or all(a.dtype == m.dtype for a, m in zip(arrays, sent)):
            return params
        return ndarrays_to_parameters([at_model_dtype(a, m.dtype) for a, m in zip(arrays, sent)])

    def _rescaled(self, parameters: Parameters, scale: float) -> tuple[Parameters, str | None]:
        """``x + scale·(x_i − x)`` of a result's parameters (x: the model sent this round), and why
        they cannot be averaged (``None``: they can): a rescaled update that overflows the model's
        dtype is refused, not averaged."""
        sent = getattr(self, "_sent_ndarrays", None)
        if scale == 1.0 or sent is None:
            return parameters, None
        moved = rescale_update(sent, parameters_to_ndarrays(parameters), scale)
        # a bounded factor was checked at screening (screening.RescaleBound); an unbounded one is checked here
        if unbounded_rescale(self.aggregation.max_rescale) and (reason := check_ndarrays(moved, None)):
            return parameters, f"its update rescaled by {scale:.3g}: {reason}"
        return ndarrays_to_parameters(moved), None

    def setup_evidence(
        self, results: list[tuple[ClientProxy, FitRes]], failures: list[tuple[ClientProxy, FitRes] | BaseException]
    ) -> tuple[dict[Hashable, str | None], dict[Hashable, str]]:
        """What each result says about the client app's set-up (see ``SetupCheck.check_setup``)."""
        mistakes: dict[Hashable, str | None] = {}
        reasons: dict[Hashable, str] = {}
        for proxy, res in results:
            node = node_id_of(proxy)
            if node in self._assigned:
                mistakes[node] = setup_mistake(res.metrics or {}, self.assigned_quota(node))
        for failure in failures:
            text = str(failure) if isinstance(failure, BaseException) else failure[1].status.message
            if keys.SETUP_ERROR_MARK in (text or "") and not isinstance(failure, BaseException):
                mistakes[node_id_of(failure[0])], reasons[node_id_of(failure[0])] = CLIENT_SETUP, text
        return mistakes, reasons

    def screen_fit_results(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[list[tuple[ClientProxy, FitRes]], list[ClientReport], dict[Hashable, str]]:
        """Split results into usable ones (with reports) and skipped nodes (with a reason)."""
        skipped: dict[Hashable, str] = {}
        kept, reports = [], []
        seen: set[Hashable] = set()
        sent = getattr(self, "_sent_ndarrays", None)
        by_name = None if sent is None else {str(i): a for i, a in enumerate(sent)}
        bound = bounded_rescale(self.aggregation.weighting, self.aggregation.max_rescale, by_name)
        self.update_size.start(by_name)
        for proxy, res in results:
            node = node_id_of(proxy)
            if node not in self._assigned:
                log(
                    WARNING,
                    "[adaptive] round %s: result from client %s that was not sent a quota this round: skipped",
                    server_round,
                    node,
                )
                continue
            if node in seen:
                log(
                    WARNING,
                    "[adaptive] round %s: %s returned more than one result; only its first counts",
                    server_round,
                    self.who(node),
                )
                continue
            seen.add(node)
            metrics = res.metrics if isinstance(res.metrics, Mapping) else {}
            tensors = getattr(res.parameters, "tensors", None)
            if reason := size_reason(
                metrics,
                None if tensors is None else {str(i): len(t) for i, t in enumerate(tensors)},
                getattr(self, "_reference_layout", None),
            ):
                skipped[node] = "invalid"
                log(WARNING, "[adaptive] round %s: client %s: %s; skipped unread", server_round, node, reason)
                continue
            self.note_partition(node, metrics)
            try:
                report = parse_report(node, metrics, self.assigned_quota(node))
            except ValueError as err:
                skipped[node] = "invalid"
                log(WARNING, "[adaptive] round %s: %s; skipped", server_round, err)
                continue
            res, reason = self._screened_arrays(res, self.update_size.value_check(node, bound))
            if reason:
                skipped[node] = "invalid"
                log(
                    WARNING,
                    "[adaptive] round %s: %s: %s; skipped (its update would break or corrupt the average)",
                    server_round,
                    self.who(node),
                    reason,
                )
                continue
            kept.append((proxy, res))
            reports.append(report)
        for failure in failures:
            if isinstance(failure, BaseException):
                log(WARNING, "[adaptive] round %s: a client failed: %r; skipped", server_round, failure)
            else:
                node = node_id_of(failure[0])
                skipped[node] = "error"
                log(
                    WARNING,
                    "[adaptive] round %s: %s failed (%s); skipped",
                    server_round,
                    self.who(node),
                    failure[1].status.message,
                )
        answered = {node_id_of(p) for p, _ in results}
        for node in self._assigned:
            if node not in answered and node not in skipped:
                skipped[node] = "no-reply"
                log(
                    WARNING,
                    "[adaptive] round %s: no result from %s (error or timeout); skipped",
                    server_round,
                    self.who(node),
                )
        return kept, reports, skipped

    def _screened_arrays(self, res: FitRes, value_check: ValueCheck | None = None) -> tuple[FitRes, str | None]:
        """``res`` with its arrays at the model's precision, and why they cannot be averaged into the
        model (``None``: they can). An array at lower precision than the model's is cast up
        (``screening.lower_precision``: a reply's precision must not become the model's);
        ``value_check(str(i), array)`` runs on each (``screening.RescaleBound``, the update-size screen)."""
        try:
            arrays = parameters_to_ndarrays(res.parameters)
        except Exception as err:  # noqa: BLE001 - undecodable parameters are the client's fault
            return res, f"parameters cannot be decoded ({type(err).__name__}: {err})"
        reference = getattr(self, "_reference_layout", None)
        if reason := check_ndarrays(arrays, reference):
            return res, reason
        if value_check is not None:
            for i, values in enumerate(arrays):
                if reason := value_check(str(i), values):
                    return res, reason.replace("array '", "array #").replace("' could", " could")
        if dtypes := lower_precision(ndarray_layout(arrays), reference):
            arrays = [a.astype(dtypes[str(i)]) if str(i) in dtypes else a for i, a in enumerate(arrays)]
            res = replace(res, parameters=ndarrays_to_parameters(arrays))
        return res, None

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        """The inner strategy's evaluation instructions, unchanged."""
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        """The inner strategy's evaluation aggregate of the usable results.

        The screen is :func:`~flwr_adaptive.strategies.evaluate_screening.kept_evaluate_results`
        (a client's second result, a ``num_examples`` that is not an int in ``[0, MAX_COUNT]``,
        a loss that is not finite); results weighing 0 examples in total give no aggregate.
        """
        kept = kept_evaluate_results(server_round, results, node_id_of)
        if kept is None:
            return None, {}
        return self.strategy.aggregate_evaluate(server_round, kept, failures)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """The inner strategy's centralized evaluation."""
        return self.strategy.evaluate(server_round, parameters)
