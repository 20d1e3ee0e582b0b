"""The adaptive strategy in hierarchical mode (HFL-DDP): silos are the controller's groups.

Contract
--------
:class:`HierarchicalAdaptiveStrategy` is :class:`~flwr_adaptive.strategies.adaptive_strategy.AdaptiveStrategy` for silo
clients (:mod:`flwr_adaptive.clients.silo`) that each run a DDP group of k ranks on their own data:

- The controller's participants are the **ranks**, with ids ``f"{partition_id}/{rank}"`` (str),
  and its groups are the **silos**: ``groups = {rank_id: partition_id}``, ``budget = {partition_id:
  silo_budget(partition_id)}``. A silo's budget is split only among its own ranks, so it is the
  same every round whatever the ranks measure; no sample ever moves between silos.
- ``configure_train`` sends every silo its budget (``keys.QUOTA``), the step count
  (``keys.DDP_STEPS``) and, once the silo's ranks have reported, their quotas
  (``keys.RANK_QUOTAS``, summing to the budget). Before that (round 1, or a silo seen for the
  first time) the silo splits its budget evenly.
- ``aggregate_train`` screens replies like the base strategy, then also the per-rank lists
  (``keys.SILO_RANK_KEYS``: one entry per rank, samples adding up to the silo's); a silo whose
  lists are invalid is skipped like any bad reply. A silo that replies with another number of
  ranks than the quotas it was sent (its ranks setting changed; it split evenly) is aggregated and
  observed as usual and re-planned for its new k from the next round. Each rank's own compute time,
  energy and samples feed the controller (with an equal share of the silo's reported idle watts);
  silo models are averaged by the inner strategy, by default normalised (data weights; every
  silo's local work is the ``steps`` sent, see ``weighting`` and ``local_steps``).
- A silo round that started its ranks (``keys.COLD_START``) seeds ranks without an estimate; their
  first warm round replaces it (see ``observe_replies``). The rank split has no deadband unless
  one is given (``paper=True``: the paper's): re-splitting a silo's ranks moves no data.
- A failed silo (error reply, e.g. ranks that could not start) is skipped for that round and is
  sent its whole budget again next round: there is no probation, because its share could not
  go to other silos anyway.
- Per-rank times are claims too: before they reach the controller each rank's is judged by
  ``trust`` against the other ranks of its silo (plausibility, groups; from 3 ranks that trained)
  and its own estimate (growth cap), as the flat strategies judge nodes. A lying rank can only
  take samples of its own silo, but the server's round waits for the slowest silo.
- A resumed state (``state_dir``, ``context``) is untrusted like a claim, as for the flat
  strategies: each rank's saved estimate is checked against its first warm reply and dropped
  when more than ``trust.plausible_range`` off it (one warning per round), the rank learned again
  from that reply, so a tampered state splits the first round only.
- Inner strategies aggregate metrics with :func:`aggregate_silo_metrics` (Flower's default zips
  list metrics strictly and fails when silos have different k).
- History: besides the base per-round and per-silo rows, one row per rank and round
  (``rank_history``), and per round the CV of the ranks' compute time inside each silo
  (``rank_cv_mean``, ``rank_cv_max``), logged on one ``[hfl]`` line.

Cost
----
One ``allocate`` over all ranks per round (groups are solved one by one: O(R log R) for R
ranks) and one ``observe`` per rank, plus O(ranks) list checks per reply.
"""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Strategy

from flwr_adaptive import keys
from flwr_adaptive.controller import AllocationController
from flwr_adaptive.strategies.adaptive_strategy import AdaptiveStrategy
from flwr_adaptive.strategies.core import log
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.silo_observation import observe_silo_round
from flwr_adaptive.strategies.silo_reports import RankReport, aggregate_silo_metrics, parse_rank_reports, rank_id
from flwr_adaptive.strategies.state_file import StateFileError
from flwr_adaptive.strategies.step_floor import check_min_local_steps
from flwr_adaptive.strategies.trust import CostTrust

__all__ = ["HierarchicalAdaptiveStrategy", "RankReport", "parse_rank_reports", "aggregate_silo_metrics", "rank_id"]


