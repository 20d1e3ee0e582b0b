"""Online affine cost fits and step-change (drift) detection for the allocation controller.

Contract
--------
Each participant keeps its last :data:`WINDOW` observations ``(samples, seconds, joules)``.
:func:`fit_affine` turns them into ``t(n) = a + b·n`` (and ``e(n) = c + d·n``) per participant:
a least-squares line with one robust re-weighting step (an outlier is down-weighted, not trusted),
``a`` clamped at 0 (then ``b`` is the proportional fit). The line is *identified* only when the
window's quotas spread by at least :data:`MIN_SPREAD` of their mean, or (3+ points) when the
slope's standard error is below :data:`MAX_SLOPE_ERROR` of the slope: quotas move between rounds
while the controller converges, which identifies both terms; once the split settles, the last
identified line is kept and re-levelled to the recent observations (its fixed share stays).

:func:`drifted` flags an observation far outside what the participant's model predicts; the
controller then rescales that participant's history by the observed ratio, so the estimate
jumps to the new level at once instead of waiting out the smoothing, and an identified line
stays identified.

Cost
----
Vectorised over participants: O(P·WINDOW) per call, no Python loop over participants.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["WINDOW", "MIN_SPREAD", "fit_affine", "drifted"]

WINDOW = 6  # observations kept per participant
MIN_SPREAD = 0.2  # (max n − min n) / mean n that identifies the fixed cost from any 2 points
MAX_SLOPE_ERROR = 0.2  # or, from 3+ points, a slope whose standard error is below this share of it
_MAX_FIXED_SHARE = 0.95  # the fixed cost may explain at most this share of the mean observation


def _line(n: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least-squares ``y = a + b·n`` per row (``w = 0`` where a cell is empty)."""
    sw = w.sum(axis=1)
    sw_safe = np.where(sw > 0, sw, 1.0)
    n_bar = (w * n).sum(axis=1) / sw_safe
    y_bar = (w * y).sum(axis=1) / sw_safe
    dn = n - n_bar[:, None]
    snn = (w * dn * dn).sum(axis=1)
    sny = (w * dn * (y - y_bar[:, None])).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(snn > 0, sny / snn, np.nan)
    return y_bar - b * n_bar, b


@np.errstate(divide="ignore", invalid="ignore")
def fit_affine(n: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fit ``y = a + b·n`` per row of ``(P, WINDOW)`` arrays; NaN marks an empty cell.

    Returns ``(a, b, identified, noise)``. Rows that are not identified (too few points, too
    little spread in ``n``, or a non-positive slope) get ``a = 0`` and the proportional
    ``b = Σy/Σn``. ``noise`` is the robust relative scatter of the row's observations around the
    returned line (1.4826 · median |residual| / mean y), NaN with fewer than 3 observations.
    """
    filled = ~(np.isnan(n) | np.isnan(y))
    w = filled.astype(float)
    n0 = np.where(filled, n, 0.0)
    y0 = np.where(filled, y, 0.0)
    count = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        proportional = y0.sum(axis=1) / n0.sum(axis=1)
        mean_n = n0.sum(axis=1) / np.where(count > 0, count, 1.0)
        mean_y = y0.sum(axis=1) / np.where(count > 0, count, 1.0)
        spread = (np.where(filled, n, -np.inf).max(axis=1) - np.where(filled, n, np.inf).min(axis=1)) / mean_n
    a, b = _line(n0, y0, w)
    # One robust step: residuals far beyond the row's typical residual lose their weight.
    resid = np.where(filled, y0 - (a[:, None] + b[:, None] * n0), 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rows without any observation
        scale = 1.4826 * np.nanmedian(np.where(filled, np.abs(resid), np.nan), axis=1)
    scale = np.maximum(np.nan_to_num(scale), 0.01 * np.abs(mean_y)) + 1e-300
    w2 = w / (1.0 + (resid / (3.0 * scale[:, None])) ** 2)
    a2, b2 = _line(n0, y0, w2)
    ok = np.isfinite(a2) & np.isfinite(b2)
    a = np.where(ok, a2, a)
    b = np.where(ok, b2, b)
    # Identified: a wide spread of quotas, or (with 3+ points) a slope the scatter cannot fake.
    resid = np.where(filled, y0 - (a[:, None] + b[:, None] * n0), 0.0)
    snn = np.where(filled, (n0 - mean_n[:, None]) ** 2, 0.0).sum(axis=1)
    slope_error = np.sqrt((resid ** 2).sum(axis=1) / np.maximum(count - 2, 1) / snn)
    precise = (count >= 3) & (spread >= 0.01) & (slope_error < MAX_SLOPE_ERROR * b)
    identified = (count >= 2) & ((spread >= MIN_SPREAD) | precise) & np.isfinite(b) & (b > 0)
    # A negative intercept means no measurable fixed cost: the proportional model.
    neg = identified & (a < 0)
    a = np.where(neg, 0.0, a)
    b = np.where(neg, proportional, b)
    # Cap the fixed share so a flat, noisy line cannot claim almost all the time as overhead.
    too_flat = identified & (a > _MAX_FIXED_SHARE * mean_y)
    a = np.where(too_flat, _MAX_FIXED_SHARE * mean_y, a)
    b = np.where(too_flat, (1.0 - _MAX_FIXED_SHARE) * mean_y / mean_n, b)
    a = np.where(identified, a, 0.0)
    b = np.where(identified, b, proportional)
    final = np.where(filled, np.abs(y0 - (a[:, None] + b[:, None] * n0)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        noise = 1.4826 * np.nanmedian(final, axis=1) / mean_y
    noise = np.where(count >= 3, noise, np.nan)
    return a, b, identified, noise


def drifted(observed: np.ndarray, predicted: np.ndarray, threshold: float) -> np.ndarray:
    """Whether ``observed`` is more than a factor ``1 + threshold`` away from ``predicted``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = observed / predicted
    limit = 1.0 + threshold
    return np.isfinite(ratio) & (ratio > 0) & ((ratio > limit) | (ratio < 1.0 / limit))
