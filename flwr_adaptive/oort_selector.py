"""Oort-like participant selection: statistical utility × system penalty, explore vs exploit, pacer.

Contract
--------
``select(candidates, k)`` returns ``k`` participants for the next round; ``update`` records what a
participant's last round showed (its statistical utility and its duration). Oort (Lai et al.,
OSDI '21) *drops* slow participants rather than re-splitting work among everyone: a participant
slower than the preferred round duration ``T`` has its score multiplied by ``(T / t_i)^α``, so it
is picked rarely once faster ones are known. A share ``ε`` of each round explores participants
never tried (highest data size first); ``ε`` decays from 0.9 by 0.98 per round to 0.3. ``T`` is the
duration at the ``round_threshold`` percentile of the known durations; the pacer relaxes it by
``pacer_delta`` percentile points when the exploited utility of the last ``pacer_step`` rounds
stopped growing, and tightens it when the utility changed sharply.

Defaults are Oort's own, as set by FedScale, the maintained home of Oort's selector
(github.com/SymbioticLab/FedScale, ``fedscale/cloud/config_parser.py``, earlier
``fedscale/core/``): ``round_threshold=30``, ``round_penalty=2.0``, ``clip_bound=0.9``,
``exploration_min=0.3`` and, under "for Oort", ``exploration_factor=0.9``,
``exploration_decay=0.98``, ``pacer_step=20``, ``pacer_delta=5``. ``cut_off_util=0.95`` keeps
candidates within 95 % of the k-th best score (FedScale writes it as ``0.05``, "95 percentile";
Oort's original ``oort/oort.py`` ``_training_selector`` multiplies by the factor directly).
Oort's ``sample_window`` (explore among the 5·n unexplored with the largest data size) is not
modelled: exploration samples all unexplored candidates by data size × penalty.

Cost: O(P log P) per ``select`` for P candidates; pure Python + numpy, no framework imports.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["OortSelector", "statistical_utility"]


def statistical_utility(samples: int, mean_squared_loss: float) -> float:
    """Oort's statistical utility ``|B_i|·sqrt(Σ_k loss_k² / |B_i|)`` of one round's training."""
    if samples <= 0 or not math.isfinite(mean_squared_loss) or mean_squared_loss < 0:
        return 0.0
    return samples * math.sqrt(mean_squared_loss)


@dataclass
class _Arm:
    reward: float  # statistical utility (data size before the first round)
    duration: float = math.nan  # seconds of the last round, NaN = unknown
    last_round: int = 0
    count: int = 0


@dataclass
class OortSelector:
    """Oort's training-participant selector (explore / exploit with a system penalty).

    Parameters
    ----------
    round_penalty : float
        α of the system penalty ``(T / t_i)^α`` for participants slower than ``T``.
    exploration, exploration_decay, exploration_min : float
        Share of each round spent on never-tried participants, its per-round decay and floor.
    round_threshold : float
        Percentile (0–100) of known durations that defines the preferred duration ``T``;
        100 disables the penalty.
    pacer_step, pacer_delta : int, float
        Every ``pacer_step`` rounds the pacer compares exploited utility with the window before
        and moves ``round_threshold`` by ``pacer_delta``.
    clip_bound : float
        Rewards are clipped at this quantile so one outlier cannot dominate.
    cut_off_util : float
        Exploitation samples among candidates scoring at least this fraction of the k-th best.
    seed : int
        Seed of the sampling.
    """

    round_penalty: float = 2.0
    exploration: float = 0.9
    exploration_decay: float = 0.98
    exploration_min: float = 0.3
    round_threshold: float = 30.0
    pacer_step: int = 20
    pacer_delta: float = 5.0
    clip_bound: float = 0.9
    cut_off_util: float = 0.95
    seed: int = 0
    arms: dict[Hashable, _Arm] = field(default_factory=dict, init=False)
    selected_count: dict[Hashable, int] = field(default_factory=dict, init=False)
    round: int = field(default=0, init=False)
    _exploit_history: list[float] = field(default_factory=list, init=False)
    _last_exploited: list[Hashable] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.round_penalty < 0:
            raise ValueError(f"round_penalty must be >= 0, got {self.round_penalty}")
        if not 0.0 <= self.exploration_min <= self.exploration <= 1.0:
            raise ValueError(
                "need 0 <= exploration_min <= exploration <= 1, got "
                f"exploration={self.exploration}, exploration_min={self.exploration_min}"
            )
        if not 0.0 < self.round_threshold <= 100.0:
            raise ValueError(f"round_threshold is a percentile in (0, 100], got {self.round_threshold}")
        self._rng = np.random.default_rng(self.seed)

    # ------------------------------------------------------------------ feedback
    def register(self, participant: Hashable, data_size: int) -> None:
        """Make a participant known; until it has trained, its data size ranks it for exploration.

        The latest size counts while the participant is unexplored; once ``update`` has recorded
        a round its reward is the statistical utility and the size is ignored.
        """
        arm = self.arms.get(participant)
        if arm is None:
            self.arms[participant] = _Arm(reward=float(max(data_size, 0)))
        elif arm.count == 0:
            arm.reward = float(max(data_size, 0))

    def update(self, participant: Hashable, utility: float, duration_s: float) -> None:
        """Record one finished round of ``participant``: statistical utility and duration."""
        if not (math.isfinite(duration_s) and duration_s > 0):
            raise ValueError(f"participant {participant!r}: duration_s must be finite and > 0, got {duration_s!r}")
        arm = self.arms.setdefault(participant, _Arm(reward=0.0))
        arm.reward = float(utility)
        arm.duration = float(duration_s)
        arm.last_round = self.round
        arm.count += 1

    @property
    def preferred_duration(self) -> float:
        """``T``: the ``round_threshold`` percentile of the known durations (inf if none or 100)."""
        durations = sorted(a.duration for a in self.arms.values() if not math.isnan(a.duration))
        if not durations or self.round_threshold >= 100.0:
            return math.inf
        return durations[min(int(len(durations) * self.round_threshold / 100.0), len(durations) - 1)]

    def penalty(self, duration_s: float, preferred_s: float) -> float:
        """System penalty ``(T / t)^α`` for ``t > T``, else 1."""
        if math.isnan(duration_s) or duration_s <= preferred_s:
            return 1.0
        return float((preferred_s / max(duration_s, 1e-12)) ** self.round_penalty)

    # ------------------------------------------------------------------ selection
    def select(self, candidates: Sequence[Hashable], k: int) -> list[Hashable]:
        """Pick ``k`` of ``candidates`` for the next round (all of them if ``k >= len``)."""
        if k <= 0:
            raise ValueError(f"k must be >= 1, got {k}")
        for p in candidates:
            self.arms.setdefault(p, _Arm(reward=0.0))  # size unknown: explored last
        self.round += 1
        self._pace()
        preferred = self.preferred_duration
        explored = [p for p in candidates if self.arms[p].count > 0]
        unexplored = [p for p in candidates if self.arms[p].count == 0]
        if k >= len(candidates):
            chosen = list(candidates)
            self._last_exploited = explored
        else:
            self.exploration = max(self.exploration * self.exploration_decay, self.exploration_min)
            exploit_len = min(int(k * (1.0 - self.exploration)), len(explored))
            if not unexplored:
                exploit_len = min(k, len(explored))
            exploited = self._exploit(explored, exploit_len, preferred)
            explore_len = min(len(unexplored), k - len(exploited))
            chosen = exploited + self._explore(unexplored, explore_len, preferred)
            if len(chosen) < k:  # nothing left to explore: fill with the best remaining explored
                rest = [p for p in self._ranked(explored, preferred) if p not in chosen]
                chosen += rest[: k - len(chosen)]
            self._last_exploited = exploited
        for p in chosen:
            self.selected_count[p] = self.selected_count.get(p, 0) + 1
        return chosen

    def scores(self, participants: Sequence[Hashable], preferred_s: float | None = None) -> dict[Hashable, float]:
        """Exploitation score: normalised clipped utility + temporal uncertainty, × system penalty."""
        preferred = self.preferred_duration if preferred_s is None else preferred_s
        if not participants:
            return {}
        rewards = np.array([self.arms[p].reward for p in participants], dtype=float)
        clip = float(np.quantile(rewards, self.clip_bound))
        rewards = np.minimum(rewards, clip)
        low, span = float(rewards.min()), float(rewards.max() - rewards.min()) or 1.0
        out = {}
        for p, r in zip(participants, rewards):
            arm = self.arms[p]
            uncertainty = math.sqrt(0.1 * math.log(max(self.round, 1)) / max(arm.last_round, 1))
            out[p] = ((r - low) / span + uncertainty) * self.penalty(arm.duration, preferred)
        return out

    def _ranked(self, participants: Sequence[Hashable], preferred: float) -> list[Hashable]:
        scores = self.scores(participants, preferred)
        return sorted(scores, key=lambda p: -scores[p])

    def _exploit(self, explored: list[Hashable], n: int, preferred: float) -> list[Hashable]:
        if n <= 0:
            return []
        scores = self.scores(explored, preferred)
        ranked = sorted(scores, key=lambda p: -scores[p])
        cut = scores[ranked[min(n, len(ranked) - 1)]] * self.cut_off_util
        pool = [p for p in ranked if scores[p] >= cut]
        weights = np.array([scores[p] for p in pool]) + 1e-12
        picked = self._rng.choice(len(pool), size=n, replace=False, p=weights / weights.sum())
        return [pool[i] for i in sorted(picked)]

    def _explore(self, unexplored: list[Hashable], n: int, preferred: float) -> list[Hashable]:
        if n <= 0:
            return []
        priority = (
            np.array(
                [self.arms[p].reward * self.penalty(self.arms[p].duration, preferred) for p in unexplored], dtype=float
            )
            + 1e-12
        )
        picked = self._rng.choice(len(unexplored), size=n, replace=False, p=priority / priority.sum())
        return [unexplored[i] for i in sorted(picked)]

    def _pace(self) -> None:
        """Relax ``T`` when exploited utility went flat over the last window; tighten on sharp change."""
        if self._last_exploited:
            self._exploit_history.append(sum(self.arms[p].reward for p in self._last_exploited))
        step, history = self.pacer_step, self._exploit_history
        if len(history) >= 2 * step and len(history) % step == 0:
            before, now = sum(history[-2 * step : -step]), sum(history[-step:])
            if abs(now - before) <= 0.1 * before:
                self.round_threshold = min(100.0, self.round_threshold + self.pacer_delta)
            elif abs(now - before) >= 5 * before:
                self.round_threshold = max(self.pacer_delta, self.round_threshold - self.pacer_delta)
