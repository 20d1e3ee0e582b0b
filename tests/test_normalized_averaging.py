"""FedNova's normalised averaging (flwr_adaptive.normalized_averaging): hand-computed steps and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flwr_adaptive.normalized_averaging import (
    capped_weights,
    check_max_rescale,
    fednova_update,
    local_work,
    normalized_plan,
    objective_weights,
    plausible_steps,
    plausible_work,
    rescale_update,
)


def _aggregate(x, models, weights, work, max_rescale=None):
    """What the strategies do: rescale every model, then FedAvg (a weighted mean) of them."""
    p, _, scale = normalized_plan(weights, work, max_rescale)
    moved = [rescale_update([x], [m], s)[0] for m, s in zip(models, scale)]
    return sum(pi * np.asarray(m, dtype=float) for pi, m in zip(p, moved))


def _recursion(tau, rho, alpha, eta=0.1):
    """PyTorch's SGD (v ← ρv + g + μ(x − x₀); x ← x − ηv) on a unit gradient: −(x_τ − x₀)/η."""
    mu, y, v = alpha / eta, 0.0, 0.0
    for _ in range(tau):
        v = rho * v + 1.0 + mu * y
        y -= eta * v
    return -y / eta


# --------------------------------------------------------------------------- hand-computed
def test_local_work_of_plain_sgd_is_the_step_count():
    assert local_work([1, 2, 7]).tolist() == [1.0, 2.0, 7.0]


def test_local_work_with_momentum_by_hand():
    # ρ = 0.5, τ = 3: the gradients enter with 1 + ρ + ρ², 1 + ρ, 1 = 1.75 + 1.5 + 1
    assert local_work(3, momentum=0.5) == pytest.approx(4.25, abs=1e-15)
    # the closed form [τ − ρ(1 − ρ^τ)/(1 − ρ)] / (1 − ρ) at ρ = 0.9, τ = 5
    assert local_work(5, momentum=0.9) == pytest.approx((5 - 0.9 * (1 - 0.9**5) / 0.1) / 0.1, rel=1e-14)


def test_local_work_with_a_proximal_term_by_hand():
    # α = 0.5, τ = 3: each step keeps (1 − α) of the previous distance: 1 + 0.5 + 0.25
    assert local_work(3, proximal_alpha=0.5) == pytest.approx(1.75, abs=1e-15)
    # tiny α: no cancellation (→ τ)
    assert local_work(1000, proximal_alpha=1e-12) == pytest.approx(1000.0 - 1e-12 * 1000 * 999 / 2, rel=1e-12)


def test_local_work_with_momentum_and_proximal_term_matches_the_recursion():
    for tau, rho, alpha in [(1, 0.9, 0.1), (5, 0.9, 0.1), (40, 0.5, 0.02), (300, 0.99, 0.001)]:
        assert local_work(tau, rho, alpha) == pytest.approx(_recursion(tau, rho, alpha), rel=1e-9)


def test_local_work_stays_exact_for_a_tiny_proximal_term_and_momentum_next_to_one():
    # α = lr × μ of 1e-320 or 1e-20 beside momentum: the closed form (I − A)⁻¹(I − A^τ) divides by α and
    # gave NaN or −1.6e6 (one client's claim crashed the round); ρ → 1: the sum tends to τ(τ + 1)/2
    for tau, rho, alpha in [(20, 0.5, 1e-320), (20, 0.9, 1e-20), (7, 0.5, 5e-324)]:
        assert local_work(tau, rho, alpha) == pytest.approx(_recursion(tau, rho, alpha), rel=1e-12)
    assert local_work(20, 0.9999999999999999) == pytest.approx(20 * 21 / 2, rel=1e-12)
    assert local_work(1000, 0.9999) == pytest.approx(_recursion(1000, 0.9999, 0.0), rel=1e-10)


@settings(max_examples=80)
@given(
    st.integers(min_value=1, max_value=400),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    st.one_of(st.just(0.0), st.floats(min_value=5e-324, max_value=0.5)),
)
def test_local_work_is_the_recursion_and_finite(tau, rho, alpha):
    work = float(local_work(tau, rho, alpha))
    assert np.isfinite(work)
    assert work == pytest.approx(_recursion(tau, rho, alpha), rel=1e-7, abs=1e-9)


