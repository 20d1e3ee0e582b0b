"""The round's aggregated train metrics: the user's own by the user's function, telemetry by its meaning.

Contract
--------
A Flower strategy averages every key of the replies' metrics weighted by ``num-examples``; for the
telemetry keys that wrapped clients add (:data:`flwr_adaptive.keys.TELEMETRY_KEYS`) that average is
meaningless (``partition-id: 1.42``, an averaged ``quota-capped``). So the adaptive strategies

- remove the telemetry keys (and a silo's per-rank lists) from each kept reply before the inner
  strategy aggregates: the inner strategy's metric function (FedAvg's weighted average, or the
  user's ``train_metrics_aggr_fn`` / ``fit_metrics_aggregation_fn``) sees only the user's own
  metrics and the weight key;
- add :func:`telemetry_metrics` of the aggregated reports to the result, under
  :data:`flwr_adaptive.keys.AGGREGATE_KEYS`, whose names say how each was combined: samples summed,
  the slowest and the mean time, energy summed (only when every client measured it), counts of
  capped and cold-start clients. Ids, data sizes and clock flags are dropped.

Cost
----
O(replies × keys) per round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flwr_adaptive import keys
from flwr_adaptive.strategies.reports import ClientReport

__all__ = ["STRIPPED_KEYS", "user_metrics", "strip_telemetry", "telemetry_metrics"]

#: Keys removed from each reply before the inner strategy aggregates its metrics.
STRIPPED_KEYS = frozenset(keys.TELEMETRY_KEYS) | frozenset(keys.SILO_RANK_KEYS)


def user_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` without the telemetry keys (the user's own metrics and the weight key)."""
    return {k: v for k, v in metrics.items() if k not in STRIPPED_KEYS}


def strip_telemetry(record: Any, keep: str = keys.NUM_EXAMPLES, stripped: frozenset = STRIPPED_KEYS) -> None:
    """Remove the ``stripped`` keys from ``record`` in place (``keep``, the weight key, stays)."""
    for key in [k for k in record.keys() if k in stripped and k != keep]:
        del record[key]


def telemetry_metrics(reports: Sequence[ClientReport]) -> dict[str, int | float]:
    """The aggregated reports' telemetry under names that say how it was combined (empty if none)."""
    if not reports:
        return {}
    times = [r.time_s for r in reports]
    out: dict[str, int | float] = {
        keys.SAMPLES_TOTAL: int(sum(r.samples for r in reports)),
        keys.TIME_S_MAX: float(max(times)),
        keys.TIME_S_MEAN: float(sum(times) / len(times)),
        keys.CAPPED_CLIENTS: int(sum(r.capped for r in reports)),
        keys.COLD_START_CLIENTS: int(sum(r.cold_start for r in reports)),
    }
    if all(r.energy_j is not None for r in reports):
        out[keys.ENERGY_J_TOTAL] = float(sum(r.energy_j for r in reports))  # type: ignore[misc]
    return out
