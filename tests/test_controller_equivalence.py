"""The controller's quotas and saved state, round by round, are those of the reference implementation.

The speed work on the controller (vectorised fits, the median once per round, the min-energy
sweep without a heap) must not change a single quota or a single bit of the saved state. Each
digest below covers every round's quotas and the final ``state_dict`` (floats by ``repr``: bit
for bit) of many seeded closed loops per case: jitter, a step change in a third of the devices,
partial participation, groups, a binding upper bound, idle power, missed reports, windows that
fill and roll. They were computed by the implementation before the change (commit 5c05b09, and
for the affine cases again where the excitation of unidentified fits changed them on purpose,
for the drift cases where the noise-scaled drift threshold did, and for every case where the
state gained ``model.scatter_slots``, null in these final states: see the log). When
behaviour changes on purpose, regenerate them with
``.venv/bin/python tests/test_controller_equivalence.py`` and say why in the commit message.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from flwr_adaptive.controller import AllocationController, Report

SEEDS = 24
CASES = {
    "paper": dict(w_time=0.75, w_energy=0.25),
    "time": "time",
    "low-energy": "low-energy",
    "energy": "energy",
    "min-energy": "min-energy",
    "equal": "equal",
    "min-energy-unconstrained": ("min-energy", dict(slack=float("inf"))),
    "affine-tv": dict(cost_model="affine", drift=0.3),
}
DIGESTS = {
    "paper": "9c7cbc4d72b15d92cb603ecc",
    "time": "9edacd751e0fab2db676a024",
    "low-energy": "20abae939d361fd0ca8c816b",
    "energy": "3afc86d4af18486fb8a3c537",
    "min-energy": "f35e70fe935d6a516206ada6",
    "equal": "4413aa39779a9b7b07a9726e",
    "min-energy-unconstrained": "853bf70a1346f6348775292a",
    "affine-tv": "7c67cc0fb4a41373c40c0e05",
}


def _controller(case, budget, groups=None):
    spec = CASES[case]
    extra = {} if groups is None else {"groups": groups}
    if isinstance(spec, dict):
        return AllocationController(budget, **spec, **extra)
    if isinstance(spec, tuple):
        return AllocationController.from_policy(spec[0], budget, **spec[1], **extra)
    return AllocationController.from_policy(spec, budget, **extra)


def closed_loop(case, seed, rounds=14, participants=None):
    """Every round's quotas and the final state (JSON) of one seeded run."""
    rng = np.random.default_rng(seed)
    P = participants or int(rng.integers(3, 40))
    ids = [f"n{i}" if i % 2 else i for i in range(P)]
    b = rng.lognormal(-5, 1, P)
    a = b * 100 * rng.uniform(0, 1, P) * (seed % 2)  # odd seeds: fixed costs
    watts = rng.lognormal(np.log(5), 0.5, P)
    budget = int(rng.integers(P * 10, P * 300))
    if seed % 3 == 1:
        groups = {p: ("g0" if i % 2 else "g1") for i, p in enumerate(ids)}
        ctrl = _controller(case, {"g0": budget // 2, "g1": budget - budget // 2}, groups)
    else:
        ctrl = _controller(case, budget)
    if seed % 4 == 0:
        for i in range(0, P, 3):
            ctrl.set_idle_power(ids[i], float(watts[i] * 0.3))
    if seed % 5 == 0:
        ctrl.set_max_quota(ids[0], max(1, budget // (2 * P)))
    out = []
    for r in range(rounds):
        live = ids if seed % 2 == 0 or r % 3 else [p for i, p in enumerate(ids) if i % 4]
        q = ctrl.allocate(live)
        out.append(sorted((str(k), v) for k, v in q.items()))
        if r == 7:
            b[: P // 3] *= 2.0  # a step change
        for i, p in enumerate(ids):
            if p in q and q[p] > 0 and (r % 5 or i % 7):  # some reports go missing
                t = (a[i] + b[i] * q[p]) * (1 + 0.03 * rng.standard_normal())
                ctrl.observe(p, Report(time_s=float(t), energy_j=float(t * watts[i]), samples=int(q[p])))
    out.append(json.dumps(ctrl.state_dict(), sort_keys=True, default=str))
    return out


def digest(case):
    runs = [closed_loop(case, seed) for seed in range(SEEDS)]
    runs.append(closed_loop(case, 99, rounds=10, participants=700))  # windows of many participants at once
    return hashlib.sha256(repr(runs).encode()).hexdigest()[:24]


@pytest.mark.parametrize("case", list(CASES))
def test_quotas_and_state_are_those_of_the_reference_implementation(case):
    # Execute + Assert: bit for bit the same quotas and state over every seed and round
    assert digest(case) == DIGESTS[case], f"{case}: the quotas or the state changed (see the module docstring)"


if __name__ == "__main__":
    print("DIGESTS = {")
    for name in CASES:
        print(f"    {name!r}: {digest(name)!r},")
    print("}")


@pytest.mark.parametrize("seed", range(6))
def test_fit_windows_is_fit_columns_bit_for_bit_on_full_partial_and_degenerate_windows(seed):
    # Prepare: time and energy windows of many participants: full, partly empty, equal quotas
    # (no slope: NaN lines), energy unmeasured, and a residual that overflows
    from flwr_adaptive.estimation import WINDOW, fit_columns, fit_windows

    rng = np.random.default_rng(seed)
    P = 300
    n = np.round(rng.lognormal(5, 0.5, (WINDOW, P)))
    n[:, :40] = n[0, :40]  # one quota level
    t = (rng.uniform(0, 2, P) + rng.lognormal(-5, 1, P) * n) * (1 + 0.05 * rng.standard_normal((WINDOW, P)))
    e = t * rng.lognormal(1, 0.3, P)
    holes = rng.random((WINDOW, P)) < 0.1
    n[holes & (np.arange(P) % 3 == 0)] = np.nan
    e[:, 50:60] = np.nan
    t[0, 60:63] = 1e308
    y = np.stack([t, e], axis=1)
    # Execute
    got = fit_windows(n, y)
    want = fit_columns(np.concatenate([n, n], axis=1), np.concatenate([t, e], axis=1))
    # Assert: every output, NaN where NaN, bit for bit elsewhere
    for g, w in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(g, w.reshape(2, P))
    np.testing.assert_array_equal(got[5], want[5].reshape(2, P))
    filled = np.ones((WINDOW, 2, P), dtype=bool) if got[4] is None else got[4]
    np.testing.assert_array_equal(filled, want[4].reshape(WINDOW, 2, P))
    # and a window set without any empty cell takes the path without masks
    full = fit_windows(np.nan_to_num(n, nan=100.0)[:, 63:], np.nan_to_num(y, nan=1.0)[:, :, 63:])
    assert full[4] is None


@pytest.mark.parametrize("seed", range(4))
def test_full_windows_of_a_settled_split_fit_as_the_general_path_does(seed):
    # Prepare: full windows where every participant's quota is the same all window long (a
    # settled split: no line can be fitted), with zero, huge and infinite times among them
    from flwr_adaptive.estimation import WINDOW, fit_columns, fit_windows

    rng = np.random.default_rng(seed)
    P = 200
    n = np.repeat(np.round(rng.lognormal(5, 0.5, P))[None, :], WINDOW, axis=0)
    t = (rng.uniform(0, 2, P) + rng.lognormal(-5, 1, P) * n) * (1 + 0.05 * rng.standard_normal((WINDOW, P)))
    e = t * rng.lognormal(1, 0.3, P)
    t[:, :5] = 0.0
    t[1, 5:8] = 1e308
    e[2, 8:10] = np.inf
    y = np.stack([t, e], axis=1)
    # Execute
    with np.errstate(over="ignore", invalid="ignore"):
        got = fit_windows(n, y)
        want = fit_columns(np.concatenate([n, n], axis=1), np.concatenate([t, e], axis=1))
    # Assert: the shortcut taken (every cell filled) and every output the same bits
    assert got[4] is None
    for g, w in zip(got[:4], want[:4]):
        assert g.tobytes() == w.reshape(2, P).tobytes()
    assert not got[2].any()


@pytest.mark.parametrize("width", range(1, 7))
def test_pruned_median_network_is_the_full_sort_bit_for_bit_in_every_order(width):
    import itertools

    from flwr_adaptive.estimation import _full_median, _full_median_sorted

    # Prepare: every order of `width` values with ties, as columns (each order exercises the
    # comparators the pruned network keeps), plus columns NaN everywhere, NaN in one cell
    # (the column_median path), infinities and huge values whose sum overflows
    rng = np.random.default_rng(width)
    values = np.round(rng.uniform(0.0, 4.0, width), 1)
    orders = np.array(list(itertools.permutations(range(width)))).T
    v = np.concatenate([values[orders], np.full((width, 2), np.nan), np.full((width, 2), 1e308)], axis=1)
    v[0, -1] = np.inf
    partly = v.copy()
    partly[width - 1, 0] = np.nan
    for case in (v, partly, v.reshape(width, 1, -1)):
        # Execute
        with np.errstate(over="ignore"):
            got, want = _full_median(case), _full_median_sorted(case)
        # Assert: the same bits (NaN where NaN), and numpy's median where nothing is NaN
        assert got.tobytes() == want.tobytes()
    with np.errstate(over="ignore"):
        medians = _full_median(v)[: orders.shape[1]]
    assert medians.tolist() == [float(np.median(values))] * orders.shape[1]


def test_blocked_full_window_fit_is_the_whole_fit_bit_for_bit(monkeypatch):
    from flwr_adaptive import estimation

    # Prepare: full windows of 1,000 participants (time and energy), some without a slope
    rng = np.random.default_rng(7)
    P = 1_000
    n = np.round(rng.lognormal(5, 0.3, (estimation.WINDOW, P)))
    n[:, :30] = 100.0
    t = (rng.uniform(0, 2, P) + rng.lognormal(-5, 1, P) * n) * (1 + 0.03 * rng.standard_normal((estimation.WINDOW, P)))
    y = np.stack([t, t * rng.lognormal(1, 0.3, P)], axis=1)
    whole = estimation.fit_windows(n, y)
    # Execute: blocks of 64 participants (the last one partial)
    monkeypatch.setattr(estimation, "FIT_BLOCK", 64)
    blocked = estimation.fit_windows(n, y)
    # Assert
    assert whole[4] is None and blocked[4] is None
    for got, want in zip(blocked[:4] + blocked[5:], whole[:4] + whole[5:]):
        assert got.tobytes() == want.tobytes()


def test_full_window_fits_share_no_memory_with_the_scratch_nor_with_the_next_fit():
    from flwr_adaptive import estimation

    # Prepare: two sets of full windows (time and energy) of 500 participants; the second's
    # sample counts interleaved with another array (a layout reshape cannot view)
    rng = np.random.default_rng(11)
    P = 500

    def windows():
        n = np.round(rng.lognormal(5, 0.3, (estimation.WINDOW, P)))
        t = (rng.uniform(0, 2, P) + rng.lognormal(-5, 1, P) * n) * (1 + 0.03 * rng.standard_normal(n.shape))
        return n, np.stack([t, t * rng.lognormal(1, 0.3, P)], axis=1)

    n1, y1 = windows()
    n2, y2 = windows()
    first = estimation.fit_windows(n1, y1)
    kept = [v.copy() for v in first[:4]]
    wide = np.empty((estimation.WINDOW, 2, 2 * P))
    wide[..., ::2] = y2
    # Execute: a second fit (its temporaries in the same scratch) on strided windows
    second = estimation.fit_windows(n2, wide[..., ::2])
    # Assert: the first fit's results are untouched, and the strided windows fit as a copy does
    for got, want in zip(first[:4], kept):
        assert got.tobytes() == want.tobytes()
    again = estimation.fit_windows(n2, y2.copy())
    for got, want in zip(second[:4], again[:4]):
        assert got.tobytes() == want.tobytes()
    assert not any(np.shares_memory(v, estimation._SCRATCH.flat) for v in first[:4] + second[:4])


@pytest.mark.parametrize("case", ["time", "min-energy"])
def test_estimates_fitted_in_blocks_are_those_fitted_at_once(case, monkeypatch):
    from flwr_adaptive import estimation

    # Prepare: a closed loop of 300 participants (jitter, a step change, missed reports)
    whole = closed_loop(case, 4, rounds=10, participants=300)
    # Execute: the same loop with the participants fitted 64 at a time (the last block partial)
    monkeypatch.setattr(estimation, "FIT_BLOCK", 64)
    blocked = closed_loop(case, 4, rounds=10, participants=300)
    # Assert: every round's quotas and the final state, bit for bit
    assert blocked == whole


def test_median_is_numpys_bit_for_bit():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from flwr_adaptive.estimates import median

    values = st.floats(allow_nan=True, allow_infinity=True, width=64)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(values | st.sampled_from([0.0, -0.0, 1.0, 2.0, 1e308]), min_size=1, max_size=40))
    def check(v):
        v = np.array(v)
        with np.errstate(over="ignore", invalid="ignore"):
            want = np.float64(np.median(v))
            got = np.float64(median(v))
        # Assert: the same bits (any NaN is NaN)
        assert (np.isnan(want) and np.isnan(got)) or want.tobytes() == got.tobytes()

    check()


def test_estimates_are_every_estimated_participant_in_slot_order():
    # Prepare: participants with time and energy, time only, none yet, one forgotten
    ctrl = AllocationController(1000, w_time=1.0)
    ids = ["a", 1, "b", 2, "c"]
    ctrl.allocate(ids)
    ctrl.observe("a", Report(time_s=1.0, energy_j=2.0, samples=100))
    ctrl.observe(1, Report(time_s=0.5, energy_j=None, samples=100))
    ctrl.observe(2, Report(time_s=0.25, energy_j=0.0, samples=50))
    ctrl.observe("new", Report(time_s=3.0, energy_j=1.5, samples=30))
    ctrl.forget(["b"])
    store = ctrl._store
    store.flush()
    # the reference: the loop over the index it replaced
    want = {}
    for pid, slot in store.index.items():
        if not np.isnan(store.tau[slot]):
            want[pid] = (float(store.tau[slot]), None if np.isnan(store.eps[slot]) else float(store.eps[slot]))
    # Execute
    got = ctrl.estimates()
    # Assert: the same entries in the same order, Python floats, None where energy is unmeasured
    assert list(got.items()) == list(want.items())
    assert got == {"a": (0.01, 0.02), 1: (0.005, None), 2: (0.005, 0.0), "new": (0.1, 0.05)}
    assert all(type(t) is float for t, _ in got.values())


def test_a_round_of_the_same_participants_is_checked_as_a_new_list_would_be():
    # allocate skips building the set of ids for a list equal to the last one it checked
    ctrl = AllocationController(100, w_time=1.0)
    ids = [0, "a", 2]
    first = ctrl.allocate(ids)
    # Execute + Assert: the same list again: the same split; equal-looking lists are still checked
    assert ctrl.allocate(list(ids)) == first
    with pytest.raises(ValueError, match="must be str or int"):
        ctrl.allocate([False, "a", 2])  # False == 0, but a bool is no id
    assert ctrl.allocate([np.int64(0), "a", 2]) == first  # numpy integers become int
    with pytest.raises(ValueError, match="more than once"):
        ctrl.allocate([0, "a", 2, 0])
    assert list(ctrl.allocate(ids)) == ids


def test_the_windows_of_every_participant_in_order_are_the_store_s_own():
    ctrl = AllocationController.from_policy("time", 300)
    ids = ["a", "b", "c"]
    ctrl.allocate(ids)
    for p in ids:
        ctrl.observe(p, Report(time_s=1.0, energy_j=None, samples=100))
    ctrl.allocate(ids)
    store = ctrl._store
    # Execute + Assert: every slot in order: the array itself (read, not copied); else a gather
    assert store.windows(np.arange(3)) is store.hist
    some = np.array([2, 0])
    np.testing.assert_array_equal(store.windows(some), store.hist[some])
    assert store.windows(some) is not store.hist
    np.testing.assert_array_equal(store.windows(np.array([1, 0, 2])), store.hist[[1, 0, 2]])


def test_the_balance_test_in_blocks_of_participants_decides_as_at_once(monkeypatch):
    from flwr_adaptive import deadband

    # Prepare: a closed loop of 300 participants under the time policy (the balance test runs
    # every round once a split is held)
    whole = closed_loop("time", 2, rounds=12, participants=300)
    # Execute: its per-participant steps 7 rows at a time (the last block partial)
    monkeypatch.setattr(deadband, "_ROWS", 7)
    blocked = closed_loop("time", 2, rounds=12, participants=300)
    # Assert: every round's quotas and the final state, bit for bit
    assert blocked == whole



def settled_loop(case, seed, rounds=16, participants=150):
    """Every round's quotas and the final state of a loop in which every participant reports
    every round (3 % jitter): the split settles and the windows fill with reports at the
    committed quotas (the shortcuts' steady state); at round 12 each report is off by a factor
    spread over e^±0.5, on both sides of the drift threshold."""
    rng = np.random.default_rng(seed)
    b = rng.lognormal(-5, 1, participants)
    a = b * 100 * rng.uniform(0, 1, participants)
    watts = rng.lognormal(np.log(5), 0.5, participants)
    ids = list(range(participants))
    ctrl = _controller(case, 100 * participants)
    out = []
    for r in range(rounds):
        q = np.fromiter(ctrl.allocate(ids).values(), dtype=np.int64, count=participants)
        out.append(q.tolist())
        t = (a + b * q) * (1 + 0.03 * rng.standard_normal(participants))
        if r == 12:
            t *= np.exp(rng.uniform(-0.5, 0.5, participants))
        ctrl.observe_many(ids, q, t, t * watts)
    out.append(json.dumps(ctrl.state_dict(), sort_keys=True, default=str))
    return out


@pytest.mark.parametrize("case", ["time", "min-energy", "low-energy", "affine-tv"])
def test_the_settled_split_shortcuts_are_the_plain_computations_bit_for_bit(case, monkeypatch):
    from flwr_adaptive import deadband, estimates, estimation

    # Prepare: loops whose split settles (the drift check and the balance test then see every
    # report at the quota measured last, every window full)
    fast = [settled_loop(case, seed) for seed in range(3)]
    # Execute: the same loops with the shortcuts off (the plain computations)
    monkeypatch.setattr(estimates, "SHORTCUTS", False)
    monkeypatch.setattr(deadband, "SHORTCUTS", False)
    monkeypatch.setattr(estimation, "SHORTCUTS", False)
    plain = [settled_loop(case, seed) for seed in range(3)]
    # Assert: every round's quotas and the final state, bit for bit
    assert fast == plain


@pytest.mark.parametrize("seed", range(3))
def test_the_balance_tests_settled_shortcuts_decide_as_the_plain_computation(seed, monkeypatch):
    from flwr_adaptive import deadband
    from flwr_adaptive.estimation import WINDOW

    # Prepare: settled windows (every report at the committed quota, every quota positive, one
    # group) of 60 participants, one participant's times off by a factor
    # spread across the balance test's limit
    rng = np.random.default_rng(seed)
    P = 60
    quota = rng.integers(50, 500, P)
    n = np.repeat(quota[:, None].astype(float), WINDOW, axis=1)
    # a balanced split: equal round times, 5 % jitter shared by every round's reports, 0.5 % each
    t = 2.0 * (1 + 0.05 * rng.standard_normal(WINDOW)) * (1 + 0.005 * rng.standard_normal((P, WINDOW)))
    histories = []
    for factor in np.exp(np.linspace(-0.15, 0.15, 61)):
        slow = t.copy()
        slow[0] *= factor
        histories.append(np.stack([n, slow, 5 * slow], axis=2))
    codes = np.zeros(P, dtype=np.int64)
    # Execute
    fast = [deadband.balanced_within_noise(quota, h, codes) for h in histories]
    monkeypatch.setattr(deadband, "SHORTCUTS", False)
    plain = [deadband.balanced_within_noise(quota, h, codes) for h in histories]
    # Assert: the same decisions, and both decisions occur
    assert fast == plain
    assert True in fast and False in fast


@pytest.mark.parametrize("seed", range(3))
def test_fit_windows_with_the_time_noise_only_is_the_whole_fit_but_the_energy_noise(seed, monkeypatch):
    from flwr_adaptive import estimation
    from flwr_adaptive.estimation import WINDOW, fit_columns, fit_windows

    # Prepare: time and energy windows, full ones (with and without a slope) and partly empty
    # ones, fitted at once and (FIT_BLOCK = 64) in blocks; the plain fit of the time columns
    rng = np.random.default_rng(seed)
    P = 300
    n = np.round(rng.lognormal(5, 0.5, (WINDOW, P)))
    n[:, :80] = n[0, :80]  # one quota level: the settled split's path
    t = (rng.uniform(0, 2, P) + rng.lognormal(-5, 1, P) * n) * (1 + 0.05 * rng.standard_normal((WINDOW, P)))
    y = np.stack([t, t * rng.lognormal(1, 0.3, P)], axis=1)
    partial = n.copy()
    partial[0, ::7] = np.nan
    for windows in (n, partial):
        for block in (estimation.FIT_BLOCK, 64):
            monkeypatch.setattr(estimation, "FIT_BLOCK", block)
            # Execute
            whole, timed = fit_windows(windows, y), fit_windows(windows, y, noise_of=1)
            # Assert: every output the same bits, but the energy's noise, which is NaN
            for got, want in zip(timed[:3] + timed[5:], whole[:3] + whole[5:]):
                assert got.tobytes() == want.tobytes()
            assert timed[3][0].tobytes() == whole[3][0].tobytes() == fit_columns(windows, t)[3].tobytes()
            assert np.isnan(timed[3][1]).all() and not np.isnan(whole[3][1]).all()


@pytest.mark.parametrize("seed", range(4))
def test_the_settled_fit_shortcut_is_the_plain_fit_bit_for_bit(seed, monkeypatch):
    from flwr_adaptive import estimation
    from flwr_adaptive.estimation import WINDOW, fit_rows

    # Prepare: full windows of one quota each (the shortcut's case), with quotas whose sum over
    # the window rounds (a mean that is not the quota: the plain path), huge and infinite quotas,
    # zero and huge times; then the same with one window holding a second quota
    rng = np.random.default_rng(seed)
    P = 120
    q = np.round(rng.lognormal(5, 0.5, P))
    q[:4] = [636.96168732, 1e308, np.inf, 3.0 * 2.0**51 + 1.0]
    n = np.repeat(q[:, None], WINDOW, axis=1)
    t = (rng.uniform(0, 2, P)[:, None] + rng.lognormal(-5, 1, P)[:, None] * n) * (
        1 + 0.05 * rng.standard_normal((P, WINDOW))
    )
    t[5] = 0.0
    t[6, 2] = 1e308
    rows = np.stack([n, t, t * 3.0], axis=2)
    moved = rows.copy()
    moved[7, 0, 0] += 1.0
    for case in (rows, moved, rows[10:]):
        # Execute
        with np.errstate(over="ignore", invalid="ignore"):
            fast = fit_rows(case)[1]
            monkeypatch.setattr(estimation, "SHORTCUTS", False)
            plain = fit_rows(case)[1]
            monkeypatch.setattr(estimation, "SHORTCUTS", True)
        # Assert: every output the same bits
        assert fast[4] is None and plain[4] is None
        for got, want in zip(fast[:4] + fast[5:], plain[:4] + plain[5:]):
            assert got.tobytes() == want.tobytes()


def test_the_balance_tests_logs_of_a_held_split_are_numpys_and_decide_as_without_them():
    from flwr_adaptive import deadband
    from flwr_adaptive.estimation import WINDOW

    # Prepare: the windows of a held split over 12 rounds (each round one new report per
    # participant, the oldest dropped), one round whose windows are not the last ones shifted,
    # and a participant that slows down past the test's limit
    rng = np.random.default_rng(3)
    P = 80
    quota = rng.integers(50, 500, P)
    n = np.repeat(quota[:, None].astype(float), WINDOW, axis=1)
    t = 2.0 * (1 + 0.01 * rng.standard_normal((P, WINDOW)))
    codes = np.zeros(P, dtype=np.int64)
    cache: dict = {}
    decisions = []
    for r in range(12):
        t = np.concatenate([t[:, 1:], 2.0 * (1 + 0.01 * rng.standard_normal((P, 1)))], axis=1)
        if r == 5:
            t = t * 1.001  # every window rescaled: no shift of the last one
        if r >= 8:
            t[0, -1] *= 1.2
        history = np.stack([n, t, 5 * t], axis=2)
        # Execute: with the logs kept between rounds, and without
        held = deadband.balanced_within_noise(quota, history, codes, None, cache)
        decisions.append(held)
        assert held == deadband.balanced_within_noise(quota, history, codes)
        # Assert: the logs kept are numpy's of these windows, bit for bit
        times, logs = cache["logs"]
        assert times.tobytes() == np.ascontiguousarray(t.T).tobytes()
        assert logs.tobytes() == np.log(np.ascontiguousarray(t.T)).tobytes()
    assert True in decisions and False in decisions
