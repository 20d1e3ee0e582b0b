"""The allocation controller: re-split a fixed sample budget so that everyone finishes together.

Contract
--------
At the end of a round every participant ``observe``-s one :class:`Report`: the seconds of its own
compute (waits for others excluded), the active energy of that compute (or ``None``) and the
samples it processed. ``allocate`` then turns the smoothed per-sample costs into integer quotas
that sum **exactly** to the budget of each group, inversely proportional to each participant's
cost and within its ``[min_quota, max_quota]`` bounds. Nothing else about training changes.

Cost
----
``observe`` validates and records (O(1), no numpy); ``allocate`` applies the recorded EMA steps,
computes costs and solves the bounded split vectorised: O(P log P) for P live participants
(a sort over the bounds' breakpoints), plus one Python loop over groups.

This module imports numpy only: it is shared by the Flower strategies, the DDP launcher and the
experiments, none of which it knows about.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

__all__ = ["AllocationController", "Report", "Policy", "POLICIES", "ParticipantId"]

ParticipantId = Hashable  # str or int; both survive ``state_dict`` with their type
_STATE_VERSION = 1
_REAL_TYPES = (int, float, np.integer, np.floating)
_UNBOUNDED = np.iinfo(np.int64).max  # max_quota=None


@dataclass(frozen=True, init=False)
class Report:
    """One participant's measurement of one round.

    Parameters
    ----------
    time_s : float
        Seconds of the participant's own compute for the round, *excluding* waits for others
        (all-reduce waits, barriers). With waits included every split would look balanced.
    energy_j : float or None
        Active energy of that compute in joules, ``None`` when unmeasured.
    samples : int
        Samples actually processed in the round.
    """

    time_s: float
    energy_j: float | None
    samples: int

    def __init__(self, time_s: float, energy_j: float | None = None, samples: int | None = None):
        if samples is None:
            raise TypeError("Report needs samples=: the number of samples processed this round")
        object.__setattr__(self, "time_s", time_s)
        object.__setattr__(self, "energy_j", energy_j)
        object.__setattr__(self, "samples", samples)


@dataclass(frozen=True)
class Policy:
    """A named weighting of time and energy (the policies the paper compares).

    ``w_time == w_energy == 0`` is the Equal policy: costs are ignored and the budget is split
    evenly (bounds and groups still apply).
    """

    name: str
    w_time: float
    w_energy: float


POLICIES: dict[str, Policy] = {
    "equal": Policy("equal", 0.0, 0.0),
    "time": Policy("time", 1.0, 0.0),
    "low-energy": Policy("low-energy", 0.75, 0.25),
    "energy": Policy("energy", 0.0, 1.0),
}


def _is_id(value: Any) -> bool:
    return (type(value) is str) or (isinstance(value, (int, np.integer)) and not isinstance(value, bool))


def _check_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class AllocationController:
    """Split a fixed sample budget among participants inversely to their measured cost.

    Parameters
    ----------
    budget : int or dict
        Samples per round to split. With ``groups`` a ``{group: int}``: each group's budget is
        split among its own members only.
    w_time, w_energy : float
        Weights of the time and energy terms of the cost
        ``c_i = w_time·τ̂_i/median(τ̂) + w_energy·ε̂_i/median(ε̂)``. A zero weight skips its term
        (energy may then be unmeasured). Both zero is the Equal policy.
    smoothing : float
        EMA weight α ∈ (0, 1] of the newest per-sample cost; a participant's first report
        initialises its estimate. Each ``observe`` call is one EMA step, in call order.
    deadband : float
        Keep the previous split while the participant set, bounds and budget are unchanged, in
        every group ``Σ|new − current| / (2·budget_g) < deadband``, and no participant's quota
        would move by more than ``deadband·new + 1`` samples. 0 disables.
    min_quota, max_quota : int or dict
        Per-participant bounds; a dict maps participant → bound (missing keys: 0 and unbounded).
        ``max_quota=None`` means unbounded. When a bound binds the rest is re-split among the
        others. ``set_max_quota`` changes one participant's upper bound later.
    groups : dict, optional
        ``{participant: group}``. A sample never crosses a group; a group without live members
        gets nothing this round and its budget is not given to other groups.
    forget_after : int
        A participant that has not reported for this many rounds is treated as new again
        (its estimate is dropped and it gets the median cost).
    cost_clip : float
        Each term's ratio to its median is clipped to ``[1/cost_clip, cost_clip]`` so that a
        single absurd report cannot take the whole budget. Default 100: wider than any real
        device spread we measured, narrow enough to bound a bogus 1e-9 s report.
    """

    def __init__(
        self,
        budget: int | Mapping[Hashable, int],
        w_time: float = 1.0,
        w_energy: float = 0.0,
        smoothing: float = 0.5,
        deadband: float = 0.05,
        min_quota: int | Mapping[ParticipantId, int] = 1,
        max_quota: int | Mapping[ParticipantId, int] | None = None,
        groups: Mapping[ParticipantId, Hashable] | None = None,
        forget_after: int = 3,
        cost_clip: float = 100.0,
    ) -> None:
        for name, w in (("w_time", w_time), ("w_energy", w_energy)):
            if not isinstance(w, _REAL_TYPES) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {w!r}")
        if not isinstance(smoothing, _REAL_TYPES) or not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must lie in (0, 1], got {smoothing!r}")
        if not isinstance(deadband, _REAL_TYPES) or not 0.0 <= deadband < 1.0:
            raise ValueError(f"deadband must lie in [0, 1), got {deadband!r}")
        if not isinstance(cost_clip, _REAL_TYPES) or not cost_clip >= 1.0:
            raise ValueError(f"cost_clip must be a number >= 1, got {cost_clip!r}")
        self.forget_after = _check_int("forget_after", forget_after, minimum=1)
        self.w_time = float(w_time)
        self.w_energy = float(w_energy)
        self.smoothing = float(smoothing)
        self.deadband = float(deadband)
        self.cost_clip = float(cost_clip)

        self.groups: dict[ParticipantId, Hashable] | None = None
        if groups is None:
            if isinstance(budget, Mapping):
                raise ValueError("budget is a dict but groups= is not given: pass groups={participant: group}")
            self.budget: int | dict[Hashable, int] = _check_int("budget", budget)
        else:
            if not isinstance(budget, Mapping):
                raise ValueError(f"with groups= the budget must be {{group: int}}, got {budget!r}")
            self.budget = {g: _check_int(f"budget[{g!r}]", b) for g, b in budget.items()}
            self.groups = dict(groups)
            unknown = sorted({repr(g) for g in self.groups.values() if g not in self.budget})
            if unknown:
                raise ValueError(f"groups {', '.join(unknown)} have no budget: add them to budget=")

        self._default_min, self._min_map = self._parse_bound("min_quota", min_quota, default=0)
        self._default_max, self._max_map = self._parse_bound("max_quota", max_quota, default=None)
        if self._default_max is not None and self._default_max < self._default_min:
            raise ValueError(f"max_quota={self._default_max} is below min_quota={self._default_min}")

        # Learned state: one slot per participant ever seen, arrays indexed by slot.
        self._index: dict[ParticipantId, int] = {}
        self._ids: list[ParticipantId] = []
        self._tau = np.empty(0)  # smoothed seconds per sample, NaN = no estimate
        self._eps = np.empty(0)  # smoothed joules per sample, NaN = no estimate
        self._last_report = np.empty(0, dtype=np.int64)  # round of the last report, -1 = never
        self._lo = np.empty(0, dtype=np.int64)
        self._hi = np.empty(0, dtype=np.int64)
        self._pending: list[tuple[int, float, float, int]] = []  # (slot, time, energy, samples)
        self._round = 0  # number of allocate() calls so far
        self._slot_cache: tuple[list, np.ndarray] = ([], np.empty(0, dtype=np.int64))
        # The committed split and what it was computed under (for the deadband).
        self._cur_slots = np.empty(0, dtype=np.int64)
        self._cur_quota = np.empty(0, dtype=np.int64)
        self._cur_lo = np.empty(0, dtype=np.int64)
        self._cur_hi = np.empty(0, dtype=np.int64)
        self._cur_budget: Any = None
        self._cur_groups: list[Hashable] | None = None  # each current participant's group

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_policy(cls, policy: str, budget: int | Mapping[Hashable, int], **kwargs: Any) -> "AllocationController":
        """Build a controller with the weights of a named policy (see ``POLICIES``)."""
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        p = POLICIES[policy]
        return cls(budget, w_time=p.w_time, w_energy=p.w_energy, **kwargs)

    @staticmethod
    def _parse_bound(name: str, value: Any, default: int | None) -> tuple[int | None, dict]:
        if value is None:
            if name == "min_quota":
                raise ValueError("min_quota must be an int or a dict, got None")
            return None, {}
        if isinstance(value, Mapping):
            bounds = {}
            for pid, b in value.items():
                if not _is_id(pid):
                    raise ValueError(f"{name} key {pid!r} is not a participant id (str or int)")
                bounds[pid] = _check_int(f"{name}[{pid!r}]", b)
            return default, bounds
        return _check_int(name, value), {}

    def set_max_quota(self, participant: ParticipantId, max_quota: int | None) -> None:
        """Set (or with ``None`` remove) one participant's upper bound, e.g. its local data size."""
        if not _is_id(participant):
            raise ValueError(f"participant id must be str or int, got {participant!r}")
        if max_quota is None:
            self._max_map.pop(participant, None)
        else:
            self._max_map[participant] = _check_int(f"max_quota for participant {participant!r}", max_quota)
        slot = self._index.get(participant)
        if slot is not None:
            self._hi[slot] = self._max_of(participant)

    def set_group(self, participant: ParticipantId, group: Hashable, budget: int | None = None) -> None:
        """Put ``participant`` in ``group`` (controllers built with ``groups=`` only).

        ``budget`` sets or changes that group's budget; a group never given one must get it here.
        A participant that changes group releases the deadband (its old split no longer applies).
        """
        if self.groups is None:
            raise ValueError("set_group needs a controller built with groups= (and budget={group: int})")
        if not _is_id(participant):
            raise ValueError(f"participant id must be str or int, got {participant!r}")
        if budget is not None:
            self.budget[group] = _check_int(f"budget[{group!r}]", budget)
        elif group not in self.budget:
            raise ValueError(f"group {group!r} has no budget: pass set_group(..., budget=samples)")
        self.groups[participant] = group

    def _max_of(self, participant: ParticipantId) -> int:
        bound = self._max_map.get(participant, self._default_max)
        return _UNBOUNDED if bound is None else bound

    # ------------------------------------------------------------------ observe
    def observe(self, participant: ParticipantId, report: Report) -> None:
        """Record one round's report of ``participant``; raises ``ValueError`` on bad input."""
        t = getattr(report, "time_s", None)
        e = getattr(report, "energy_j", None)
        n = getattr(report, "samples", None)
        # Fast path first: this runs once per participant per round.
        if not (
            type(n) is int
            and n > 0
            and type(t) is float
            and 0.0 < t < math.inf
            and (e is None or (type(e) is float and 0.0 <= e < math.inf))
            and type(report) is Report
        ):
            t, e, n = self._validate(participant, report, t, e, n)
        if e is None:
            if self.w_energy > 0:
                raise ValueError(
                    f"participant {participant!r}: energy_j is None but w_energy={self.w_energy} > 0; "
                    "measure energy (see flwr_adaptive.energy) or use a policy with w_energy=0"
                )
            e = math.nan
        slot = self._index.get(participant)
        if slot is None:
            if not _is_id(participant):
                raise ValueError(f"participant id must be str or int, got {participant!r} ({type(participant).__name__})")
            slot = int(self._slots([participant])[0])
        self._pending.append((slot, t, e, n))

    def _validate(self, participant: Any, report: Any, t: Any, e: Any, n: Any) -> tuple[float, float | None, int]:
        if not isinstance(report, Report):
            raise ValueError(f"participant {participant!r}: expected a Report, got {type(report).__name__}")

        def number(field: str, value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, _REAL_TYPES):
                raise ValueError(f"participant {participant!r}: {field} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"participant {participant!r}: {field} must be finite, got {value!r}")
            return float(value)

        t = number("time_s", t)
        if t <= 0:
            raise ValueError(f"participant {participant!r}: time_s must be > 0, got {t!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ValueError(f"participant {participant!r}: samples must be an int, got {n!r}")
        if n <= 0:
            raise ValueError(f"participant {participant!r}: samples must be > 0, got {n!r}")
        if e is not None:
            e = number("energy_j", e)
            if e < 0:
                raise ValueError(f"participant {participant!r}: energy_j must be >= 0, got {e!r}")
        return t, e, int(n)

    # ------------------------------------------------------------------ internal state
    def _slots(self, participants: list[ParticipantId]) -> np.ndarray:
        """Slot of each participant, registering new ones (cached for an unchanged list)."""
        cached_ids, cached_slots = self._slot_cache
        if participants == cached_ids:
            return cached_slots
        index = self._index
        new = [p for p in dict.fromkeys(participants) if p not in index]
        if new:
            start = len(self._ids)
            for k, p in enumerate(new):
                index[p] = start + k
            self._ids.extend(new)
            grow = len(new)
            self._tau = np.concatenate([self._tau, np.full(grow, np.nan)])
            self._eps = np.concatenate([self._eps, np.full(grow, np.nan)])
            self._last_report = np.concatenate([self._last_report, np.full(grow, -1, dtype=np.int64)])
            lo = [self._min_map.get(p, self._default_min) for p in new]
            self._lo = np.concatenate([self._lo, np.array(lo, dtype=np.int64)])
            self._hi = np.concatenate([self._hi, np.array([self._max_of(p) for p in new], dtype=np.int64)])
        slots = np.fromiter(map(index.__getitem__, participants), dtype=np.int64, count=len(participants))
        self._slot_cache = (list(participants), slots)
        return slots

    def _flush(self) -> None:
        """Apply the recorded observations as EMA steps, in call order."""
        if not self._pending:
            return
        count = 4 * len(self._pending)
        obs = np.fromiter(itertools.chain.from_iterable(self._pending), dtype=float, count=count).reshape(-1, 4)
        self._pending = []
        slots = obs[:, 0].astype(np.int64)
        tau_obs = obs[:, 1] / obs[:, 3]
        eps_obs = obs[:, 2] / obs[:, 3]
        if np.bincount(slots).max() == 1:
            layers = [slice(None)]
        else:
            # A participant observed k times is updated in k layers; within a layer slots are unique.
            order = np.argsort(slots, kind="stable")
            sorted_slots = slots[order]
            first = np.r_[True, sorted_slots[1:] != sorted_slots[:-1]]
            group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
            layer = np.empty(len(order), dtype=np.int64)
            layer[order] = np.arange(len(order)) - group_start
            layers = [layer == k for k in range(int(layer.max()) + 1)]
        a = self.smoothing
        for sel in layers:
            s = slots[sel]
            for est, new_obs in ((self._tau, tau_obs[sel]), (self._eps, eps_obs[sel])):
                old = est[s]
                updated = np.where(np.isnan(old), new_obs, a * new_obs + (1.0 - a) * old)
                est[s] = np.where(np.isnan(new_obs), old, updated)
        self._last_report[slots] = self._round

    def estimates(self) -> dict[ParticipantId, tuple[float, float | None]]:
        """Smoothed ``(seconds per sample, joules per sample)`` of every participant with an estimate."""
        self._flush()
        out = {}
        for pid, slot in self._index.items():
            tau, eps = self._tau[slot], self._eps[slot]
            if not np.isnan(tau):
                out[pid] = (float(tau), None if np.isnan(eps) else float(eps))
        return out

    def costs(self, participants: Sequence[ParticipantId]) -> dict[ParticipantId, float]:
        """The combined dimensionless cost ``c_i`` the next ``allocate(participants)`` would use."""
        participants = self._check_participants(participants)
        self._flush()
        slots = self._slots(participants)
        return dict(zip(participants, self._cost(slots, self._fresh(slots, forget=False)).tolist()))

    @property
    def current(self) -> dict[ParticipantId, int]:
        """The committed split (what the last ``allocate`` returned)."""
        return dict(zip((self._ids[s] for s in self._cur_slots.tolist()), self._cur_quota.tolist()))

    # ------------------------------------------------------------------ allocate
    @staticmethod
    def _check_participants(participants: Sequence[ParticipantId]) -> list[ParticipantId]:
        participants = list(participants)
        if not set(map(type, participants)) <= {int, str}:
            bad = [p for p in participants if not _is_id(p)]
            if bad:
                raise ValueError(f"participant ids must be str or int, got {bad[:5]!r}")
            participants = [p if type(p) is str else int(p) for p in participants]
        if len(set(participants)) != len(participants):
            seen: set = set()
            dup = {p for p in participants if p in seen or seen.add(p)}
            raise ValueError(f"participants are listed more than once: {sorted(dup, key=repr)!r}")
        return participants

    def _fresh(self, slots: np.ndarray, forget: bool = True) -> np.ndarray:
        """Mask of participants with a fresh estimate; stale ones (``forget_after``) are forgotten."""
        last = self._last_report[slots]
        stale = (last >= 0) & (self._round - last >= self.forget_after)
        if not forget:
            return ~np.isnan(self._tau[slots]) & ~stale
        if stale.any():
            gone = slots[stale]
            self._tau[gone] = np.nan
            self._eps[gone] = np.nan
            self._last_report[gone] = -1
        return ~np.isnan(self._tau[slots])

    def _term(self, values: np.ndarray, known: np.ndarray, name: str) -> np.ndarray:
        if not known.any():
            return np.ones(len(values))
        v = values[known]
        if np.isnan(v).any():
            raise ValueError(
                f"{name} is unmeasured for some participants but its weight is > 0: "
                "report energy_j from every participant or use a policy with w_energy=0"
            )
        med = float(np.median(v))
        if not med > 0:
            raise ValueError(f"median {name} per sample is {med!r} (must be > 0 to normalise); "
                             f"check the reports or set its weight to 0")
        ratio = np.ones(len(values))
        ratio[known] = np.clip(v / med, 1.0 / self.cost_clip, self.cost_clip)
        return ratio  # participants without an estimate get the median (ratio 1)

    def _cost(self, slots: np.ndarray, known: np.ndarray) -> np.ndarray:
        cost = np.zeros(len(slots))
        if self.w_time > 0:
            cost += self.w_time * self._term(self._tau[slots], known, "time")
        if self.w_energy > 0:
            cost += self.w_energy * self._term(self._eps[slots], known, "energy")
        if self.w_time == 0 and self.w_energy == 0:
            cost += 1.0
        return cost

    def _group_codes(self, participants: list[ParticipantId]) -> tuple[np.ndarray, list[Hashable]]:
        """Group index of each participant and the group names (one group without ``groups``)."""
        if self.groups is None:
            return np.zeros(len(participants), dtype=np.int64), [None]
        missing = [p for p in participants if p not in self.groups]
        if missing:
            raise ValueError(f"participants {missing[:5]!r} have no group: add them to groups=")
        names: dict[Hashable, int] = {}
        codes = np.fromiter((names.setdefault(self.groups[p], len(names)) for p in participants),
                            dtype=np.int64, count=len(participants))
        return codes, list(names)

    def allocate(self, participants: Sequence[ParticipantId]) -> dict[ParticipantId, int]:
        """Return this round's split ``{participant: samples}`` and commit it as the current one.

        Raises
        ------
        ValueError
            On duplicate or ill-typed ids, a participant without a group (with ``groups``), or
            bounds that cannot hold a group's budget (``Σ min_quota > budget`` or
            ``Σ max_quota < budget``).
        """
        participants = self._check_participants(participants)
        self._flush()
        slots = self._slots(participants)
        known = self._fresh(slots)
        self._round += 1
        lo, hi = self._lo[slots], self._hi[slots]
        bad = np.flatnonzero(lo > hi)
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"participant {participants[i]!r}: min_quota {lo[i]} exceeds max_quota {hi[i]}")
        weight = 1.0 / self._cost(slots, known)
        codes, names = self._group_codes(participants)
        budgets = [self.budget] if self.groups is None else [self.budget[g] for g in names]
        quotas = np.zeros(len(participants), dtype=np.int64)
        if len(names) == 1:
            if len(participants):
                quotas = _bounded_split(budgets[0], weight, lo, hi, names[0])
        else:
            for k, g in enumerate(names):
                idx = np.flatnonzero(codes == k)
                quotas[idx] = _bounded_split(budgets[k], weight[idx], lo[idx], hi[idx], g)

        group_of = None if self.groups is None else [names[c] for c in codes.tolist()]
        kept = self._kept_split(slots, lo, hi, quotas, codes, budgets, group_of)
        if kept is not None:
            quotas = kept
        else:
            self._cur_slots, self._cur_quota = slots.copy(), quotas
            self._cur_lo, self._cur_hi = lo, hi
            self._cur_budget = copy.deepcopy(self.budget)
            self._cur_groups = group_of
        return dict(zip(participants, quotas.tolist()))

    def _kept_split(self, slots, lo, hi, proposed, codes, budgets, group_of) -> np.ndarray | None:
        """The current split aligned to ``slots`` if the deadband keeps it, else ``None``."""
        if self.deadband <= 0 or self._cur_budget is None or self._cur_budget != self.budget:
            return None
        if len(slots) != len(self._cur_slots):
            return None
        if np.array_equal(slots, self._cur_slots):
            aligned = np.arange(len(slots))
        else:
            position = np.full(len(self._ids), -1, dtype=np.int64)
            position[self._cur_slots] = np.arange(len(self._cur_slots))
            aligned = position[slots]
            if (aligned < 0).any():
                return None  # the participant set changed
        current = self._cur_quota[aligned]
        if not (np.array_equal(self._cur_lo[aligned], lo) and np.array_equal(self._cur_hi[aligned], hi)):
            return None
        if group_of is not None and [self._cur_groups[i] for i in aligned.tolist()] != group_of:
            return None  # a participant changed group
        change = np.abs(proposed - current)
        # The total-variation rule alone can hold a split in which one small participant carries
        # twice its fair load (a 2× slowdown of an 11 % participant moves only ~4 % of the
        # budget), so each participant's own change must also stay inside the band.
        if (change > self.deadband * proposed + 1).any():
            return None
        moved = np.bincount(codes, weights=change, minlength=len(budgets))
        for m, b in zip(moved.tolist(), budgets):
            if b > 0 and m / (2 * b) >= self.deadband:
                return None
        return current

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The learned state as plain JSON types (ids keep their str / int type)."""
        self._flush()
        nan_to_none = lambda a: [None if math.isnan(x) else x for x in a.tolist()]  # noqa: E731
        budget = self._cur_budget
        return {
            "version": _STATE_VERSION,
            "round": self._round,
            "ids": list(self._ids),
            "time_per_sample": nan_to_none(self._tau),
            "energy_per_sample": nan_to_none(self._eps),
            "last_report": self._last_report.tolist(),
            "max_quota": [[p, b] for p, b in self._max_map.items()],
            "current": {
                "slots": self._cur_slots.tolist(),
                "quota": self._cur_quota.tolist(),
                "min_quota": self._cur_lo.tolist(),
                "max_quota": self._cur_hi.tolist(),
                "budget": list(budget.items()) if isinstance(budget, dict) else budget,
                "groups": self._cur_groups,
            },
            # set_group may have changed both since construction
            "groups": None if self.groups is None else [[p, g] for p, g in self.groups.items()],
            "budget": list(self.budget.items()) if isinstance(self.budget, dict) else self.budget,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned (also after a ``json`` round-trip).

        The controller must be built with the same arguments as the one that saved the state.
        """
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported controller state version {state.get('version')!r}; "
                             f"this release reads version {_STATE_VERSION}")
        ids = list(state["ids"])
        self._ids = ids
        self._index = {p: i for i, p in enumerate(ids)}
        as_float = lambda xs: np.array([math.nan if x is None else float(x) for x in xs], dtype=float)  # noqa: E731
        self._tau = as_float(state["time_per_sample"])
        self._eps = as_float(state["energy_per_sample"])
        self._last_report = np.array(state["last_report"], dtype=np.int64)
        self._round = int(state["round"])
        self._pending = []
        self._slot_cache = ([], np.empty(0, dtype=np.int64))
        self._max_map = {p: int(b) for p, b in state["max_quota"]}
        self._lo = np.array([self._min_map.get(p, self._default_min) for p in ids], dtype=np.int64)
        self._hi = np.array([self._max_of(p) for p in ids], dtype=np.int64)
        cur = state["current"]
        as_int = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
        self._cur_slots, self._cur_quota = as_int(cur["slots"]), as_int(cur["quota"])
        self._cur_lo, self._cur_hi = as_int(cur["min_quota"]), as_int(cur["max_quota"])
        budget = cur["budget"]
        self._cur_budget = {g: b for g, b in budget} if isinstance(budget, list) else budget
        self._cur_groups = cur.get("groups")
        if self.groups is not None and state.get("groups") is not None:
            self.groups = {p: g for p, g in state["groups"]}
            self.budget = {g: int(b) for g, b in state["budget"]}


