"""Round accounting and the exact optimum: what a synchronized round cost, and the best it could cost.

Contract
--------
In a synchronized round every participant computes for its own busy time, then draws its idle
power until the slowest one finishes. :func:`account_round` prices one round from the busy
seconds and each participant's active / idle watts (or a :class:`~flwr_adaptive.devices.DeviceProfile`
per participant): makespan, waits, active / idle / total joules and the CV of busy time.
:func:`optimal_split` and :func:`optimal_makespan` give the exact integer optimum of a round for
known per-sample costs, computed without the controller so that experiments and benchmarks can
judge it. The strategies price their rounds with this module; the emulated testbed
(:mod:`flwr_adaptive.devices`) is only one source of the watts.

Cost
----
``account_round`` is O(P) for P participants; ``optimal_makespan`` is O(B log P) for a budget of
B samples (a heap; 6,000 samples over 11 devices take a few milliseconds).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from flwr_adaptive.devices import DeviceProfile

__all__ = ["RoundAccount", "account_round", "optimal_makespan", "optimal_split"]


@dataclass(frozen=True)
class RoundAccount:
    """Time and energy of one synchronized round (virtual clock).

    Attributes
    ----------
    makespan : float
        Seconds until the slowest participant finished (max of ``busy``).
    busy, wait : dict
        Per participant: seconds computing, and seconds idling until the makespan.
    active_j, idle_j : dict
        Per participant: joules while computing and while waiting.
    total_j : float
        All joules of the round (active + idle, all participants).
    cv_busy : float
        Coefficient of variation of busy time, ``std/mean`` (population std); 0 for a single
        participant or when nobody was busy. 0 means perfectly balanced.
    """

    makespan: float
    busy: dict[Hashable, float]
    wait: dict[Hashable, float]
    active_j: dict[Hashable, float]
    idle_j: dict[Hashable, float]
    total_j: float
    cv_busy: float

    @property
    def total_active_j(self) -> float:
        return float(sum(self.active_j.values()))

    @property
    def total_idle_j(self) -> float:
        return float(sum(self.idle_j.values()))


def _watts(
    name: str,
    given: Mapping[Hashable, float] | None,
    profiles: Mapping[Hashable, DeviceProfile] | None,
    attr: str,
    ids: Iterable[Hashable],
) -> dict[Hashable, float]:
    src: Mapping[Hashable, float]
    if given is not None:
        src = given
    elif profiles is not None:
        src = {p: getattr(prof, attr) for p, prof in profiles.items()}
    else:
        raise ValueError(f"account_round needs {name}= or profiles= to price the round")
    out: dict[Hashable, float] = {}
    for p in ids:
        if p not in src:
            raise ValueError(f"participant {p!r} has no {name}: add it to {name}= or profiles=")
        w = src[p]
        if (
            isinstance(w, bool)
            or not isinstance(w, (int, float, np.integer, np.floating))
            or not math.isfinite(w)
            or w < 0
        ):
            raise ValueError(f"participant {p!r}: {name} must be a finite number >= 0, got {w!r}")
        out[p] = float(w)
    return out


def account_round(
    busy_s: Mapping[Hashable, float],
    profiles: Mapping[Hashable, DeviceProfile] | None = None,
    *,
    active_w: Mapping[Hashable, float] | None = None,
    idle_w: Mapping[Hashable, float] | None = None,
    active_j: Mapping[Hashable, float] | None = None,
) -> RoundAccount:
    """Account one synchronized round: makespan, waits, active / idle / total energy, CV.

    Parameters
    ----------
    busy_s : dict
        ``{participant: seconds of its own compute}`` (device time on the virtual clock).
    profiles : dict, optional
        ``{participant: DeviceProfile}``: source of the watts not given explicitly.
    active_w, idle_w : dict, optional
        Explicit watts per participant (override ``profiles``).
    active_j : dict, optional
        Measured active joules per participant (e.g. from a meter); replaces
        ``active_w × busy`` for the participants it names.

    Returns
    -------
    RoundAccount
        ``wait_i = makespan − busy_i``; ``idle_j_i = idle_w_i × wait_i``;
        ``total_j = Σ active_j + Σ idle_j``.
    """
    busy: dict[Hashable, float] = {}
    for p, b in busy_s.items():
        if (
            isinstance(b, bool)
            or not isinstance(b, (int, float, np.integer, np.floating))
            or not math.isfinite(b)
            or b < 0
        ):
            raise ValueError(f"participant {p!r}: busy time must be a finite number >= 0, got {b!r}")
        busy[p] = float(b)
    if not busy:
        return RoundAccount(0.0, {}, {}, {}, {}, 0.0, 0.0)
    measured = dict(active_j or {})
    need_active = [p for p in busy if p not in measured]
    watts_a = _watts("active_w", active_w, profiles, "active_w", need_active) if need_active else {}
    watts_i = _watts("idle_w", idle_w, profiles, "idle_w", busy)
    makespan = max(busy.values())
    wait = {p: makespan - b for p, b in busy.items()}
    act = {}
    for p, b in busy.items():
        if p in measured:
            e = measured[p]
            if (
                isinstance(e, bool)
                or not isinstance(e, (int, float, np.integer, np.floating))
                or not math.isfinite(e)
                or e < 0
            ):
                raise ValueError(f"participant {p!r}: active_j must be a finite number >= 0, got {e!r}")
            act[p] = float(e)
        else:
            act[p] = watts_a[p] * b
    idle = {p: watts_i[p] * w for p, w in wait.items()}
    values = np.fromiter(busy.values(), dtype=float, count=len(busy))
    mean = float(values.mean())
    cv = float(values.std() / mean) if len(values) > 1 and mean > 0 else 0.0
    total = float(sum(act.values()) + sum(idle.values()))
    return RoundAccount(makespan, busy, wait, act, idle, total, cv)


# --------------------------------------------------------------------------- the exact optimum
def optimal_split(per_sample_s: Sequence[float], budget: int) -> list[int]:
    """The integer split of ``budget`` samples that minimises the makespan ``max_i n_i·c_i``.

    Greedy with a heap: give each sample, one at a time, to the participant that would finish
    earliest with it. For linear costs this is exact (an exchange argument: the k-th smallest
    of all finishing times ``{m·c_i}`` is the best possible makespan for k samples). Ties go
    to the lower index. Independent of :mod:`flwr_adaptive.controller` on purpose.

    Parameters
    ----------
    per_sample_s : sequence of float
        Seconds per sample of each participant (> 0, finite).
    budget : int
        Samples to place (>= 0).
    """
    costs = [float(c) for c in per_sample_s]
    for i, c in enumerate(costs):
        if not (math.isfinite(c) and c > 0):
            raise ValueError(f"per_sample_s[{i}] must be a finite number > 0, got {per_sample_s[i]!r}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"budget must be an int >= 0, got {budget!r}")
    if budget and not costs:
        raise ValueError(f"cannot place budget {budget} among zero participants")
    counts = [0] * len(costs)
    heap = [(c, i) for i, c in enumerate(costs)]  # (finish time with one more sample, index)
    heapq.heapify(heap)
    for _ in range(int(budget)):
        _, i = heapq.heappop(heap)
        counts[i] += 1
        heapq.heappush(heap, ((counts[i] + 1) * costs[i], i))
    return counts


def optimal_makespan(per_sample_s: Sequence[float], budget: int) -> float:
    """The exact minimal makespan ``max_i n_i·c_i`` over integer splits with ``Σ n_i = budget``.

    See :func:`optimal_split` (same validation). ``0.0`` for a zero budget.
    """
    counts = optimal_split(per_sample_s, budget)
    return max((n * float(c) for n, c in zip(counts, per_sample_s)), default=0.0)
