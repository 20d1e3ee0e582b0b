"""Excitation: move a split just enough that an affine cost fit can tell a fixed cost from a per-sample one.

Contract
--------
An affine fit ``t = a + b·n`` is identified only from a window whose quotas differ
(``estimation.MIN_SPREAD``). When the split the controller is about to return gives a
participant the same quota as every observation in its window (``estimation.MIN_POINTS`` or
more: enough points for a line; until then the per-sample model splits anyway, and a quota that
comes out equal once or twice is common), and its line was never identified, the fit would
never see two quota levels: the per-sample split of devices whose costs per sample look alike
stays equal round after round, and their fixed costs stay unknown (three devices with
2.25–2.44 s of fixed cost, budget 60, ended 2.4 % above the optimum). Then :func:`excite` moves
``⌈2·MIN_SPREAD·n⌉`` samples (at least one) between such participants in pairs, or between the
one left over and the member of its group with the largest quota that needs no excitation (else
a participant that took samples in its pair), so that the next observation adds a second level.
It acts only in a group whose last reported times differ by more than ``MIN_SPREAD`` of the
slowest: participants that finish together (identical devices) are at the optimum whatever
their fixed costs. Group budgets and bounds hold; nothing else moves. The controller does not let its deadband hold
an excited split: the next round re-splits (the state records it).

It acts only on a split the controller takes (a split its deadband holds is not probed: the
deadband already trades the last percent of the objective for steady quotas) and only while the
participant's window is not yet full (its first ``WINDOW`` reports since
its estimate started): a line that noise keeps unidentified after that is not helped by more
excitation, and steady rounds stay as the deadband keeps them. Deterministic: the same state
gives the same split.

Cost
----
O(P) array operations for P participants when nobody needs it (one gather of the windows'
oldest cell and the fits); O(E log E) more for the E participants that do.
"""

from __future__ import annotations

import numpy as np

from flwr_adaptive import estimation
from flwr_adaptive.estimates import EstimateStore

__all__ = ["excite", "STEP"]

#: Relative size of an excitation step: twice the spread the fit needs, so a rounded step clears it.
STEP = 2.0 * estimation.MIN_SPREAD


def excite(
    store: EstimateStore, slots: np.ndarray, quotas: np.ndarray, lo: np.ndarray, hi: np.ndarray, codes: np.ndarray
) -> np.ndarray | None:
    """The split with the unidentified participants moved (see the module docstring), or
    ``None`` when nobody needs it (then the split is returned unchanged by the caller)."""
    if store.cost_model != "affine" or not len(store.hist) or not len(slots):
        return None
    store.grow_model()
    # MIN_POINTS to WINDOW − 1 reports: enough for a line, and the split has stayed put
    young = np.isnan(store.hist[slots, 0, 0]) & ~np.isnan(store.hist[slots, -estimation.MIN_POINTS, 0])
    if not young.any():
        return None
    need = young & (quotas > 0) & np.isnan(store.fit[slots, 1])
    if not need.any():
        return None
    rows = np.flatnonzero(need)
    window = store.hist[slots[rows], :, 0]
    q = quotas[rows].astype(float)
    with np.errstate(invalid="ignore"):
        top = np.fmax(np.nanmax(window, axis=1), q)
        low = np.fmin(np.nanmin(window, axis=1), q)
        count = (~np.isnan(window)).sum(axis=1) + 1
        mean = (np.nansum(window, axis=1) + q) / count
    flat = (top - low) < estimation.MIN_SPREAD * mean  # this round would add no second level
    rows = rows[flat]
    if not len(rows):
        return None
    # Only where the group's last round was not balanced: participants that finish together
    # (identical devices) are at the optimum whatever their fixed costs, and stay as they are.
    last = store.hist[slots, -1, 1]
    groups = int(codes.max()) + 1
    slowest, fastest = np.full(groups, -np.inf), np.full(groups, np.inf)
    np.fmax.at(slowest, codes, last)
    np.fmin.at(fastest, codes, last)
    with np.errstate(invalid="ignore"):
        unbalanced = (slowest - fastest) > estimation.MIN_SPREAD * slowest
    rows = rows[unbalanced[codes[rows]]]
    if not len(rows):
        return None
    out = quotas.copy()
    step = np.maximum(1, np.ceil(STEP * quotas[rows]).astype(np.int64))
    order = np.lexsort((rows, codes[rows]))  # by group, then position: deterministic pairs
    rows, step = rows[order], step[order]
    grp = codes[rows]
    first = np.r_[True, grp[1:] != grp[:-1]]
    rank = np.arange(len(rows)) - np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))
    size = np.bincount(grp)[grp]
    paired = rank < size - size % 2
    give, take = rows[paired][0::2], rows[paired][1::2]
    moved = np.maximum(step[paired][0::2], step[paired][1::2])
    _move_pairs(out, give, take, moved, lo, hi)
    excited = np.zeros(len(out), dtype=bool)
    excited[rows] = True
    for i, s in zip(rows[~paired].tolist(), step[~paired].tolist()):  # one left over per group
        members = np.flatnonzero((codes == codes[i]) & (np.arange(len(out)) != i))
        if not len(members):
            continue  # alone in its group: its quota is the group's budget, no split to identify
        calm = members[~excited[members]]  # a partner that needs no second level of its own
        if len(calm):
            partner = int(calm[np.argmax(out[calm])])
            _move_pairs(out, np.array([partner]), np.array([i]), np.array([s]), lo, hi)
            continue
        # everyone in the group is excited: give to one that took samples in its pair (it moves
        # further the same way instead of back to its old level)
        takers = take[codes[take] == codes[i]]
        if len(takers):
            _move_pairs(out, np.array([i]), takers[:1], np.array([s]), lo, hi)
    return out if not np.array_equal(out, quotas) else None


def _move_pairs(
    out: np.ndarray, give: np.ndarray, take: np.ndarray, moved: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> None:
    """Move ``moved`` samples from ``give`` to ``take`` (or back, where the bounds only allow that)."""
    if not len(give):
        return
    forward = (out[give] - moved >= lo[give]) & (out[take] + moved <= hi[take])
    backward = ~forward & (out[take] - moved >= lo[take]) & (out[give] + moved <= hi[give])
    src = np.where(forward, give, take)[forward | backward]
    dst = np.where(forward, take, give)[forward | backward]
    amount = moved[forward | backward]
    out[src] -= amount
    out[dst] += amount