def test_fednova_step_by_hand_differs_from_fedavg():
    # x = 1; client A: 2 steps to 0 (Δ = 1), client B: 6 steps to -5 (Δ = 6); equal data.
    # τ_eff = 4, Σ p Δ/τ = 0.5·0.5 + 0.5·1 = 0.75 → x⁺ = 1 − 4·0.75 = −2 (FedAvg: −2.5)
    got = _aggregate(np.array([1.0]), [np.array([0.0]), np.array([-5.0])], [10, 10], [2, 6])
    assert got.tolist() == [-2.0]
    assert fednova_update([np.array([1.0])], [[np.array([0.0])], [np.array([-5.0])]], [10, 10], [2, 6])[0] == -2.0


def test_rescale_passes_integer_buffers_through_and_keeps_dtypes():
    x = [np.zeros(3, dtype=np.float32), np.array([5], dtype=np.int64)]
    xi = [np.ones(3, dtype=np.float32), np.array([9], dtype=np.int64)]
    out = rescale_update(x, xi, 2.5)
    assert out[0].dtype == np.float32 and out[0].tolist() == [2.5, 2.5, 2.5]
    assert out[1] is xi[1]


def test_rescale_of_a_lower_precision_array_is_at_the_models_precision():
    # at float16, x + 1.75·(60000 − x) ≈ 105000 is inf; at the model's float32 it is the step
    x = [np.array([1.0, -2.0], dtype=np.float32)]
    out = rescale_update(x, [np.full(2, 60000.0, dtype=np.float16)], 1.75)
    assert out[0].dtype == np.float32
    np.testing.assert_allclose(out[0], x[0] + 1.75 * (60000.0 - x[0]), rtol=1e-6)
    # beyond the model's own range it overflows to inf (which the strategies refuse), without a warning
    assert np.isinf(rescale_update(x, [np.full(2, 3e38, dtype=np.float32)], 1.75)[0]).all()


def test_out_of_range_inputs_are_refused():
    with pytest.raises(ValueError, match="momentum"):
        local_work(3, momentum=1.0)
    with pytest.raises(ValueError, match="proximal_alpha"):
        local_work(3, proximal_alpha=1.5)
    with pytest.raises(ValueError, match="local work must be > 0"):
        normalized_plan([1, 1], [0, 2])


def test_one_liar_of_five_gets_at_most_twice_its_fair_weight():
    for lie in (2**53 - 1, 10 * 1000):
        w, clipped = capped_weights([1000, 1000, 1000, 1000, lie])
        share = w[-1] / w.sum()
        assert clipped.tolist() == [False] * 4 + [True]
        assert share <= 2 * (1 / 5)
        assert share == pytest.approx(2 / 6)


def test_two_claims_are_not_capped():
    w, clipped = capped_weights([100, 300])
    assert w.tolist() == [100, 300] and not clipped.any()


def test_plausible_steps_by_hand():
    # 100 samples per 4 steps is the median (m = 0.04): a claim of 1 step for 100 samples is
    # raised to 100·m/2 = 2; a claim of 1000 steps is lowered to max(100·m·2, median 4) = 8.
    steps, clipped = plausible_steps([4, 4, 4, 1, 1000], [100, 100, 100, 100, 100])
    assert steps.tolist() == [4, 4, 4, 2, 8] and clipped.tolist() == [False, False, False, True, True]
    # a small quota takes more steps per sample (one batch is one step): kept up to the median count
    steps, clipped = plausible_steps([10, 10, 10, 1], [320, 320, 320, 5])
    assert steps.tolist() == [10, 10, 10, 1] and not clipped.any()


