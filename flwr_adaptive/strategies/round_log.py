"""The operator's view of one adaptive round: its history row and its log lines.

Contract
--------
Pure functions of what the round coordinator (:class:`~flwr_adaptive.strategies.core.AdaptiveCore`)
knows at the end of a round; they change nothing:

- :func:`round_figures`: the round's history row: makespan (the slowest kept client's own
  time; every other kept client idles for the difference at its reported idle power), CV of busy
  time, active + idle energy (NaN when a kept client did not measure it), the clock of the
  reports, the quota spread, and where budgeted samples went unprocessed (``short_capped``: above
  a capped node's data, ``short_untrained``: what an uncapped node left of its quota, e.g. a
  partial batch its ``drop_last`` loader dropped, ``short_skipped``: quotas of skipped nodes,
  ``short_unassigned``: budget nobody was given). Skipped clients are counted, not timed.
- :func:`client_rows` (:func:`client_row` / :func:`skipped_row`): one ``client_history`` row per
  client and round, with its status (``ok``, ``probe``, why it was held or skipped).
- :func:`log_round`: the one line per round (a warning when quotas exceeded some nodes' data),
  with :func:`quota_listing` (every quota by partition, up to a number of nodes).
- :func:`warn_held`: one warning for clients that trained past their quota, one info line for
  the other reports not taken as cost estimates, one warning for quotas above local data.

Cost
----
O(clients of the round) numpy reductions and string formatting per round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np

from flwr_adaptive._logging import logger
from flwr_adaptive.accounting import account_round
from flwr_adaptive.strategies.reports import ClientReport

__all__ = ["round_figures", "client_rows", "client_row", "skipped_row", "log_round", "quota_listing", "warn_held"]


def round_figures(
    server_round: int,
    policy: str,
    budget: int,
    assigned: Mapping[Hashable, int],
    reports: Sequence[ClientReport],
    skipped: Mapping[Hashable, str],
) -> dict[str, Any]:
    """The round's figures: makespan, busy-time CV, active + idle energy, quota spread, shortfall."""
    quotas = np.array(list(assigned.values()), dtype=float)
    row: dict[str, Any] = {
        "round": server_round,
        "policy": policy,
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
    # (capped), what an uncapped node left of its quota (a partial batch its drop_last loader
    # dropped), quotas of skipped nodes, and budget no node was given (all local data used).
    short = [(r.capped, r.quota - r.samples) for r in reports if r.quota is not None and r.samples < r.quota]
    row["short_capped"] = int(sum(n for capped, n in short if capped))
    row["short_untrained"] = int(sum(n for capped, n in short if not capped))
    row["short_skipped"] = int(sum(assigned.get(n) or 0 for n in skipped))
    row["short_unassigned"] = max(budget - row["quota_sum"], 0) if len(quotas) else 0
    return row


def client_row(server_round: int, report: ClientReport, weight: float, scale: float, status: str) -> dict[str, Any]:
    """The ``client_history`` row of a kept reply (``status``: ok, probe, a held reason…)."""
    r = report
    return {
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
        "agg_weight": weight,
        "agg_scale": scale,
        "status": status,
    }


def client_rows(
    server_round: int,
    reports: Sequence[ClientReport],
    skipped: Mapping[Hashable, str],
    held: Mapping[Hashable, str],
    unobserved: set[Hashable],
    weights: Mapping[Hashable, float],
    scales: Mapping[Hashable, float],
    partition_of: Mapping[Hashable, int],
    assigned: Mapping[Hashable, int],
) -> list[dict[str, Any]]:
    """The round's ``client_history`` rows: kept replies (status ``held`` reason, else
    ``"observation-dropped"`` when in ``unobserved``, else ``"ok"``), then the skipped nodes."""
    rows = [
        client_row(
            server_round,
            r,
            weights.get(r.node_id, np.nan),
            scales.get(r.node_id, 1.0),
            held.get(r.node_id) or ("observation-dropped" if r.node_id in unobserved else "ok"),
        )
        for r in reports
    ]
    rows += [
        skipped_row(server_round, node, partition_of.get(node), assigned.get(node), reason)
        for node, reason in skipped.items()
    ]
    return rows


def skipped_row(
    server_round: int, node: Hashable, partition: int | None, quota: int | None, reason: str
) -> dict[str, Any]:
    """The ``client_history`` row of a node skipped this round (``status``: why)."""
    return {
        "round": server_round,
        "node_id": node,
        "partition_id": partition,
        "quota": quota,
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


def quota_listing(
    assigned: Mapping[Hashable, int],
    partition_of: Mapping[Hashable, int],
    skipped: Mapping[Hashable, str],
    max_nodes: int,
) -> str:
    """The round's quotas by partition for the round line (``""`` above ``max_nodes``).

    Ordered by partition id (nodes whose partition is not known yet last, by node id); a
    skipped node's reason is shown beside its quota.
    """
    if not assigned or len(assigned) > max_nodes:
        return ""

    def order(node: Hashable) -> tuple:
        part = partition_of.get(node)
        return (part is None, part if part is not None else 0, str(node))

    items = []
    for node in sorted(assigned, key=order):
        why = skipped.get(node)
        part = partition_of.get(node)
        name = f"node {node}" if part is None else f"partition {part}"  # the ids: in the history
        items.append(f"{name}: {assigned[node]}" + (f" ({why})" if why else ""))
    return " | quotas " + ", ".join(items)


def log_round(row: Mapping[str, Any], budget: int, listing: str) -> None:
    """The one log line per round (a warning when quotas exceeded some nodes' data)."""
    energy = (
        f"energy {row['energy_j']:.1f} J"
        if math.isfinite(row["energy_j"])
        else f"active energy {row['active_j']:.1f} J"
        if math.isfinite(row["active_j"])
        else "energy unmeasured"
    )
    short = [row.get(k, 0) for k in ("short_capped", "short_skipped", "short_unassigned", "short_untrained")]
    # samples the budget held that no node processed, and where they went
    shortfall = (
        f" | {sum(short)} of {budget} budgeted samples not processed ({short[0]} above "
        f"capped nodes' data, {short[1]} of skipped nodes, {short[2]} given to nobody"
        + (f", {short[3]} left of their quota by nodes, e.g. a partial batch dropped by drop_last" if short[3] else "")
        + ")"
        if sum(short)
        else ""
    )
    # every reply skipped: the model did not move; said loudly, as it may be every round (a layout the
    # server's inner strategy and the clients disagree on) while the run goes on and exits 0
    nothing = (
        " | NO reply was kept: the global model did not change this round (each skipped reply's reason is "
        "logged above; the same reason every round means the server and the clients disagree, not a liar)"
        if row["skipped"] and not row["clients"]
        else ""
    )
    logger.log(
        WARNING if short[0] or nothing else INFO,
        "[adaptive] round %s (%s, %s clock): makespan %.3f s | %s | "
        "CV busy %.3f | quota min/median/max %g/%g/%g | %d clients, %d skipped%s%s%s",
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
        listing,
        shortfall,
        nothing,
    )


def warn_held(
    server_round: int,
    reports: Sequence[ClientReport],
    held: Mapping[Hashable, str],
    who: Callable[[Hashable], str],
    budget: int,
) -> None:
    """One warning per round for clients that trained past their quota; one info line for the rest."""
    over = [r for r in reports if held.get(r.node_id) == "over-quota"]
    if over:
        logger.log(
            WARNING,
            "[adaptive] round %s: %d client(s) (%s, ...) trained on more samples than their "
            "quota and report no local data size: quota_data is not applied to their training data. "
            "Their updates are aggregated with at most their quota's weight and their cost is not "
            "measured; call quota_data(trainloader) where the client builds its training data "
            "(see docs/integration.md)",
            server_round,
            len(over),
            who(over[0].node_id),
        )
    other = {n: why for n, why in held.items() if why != "over-quota"}
    if other:
        logger.log(
            INFO,
            "[adaptive] round %s: not taken as cost estimates (aggregated all the same): %s",
            server_round,
            ", ".join(f"{who(n)} ({why})" for n, why in list(other.items())[:10]),
        )
    capped = [r for r in reports if r.capped]
    if capped:
        logger.log(
            WARNING,
            "[adaptive] round %s: %d of %d clients had a quota above their local data and "
            "trained on all of it (allow_cycling=False): the budget %d, split among the nodes sampled "
            "this round, exceeds what they hold, so their time is not balanced. Lower the budget, use "
            "budget_per_node with sampling, or set allow_cycling=True",
            server_round,
            len(capped),
            len(reports),
            budget,
        )
