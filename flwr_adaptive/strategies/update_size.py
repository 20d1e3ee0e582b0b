"""How far one reply may move the model: the update-size screen of normalised aggregation.

Contract
--------
Under normalised aggregation a kept reply enters the inner average as ``x + s_i·(x_i − x)``, with
``s_i = min(τ_eff / ‖a_i‖₁, max_rescale)``: its update over its local work ``‖a_i‖₁`` (what its
steps and optimizer are believed to be worth) is the node's average step, and the contribution is
at most τ_eff times it. Honest average steps are steps of one optimisation from one model and have
comparable lengths (L2 over the floating-point arrays: :func:`update_length`), whatever the node's
quota or step count. A reply that scales its model (× 1e30: finite, accepted, and the global model
was that reply's from then on, since no honest average could move it back) or sends a far-off one
has an average step many times longer; claiming more steps to shorten it shrinks its factor by as
much. :func:`outsized` names the average steps longer than ``ratio`` × the round's median (judged
from 3 replies: a median needs them); the strategies skip those replies with one warning each
(their telemetry was observed already, like any reply's with valid telemetry) and recompute the
round's weights and factors over the others. The ``"samples"`` and ``"data-size"`` weightings
average the updates as they are, so there the whole update ``‖x_i − x‖`` is judged: a claimed step
count would shorten the step judged without shortening what enters the average, and a fast
node's longer update for its larger quota stays well inside ``ratio`` (without this a single
silo's × 1e30 model was the global model from round 1 of the HFL app, which weighs by samples).

A round of fewer than 3 replies (a sampled federation: Flower's ``min_train_nodes`` is 2) is judged
against its own lengths and every node's latest judged length of an earlier round in the same unit
(its own too: each earlier entry is one node's last judged reply, skipped ones included, like
FedAsync's :class:`LatestUpdates`): one reply of 2 at × 1e30 was the global model from then on. An average
step per optimizer step and one per sample (a round whose replies did not all say their steps) do
not compare, nor do either with a whole update; a learning rate that changes by ~100× between
rounds makes earlier steps a wrong reference too.

Not bounded: a reply within ``ratio`` × the median (a node may push the model up to that far a
round; honest steps are too far apart for a ratio that catches moderate poisoning: a robust inner
strategy such as ``FedTrimmedAvg`` bounds what stays), a run's first rounds while fewer than 3
lengths are known (a 2-node round 1; ``latest`` is in the state file, so a resumed server keeps
them), and a coalition holding half of the lengths judged or more (the lower median is then
theirs: near-zero updates get every honest one skipped; that can be 2 nodes of 5 when a third
times out, or 1 node of 2).

:class:`UpdateSizeScreen` is the round's screen as the strategies use it: it measures each reply's
update while screening decodes the reply's arrays (``value_check``), and judges the kept replies once
their work is known (``skip``).

Cost
----
A float64 difference with the model sent for each floating-point array, as screening decodes it (no
second decode), and one median per round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from logging import WARNING

import numpy as np

from flwr_adaptive._logging import logger

__all__ = [
    "MAX_UPDATE_RATIO",
    "MIN_JUDGED",
    "UpdateSizeScreen",
    "LatestUpdates",
    "ValueCheck",
    "checked_update_ratio",
    "update_length",
    "relative_lengths",
    "outsized",
    "skip_outsized",
]

#: Default ``max_update_ratio``: an average step longer than this × the round's median is skipped. Honest
#: ones reach 37× (the largest ``update_ratio`` of 3,697 normalised rounds: ``python -m experiments.reproduce
#: --only-noniid --noniid-part main --noniid-alphas 0.3 --noniid-seeds 2 --noniid-measured-seeds 0`` and the
#: same with ``--noniid-part baselines``; a slow node's few small, shrunk batches are noisy steps), so 100
#: leaves them alone and catches a scaled model.
MAX_UPDATE_RATIO = 100.0
MIN_JUDGED = 3  # fewer lengths have no median to judge by


def checked_update_ratio(value: object) -> float:
    """``value`` as a ``max_update_ratio``: a number >= 1 or ``math.inf`` (below 1 even the median reply
    would be outsized), else a ``ValueError`` with the fix."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"max_update_ratio must be a number >= 1 (math.inf: no screen), got {value!r}")
    ratio = float(value)
    if not ratio >= 1:
        raise ValueError(
            f"max_update_ratio must be >= 1 (math.inf: no screen), got {value!r}: below 1 the median reply "
            "itself would be skipped; honest updates reach ~37x the median, the default is 100"
        )
    return ratio


def _squared_distance(xi: np.ndarray, x: np.ndarray) -> float:
    """``‖xi − x‖₂²`` for floating-point arrays of one shape, else 0 (not an update to measure)."""
    if xi.dtype.kind != "f" or x.dtype.kind != "f" or xi.shape != x.shape:
        return 0.0
    d = np.asarray(xi, dtype=np.float64) - np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):  # a float64 update near its range: inf, which outsized() skips
        return float(np.dot(d.ravel(), d.ravel()))


