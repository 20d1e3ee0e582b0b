"""Normalised averaging (FedNova) as a rescaling of client models, and weights a client cannot inflate.

Contract
--------
When client i takes τ_i local optimizer steps from the global model x, FedAvg's average of the
returned models converges to the objective weighted by ``p_i·‖a_i‖₁ / Σ_j p_j·‖a_j‖₁`` (Wang et
al., "Tackling the Objective Inconsistency Problem in Heterogeneous Federated Optimization",
NeurIPS 2020), not by the data shares p_i: moving quota between owners of non-IID data moves the
objective. FedNova's update keeps it:

    x⁺ = x − τ_eff · Σ_i p_i · Δ_i / ‖a_i‖₁,   Δ_i = x − x_i,   τ_eff = Σ_i p_i · ‖a_i‖₁

``‖a_i‖₁`` (:func:`local_work`) is the sum of the coefficients with which the local gradients
enter the client's model change Δ_i = η · Σ_k a_{i,k} g_{i,k}:

- plain SGD: ``τ``;
- SGD with (heavy-ball, PyTorch) momentum ρ: ``[τ − ρ(1 − ρ^τ)/(1 − ρ)] / (1 − ρ)``;
- a proximal term μ/2·‖x − x_global‖² (FedProx) with α = η·μ: ``[1 − (1 − α)^τ] / α``;
- both: the same sum for the joint linear recursion (a 2×2 matrix power, exact).

:func:`rescale_update` turns one client model into ``x + (τ_eff/‖a_i‖₁)·(x_i − x)``: a FedAvg of
the rescaled models weighted by p_i **is** FedNova's update, so any aggregation rule
that starts from a weighted average (FedAvg, FedProx, FedAdam, FedYogi, FedAvgM) applies its own
server-side logic to FedNova's step, and a robust rule (FedTrimmedAvg, Krum) sees updates on one
scale. Only floating-point arrays are rescaled; integer buffers (e.g. BatchNorm's
``num_batches_tracked``) are counters, not directions, and pass through as the client sent them.

Bounded rescaling (``max_rescale = c``): FedNova extrapolates a client with little local work.
Its factor ``m_i = τ_eff/‖a_i‖₁`` grows as ``‖a_i‖₁`` shrinks (momentum 0.9: ``‖a‖₁`` is 1 for one
step, 41.4 for ten), and the variance its minibatch noise adds to the global step grows like
``m_i²``. :func:`normalized_plan` with ``max_rescale=c`` clips every factor at c,
``m_i = min(τ_eff/‖a_i‖₁, c)``. With ``d_i = Δ_i/‖a_i‖₁`` (the client's normalised gradient sum):

    x⁺ = x − Σ_i p_i·m_i·Δ_i = x − Σ_i p_i·min(τ_eff, c·‖a_i‖₁)·d_i

so the objective is weighted by ``w_i ∝ p_i·min(τ_eff, c·‖a_i‖₁)`` (:func:`objective_weights`)
and the step is ``τ_c = Σ_i p_i·min(τ_eff, c·‖a_i‖₁) ≤ τ_eff`` long:

- ``c = ∞`` (``None``): FedNova, ``w = p``, bit for bit (the clip is not applied).
- A client with ``‖a_i‖₁ ≥ τ_eff/c`` keeps FedNova's weight ``p_i·τ_eff``; one below weighs
  ``p_i·c·‖a_i‖₁``: ``"data-size"`` FedAvg's weight (``p_i·‖a_i‖₁``) times c. Its share of the
  objective falls linearly with its work below ``τ_eff/c`` instead of staying ``p_i``: the
  objective lies between FedNova's and data-size FedAvg's.
- ``c = 1``: ``w ∝ p_i·min(τ_eff, ‖a_i‖₁)``: a slow client's update enters as it was sent
  (data-size FedAvg), a fast one is scaled down to τ_eff's length (FedNova).
- ``c < 1`` is refused: every factor would be at most ``c < 1`` even in a round of equal work,
  a server learning rate rather than a bound on extrapolation (as ``c → 0`` the update tends to
  c × data-size FedAvg's, a vanishing step in its direction). With equal work every factor is
  1 ≤ c: FedAvg for any allowed c.
- The downscale of fast clients (factor < 1) is not bounded: it shrinks their update and its
  noise; bounding it at ``1/c`` would weigh them ``p_i·‖a_i‖₁/c > p_i·τ_eff``, moving the
  objective towards the fast clients' data (the drift the rule exists to remove) and reducing no
  variance.
- Not lowering τ_eff instead (``τ_eff ← min(τ_eff, c·min_j ‖a_j‖₁)`` keeps ``w = p`` exactly):
  every client's step would then be bounded by the slowest one's, so a single client held at
  one step makes the whole round worth c local steps: the cost the controller exists to remove.
  The per-client clip costs only the capped clients' share.

Untrusted claims (every number here comes from a client):

- :func:`capped_weights`: a claimed data size above ``cap ×`` the median claim of the round's
  clients (at least 3) is clipped to it, so one client of n claiming any size gets at most
  ``cap·n / (n − 1 + cap)`` times the weight of an honest median client (< ``cap``).
- :func:`plausible_steps`: a client's claimed steps per sample is kept within ``[1/tol, tol]``
  of the round's median (the upper side also admits up to the median step count, which a small
  quota legitimately exceeds in steps per sample): too few claimed steps would enlarge its own
  update, too many would enlarge τ_eff and so every client's step.
- :func:`plausible_work`: the optimizer a client claims (momentum, lr × proximal μ) moves its
  ``‖a_i‖₁`` by at most the same tolerance from the work of its steps under the round's median
  optimizer: a proximal claim cannot enlarge its own update to the cap, a momentum claim cannot
  lengthen every client's step.
- Both judge a claim against the round's median, which needs 3 clients: a round that samples
  fewer takes its medians over itself and ``peers`` (the latest claims of clients outside the
  round, which the strategies keep), so two sampled nodes of many are still screened.

Cost
----
O(clients) numpy for the plan (the cap adds one ``minimum``); one pass over each model's arrays
for the rescaling (float64 arithmetic, cast to ``aggregation_dtype``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "local_work",
    "normalized_plan",
    "objective_weights",
    "check_max_rescale",
    "MAX_RESCALE",
    "rescale_update",
    "aggregation_dtype",
    "fednova_update",
    "capped_weights",
    "plausible_steps",
    "plausible_work",
    "WEIGHT_CAP",
    "STEP_TOLERANCE",
]

#: Default robust cap: no claimed data size counts for more than this many times the median claim.
WEIGHT_CAP = 2.0
#: Default tolerance of a claimed step count per sample around the round's median.
STEP_TOLERANCE = 2.0
#: The strategies' default ``max_rescale`` (but min-energy's with private data, 2; ``None`` or ``math.inf``
#: here are FedNova's factors, unbounded). 8, from the
#: non-IID sweep (docs/results.md, "Private, label-skewed data"): it bounds the factors of nodes held
#: at one or two momentum steps in a wide fleet (~20-35×; MNIST wide reaches the target sooner) and
#: stays above the factor of a single slow data owner whose class would be lost below it
#: (tests/test_noniid_e2e.py's case: 7.71; a cap of 4 loses that class).
MAX_RESCALE: float = 8.0


def _as_array(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return a


def local_work(steps: ArrayLike, momentum: ArrayLike = 0.0, proximal_alpha: ArrayLike = 0.0) -> np.ndarray:
    """``‖a_i‖₁``: the sum of the coefficients of the local gradients in a client's update.

    Parameters
    ----------
    steps : int or array of int
        Local optimizer steps τ (>= 1; 0 gives 0).
    momentum : float or array (default: 0.0)
        Heavy-ball momentum ρ of the local SGD, in [0, 1).
    proximal_alpha : float or array (default: 0.0)
        α = learning rate × proximal μ, in [0, 1).

    Returns
    -------
    numpy.ndarray
        One float per client (broadcast shape of the inputs).

    Raises
    ------
    ValueError
        A value outside its range (the strategies screen client claims before calling this).
    """
    tau = _as_array(steps, "steps")
    rho = _as_array(momentum, "momentum")
    alpha = _as_array(proximal_alpha, "proximal_alpha")
    if np.any(tau < 0):
        raise ValueError(f"steps must be >= 0, got {steps!r}")
    if np.any((rho < 0) | (rho >= 1)):
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    if np.any((alpha < 0) | (alpha >= 1)):
        raise ValueError(f"proximal_alpha (lr × mu) must be in [0, 1), got {proximal_alpha!r}")
    shape = np.broadcast_shapes(tau.shape, rho.shape, alpha.shape)
    tau, rho, alpha = (np.broadcast_to(v, shape).ravel() for v in (tau, rho, alpha))
    out = tau.astype(float)
    # The closed form loses ~eps/(1 − ρ)² to cancellation: near ρ = 1 the recursion's doubling is used instead
    mom = (rho > 0) & (alpha == 0) & (rho <= _CLOSED_FORM_MOMENTUM)
    if np.any(mom):
        r, t = rho[mom], tau[mom]
        out[mom] = (t - r * (1.0 - r**t) / (1.0 - r)) / (1.0 - r)
    prox = (alpha > 0) & (rho == 0)
    if np.any(prox):
        a, t = alpha[prox], tau[prox]
        # 1 − (1 − α)^τ via expm1/log1p: exact for tiny α where the plain form cancels
        out[prox] = -np.expm1(t * np.log1p(-a)) / a
    for i in np.flatnonzero((rho > _CLOSED_FORM_MOMENTUM) | ((alpha > 0) & (rho > 0))):
        out[i] = _joint_work(int(tau[i]), float(rho[i]), float(alpha[i]))
    return out.reshape(shape)


def _joint_work(tau: int, rho: float, alpha: float) -> float:
    """The sum of the gradients' coefficients for momentum ρ and α = η·μ (either may be 0): the recursion's
    response to a unit gradient, exact to rounding for every ρ in [0, 1) and α in [0, 1).

    With y = x − x_global and u = η·v (PyTorch's buffer v ← ρv + g + μy; x ← x − ηv):
    ``[y, u]⁺ = A [y, u] + η[−1, 1]·g`` with ``A = [[1 − α, −ρ], [α, ρ]]``, so the sum is
    ``−e₁ᵀ S_τ [−1, 1]`` with ``S_τ = Σ_{m<τ} A^m``. ``S_τ`` is built by doubling
    (``S_2k = S_k + A^k S_k``, ``S_{k+1} = I + A S_k``): O(log τ) 2×2 products, no
    inversion. The closed form ``(I − A)⁻¹ (I − A^τ)`` divides by ``det(I − A) = α``: for α below
    ~1e-16 (a claim a client may send) it returns garbage, negative or NaN.
    """
    a = np.array([[1.0 - alpha, -rho], [alpha, rho]])
    total = np.zeros((2, 2))  # S_k for the bits of tau read so far
    power = np.eye(2)  # A^k
    for bit in bin(tau)[2:]:
        total, power = total + power @ total, power @ power  # k → 2k
        if bit == "1":
            total, power = np.eye(2) + a @ total, a @ power  # k → k + 1
    return float(-(total @ np.array([-1.0, 1.0]))[0])


#: Momentum above this takes the recursion (``_joint_work``) rather than the closed form, whose
#: cancellation costs ~eps/(1 − ρ)² relative: ~1e-10 here.
_CLOSED_FORM_MOMENTUM = 0.999


def check_max_rescale(max_rescale: float | None) -> float | None:
    """``max_rescale`` as a float (``None``: no cap), or ``ValueError`` naming the value and the fix."""
    if max_rescale is None:
        return None
    if isinstance(max_rescale, bool) or not isinstance(max_rescale, (int, float, np.integer, np.floating)):
        raise ValueError(
            f"max_rescale must be a number >= 1 (the largest factor a client's update is scaled by; math.inf: "
            f"FedNova's factors, unbounded), got {type(max_rescale).__name__} {max_rescale!r}"
        )
    c = float(max_rescale)
    if not c >= 1:  # NaN too
        raise ValueError(
            f"max_rescale must be >= 1 (math.inf: unbounded), got {max_rescale!r}: below 1 it would shrink "
            "every update, even in a round of equal work (a server learning rate, not a bound); pass e.g. "
            "max_rescale=4"
        )
    return c


def normalized_plan(
    weights: ArrayLike, work: ArrayLike, max_rescale: float | None = None, step_work: ArrayLike | None = None
) -> tuple[np.ndarray, float, np.ndarray]:
    """``(p, τ_eff, scale)``: normalised data weights, FedNova's τ_eff and each model's rescaling.

    Parameters
    ----------
    weights : array of float
        Each client's (bounded) data weight, >= 0 with a positive sum.
    work : array of float
        Each client's ``‖a_i‖₁`` (:func:`local_work`), > 0.
    max_rescale : float, optional
        Largest factor c any model change is scaled by (>= 1; see the module docstring for the
        objective it gives). ``None``: FedNova's factors, unbounded.
    step_work : array of float, optional
        Each client's work as it counts towards τ_eff, where that differs from the work its own update
        is normalised by (a claim of more work than is plausible: it lengthens only its own
        normalisation, not every client's step). Default: ``work``.

    Returns
    -------
    p : numpy.ndarray
        ``weights / Σ weights`` (sums to 1).
    tau_eff : float
        ``Σ p_i ‖a_i‖₁`` (FedNova's, whatever the cap; of ``step_work`` when given).
    scale : numpy.ndarray
        ``min(τ_eff / ‖a_i‖₁, max_rescale)``: what :func:`rescale_update` multiplies client i's
        model change by. With every ``‖a_i‖₁`` equal it is exactly 1 (FedAvg).
    """
    c = check_max_rescale(max_rescale)
    w = _as_array(weights, "weights")
    a = _as_array(work, "work")
    if w.shape != a.shape or w.ndim != 1 or not len(w):
        raise ValueError(f"weights and work must be 1-d of one length, got {w.shape} and {a.shape}")
    if np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"weights must be >= 0 with a positive sum, got {weights!r}")
    if np.any(a <= 0):
        raise ValueError(f"local work must be > 0 for every client, got {work!r}")
    t = a if step_work is None else _as_array(step_work, "step_work")
    if t.shape != a.shape or np.any(t <= 0):
        raise ValueError(f"step_work must be > 0 and of the work's length, got {step_work!r}")
    p = w / w.sum()
    if np.all(a == a[0]) and np.all(t == a):
        return p, float(a[0]), np.ones_like(a)  # equal work: FedAvg, not FedAvg to rounding
    tau_eff = float(p @ t)
    scale = tau_eff / a
    return p, tau_eff, scale if c is None else np.minimum(scale, c)


def objective_weights(weights: ArrayLike, work: ArrayLike, max_rescale: float | None = None) -> np.ndarray:
    """Each client's share of the objective the aggregate descends: ``∝ p_i·scale_i·‖a_i‖₁``.

    ``p`` for FedNova (``max_rescale=None``), ``∝ p_i·min(τ_eff, c·‖a_i‖₁)`` with the cap; sums to 1.
    """
    p, _, scale = normalized_plan(weights, work, max_rescale)
    share = p * scale * _as_array(work, "work")
    return np.asarray(share / share.sum())


def _is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating)


def aggregation_dtype(model: np.dtype, reply: np.dtype) -> np.dtype:
    """The dtype a floating-point reply array is rescaled and averaged at: its own, raised towards the
    model's when it is below single precision (a float16 reply beside a float32 model: float32), but
    not above float32 (float32 replies to a float64 model, as FedAdam sends, stay float32: nothing
    is gained by copying them).

    Below single precision a reply would set the precision of what it touches: Flower's average
    accumulates in the first reply's dtype, and a rescaled update overflows float16 at 65504.
    """
    model, reply = np.dtype(model), np.dtype(reply)
    if reply.kind != "f" or model.kind != "f" or reply.itemsize >= 4 or model.itemsize <= reply.itemsize:
        return reply
    return np.dtype(np.float32) if model.itemsize > 4 else model


def rescale_update(
    global_arrays: Sequence[np.ndarray], local_arrays: Sequence[np.ndarray], scale: float
) -> list[np.ndarray]:
    """``x + scale·(x_i − x)`` for every floating-point array; other arrays returned as sent.

    The arithmetic is float64, cast to :func:`aggregation_dtype` (a float16 reply next to a float32
    model comes back float32: at float16, ``60000 · 2`` is ``inf``);
    ``scale == 1`` returns the client's arrays themselves (no rounding). A result can still exceed
    its dtype's range (float32 ``3e38 · 2``): the caller checks finiteness.
    """
    if len(global_arrays) != len(local_arrays):
        raise ValueError(f"the model sent has {len(global_arrays)} arrays, the client's {len(local_arrays)}")
    if scale == 1.0:
        return list(local_arrays)
    out = []
    for x, xi in zip(global_arrays, local_arrays):
        xi = np.asarray(xi)
        if not _is_float(xi):
            out.append(xi)
            continue
        x64 = np.asarray(x, dtype=np.float64)
        dtype = aggregation_dtype(np.asarray(x).dtype, xi.dtype)
        with np.errstate(over="ignore"):  # an overflow becomes inf, which the caller refuses
            out.append((x64 + float(scale) * (xi.astype(np.float64) - x64)).astype(dtype))
    return out


def fednova_update(
    global_arrays: Sequence[np.ndarray],
    local_models: Sequence[Sequence[np.ndarray]],
    weights: ArrayLike,
    work: ArrayLike,
    max_rescale: float | None = None,
) -> list[np.ndarray]:
    """FedNova's ``x − Σ p_i min(τ_eff, c‖a_i‖₁) Δ_i / ‖a_i‖₁`` written out directly (a reference for
    tests; ``c = max_rescale``, ``None``: ``x − τ_eff Σ p_i Δ_i / ‖a_i‖₁``)."""
    p, tau_eff, _ = normalized_plan(weights, work, max_rescale)
    a = _as_array(work, "work")
    c = check_max_rescale(max_rescale)
    # each client's step length: τ_eff (FedNova), at most c·‖a_i‖₁ with the cap
    length = np.ones(len(a)) if c is None else np.minimum(tau_eff, c * a) / tau_eff
    out = []
    for j, x in enumerate(global_arrays):
        x64 = np.asarray(x, dtype=np.float64)
        step = sum(
            p[i] * length[i] * (x64 - np.asarray(m[j], dtype=np.float64)) / a[i] for i, m in enumerate(local_models)
        )
        out.append(x64 - tau_eff * step)
    return out


def capped_weights(claims: ArrayLike, cap: float | None = WEIGHT_CAP) -> tuple[np.ndarray, np.ndarray]:
    """``(weights, clipped)``: claimed data sizes clipped at ``cap ×`` the round's median claim.

    Needs at least 3 claims (with 2 no statistic tells the liar from the honest one: nothing is
    clipped); ``cap=None`` disables the cap. ``clipped`` marks the claims that were lowered.
    """
    w = _as_array(claims, "claims")
    if np.any(w < 0):
        raise ValueError(f"claimed data sizes must be >= 0, got {claims!r}")
    if cap is None or len(w) < 3:
        return w.copy(), np.zeros(len(w), dtype=bool)
    if not cap >= 1:
        raise ValueError(f"the weight cap must be >= 1 (a multiple of the median claim), got {cap!r}")
    bound = cap * float(np.median(w))
    clipped = w > bound
    return np.where(clipped, bound, w), clipped


def _peer_columns(peers: ArrayLike | None, columns: int, round_size: int) -> list[np.ndarray]:
    """The columns of ``peers`` ``(k, columns)``; empty when the round has 3 clients or more (its own
    medians judge it) or there are no peers."""
    if peers is None or round_size >= 3:
        return [np.empty(0) for _ in range(columns)]
    a = np.asarray(peers, dtype=float).reshape(-1, columns)
    a = a[np.isfinite(a).all(axis=1)]
    return [a[:, j] for j in range(columns)]


def plausible_steps(
    steps: ArrayLike,
    samples: ArrayLike,
    tolerance: float = STEP_TOLERANCE,
    equal_steps: bool = False,
    reference: float | None = None,
    peers: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, clipped)``: claimed steps kept within ``tolerance`` of the round's steps per sample.

    With m the median of ``steps_i / samples_i`` over the clients (at least 3), client i's steps
    are clipped into ``[max(1, samples_i·m/tol), max(samples_i·m·tol, median steps)]``. The upper
    bound's second term admits a small quota's honest excess (a batch is at least one step even
    when it holds few samples). With ``equal_steps`` (the clients were asked to scale their batch
    size so that every one takes the same steps: ``scale_batch_size``) the interval also admits
    ``[max(1, median steps/tol), median steps·tol]``, whatever the samples. With ``reference``
    (only the clients below this reference quota shrink their batches to take its steps:
    ``scale_batch_size="shrink"``) a client's steps follow ``e_i = max(samples_i, reference)``
    samples, so ``e_i`` stands in for ``samples_i`` in the rule above, and the lower bound is at
    most ``samples_i`` (a batch holds at least one sample, so an honest client takes at most
    ``samples_i`` steps in a pass). A fleet whose loops ignore the reference (batches of the
    user's size over the quota) takes the steps of the plain rule instead, so the round uses the
    reading (by ``e_i`` or by ``samples_i``) that clips fewer claims, the reference's on a tie.

    A round of fewer than 3 clients (two sampled nodes of many) has no median of its own: ``peers``,
    rows ``(steps per sample by samples, steps per sample by e, steps)`` of clients outside the round
    (their latest claims, each at its own round's reading), completes the medians when the
    round and the peers are 3 or more together; otherwise the claims are returned unchecked.
    """
    s = _as_array(steps, "steps")
    n = _as_array(samples, "samples")
    if s.shape != n.shape:
        raise ValueError(f"steps and samples must have one length, got {s.shape} and {n.shape}")
    peer_rate, peer_rate_e, peer_steps = _peer_columns(peers, 3, len(s))
    if len(s) + len(peer_rate) < 3:
        return s.copy(), np.zeros(len(s), dtype=bool)
    if not tolerance >= 1:
        raise ValueError(f"the step tolerance must be >= 1, got {tolerance!r}")
    if reference is not None and not reference >= 1:
        raise ValueError(f"the reference quota must be >= 1 (or None), got {reference!r}")
    median_steps = float(np.median(np.concatenate([s, peer_steps])))
    m = float(np.median(np.concatenate([s / n, peer_rate])))
    lo = np.maximum(1.0, n * m / tolerance)
    hi = np.maximum(n * m * tolerance, median_steps)
    if reference is not None:  # the clients shrank their batches, or their loops ignored the reference
        e = np.maximum(n, float(reference))
        m_e = float(np.median(np.concatenate([s / e, peer_rate_e])))
        lo_e = np.maximum(1.0, np.minimum(e * m_e / tolerance, n))
        hi_e = np.maximum(e * m_e * tolerance, median_steps)
        if np.count_nonzero((s < lo_e) | (s > hi_e)) <= np.count_nonzero((s < lo) | (s > hi)):
            lo, hi = lo_e, hi_e
    if equal_steps:
        med = median_steps
        lo = np.minimum(lo, max(1.0, med / tolerance))
        hi = np.maximum(hi, med * tolerance)
    out = np.clip(s, lo, np.maximum(lo, hi))
    return out, out != s


def plausible_work(
    steps: ArrayLike,
    momentum: ArrayLike,
    proximal_alpha: ArrayLike,
    tolerance: float = STEP_TOLERANCE,
    peers: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(work, clipped)``: each client's ``‖a_i‖₁`` with its optimizer claim kept within ``tolerance``.

    A client's momentum, learning rate and proximal μ are claims too: a large α = lr·μ shrinks its
    ``‖a_i‖₁`` (at most ``1/α`` whatever its steps: its own update is enlarged up to ``max_rescale``), a
    momentum near 1 grows it towards ``τ(τ + 1)/2`` (τ_eff, so every client's step, grows with it). With at
    least 3 clients, client i's work is kept within ``[r_i/tol, r_i·tol]`` of ``r_i``, the work of its
    (already screened) ``steps`` under the round's median momentum and median α: a fleet on one optimizer
    is unchanged, and one claim moves its own factor, and τ_eff, by at most ``tolerance``. A work that is
    not a positive finite number (momentum and a strong proximal term can make the sum of a claim's
    coefficients ≤ 0) is taken at ``r_i``. A round of fewer than 3 clients takes its medians over
    itself and ``peers``, rows ``(momentum, α)`` of clients outside the round (their latest claims),
    when they are 3 or more together; otherwise its claims are believed, a work that is not
    a positive number taken at the client's steps (plain SGD).
    """
    s = _as_array(steps, "steps")
    work = local_work(s, momentum, proximal_alpha).astype(float)
    peer_rho, peer_alpha = _peer_columns(peers, 2, len(s))
    if len(s) + len(peer_rho) < 3:
        bad = ~(np.isfinite(work) & (work > 0))
        return np.where(bad, s, work), bad
    if not tolerance >= 1:
        raise ValueError(f"the step tolerance must be >= 1, got {tolerance!r}")
    rho = np.broadcast_to(_as_array(momentum, "momentum"), s.shape)
    alpha = np.broadcast_to(_as_array(proximal_alpha, "proximal_alpha"), s.shape)
    median_rho = float(np.median(np.concatenate([rho, peer_rho])))
    median_alpha = float(np.median(np.concatenate([alpha, peer_alpha])))
    reference = local_work(s, median_rho, median_alpha)
    reference = np.where(np.isfinite(reference) & (reference > 0), reference, s)
    out = np.where(np.isfinite(work) & (work > 0), work, reference)
    out = np.clip(out, reference / tolerance, reference * tolerance)
    return out, out != work
