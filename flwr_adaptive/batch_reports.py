"""A round's reports recorded in one call: ``AllocationController.observe_many``.

Contract
--------
``observe_many(ctrl, ids, samples, time_s, energy_j)`` is exactly the loop

    for i, p in enumerate(ids):
        ctrl.observe(p, Report(time_s=time_s[i], energy_j=None if energy_j is None else energy_j[i],
                               samples=samples[i]))

same refusals, same messages (a refused report raises its ``ValueError`` and the reports before
it stay recorded, as in the loop), same state bit for bit. Rows that a vectorised check proves
``observe`` would accept unchanged are recorded as one array per run of them; every other row
(refused, or accepted only after conversion) goes through ``observe`` itself, so the messages
cannot drift apart. Inputs the vectorised check does not cover (ids that are not exactly
``str`` / ``int``, columns that are not float / int arrays or lists of exactly those types, a
subclass that overrides ``observe``) run the loop above.

Cost
----
O(R) numpy for R reports, plus a few C-level passes over ``ids`` (type check, slot look-up:
skipped when ``ids`` equals the last ``allocate``'s list) and one ``observe`` per row the
vectorised check cannot accept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flwr_adaptive.estimates import EstimateStore
from flwr_adaptive.limits import MAX_BUDGET, MAX_PER_SAMPLE, MIN_PER_SAMPLE, ParticipantId, Report

__all__ = ["observe_many"]

FLOATS = (np.dtype(np.float64), np.dtype(np.float32))  # converted exactly, as observe's float() does


def observe_many(
    ctrl: Any,
    ids: Sequence[ParticipantId],
    samples: Sequence[int] | np.ndarray,
    time_s: Sequence[float] | np.ndarray,
    energy_j: Sequence[float] | np.ndarray | None,
    vectorised: bool = True,
) -> None:
    """Record one report per participant of ``ids`` (see the module docstring); ``vectorised=False``: the loop."""
    count = len(ids)
    for name, values in (("samples", samples), ("time_s", time_s), ("energy_j", energy_j)):
        if values is not None and len(values) != count:
            raise ValueError(
                f"observe_many: {name} has {len(values)} entries but ids has {count}; pass one per participant"
            )

    def one(i: int) -> None:
        e = None if energy_j is None else energy_j[i]
        ctrl.observe(ids[i], Report(time_s=time_s[i], energy_j=e, samples=samples[i]))

    ids = list(ids)
    columns = _columns(samples, time_s, energy_j) if vectorised else None
    if columns is None or not set(map(type, ids)) <= {str, int}:
        for i in range(count):
            one(i)
        return
    n, t, e = columns
    ok = _accepted(n, t, e, ctrl.w_energy)
    store: EstimateStore = ctrl._store
    cached_ids, cached_slots = store.slot_cache
    if ids == cached_ids:  # the ids of the last allocate: their slots are known
        slots = cached_slots
    else:
        slots = np.fromiter(map(store.index.get, ids, [-1] * count), dtype=np.int64, count=count)
    rows = np.empty((count, 4))
    rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3] = slots, t, math.nan if e is None else e, n
    start = 0
    for stop in [*np.flatnonzero(~ok).tolist(), count]:
        if stop > start:
            _record(store, ids, slots[start:stop], rows[start:stop], start)
        if stop < count:
            one(stop)  # observe itself: it raises (the rows before stay recorded) or records
        start = stop + 1


def _columns(samples: Any, time_s: Any, energy_j: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """``(samples, time_s, energy_j)`` as int64 / float64 arrays holding what ``observe`` would
    read from each row, or ``None`` when a column is of a kind not covered here."""
    n = _column(samples, int)
    t = _column(time_s, float)
    e = None if energy_j is None else _column(energy_j, float)
    if n is None or t is None or (energy_j is not None and e is None):
        return None
    return n, t, e


def _column(values: Any, kind: type) -> np.ndarray | None:
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            return None
        if kind is float and values.dtype in FLOATS:
            return values.astype(np.float64)
        # signed ints, and unsigned ones narrower than 64 bits: exact in int64
        if kind is int and (values.dtype.kind == "i" or (values.dtype.kind == "u" and values.dtype.itemsize < 8)):
            return values.astype(np.int64)
        return None
    if not isinstance(values, (list, tuple)) or not set(map(type, values)) <= {kind}:
        return None  # bools, numpy scalars, None among floats...: observe decides row by row
    try:
        return np.array(values, dtype=np.int64 if kind is int else np.float64)
    except OverflowError:  # an int beyond int64: refused by observe, with its message
        return None


def _accepted(n: np.ndarray, t: np.ndarray, e: np.ndarray | None, w_energy: float) -> np.ndarray:
    """Rows ``observe`` accepts as they are: a subset of both its fast path and ``validate_report``
    (a row outside it goes through ``observe``, which decides)."""
    ok = (n >= 1) & (n <= MAX_BUDGET)
    per = n.astype(np.float64)  # exact: |n| <= MAX_BUDGET < 2**53 where it matters
    with np.errstate(all="ignore"):
        ts = t / per
        ok &= (ts >= MIN_PER_SAMPLE) & (ts <= MAX_PER_SAMPLE)
        if e is None:
            return ok & (w_energy == 0.0)
        es = e / per
        low = MIN_PER_SAMPLE if w_energy > 0 else 0.0
        # e >= 0 as well: a tiny negative energy whose ratio rounds to -0.0 is observe's to judge
        ok &= (e >= 0.0) & (es >= low) & (es <= MAX_PER_SAMPLE)
    return ok


def _record(store: EstimateStore, ids: list[ParticipantId], slots: np.ndarray, rows: np.ndarray, start: int) -> None:
    """Record accepted ``rows`` (ids from ``start``): known participants as one block, new ones
    as ``observe`` records them (registered together at the next flush, in order of first report)."""
    known = slots >= 0
    if known.all():
        store.add_block(rows)
        return
    if known.any():
        store.add_block(rows[known])
    new = np.flatnonzero(~known)
    t, e, n = rows[new, 1].tolist(), rows[new, 2].tolist(), rows[new, 3].astype(np.int64).tolist()
    store.pending_new.extend(zip([ids[start + i] for i in new.tolist()], t, e, n))
