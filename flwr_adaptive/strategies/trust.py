"""Bounding what a client can take by lying about its cost (see ``docs/security.md``).

Contract
--------
A client that reports a per-sample time far below its real one is given a larger share and makes
everyone wait. :class:`CostTrust` turns each round's claims into the times the server believes,
before they reach the controller (and Oort's durations, FedAsync's virtual clock, HFL's per-rank
times: each rank against the other ranks of its silo). Three rules, in order:

1. **Server evidence** (wall-clock reports the server timed). The server knows when it sent a
   node its instruction and when it received the reply (the SuperLink's ``delivered_at``, which
   reaches an in-process ServerApp only, or the ``TimedGrid``'s own stamps: see
   ``round_timeout.timed_grid``; without either, as under ``flwr run`` by default, this rule has
   nothing to judge): that interval bounds the node's compute from above. Every
   node's interval also holds transport and start-up time, so the group's median of
   ``observed − claimed`` is taken as the common overhead; a node whose ``observed − overhead``
   exceeds its claim by more than ``evidence_gap`` (a factor) and ``evidence_min_s`` seconds is
   suspect that round. Suspicion accumulates: one strike per suspect round, ``forgive`` strikes
   taken off per clean round; while a node holds ``strikes`` or more, each suspect round of it is
   timed by what the server observed minus the common overhead. A node that lies in two rounds
   of three is priced by its lies from its second one on (were one honest round to reset the
   strikes, it would get through every third round). The interval is coarse: in Flower 1.42 a SuperNode polls for
   instructions and the deployment Grid pulls replies every 3 s, so an honest node can look up
   to two polls later than the group's median; ``evidence_min_s`` (7 s) lies above that, and
   lies worth less per round are left to rules 2 and 3. A claim longer than the whole interval
   (the reply came back before the claimed compute could have ended) is taken at the interval,
   from one report on, with one warning naming the node: it would only lower the node's own
   share, but its estimate would be what no device did (the round's makespan and energy figures
   still add up the claims as sent).
2. **Group plausibility.** A per-sample time (or energy, when measured) below the median of the
   *other* nodes divided by ``plausible_range`` is not believed. The other nodes are the round's
   other claims and, in a sampled federation, the believed costs of the known nodes the round did
   not sample (``population``): a round of two nodes is judged too, and a coalition that is a
   majority of one sampled round is still judged against the population's median. Claimants cannot
   move that median by joining forces: the ``k`` lowest claims of the round are also judged as
   one group against the median of the rest, for every ``k`` up to ``max_group`` of the nodes;
   when the group's highest claim is below that median divided by ``plausible_range``, every
   member is implausible. An implausible node's reference is the highest such median (that of
   the nodes slower than its group: the typical honest node). Down to the reference divided by
   ``absurd_range`` it is taken at the edge of the range, ``reference / plausible_range``:
   exactly what a claim just inside the range earns, so a liar's best strategy and its bound
   (below) are unchanged, while an honest device up to ``absurd_range`` times faster than the
   median is believed ``plausible_range`` times faster instead of not at all. Below that it is
   absurd and taken at the reference: it earns nothing, alone or in a coalition of up to
   ``max_group``. Needs at least ``min_group`` other reports; a genuinely faster device (or
   group of devices, up to ``max_group`` of them) than ``plausible_range`` × the median is
   under-used, believed at ``plausible_range`` × the median, and one faster than
   ``absurd_range`` × at the median (raise ``plausible_range`` / ``absurd_range`` for such a
   federation).
3. **Growth cap.** A per-sample time may fall at most by ``max_drop`` per round relative to the
   node's current estimate, so its share grows at most about ``max_drop`` times per round; an
   honest node that really becomes faster gets there in a few rounds.

Each adjustment is logged once per node and rule (rule 2 says which tier, the factor and the
range to raise). What is not defended: a lie inside the plausible range or between it and the
absurd range (a node believed at ``1/plausible_range`` of its real time gets up to about
``plausible_range`` times its fair share, reached after ``log(plausible_range)/log(max_drop)``
rounds: docs/security.md gives the makespan this costs), a colluding group of more than
``max_group`` of the nodes (it is the median), and, wherever the server does not time the
replies (simulation; a deployment without a ``TimedGrid``), anything that needs that clock.

Cost
----
O(N log N) per round for R reports and N − R known nodes not in the round (a sort per rule; the
group medians index the sorted costs), one dict entry per node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from logging import WARNING

import numpy as np

from flwr_adaptive._logging import logger
from flwr_adaptive.strategies.reports import ClientReport

__all__ = ["CostTrust", "TrustSetting", "resolve_trust"]


@dataclass
class CostTrust:
    """The server's belief about each node's cost (see the module contract).

    Parameters
    ----------
    plausible_range : float (default: 4.0)
        A per-sample cost below the others' median divided by this is not believed: it is taken
        at that median divided by this (the edge of the range). ``inf`` turns the rule off.
    absurd_range : float (default: 16.0)
        A per-sample cost below the others' median divided by this is absurd: it is taken at that
        median (it earns nothing). At least ``plausible_range``; ``plausible_range`` takes every
        implausible claim at the median, ``inf`` every one at the edge of the range.
    max_drop : float (default: 2.0)
        A per-sample time may fall at most by this factor per round below the node's estimate.
        ``inf`` turns the rule off.
    min_group : int (default: 2)
        Fewest *other* reports of the round for the group rules (medians of fewer mean little).
    evidence_gap : float (default: 2.0)
        Server evidence suspects a node when the time it implies exceeds the claim by this factor…
    evidence_min_s : float (default: 7.0)
        …and by at least these seconds: two of Flower's 3-s polls (the SuperNode's for the
        instruction, the ServerApp's for the reply), which an honest node's observed time can
        carry beyond the group's median, and a margin for the polls' own calls.
    strikes : int (default: 2)
        Strikes (one per suspect round) from which a suspect round is timed by the server's
        observation.
    forgive : float (default: 0.25)
        Strikes taken off per clean round: a node caught twice stays priced by the server for its
        next lies until it has reported honestly for ``1 / forgive`` rounds per strike.
    max_group : float (default: 1/3)
        Largest share of the round's reports whose claims are judged as one group (rule 2): a
        coalition of up to this share cannot lower the reference it is judged by.
    """

    plausible_range: float = 4.0
    absurd_range: float = 16.0
    max_drop: float = 2.0
    min_group: int = 2
    evidence_gap: float = 2.0
    evidence_min_s: float = 7.0
    strikes: int = 2
    forgive: float = 0.25
    max_group: float = 1 / 3
    #: How a warning names a node: the strategies set their own (``"partition 3 (node <id>)"``;
    #: HFL's ranks ``"partition 0, rank 1"``), the node id without one.
    who: Callable[[Hashable], str] = field(init=False, repr=False, compare=False)
    # per-strategy state, not settings: a copy by dataclasses.replace starts its own
    _strikes: dict[Hashable, float] = field(default_factory=dict, init=False, repr=False)
    _said: set[tuple[str, Hashable]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        self.who = _node_label
        for name in ("plausible_range", "max_drop", "evidence_gap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1.0:
                raise ValueError(f"{name} must be a number >= 1 (inf turns the rule off), got {value!r}")
        absurd = self.absurd_range
        # plausible_range=inf turns rule 2 off: absurd_range (unused) need only be a range then
        least = self.plausible_range if math.isfinite(self.plausible_range) else 1.0
        if isinstance(absurd, bool) or not isinstance(absurd, (int, float)) or not absurd >= least:
            raise ValueError(
                f"absurd_range must be a number >= plausible_range ({self.plausible_range!r}; equal to it takes "
                f"every implausible claim at the median, inf at the edge of the range), got {absurd!r}: a "
                f"plausible_range above the default absurd_range (16) needs absurd_range=... raised with it"
            )
        if (
            isinstance(self.evidence_min_s, bool)
            or not isinstance(self.evidence_min_s, (int, float))
            or not self.evidence_min_s >= 0
        ):
            raise ValueError(f"evidence_min_s must be seconds >= 0, got {self.evidence_min_s!r}")
        for name, low, high in (("forgive", 0.0, math.inf), ("max_group", 0.0, 0.5)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
        for name in ("min_group", "strikes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    def believe(
        self,
        server_round: int,
        reports: Sequence[ClientReport],
        observed_s: Mapping[Hashable, float] | None = None,
        estimate_of: Callable[[Hashable], float | None] | None = None,
        population: Sequence[tuple[float, float | None]] = (),
    ) -> dict[Hashable, ClientReport]:
        """``{node_id: the report as the server believes it}`` (the same object when believed).

        Parameters
        ----------
        reports : sequence of ClientReport
            The round's kept reports (validated by ``parse_report``).
        observed_s : mapping, optional
            Seconds the server observed between sending each node its instruction and its reply
            (deployment only; never for virtual-clock reports).
        estimate_of : callable, optional
            The node's current per-sample time estimate (``None`` when it has none).
        population : sequence of (float, float or None), optional
            The believed per-sample ``(seconds, joules)`` of known nodes *not* in this round (a
            sampled federation's other nodes): they count in rule 2's medians and group sizes like
            the round's other claims and are not judged. Without them a round of 2 sampled nodes
            would have no median to judge by, and a coalition under a third of the population could
            be the majority of a sampled round.
        """
        out = {r.node_id: r for r in reports}
        self._evidence(server_round, reports, observed_s or {}, out)
        self._plausible(server_round, out, "time", [t for t, _ in population])
        self._plausible(server_round, out, "energy", [e for _, e in population if e is not None])
        if estimate_of is not None and math.isfinite(self.max_drop):
            for node, r in list(out.items()):
                prev = estimate_of(node)
                if (
                    prev is not None
                    and math.isfinite(prev)
                    and prev > 0
                    and r.time_s / r.samples < prev / self.max_drop
                ):
                    out[node] = replace(r, time_s=prev / self.max_drop * r.samples)
                    self._say(
                        "drop",
                        node,
                        "[adaptive] round %s: %s claims %.3g s per sample, more than %g× "
                        "below its estimate %.3g: its cost may fall by at most %g× per round",
                        server_round,
                        self.who(node),
                        r.time_s / r.samples,
                        self.max_drop,
                        prev,
                        self.max_drop,
                    )
        return out

    # ------------------------------------------------------------------ rules
    def _evidence(
        self,
        server_round: int,
        reports: Sequence[ClientReport],
        observed_s: Mapping[Hashable, float],
        out: dict[Hashable, ClientReport],
    ) -> None:
        timed = [
            r
            for r in reports
            if not r.virtual_clock
            and r.node_id in observed_s
            and math.isfinite(observed_s[r.node_id])
            and observed_s[r.node_id] > 0
        ]
        for r in timed:  # a compute claim longer than the whole wait is impossible, whatever the group
            if r.time_s > observed_s[r.node_id]:
                out[r.node_id] = replace(r, time_s=observed_s[r.node_id])
                self._say(
                    "above-observed",
                    r.node_id,
                    "[adaptive] round %s: %s claims %.3g s of compute, more than the %.3g s the server waited for "
                    "its reply: it is taken at %.3g s (its clock or its meter is wrong, or it lies)",
                    server_round,
                    self.who(r.node_id),
                    r.time_s,
                    observed_s[r.node_id],
                    observed_s[r.node_id],
                )
        timed = [out[r.node_id] for r in timed]
        if len(timed) < self.min_group + 1:
            return
        overhead = float(np.median([observed_s[r.node_id] - r.time_s for r in timed]))
        for r in timed:
            implied = observed_s[r.node_id] - max(overhead, 0.0)
            suspect = implied > self.evidence_gap * r.time_s and implied - r.time_s > self.evidence_min_s
            held = self._strikes.get(r.node_id, 0.0)
            # Slow forgiveness, not a reset: a node lying two rounds in three would otherwise start
            # from zero after every honest round and be believed in every third.
            self._strikes[r.node_id] = held + 1.0 if suspect else max(held - self.forgive, 0.0)
            if suspect and self._strikes[r.node_id] >= self.strikes:
                out[r.node_id] = replace(r, time_s=implied)
                self._say(
                    "evidence",
                    r.node_id,
                    "[adaptive] round %s: %s claims %.3g s but the server observed "
                    "%.3g s beyond the common overhead (%.3g strikes: one per suspect round, %g forgiven per "
                    "clean round): it is timed by the server's observation in its suspect rounds",
                    server_round,
                    self.who(r.node_id),
                    r.time_s,
                    implied,
                    self._strikes[r.node_id],
                    self.forgive,
                )

    def _plausible(
        self, server_round: int, out: dict[Hashable, ClientReport], what: str, population: Sequence[float]
    ) -> None:
        if not math.isfinite(self.plausible_range):
            return
        per = {n: (r.time_s if what == "time" else r.energy_j) for n, r in out.items()}
        per = {n: v / out[n].samples for n, v in per.items() if v is not None and v > 0}
        absent = [v for v in population if math.isfinite(v) and v > 0]
        if not per or len(per) + len(absent) < self.min_group + 1:
            return
        # the absent nodes follow the round's claims: the first len(per) answers are the claims'
        values = np.array(list(per.values()) + absent)
        references = _references(values, self.plausible_range, max(int(self.max_group * len(values)), 1))
        believed = _tiered(values, references, self.plausible_range, self.absurd_range)
        unit = "s" if what == "time" else "J"
        for (node, value), others, at in zip(per.items(), references, believed):
            if not math.isfinite(at):
                continue
            r = out[node]
            if what == "time":
                out[node] = replace(r, time_s=float(at) * r.samples)
            else:
                out[node] = replace(r, energy_j=float(at) * r.samples)
            absurd = bool(value < others / self.absurd_range)  # _tiered took it at the reference
            self._say(
                f"{'absurd' if absurd else 'edge'}-{what}",
                node,
                "[adaptive] round %s: %s claims %.3g %s per sample, %.3g× below the other nodes' median %.3g "
                "(of those slower than its group), beyond the plausible range (%g×): not believed, it is "
                + (
                    "absurd (beyond %g×) and taken at that median; if this node is honest and that fast, "
                    "raise CostTrust(plausible_range=..., absurd_range=...) above %.3g"
                    if absurd
                    else "taken at the range's edge %.3g (1/%g of that median); if this node is honest and "
                    "that fast, raise CostTrust(plausible_range=...) above %.3g"
                ),
                server_round,
                self.who(node),
                value,
                unit,
                others / value,
                others,
                self.plausible_range,
                *((self.absurd_range,) if absurd else (float(at), self.plausible_range)),
                others / value,
            )

    def _say(self, rule: str, node: Hashable, msg: str, *args: object) -> None:
        if (rule, node) not in self._said:
            self._said.add((rule, node))
            logger.log(WARNING, msg, *args)


def _node_label(node: Hashable) -> str:
    return f"node {node}"


def _median_of_others(values: np.ndarray) -> np.ndarray:
    """For each entry, the median of all the *other* entries, from one sort: O(R log R).

    Entry ``i`` at rank ``k`` of the sorted values: the others are the sorted values without
    position ``k``, so their middle position(s) ``j`` sit at ``j`` (below ``k``) or ``j + 1``.
    """
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values))
    others = len(values) - 1
    low, high = (others - 1) // 2, others // 2
    return (ranked[low + (low >= rank)] + ranked[high + (high >= rank)]) / 2


def _references(values: np.ndarray, plausible_range: float, max_group: int) -> np.ndarray:
    """Per entry, the median it is taken at when implausible (rule 2), else ``nan``: O(R log R).

    Entry ``i`` is implausible when it is below ``median(others)/range``, or when it is among the
    ``k`` lowest entries (``k <= max_group``) and the ``k``-th lowest is below the median of the
    other ``R - k`` divided by ``range``; it is then taken at the highest of those medians. The
    medians of the sorted suffixes are read off the sorted values by index (no median per entry).
    """
    n = len(values)
    others = _median_of_others(values)
    out = np.where(values < others / plausible_range, others, np.nan)
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    k = np.arange(1, min(max_group, n - 1) + 1)  # group sizes: the k lowest against the other n - k
    rest = (ranked[k + (n - k - 1) // 2] + ranked[k + (n - k) // 2]) / 2
    flagged = ranked[k - 1] < rest / plausible_range
    if flagged.any():
        # entry at rank r belongs to every group k > r: its reference is the highest flagged rest median
        best = np.maximum.accumulate(np.where(flagged, rest, -np.inf)[::-1])[::-1]
        by_rank = np.full(n, -np.inf)
        by_rank[: len(best)] = best
        group = np.empty(n)
        group[order] = by_rank
        out = np.where(np.isfinite(group), np.fmax(out, group), out)
    return out


def _tiered(values: np.ndarray, references: np.ndarray, plausible_range: float, absurd_range: float) -> np.ndarray:
    """Per entry, the cost it is believed at when implausible (rule 2's tiers), else ``nan``.

    ``references`` is :func:`_references`' answer: an implausible entry lies below its reference
    divided by ``plausible_range``. At or above the reference divided by ``absurd_range`` it is
    taken at the edge of the range (``reference / plausible_range``: what a claim just inside it
    earns); below, absurd, at the reference itself.
    """
    return np.where(values >= references / absurd_range, references / plausible_range, references)


def resolve_trust(trust: CostTrust | bool) -> CostTrust | None:
    """A strategy's ``trust`` argument: ``True`` → the default :class:`CostTrust`, ``False`` → none
    (every claim believed), a :class:`CostTrust` as given; anything else a ``ValueError`` with the fix."""
    if trust is True:
        return CostTrust()
    if trust is False:
        return None
    if isinstance(trust, CostTrust):
        return trust
    raise ValueError(
        f"trust must be True (the default rules), False (believe every claim) or "
        f"flwr_adaptive.strategies.CostTrust(...) to tune them, got {trust!r}"
    )


class TrustSetting:
    """A strategy's ``trust`` attribute, at construction or set later: resolved by :func:`resolve_trust`
    (``None`` as ``False``: every claim believed; anything else refused with the fix, the setting left as it
    was), its warnings naming nodes by the strategy's ``who`` when it has one."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_resolved"

    def __get__(self, instance: object, owner: type | None = None) -> CostTrust | None:
        if instance is None:
            return self  # type: ignore[return-value]
        return instance.__dict__.get(self.slot)

    def __set__(self, instance: object, value: CostTrust | bool | None) -> None:
        trust = resolve_trust(False if value is None else value)
        who = getattr(instance, "who", None)
        if trust is not None and callable(who):
            trust.who = who  # warnings name the partition the operator configured (HFL: the rank)
        instance.__dict__[self.slot] = trust