def test_a_round_of_two_is_judged_against_its_peers_by_hand():
    # Two clients have no median: alone, a claim of 1 step for 100 samples passes unchecked (its factor
    # would be ~5.5x). With three peers at 0.1 steps per sample the median rate is 0.1: 1 is raised to
    # 100·0.1/2 = 5; the honest 10 steps stay.
    assert plausible_steps([10, 1], [100, 100])[0].tolist() == [10, 1]
    peers = [(0.1, 0.1, 10.0)] * 3
    steps, clipped = plausible_steps([10, 1], [100, 100], 2.0, peers=peers)
    assert steps.tolist() == [10, 5] and clipped.tolist() == [False, True]
    # a round of 3 or more has its own medians: the peers are not read
    np.testing.assert_array_equal(plausible_steps([4, 4, 1], [100, 100, 100], 2.0, peers=[(9.0, 9.0, 900.0)] * 5)[0],
                                  plausible_steps([4, 4, 1], [100, 100, 100], 2.0)[0])
    # α = lr·μ = 0.995 makes 10 steps worth ~1 (its factor up to the cap); the peers' median optimizer
    # (momentum 0.9, α 0) makes them worth r = local_work(10, 0.9) = 41.4: its work is kept at r/2
    r = float(local_work(10, 0.9))
    work, clipped = plausible_work([10, 10], [0.9, 0.0], [0.0, 0.995], 2.0, peers=[(0.9, 0.0)] * 3)
    assert work.tolist() == pytest.approx([r, r / 2]) and clipped.tolist() == [False, True]
    alone, clipped = plausible_work([10, 10], [0.9, 0.0], [0.0, 0.995], 2.0)
    assert alone[1] == pytest.approx(float(local_work(10, 0.0, 0.995))) and not clipped.any()


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.integers(1, 500), st.integers(1, 5000)), min_size=3, max_size=9),
    st.integers(0, 1),
)
def test_a_small_round_with_the_others_as_peers_is_judged_as_the_whole_round_would_be(pairs, k):
    # Peers are the rest of the round: the medians are the whole round's, so the k + 1 clients in the
    # small round get the bounds the full round gives them.
    steps, samples = (np.array(c, dtype=float) for c in zip(*pairs))
    full, _ = plausible_steps(steps, samples, 2.0)
    peers = [(s / n, s / n, s) for s, n in zip(steps[k + 1:], samples[k + 1:])]
    small, _ = plausible_steps(steps[: k + 1], samples[: k + 1], 2.0, peers=peers)
    np.testing.assert_allclose(small, full[: k + 1])


def test_step_work_sets_tau_eff_and_work_each_own_factor_by_hand():
    # works 10, 10, 40 (the last counted at 20 towards τ_eff): τ = (10 + 10 + 20)/3 = 40/3;
    # factors τ/10, τ/10, τ/40; each share p·scale·work is τ/3: the objective stays the data shares
    p, tau, scale = normalized_plan([1, 1, 1], [10, 10, 40], step_work=[10, 10, 20])
    assert tau == pytest.approx(40 / 3) and scale.tolist() == pytest.approx([4 / 3, 4 / 3, 1 / 3])
    with pytest.raises(ValueError, match="step_work must be > 0"):
        normalized_plan([1, 1], [1, 2], step_work=[1, 0])


def test_capped_rescale_by_hand_with_plain_sgd():
    # x = 1; A: 2 steps to 0 (Δ = 1), B: 6 steps to -5 (Δ = 6); equal data. τ_eff = 4, FedNova's
    # factors 2 and 2/3. Cap 1.5: A's factor is 1.5, B's stays 2/3:
    # x⁺ = 1 − (0.5·1.5·1 + 0.5·(2/3)·6) = 1 − (0.75 + 2) = −1.75 (FedNova: −2)
    x, models = np.array([1.0]), [np.array([0.0]), np.array([-5.0])]
    p, tau_eff, scale = normalized_plan([10, 10], [2, 6], max_rescale=1.5)
    assert tau_eff == 4.0 and scale.tolist() == [1.5, 4 / 6]
    assert _aggregate(x, models, [10, 10], [2, 6], 1.5)[0] == pytest.approx(-1.75, rel=1e-15)
    assert fednova_update([x], [[m] for m in models], [10, 10], [2, 6], 1.5)[0][0] == pytest.approx(-1.75, rel=1e-15)
    # the objective: ∝ p_i·min(τ_eff, c·‖a_i‖₁) = 0.5·min(4, 3), 0.5·min(4, 9) → 3/7, 4/7
    np.testing.assert_allclose(objective_weights([10, 10], [2, 6], 1.5), [3 / 7, 4 / 7], rtol=1e-15)
    np.testing.assert_allclose(objective_weights([10, 10], [2, 6]), [0.5, 0.5], rtol=1e-15)


