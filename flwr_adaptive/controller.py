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
``observe`` validates and records (O(1), no numpy); ``allocate`` registers all participants seen
for the first time in one step, applies the recorded EMA steps, computes costs and solves the
bounded split vectorised: O(P log P) for P live participants (a sort over the bounds'
breakpoints), plus one Python loop over groups.

Limits
------
The controller refuses (``ValueError``, naming the field and the value) what it cannot compute
with exactly, and a refused call changes nothing:

- a budget (of any group) above :data:`MAX_BUDGET` = 2**53 − 1, the largest integer that a float
  holds exactly; ``min_quota`` above it (no budget could give it). A ``max_quota`` above it
  cannot bind and is stored as ``MAX_BUDGET``;
- a report whose ``samples`` exceeds :data:`MAX_BUDGET`, or whose time (or, when energy is
  weighted, energy) per sample lies outside [:data:`MIN_PER_SAMPLE`, :data:`MAX_PER_SAMPLE`]:
  no device is that fast or that slow, and beyond that range the median normalisation can
  underflow to 0 or overflow;
- ``cost_clip`` above :data:`MAX_COST_CLIP` and policy weights outside
  [:data:`MIN_WEIGHT`, :data:`MAX_WEIGHT`] (a weight may also be 0);
- participant ids other than ``str`` and ``int`` (numpy integers are stored as ``int``, so that
  ``state_dict`` is JSON); group names likewise.

How estimates age
-----------------
An estimate ages by its participant's own history, not by server rounds: it is dropped
(the participant is treated as new again and gets the median cost) once the participant was
given a positive quota ``forget_after`` times in a row without reporting. A node that is sampled
every tenth round and reports each time keeps its estimate; a node that stops answering loses it
after ``forget_after`` unanswered quotas. With every participant in every round this is the same
rule as counting rounds since the last report. Participants that leave for good are dropped
with :meth:`AllocationController.forget` or :meth:`AllocationController.prune`; slots without an
estimate are dropped by ``allocate`` on its own, so the state stays linear in the participants
that have an estimate or are in the current split.

This module imports numpy only: it is shared by the Flower strategies, the DDP launcher and the
experiments, none of which it knows about.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flwr_adaptive import estimation
from flwr_adaptive.solver import min_energy_split, min_makespan_split, round_energy

__all__ = [
    "AllocationController",
    "Report",
    "Policy",
    "POLICIES",
    "ParticipantId",
    "OBJECTIVES",
    "COST_MODELS",
    "DEADBAND_RULES",
    "MAX_BUDGET",
    "MIN_PER_SAMPLE",
    "MAX_PER_SAMPLE",
    "MAX_COST_CLIP",
    "MIN_WEIGHT",
    "MAX_WEIGHT",
    "MAX_IDLE_W",
]

ParticipantId = Hashable  # str or int; both survive ``state_dict`` with their type

#: Largest budget of one group (and largest ``samples`` of a report): 2**53 − 1, the largest
#: integer a float holds exactly. Quotas are exact integers at any budget up to it.
MAX_BUDGET = 2**53 - 1
#: Range of the per-sample time (and, when weighted, energy) a report may imply. A report
#: outside it is refused: no device is that fast or slow, and beyond it the median
#: normalisation can underflow to 0 (e.g. ``time_s=5e-324``) or overflow.
MIN_PER_SAMPLE = 1e-150
MAX_PER_SAMPLE = 1e150
#: Largest idle draw a participant may state: a megawatt (a whole silo of servers stays below it).
#: Beyond it the min-energy objective's idle term (watts × round seconds) can overflow.
MAX_IDLE_W = 1e6
#: Largest ``cost_clip``: cost ratios stay within 1e±12, so weights never overflow.
MAX_COST_CLIP = 1e12
#: A policy weight is 0 or lies in [MIN_WEIGHT, MAX_WEIGHT] (only their ratio matters).
MIN_WEIGHT = 1e-9
MAX_WEIGHT = 1e9
#: ``forget_after`` at or above this never forgets.
_NEVER = 2**62

_STATE_VERSION = 2  # version 1 (ages by server rounds) is read and converted
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


OBJECTIVES = ("weighted", "min-energy")
COST_MODELS = ("per-sample", "affine")
DEADBAND_RULES = ("tv", "gain")

#: The estimation and deadband the paper uses; ``from_policy(..., paper=True)`` applies it.
PAPER_SETTINGS: dict[str, Any] = {"cost_model": "per-sample", "drift": None, "deadband_rule": "tv"}


@dataclass(frozen=True)
class Policy:
    """A named controller configuration: the paper's weightings of time and energy, and beyond.

    ``w_time == w_energy == 0`` with ``objective="weighted"`` is the Equal policy: costs are
    ignored and the budget is split evenly (bounds and groups still apply). The remaining fields
    are the controller arguments of the same names (see :class:`AllocationController`).
    """

    name: str
    w_time: float
    w_energy: float
    objective: str = "weighted"
    slack: float = 0.1
    cost_model: str = "per-sample"
    drift: float | None = None
    deadband_rule: str = "tv"
    deadband: float | None = None  # None: the controller's default

    def controller_kwargs(self, paper: bool = False) -> dict[str, Any]:
        """The controller arguments of this policy; ``paper=True`` swaps in ``PAPER_SETTINGS``."""
        kwargs = dict(
            w_time=self.w_time,
            w_energy=self.w_energy,
            objective=self.objective,
            slack=self.slack,
            cost_model=self.cost_model,
            drift=self.drift,
            deadband_rule=self.deadband_rule,
        )
        if self.deadband is not None and not paper:
            kwargs["deadband"] = self.deadband
        if paper:
            kwargs.update(PAPER_SETTINGS)
        return kwargs


#: What the named policies use beyond the paper's weights (measured better by
#: ``python -m experiments.split_quality``): fitted fixed + per-sample costs, a step change
#: followed at once, the split kept while re-splitting gains < 2 % (or less than jitter fakes).
BEYOND_PAPER: dict[str, Any] = {"cost_model": "affine", "drift": 0.3, "deadband_rule": "gain", "deadband": 0.02}

POLICIES: dict[str, Policy] = {
    "equal": Policy("equal", 0.0, 0.0),
    "time": Policy("time", 1.0, 0.0, **BEYOND_PAPER),
    "low-energy": Policy("low-energy", 0.75, 0.25, **BEYOND_PAPER),
    "energy": Policy("energy", 0.0, 1.0, **BEYOND_PAPER),
    # Beyond the paper: the least active + idle energy within rounds at most 10 % longer than the
    # shortest possible, on fitted fixed + per-sample costs that follow a step change at once; the
    # split is kept while re-splitting gains < 2 % (or less than the reports' own jitter fakes).
    "min-energy": Policy(
        "min-energy",
        0.0,
        0.0,
        objective="min-energy",
        slack=0.1,
        cost_model="affine",
        drift=0.3,
        deadband_rule="gain",
        deadband=0.02,
    ),
}


