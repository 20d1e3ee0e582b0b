"""The min-energy solver's sweep over round lengths, vectorised for one group.

Contract
--------
:func:`sweep_one_group` returns what the per-sample sweep of ``solver.min_energy_split`` returns
for a single group — the best energy, its round length, the last round length moved to and
whether the step limit was reached — bit for bit: the same events in the same order, the same
float operations in the same order (a participant's event times are its first finish plus
``b`` added once per sample, as the heap adds them; the energy is the running sum of the same
increments), the same strict-improvement rule and the same two stopping rules.

How: the sweep pops the events ``T = a_i + b_i·(cap_i + k)`` of the participants placed before
the group's marginal participant (the one partly filled) in increasing ``(T, i)``; each moves
one sample from the marginal to ``i``. Between two changes of the marginal (an *epoch*: the
marginal's samples above its lower bound run out) every event of a participant placed before it
is a move and the first event of one placed at or after it removes that participant for good.
So the events are generated for all participants at once (one cumulative sum per participant,
up to a horizon), sorted once, and consumed an epoch at a time with array operations; the
Python loop runs once per epoch, not once per sample.

Cost
----
O(E log E) for the E events up to the stopping round length (the sort), plus O(E) array work
per horizon extension and a few array operations per epoch (one per exhausted marginal).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sweep_one_group"]

_TOL = 1e-12  # the strict-improvement margin of the per-sample sweep (relative)
_FIRST_CHUNK = 8192  # events generated before the first horizon extension (plus 4 per participant)


def _horizon(first: np.ndarray, b: np.ndarray, room: np.ndarray, target: int, t_max: float) -> float:
    """A round length below which at most about ``target`` events lie (``t_max`` when fewer do)."""

    def count(t: float) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            k = np.floor((t - first) / b) + 1.0
        return float(np.clip(np.nan_to_num(k, nan=0.0, posinf=2.0**62), 0.0, room).sum())

    lo_t, hi_t = float(first.min()), float(t_max)
    if float(room.sum()) <= target:
        return hi_t  # every event left at once
    if not np.isfinite(hi_t):
        hi_t = lo_t + float(np.median(b)) * target + abs(lo_t) + 1.0
        while count(hi_t) < target:
            hi_t = lo_t + 2.0 * (hi_t - lo_t)
    at_hi = count(hi_t)
    if np.isfinite(t_max) and hi_t == t_max and at_hi <= target:
        return hi_t  # every event up to the slack's limit at once
    # the count grows about linearly in the round length: two secant steps come close enough
    # (the target is a chunk size, not a bound: the next horizon takes the rest)
    for _ in range(2):
        mid = lo_t + (hi_t - lo_t) * target / max(at_hi, 1.0)
        at_mid = count(mid)
        if at_mid >= target:
            hi_t, at_hi = mid, at_mid
        else:
            break
    return max(mid, lo_t)


def _events(
    nxt: np.ndarray, b: np.ndarray, left: np.ndarray, horizon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Each row's events from ``nxt`` (its next finish) up to ``horizon``: ``nxt``, ``nxt + b``,
    ``nxt + b + b``, … (sequential sums, as the heap adds them), at most ``left`` of them.

    Returns the times, their rows, the count per row and each row's last time (``nxt`` where
    none), or ``None`` when float rounding made a row's estimated length too short (the caller
    then runs the per-sample sweep). Rows are built in tiers of similar length, so the arrays
    hold at most about twice the events.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        est = np.floor((horizon - nxt) / b) + 3.0
    est = np.clip(np.nan_to_num(est, nan=0.0, posinf=2.0**62), 0.0, left.astype(float)).astype(np.int64)
    counts = np.zeros(len(nxt), dtype=np.int64)
    last = nxt.copy()
    times_out, rows_out = [], []
    width = 1
    top = int(est.max()) if len(est) else 0
    lower = 0
    while lower < top:
        rows = np.flatnonzero((est > lower) & (est <= width))
        if len(rows):
            cols = np.arange(width)
            steps = np.where(cols[None, :] == 0, nxt[rows, None], b[rows, None])
            times = np.cumsum(steps, axis=1)
            inside = (cols[None, :] < est[rows, None]) & (times <= horizon)
            c = inside.sum(axis=1)
            if ((c == est[rows]) & (est[rows] < left[rows])).any():
                return None  # the estimate was short: more events lie below the horizon
            counts[rows] = c
            got = c > 0
            last[rows[got]] = times[got, c[got] - 1]
            times_out.append(times[inside])
            rows_out.append(np.repeat(rows, c))
        lower, width = width, 2 * width
    if not times_out:
        return np.empty(0), np.empty(0, dtype=np.int64), counts, last
    return np.concatenate(times_out), np.concatenate(rows_out), counts, last


def sweep_one_group(
    t_min: float,
    t_max: float,
    idle_total: float,
    energy_lower: float,
    best_f: float,
    a: np.ndarray,
    b: np.ndarray,
    g: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    cap: np.ndarray,
    n: np.ndarray,
    order: np.ndarray,
    pos: np.ndarray,
    marginal: int,
    start: np.ndarray,
    max_steps: int,
) -> tuple[float, float, float, bool] | None:
    """``(best energy, its round length, last round length moved to, step limit reached)`` of
    the per-sample sweep of one group (see the module docstring); ``None`` where float rounding
    defeats the event generation (the caller runs the per-sample sweep)."""
    n = n.copy()
    best_t = t_min
    f = best_f
    t_prev = t_min
    steps = 0
    m = marginal
    pm = int(pos[m])
    supply = int(n[m] - lo[m])
    dead = np.zeros(len(a), dtype=bool)
    owners_all = np.asarray(start, dtype=np.int64)
    nxt = a[owners_all] + b[owners_all] * (cap[owners_all] + 1)
    left = (hi[owners_all] - cap[owners_all]).astype(np.int64)
    target = _FIRST_CHUNK + 4 * len(owners_all)
    horizon = -np.inf
    while True:
        pending = (left > 0) & ~dead[owners_all]
        if not pending.any():
            return best_f, best_t, t_prev, False  # the heap ran empty
        if horizon >= t_max:  # every pending event lies beyond the slack's limit: the next pop stops
            return best_f, best_t, t_prev, steps + 1 > max_steps
        rows_p = np.flatnonzero(pending)
        horizon = _horizon(nxt[rows_p], b[owners_all[rows_p]], left[rows_p].astype(float), target, t_max)
        made = _events(nxt[rows_p], b[owners_all[rows_p]], left[rows_p], horizon)
        if made is None:
            return None
        times, rows, counts_p, last_p = made
        rows = rows_p[rows]
        counts = np.zeros(len(owners_all), dtype=np.int64)
        counts[rows_p] = counts_p
        last = nxt.copy()
        last[rows_p] = last_p
        owners = owners_all[rows]
        if len(times):
            ev = np.lexsort((owners, times))
            times, owners = times[ev], owners[ev]
        # the next event of each participant after this horizon: its last one + b (sequential)
        nxt = np.where(counts > 0, last + b[owners_all], nxt)
        left = left - counts
        # consume the events, an epoch at a time
        e0 = 0
        total = len(times)
        while e0 < total:
            if m < 0:
                return best_f, best_t, t_prev, False  # unreachable: the marginal always exists
            # the events up to the one that exhausts the marginal (a window that grows until
            # it holds that many moves, so an epoch costs what it consumes)
            width = min(total - e0, 2 * supply + 256)
            while True:
                seg_t, seg_o = times[e0 : e0 + width], owners[e0 : e0 + width]
                valid = pos[seg_o] < pm
                cum = np.cumsum(valid)
                if cum[-1] >= supply or e0 + width == total:
                    break
                width = min(total - e0, 2 * width)
            stop_here = bool(cum[-1] < supply)  # this horizon's events end inside the epoch
            stop = len(seg_t) if stop_here else int(np.searchsorted(cum, supply)) + 1
            seg_t, seg_o, valid = seg_t[:stop], seg_o[:stop], valid[:stop]
            # pops: the moves, and the first event of a live participant at or after the marginal
            skip = ~valid & ~dead[seg_o]
            if skip.any():
                sk = np.flatnonzero(skip)
                _, first = np.unique(seg_o[sk], return_index=True)
                keep = np.zeros(len(sk), dtype=bool)
                keep[first] = True
                skip[sk[~keep]] = False
            popped = valid | skip
            pop_idx = np.flatnonzero(popped)
            pop_t = seg_t[pop_idx]
            pop_valid = valid[pop_idx]
            vt = pop_t[pop_valid]
            vo = seg_o[pop_idx][pop_valid]
            prev = np.empty(len(vt))
            if len(vt):
                prev[0] = t_prev
                prev[1:] = vt[:-1]
            inc = (g[vo] - g[m]) + idle_total * (vt - prev)
            fs = np.cumsum(np.concatenate([[f], inc]))[1:]
            bests = _running_best(best_f, fs)
            # best before each pop: after the moves that precede it
            moves_before = np.cumsum(pop_valid) - pop_valid
            best_before = np.where(
                moves_before > 0, bests[np.maximum(moves_before - 1, 0)] if len(bests) else 0.0, best_f
            )
            halt = (pop_t > t_max) | (idle_total * pop_t + energy_lower >= best_before - _TOL * np.abs(best_before))
            over = steps + np.arange(1, len(pop_t) + 1) > max_steps
            halt_at = int(np.argmax(halt)) if halt.any() else len(pop_t)
            over_at = int(np.argmax(over)) if over.any() else len(pop_t)
            cut = min(halt_at, over_at)
            done = cut < len(pop_t)
            moved = int(pop_valid[:cut].sum())
            if moved:
                f = float(fs[moved - 1])
                t_prev = float(vt[moved - 1])
                if bests[moved - 1] < best_f:
                    best_f = float(bests[moved - 1])
                    best_t = float(vt[_first_at(bests[:moved], best_f)])
                np.add.at(n, vo[:moved], 1)
                n[m] -= moved
            dead[seg_o[pop_idx[:cut]][~pop_valid[:cut]]] = True
            if done:
                return best_f, best_t, t_prev, over_at <= halt_at
            steps += len(pop_t)
            e0 += stop
            if not stop_here:
                # the marginal's samples ran out: the previous participant above its bound takes over
                p = pm - 1
                while p >= 0 and n[order[p]] <= lo[order[p]]:
                    p -= 1
                if p < 0:
                    # no marginal left: every pending event pops and moves nothing (only the
                    # stopping rules still apply), one per participant not yet dropped
                    rest_t, rest_o = times[e0:], owners[e0:]
                    alive = ~dead[rest_o]
                    seen, first = np.unique(rest_o[alive], return_index=True)
                    beyond = (left > 0) & ~dead[owners_all] & ~np.isin(owners_all, seen)
                    pending = np.sort(np.concatenate([rest_t[alive][first], nxt[beyond]]))
                    return _drain(best_f, best_t, t_prev, steps, pending, t_max, idle_total, energy_lower, max_steps)
                m, pm = int(order[p]), p
                supply = int(n[m] - lo[m])
            else:
                supply -= int(valid.sum())
        target *= 4


def _running_best(best: float, fs: np.ndarray) -> np.ndarray:
    """The best energy after each move by the sweep's rule: a new best only below the current
    one by more than ``_TOL`` of it (sequential; vectorised where every improvement clears the
    margin, which is the rule's result then)."""
    if not len(fs):
        return fs
    run = np.minimum.accumulate(np.concatenate([[best], fs]))
    before, after = run[:-1], run[1:]
    improved = after < before
    if (after[improved] < before[improved] - _TOL * np.abs(before[improved])).all():
        return after
    out = np.empty(len(fs))
    for j, value in enumerate(fs.tolist()):
        if value < best - _TOL * abs(best):
            best = value
        out[j] = best
    return out


def _first_at(bests: np.ndarray, value: float) -> int:
    """The first move after which the running best equals ``value`` (where it was set)."""
    return int(np.argmax(bests == value))


def _drain(
    best_f: float,
    best_t: float,
    t_prev: float,
    steps: int,
    pending: np.ndarray,
    t_max: float,
    idle_total: float,
    energy_lower: float,
    max_steps: int,
) -> tuple[float, float, float, bool]:
    """No marginal is left: the ``pending`` pops (sorted) move nothing; only whether the step
    limit comes before a stopping rule matters."""
    over = steps + np.arange(1, len(pending) + 1) > max_steps
    halt = (pending > t_max) | (idle_total * pending + energy_lower >= best_f - _TOL * abs(best_f))
    reached = bool(over.any()) and (not halt.any() or int(np.argmax(over)) <= int(np.argmax(halt)))
    return best_f, best_t, t_prev, reached