def test_capped_rescale_by_hand_with_momentum():
    # ρ = 0.9: one step has ‖a‖₁ = 1; ten steps (10 − 0.9·(1 − 0.9¹⁰)/0.1)/0.1 = 41.381059609.
    # Equal data: τ_eff = 21.1905298045, FedNova scales the one-step node 21.19×; with a cap of 4
    # it is scaled 4×, the ten-step one τ_eff/41.38 = 0.5121 as before.
    work = local_work([1, 10], 0.9)
    assert work[1] == pytest.approx(41.381059609, rel=1e-10)
    tau_eff = (1 + 41.381059609) / 2
    _, got_tau, nova = normalized_plan([1, 1], work)
    _, _, capped = normalized_plan([1, 1], work, max_rescale=4)
    assert got_tau == pytest.approx(tau_eff, rel=1e-10)
    np.testing.assert_allclose(nova, [tau_eff, tau_eff / 41.381059609], rtol=1e-10)
    np.testing.assert_allclose(capped, [4.0, tau_eff / 41.381059609], rtol=1e-10)
    # its share of the objective: 4 / (4 + τ_eff) = 0.1588 instead of FedNova's 0.5 (samples: 1/11)
    np.testing.assert_allclose(objective_weights([1, 1], work, 4), [4 / (4 + tau_eff), tau_eff / (4 + tau_eff)],
                               rtol=1e-10)
    # the update, Δ_A = 1 (one step), Δ_B = 41.38 (ten, same gradient): x⁺ = x − (0.5·4·1 + 0.5·τ_eff)
    x, models = np.array([0.0]), [np.array([-1.0]), np.array([-41.381059609])]
    assert _aggregate(x, models, [1, 1], work, 4)[0] == pytest.approx(-(2.0 + tau_eff / 2), rel=1e-10)


def test_max_rescale_below_one_or_not_a_number_is_refused():
    assert check_max_rescale(None) is None and check_max_rescale(3) == 3.0 and check_max_rescale(np.inf) == np.inf
    for bad in (0.5, 0, -1, float("nan"), "4", True):
        with pytest.raises(ValueError, match="max_rescale"):
            check_max_rescale(bad)
    with pytest.raises(ValueError, match="max_rescale must be >= 1"):
        normalized_plan([1, 1], [1, 2], max_rescale=0.9)


# --------------------------------------------------------------------------- properties
sizes = st.integers(min_value=1, max_value=10**6)
steps_st = st.integers(min_value=1, max_value=500)
values = st.floats(min_value=-10, max_value=10, allow_nan=False)


@settings(max_examples=60)
@given(st.lists(st.tuples(sizes, values), min_size=1, max_size=8), steps_st, st.sampled_from([0.0, 0.5, 0.9]))
def test_equal_steps_reduce_to_fedavg(clients, tau, rho):
    x = np.array([0.25, -1.0])
    models = [np.array([v, 2 * v]) for _, v in clients]
    weights = [n for n, _ in clients]
    work = local_work([tau] * len(clients), rho)
    got = _aggregate(x, models, weights, work)
    np.testing.assert_allclose(got, np.average(models, axis=0, weights=weights), rtol=1e-12, atol=1e-12)