def _show(value: Any) -> str:
    """``repr`` of a value for an error message, shortened (a hostile int may have 400 digits)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _is_id(value: Any) -> bool:
    return (type(value) is str) or (isinstance(value, (int, np.integer)) and not isinstance(value, bool))


def _as_id(value: Any, what: str = "participant id") -> str | int:
    """``value`` as a stored id: ``str`` or Python ``int`` (numpy integers converted)."""
    if type(value) is str or type(value) is int:
        return value
    if _is_id(value):
        return int(value)
    raise ValueError(f"{what} must be str or int, got {value!r} ({type(value).__name__})")


def _id_list(participants: Any) -> list:
    """``participants`` as a list; a lone ``str`` id (iterable by character) is refused."""
    if isinstance(participants, (str, bytes)):
        raise ValueError(
            f"participants must be a sequence of ids, got the string {_show(participants)}; "
            f"pass [{_show(participants)}] for one participant"
        )
    return list(participants)


def _check_int(name: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {_show(value)} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {_show(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{name} must be <= {maximum} (MAX_BUDGET: quotas are exact integers up to it), got {_show(value)}"
        )
    return int(value)


def _check_real(name: str, value: Any) -> float:
    """``value`` as a float; ``ValueError`` for non-numbers, bools and ints beyond float range."""
    if isinstance(value, bool) or not isinstance(value, _REAL_TYPES):
        raise ValueError(f"{name} must be a number, got {_show(value)} ({type(value).__name__})")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"{name} must be a finite number, got an integer beyond float range ({str(value)[:20]}...)"
        ) from None


def _exact_sum(values: np.ndarray) -> int:
    """Exact sum of non-negative int64 values (no int64 wrap-around), as a Python int."""
    if len(values) == 0:
        return 0
    return (int((values >> 32).sum()) << 32) + int((values & 0xFFFFFFFF).sum())


class AllocationController:
    """Split a fixed sample budget among participants inversely to their measured cost.

    Parameters
    ----------
    budget : int or dict
        Samples per round to split, at most ``MAX_BUDGET``. With ``groups`` a ``{group: int}``:
        each group's budget is split among its own members only.
    w_time, w_energy : float
        Weights of the time and energy terms of the cost
        ``c_i = w_time·τ̂_i/median(τ̂) + w_energy·ε̂_i/median(ε̂)``. A zero weight skips its term
        (energy may then be unmeasured). Both zero is the Equal policy. A non-zero weight lies
        in ``[MIN_WEIGHT, MAX_WEIGHT]``.
    smoothing : float
        EMA weight α ∈ (0, 1] of the newest per-sample cost; a participant's first report
        initialises its estimate. Each ``observe`` call is one EMA step, in call order.
    deadband : float
        Keep the previous split while the participant set, bounds and budget are unchanged, in
        every group ``Σ|new − current| / (2·budget_g) < deadband``, and no participant's quota
        would move by more than ``deadband·new + 1`` samples. 0 disables.
    min_quota, max_quota : int or dict
        Per-participant bounds; a dict maps participant → bound (missing keys: 0 and unbounded).
        ``max_quota=None`` means unbounded; a bound above ``MAX_BUDGET`` cannot bind and is
        stored as ``MAX_BUDGET``. When a bound binds the rest is re-split among the others.
        ``set_max_quota`` changes one participant's upper bound later.
    groups : dict, optional
        ``{participant: group}``, group names ``str`` or ``int``. A sample never crosses a
        group; a group without live members gets nothing this round and its budget is not given
        to other groups.
    forget_after : int
        A participant given a positive quota this many times in a row without reporting is
        treated as new again (its estimate is dropped and it gets the median cost). Rounds it
        was not asked to join do not count, so estimates survive partial participation.
        ``2**62`` or more never forgets.
    cost_clip : float
        Each term's ratio to its median is clipped to ``[1/cost_clip, cost_clip]`` so that a
        single absurd report cannot take the whole budget. Default 100: wider than any real
        device spread we measured, narrow enough to bound a bogus 1e-9 s report. At most
        ``MAX_COST_CLIP``.
    objective : {"weighted", "min-energy"}
        ``"weighted"`` (the paper): equalise the weighted cost above. ``"min-energy"``: minimise
        the round's energy, every participant's active energy plus its idle draw
        (``set_idle_power``) until the slowest finishes, subject to a makespan at most
        ``(1 + slack)`` times the smallest possible; exact for integer quotas within bounds and
        groups. ``w_time`` / ``w_energy`` are then unused. Participants without energy figures
        get the median power of those with them; with none at all it is the minimum makespan.
    slack : float
        Allowed makespan excess of ``"min-energy"``: 0 is the minimum makespan (Time-only, the
        energy breaking ties), ``math.inf`` unconstrained minimum energy. Default 0.1.
    cost_model : {"per-sample", "affine"}
        ``"per-sample"`` (the paper): time and energy proportional to samples, smoothed per
        sample. ``"affine"``: ``t_i(n) = a_i + b_i·n`` (and the same for energy) fitted online
        from the participant's recent rounds (``flwr_adaptive.estimation``: 3+ observations,
        and a fixed cost only when its intercept is significant), the per-sample model (the
        paper's EMA) until then; the split then equalises ``a_i + b_i·n_i`` exactly (integers,
        within bounds).
    drift : float or None
        Step-change detection: an observation more than a factor ``1 + drift`` away from what
        the participant's estimate predicts re-estimates it at once (its history is rescaled by
        the observed ratio instead of being smoothed in). ``None`` (the paper) disables.
    deadband_rule : {"tv", "gain"}
        ``"tv"`` (the paper): the total-variation rule of ``deadband`` above. ``"gain"``: keep
        the current split while re-splitting would improve the predicted objective (makespan
        of the weighted cost per group, or the round energy of ``"min-energy"``) by less than
        a fraction ``deadband``.
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
        objective: str = "weighted",
        slack: float = 0.1,
        cost_model: str = "per-sample",
        drift: float | None = None,
        deadband_rule: str = "tv",
    ) -> None:
        weights = {}
        for name, w in (("w_time", w_time), ("w_energy", w_energy)):
            weights[name] = _check_real(name, w)
            if not (weights[name] == 0.0 or MIN_WEIGHT <= weights[name] <= MAX_WEIGHT):
                raise ValueError(
                    f"{name} must be 0 or lie in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] "
                    f"(only the ratio of the weights matters), got {w!r}"
                )
        smoothing = _check_real("smoothing", smoothing)
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must lie in (0, 1], got {smoothing!r}")
        deadband = _check_real("deadband", deadband)
        if not 0.0 <= deadband < 1.0:
            raise ValueError(f"deadband must lie in [0, 1), got {deadband!r}")
        cost_clip = _check_real("cost_clip", cost_clip)
        if not 1.0 <= cost_clip <= MAX_COST_CLIP:
            raise ValueError(f"cost_clip must lie in [1, {MAX_COST_CLIP:g}], got {cost_clip!r}")
        for name, value, allowed in (
            ("objective", objective, OBJECTIVES),
            ("cost_model", cost_model, COST_MODELS),
            ("deadband_rule", deadband_rule, DEADBAND_RULES),
        ):
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, allowed))}")
        if isinstance(slack, bool) or not isinstance(slack, _REAL_TYPES) or math.isnan(slack) or slack < 0:
            raise ValueError(f"slack must be a number >= 0 (math.inf: no makespan limit), got {slack!r}")
        if drift is not None and (
            isinstance(drift, bool) or not isinstance(drift, _REAL_TYPES) or not 0.0 < drift < math.inf
        ):
            raise ValueError(f"drift must be a number > 0 (e.g. 0.3) or None to disable, got {drift!r}")
        self.objective = objective
        self.slack = float(slack)
        self.cost_model = cost_model
        self.drift = None if drift is None else float(drift)
        self.deadband_rule = deadband_rule
        self.drift_count = 0  # observations flagged as a step change so far (not saved in the state)
        self.forget_after = min(_check_int("forget_after", forget_after, minimum=1), _NEVER)
        self.w_time = weights["w_time"]
        self.w_energy = weights["w_energy"]
        self.smoothing = smoothing
        self.deadband = deadband
        self.cost_clip = cost_clip

        self.groups: dict[ParticipantId, Hashable] | None = None
        if groups is None:
            if isinstance(budget, Mapping):
                raise ValueError("budget is a dict but groups= is not given: pass groups={participant: group}")
            self.budget: int | dict[Hashable, int] = _check_int("budget", budget, maximum=MAX_BUDGET)
        else:
            if not isinstance(budget, Mapping):
                raise ValueError(f"with groups= the budget must be {{group: int}}, got {budget!r}")
            self.budget = {
                _as_id(g, "group name"): _check_int(f"budget[{g!r}]", b, maximum=MAX_BUDGET) for g, b in budget.items()
            }
            if not isinstance(groups, Mapping):
                raise ValueError(f"groups must be a dict {{participant: group}}, got {groups!r}")
            self.groups = {_as_id(p): _as_id(g, f"group of participant {p!r}") for p, g in groups.items()}
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
        # positive quotas given since the last report: the age of an estimate (see forget_after)
        self._unanswered = np.empty(0, dtype=np.int64)
        self._lo = np.empty(0, dtype=np.int64)
        self._hi = np.empty(0, dtype=np.int64)
        self._pending: list[tuple[int, float, float, int]] = []  # (slot, time, energy, samples)
        # reports of participants without a slot yet, registered together at the next flush
        self._pending_new: list[tuple[ParticipantId, float, float, int]] = []
        self._round = 0  # number of allocate() calls so far
        self._slot_cache: tuple[list, np.ndarray] = ([], np.empty(0, dtype=np.int64))
        # The committed split and what it was computed under (for the deadband).
        self._cur_slots = np.empty(0, dtype=np.int64)
        self._cur_quota = np.empty(0, dtype=np.int64)
        self._cur_lo = np.empty(0, dtype=np.int64)
        self._cur_hi = np.empty(0, dtype=np.int64)
        self._cur_budget: Any = None
        self._cur_groups: list[Hashable] | None = None  # each current participant's group
        # Beyond the paper (cost_model="affine", drift, min-energy): grown lazily to len(_ids).
        self._hist = np.empty((0, estimation.WINDOW, 3))  # last (samples, seconds, joules), NaN = none
        self._fit = np.empty((0, 4))  # last identified (a, b, c, d) of t = a + b·n, e = c + d·n
        self._idle_w: dict[ParticipantId, float] = {}

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_policy(
        cls, policy: str, budget: int | Mapping[Hashable, int], paper: bool = False, **kwargs: Any
    ) -> AllocationController:
        """Build a controller with the settings of a named policy (see ``POLICIES``).

        The named policies estimate beyond the paper (``BEYOND_PAPER``: affine costs, drift
        detection, the gain deadband at 2 %). ``paper=True`` uses the paper's estimation and
        deadband instead (``PAPER_SETTINGS``: per-sample costs, no drift detection, the
        total-variation deadband, the constructor's ``deadband``), so that
        ``from_policy("time", budget, paper=True)`` is the paper's Time-only controller;
        explicit ``kwargs`` override both.
        """
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        return cls(budget, **{**POLICIES[policy].controller_kwargs(paper=paper), **kwargs})

    @staticmethod
    def _check_bound(name: str, value: Any) -> int:
        """One bound: ``min_quota`` at most ``MAX_BUDGET``; ``max_quota`` clamped to it."""
        if name.startswith("min_quota"):
            return _check_int(name, value, maximum=MAX_BUDGET)
        return min(_check_int(name, value), MAX_BUDGET)  # a larger bound cannot bind

    @classmethod
    def _parse_bound(cls, name: str, value: Any, default: int | None) -> tuple[int | None, dict]:
        if value is None:
            if name == "min_quota":
                raise ValueError("min_quota must be an int or a dict, got None")
            return None, {}
        if isinstance(value, Mapping):
            bounds = {}
            for pid, b in value.items():
                if not _is_id(pid):
                    raise ValueError(f"{name} key {pid!r} is not a participant id (str or int)")
                bounds[_as_id(pid)] = cls._check_bound(f"{name}[{pid!r}]", b)
            return default, bounds
        return cls._check_bound(name, value), {}

    def set_max_quota(self, participant: ParticipantId, max_quota: int | None) -> None:
        """Set (or with ``None`` remove) one participant's upper bound, e.g. its local data size.

        A bound above ``MAX_BUDGET`` cannot bind and is stored as ``MAX_BUDGET``.
        """
        participant = _as_id(participant)
        if max_quota is None:
            self._max_map.pop(participant, None)
        else:
            self._max_map[participant] = self._check_bound(f"max_quota for participant {participant!r}", max_quota)
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
        participant = _as_id(participant)
        group = _as_id(group, "group name")
        if budget is not None:
            budget = _check_int(f"budget[{group!r}]", budget, maximum=MAX_BUDGET)
        elif group not in self.budget:
            raise ValueError(f"group {group!r} has no budget: pass set_group(..., budget=samples)")
        if budget is not None:
            self.budget[group] = budget
        self.groups[participant] = group

    def set_idle_power(self, participant: ParticipantId, watts: float | None) -> None:
        """Set (or with ``None`` forget) the watts ``participant`` draws while it waits for others.

        Used by ``objective="min-energy"``; participants without a figure get the median of
        those with one (0 W when nobody has one).
        """
        participant = _as_id(participant)
        if watts is None:
            self._idle_w.pop(participant, None)
            return
        if isinstance(watts, bool) or not isinstance(watts, _REAL_TYPES) or not 0.0 <= watts <= MAX_IDLE_W:
            raise ValueError(
                f"participant {participant!r}: idle watts must be a number in [0, {MAX_IDLE_W:g}], "
                f"got {watts!r}; pass None when unknown"
            )
        self._idle_w[participant] = float(watts)

    def _max_of(self, participant: ParticipantId) -> int:
        bound = self._max_map.get(participant, self._default_max)
        return _UNBOUNDED if bound is None else bound

    # ------------------------------------------------------------------ observe
    def observe(self, participant: ParticipantId, report: Report) -> None:
        """Record one round's report of ``participant``; raises ``ValueError`` on bad input.

        Refused (and nothing recorded): non-finite or non-positive ``time_s``, ``samples`` not
        an int in ``[1, MAX_BUDGET]``, negative ``energy_j``, a per-sample time (or, with
        ``w_energy > 0``, energy) outside ``[MIN_PER_SAMPLE, MAX_PER_SAMPLE]``, ``energy_j=None``
        with ``w_energy > 0``, an id that is not ``str`` or ``int``. A participant seen for the
        first time gets its slot at the next ``allocate`` (all new ones together).
        """
        t = getattr(report, "time_s", None)
        e = getattr(report, "energy_j", None)
        n = getattr(report, "samples", None)
        # Fast path first: this runs once per participant per round.
        if not (
            type(n) is int
            and 0 < n <= MAX_BUDGET
            and type(t) is float
            and MIN_PER_SAMPLE <= t / n <= MAX_PER_SAMPLE
            and (
                (e is None and self.w_energy == 0.0)
                or (
                    type(e) is float
                    and (MIN_PER_SAMPLE <= e / n <= MAX_PER_SAMPLE or (self.w_energy == 0.0 and 0.0 <= e < math.inf))
                )
            )
            and type(report) is Report
        ):
            t, e, n = self._validate(participant, report, t, e, n)
        if e is None:
            e = math.nan
        try:
            slot = self._index.get(participant)
        except TypeError:  # unhashable: not an id
            raise ValueError(
                f"participant id must be str or int, got {_show(participant)} ({type(participant).__name__})"
            ) from None
        if slot is not None and (type(participant) is str or type(participant) is int):
            self._pending.append((slot, t, e, n))
        else:
            self._pending_new.append((_as_id(participant), t, e, n))

    def _validate(self, participant: Any, report: Any, t: Any, e: Any, n: Any) -> tuple[float, float | None, int]:
        """The report's ``(time_s, energy_j, samples)`` as numbers, or ``ValueError`` naming the field."""
        who = f"participant {participant!r}"
        if not _is_id(participant):
            raise ValueError(f"participant id must be str or int, got {participant!r} ({type(participant).__name__})")
        if not isinstance(report, Report):
            raise ValueError(f"{who}: expected a Report, got {type(report).__name__}")

        def number(field: str, value: Any) -> float:
            value = _check_real(f"{who}: {field}", value)
            if not math.isfinite(value):
                raise ValueError(f"{who}: {field} must be finite, got {value!r}")
            return value

        t = number("time_s", t)
        if t <= 0:
            raise ValueError(f"{who}: time_s must be > 0, got {t!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ValueError(f"{who}: samples must be an int, got {_show(n)}")
        if n <= 0:
            raise ValueError(f"{who}: samples must be > 0, got {n!r}")
        if n > MAX_BUDGET:
            raise ValueError(f"{who}: samples={_show(n)} exceeds MAX_BUDGET={MAX_BUDGET}; the report is refused")
        n = int(n)

        def per_sample(field: str, value: float) -> None:
            cost = value / n
            if not MIN_PER_SAMPLE <= cost <= MAX_PER_SAMPLE:
                raise ValueError(
                    f"{who}: {field}={value!r} over samples={n} is {cost!r} per sample, outside "
                    f"[{MIN_PER_SAMPLE:g}, {MAX_PER_SAMPLE:g}]: no device is that fast or slow; "
                    "the report is refused (check the client's clock or meter)"
                )

        per_sample("time_s", t)
        if e is None:
            if self.w_energy > 0:
                raise ValueError(
                    f"{who}: energy_j is None but w_energy={self.w_energy} > 0; "
                    "measure energy (see flwr_adaptive.energy) or use a policy with w_energy=0"
                )
            return t, None, n
        e = number("energy_j", e)
        if e < 0:
            raise ValueError(f"{who}: energy_j must be >= 0, got {e!r}")
        if self.w_energy > 0:
            per_sample("energy_j", e)
        return t, e, n

    # ------------------------------------------------------------------ internal state
    #: Per-slot arrays (first axis = slot): attribute → (dtype, value of a new slot, shape of one
    #: slot's entry). Registration, rollback and pruning go through this table, so an array
    #: listed here always has one row per participant. ``_lo``/``_hi`` come from the bounds.
    _SLOT_ARRAYS: dict[str, tuple[Any, Any, tuple[int, ...]]] = {
        "_tau": (float, math.nan, ()),
        "_eps": (float, math.nan, ()),
        "_unanswered": (np.int64, 0, ()),
    }
    #: Per-slot arrays kept only by some options (``_hist``/``_fit``: affine costs, drift): empty
    #: while unused, else grown to one row per participant by ``_grow_model`` when needed.
    _LAZY_SLOT_ARRAYS: dict[str, tuple[int, ...]] = {"_hist": (estimation.WINDOW, 3), "_fit": (4,)}

    def _slots(self, participants: list[ParticipantId]) -> np.ndarray:
        """Slot of each participant, registering new ones (cached for an unchanged list)."""
        cached_ids, cached_slots = self._slot_cache
        if participants == cached_ids:
            return cached_slots
        index = self._index
        new = [p for p in dict.fromkeys(participants) if p not in index]
        if new:
            self._register(new)
        slots = np.fromiter(map(index.__getitem__, participants), dtype=np.int64, count=len(participants))
        self._slot_cache = (list(participants), slots)
        return slots

    def _register(self, new: list[ParticipantId]) -> None:
        """Give every id of ``new`` (valid, distinct, unregistered) a slot: one concatenate per array."""
        lo = np.array([self._min_map.get(p, self._default_min) for p in new], dtype=np.int64)
        hi = np.array([self._max_of(p) for p in new], dtype=np.int64)
        start = len(self._ids)
        self._index.update(zip(new, range(start, start + len(new))))
        self._ids.extend(new)
        for name, (dtype, fill, shape) in self._SLOT_ARRAYS.items():
            grown = np.full((len(new), *shape), fill, dtype=dtype)
            setattr(self, name, np.concatenate([getattr(self, name), grown]))
        self._lo = np.concatenate([self._lo, lo])
        self._hi = np.concatenate([self._hi, hi])

    def _truncate(self, count: int) -> None:
        """Undo the registrations after the first ``count`` slots (a refused call changes nothing)."""
        if len(self._ids) == count:
            return
        for p in self._ids[count:]:
            del self._index[p]
        del self._ids[count:]
        for name in (*self._SLOT_ARRAYS, *self._LAZY_SLOT_ARRAYS, "_lo", "_hi"):
            setattr(self, name, getattr(self, name)[:count])
        self._slot_cache = ([], np.empty(0, dtype=np.int64))

    def _drop_slots(self, dead: np.ndarray) -> None:
        """Remove the slots where ``dead`` (a mask over slots) is true; renumber the others.

        Pending reports must be flushed first. Dropping a participant of the current split
        forgets the split (the deadband releases: the participant set changed anyway).
        """
        if any(len(getattr(self, name)) for name in self._LAZY_SLOT_ARRAYS):
            self._grow_model()  # one row per participant before rows are dropped
        keep = np.flatnonzero(~dead)
        renumber = np.full(len(self._ids), -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        self._ids = [self._ids[i] for i in keep.tolist()]
        self._index = dict(zip(self._ids, range(len(self._ids))))
        for name in (*self._SLOT_ARRAYS, "_lo", "_hi"):
            setattr(self, name, getattr(self, name)[keep])
        for name in self._LAZY_SLOT_ARRAYS:
            if len(getattr(self, name)):
                setattr(self, name, getattr(self, name)[keep])
        cur = renumber[self._cur_slots]
        if (cur < 0).any():
            self._forget_current()
        else:
            self._cur_slots = cur
        self._slot_cache = ([], np.empty(0, dtype=np.int64))

    def _forget_current(self) -> None:
        empty = np.empty(0, dtype=np.int64)
        self._cur_slots, self._cur_quota, self._cur_lo, self._cur_hi = empty, empty, empty, empty
        self._cur_budget = None
        self._cur_groups = None

    def _compact(self) -> None:
        """Drop slots that hold nothing: no estimate and not in the current split."""
        dead = np.isnan(self._tau)
        dead[self._cur_slots] = False
        if dead.any():
            self._drop_slots(dead)

    def forget(self, participants: Sequence[ParticipantId], config: bool = False) -> None:
        """Drop what was learned about ``participants`` (unknown ids are ignored).

        Use it for participants that left for good (e.g. a node id that will not come back), so
        that the state stays linear in live participants. A forgotten participant that returns
        is new again. With ``config=True`` its ``min_quota``/``max_quota`` entries, its idle
        power and its group are dropped too. Forgetting a participant of the current split releases the deadband.
        """
        ids = [_as_id(p) for p in _id_list(participants)]
        self._flush()
        slots = [self._index[p] for p in ids if p in self._index]
        if slots:
            dead = np.zeros(len(self._ids), dtype=bool)
            dead[slots] = True
            self._drop_slots(dead)
        if config:
            for p in ids:
                self._max_map.pop(p, None)
                self._min_map.pop(p, None)
                self._idle_w.pop(p, None)
                if self.groups is not None:
                    self.groups.pop(p, None)

    def prune(self, keep: Sequence[ParticipantId], config: bool = False) -> list[ParticipantId]:
        """Forget every participant not in ``keep``; returns the ids forgotten (see ``forget``)."""
        live = {_as_id(p) for p in _id_list(keep)}
        self._flush()
        gone = [p for p in self._ids if p not in live]
        if config:
            known = set(self._max_map) | set(self._min_map) | set(self._idle_w) | set(self.groups or ())
            gone += [p for p in known if p not in live and p not in self._index]
        self.forget(gone, config=config)
        return gone

    def _flush(self) -> None:
        """Register the new participants together, then apply the recorded reports as EMA steps in call order."""
        if self._pending_new:
            new = [p for p in dict.fromkeys(r[0] for r in self._pending_new) if p not in self._index]
            if new:
                self._register(new)
            index = self._index
            self._pending.extend((index[p], t, e, n) for p, t, e, n in self._pending_new)
            self._pending_new = []
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
        tracks_history = self.cost_model == "affine" or self.drift is not None
        if tracks_history:
            self._grow_model()
        for sel in layers:
            s = slots[sel]
            if tracks_history:
                self._record(s, obs[sel, 3], obs[sel, 1], obs[sel, 2])
            for est, new_obs in ((self._tau, tau_obs[sel]), (self._eps, eps_obs[sel])):
                old = est[s]
                updated = np.where(np.isnan(old), new_obs, a * new_obs + (1.0 - a) * old)
                est[s] = np.where(np.isnan(new_obs), old, updated)
        self._unanswered[slots] = 0

    # ------------------------------------------------------------------ beyond the paper: estimation
    def _grow_model(self) -> None:
        """Extend the history and fit arrays to every registered participant."""
        grow = len(self._ids) - len(self._hist)
        if grow > 0:
            self._hist = np.concatenate([self._hist, np.full((grow, estimation.WINDOW, 3), np.nan)])
            self._fit = np.concatenate([self._fit, np.full((grow, 4), np.nan)])

    def _predict(self, s: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seconds and joules that participants ``s`` are expected to need for ``n`` samples."""
        fit = self._fit[s]
        use_fit = self.cost_model == "affine"
        t = np.where(use_fit & ~np.isnan(fit[:, 1]), fit[:, 0] + fit[:, 1] * n, self._tau[s] * n)
        e = np.where(use_fit & ~np.isnan(fit[:, 3]), fit[:, 2] + fit[:, 3] * n, self._eps[s] * n)
        return t, e

    def _record(self, s: np.ndarray, n: np.ndarray, t: np.ndarray, e: np.ndarray) -> None:
        """Detect a step change, then append one observation to each of ``s`` (slots unique)."""
        if self.drift is not None:
            pred_t, pred_e = self._predict(s, n)
            last_n = self._hist[s, -1, 0]
            # Without a fitted line, judge against the last observation's cost per sample: the EMA
            # mixes observations at other quotas, and a fixed cost makes their per-sample costs
            # differ (a device with a 40 % fixed share measured at 600 and then 2,000 samples
            # looks 25 % "faster" at 2,300 than its EMA says, with no drift at all).
            no_line = (self.cost_model != "affine") | np.isnan(self._fit[s, 1])
            with np.errstate(divide="ignore", invalid="ignore"):
                pred_t = np.where(no_line & ~np.isnan(last_n), self._hist[s, -1, 1] / last_n * n, pred_t)
                pred_e = np.where(no_line & ~np.isnan(last_n), self._hist[s, -1, 2] / last_n * n, pred_e)
            # Far from the last quota a prediction extrapolates (a fixed cost, or a fitted line's
            # noise, looks like drift there): only judge observations near the quota measured last.
            near = np.abs(n / last_n - 1.0) <= 0.25
            jump = near & (estimation.drifted(t, pred_t, self.drift) | estimation.drifted(e, pred_e, self.drift))
            if jump.any():
                j = s[jump]
                scale_t = (t / pred_t)[jump]
                scale_e = np.where(np.isfinite(e / pred_e), e / pred_e, 1.0)[jump]
                self._hist[j, :, 1] *= scale_t[:, None]
                self._hist[j, :, 2] *= scale_e[:, None]
                self._fit[j, 0:2] *= scale_t[:, None]
                self._fit[j, 2:4] *= scale_e[:, None]
                self._tau[j] = np.nan  # the EMA restarts from this observation
                self._eps[j] = np.nan
                self.drift_count += int(jump.sum())
        self._hist[s, :-1] = self._hist[s, 1:]
        self._hist[s, -1] = np.stack([n, t, e], axis=1)

    def _forget_model(self, gone: np.ndarray) -> None:
        """Drop the history and fits of participants whose estimate is dropped."""
        if len(self._hist):
            gone = gone[gone < len(self._hist)]
            self._hist[gone] = np.nan
            self._fit[gone] = np.nan

    def _affine_estimates(self, slots: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(a, b, c, d)`` per participant from its window; the last identified line re-levelled
        when the window does not identify one, the per-sample estimate before that."""
        self._grow_model()
        hist = self._hist[slots]
        n, t, e = hist[..., 0], hist[..., 1], hist[..., 2]
        out = []
        for col, y, per_sample in ((0, t, self._tau[slots]), (2, e, self._eps[slots])):
            a, b, identified, _ = estimation.fit_affine(n, y)
            stored_a, stored_b = self._fit[slots, col], self._fit[slots, col + 1]
            has_stored = ~np.isnan(stored_b)
            filled = ~(np.isnan(n) | np.isnan(y))
            with np.errstate(divide="ignore", invalid="ignore"):
                level = np.where(filled, y, 0.0).sum(axis=1) / np.where(
                    filled, stored_a[:, None] + stored_b[:, None] * n, 0.0
                ).sum(axis=1)
            relevel = ~identified & has_stored & np.isfinite(level) & (level > 0)
            a = np.where(identified, a, np.where(relevel, stored_a * level, 0.0))
            b = np.where(identified, b, np.where(relevel, stored_b * level, per_sample))
            keep = identified | relevel
            self._fit[slots[keep], col] = a[keep]
            self._fit[slots[keep], col + 1] = b[keep]
            out += [a, b]
        return tuple(out)

    def _noise_floor(self, slots: np.ndarray) -> float:
        """The predicted gain that jitter alone produces: 3 × the median relative scatter of the
        participants' recent times around their model, over √(window); capped at 0.1."""
        if not len(self._hist):
            return 0.0  # no history kept (cost_model="per-sample" without drift detection)
        self._grow_model()
        hist = self._hist[slots]
        noise = estimation.fit_affine(hist[..., 0], hist[..., 1])[3]
        if not np.isfinite(noise).any():
            return 0.0
        return min(0.1, 3.0 * float(np.nanmedian(noise)) / math.sqrt(estimation.WINDOW))

    def _model(self, slots: np.ndarray, known: np.ndarray, budget_total: int) -> tuple[np.ndarray, ...]:
        """Time ``a + b·n`` and active energy ``c + d·n`` of each participant (``d`` NaN: no energy
        figures anywhere), with the unknowns and the clipping rules of the weighted cost."""
        if self.cost_model == "affine":
            a, b, c, d = self._affine_estimates(slots)
        else:
            a, b = np.zeros(len(slots)), self._tau[slots].copy()
            c, d = np.zeros(len(slots)), self._eps[slots].copy()
        a, b, c, d = (np.where(known, x, np.nan) for x in (a, b, c, d))
        med_b = float(np.nanmedian(b[known]))
        if not med_b > 0:
            raise ValueError(f"median time per sample is {med_b!r} (must be > 0); check the reports")
        b = np.clip(np.where(known, b, med_b), med_b / self.cost_clip, med_b * self.cost_clip)
        share = med_b * budget_total / max(len(slots), 1)  # the median participant's equal-share time
        a = np.clip(np.where(known, a, float(np.nanmedian(a[known]))), 0.0, self.cost_clip * share)
        measured = known & ~np.isnan(d)
        if not measured.any():
            return a, b, c, np.full(len(slots), np.nan)
        power = float(np.median(d[measured] / b[measured]))  # watts of the median participant
        if not power >= 0:
            raise ValueError(f"median active power is {power!r} W (must be >= 0); check energy_j")
        d = np.where(measured, d, power * b)
        c = np.where(measured, c, power * a)
        d = np.clip(d, power * b / self.cost_clip, power * b * self.cost_clip)
        c = np.clip(c, 0.0, power * a * self.cost_clip + power * share)
        return a, b, c, d

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
        registered = len(self._ids)
        try:
            slots = self._slots(participants)
            return dict(zip(participants, self._cost(slots, self._fresh(slots, forget=False)).tolist()))
        finally:
            self._truncate(registered)  # a question registers nobody

    @property
    def current(self) -> dict[ParticipantId, int]:
        """The committed split (what the last ``allocate`` returned)."""
        return dict(zip((self._ids[s] for s in self._cur_slots.tolist()), self._cur_quota.tolist()))

    # ------------------------------------------------------------------ allocate
    @staticmethod
    def _check_participants(participants: Sequence[ParticipantId]) -> list[ParticipantId]:
        participants = _id_list(participants)
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
        """Mask of participants with a fresh estimate; stale ones (``forget_after``) are forgotten.

        An estimate is stale once its participant left ``forget_after`` positive quotas in a
        row unanswered (its own history, not server rounds).
        """
        stale = self._unanswered[slots] >= self.forget_after
        if not forget:
            return ~np.isnan(self._tau[slots]) & ~stale
        if stale.any():
            gone = slots[stale]
            self._forget_model(gone)
            self._tau[gone] = np.nan
            self._eps[gone] = np.nan
            self._unanswered[gone] = 0
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
            raise ValueError(
                f"median {name} per sample is {med!r} (must be > 0 to normalise); "
                f"check the reports or set its weight to 0"
            )
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
        codes = np.fromiter(
            (names.setdefault(self.groups[p], len(names)) for p in participants),
            dtype=np.int64,
            count=len(participants),
        )
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
        registered = len(self._ids)
        try:
            slots = self._slots(participants)
            quotas = self._split(participants, slots)
        except BaseException:
            self._truncate(registered)  # a refused call registers nobody
            raise
        return dict(zip(participants, quotas.tolist()))

    def _split(self, participants: list[ParticipantId], slots: np.ndarray) -> np.ndarray:
        """Compute and commit this round's split; raises before changing anything."""
        known = self._fresh(slots, forget=False)
        lo, hi = self._lo[slots], self._hi[slots]
        bad = np.flatnonzero(lo > hi)
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"participant {participants[i]!r}: min_quota {lo[i]} exceeds max_quota {hi[i]}")
        codes, names = self._group_codes(participants)
        budgets = [self.budget] if self.groups is None else [self.budget[g] for g in names]
        if not known.any() or (
            self.objective == "weighted" and (self.cost_model == "per-sample" or self.w_time == self.w_energy == 0)
        ):
            # the paper's split (and, with nothing measured yet, the equal split for every option)
            cost = self._cost(slots, known)
            weight = 1.0 / cost
            quotas = np.zeros(len(participants), dtype=np.int64)
            if len(names) == 1:
                if len(participants):
                    quotas = _bounded_split(budgets[0], weight, lo, hi, names[0])
            else:
                for k, g in enumerate(names):
                    idx = np.flatnonzero(codes == k)
                    quotas[idx] = _bounded_split(budgets[k], weight[idx], lo[idx], hi[idx], g)
            fixed = np.zeros(len(participants))
            predicted = lambda q: _group_makespans(fixed, cost, q, codes, len(budgets))  # noqa: E731
        else:
            quotas, predicted = self._solve(participants, slots, known, lo, hi, codes, names, budgets)

        group_of = None if self.groups is None else [names[c] for c in codes.tolist()]
        kept = self._kept_split(slots, lo, hi, quotas, codes, budgets, group_of, predicted)
        # Commit: nothing above changed the controller.
        self._fresh(slots, forget=True)
        self._round += 1
        if kept is not None:
            quotas = kept
        else:
            self._cur_slots, self._cur_quota = slots.copy(), quotas
            self._cur_lo, self._cur_hi = lo, hi
            self._cur_budget = copy.deepcopy(self.budget)
            self._cur_groups = group_of
        self._unanswered[slots[quotas > 0]] += 1
        self._compact()
        return quotas

    def _solve(self, participants, slots, known, lo, hi, codes, names, budgets):
        """The split of the options beyond the paper, and its predicted objective (for the deadband)."""
        for k, g in enumerate(names):
            idx = codes == k
            _check_fits(budgets[k], lo[idx], hi[idx], g)
        a, b, c, d = self._model(slots, known, int(sum(budgets)))
        if self.objective == "weighted":  # the weighted cost, affine: equalise A_i + B_i·n_i
            A, B = np.zeros(len(slots)), np.zeros(len(slots))
            if self.w_time > 0:
                scale = float(np.median(b))
                A, B = A + self.w_time * a / scale, B + self.w_time * b / scale
            if self.w_energy > 0:
                if np.isnan(d).any():
                    raise ValueError(
                        "energy is unmeasured for some participants but w_energy > 0: report "
                        "energy_j from every participant or use a policy with w_energy=0"
                    )
                scale = float(np.median(d))
                if not scale > 0:
                    raise ValueError(
                        f"median energy per sample is {scale!r} (must be > 0 to normalise); "
                        "check the reports or set w_energy=0"
                    )
                A, B = A + self.w_energy * c / scale, B + self.w_energy * d / scale
            quotas = np.zeros(len(slots), dtype=np.int64)
            for k in range(len(names)):
                idx = np.flatnonzero(codes == k)
                quotas[idx] = min_makespan_split(budgets[k], A[idx], B[idx], lo[idx], hi[idx])[0]
            return quotas, lambda q: _group_makespans(A, B, q, codes, len(budgets))
        # min-energy
        slack = self.slack
        if np.isnan(d).all():  # no energy figures anywhere: the minimum makespan (Time-only)
            c, d, idle, slack = np.zeros(len(slots)), np.zeros(len(slots)), np.zeros(len(slots)), 0.0
        else:
            given = [self._idle_w.get(p) for p in participants]
            known_idle = [w for w in given if w is not None]
            fill = float(np.median(known_idle)) if known_idle else 0.0
            idle = np.array([fill if w is None else w for w in given], dtype=float)
        quotas, t_min = min_energy_split(budgets, codes, a, b, c, d, idle, lo, hi, slack)
        t_limit = (1.0 + slack) * t_min

        def predicted(q: np.ndarray) -> np.ndarray:
            T, E = round_energy(q, a, b, c, d, idle)
            return np.array([E, max(T, t_limit) if math.isfinite(t_limit) else 0.0])

        return quotas, predicted

    def _kept_split(self, slots, lo, hi, proposed, codes, budgets, group_of, predicted) -> np.ndarray | None:
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
        if self.deadband_rule == "gain":
            # Keep the split while re-splitting improves the predicted objective by < deadband,
            # or by less than the participants' own jitter can fake.
            band = max(self.deadband, self._noise_floor(slots))
            keep = predicted(current) <= (1.0 + band) * predicted(proposed)
            return current if bool(np.all(keep)) else None
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
    def _policy_record(self) -> dict[str, Any]:
        """What a state's numbers mean: a state is only resumed under the same."""
        return {
            "w_time": self.w_time,
            "w_energy": self.w_energy,
            "objective": self.objective,
            "cost_model": self.cost_model,
        }

    def state_dict(self) -> dict[str, Any]:
        """The learned state as plain JSON types (ids keep their str / int type)."""
        self._flush()
        if len(self._hist):
            self._grow_model()  # one row per participant: the same state reads back the same
        nan_to_none = lambda a: [None if math.isnan(x) else x for x in a.tolist()]  # noqa: E731
        budget = self._cur_budget
        return {
            "version": _STATE_VERSION,
            "policy": self._policy_record(),
            "round": self._round,
            "ids": list(self._ids),
            "time_per_sample": nan_to_none(self._tau),
            "energy_per_sample": nan_to_none(self._eps),
            "unanswered": self._unanswered.tolist(),
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
            # beyond the paper: the fit windows, identified lines and idle watts
            "model": {
                "history": [[nan_to_none(obs) for obs in rows] for rows in self._hist],
                "fit": [nan_to_none(row) for row in self._fit],
                "idle_w": [[p, w] for p, w in self._idle_w.items()],
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned (also after a ``json`` round-trip).

        The controller must be built with the same arguments as the one that saved the state.
        Everything is checked before anything changes: a state that is not what ``state_dict``
        writes (wrong lengths or types, non-positive or non-finite costs, a split that does not
        sum to its budget, another policy's weights) raises a ``ValueError`` naming the field,
        and the controller stays as it was. Version 1 states (estimates aged by server rounds)
        are converted: the rounds since a participant's last report count as unanswered quotas.
        """
        loaded = _StateReader(self, state).read()
        for name, value in loaded.items():
            setattr(self, name, value)
        self._pending = []
        self._pending_new = []
        self._slot_cache = ([], np.empty(0, dtype=np.int64))


class _StateReader:
    """Validates a ``state_dict`` against the controller that loads it; ``read`` returns its attributes."""

    def __init__(self, ctrl: AllocationController, state: Any) -> None:
        self.ctrl = ctrl
        if not isinstance(state, Mapping):
            raise ValueError(f"controller state must be a dict, got {type(state).__name__}")
        self.state = state

    def fail(self, field: str, problem: str) -> None:
        raise ValueError(
            f"controller state field {field!r}: {problem}; delete the state file to start "
            "afresh, or resume with the controller settings that saved it"
        )

    def get(self, field: str, state: Mapping | None = None) -> Any:
        state = self.state if state is None else state
        if field not in state:
            self.fail(field, "missing")
        return state[field]

    def integer(self, field: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            self.fail(field, f"expected an int, got {value!r}")
        if value < minimum or (maximum is not None and value > maximum):
            self.fail(field, f"{value} is outside [{minimum}, {maximum if maximum is not None else '∞'}]")
        return int(value)

    def int_list(
        self, field: str, value: Any, length: int | None, minimum: int = 0, maximum: int | None = None
    ) -> np.ndarray:
        if not isinstance(value, list):
            self.fail(field, f"expected a list, got {type(value).__name__}")
        if length is not None and len(value) != length:
            self.fail(field, f"has {len(value)} entries, expected {length}")
        return np.array(
            [self.integer(f"{field}[{i}]", v, minimum, maximum) for i, v in enumerate(value)], dtype=np.int64
        ).reshape(-1)

    def cost_list(self, field: str, value: Any, length: int, unweighted: bool) -> np.ndarray:
        """Per-sample costs or nulls; an unweighted term (energy with w_energy=0) only needs finite >= 0."""
        if not isinstance(value, list) or len(value) != length:
            self.fail(
                field,
                f"expected a list of {length} numbers or nulls, got "
                f"{len(value) if isinstance(value, list) else type(value).__name__}",
            )
        out = np.empty(length)
        for i, v in enumerate(value):
            if v is None:
                out[i] = math.nan
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                self.fail(f"{field}[{i}]", f"expected a number, got {v!r}")
            x = float(v) if abs(v) < 1e300 else math.inf
            if not (MIN_PER_SAMPLE <= x <= MAX_PER_SAMPLE or (unweighted and 0.0 <= x < math.inf)):
                self.fail(
                    f"{field}[{i}]", f"{v!r} is not a cost per sample in [{MIN_PER_SAMPLE:g}, {MAX_PER_SAMPLE:g}]"
                )
            out[i] = x
        return out

    def ident(self, field: str, value: Any, what: str = "participant id") -> str | int:
        if not _is_id(value):
            self.fail(field, f"{what} must be str or int, got {value!r}")
        return _as_id(value)

    def pairs(self, field: str, value: Any) -> list:
        if not isinstance(value, list) or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in value):
            self.fail(field, "expected a list of [key, value] pairs")
        return value

    def read(self) -> dict[str, Any]:
        ctrl = self.ctrl
        version = self.state.get("version")
        if version not in (1, _STATE_VERSION):
            raise ValueError(
                f"unsupported controller state version {version!r}; this release reads versions 1 and {_STATE_VERSION}"
            )
        if version >= 2:
            saved, mine = self.get("policy"), ctrl._policy_record()
            if saved != mine:
                self.fail("policy", f"saved under {saved!r}, this controller has {mine!r} (another policy)")
        rnd = self.integer("round", self.get("round"))
        raw_ids = self.get("ids")
        if not isinstance(raw_ids, list):
            self.fail("ids", f"expected a list, got {type(raw_ids).__name__}")
        ids = [self.ident(f"ids[{i}]", p) for i, p in enumerate(raw_ids)]
        if len(set(ids)) != len(ids):
            self.fail("ids", "lists a participant more than once")
        count = len(ids)
        tau = self.cost_list("time_per_sample", self.get("time_per_sample"), count, unweighted=False)
        eps = self.cost_list("energy_per_sample", self.get("energy_per_sample"), count, unweighted=ctrl.w_energy == 0)
        if ctrl.w_energy > 0:
            missing = np.flatnonzero(~np.isnan(tau) & np.isnan(eps))
            if len(missing):
                self.fail(
                    f"energy_per_sample[{int(missing[0])}]",
                    "null for a participant with a time estimate, but w_energy > 0",
                )
        if version >= 2:
            unanswered = self.int_list("unanswered", self.get("unanswered"), count)
        else:
            last = self.int_list("last_report", self.get("last_report"), count, minimum=-1, maximum=rnd)
            unanswered = np.where(last >= 0, rnd - last, 0)
        max_map = {}
        for i, (p, b) in enumerate(self.pairs("max_quota", self.get("max_quota"))):
            max_map[self.ident(f"max_quota[{i}]", p)] = min(self.integer(f"max_quota[{i}]", b), MAX_BUDGET)

        groups, budget = ctrl.groups, ctrl.budget
        saved_groups = self.state.get("groups")
        if (saved_groups is None) != (ctrl.groups is None):
            self.fail(
                "groups",
                "saved "
                + ("without" if saved_groups is None else "with")
                + " groups, but this controller is built "
                + ("with" if ctrl.groups is not None else "without")
                + " groups=",
            )
        if saved_groups is not None:
            groups = {
                self.ident(f"groups[{i}]", p): self.ident(f"groups[{i}]", g, "group name")
                for i, (p, g) in enumerate(self.pairs("groups", saved_groups))
            }
            budget = {
                self.ident(f"budget[{i}]", g, "group name"): self.integer(f"budget[{i}]", b, 0, MAX_BUDGET)
                for i, (g, b) in enumerate(self.pairs("budget", self.get("budget")))
            }
            unknown = {g for g in groups.values() if g not in budget}
            if unknown:
                self.fail("budget", f"groups {sorted(map(repr, unknown))} have no budget")
            dropped = [g for g in ctrl.budget if g not in budget]
            if dropped:  # set_group adds groups and changes budgets but never removes one
                self.fail("budget", f"has no budget for group(s) {dropped!r} of this controller's budget=")

        cur = self.get("current")
        if not isinstance(cur, Mapping):
            self.fail("current", f"expected a dict, got {type(cur).__name__}")
        cur_slots = self.int_list("current.slots", self.get("slots", cur), None, 0, max(count - 1, 0))
        if count == 0 and len(cur_slots):
            self.fail("current.slots", "refers to participants but 'ids' is empty")
        if len(set(cur_slots.tolist())) != len(cur_slots):
            self.fail("current.slots", "lists a participant more than once")
        n_cur = len(cur_slots)
        cur_quota = self.int_list("current.quota", self.get("quota", cur), n_cur, 0, MAX_BUDGET)
        cur_lo = self.int_list("current.min_quota", self.get("min_quota", cur), n_cur, 0, MAX_BUDGET)
        cur_hi = self.int_list("current.max_quota", self.get("max_quota", cur), n_cur, 0, int(_UNBOUNDED))
        outside = np.flatnonzero((cur_quota < cur_lo) | (cur_quota > cur_hi))
        if len(outside):
            self.fail("current.quota", f"entry {int(outside[0])} is outside its [min_quota, max_quota]")
        raw_budget, cur_groups = self.get("budget", cur), cur.get("groups")
        if raw_budget is None:  # nothing allocated yet
            if n_cur:
                self.fail("current.budget", "missing for a committed split")
            cur_budget, cur_groups = None, None
        elif ctrl.groups is None:
            cur_budget = self.integer("current.budget", raw_budget, 0, MAX_BUDGET)
            if cur_groups is not None:
                self.fail("current.groups", "set, but this controller is built without groups=")
            if n_cur and _exact_sum(cur_quota) != cur_budget:
                self.fail("current.quota", f"sums to {_exact_sum(cur_quota)}, not to its budget {cur_budget}")
        else:
            cur_budget = {
                self.ident(f"current.budget[{i}]", g, "group name"): self.integer(
                    f"current.budget[{i}]", b, 0, MAX_BUDGET
                )
                for i, (g, b) in enumerate(self.pairs("current.budget", raw_budget))
            }
            if not isinstance(cur_groups, list) or len(cur_groups) != n_cur:
                self.fail("current.groups", f"expected a list of {n_cur} group names")
            cur_groups = [self.ident(f"current.groups[{i}]", g, "group name") for i, g in enumerate(cur_groups)]
            sums: dict = {}
            for g, q in zip(cur_groups, cur_quota.tolist()):
                sums[g] = sums.get(g, 0) + q
            for g, total in sums.items():
                if g not in cur_budget or cur_budget[g] != total:
                    self.fail("current.quota", f"group {g!r} sums to {total}, not to its budget {cur_budget.get(g)!r}")

        hist, fit, idle_w = self.model(self.state.get("model") or {}, count)

        # Bounds come from this controller's configuration (min_quota is not part of the state).
        default_max = ctrl._default_max
        lo = np.array([ctrl._min_map.get(p, ctrl._default_min) for p in ids], dtype=np.int64).reshape(-1)
        hi = np.array(
            [_UNBOUNDED if max_map.get(p, default_max) is None else max_map.get(p, default_max) for p in ids],
            dtype=np.int64,
        ).reshape(-1)
        return {
            "_ids": ids,
            "_index": {p: i for i, p in enumerate(ids)},
            "_tau": tau,
            "_eps": eps,
            "_unanswered": unanswered.astype(np.int64),
            "_round": rnd,
            "_max_map": max_map,
            "_lo": lo,
            "_hi": hi,
            "_cur_slots": cur_slots,
            "_cur_quota": cur_quota,
            "_cur_lo": cur_lo,
            "_cur_hi": cur_hi,
            "_cur_budget": cur_budget,
            "_cur_groups": cur_groups,
            "groups": groups,
            "budget": budget,
            "_hist": hist,
            "_fit": fit,
            "_idle_w": idle_w,
        }

    def model(self, model: Any, count: int) -> tuple[np.ndarray, np.ndarray, dict]:
        """The fit windows, identified lines and idle watts (affine costs, drift, min-energy)."""
        if not isinstance(model, Mapping):
            self.fail("model", f"expected a dict, got {type(model).__name__}")

        def table(field: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
            if not isinstance(value, list):
                self.fail(field, f"expected a list, got {type(value).__name__}")
            try:
                arr = np.array(
                    [[math.nan if x is None else x for x in np.ravel(np.array(row, dtype=object))] for row in value],
                    dtype=float,
                ).reshape(-1, *shape)
            except (TypeError, ValueError, OverflowError):
                self.fail(field, f"expected a list of entries of shape {shape} of numbers or nulls")
            if len(arr) > count:
                self.fail(field, f"has {len(arr)} entries for {count} participants")
            if np.isinf(arr).any() or np.abs(np.nan_to_num(arr)).max(initial=0.0) > 1e300:
                self.fail(field, "holds an infinite or absurd number")
            return arr

        hist = table("model.history", model.get("history", []), (estimation.WINDOW, 3))
        if (np.nan_to_num(hist, nan=1.0)[..., :2] <= 0).any() or (np.nan_to_num(hist)[..., 2] < 0).any():
            self.fail("model.history", "holds a non-positive sample count or time, or a negative energy")
        fit = table("model.fit", model.get("fit", []), (4,))
        if len(fit) != len(hist):
            self.fail("model.fit", f"has {len(fit)} entries, model.history {len(hist)}")
        idle_w = {}
        for i, (p, w) in enumerate(self.pairs("model.idle_w", model.get("idle_w", []))):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
                self.fail(f"model.idle_w[{i}]", f"idle watts must be a finite number >= 0, got {w!r}")
            idle_w[self.ident(f"model.idle_w[{i}]", p)] = float(w)
        # Kept lazily: grown to one row per participant when the options that use them need it.
        if len(hist) and len(hist) < count:
            hist = np.concatenate([hist, np.full((count - len(hist), estimation.WINDOW, 3), np.nan)])
            fit = np.concatenate([fit, np.full((count - len(fit), 4), np.nan)])
        return hist, fit, idle_w


def _bounded_split(budget: int, weight: np.ndarray, lo: np.ndarray, hi: np.ndarray, group: Hashable) -> np.ndarray:
    """Integers ``n`` with ``Σn = budget``, ``lo ≤ n ≤ hi`` and ``n ∝ weight`` where no bound binds.

    Solves ``Σ clip(λ·w, lo, hi) = budget`` for λ exactly (the left side is piecewise linear in λ
    with breakpoints ``lo/w`` and ``hi/w``), then rounds by largest remainder.
    """
    lo_sum, hi_sum = _check_fits(budget, lo, hi, group)
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


def _check_fits(budget: int, lo: np.ndarray, hi: np.ndarray, group: Hashable) -> tuple[int, int]:
    """``(Σlo, Σhi)``; raises when the bounds cannot hold ``budget``."""
    where = "" if group is None else f"group {group!r}: "
    lo_sum, hi_sum = _exact_sum(lo), _exact_sum(hi)
    if budget < lo_sum:
        raise ValueError(
            f"{where}budget {budget} is below the sum of min_quota {lo_sum} over "
            f"{len(lo)} participants; lower min_quota or raise the budget"
        )
    if budget > hi_sum:
        raise ValueError(
            f"{where}budget {budget} is above the sum of max_quota {hi_sum} over "
            f"{len(hi)} participants; raise max_quota (or cycle data) or lower the budget"
        )
    return lo_sum, hi_sum


def _group_makespans(
    fixed: np.ndarray, per_sample: np.ndarray, quotas: np.ndarray, codes: np.ndarray, groups: int
) -> np.ndarray:
    """``max_{i∈g} fixed_i + per_sample_i·n_i`` of each group (0 for an empty group)."""
    out = np.zeros(groups)
    np.maximum.at(out, codes, fixed + per_sample * quotas)
    return out


def _round_to_budget(x: np.ndarray, budget: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of ``x`` to integers in ``[lo, hi]`` summing to ``budget``."""
    n = np.clip(np.floor(x + 1e-9).astype(np.int64), lo, hi)
    frac = x - n
    short = budget - _exact_sum(n)
    # Usually |short| < len(n) and one pass settles it; float error near MAX_BUDGET may leave
    # more, so whole steps are spread first. Exact whenever Σlo ≤ budget ≤ Σhi.
    while short != 0:
        sign = 1 if short > 0 else -1
        order = np.argsort(-sign * frac, kind="stable")
        room = (hi[order] - n[order]) if sign > 0 else (n[order] - lo[order])
        order, room = order[room > 0], room[room > 0]
        step = abs(short) // len(order)
        if step == 0:
            n[order[: abs(short)]] += sign
            break
        moved = np.minimum(room, step)
        n[order] += sign * moved
        short -= sign * _exact_sum(moved)
    return n
