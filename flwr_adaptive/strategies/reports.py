"""Server-side reading of the telemetry a wrapped client sends back (see ``flwr_adaptive.clients.telemetry``).

Contract
--------
``parse_report(node_id, metrics, quota)`` turns one reply's metrics (a Flower ``MetricRecord`` or
a legacy ``FitRes.metrics`` dict) into a :class:`ClientReport`, or raises ``ValueError`` naming
the node, the key and the value when the telemetry is missing or invalid (non-finite, negative
time, zero samples, wrong type, more samples than the quota from a client that selected its data
with ``quota_data``, a count beyond ``MAX_COUNT``, a time or energy per sample outside
``[MIN_PER_SAMPLE, MAX_PER_SAMPLE]``, where the controller's arithmetic would underflow to 0 or
overflow; local-work keys out of range: steps < 1, momentum outside [0, 1), lr ≤ 0, μ < 0, or
lr × μ ≥ 1; a set-up time that is negative or longer than the call). The strategies skip such a
reply: it is logged, not fatal. The local-work keys (``keys.LOCAL_WORK_KEYS``) and
``keys.SETUP_S`` are optional: absent or -1 they are ``None`` (unknown).

A client that trained on more samples than its quota **without** ``quota_data`` (it reports no
local data size) is not hostile but mis-set-up: its report is kept with ``over_quota=True`` and
``samples`` capped at the quota, so that its update is aggregated with at most its quota's weight
(never silently excluded), its cost is not observed, and the strategy warns with the fix (and stops
in the first round when every node does it: :mod:`flwr_adaptive.strategies.setup_check`).

The keys are those of :mod:`flwr_adaptive.keys`; nothing else is spelled here.

Cost
----
O(number of keys) per reply, pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from flwr_adaptive import keys
from flwr_adaptive.controller import MAX_IDLE_W, Report

__all__ = ["ClientReport", "parse_report", "MAX_COUNT", "MIN_PER_SAMPLE", "MAX_PER_SAMPLE", "MAX_SETUP_SHARE"]

#: Largest sample count, data size or partition id a reply may state: the largest integer a float
#: holds exactly (the controller's quotas are exact up to it). Anything larger is not a real
#: partition and would overflow the controller's int64 bounds.
MAX_COUNT = 2**53 - 1
#: Range of the seconds (and joules) per sample a reply may imply. Outside it the per-sample cost
#: underflows to 0 or overflows in the controller's arithmetic (``5e-324`` s for 2 samples is 0).
MIN_PER_SAMPLE = 1e-150
MAX_PER_SAMPLE = 1e150

#: Largest share of a reply's ``time_s`` its stated set-up (``keys.SETUP_S``) may move out of the
#: per-sample compute into the fixed term: a client's claim of set-up can then understate its
#: per-sample cost at most 10× (the factor of the strategies' outlier hold), never to nothing.
MAX_SETUP_SHARE = 0.9

NodeId = Hashable  # int node id (Message API, legacy cid parsed) or the legacy cid string


@dataclass(frozen=True)
class ClientReport:
    """One client's telemetry for one round, validated.

    Attributes
    ----------
    node_id : int or str
        Flower node id of the sender (changes between runs).
    partition_id : int or None
        Stable id of the client across runs (``None`` when the client could not tell).
    quota : int or None
        Samples the strategy assigned this round (``None`` if it assigned none).
    samples : int
        Samples actually processed (per local epoch).
    time_s : float
        Seconds of its own compute: emulated device time when ``virtual_clock``, else wall time.
    cpu_time_s, wall_time_s : float
        Process CPU seconds and wall seconds of the training call.
    energy_j : float or None
        Active joules of that compute; ``None`` when unmeasured.
    data_size : int or None
        Local data size; ``None`` when unknown.
    capped : bool
        The quota exceeded the local data and cycling was not allowed: fewer samples were used.
    idle_w : float or None
        The device's idle power while it waits for the others; ``None`` when unknown.
    virtual_clock : bool
        Whether ``time_s`` and ``energy_j`` come from an emulated device (virtual clock).
    over_quota : bool
        The client trained on more than its quota without ``quota_data``; ``samples`` is then the
        quota (its weight), and the cost per sample is unknown.
    cold_start : bool
        The client's first training call in its process (``keys.COLD_START``): imports and
        first-call set-up are inside ``time_s``.
    steps : int or None
        Local optimizer steps of the round (``keys.LOCAL_STEPS``); ``None`` when unknown.
    momentum : float or None
        Momentum of the local SGD, in [0, 1) (``keys.LOCAL_MOMENTUM``); ``None`` when unknown.
    lr : float or None
        Learning rate of the round's last local step (``keys.LOCAL_LR``); ``None`` when unknown.
    proximal_mu : float or None
        The proximal term's μ applied locally (``keys.LOCAL_PROXIMAL_MU``); ``None`` when unknown.
    setup_s : float or None
        Wall seconds of the call beyond its steady training steps (``keys.SETUP_S``: set-up,
        warm-up), at most ``wall_time_s``; ``None`` when unknown.
    """

    node_id: NodeId
    partition_id: int | None
    quota: int | None
    samples: int
    time_s: float
    cpu_time_s: float
    wall_time_s: float
    energy_j: float | None
    data_size: int | None
    capped: bool
    idle_w: float | None
    virtual_clock: bool
    over_quota: bool = False
    cold_start: bool = False
    steps: int | None = None
    momentum: float | None = None
    lr: float | None = None
    proximal_mu: float | None = None
    setup_s: float | None = None

    @property
    def proximal_alpha(self) -> float | None:
        """α = lr × μ of the proximal term (0.0 without one; ``None``: μ > 0 but the lr is unknown)."""
        if not self.proximal_mu:
            return 0.0
        return None if self.lr is None else self.lr * self.proximal_mu

    def setup_part(self) -> float:
        """Seconds of ``time_s`` that are the call's one-off set-up (``setup_s``, at most
        :data:`MAX_SETUP_SHARE` of ``time_s``); 0 when unknown or on the virtual clock (whose
        device seconds hold no wall-clock set-up)."""
        if self.setup_s is None or self.virtual_clock:
            return 0.0
        return min(self.setup_s, MAX_SETUP_SHARE * self.time_s)

    def to_report(self, setup_s: float = 0.0) -> Report:
        """The controller's view of this round: own compute time (less ``setup_s`` seconds of
        set-up, which the strategy models as a fixed cost), active energy, samples.

        The set-up's share of the energy leaves with it, at the call's mean power (a meter reads
        one window per call, not its phases): left in, a cold call's set-up would inflate the
        per-sample energy that min-energy splits by, as its time did the per-sample time.
        """
        energy = self.energy_j
        if setup_s > 0 and energy is not None:
            energy *= (self.time_s - setup_s) / self.time_s
        return Report(time_s=self.time_s - setup_s, energy_j=energy, samples=self.samples)


def _number(node_id: NodeId, metrics: Mapping[str, Any], key: str) -> float:
    if key not in metrics:
        raise ValueError(
            f"node {node_id}: telemetry key {key!r} is missing; wrap the client with "
            "flwr_adaptive.clients.telemetry (telemetry_train / TelemetryClient)"
        )
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"node {node_id}: telemetry {key!r} must be a number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:  # an int beyond float range
        raise ValueError(
            f"node {node_id}: telemetry {key!r} must be finite, got an integer of {int(value).bit_length()} bits"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"node {node_id}: telemetry {key!r} must be finite, got {value!r}")
    return value


def _integer(node_id: NodeId, metrics: Mapping[str, Any], key: str) -> int:
    value = _number(node_id, metrics, key)
    if value != int(value):
        raise ValueError(f"node {node_id}: telemetry {key!r} must be a whole number, got {value!r}")
    if abs(value) > MAX_COUNT:
        raise ValueError(
            f"node {node_id}: telemetry {key!r} = {value!r} is beyond the largest supported count {MAX_COUNT}"
        )
    return int(value)


def _per_sample(node_id: NodeId, key: str, value: float, samples: int) -> None:
    per = value / samples
    if not MIN_PER_SAMPLE <= per <= MAX_PER_SAMPLE:
        raise ValueError(
            f"node {node_id}: telemetry {key!r} = {value!r} for {samples} samples is "
            f"{per!r} per sample, outside the computable range [{MIN_PER_SAMPLE:g}, "
            f"{MAX_PER_SAMPLE:g}]"
        )


def _local_work(node_id: NodeId, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The optional local-work keys (``keys.LOCAL_WORK_KEYS``): ``None`` for absent or unknown (-1)."""
    out: dict[str, Any] = {"steps": None, "momentum": None, "lr": None, "proximal_mu": None}
    if keys.LOCAL_STEPS in metrics:
        steps = _integer(node_id, metrics, keys.LOCAL_STEPS)
        if steps != keys.UNKNOWN and steps < 1:
            raise ValueError(
                f"node {node_id}: telemetry {keys.LOCAL_STEPS!r} must be >= 1 (or {keys.UNKNOWN} for unknown), "
                f"got {steps}: a client that trained took at least one optimizer step"
                + (
                    " (the wrapper says 0 when the call read none of its quota, e.g. its own DataLoader with "
                    "drop_last=True and a batch size above the quota: pass that DataLoader to quota_data, which "
                    "reads such a quota as one batch, or set min_quota >= the batch size)"
                    if steps == 0
                    else ""
                )
            )
        out["steps"] = None if steps == keys.UNKNOWN else steps
    if keys.LOCAL_MOMENTUM in metrics:
        rho = _number(node_id, metrics, keys.LOCAL_MOMENTUM)
        if rho != keys.UNKNOWN and not 0.0 <= rho < 1.0:
            raise ValueError(
                f"node {node_id}: telemetry {keys.LOCAL_MOMENTUM!r} must be in [0, 1) (or -1 for unknown), got {rho!r}"
            )
        out["momentum"] = None if rho == keys.UNKNOWN else rho
    if keys.LOCAL_LR in metrics:
        lr = _number(node_id, metrics, keys.LOCAL_LR)
        if lr != keys.UNKNOWN and not 0.0 < lr <= MAX_PER_SAMPLE:
            raise ValueError(f"node {node_id}: telemetry {keys.LOCAL_LR!r} must be > 0 (or -1 for unknown), got {lr!r}")
        out["lr"] = None if lr == keys.UNKNOWN else lr
    if keys.LOCAL_PROXIMAL_MU in metrics:
        mu = _number(node_id, metrics, keys.LOCAL_PROXIMAL_MU)
        if mu != keys.UNKNOWN and not 0.0 <= mu <= MAX_PER_SAMPLE:
            raise ValueError(
                f"node {node_id}: telemetry {keys.LOCAL_PROXIMAL_MU!r} must be >= 0 (or -1 for unknown), got {mu!r}"
            )
        out["proximal_mu"] = None if mu == keys.UNKNOWN else mu
    if out["proximal_mu"] and out["lr"] is not None and not out["lr"] * out["proximal_mu"] < 1.0:
        raise ValueError(
            f"node {node_id}: telemetry {keys.LOCAL_LR!r} × {keys.LOCAL_PROXIMAL_MU!r} = "
            f"{out['lr'] * out['proximal_mu']!r} must be < 1 (a proximal step of lr × mu >= 1 overshoots "
            "the global model: local training diverges); lower the learning rate or mu"
        )
    return out


