"""A FedAsync job, and what the baseline's history says of jobs: energy, round-equivalents, job rows.

Contract
--------
A :class:`Job` is one node's equal share of the budget sent on one model version; it is filled from
its reply when accepted (``FedAsyncStrategy._accept``) and mixed once. :func:`energy_until` is the
active energy of all work up to a time (a job straddling it pro-rated) and the idle energy of nodes
out of work (at the end, or while the first wave waits to be judged); :func:`segment_row` is a
round-equivalent's history row: makespan, the busy time's CV
over the nodes that worked in it, its energy, samples, quota spread and staleness of the updates
mixed in it, and which clock timed it; :func:`client_row` is one job's row
(``status``: ``"ok"`` or why it failed).

Cost
----
One pass over the run's jobs per round-equivalent (``num_rounds × nodes`` jobs in all).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flwr_adaptive.strategies.reports import ClientReport

__all__ = ["FEDASYNC", "Job", "energy_until", "segment_row", "client_row"]

FEDASYNC = "fedasync"  # the policy name in run configs, history rows and log lines


@dataclass
class Job:
    """One FedAsync job: ``quota`` samples for ``node``, sent at ``start_s`` on model ``base_version``."""

    node: int  # Flower's node id
    index: int  # this node's job number, 1-based (sent as keys.ROUND: seeds the sample order)
    quota: int
    start_s: float
    base_version: int
    report: ClientReport | None = None
    arrays: list[np.ndarray] | None = None
    sent: list[np.ndarray] | None = None  # the model the job was sent (its update is measured from it)
    length: float = math.nan  # ‖x_new − x_sent‖ (update_size.update_length)
    finish_s: float = math.nan
    staleness: int = -1
    alpha_t: float = math.nan
    mixed_in: int = 0  # round-equivalent in which it was mixed

    @property
    def length_per_sample(self) -> float:
        """The update's length per sample it processed (what ``LatestUpdates`` judges): at most its quota's
        (``parse_report``), so a claim of fewer samples only lengthens it."""
        return self.length / self.accepted.samples

    @property
    def accepted(self) -> ClientReport:
        """The report ``FedAsyncStrategy._accept`` set: every in-flight, queued or mixed job has one."""
        if self.report is None:
            raise RuntimeError(f"fedasync: job {self.index} of node {self.node} is used before its reply was accepted")
        return self.report


def energy_until(
    jobs: Iterable[Job],
    done_at: Mapping[int, float],
    idle_w: Mapping[int, float | None],
    t: float,
    idle_s: Mapping[int, float] | None = None,
) -> tuple[float, float]:
    """Active joules of the ``jobs``' work up to ``t`` (pro-rated) and idle joules of the nodes out of
    work since ``done_at`` and for the ``idle_s`` seconds of their idle spans that ended before ``t``
    (NaN where a job's energy or a node's idle power is unmeasured)."""
    active = 0.0
    for job in jobs:
        e = job.accepted.energy_j
        if e is None:
            return math.nan, math.nan
        span = job.finish_s - job.start_s
        share = 1.0 if span <= 0 else min(max((t - job.start_s) / span, 0.0), 1.0)
        active += e * share
    idle = 0.0
    ended = idle_s or {}
    for node in [*done_at, *(n for n in ended if n not in done_at)]:  # (done_at's order: the same sums as before)
        w = idle_w.get(node)
        seconds = ended.get(node, 0.0) + (max(t - done_at[node], 0.0) if node in done_at else 0.0)
        idle = math.nan if w is None else idle + w * seconds
    return active, idle


def segment_row(
    r: int,
    span: tuple[float, float],
    mixed: Sequence[Job],
    jobs: Iterable[Job],
    energy: tuple[float, float],
    order: str,
    version: int,
) -> dict[str, Any]:
    """Round-equivalent ``r``'s row over ``span = (start, end)``: ``mixed`` its updates, ``jobs`` every
    job of the run so far (their overlap with the span is each node's busy time), ``energy`` its
    (active, idle) joules, ``order`` the run's, ``version`` the model's after it."""
    t0, t = span
    busy: dict[int, float] = {}
    for job in jobs:
        overlap = min(job.finish_s, t) - max(job.start_s, t0)
        if overlap > 0:
            busy[job.node] = busy.get(job.node, 0.0) + overlap
    values = np.array(list(busy.values()), dtype=float)
    cv = float(values.std() / values.mean()) if len(values) > 1 and values.mean() > 0 else 0.0
    clocks = {j.accepted.virtual_clock for j in mixed}
    clock = "mixed" if len(clocks) > 1 else ("virtual" if clocks == {True} else "wall")  # the telemetry's
    quotas = np.array([j.quota for j in mixed], dtype=float)
    stale = np.array([j.staleness for j in mixed], dtype=float)
    return {
        "round": r,
        "policy": FEDASYNC,
        "clients": len(mixed),
        "skipped": 0,
        "makespan_s": t - t0,
        "cv_busy": cv,
        "active_j": energy[0],
        "idle_j": energy[1],
        "energy_j": energy[0] + energy[1],
        "clock": clock,
        "samples": int(sum(j.accepted.samples for j in mixed)),
        "quota_min": float(quotas.min()) if len(quotas) else math.nan,
        "quota_median": float(np.median(quotas)) if len(quotas) else math.nan,
        "quota_max": float(quotas.max()) if len(quotas) else math.nan,
        "quota_sum": int(quotas.sum()),
        "order": order,
        "timeline": clock if order == "virtual" else "wall",
        "virtual_time_s": t if order == "virtual" else math.nan,
        "elapsed_s": t,
        "staleness_mean": float(stale.mean()) if len(stale) else math.nan,
        "staleness_max": int(stale.max()) if len(stale) else 0,
        "model_version": version,
    }


def client_row(job: Job, status: str) -> dict[str, Any]:
    """One job's row of the client history."""
    r = job.report
    return {
        "round": job.mixed_in or None,
        "node_id": job.node,
        "partition_id": r.partition_id if r else None,
        "job": job.index,
        "quota": job.quota,
        "samples": r.samples if r and status == "ok" else 0,  # a failed job's samples went back to the pool
        "start_s": job.start_s,
        "finish_s": job.finish_s,
        "time_s": r.time_s if r else math.nan,
        "energy_j": (math.nan if r is None or r.energy_j is None else r.energy_j),
        "base_version": job.base_version,
        "staleness": job.staleness,
        "alpha_t": job.alpha_t,
        "status": status,
    }
