"""What the allocation controller accepts: the :class:`Report`, the numeric limits and the input checks.

Contract
--------
Every number that reaches the controller (a report, a bound, a budget, a weight, an id) is
checked here or against the limits defined here, and a refusal is a ``ValueError`` that names
the participant or field, the value and what to do. The limits are chosen so that everything
the controller accepts can be computed with exactly (quotas are exact integers up to
:data:`MAX_BUDGET`; the median normalisation neither underflows nor overflows inside
[:data:`MIN_PER_SAMPLE`, :data:`MAX_PER_SAMPLE`]) and so that a saved state holding only accepted
values reads back (``flwr_adaptive.state_format`` checks a state against the same limits).

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

Cost
----
O(1) per checked value, pure Python; ``AllocationController.observe`` inlines a fast path for
well-typed reports and calls :func:`validate_report` only for the rest.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Report",
    "ParticipantId",
    "MAX_BUDGET",
    "MIN_PER_SAMPLE",
    "MAX_PER_SAMPLE",
    "MAX_COST_CLIP",
    "MIN_WEIGHT",
    "MAX_WEIGHT",
    "MAX_IDLE_W",
    "validate_report",
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
NEVER = 2**62

REAL_TYPES = (int, float, np.integer, np.floating)
UNBOUNDED = np.iinfo(np.int64).max  # max_quota=None


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


def show(value: Any) -> str:
    """``repr`` of a value for an error message, shortened (a hostile int may have 400 digits)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def is_id(value: Any) -> bool:
    return (type(value) is str) or (isinstance(value, (int, np.integer)) and not isinstance(value, bool))


def as_id(value: Any, what: str = "participant id") -> str | int:
    """``value`` as a stored id: ``str`` or Python ``int`` (numpy integers converted)."""
    if type(value) is str or type(value) is int:
        return value
    if is_id(value):
        return int(value)
    raise ValueError(f"{what} must be str or int, got {value!r} ({type(value).__name__})")


def id_list(participants: Any) -> list[Any]:
    """``participants`` as a list; a lone ``str`` id (iterable by character) is refused."""
    if isinstance(participants, (str, bytes)):
        raise ValueError(
            f"participants must be a sequence of ids, got the string {show(participants)}; "
            f"pass [{show(participants)}] for one participant"
        )
    return list(participants)