class HierarchicalAdaptiveStrategy(AdaptiveStrategy):
    """Adaptive per-rank quotas inside each silo; silo models averaged by the inner strategy.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy, optional
        The wrapped strategy: samples silos and aggregates their models (default: ``FedAvg`` with
        :func:`aggregate_silo_metrics`). An inner strategy that uses Flower's default metric
        aggregation gets :func:`aggregate_silo_metrics` instead (logged).
    budget : int
        Samples per round **of each silo** (see :meth:`silo_budget` to give silos different
        budgets), split among the silo's ranks.
    steps : int
        Optimizer steps of each silo's DDP round (sent as ``keys.DDP_STEPS``).
    policy : str (default: "time")
        ``"equal"`` (even split inside every silo), ``"time"``, ``"low-energy"``, ``"energy"``,
        ``"min-energy"`` (each silo's ranks: least active + idle energy within ``slack``; a
        silo's reported idle watts are shared evenly among its ranks).
    min_rank_quota : int, optional
        Smallest quota of a rank (default ``steps``: one sample per step, so no rank idles
        through a step). A silo whose k ranks cannot all get it splits its budget evenly.
    min_local_steps : int (default: 0)
        The flat strategies' floor in local optimizer steps per node. Here every silo runs the
        ``steps`` sent, whatever its ranks' quotas (samples never move between silos), so a
        floor up to ``steps`` holds by construction; one above ``steps`` is refused (raise
        ``steps`` instead).
    deadband : float, optional
        As for the controller. ``None``: 0, the ranks are re-split every round (moving quotas
        between a silo's ranks moves no data or model, while every step pays for an imbalance;
        the estimates' smoothing absorbs the timing noise); with ``paper=True`` the paper's 5 %
        move of the budget. With ``smoothing=1.0`` (each split from the last round alone) pass
        one (e.g. 0.02): the split would otherwise follow every round's timing noise.
    slack : float, optional
        ``policy="min-energy"`` only: a silo's round may last up to ``1 + slack`` times the
        shortest possible (``math.inf``: no limit). ``None``: the policy's default (0.1).
    paper : bool (default: False)
        The paper's estimation and deadband (per-sample costs, no drift detection, the
        total-variation deadband) instead of the named policy's.
    smoothing : float (default: 0.5)
        EMA weight of the newest per-sample cost.
    weighting : str, optional
        How silo models are aggregated: ``"normalized"`` (the default: silos are data owners;
        each silo model weighs its claimed data size, capped at ``weight_cap`` × the round's
        median claim, and is rescaled by its local work, which is the ``steps`` this strategy
        sends, so with one optimizer on every silo the rescaling is 1 and the rule is the
        data-weighted average whatever the silo budgets), ``"samples"`` (each silo's budget: a
        silo with a larger budget weighs more) or ``"data-size"``.
    max_rescale : float, optional
        The largest factor a silo model's change is scaled by, as for ``AdaptiveStrategy``
        (``None``: 8, whatever the policy; ``math.inf``: unbounded). Every silo runs the
        ``steps`` sent, so only silos whose local optimizers differ (momentum, proximal term)
        are rescaled at all.
    forget_after : int (default: 3)
        A participant that has not reported for this many of its rounds is treated as new.
    cost_clip : float (default: 100.0)
        Each cost ratio to the median is clipped to ``[1/cost_clip, cost_clip]``.
    trust : CostTrust or bool (default: True)
        Which claimed costs the server believes: ``True`` the default rules, a ``CostTrust(...)``
        to tune them, ``False`` every claim (see ``AdaptiveStrategy``). Each rank's claimed time
        is judged against the other ranks of its silo (a rank more than ``plausible_range``
        faster than their median is taken at that factor, one more than ``absurd_range`` at
        their median).
    state_dir : str or Path, optional
        Folder where the controller state is saved after every round and resumed from.
    context : flwr.app.Context, optional
        The ServerApp context: the state is also kept in ``context.state``.

    There is no ``allow_cycling``: a silo's ranks walk an endless reshuffled stream over its
    partition, so a budget above the partition size just spans more than one epoch.
    """

    #: Silo replies keep their telemetry for the inner metric function (``aggregate_silo_metrics``).
    stripped_metric_keys: frozenset = frozenset()
    keeps_batch_size = "its silos run the steps sent"  # scale_batch_size stays False (round_quotas.ScaleBatchSize)
    none_weighting = "normalized"  # weighting=None, at construction or set later: silos own their data
    uses_probation = False  # a failed silo's budget cannot go to other silos: it is retried whole
    strict_metric_lists = False  # per-rank lists differ in length across silos (aggregate_silo_metrics)
    lists_sized_elsewhere = frozenset(keys.SILO_RANK_KEYS)  # bounded by the silo's plannable ranks
    #: Most ranks one silo may report (its per-rank lists are screened against it before they are read).
    max_silo_ranks_limit: int = 1024

    def __init__(
        self,
        strategy: Strategy | None = None,
        *,
        budget: int,
        steps: int,
        policy: str = "time",
        min_rank_quota: int | None = None,
        min_local_steps: int = 0,
        deadband: float | None = None,
        slack: float | None = None,
        paper: bool = False,
        smoothing: float = 0.5,
        weighting: str | None = None,
        max_rescale: float | None = None,
        forget_after: int = 3,
        cost_clip: float = 100.0,
        trust: CostTrust | bool = True,
        state_dir: str | os.PathLike | None = None,
        context: Context | None = None,
    ) -> None:
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"steps must be an int >= 1 (optimizer steps per silo round), got {steps!r}")
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < steps:
            raise ValueError(
                f"budget must be an int >= steps ({steps}): samples per silo and round, every "
                f"step needs at least one; got {budget!r}"
            )
        if check_min_local_steps(min_local_steps) > steps:
            raise ValueError(
                f"min_local_steps={min_local_steps} exceeds steps={steps}: every silo runs the {steps} DDP "
                "steps sent each round, so no floor above them can hold; raise steps or lower min_local_steps"
            )
        min_rank = int(steps) if min_rank_quota is None else min_rank_quota
        if isinstance(min_rank, bool) or not isinstance(min_rank, (int, np.integer)) or min_rank < 0:
            raise ValueError(f"min_rank_quota must be an int >= 0, got {min_rank_quota!r}")
        if min_rank > budget:
            raise ValueError(
                f"min_rank_quota={min_rank} exceeds the silo budget of {budget} samples: no rank could "
                "train; lower min_rank_quota or raise the budget"
            )
        self.steps = int(steps)
        self._ranks_of: dict[Hashable, int] = {}  # silo key -> k, from its last reply
        self._rank_plan: dict[Hashable, list[int]] = {}  # node id -> this round's rank quotas
        self._rank_reports: dict[Hashable, list[RankReport]] = {}  # node id -> this round's ranks
        self._replanned: set[Hashable] = set()  # node ids that replied with another k than planned
        self._rank_rows: list[dict[str, Any]] = []
        self._rank_cv: dict[Hashable, float] = {}  # this round's CV of rank compute time, per silo
        self._cold_before: dict[Hashable, bool] = {}  # silo key -> its last reply was a cold start
        self._cold_seeded: set[str] = set()  # rank ids whose estimate is still their start-up round's
        if strategy is None:
            strategy = FedAvg(train_metrics_aggr_fn=aggregate_silo_metrics)
        if deadband is None and not paper:
            deadband = 0.0  # a held split costs every step of every round; a re-split costs nothing
        super().__init__(
            strategy,
            budget=int(budget),
            policy=policy,
            deadband=deadband,
            slack=slack,
            paper=paper,
            min_quota=int(min_rank),
            allow_cycling=True,
            smoothing=smoothing,
            weighting=self.none_weighting if weighting is None else weighting,
            max_rescale=max_rescale,
            forget_after=forget_after,
            cost_clip=cost_clip,
            trust=trust,
            state_dir=state_dir,
            context=context,
        )
        self.aggregation.objective = "data-size"  # silos own their data: no equal split to keep (begin_round)
        from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

        wrapped: Any = self.strategy  # train_metrics_aggr_fn is FedAvg's (and its subclasses'), not Strategy's
        if getattr(wrapped, "train_metrics_aggr_fn", None) is aggregate_metricrecords:
            wrapped.train_metrics_aggr_fn = aggregate_silo_metrics
            log(
                INFO,
                "[hfl] %s aggregates train metrics with aggregate_silo_metrics (per-rank lists differ "
                "in length across silos)",
                type(self.strategy).__name__,
            )

    def who(self, node_id: Hashable) -> str:
        """Rank ids (``"3/1"``) as ``"partition 3, rank 1"``; nodes as ``AdaptiveStrategy.who``."""
        silo, sep, rank = str(node_id).rpartition("/")
        if not sep:
            return super().who(node_id)
        return f"{'node ' + silo[5:] if silo.startswith('node-') else 'partition ' + silo}, rank {rank}"

    def summary(self) -> None:
        """Log the hierarchical settings, then the inner strategy's summary."""
        log(
            INFO,
            "\t├──> Hierarchical adaptive allocation (HFL-DDP): policy=%s, budget=%d samples per silo and "
            "round, split among the silo's ranks only; %d DDP steps per round, min_rank_quota=%d, weighting=%s",
            self.policy,
            self.budget,
            self.steps,
            self._min_of(),
            self.weighting,
        )
        log(INFO, "\t├──> Inner strategy: %s", type(self.strategy).__name__)
        self.strategy.summary()

    # ------------------------------------------------------------------ overridable hooks
    def make_controller(self) -> AllocationController:
        """One controller over all ranks, one group per silo (groups are added as silos report)."""
        return AllocationController.from_policy(self.policy, {}, groups={}, paper=self.paper, **self._controller_kwargs)

    def local_steps(self, reports: Sequence[ClientReport]) -> list[int] | None:
        """Every silo's local steps: the DDP step count this strategy sent (server-known, not a claim).

        A silo's steps per sample differ with its budget by design (its batch grows with it), so
        the claim check of the base class would not apply; the count sent is what each silo ran.
        """
        return [self.steps] * len(reports)

    def begin_round(self, server_round: int, quotas: Mapping[Hashable, int]) -> None:
        """The base's bookkeeping without an equal share: no sample moves between silos, so their
        data weights stay their (capped) claimed sizes whatever ``objective`` says."""
        super().begin_round(server_round, quotas)
        self.aggregation.equal_share = None

    def silo_budget(self, silo: Hashable) -> int:
        """Samples per round of ``silo`` (its partition id, or ``"node-<id>"`` when unknown): ``budget``."""
        return self.budget

    def round_budget(self) -> int:
        """The federation's: each silo is sent its own budget (``quotas_for``), so their sum."""
        return sum(self._assigned.values())

    def quotas_for(self, server_round: int, node_ids: Sequence[Hashable]) -> dict[Hashable, int]:
        """``{node_id: silo budget}``; the per-rank split of each known silo is kept for the messages."""
        node_ids = list(node_ids)
        silo_keys = self._keys(node_ids)
        self._rank_plan = {}
        ranked: list[tuple[Hashable, Hashable, list[str]]] = []
        for node, silo in zip(node_ids, silo_keys):
            k = self._ranks_of.get(silo)
            if k is None:
                continue  # its ranks have not reported yet (round 1 of a run): it splits evenly
            budget = self.silo_budget(silo)
            if k * self._min_of() > budget:
                self._warn_once(
                    f"small-{silo}",
                    "[hfl] silo %s: %d ranks × min_rank_quota %d exceed its budget %d; it splits its budget evenly",
                    silo,
                    k,
                    self._min_of(),
                    budget,
                )
                continue
            ids = [rank_id(silo, r) for r in range(k)]
            for rid in ids:
                self.controller.set_group(rid, silo, budget)
            ranked.append((node, silo, ids))
        if ranked:
            split = self.controller.allocate([rid for _, _, ids in ranked for rid in ids])
            self._rank_plan = {node: [int(split[rid]) for rid in ids] for node, _, ids in ranked}
        return {node: self.silo_budget(silo) for node, silo in zip(node_ids, silo_keys)}

    def max_silo_ranks(self, silo: Hashable) -> int:
        """Most ranks ``silo`` may report: what its budget can plan (each rank at least
        ``min_rank_quota``), at most ``max_silo_ranks_limit``. Longer per-rank lists are screened
        (the reply is skipped, nothing of it is stored): a silo that restarts with more ranks
        within this bound is re-planned, a hostile list cannot grow the state."""
        return max(1, min(self.max_silo_ranks_limit, self.silo_budget(silo) // max(self._min_of(), 1)))

    def rank_quotas(self, node_id: Hashable) -> list[int] | None:
        """The per-rank quotas ``configure_train`` sends ``node_id`` this round (``None``: it splits evenly).

        Override to change or drop a silo's plan; replies are screened and recorded against what
        it returns.
        """
        plan = self._rank_plan.get(node_id)
        return None if plan is None else list(plan)

    def observe_replies(self, server_round: int, reports: Sequence[ClientReport]) -> list[ClientReport]:
        """Feed every rank's report to the controller under its rank id, in its silo's group.

        A silo round that started its ranks (``keys.COLD_START``) includes their first-call
        set-up. Its ranks' reports seed ranks without an estimate (the next round is split on
        them rather than evenly) and are replaced by those ranks' next warm report instead of
        being averaged with it; ranks that already have an estimate keep it (a restarted silo's
        start-up is not slowness); a start-up round after a failed one replaces the seed of the
        earlier one. A silo that starts its ranks every round (its process does not outlive a
        round) pays the start-up every round: a cold reply right after a cold one (no failed
        round between) is observed as usual.

        A rank whose estimate was resumed from a saved state and no warm reply has checked yet is
        checked by this one (``_check_resumed``: dropped and learned again from it when more than
        ``trust.plausible_range`` off; start-up rounds do not check, their set-up would read as a
        contradiction).
        """
        return observe_silo_round(self, server_round, reports)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The base state, plus the ranks whose estimate is still their start-up round's (so that
        a resumed server still replaces it with their first warm round)."""
        state = super().state_dict()
        state["start_up_seeded"] = sorted(self._cold_seeded)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()`` output (see ``AdaptiveStrategy.load_state_dict``); a state
        without ``start_up_seeded`` (an older release) resumes with none."""
        seeded = state.get("start_up_seeded", []) if isinstance(state, Mapping) else []
        if not (isinstance(seeded, list) and all(isinstance(r, str) for r in seeded)):
            raise StateFileError(f"the saved start_up_seeded {str(seeded)[:80]!r} is not a list of rank ids")
        super().load_state_dict(state)
        self._cold_seeded = set(seeded)

    # ------------------------------------------------------------------ Message API
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The base messages (one budget per silo) plus the step count and each silo's rank quotas."""
        messages = list(super().configure_train(server_round, arrays, config, grid))
        sent: dict[Hashable, list[int]] = {}
        for msg in messages:
            plan = self.rank_quotas(msg.metadata.dst_node_id)
            if plan is not None:
                sent[msg.metadata.dst_node_id] = [int(q) for q in plan]
            for record in msg.content.config_records.values():
                record[keys.DDP_STEPS] = self.steps
                if plan is not None:
                    record[keys.RANK_QUOTAS] = list(sent[msg.metadata.dst_node_id])
        self._rank_plan = sent  # what was sent: the replies are screened and recorded against it
        return messages

    def screen_train_replies(
        self, server_round: int, replies: list[Message]
    ) -> tuple[list[Message], list[ClientReport], dict[Hashable, str]]:
        """The base screening, then the per-rank lists of every kept reply."""
        kept, reports, skipped = super().screen_train_replies(server_round, replies)
        self._rank_reports = {}
        self._replanned = set()
        out_msgs, out_reports = [], []
        for msg, report in zip(kept, reports):
            metrics = next(iter(msg.content.metric_records.values()))
            try:
                ranks = parse_rank_reports(
                    report.node_id,
                    metrics,
                    report.samples,
                    max_ranks=self.max_silo_ranks(self._keys([report.node_id])[0]),
                )
            except ValueError as err:
                skipped[report.node_id] = "invalid"
                log(WARNING, "[hfl] round %s: %s; skipped", server_round, err)
                continue
            plan = self._rank_plan.get(report.node_id)
            if plan is not None and len(plan) != len(ranks):
                # Its ranks setting changed: it split evenly (flwr_adaptive.clients.silo.split_budget), so each
                # rank's telemetry is still a good measurement; only the plan no longer applies.
                self._replanned.add(report.node_id)
                log(
                    INFO,
                    "[hfl] round %s: silo %s replied with %d ranks but was planned for %d; "
                    "re-planning it for %d ranks from next round",
                    server_round,
                    self._keys([report.node_id])[0],
                    len(ranks),
                    len(plan),
                    len(ranks),
                )
            self._rank_reports[report.node_id] = ranks
            out_msgs.append(msg)
            out_reports.append(report)
        return out_msgs, out_reports, skipped

    # ------------------------------------------------------------------ bookkeeping
    def end_round(
        self,
        server_round: int,
        reports: Sequence[ClientReport],
        skipped: Mapping[Hashable, str],
        unobserved: Iterable[Hashable] = (),
    ) -> dict[str, Any]:
        """The base bookkeeping, plus one history row per rank."""
        for silo in self._keys(list(skipped)):  # after a failed round a cold reply is a start-up round
            if silo in self._cold_before:
                self._cold_before[silo] = False
        for r in reports:
            plan = None if r.node_id in self._replanned else self._rank_plan.get(r.node_id)
            for rank in self._rank_reports.get(r.node_id, []):
                self._rank_rows.append(
                    {
                        "round": server_round,
                        "node_id": r.node_id,
                        "partition_id": r.partition_id,
                        "rank": rank.rank,
                        "quota": None if plan is None else plan[rank.rank],
                        "samples": rank.samples,
                        "time_s": rank.time_s,
                        "wait_s": rank.wait_s,
                        "energy_j": np.nan if rank.energy_j is None else rank.energy_j,
                        "clock": "virtual" if r.virtual_clock else "wall",
                    }
                )
        return super().end_round(server_round, reports, skipped, unobserved)

    def account(
        self, server_round: int, reports: Sequence[ClientReport], skipped: Mapping[Hashable, str]
    ) -> dict[str, Any]:
        """The base figures plus the CV of the ranks' compute time inside each silo."""
        row = super().account(server_round, reports, skipped)
        cvs = {}
        for r, silo in zip(reports, self._keys([r.node_id for r in reports])):
            times = np.array([k.time_s for k in self._rank_reports.get(r.node_id, [])])
            with np.errstate(over="ignore", invalid="ignore"):  # a rank's absurd claim: no CV, not inf
                cv = float(times.std() / times.mean()) if len(times) and times.mean() > 0 else math.nan
            if math.isfinite(cv):
                cvs[silo] = cv  # its partition, or "node-<id>" (unknown, or a second claimant of one)
        self._rank_cv = cvs
        row["rank_cv_mean"] = float(np.mean(list(cvs.values()))) if cvs else math.nan
        row["rank_cv_max"] = float(np.max(list(cvs.values()))) if cvs else math.nan
        return row

    def log_round(self, row: Mapping[str, Any]) -> None:
        """The base line, then one ``[hfl]`` line with the rank-time CV of every silo."""
        super().log_round(row)
        per_silo = ", ".join(
            f"{silo}: {cv:.3f}" for silo, cv in sorted(self._rank_cv.items(), key=lambda kv: str(kv[0]))
        )
        log(
            INFO,
            "[hfl] round %s (%s clock): CV of rank compute time per silo {%s} (mean %.3f)",
            row["round"],
            row["clock"],
            per_silo,
            row["rank_cv_mean"],
        )

    @property
    def rank_history(self):
        """One row per rank and round (``pandas.DataFrame``): quota, samples, compute, waits, energy."""
        import pandas as pd

        return pd.DataFrame(self._rank_rows)

    def save_history(self, path) -> None:
        """The base CSVs, plus the per-rank rows next to them (``<stem>-ranks.csv``)."""
        from pathlib import Path

        super().save_history(path)
        path = Path(path)
        self.rank_history.to_csv(path.with_name(path.stem + "-ranks" + path.suffix), index=False)

    def append_history(self, path, server_round: int) -> None:
        """The base CSVs' rows of ``server_round``, plus its per-rank rows (``<stem>-ranks.csv``)."""
        from pathlib import Path

        import pandas as pd

        from flwr_adaptive.strategies.history import append_csv

        super().append_history(path, server_round)
        path = Path(path)
        rows = pd.DataFrame([r for r in self._rank_rows if r.get("round") == server_round])
        append_csv(rows, path.with_name(path.stem + "-ranks" + path.suffix))