@settings(max_examples=60)
@given(st.lists(st.tuples(sizes, values, steps_st), min_size=2, max_size=8), st.data())
def test_direction_is_invariant_to_how_many_steps_a_client_splits_its_work_into(clients, data):
    # Linear loss, plain SGD: a client's change is η·τ_i·g_i. FedNova's step direction
    # (x⁺ − x)/τ_eff is −η·Σ p_i g_i whatever the τ_i; FedAvg's would weigh g_i by τ_i.
    eta, x = 0.01, np.array([1.0])
    i = data.draw(st.integers(0, len(clients) - 1))
    new_tau = data.draw(steps_st)

    def direction(taus):
        models = [x - eta * t * g for (_, g, _), t in zip(clients, taus)]
        weights = [n for n, _, _ in clients]
        _, tau_eff, _ = normalized_plan(weights, taus)
        return (_aggregate(x, models, weights, np.array(taus, float)) - x) / tau_eff

    taus = [t for _, _, t in clients]
    changed = list(taus)
    changed[i] = new_tau
    np.testing.assert_allclose(direction(taus), direction(changed), rtol=1e-9, atol=1e-12)


@settings(max_examples=60)
@given(st.lists(st.tuples(sizes, values, steps_st), min_size=1, max_size=6), st.data())
def test_splitting_a_client_in_two_halves_changes_nothing(clients, data):
    x = np.array([0.5])
    i = data.draw(st.integers(0, len(clients) - 1))
    models = [np.array([v]) for _, v, _ in clients]
    weights = [float(n) for n, _, _ in clients]
    work = [float(t) for _, _, t in clients]
    split_models = models + [models[i]]
    split_weights = weights[:i] + [weights[i] / 2] + weights[i + 1 :] + [weights[i] / 2]
    split_work = work + [work[i]]
    # atol: the aggregate is x plus a weighted sum of O(1) terms, so a result near 0 carries the
    # rounding of those terms (~1e-16 each), not of itself (seen: 1.1e-16 off at -8.5e-5)
    np.testing.assert_allclose(
        _aggregate(x, models, weights, work),
        _aggregate(x, split_models, split_weights, split_work),
        rtol=1e-12,
        atol=1e-12,
    )


@settings(max_examples=100)
@given(st.lists(sizes, min_size=1, max_size=12), st.lists(steps_st, min_size=12, max_size=12))
def test_weights_sum_to_one(claims, steps):
    bounded, _ = capped_weights(claims)
    p, tau_eff, scale = normalized_plan(bounded, local_work(steps[: len(claims)]))
    assert p.sum() == pytest.approx(1.0, rel=1e-12)
    assert np.all(p >= 0) and np.all(scale > 0) and tau_eff > 0


@settings(max_examples=100)
@given(st.lists(sizes, min_size=3, max_size=12), st.integers(0, 2**53 - 1), st.sampled_from([1.0, 2.0, 4.0]))
def test_a_claimed_weight_never_exceeds_the_bound(honest, lie, cap):
    claims = honest + [lie]
    bounded, _ = capped_weights(claims, cap)
    assert np.all(bounded <= cap * np.median(claims))
    assert np.all(bounded <= np.asarray(claims, float))
    # one liar among n: at most cap·n/(n − 1 + cap) times the share of a median claim
    n = len(claims)
    median = np.median(claims)
    if np.all(np.asarray(honest) == honest[0]):
        assert bounded[-1] / bounded.sum() <= cap * n / (n - 1 + cap) / n * (1 + 1e-12)
    assert bounded[-1] <= cap * median


@settings(max_examples=100)
@given(st.lists(st.tuples(steps_st, st.integers(1, 5000)), min_size=3, max_size=10))
def test_plausible_steps_stay_within_the_tolerance(pairs):
    steps = np.array([s for s, _ in pairs], float)
    samples = np.array([n for _, n in pairs], float)
    out, clipped = plausible_steps(steps, samples, 2.0)
    m = np.median(steps / samples)
    assert np.all(out >= np.maximum(1.0, samples * m / 2) - 1e-9)
    assert np.all(out <= np.maximum(np.maximum(samples * m * 2, np.median(steps)), np.maximum(1.0, samples * m / 2)))
    assert np.array_equal(clipped, out != steps)


caps = st.one_of(st.floats(min_value=1.0, max_value=1e6, allow_nan=False), st.just(1.0), st.just(np.inf))
momenta = st.sampled_from([0.0, 0.5, 0.9])


