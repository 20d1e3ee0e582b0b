"""Online affine cost fits and step-change (drift) detection for the allocation controller.

Contract
--------
Each participant keeps its last :data:`WINDOW` observations ``(samples, seconds, joules)``.
:func:`fit_affine` turns them into ``t(n) = a + b·n`` (and ``e(n) = c + d·n``) per participant:
a least-squares line with one robust re-weighting step (an outlier is down-weighted, not trusted),
``a`` clamped at 0 (then ``b`` is the proportional fit). The model is *identified* only when the
window can test it: at least :data:`MIN_POINTS` observations (a line through 2 points explains
any jitter as a fixed cost: with 5 % jitter and quotas 30 % apart, a 2-point intercept has a
standard error of about a third of the round), quotas spread by at least :data:`MIN_SPREAD` of
their mean and a slope whose standard error is below :data:`MAX_SLOPE_ERROR` of it. An identified
window gives the fitted line when its intercept exceeds :data:`INTERCEPT_T` (the two-sided 95 %
Student-t quantile for its degrees of freedom) times its standard error, else the proportional
line ``a = 0``, ``b = Σy/Σn`` (the data show no fixed cost). Until then the controller keeps the
per-sample model (the paper's EMA). Quotas move between rounds while the controller converges,
which identifies both terms; once the split settles, the last identified line is kept and
re-levelled to the recent observations (its fixed share stays).

:func:`drifted` flags an observation far outside what the participant's model predicts; the
controller then rescales that participant's history by the observed ratio, so the estimate
jumps to the new level at once instead of waiting out the smoothing, and an identified line
stays identified.

Cost
----
Vectorised over participants: O(P·WINDOW) per call, no Python loop over participants, no masked
arrays (medians of a window by a sorting network, see :func:`column_median`; of a full window by
the part of it that decides the middle). Full windows are fitted in blocks of :data:`FIT_BLOCK`
participants, so that the temporaries stay in the cache.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = [
    "WINDOW",
    "MIN_POINTS",
    "MAX_SLOPE_ERROR",
    "INTERCEPT_T",
    "fit_affine",
    "fit_columns",
    "fit_windows",
    "fit_rows",
    "time_noise",
    "drifted",
]

WINDOW = 6  # observations kept per participant
MIN_POINTS = 3  # a line through 2 points has no residual: nothing tells its intercept from jitter
MIN_SPREAD = 0.01  # (max n − min n) / mean n below which the window says nothing about the slope
MAX_SLOPE_ERROR = 0.2  # a slope whose standard error exceeds this share of it is not identified
#: Two-sided 95 % Student-t quantiles by degrees of freedom (observations − 2): an intercept must
#: exceed this many standard errors to count as a fixed cost (else the proportional line).
#: Index: degrees of freedom (entry 0 unused; beyond the table, the last entry).
INTERCEPT_T = np.array([np.inf, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306])
_MAX_FIXED_SHARE = 0.95  # the fixed cost may explain at most this share of the mean observation
#: Take :func:`_fit_full`'s shortcut for windows of one quota each; tests compare both paths.
SHORTCUTS = True


def _line(
    sw: np.ndarray, n: np.ndarray, y: np.ndarray, w: np.ndarray, means: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least-squares ``y = a + b·n`` per column of ``(WINDOW, P)`` arrays (``w = 0`` where a
    cell is empty; ``sw`` = the column sums of ``w``, positive or replaced by 1). Returns ``(a, b,
    Σw·(n − n̄)²)``. ``means``: ``(n̄, ȳ)`` when already known (0/1 weights: the plain means)."""
    if means is None:
        n_bar = (w * n).sum(axis=0) / sw
        y_bar = (w * y).sum(axis=0) / sw
    else:
        n_bar, y_bar = means
    dn = n - n_bar
    wdn = w * dn
    snn = (wdn * dn).sum(axis=0)
    sny = (wdn * (y - y_bar)).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(snn > 0, sny / snn, np.nan)
    return y_bar - b * n_bar, b, snn


