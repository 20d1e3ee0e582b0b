"""What a silo reports per rank (HFL-DDP): the rank ids, the per-rank lists' screening, their aggregation.

Contract
--------
A silo client (:mod:`flwr_adaptive.clients.silo`) sends, besides its own telemetry, one entry per
rank of its DDP group in each of ``keys.SILO_RANK_KEYS``. :func:`parse_rank_reports` validates
them (lengths first, before any entry is read; then types, signs and the samples' sum) into
:class:`RankReport`s, raising ``ValueError`` with the node, the key and the value;
:func:`aggregate_silo_metrics` is the metric aggregation for silo replies whose lists differ in
length; :func:`rank_id` names a rank for the controller (``"<silo>/<rank>"``).
:class:`~flwr_adaptive.strategies.hierarchical_adaptive_strategy.HierarchicalAdaptiveStrategy`
uses them (and re-exports them).

Cost
----
O(ranks) per reply for the checks; O(total list entries) for the aggregation.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from flwr.app import MetricRecord, RecordDict

from flwr_adaptive import keys
from flwr_adaptive.controller import Report

__all__ = ["RankReport", "parse_rank_reports", "aggregate_silo_metrics", "rank_id"]


def rank_id(silo: Hashable, rank: int) -> str:
    """The controller id of rank ``rank`` of silo ``silo``: ``"<silo>/<rank>"``."""
    return f"{silo}/{rank}"


@dataclass(frozen=True)
class RankReport:
    """One rank's telemetry for one round, validated (see :func:`parse_rank_reports`)."""

    rank: int
    samples: int
    time_s: float
    energy_j: float | None
    wait_s: float

    def to_report(self) -> Report:
        """The controller's view: own compute seconds, active energy, samples."""
        return Report(time_s=self.time_s, energy_j=self.energy_j, samples=self.samples)


def parse_rank_reports(
    node_id: Hashable, metrics: Mapping[str, Any], silo_samples: int | None = None, max_ranks: int | None = None
) -> list[RankReport]:
    """Validate a silo's per-rank lists (``keys.SILO_RANK_KEYS``).

    Raises
    ------
    ValueError
        A list is missing or not a list, longer than ``max_ranks`` (checked before any entry is
        read), the lists differ in length or are empty, an entry is not
        a finite number of the right sign (samples ints >= 0, seconds >= 0, energy >= 0 or
        ``keys.UNMEASURED_ENERGY``), or the ranks' samples do not add up to ``silo_samples``.
    """
    lists = {}
    for key in keys.SILO_RANK_KEYS:
        if key not in metrics:
            raise ValueError(
                f"node {node_id}: per-rank telemetry {key!r} is missing; a silo client "
                "(flwr_adaptive.clients.silo.silo_train) sends it"
            )
        value = metrics[key]
        if not isinstance(value, list):
            raise ValueError(f"node {node_id}: per-rank telemetry {key!r} must be a list, got {value!r}")
        if max_ranks is not None and len(value) > max_ranks:
            raise ValueError(
                f"node {node_id}: per-rank telemetry {key!r} has {len(value)} entries, more than "
                f"the {max_ranks} ranks this silo's budget can plan"
            )
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"node {node_id}: per-rank telemetry {key!r} holds {v!r}; expected finite numbers")
        lists[key] = value
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1 or not lengths[keys.RANK_SAMPLES]:
        raise ValueError(f"node {node_id}: per-rank lists must have one entry per rank, got lengths {lengths}")
    samples = lists[keys.RANK_SAMPLES]
    if any(s != int(s) or s < 0 for s in samples):
        raise ValueError(f"node {node_id}: {keys.RANK_SAMPLES!r} must hold whole numbers >= 0, got {samples}")
    for key in (keys.RANK_TIME_S, keys.RANK_WAIT_S):
        if any(v < 0 for v in lists[key]):
            raise ValueError(f"node {node_id}: {key!r} must hold seconds >= 0, got {lists[key]}")
    energy = lists[keys.RANK_ENERGY_J]
    if any(e < 0 and e != keys.UNMEASURED_ENERGY for e in energy):
        raise ValueError(
            f"node {node_id}: {keys.RANK_ENERGY_J!r} must hold joules >= 0 (or "
            f"{keys.UNMEASURED_ENERGY} for unmeasured), got {energy}"
        )
    if silo_samples is not None and sum(int(s) for s in samples) != silo_samples:
        raise ValueError(
            f"node {node_id}: the ranks' samples {samples} add up to {sum(int(s) for s in samples)}, "
            f"not to the silo's {keys.SAMPLES!r} = {silo_samples}"
        )
    return [
        RankReport(rank=r, samples=int(s), time_s=float(t), energy_j=None if e < 0 else float(e), wait_s=float(w))
        for r, (s, t, e, w) in enumerate(zip(samples, lists[keys.RANK_TIME_S], energy, lists[keys.RANK_WAIT_S]))
    ]


def aggregate_silo_metrics(records: list[RecordDict], weighting_metric_name: str) -> MetricRecord:
    """Flower's weighted metric average for silo replies whose list metrics differ in length.

    Scalars are averaged weighted by ``weighting_metric_name`` (as Flower's default does). List
    metrics (the per-rank lists) are concatenated, silo after silo in ``keys.PARTITION_ID`` order
    (reply order where that is missing), so the result holds every rank's value once.
    Pass it as ``train_metrics_aggr_fn`` to a Message-API strategy.
    """
    metric_records = [next(iter(r.metric_records.values())) for r in records]
    # As Flower's aggregate_metricrecords: the strategy screened the weights (numbers) before aggregating
    weights = [float(cast(float, m[weighting_metric_name])) for m in metric_records]
    total = sum(weights)
    factors = [w / total if total > 0 else 1.0 / len(weights) for w in weights]
    order = sorted(
        range(len(metric_records)),
        key=lambda i: (float(cast(float, metric_records[i].get(keys.PARTITION_ID, math.inf))), i),
    )
    out: dict[str, Any] = {}
    for i in order:
        for key, value in metric_records[i].items():
            if key == weighting_metric_name:
                continue
            if isinstance(value, list):
                out[key] = out.get(key, []) + list(value)
            else:
                out[key] = out.get(key, 0.0) + float(value) * factors[i]
    # A list that mixes int and float entries is not a valid MetricRecord value.
    for key, value in out.items():
        if isinstance(value, list) and any(isinstance(v, float) for v in value):
            out[key] = [float(v) for v in value]
    return MetricRecord(out)