@settings(max_examples=100)
@given(st.lists(st.tuples(sizes, steps_st, values), min_size=1, max_size=8), momenta)
def test_an_infinite_cap_is_fednova_bit_for_bit(clients, rho):
    x = np.array([0.25])
    weights = [n for n, _, _ in clients]
    work = local_work([t for _, t, _ in clients], rho)
    models = [np.array([v]) for _, _, v in clients]
    p, tau, scale = normalized_plan(weights, work)
    for cap in (None, np.inf):
        p_c, tau_c, scale_c = normalized_plan(weights, work, cap)
        assert p_c.tobytes() == p.tobytes() and tau_c == tau and scale_c.tobytes() == scale.tobytes()
        assert _aggregate(x, models, weights, work, cap).tobytes() == _aggregate(x, models, weights, work).tobytes()


@settings(max_examples=100)
@given(st.lists(st.tuples(sizes, values), min_size=1, max_size=8), steps_st, momenta, caps)
def test_equal_steps_give_fedavg_for_any_cap(clients, tau, rho, cap):
    x = np.array([0.25, -1.0])
    models = [np.array([v, 2 * v]) for _, v in clients]
    weights = [n for n, _ in clients]
    got = _aggregate(x, models, weights, local_work([tau] * len(clients), rho), cap)
    np.testing.assert_allclose(got, np.average(models, axis=0, weights=weights), rtol=1e-12, atol=1e-12)


@settings(max_examples=150)
@given(st.lists(st.tuples(sizes, steps_st), min_size=1, max_size=12), momenta, caps)
def test_every_capped_factor_is_at_most_the_cap_and_the_weights_sum_to_one(clients, rho, cap):
    weights = [n for n, _ in clients]
    work = local_work([t for _, t in clients], rho)
    p, tau_eff, scale = normalized_plan(weights, work, cap)
    _, _, nova = normalized_plan(weights, work)
    assert np.all(scale <= cap) and np.all(scale > 0)
    # the cap only lowers factors, and leaves a factor at or below it as FedNova's
    assert np.array_equal(scale, np.where(nova > cap, cap, nova))
    share = objective_weights(weights, work, cap)
    assert p.sum() == pytest.approx(1.0, rel=1e-12) and share.sum() == pytest.approx(1.0, rel=1e-12)
    # the objective: ∝ p_i·min(τ_eff, c·‖a_i‖₁)
    np.testing.assert_allclose(share, p * np.minimum(tau_eff, cap * work) / (p @ np.minimum(tau_eff, cap * work)),
                               rtol=1e-9)


@settings(max_examples=80)
@given(
    st.lists(st.tuples(steps_st, st.floats(min_value=0.0, max_value=0.999999),
                       st.floats(min_value=0.0, max_value=0.99)), min_size=3, max_size=9),
    st.floats(min_value=1.0, max_value=8.0),
)
def test_plausible_work_is_positive_and_within_the_tolerance_of_the_median_optimizer(claims, tol):
    steps, rho, alpha = (np.array(c, dtype=float) for c in zip(*claims))
    work, clipped = plausible_work(steps, rho, alpha, tol)
    reference = local_work(steps, float(np.median(rho)), float(np.median(alpha)))
    reference = np.where(reference > 0, reference, steps)
    assert np.all(np.isfinite(work)) and np.all(work > 0)
    assert np.all(work >= reference / tol * (1 - 1e-12)) and np.all(work <= reference * tol * (1 + 1e-12))
    np.testing.assert_array_equal(work[~clipped], local_work(steps, rho, alpha)[~clipped])


def test_plausible_work_leaves_a_fleet_on_one_optimizer_as_it_is():
    steps = np.array([1.0, 10.0, 40.0, 300.0])
    work, clipped = plausible_work(steps, 0.9, 0.01, 2.0)
    np.testing.assert_array_equal(work, local_work(steps, 0.9, 0.01))
    assert not clipped.any()
    # two clients: no median to judge by; only a sum that is not a positive number falls back to the steps
    work, clipped = plausible_work([6.0, 10.0], [0.999, 0.0], [0.87, 0.0])
    assert work.tolist() == [6.0, 10.0] and clipped.tolist() == [True, False]