def _sort_columns(v: np.ndarray) -> np.ndarray:
    """``v`` (``(WINDOW, P)``) sorted down each column by a sorting network: one vectorised
    compare-exchange per pair, exact (no arithmetic), far cheaper than a per-row sort for 6 rows."""
    rows = [v[i] for i in range(len(v))]
    for i, j in _NETWORK.get(len(rows), ()):
        lo, hi = np.minimum(rows[i], rows[j]), np.maximum(rows[i], rows[j])
        rows[i], rows[j] = lo, hi
    if len(rows) not in _NETWORK:  # another WINDOW: numpy's sort (same result)
        return np.sort(v, axis=0)
    return np.stack(rows)


#: Optimal sorting networks (Knuth, TAOCP 5.3.4) for the window sizes in use.
_NETWORK: dict[int, tuple[tuple[int, int], ...]] = {
    1: (),
    2: ((0, 1),),
    3: ((0, 1), (1, 2), (0, 1)),
    4: ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2)),
    5: ((0, 1), (3, 4), (2, 4), (2, 3), (0, 3), (0, 2), (1, 4), (1, 3), (1, 2)),
    6: ((1, 2), (4, 5), (0, 2), (3, 5), (0, 1), (3, 4), (2, 5), (0, 3), (1, 4), (2, 4), (1, 3), (2, 3)),
}