def check_int(name: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {show(value)} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {show(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{name} must be <= {maximum} (MAX_BUDGET: quotas are exact integers up to it), got {show(value)}"
        )
    return int(value)


def check_real(name: str, value: Any) -> float:
    """``value`` as a float; ``ValueError`` for non-numbers, bools and ints beyond float range."""
    if isinstance(value, bool) or not isinstance(value, REAL_TYPES):
        raise ValueError(f"{name} must be a number, got {show(value)} ({type(value).__name__})")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"{name} must be a finite number, got an integer beyond float range ({str(value)[:20]}...)"
        ) from None


def check_settings(
    *, w_time: Any, w_energy: Any, smoothing: Any, deadband: Any, cost_clip: Any
) -> tuple[float, float, float, float, float]:
    """The controller's ``(w_time, w_energy, smoothing, deadband, cost_clip)`` as floats, checked in that order."""
    weights = []
    for name, w in (("w_time", w_time), ("w_energy", w_energy)):
        weights.append(check_real(name, w))
        if not (weights[-1] == 0.0 or MIN_WEIGHT <= weights[-1] <= MAX_WEIGHT):
            raise ValueError(
                f"{name} must be 0 or lie in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}] "
                f"(only the ratio of the weights matters), got {w!r}"
            )
    smoothing = check_real("smoothing", smoothing)
    if not 0.0 < smoothing <= 1.0:
        raise ValueError(f"smoothing must lie in (0, 1], got {smoothing!r}")
    deadband = check_real("deadband", deadband)
    if not 0.0 <= deadband < 1.0:
        raise ValueError(f"deadband must lie in [0, 1), got {deadband!r}")
    cost_clip = check_real("cost_clip", cost_clip)
    if not 1.0 <= cost_clip <= MAX_COST_CLIP:
        raise ValueError(f"cost_clip must lie in [1, {MAX_COST_CLIP:g}], got {cost_clip!r}")
    return weights[0], weights[1], smoothing, deadband, cost_clip


def check_slack(slack: Any) -> float:
    """The min-energy makespan slack as a float >= 0 (``math.inf``: no limit)."""
    if isinstance(slack, bool) or not isinstance(slack, REAL_TYPES) or math.isnan(slack) or slack < 0:
        raise ValueError(f"slack must be a number >= 0 (math.inf: no makespan limit), got {slack!r}")
    return float(slack)


def check_drift(drift: Any) -> float | None:
    """The drift threshold as a float > 0, or ``None`` (disabled)."""
    if drift is None:
        return None
    if isinstance(drift, bool) or not isinstance(drift, REAL_TYPES) or not 0.0 < drift < math.inf:
        raise ValueError(f"drift must be a number > 0 (e.g. 0.3) or None to disable, got {drift!r}")
    return float(drift)


def check_idle_watts(participant: ParticipantId, watts: Any) -> float:
    """``participant``'s idle draw as a float in ``[0, MAX_IDLE_W]``."""
    if isinstance(watts, bool) or not isinstance(watts, REAL_TYPES) or not 0.0 <= watts <= MAX_IDLE_W:
        raise ValueError(
            f"participant {participant!r}: idle watts must be a number in [0, {MAX_IDLE_W:g}], "
            f"got {watts!r}; pass None when unknown"
        )
    return float(watts)


def check_fixed_seconds(participant: ParticipantId, seconds: Any) -> float:
    """``participant``'s per-round seconds beyond its reported compute as a finite float >= 0."""
    if isinstance(seconds, bool) or not isinstance(seconds, REAL_TYPES) or not 0.0 <= seconds < math.inf:
        raise ValueError(
            f"participant {participant!r}: fixed time must be a finite number of seconds >= 0, got "
            f"{seconds!r}; pass None when unknown"
        )
    return float(seconds)


def check_participants(participants: Any, checked: list[ParticipantId] | None = None) -> list[ParticipantId]:
    """``participants`` as a list of distinct ``str`` / ``int`` ids (numpy integers become ``int``).

    ``checked``: a list that passed this check before (the last ``allocate``'s): ids of exactly
    ``str`` / ``int`` equal to it are distinct without building their set (an ``int`` never equals
    a ``str``, so equal lists hold the same ids)."""
    ids: list[Any] = id_list(participants)
    if not set(map(type, ids)) <= {int, str}:
        bad = [p for p in ids if not is_id(p)]
        if bad:
            raise ValueError(f"participant ids must be str or int, got {bad[:5]!r}")
        ids = [p if type(p) is str else int(p) for p in ids]
    elif checked is not None and ids == checked:
        return ids
    if len(set(ids)) != len(ids):
        dup = {p for p, n in Counter(ids).items() if n > 1}
        raise ValueError(f"participants are listed more than once: {sorted(dup, key=repr)!r}")
    return ids


def exact_sum(values: np.ndarray) -> int:
    """Exact sum of non-negative int64 values (no int64 wrap-around), as a Python int."""
    if len(values) == 0:
        return 0
    return (int((values >> 32).sum()) << 32) + int((values & 0xFFFFFFFF).sum())


def validate_report(
    participant: Any, report: Any, t: Any, e: Any, n: Any, w_energy: float
) -> tuple[float, float | None, int]:
    """The report's ``(time_s, energy_j, samples)`` as numbers, or ``ValueError`` naming the field.

    ``t``, ``e``, ``n`` are the report's fields as read (``getattr``: a wrong type may lack them);
    ``w_energy`` decides whether the energy per sample must lie in the per-sample range.
    """
    who = f"participant {participant!r}"
    if not is_id(participant):
        raise ValueError(f"participant id must be str or int, got {participant!r} ({type(participant).__name__})")
    if not isinstance(report, Report):
        raise ValueError(f"{who}: expected a Report, got {type(report).__name__}")

    def number(field: str, value: Any) -> float:
        x = check_real(f"{who}: {field}", value)
        if not math.isfinite(x):
            raise ValueError(f"{who}: {field} must be finite, got {x!r}")
        return x

    t = number("time_s", t)
    if t <= 0:
        raise ValueError(f"{who}: time_s must be > 0, got {t!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ValueError(f"{who}: samples must be an int, got {show(n)}")
    if n <= 0:
        raise ValueError(f"{who}: samples must be > 0, got {n!r}")
    if n > MAX_BUDGET:
        raise ValueError(f"{who}: samples={show(n)} exceeds MAX_BUDGET={MAX_BUDGET}; the report is refused")
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
        if w_energy > 0:
            raise ValueError(
                f"{who}: energy_j is None but w_energy={w_energy} > 0; "
                "measure energy (see flwr_adaptive.energy) or use a policy with w_energy=0"
            )
        return t, None, n
    e = number("energy_j", e)
    if e < 0:
        raise ValueError(f"{who}: energy_j must be >= 0, got {e!r}")
    if w_energy > 0:
        per_sample("energy_j", e)
    elif e / n > MAX_PER_SAMPLE:
        # Unweighted energy is still kept (drift detection, min-energy, the saved state): bounded
        # like a weighted one above, so that what is accepted can be computed with and saved.
        raise ValueError(
            f"{who}: energy_j={e!r} over samples={n} is {e / n!r} per sample, above "
            f"{MAX_PER_SAMPLE:g}: no device spends that much; the report is refused (check the meter)"
        )
    return t, e, n


def check_budget_groups(
    budget: Any, groups: Any
) -> tuple[int | dict[Hashable, int], dict[ParticipantId, Hashable] | None]:
    """The controller's ``budget`` and ``groups`` checked together: an int budget without groups,
    a ``{group: int}`` budget with ``{participant: group}`` groups whose every group has a budget."""
    if groups is None:
        if isinstance(budget, Mapping):
            raise ValueError("budget is a dict but groups= is not given: pass groups={participant: group}")
        return check_int("budget", budget, maximum=MAX_BUDGET), None
    if not isinstance(budget, Mapping):
        raise ValueError(f"with groups= the budget must be {{group: int}}, got {budget!r}")
    budgets: dict[Hashable, int] = {
        as_id(g, "group name"): check_int(f"budget[{g!r}]", b, maximum=MAX_BUDGET) for g, b in budget.items()
    }
    if not isinstance(groups, Mapping):
        raise ValueError(f"groups must be a dict {{participant: group}}, got {groups!r}")
    members: dict[ParticipantId, Hashable] = {
        as_id(p): as_id(g, f"group of participant {p!r}") for p, g in groups.items()
    }
    unknown = sorted({repr(g) for g in members.values() if g not in budgets})
    if unknown:
        raise ValueError(f"groups {', '.join(unknown)} have no budget: add them to budget=")
    return budgets, members


def check_bound(name: str, value: Any) -> int:
    """One bound: ``min_quota`` at most ``MAX_BUDGET``; ``max_quota`` clamped to it."""
    if name.startswith("min_quota"):
        return check_int(name, value, maximum=MAX_BUDGET)
    return min(check_int(name, value), MAX_BUDGET)  # a larger bound cannot bind


def store_bound(bounds: dict[ParticipantId, int], name: str, participant: Any, value: Any) -> ParticipantId:
    """Set (``None``: remove) ``participant``'s entry in ``bounds``, a ``name`` map; returns its id."""
    key: ParticipantId = as_id(participant)
    if value is None:
        bounds.pop(key, None)
    else:
        bounds[key] = check_bound(f"{name} for participant {key!r}", value)
    return key


def parse_bound(name: str, value: Any, default: int | None) -> tuple[int | None, dict[ParticipantId, int]]:
    """``min_quota`` / ``max_quota`` as ``(default, {participant: bound})``."""
    if value is None:
        if name == "min_quota":
            raise ValueError("min_quota must be an int or a dict, got None")
        return None, {}
    if isinstance(value, Mapping):
        bounds: dict[ParticipantId, int] = {}
        for pid, b in value.items():
            if not is_id(pid):
                raise ValueError(f"{name} key {pid!r} is not a participant id (str or int)")
            bounds[as_id(pid)] = check_bound(f"{name}[{pid!r}]", b)
        return default, bounds
    return check_bound(name, value), {}