def update_length(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> float:
    """``‖x_i − x‖₂`` over the floating-point ``(reply array, model array)`` pairs (others skipped)."""
    return math.sqrt(sum(_squared_distance(xi, x) for xi, x in pairs))


def relative_lengths(lengths: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """``{node: its length / the lower median of lengths}`` (``{}`` with fewer than 3 or a zero median).

    The lower median (the middle value of an odd count, the lower middle one of an even count): with
    ``np.median`` half of the replies (not a majority) could raise the reference by sending long updates
    together (2 of 4 at × 1e30 were each 2× the average of the middle two). A length that is not finite
    (a float64 update near its dtype's range) is infinitely far from the median, which is taken over the
    finite ones.
    """
    if len(lengths) < MIN_JUDGED:
        return {}
    finite = np.sort([v for v in lengths.values() if math.isfinite(v)])
    if len(finite) == 0:
        return {n: math.inf for n in lengths}
    median = float(finite[(len(finite) - 1) // 2])
    if not median > 0:
        return {n: math.inf for n, v in lengths.items() if not math.isfinite(v)}
    return {n: (v / median if math.isfinite(v) else math.inf) for n, v in lengths.items()}


def outsized(lengths: Mapping[Hashable, float], ratio: float) -> dict[Hashable, float]:
    """``{node: its length / the lower median}`` for the lengths longer than ``ratio`` × the lower median
    of all of them (``{}`` with fewer than 3, a zero median or ``ratio`` infinite).

    One pass: the reference counts the outsized lengths too. Judged again without them, the
    reference could only fall, and a minority of near-zero updates ("the model you sent me + 1e-9",
    harmless in itself) became half of what was left: 2 of 5 got every honest reply skipped in turn,
    and in FedAsync every honest node dropped. With fewer than half of the lengths a coalition
    cannot move the lower median past the honest ones in either direction.
    """
    return {} if not math.isfinite(ratio) else _beyond(relative_lengths(lengths), ratio)


def _beyond(relative: Mapping[Hashable, float], ratio: float) -> dict[Hashable, float]:
    """The entries of ``relative_lengths`` output above ``ratio``: the one rule of :func:`outsized`."""
    return {n: r for n, r in relative.items() if r > ratio}


def skip_outsized(
    server_round: int,
    lengths: Mapping[Hashable, float],
    work: Mapping[Hashable, float],
    ratio: float,
    who: Callable[[Hashable], str],
    judged: Iterable[Hashable] | None = None,
) -> tuple[set[Hashable], float]:
    """The nodes whose average step ``lengths[n] / work[n]`` (``lengths``: each kept reply's ``‖x_i − x‖``,
    ``work``: the ``‖a_i‖₁`` it is normalised by; ``{}``: the whole updates are judged) is
    :func:`outsized`, each said in one warning; and the round's largest average step over the median
    (NaN: not judged), the skipped included (the history's ``update_ratio``: how close honest nodes come
    to ``ratio``). ``judged``: the nodes of the round, when ``lengths`` also holds earlier rounds' entries
    (they count in the median and are not judged)."""
    steps = {n: v / work.get(n, 1.0) for n, v in lengths.items()}  # work {}: the whole updates
    what = "update's average local step" if work else "update"
    nodes = set(lengths) if judged is None else set(judged)
    median = "the round's median" if nodes == set(lengths) else "the median of this round's and earlier rounds'"
    relative = {n: r for n, r in relative_lengths(steps).items() if n in nodes}  # once: skips and update_ratio
    far = _beyond(relative, ratio)
    for node, times in far.items():
        logger.log(
            WARNING,
            "[adaptive] round %s: %s: its %s is %.3g× %s, beyond "
            "max_update_ratio %g; skipped (a scaled or far-off model would take the average; if such "
            "updates are honest, raise strategy.max_update_ratio)",
            server_round,
            who(node),
            what,
            times,
            median,
            ratio,
        )
    return set(far), max(relative.values(), default=math.nan)  # inf when a length was not finite


ValueCheck = Callable[[str, np.ndarray], "str | None"]


class UpdateSizeScreen:
    """One round's update-size screen: each reply's ``‖x_i − x‖`` measured as screening decodes its
    arrays, the kept replies' average steps judged by :func:`skip_outsized` once their work is known.

    ``ratio`` (default ``MAX_UPDATE_RATIO``) holds the strategy's ``max_update_ratio``; :meth:`skip` is
    given the ratio to judge by (the strategy's attribute, which a subclass may set on its class).
    """

    def __init__(self) -> None:
        self.ratio = MAX_UPDATE_RATIO
        #: This round's largest average step over the median (the history's ``update_ratio``; NaN: not judged).
        self.last_ratio = math.nan
        self._sent: Mapping[str, np.ndarray] | None = None
        self._squared: dict[Hashable, float] = {}
        #: Per node, the unit of its latest judged length (``"step"``, ``"sample"``, ``"update"``) and the
        #: length per unit: what a round of fewer than 3 replies is judged with.
        self.latest: dict[Hashable, tuple[str, float]] = {}

    def retain(self, live_node_ids: Iterable[Hashable]) -> None:
        """Keep the latest lengths of the connected nodes only (the server's state grows with the nodes,
        not with the ids a churning federation has used)."""
        live = set(live_node_ids)
        for n in [n for n in self.latest if n not in live]:
            del self.latest[n]

    def start(self, sent: Mapping[str, np.ndarray] | None) -> None:
        """A new round's screen against the model sent (``{name: array}``; ``None``: nothing measured)."""
        self._sent, self._squared, self.last_ratio = sent, {}, math.nan

    def value_check(self, node: Hashable, check: ValueCheck | None = None) -> ValueCheck | None:
        """Screening's per-array check for ``node``'s reply: ``check`` (e.g. ``screening.RescaleBound``),
        then the array's update added to the node's length (``check`` alone when no model was sent)."""
        sent = self._sent
        if sent is None:
            return check
        self._squared[node] = 0.0  # a node's reply is measured again from scratch (one reply counts)

        def measured(name: str, xi: np.ndarray) -> str | None:
            if check is not None and (reason := check(name, xi)):
                return reason
            if (x := sent.get(name)) is not None:
                self._squared[node] += _squared_distance(xi, x)
            return None

        return measured

    def skip(
        self,
        server_round: int,
        nodes: Iterable[Hashable],
        work: Mapping[Hashable, float],
        ratio: float,
        who: Callable[[Hashable], str],
        unit: str | None = None,
    ) -> set[Hashable]:
        """The kept ``nodes`` whose average step is more than ``ratio`` × the lower median
        (:func:`skip_outsized`), each said in one warning; with fewer than 3 replies, the median of
        theirs and every node's latest judged length of an earlier round measured in the same ``unit``
        (default ``"step"`` with ``work``, ``"update"`` without: what a length is per; samples stand in
        for unsaid steps, a unit of its own) (fewer than 3 in all, or a node not measured: none skipped)."""
        nodes = list(nodes)
        self.last_ratio = math.nan
        if not nodes or any(n not in self._squared for n in nodes):
            return set()
        lengths = {n: math.sqrt(self._squared[n]) for n in nodes}
        unit = unit or ("step" if work else "update")
        earlier: dict[Hashable, float] = {}
        if len(nodes) < MIN_JUDGED:  # one entry per node from earlier rounds, beside this round's
            # already per unit of work: skip_outsized divides these keys by no work
            earlier = {("earlier", n): v for n, (was, v) in self.latest.items() if was == unit}
        far, self.last_ratio = skip_outsized(server_round, {**lengths, **earlier}, work, ratio, who, judged=nodes)
        for n in nodes:  # skipped ones too: a coalition holds one entry per member, whatever it sends
            self.latest[n] = (unit, lengths[n] / work.get(n, 1.0))
        return far


class LatestUpdates:
    """The update-size screen of asynchronous updates (FedAsync): each arriving update judged with
    the peers' latest ones.

    The strategy passes each job's update length ``‖x_new − x_sent‖`` (the model the job was sent:
    :func:`update_length`) per sample it processed: most jobs are the node's equal share and compare
    as they are, and a node capped at its few samples (or the run's shortened last job) is not the
    median for being short, nor are its peers outsized beside it (2 nodes of 5 with the full share
    were, beside 3 holding 8 samples). The samples are a claim, but at most the job's quota: claiming
    fewer only lengthens the update judged. :meth:`judge` names the arriving updates that are
    :func:`outsized` among themselves and each other node's latest (from 3 in all: fewer are not
    judged, so the strategy judges its first replies as one group), and records them. A dropped
    node's latest stays: dropping honest nodes (they failed, or a coalition got their updates
    skipped) must not leave the liars as the median, or too few to judge by.

    Every judged update is its node's latest, skipped ones too (each node holds one entry, so a
    coalition moves as many entries as it has members): counting only accepted ones, an honest node
    whose first updates were skipped (101× the smallest honest one, beside 2 liars' near-zero updates
    of 5) left the liars as half of the entries, and every other honest node was skipped and dropped.

    Parameters
    ----------
    ratio : float (default: MAX_UPDATE_RATIO)
        An update longer than this × the lower median is outsized (``math.inf``: off).
    """

    def __init__(self, ratio: float = MAX_UPDATE_RATIO) -> None:
        self.ratio = ratio
        self.latest: dict[Hashable, float] = {}

    def judge(self, arriving: Mapping[Hashable, float]) -> dict[Hashable, float]:
        """``{node: its length over the median}`` of the arriving updates that are outsized; every arriving
        length becomes its node's latest."""
        self.latest.update(arriving)
        return {n: r for n, r in outsized(self.latest, self.ratio).items() if n in arriving}