def column_median(v: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Median of each column of ``v`` over its ``present`` non-NaN cells, NaN for a column without
    any: what ``np.nanmedian(np.where(present, v, nan), axis=0)`` returns, without its masked
    arrays and warnings (the mean of the two middle values for an even count, as numpy)."""
    present = present & ~np.isnan(v)
    count = present.sum(axis=0)
    ordered = _sort_columns(np.where(present, v, np.inf))
    cols = np.arange(v.shape[1])
    low = ordered[np.maximum(count - 1, 0) // 2, cols]
    high = ordered[count // 2 - (count == 0), cols]
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, (low + high) / 2, np.nan)


def fit_affine(n: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fit ``y = a + b·n`` per row of ``(P, WINDOW)`` arrays; NaN marks an empty cell.

    Returns ``(a, b, identified, noise)``. Rows that are not identified (fewer than
    :data:`MIN_POINTS` points, too little spread in ``n``, an imprecise or non-positive slope),
    and identified rows whose intercept is not significant, get ``a = 0`` and the proportional
    ``b = Σy/Σn``. ``noise`` is the robust relative scatter of the row's observations around the
    returned line (1.4826 · median |residual| / mean y), NaN with fewer than 3 observations.
    See :func:`fit_columns` (the same on transposed windows) for how it is computed.
    """
    n = np.ascontiguousarray(np.asarray(n, dtype=float).T)
    y = np.ascontiguousarray(np.asarray(y, dtype=float).T)
    return fit_columns(n, y)[:4]


@np.errstate(divide="ignore", invalid="ignore", over="ignore")
def fit_columns(
    n: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fit_affine` of the transposed ``(WINDOW, P)`` windows (one column per participant);
    also returns the mask of filled cells and each column's ``Σy`` over them.

    Each window position is a contiguous vector over participants and the medians are taken by
    a sorting network: O(P·WINDOW), no Python loop over participants, no masked arrays. The sums
    run in the same order as a row sum, so the result is the same, bit for bit, as a row-wise
    implementation (the 0/1 weights of the first line give its means and spread of ``n``
    exactly, so they are not summed twice).
    """
    filled = ~(np.isnan(n) | np.isnan(y))
    w = filled.astype(float)
    n0 = np.where(filled, n, 0.0)
    y0 = np.where(filled, y, 0.0)
    count = w.sum(axis=0)
    count_safe = np.where(count > 0, count, 1.0)
    sum_n = n0.sum(axis=0)
    sum_y = y0.sum(axis=0)
    proportional = sum_y / sum_n
    mean_n = sum_n / count_safe
    mean_y = sum_y / count_safe
    spread = (np.where(filled, n, -np.inf).max(axis=0) - np.where(filled, n, np.inf).min(axis=0)) / mean_n
    a, b, snn = _line(count_safe, n0, y0, w, means=(mean_n, mean_y))
    # One robust step: residuals far beyond the row's typical residual lose their weight.
    resid = np.where(filled, y0 - (a + b * n0), 0.0)
    scale = 1.4826 * column_median(np.abs(resid), filled)
    scale = np.maximum(np.nan_to_num(scale), 0.01 * np.abs(mean_y)) + 1e-300
    w2 = w / (1.0 + (resid / (3.0 * scale)) ** 2)
    sw2 = w2.sum(axis=0)
    a2, b2, _ = _line(np.where(sw2 > 0, sw2, 1.0), n0, y0, w2)
    ok = np.isfinite(a2) & np.isfinite(b2)
    a = np.where(ok, a2, a)
    b = np.where(ok, b2, b)
    # Identified: 3+ points and a slope the scatter cannot fake; a fixed cost only when the
    # intercept stands out of its standard error, else the proportional line.
    resid = np.where(filled, y0 - (a + b * n0), 0.0)
    df = np.clip(count - 2, 1, len(INTERCEPT_T) - 1).astype(np.int64)
    sigma = np.sqrt((resid**2).sum(axis=0) / df)
    slope_error = sigma / np.sqrt(snn)
    intercept_error = sigma * np.sqrt(1.0 / np.maximum(count, 1) + mean_n**2 / snn)
    t = INTERCEPT_T[df]
    identified = (
        (count >= MIN_POINTS) & (spread >= MIN_SPREAD) & np.isfinite(b) & (b > 0) & (slope_error < MAX_SLOPE_ERROR * b)
    )
    fixed = identified & (a > t * intercept_error)
    a = np.where(fixed, a, 0.0)
    b = np.where(fixed, b, proportional)
    # Cap the fixed share so a flat, noisy line cannot claim almost all the time as overhead.
    too_flat = identified & (a > _MAX_FIXED_SHARE * mean_y)
    a = np.where(too_flat, _MAX_FIXED_SHARE * mean_y, a)
    b = np.where(too_flat, (1.0 - _MAX_FIXED_SHARE) * mean_y / mean_n, b)
    noise = 1.4826 * column_median(np.abs(y0 - (a + b * n0)), filled) / mean_y
    noise = np.where(count >= 3, noise, np.nan)
    return a, b, identified, noise, filled, sum_y


def drifted(observed: np.ndarray, predicted: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
    """Whether ``observed`` is more than a factor ``1 + threshold`` away from ``predicted``
    (``threshold``: one for all, or one per entry)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = observed / predicted
    limit = 1.0 + threshold
    out: np.ndarray = np.isfinite(ratio) & (ratio > 0) & ((ratio > limit) | (ratio < 1.0 / limit))
    return out


def fit_windows(
    n: np.ndarray, y: np.ndarray, noise_of: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """:func:`fit_columns` of ``K`` quantities that share their sample counts: ``n`` is
    ``(WINDOW, P)``, ``y`` is ``(WINDOW, K, P)`` (e.g. time and energy). Returns ``(a, b,
    identified, noise, filled, Σy)`` with shape ``(K, P)`` (``filled``: ``(WINDOW, K, P)``, or
    ``None`` when every cell is filled). ``noise_of``: the noise of the first ``noise_of``
    quantities only, the others' NaN (``None``: every quantity's).

    The same results, bit for bit, as :func:`fit_columns` on the ``K·P`` columns: the
    participants whose windows are full (the steady state) take a path without masks, where the
    first line's spread of ``n`` is computed once for the ``K`` quantities; the others go
    through :func:`fit_columns`. A column sum is NaN when its column holds a NaN (or, harmlessly,
    both infinities: such a column takes the general path, which gives the same result), so
    the sums the fit needs anyway tell the full windows.
    """
    W, K, P = y.shape
    sum_y = y.sum(axis=0)
    full = ~(np.isnan(n.sum(axis=0)) | np.isnan(sum_y).any(axis=0))
    if full.all():
        return (*_fit_blocks(n[:, None, :], y, sum_y, noise_of), None, sum_y)
    a, b, identified, noise = (np.empty((K, P)) for _ in range(4))
    identified = np.empty((K, P), dtype=bool)
    filled = np.ones((W, K, P), dtype=bool)
    rows = np.flatnonzero(full)
    if len(rows):
        fitted = _fit_blocks(n[:, None, rows], y[:, :, rows], sum_y[:, rows], noise_of)
        a[:, rows], b[:, rows], identified[:, rows], noise[:, rows] = fitted
    rest = np.flatnonzero(~full)
    count = len(rest)
    ga, gb, gid, gnoise, gfilled, gsum = fit_columns(np.tile(n[:, rest], (1, K)), y[:, :, rest].reshape(W, K * count))
    for out, value in ((a, ga), (b, gb), (identified, gid), (noise, gnoise), (sum_y, gsum)):
        out[:, rest] = value.reshape(K, count)
    filled[:, :, rest] = gfilled.reshape(W, K, count)
    if noise_of is not None:
        noise[noise_of:] = np.nan
    return a, b, identified, noise, filled, sum_y


def fit_rows(rows: np.ndarray) -> tuple[np.ndarray, tuple[Any, ...]]:
    """``(n, fit_windows(n, y, noise_of=1))`` of history rows ``(P, WINDOW, 3)``: the windows as
    ``(WINDOW, quantity, P)``, each window position a contiguous vector over participants; time
    and energy share their sample counts (one spread, one first line); the noise of time only
    (the energy's is not read)."""
    windows = np.ascontiguousarray(rows.transpose(1, 2, 0))
    n = windows[:, 0]
    return n, fit_windows(n, windows[:, 1:], noise_of=1)


def time_noise(rows: np.ndarray) -> np.ndarray:
    """The noise of the time fits of history rows, as the estimate store's ``affine_estimates``
    caches it (each participant's fit is its own: the same bits for any subset of rows)."""
    noise: np.ndarray = fit_rows(rows)[1][3][0]
    return noise


#: Participants per block of :func:`_fit_blocks`: the temporaries of a block ((WINDOW, K, block)
#: floats) stay in the cache. Whole arrays of 100,000 participants made every step a trip to
#: memory: the fit took ~4x as long (experiments/bench_controller.py).
FIT_BLOCK = 8192


def _fit_blocks(
    n: np.ndarray, y: np.ndarray, sum_y: np.ndarray, noise_of: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_fit_full` a block of :data:`FIT_BLOCK` participants at a time (columns are
    fitted independently: the same results)."""
    P = y.shape[2]
    if P <= FIT_BLOCK:
        return _fit_full(n, y, sum_y, noise_of)
    K = y.shape[1]
    a, b, noise = np.empty((K, P)), np.empty((K, P)), np.empty((K, P))
    identified = np.empty((K, P), dtype=bool)
    for s in range(0, P, FIT_BLOCK):
        e = s + FIT_BLOCK
        a[:, s:e], b[:, s:e], identified[:, s:e], noise[:, s:e] = _fit_full(
            n[..., s:e], y[..., s:e], sum_y[:, s:e], noise_of
        )
    return a, b, identified, noise


_FLOAT_MAX = float(np.finfo(float).max)


@np.errstate(divide="ignore", invalid="ignore", over="ignore")
def _fit_full(
    n: np.ndarray, y: np.ndarray, sum_y: np.ndarray, noise_of: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fit_columns` of full windows (no NaN): ``n`` ``(WINDOW, 1, P)``, ``y`` ``(WINDOW, K, P)``,
    ``sum_y`` its sum down the window; the noise of the first ``noise_of`` quantities only (the
    others NaN; ``None``: all).

    Every operation is the one :func:`fit_columns` applies with all weights 1 (``1·x`` and
    ``x / 1`` are exact, a mask that selects every cell selects nothing away), in the same
    order, so the results are the same bit for bit. The ``K`` quantities are laid side by side
    as ``(WINDOW, K·P)`` (a view when ``y``'s rows are contiguous) and the per-participant
    terms of ``n`` are computed once over ``P`` and repeated ``K`` times: every operation is
    then a plain row-by-vector broadcast; a sum down the window adds its rows in order whatever
    the layout. The window-sized temporaries are written in place (``out=``, operands in the
    same order: the same operation) into this thread's :func:`_scratch` buffers: a fresh
    ~100 kB array per step came from memory the allocator had just given back to the system,
    ~230 page faults a round at 1,000 participants (7 left; ~0.5 ms of a ~1.9 ms round on a
    loaded machine, experiments/bench_controller.py).
    """
    W, K, P = y.shape
    count = float(W)
    n = n.reshape(W, P)
    nk, dnk, work, resid, ycopy = _scratch(W, K * P, 5)
    if y.strides[2] == y.itemsize and y.strides[1] == P * y.itemsize:
        y = y.reshape(W, K * P)  # a view: K's rows lie end to end
    else:  # a block of wider windows: gathered into the scratch (reshape would copy anew)
        np.copyto(ycopy.reshape(W, K, P), y)
        y = ycopy
    sum_y = sum_y.reshape(K * P)
    sum_n = n.sum(axis=0)
    mean_n = sum_n / count
    m = K * P if noise_of is None else min(noise_of, K) * P  # the columns whose noise is read
    # Every window of one quota whose mean is exactly that quota (a settled split): every deviation
    # n − n̄ is 0 (NaN for an infinite quota), so no snn is > 0 and the settled branch below runs;
    # without the spread, the deviations and n repeated K times (the noise reads its first P columns).
    settled = SHORTCUTS and W > 0 and m <= P and bool((n == n[0]).all()) and bool((mean_n == n[0]).all())
    if not settled:
        spread = (n.max(axis=0) - n.min(axis=0)) / mean_n
        dn = n - mean_n
        snn = (dn * dn).sum(axis=0)
    if K > 1 and settled:
        sum_n = np.concatenate((sum_n,) * K)
    elif K > 1:
        sum_n, mean_n, spread, snn = (np.concatenate((v,) * K) for v in (sum_n, mean_n, spread, snn))
        np.copyto(nk.reshape(W, K, P), n[:, None, :])
        n = nk
    proportional = sum_y / sum_n
    mean_y = sum_y / count
    if settled or not (snn > 0).any():
        # No window holds two different quotas (a settled split): every first line is NaN, so
        # are the robust step's and the identification's tests, whatever the values: each
        # participant gets the proportional line, unidentified. The same bits as running them
        # (tests/test_controller_equivalence.py), without ~40 operations on the windows.
        identified = np.zeros(K * P, dtype=bool)
        a, b = np.zeros(K * P), proportional.copy()
    else:
        if K > 1:  # (the deviations repeated only here: the settled split above does not read them)
            np.copyto(dnk.reshape(W, K, P), dn[:, None, :])
            dn = dnk
        np.subtract(y, mean_y, out=work)
        np.multiply(dn, work, out=work)
        b = np.where(snn > 0, work.sum(axis=0) / snn, np.nan)
        a = mean_y - b * mean_n
        # One robust step: residuals far beyond the row's typical residual lose their weight.
        np.multiply(b, n, out=resid)
        np.add(a, resid, out=resid)
        np.subtract(y, resid, out=resid)
        scale = 1.4826 * _full_median(np.abs(resid, out=work))
        # np.nan_to_num of a scale >= 0 or NaN: NaN -> 0, inf -> the largest float (its dispatch
        # and copies cost more than the rest of this line)
        scale = np.where(np.isnan(scale), 0.0, np.clip(scale, -_FLOAT_MAX, _FLOAT_MAX))
        scale = np.maximum(scale, 0.01 * np.abs(mean_y)) + 1e-300
        w2 = np.divide(resid, 3.0 * scale, out=resid)
        np.square(w2, out=w2)
        np.add(1.0, w2, out=w2)
        np.divide(1.0, w2, out=w2)
        sw2 = w2.sum(axis=0)
        sw2 = np.where(sw2 > 0, sw2, 1.0)
        n_bar = np.multiply(w2, n, out=work).sum(axis=0) / sw2
        y_bar = np.multiply(w2, y, out=work).sum(axis=0) / sw2
        dn2 = np.subtract(n, n_bar, out=work)
        wdn = w2
        wdn *= dn2
        np.multiply(wdn, dn2, out=dn2)
        snn2 = dn2.sum(axis=0)
        dy = np.subtract(y, y_bar, out=work)
        np.multiply(wdn, dy, out=dy)
        b2 = np.where(snn2 > 0, dy.sum(axis=0) / snn2, np.nan)
        a2 = y_bar - b2 * n_bar
        ok = np.isfinite(a2) & np.isfinite(b2)
        a = np.where(ok, a2, a)
        b = np.where(ok, b2, b)
        resid = np.multiply(b, n, out=work)
        np.add(a, resid, out=resid)
        np.subtract(y, resid, out=resid)
        df = min(max(W - 2, 1), len(INTERCEPT_T) - 1)
        sigma = np.sqrt(np.square(resid, out=resid).sum(axis=0) / float(df))
        slope_error = sigma / np.sqrt(snn)
        intercept_error = sigma * np.sqrt(1.0 / max(count, 1.0) + mean_n**2 / snn)
        identified = (
            (count >= MIN_POINTS)
            & (spread >= MIN_SPREAD)
            & np.isfinite(b)
            & (b > 0)
            & (slope_error < MAX_SLOPE_ERROR * b)
        )
        fixed = identified & (a > INTERCEPT_T[df] * intercept_error)
        a = np.where(fixed, a, 0.0)
        b = np.where(fixed, b, proportional)
        too_flat = identified & (a > _MAX_FIXED_SHARE * mean_y)
        a = np.where(too_flat, _MAX_FIXED_SHARE * mean_y, a)
        b = np.where(too_flat, (1.0 - _MAX_FIXED_SHARE) * mean_y / mean_n, b)
    resid = np.multiply(b[:m], n[:, :m], out=work[:, :m])
    np.add(a[:m], resid, out=resid)
    np.subtract(y[:, :m], resid, out=resid)
    noise = 1.4826 * _full_median(np.abs(resid, out=resid)) / mean_y[:m]
    if m < K * P:
        noise = np.concatenate([noise, np.full(K * P - m, np.nan)])
    if W < 3:
        noise = np.full_like(noise, np.nan)
    return a.reshape(K, P), b.reshape(K, P), identified.reshape(K, P), noise.reshape(K, P)


_SCRATCH = threading.local()  # per thread: two controllers fitting at once must not share buffers


def _scratch(rows: int, cols: int, count: int) -> list[np.ndarray]:
    """``count`` distinct float arrays ``(rows, cols)`` of uninitialised memory, views of one buffer
    this thread keeps (grown to the largest request so far: 5 windows of a :data:`FIT_BLOCK`
    block of time and energy, ~4 MB). Only for temporaries: nothing returned may view it. The
    views of the last request are kept and returned again for the same one."""
    size = rows * cols
    flat = getattr(_SCRATCH, "flat", None)
    if flat is None or len(flat) < count * size:
        flat = _SCRATCH.flat = np.empty(count * size)
    last = getattr(_SCRATCH, "views", None)
    if last is not None and last[0] == (rows, cols, count) and last[1] is flat:
        views: list[np.ndarray] = last[2]
        return views
    views = [flat[k * size : (k + 1) * size].reshape(rows, cols) for k in range(count)]
    _SCRATCH.views = ((rows, cols, count), flat, views)
    return views


def _full_median(v: np.ndarray) -> np.ndarray:
    """:func:`column_median` down axis 0 of a window without empty cells: a column that is NaN
    everywhere (a line that could not be fitted) gives NaN, as there; a column NaN only in some
    cells (overflowing arithmetic) is rare and goes through :func:`column_median` itself.

    The median comes from the comparators of the sorting network that decide the two middle
    values (:data:`_MIDDLE`), without sorting the rest. A NaN anywhere in a column reaches the
    median (every input feeds a kept comparator, and minimum / maximum propagate NaN), so the
    rare check for partly empty columns runs only when the median has a NaN.
    """
    plan = _MIDDLE.get(len(v))
    if plan is None:  # another WINDOW: the full sort
        return _full_median_sorted(v)
    rows = [v[i] for i in range(len(v))]
    for i, j, low, high in plan:
        if low and high:
            rows[i], rows[j] = np.minimum(rows[i], rows[j]), np.maximum(rows[i], rows[j])
        elif low:
            rows[i] = np.minimum(rows[i], rows[j])
        else:
            rows[j] = np.maximum(rows[i], rows[j])
    # min + max of the last pair is its sum: the last comparator is not needed (float + commutes)
    median: np.ndarray = (rows[(len(v) - 1) // 2] + rows[len(v) // 2]) / 2
    if np.isnan(median).any():
        count = np.isnan(v).sum(axis=0)
        if ((count > 0) & (count < len(v))).any():
            return _full_median_sorted(v)
    return median


def _full_median_sorted(v: np.ndarray) -> np.ndarray:
    """:func:`_full_median` by the whole sorting network (or :func:`column_median` for partly
    NaN columns): the reference the pruned network reproduces."""
    nan = np.isnan(v)
    if nan.any():
        count = nan.sum(axis=0)
        if ((count > 0) & (count < len(v))).any():
            shape = v.shape
            flat = v.reshape(len(v), -1)
            return column_median(flat, np.ones(flat.shape, dtype=bool)).reshape(shape[1:])
    ordered = _sort_columns(v)  # NaN columns stay NaN: minimum / maximum propagate it
    median: np.ndarray = (ordered[(len(v) - 1) // 2] + ordered[len(v) // 2]) / 2
    return median


def _middle_plan(width: int) -> tuple[tuple[int, int, bool, bool], ...] | None:
    """The comparators of ``_NETWORK[width]`` that the two middle outputs depend on, as ``(i, j,
    min needed, max needed)``, the last one dropped when it only orders the middle pair; ``None``
    when some input would not reach the middle (then a NaN could hide: the full sort is used)."""
    network = _NETWORK.get(width)
    if network is None or width < 2:
        return None
    middle = {(width - 1) // 2, width // 2}
    if network and set(network[-1]) == middle:
        network = network[:-1]
    needed, plan = set(middle), []
    for i, j in reversed(network):
        low, high = i in needed, j in needed
        if low or high:
            plan.append((i, j, low, high))
            needed |= {i, j}
    return tuple(reversed(plan)) if needed == set(range(width)) else None


#: Per window size: the pruned median network of :func:`_full_median` (6: 19 of the 24 min / max).
_MIDDLE = {width: plan for width in _NETWORK if (plan := _middle_plan(width)) is not None}
