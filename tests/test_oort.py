"""Oort-like selection: the system penalty excludes the slowest, exploration still happens."""

from __future__ import annotations

import math

import pytest

from flwr_adaptive.oort_selector import OortSelector, statistical_utility


def run_rounds(selector: OortSelector, durations: dict, rounds: int, k: int, utility: float = 100.0) -> list[list]:
    picks = []
    for _ in range(rounds):
        chosen = selector.select(list(durations), k)
        picks.append(chosen)
        for p in chosen:
            selector.update(p, utility, durations[p])
    return picks


def test_statistical_utility_formula():
    assert statistical_utility(100, 0.25) == pytest.approx(100 * 0.5)
    assert statistical_utility(0, 1.0) == 0.0
    assert statistical_utility(10, math.nan) == 0.0


def test_penalty_matches_formula():
    selector = OortSelector(round_penalty=2.0)
    assert selector.penalty(duration_s=4.0, preferred_s=2.0) == pytest.approx((2.0 / 4.0) ** 2)
    assert selector.penalty(duration_s=1.0, preferred_s=2.0) == 1.0


def test_slowest_is_excluded_once_known_but_exploration_continues():
    # Prepare: ten fast participants, one 10× slower; equal utility; pick 5 per round.
    durations = {f"fast{i}": 1.0 + 0.01 * i for i in range(10)} | {"slow": 10.0}
    selector = OortSelector(seed=1)

    # Execute
    picks = run_rounds(selector, durations, rounds=60, k=5)

    # Assert: every participant was tried (exploration), the slow one rarely after being known.
    assert set().union(*picks) == set(durations)
    first_seen = next(r for r, chosen in enumerate(picks) if "slow" in chosen)
    later = sum("slow" in chosen for chosen in picks[first_seen + 1:])
    fast_mean = sum(selector.selected_count[p] for p in durations if p != "slow") / 10
    assert later <= 0.2 * fast_mean
    assert selector.preferred_duration < 10.0


def test_exploration_prefers_unexplored_participants_with_more_data():
    # Prepare: six never-tried participants seen as candidates once (size unknown), then their
    # data sizes arrive: "big" holds 1,000x the data of each of the others.
    picks = []
    for seed in range(40):
        selector = OortSelector(seed=seed)
        candidates = ["big", "a", "b", "c", "d", "e"]
        selector.select(candidates, 1)
        for p in candidates:
            selector.register(p, 1_000_000 if p == "big" else 1_000)
        # Execute
        picks.append(selector.select(candidates, 1)[0])
    # Assert: exploration is by data size (uniform would pick "big" ~ 1 in 6)
    assert picks.count("big") >= 38


def test_data_size_no_longer_ranks_a_participant_once_it_trained():
    # Prepare
    selector = OortSelector()
    selector.register("p", 500)
    selector.update("p", utility=7.0, duration_s=1.0)
    # Execute
    selector.register("p", 9_999)
    # Assert: its reward is the utility it showed
    assert selector.arms["p"].reward == 7.0


def test_exploration_decays_to_its_floor():
    selector = OortSelector(exploration=0.9, exploration_decay=0.98, exploration_min=0.3)
    run_rounds(selector, {i: 1.0 for i in range(20)}, rounds=80, k=5)
    assert selector.exploration == pytest.approx(0.3)


def test_pacer_relaxes_preferred_duration_when_utility_is_flat():
    # Prepare: constant utility → the exploited utility is flat window after window.
    selector = OortSelector(pacer_step=5, pacer_delta=5.0, round_threshold=30.0)
    durations = {i: 1.0 + i for i in range(10)}

    # Execute
    run_rounds(selector, durations, rounds=30, k=4)

    # Assert: T moved up the duration percentiles.
    assert selector.round_threshold > 30.0


def test_all_candidates_selected_when_k_covers_them():
    selector = OortSelector()
    assert sorted(selector.select([3, 1, 2], k=5)) == [1, 2, 3]


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="round_threshold is a percentile"):
        OortSelector(round_threshold=0)
    with pytest.raises(ValueError, match="duration_s must be finite and > 0, got nan"):
        OortSelector().update("a", 1.0, math.nan)
    with pytest.raises(ValueError, match="k must be >= 1"):
        OortSelector().select(["a"], 0)
