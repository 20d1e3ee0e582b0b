"""Telemetry in: how the round coordinator turns a round's replies into controller observations.

Contract
--------
:func:`observe_round` is :meth:`AdaptiveCore.observe_replies
<flwr_adaptive.strategies.core.AdaptiveCore.observe_replies>`: for each report it learns the
node's partition and data size (its quota cap when cycling is off) and its batch size (the
step floor's, ``core.step_floor.note``), skips probes (nodes on
probation), holds back what would mislead the controller (``core.held_reason``), checks a
resumed estimate against the participant's first believed reply (:func:`check_resumed`) and
feeds one :class:`~flwr_adaptive.controller.Report` per kept client (as ``core.trust`` believes
it, :func:`believed_reports`; with its fixed overhead, :func:`_server_report`, and its idle
watts). An observation the controller refuses is logged and dropped (the update itself is
still aggregated); it returns the reports observed. ``"node-<id>"`` controller slots of nodes
now keyed by their partition are forgotten. Every hook it calls is the coordinator's, so a
strategy that overrides one changes it here too.

Cost
----
One ``observe`` per kept client, one ``estimates()`` when a median or an unverified resumed
estimate needs it, and one median over the round's times per sample.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from logging import WARNING
from typing import TYPE_CHECKING

import numpy as np

from flwr_adaptive import keys
from flwr_adaptive._logging import logger
from flwr_adaptive.controller import Report
from flwr_adaptive.strategies import round_log
from flwr_adaptive.strategies.observation import believe_without_setup
from flwr_adaptive.strategies.reports import ClientReport
from flwr_adaptive.strategies.state_store import contradiction, warn_contradicted

if TYPE_CHECKING:
    from flwr_adaptive.strategies.core import AdaptiveCore

__all__ = ["observe_round", "check_resumed", "believed_reports"]


def observe_round(core: AdaptiveCore, server_round: int, reports: Sequence[ClientReport]) -> list[ClientReport]:
    """Feed ``core``'s controller this round's reports; returns those it accepted (module doc)."""
    accepted = []
    book = core.nodes
    core._believed = core.believed_reports(server_round, reports)
    stale = []  # "node-<id>" keys of nodes now keyed by their partition: never used again
    core._held = {}
    warm = any(not r.cold_start for r in reports)
    per_sample = [r.time_s / r.samples for r in reports if not r.over_quota]
    median = float(np.median(per_sample)) if len(per_sample) >= 3 else None
    estimated = core.controller.estimates() if median is not None or core._unverified else {}
    discarded: list[str] = []  # resumed estimates this round's replies contradict
    observed = core.observed_seconds(reports) if core.server_time else {}
    for r in reports:
        book.replied.add(r.node_id)
        if r.partition_id is None:
            core._warn_once(
                "no-partition-id",
                "[adaptive] round %s: node %s's reply names no partition id (%r): its estimate, quota cap and "
                "share are keyed by its node id, which a restarted SuperNode does not keep. Pass the Context to "
                "the wrapper (TelemetryClient(client, context); @telemetry_train reads it), and in a deployment "
                'start each SuperNode with --node-config "partition-id=<N> num-partitions=<M>"',
                server_round,
                r.node_id,
                keys.PARTITION_ID,
            )
        else:
            book.claim(r.node_id, r.partition_id)
            if f"node-{r.node_id}" in book.node_keys and book.keys([r.node_id])[0] == r.partition_id:
                stale.append(f"node-{r.node_id}")
        key = book.keys([r.node_id])[0]
        core.step_floor.note(key, r.samples, r.steps)  # a probe's batches tell its batch size too
        if r.node_id in book.probation:
            continue  # a probe of min_quota samples says "alive", not what a sample costs
        if not core.allow_cycling and r.data_size is not None:
            try:
                core.controller.set_max_quota(key, max(r.data_size, core._min_of()))
                core.bounds.set_cap(key, max(r.data_size, core._min_of()))
            except (ValueError, OverflowError) as err:
                logger.log(
                    WARNING,
                    "[adaptive] round %s: data size %r of %s not used as its quota cap: %s",
                    server_round,
                    r.data_size,
                    core.who(r.node_id),
                    err,
                )
        reason = core.held_reason(r, key, warm=warm, median=median, estimated=key in estimated)
        if reason is not None:
            core._held[r.node_id] = reason
            continue
        if key in core._unverified:
            discarded += core._check_resumed(key, estimated.get(key), core._believed.get(r.node_id, r))
        try:
            core.controller.observe(key, _server_report(core, key, core._believed.get(r.node_id, r), observed))
        except ValueError as err:
            who = core.who(r.node_id)
            logger.log(WARNING, "[adaptive] round %s: observation of %s dropped: %s", server_round, who, err)
            continue
        if r.idle_w is not None:  # parse_report screened it: finite, >= 0
            core.controller.set_idle_power(key, r.idle_w)
        believed = core._believed.get(r.node_id, r)
        core.bounds.note_cost(key, believed.time_s / believed.samples)
        accepted.append(r)
    core._forget_keys(stale)
    round_log.warn_held(server_round, reports, core._held, core.who, core.budget)
    if discarded:
        warn_contradicted(server_round, discarded, core.trust.plausible_range if core.trust is not None else math.inf)
    return accepted


def _server_report(
    core: AdaptiveCore, key: Hashable, believed: ClientReport, observed: Mapping[Hashable, float]
) -> Report:
    """The controller's observation (the believed compute); the node's fixed overhead set beside it.

    Each round the server timed the node (``observed``), ``observed − compute`` joins its
    last ``core.overhead_window`` values and their median is its fixed per-round time
    (``observation.ServerOverheads``). The compute was already bounded by the server's
    evidence (``core.trust``); the remainder is the server's own measurement. The call's one-off
    set-up the client reports (``keys.SETUP_S``: ``ClientReport.setup_part``) moves from the
    compute into the same fixed term when the controller models one (affine costs,
    min-energy: ``core.models_setup()``), so it does not inflate the per-sample term.
    """
    setup = believed.setup_part() if core.models_setup() else 0.0
    fixed = core.overheads.note(key, believed, observed.get(believed.node_id), core.overhead_window, setup)
    if fixed is not None:
        core.controller.set_fixed_time(key, fixed)
    return believed.to_report(setup)


def check_resumed(
    core: AdaptiveCore, key: Hashable, saved: tuple[float, float | None] | None, believed: ClientReport
) -> list[str]:
    """Check a resumed estimate against its participant's first believed reply, like a claim
    (``state_store.contradiction``); returns ``["<key>: saved x, believed y"]`` when dropped
    (it is then learned again from this reply). Without ``trust`` the state is believed."""
    core._unverified.discard(key)
    if core.trust is None or saved is None or not math.isfinite(core.trust.plausible_range):
        return []
    why = contradiction(key, saved, believed.time_s, believed.energy_j, believed.samples, core.trust.plausible_range)
    if why is None:
        return []
    core.controller.forget([key])
    return [why]


def believed_reports(
    core: AdaptiveCore, server_round: int, reports: Sequence[ClientReport]
) -> dict[Hashable, ClientReport]:
    """``{node: report as believed}`` by ``core.trust`` (probes excluded: they time overhead; cold starts
    beside warm replies are returned as reported, outside the medians: they are held, not observed).

    Where a reported set-up moves into the fixed term (``core.models_setup()``), the rules judge
    the compute without it and the believed set-up is added back
    (``observation.believe_without_setup``).
    """
    claims = [r for r in reports if r.node_id not in core._probation]
    # A cold start's time holds the process's start-up: beside warm replies it is held, not observed
    # (``HeldReasons``), and as a claim it would raise the medians the warm ones are judged by (3 cold
    # nodes of 6 made an honest warm node look 6.65× too fast, its energy 52.6× and "absurd"). Judged
    # among themselves only when no reply is warm.
    held_cold = [r for r in claims if r.cold_start] if any(not r.cold_start for r in claims) else []
    if held_cold:
        claims = [r for r in claims if not r.cold_start]
    if core.trust is None or not claims:
        return {r.node_id: r for r in (*claims, *held_cold)}
    for r in claims:
        if r.partition_id is not None:
            core._partition_of.setdefault(r.node_id, r.partition_id)
    estimates = core.controller.estimates()
    key_of = dict(zip([r.node_id for r in claims], core._keys([r.node_id for r in claims])))

    def estimate(node: Hashable) -> float | None:
        # a resumed estimate no reply has confirmed is a claim, not history: no cap relative to it
        est = None if key_of[node] in core._unverified else estimates.get(key_of[node])
        return None if est is None else est[0]

    # A sampled federation's other known nodes join the medians the claims are judged by (not judged
    # themselves); a resumed estimate no reply confirmed is left out, like above.
    in_round = set(key_of.values()) | set(core._keys(core._round_sampled))
    population = [est for key, est in estimates.items() if key not in in_round and key not in core._unverified]
    # judged without a claimed set-up: the compute the controller learns the per-sample cost from
    setups = {r.node_id: r.setup_part() for r in claims} if core.models_setup() else {}
    believed = believe_without_setup(
        core.trust, server_round, claims, core.observed_seconds(claims), estimate, setups, population
    )
    return {**believed, **{r.node_id: r for r in held_cold}}
