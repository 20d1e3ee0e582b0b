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
round's weights and factors over the others.

Not bounded: a reply within ``ratio`` × the median (a node may push the model up to that far a
round; honest steps are too far apart for a ratio that catches moderate poisoning: a robust inner
strategy such as ``FedTrimmedAvg`` bounds what stays), rounds of fewer than
3 replies, and the ``"samples"`` and ``"data-size"`` weightings, which do not normalise by work
(a fast node's 20× quota is an honestly longer update there).

Cost
----
One pass over each kept reply's floating-point arrays (a float64 difference with the model sent),
one median per round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from logging import WARNING

import numpy as np

from flwr_adaptive._logging import logger

__all__ = ["MAX_UPDATE_RATIO", "update_length", "relative_lengths", "outsized", "skip_outsized"]

#: Default ``max_update_ratio``: an average step longer than this × the round's median is skipped. Honest
#: ones reach ~30× (the largest of 1,392 normalised rounds of the non-IID section's main rows, seeds 0–1,
#: three tasks, both fleets: a slow node's few small, shrunk batches are noisy steps), so 100 leaves them
#: alone and catches a scaled model.
MAX_UPDATE_RATIO = 100.0


def update_length(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> float:
    """``‖x_i − x‖₂`` over the floating-point ``(reply array, model array)`` pairs (others skipped)."""
    total = 0.0
    for xi, x in pairs:
        if xi.dtype.kind != "f" or x.dtype.kind != "f" or xi.shape != x.shape:
            continue
        d = np.asarray(xi, dtype=np.float64) - np.asarray(x, dtype=np.float64)
        total += float(np.dot(d.ravel(), d.ravel()))
    return math.sqrt(total)


def relative_lengths(lengths: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """``{node: its length / the median of lengths}`` (``{}`` with fewer than 3 or a zero median)."""
    if len(lengths) < 3:
        return {}
    median = float(np.median(np.fromiter(lengths.values(), dtype=float, count=len(lengths))))
    return {n: v / median for n, v in lengths.items()} if median > 0 else {}


def outsized(lengths: Mapping[Hashable, float], ratio: float) -> dict[Hashable, float]:
    """``{node: its length / the median}`` for the contributions longer than ``ratio`` × the median of
    ``lengths`` (``{}`` with fewer than 3, a zero median or ``ratio`` infinite)."""
    return {n: r for n, r in relative_lengths(lengths).items() if r > ratio}


def skip_outsized(
    server_round: int,
    lengths: Mapping[Hashable, float],
    work: Mapping[Hashable, float],
    ratio: float,
    who: Callable[[Hashable], str],
) -> tuple[set[Hashable], float]:
    """The nodes whose average step ``lengths[n] / work[n]`` (``lengths``: each kept reply's ``‖x_i − x‖``,
    ``work``: the ``‖a_i‖₁`` it is normalised by; a node without one: 1) is :func:`outsized`, each said in
    one warning; and the round's largest average step over the median (NaN: not judged), the skipped
    included (the history's ``update_ratio``: how close honest nodes come to ``ratio``)."""
    relative = relative_lengths({n: v / work.get(n, 1.0) for n, v in lengths.items()})
    far = {n: r for n, r in relative.items() if r > ratio}
    for node, times in far.items():
        logger.log(
            WARNING,
            "[adaptive] round %s: %s: its update's average local step is %.3g× the round's median, beyond "
            "max_update_ratio %g; skipped (a scaled or far-off model would take the average; if such "
            "updates are honest, raise strategy.max_update_ratio)",
            server_round,
            who(node),
            times,
            ratio,
        )
    return set(far), max(relative.values(), default=math.nan)