def _bounded_split(budget: int, weight: np.ndarray, lo: np.ndarray, hi: np.ndarray, group: Hashable) -> np.ndarray:
    """Integers ``n`` with ``Σn = budget``, ``lo ≤ n ≤ hi`` and ``n ∝ weight`` where no bound binds.

    Solves ``Σ clip(λ·w, lo, hi) = budget`` for λ exactly (the left side is piecewise linear in λ
    with breakpoints ``lo/w`` and ``hi/w``), then rounds by largest remainder.
    """
    where = "" if group is None else f"group {group!r}: "
    lo_sum, hi_sum = int(lo.sum()), int(hi.astype(object).sum())
    if budget < lo_sum:
        raise ValueError(f"{where}budget {budget} is below the sum of min_quota {lo_sum} over "
                         f"{len(lo)} participants; lower min_quota or raise the budget")
    if budget > hi_sum:
        raise ValueError(f"{where}budget {budget} is above the sum of max_quota {hi_sum} over "
                         f"{len(hi)} participants; raise max_quota (or cycle data) or lower the budget")
    if budget == lo_sum:
        return lo.copy()
    if budget == hi_sum:
        return hi.copy()
    lo_f, hi_f = lo.astype(float), hi.astype(float)
    x = weight * (budget / weight.sum())
    if (x >= lo_f).all() and (x <= hi_f).all():
        return _round_to_budget(x, budget, lo, hi)  # no bound binds: the common case
    a = lo_f / weight  # below a_i the participant sits at lo_i
    b = hi_f / weight  # above b_i it sits at hi_i
    cand = np.unique(np.concatenate([a, b[np.isfinite(b)]]))
    a_order, b_order = np.argsort(a), np.argsort(b)
    a_sorted, b_sorted = a[a_order], b[b_order]
    lo_cum = np.r_[0.0, np.cumsum(lo_f[a_order])]
    wa_cum = np.r_[0.0, np.cumsum(weight[a_order])]
    hi_cum = np.r_[0.0, np.cumsum(np.where(np.isfinite(b_sorted), hi_f[b_order], 0.0))]
    wb_cum = np.r_[0.0, np.cumsum(weight[b_order])]

    def total(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k_a = np.searchsorted(a_sorted, lam, side="left")  # a_i < λ: above their lower bound
        k_b = np.searchsorted(b_sorted, lam, side="right")  # b_i ≤ λ: at their upper bound
        slope = wa_cum[k_a] - wb_cum[k_b]
        return (lo_cum[-1] - lo_cum[k_a]) + hi_cum[k_b] + lam * slope, slope

    f, _ = total(cand)
    k = int(np.searchsorted(f, budget, side="left"))
    if k < len(cand) and f[k] == budget:
        lam = cand[k]
    elif k == 0:
        lam = cand[0]  # unreachable: f(min a) = Σlo < budget
    else:
        # f is linear on [cand[k-1], cand[k]] (or beyond the last breakpoint): use its slope there.
        lam0 = cand[k - 1]
        _, slope = total(np.array([np.nextafter(lam0, np.inf)]))
        lam = lam0 + (budget - f[k - 1]) / slope[0]
    x = np.clip(lam * weight, lo_f, hi_f)
    return _round_to_budget(x, budget, lo, hi)


def _round_to_budget(x: np.ndarray, budget: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of ``x`` to integers in ``[lo, hi]`` summing to ``budget``."""
    n = np.clip(np.floor(x + 1e-9).astype(np.int64), lo, hi)
    frac = x - n
    short = budget - int(n.sum())
    if short > 0:
        order = np.argsort(-frac, kind="stable")
        order = order[n[order] < hi[order]]
        n[order[:short]] += 1
    elif short < 0:
        order = np.argsort(frac, kind="stable")
        order = order[n[order] > lo[order]]
        n[order[:-short]] -= 1
    return n