def parse_report(node_id: NodeId, metrics: Mapping[str, Any], quota: int | None) -> ClientReport:
    """Validate one reply's telemetry.

    Parameters
    ----------
    node_id : int or str
        Sender's node id (for messages and for the error text).
    metrics : Mapping
        The reply's metrics (``MetricRecord`` or ``FitRes.metrics``).
    quota : int or None
        What the strategy assigned to this node this round.

    Raises
    ------
    ValueError
        A telemetry key is missing, not a finite number, or out of range (``samples`` above
        ``quota`` included).
    """
    samples = _integer(node_id, metrics, keys.SAMPLES)
    if samples <= 0:
        raise ValueError(f"node {node_id}: telemetry {keys.SAMPLES!r} must be > 0, got {samples}")
    data_size = _integer(node_id, metrics, keys.DATA_SIZE)
    over_quota = quota is not None and samples > quota and data_size < 0
    if over_quota and quota is not None:
        samples = quota  # weight at most its quota's; see the module docstring
    elif quota is not None and samples > quota:
        # Budgets are exact (rounds × budget samples in all): a client may process fewer samples
        # than its quota (capped), never more.
        raise ValueError(
            f"node {node_id}: telemetry {keys.SAMPLES!r} = {samples} exceeds the quota of "
            f"{quota} it was sent; the client must train on at most its quota "
            "(flwr_adaptive.clients.data.quota_data)"
        )
    time_s = _number(node_id, metrics, keys.TIME_S)
    if time_s <= 0:
        raise ValueError(f"node {node_id}: telemetry {keys.TIME_S!r} must be > 0, got {time_s!r}")
    _per_sample(node_id, keys.TIME_S, time_s, samples)
    cpu_s = _number(node_id, metrics, keys.CPU_TIME_S)
    wall_s = _number(node_id, metrics, keys.WALL_TIME_S)
    for key, value in ((keys.CPU_TIME_S, cpu_s), (keys.WALL_TIME_S, wall_s)):
        if value < 0:
            raise ValueError(f"node {node_id}: telemetry {key!r} must be >= 0, got {value!r}")
    energy = _number(node_id, metrics, keys.ENERGY_J)
    if energy < 0 and energy != keys.UNMEASURED_ENERGY:
        raise ValueError(
            f"node {node_id}: telemetry {keys.ENERGY_J!r} must be >= 0 "
            f"(or {keys.UNMEASURED_ENERGY} for unmeasured), got {energy!r}"
        )
    if energy > 0:
        _per_sample(node_id, keys.ENERGY_J, energy, samples)
    partition = _integer(node_id, metrics, keys.PARTITION_ID)
    idle_w = _number(node_id, metrics, keys.IDLE_W)
    if idle_w > MAX_IDLE_W:
        raise ValueError(
            f"node {node_id}: telemetry {keys.IDLE_W!r} must be at most {MAX_IDLE_W:g} W (or -1 for "
            f"unknown), got {idle_w!r}: report the device's idle draw in watts"
        )
    capped = _integer(node_id, metrics, keys.QUOTA_CAPPED)
    virtual = _integer(node_id, metrics, keys.VIRTUAL_CLOCK)
    cold = _integer(node_id, metrics, keys.COLD_START) if keys.COLD_START in metrics else 0
    setup = _number(node_id, metrics, keys.SETUP_S) if keys.SETUP_S in metrics else float(keys.UNKNOWN)
    if setup != keys.UNKNOWN and not 0.0 <= setup <= wall_s:
        raise ValueError(
            f"node {node_id}: telemetry {keys.SETUP_S!r} must be in [0, {keys.WALL_TIME_S!r} = {wall_s!r}] "
            f"(or {keys.UNKNOWN} for unknown), got {setup!r}: it is part of the call's wall time"
        )
    return ClientReport(
        node_id=node_id,
        partition_id=None if partition < 0 else partition,
        quota=quota,
        samples=samples,
        time_s=time_s,
        cpu_time_s=cpu_s,
        wall_time_s=wall_s,
        energy_j=None if energy < 0 else energy,
        data_size=None if data_size < 0 else data_size,
        capped=bool(capped),
        idle_w=None if idle_w < 0 else idle_w,
        virtual_clock=bool(virtual),
        over_quota=over_quota,
        cold_start=bool(cold),
        setup_s=None if setup == keys.UNKNOWN else setup,
        **_local_work(node_id, metrics),
    )
