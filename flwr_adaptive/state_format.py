"""The controller's saved state: what ``state_dict`` writes and how ``load_state_dict`` checks it.

Contract
--------
:func:`write_state` returns the controller's learned state as plain JSON types (ids keep their
``str`` / ``int`` type): the estimate store's arrays, the committed split and what it was
computed under (for the deadband), the bounds and groups changed since construction, and the
model windows beyond the paper. :class:`StateReader` reads it back against the controller that
loads it and checks *everything* before anything changes: a state that is not what
``write_state`` writes (wrong lengths or types, costs outside the limits of
``flwr_adaptive.limits``, a split that does not sum to its budget, another policy's weights)
raises a ``ValueError`` naming the field. A state written from accepted reports always reads
back (the same limits bound both).

Versions: :data:`STATE_VERSION` = 2 is written. Version 1 (estimates aged by server rounds) is
read and converted: the rounds since a participant's last report count as unanswered quotas.
Fields added within version 2 are optional: ``probe`` (absent: ``false``) and
``model.scatter_slots`` (absent or ``null``: no fits' scatter, the next reports are judged by
the bare drift threshold, as a state saved after the round's reports). With it, a state saved
between ``allocate`` and the round's reports resumes with the quotas of the uninterrupted run:
the scatter is rebuilt from the saved windows, which no report changed since that ``allocate``.

Cost
----
O(S·WINDOW) for S slots, in Python per entry (the state is read once per resume, written once
per round by the strategies).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from flwr_adaptive import estimation
from flwr_adaptive.deadband import CommittedSplit
from flwr_adaptive.estimates import MAX_STORED
from flwr_adaptive.limits import MAX_BUDGET, MAX_PER_SAMPLE, MIN_PER_SAMPLE, UNBOUNDED, as_id, exact_sum, is_id

if TYPE_CHECKING:
    from flwr_adaptive.controller import AllocationController

__all__ = ["STATE_VERSION", "write_state", "StateReader"]

STATE_VERSION = 2  # version 1 (ages by server rounds) is read and converted
_LOWEST = MIN_PER_SAMPLE * (1.0 - 1e-9)
_HIGHEST = MAX_PER_SAMPLE * (1.0 + 1e-9)


def write_state(ctrl: AllocationController) -> dict[str, Any]:
    """The learned state of ``ctrl`` as plain JSON types (pending reports flushed first)."""
    store = ctrl._store
    store.flush()
    if len(store.hist):
        store.grow_model()  # one row per participant: the same state reads back the same

    def nan_to_none(a: np.ndarray) -> list[float | None]:
        return [None if math.isnan(x) else x for x in a.tolist()]

    cur = ctrl._committed
    budget = cur.budget
    return {
        "version": STATE_VERSION,
        "policy": ctrl._policy_record(),
        "round": ctrl._round,
        "probe": ctrl._probe,  # the split returned last was an excitation (excitation.py): not held
        "ids": list(store.ids),
        "time_per_sample": nan_to_none(store.tau),
        "energy_per_sample": nan_to_none(store.eps),
        "unanswered": store.unanswered.tolist(),
        "max_quota": [[p, b] for p, b in ctrl._max_map.items()],
        "current": {
            "slots": cur.slots.tolist(),
            "quota": cur.quota.tolist(),
            "min_quota": cur.lo.tolist(),
            "max_quota": cur.hi.tolist(),
            "budget": list(budget.items()) if isinstance(budget, dict) else budget,
            "groups": cur.groups,
        },
        # set_group may have changed both since construction
        "groups": None if ctrl.groups is None else [[p, g] for p, g in ctrl.groups.items()],
        "budget": list(ctrl.budget.items()) if isinstance(ctrl.budget, dict) else ctrl.budget,
        # beyond the paper: the fit windows, identified lines and idle watts
        "model": {
            "history": [[nan_to_none(obs) for obs in rows] for rows in store.hist],
            "fit": [nan_to_none(row) for row in store.fit],
            "idle_w": [[p, w] for p, w in ctrl._idle_w.items()],
            # the participants whose time fits' scatter scales the next reports' drift threshold:
            # the fits of the allocate just made (None once reports came in, or when none was fitted)
            "scatter_slots": None if store.noise_cache is None else store.noise_cache[0].tolist(),
        },
    }


class StateReader:
    """Validates a ``state_dict`` against the controller that loads it; ``read`` returns its attributes."""

    def __init__(self, ctrl: AllocationController, state: Any) -> None:
        self.ctrl = ctrl
        if not isinstance(state, Mapping):
            raise ValueError(f"controller state must be a dict, got {type(state).__name__}")
        self.state = state

    def fail(self, field: str, problem: str) -> NoReturn:
        raise ValueError(
            f"controller state field {field!r}: {problem}; delete the state file to start "
            "afresh, or resume with the controller settings that saved it"
        )

    def get(self, field: str, state: Mapping[str, Any] | None = None) -> Any:
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
        """Per-sample costs or nulls; an unweighted term (energy with w_energy=0) needs a number in [0, MAX_STORED]."""
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
            x = float(v) if abs(v) <= MAX_STORED else math.inf  # (float() of a huge int raises)
            # An estimate is an EMA of accepted per-sample costs: inside the range up to the EMA's
            # rounding (a few ulps), hence the relative tolerance.
            if not (_LOWEST <= x <= _HIGHEST or (unweighted and 0.0 <= x < math.inf)):
                self.fail(
                    f"{field}[{i}]", f"{v!r} is not a cost per sample in [{MIN_PER_SAMPLE:g}, {MAX_PER_SAMPLE:g}]"
                )
            out[i] = x
        return out

    def ident(self, field: str, value: Any, what: str = "participant id") -> str | int:
        if not is_id(value):
            self.fail(field, f"{what} must be str or int, got {value!r}")
        return as_id(value)

    def pairs(self, field: str, value: Any) -> list[Any]:
        if not isinstance(value, list) or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in value):
            self.fail(field, "expected a list of [key, value] pairs")
        return value

    def read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(store attributes, controller attributes)``, or ``ValueError`` naming the first bad field."""
        ctrl = self.ctrl
        version = self.state.get("version")
        if version not in (1, STATE_VERSION):
            raise ValueError(
                f"unsupported controller state version {version!r}; this release reads versions 1 and {STATE_VERSION}"
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
            dropped = [g for g in ctrl.budget if g not in budget] if isinstance(ctrl.budget, dict) else []
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
        cur_hi = self.int_list("current.max_quota", self.get("max_quota", cur), n_cur, 0, int(UNBOUNDED))
        outside = np.flatnonzero((cur_quota < cur_lo) | (cur_quota > cur_hi))
        if len(outside):
            self.fail("current.quota", f"entry {int(outside[0])} is outside its [min_quota, max_quota]")
        raw_budget, cur_groups = self.get("budget", cur), cur.get("groups")
        cur_budget: int | dict[Hashable, int] | None
        if raw_budget is None:  # nothing allocated yet
            if n_cur:
                self.fail("current.budget", "missing for a committed split")
            cur_budget, cur_groups = None, None
        elif ctrl.groups is None:
            cur_budget = self.integer("current.budget", raw_budget, 0, MAX_BUDGET)
            if cur_groups is not None:
                self.fail("current.groups", "set, but this controller is built without groups=")
            if n_cur and exact_sum(cur_quota) != cur_budget:
                self.fail("current.quota", f"sums to {exact_sum(cur_quota)}, not to its budget {cur_budget}")
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
            sums: dict[Hashable, int] = {}
            for g, q in zip(cur_groups, cur_quota.tolist()):
                sums[g] = sums.get(g, 0) + q
            for g, total in sums.items():
                if g not in cur_budget or cur_budget[g] != total:
                    self.fail("current.quota", f"group {g!r} sums to {total}, not to its budget {cur_budget.get(g)!r}")

        hist, fit, idle_w, noise_cache = self.model(self.state.get("model") or {}, count)

        # Bounds come from this controller's configuration (min_quota is not part of the state).
        default_max = ctrl._default_max
        lo = np.array([ctrl._min_map.get(p, ctrl._default_min) for p in ids], dtype=np.int64).reshape(-1)
        hi = np.array(
            [UNBOUNDED if max_map.get(p, default_max) is None else max_map.get(p, default_max) for p in ids],
            dtype=np.int64,
        ).reshape(-1)
        store = {
            "ids": ids,
            "index": {p: i for i, p in enumerate(ids)},
            "tau": tau,
            "eps": eps,
            "unanswered": unanswered.astype(np.int64),
            "lo": lo,
            "hi": hi,
            "hist": hist,
            "fit": fit,
            "noise_cache": noise_cache,
        }
        probe = self.state.get("probe", False)  # absent in states written before excitation existed
        if not isinstance(probe, bool):
            self.fail("probe", f"expected true or false, got {probe!r}")
        return store, {
            "_round": rnd,
            "_probe": probe,
            "_max_map": max_map,
            "_committed": CommittedSplit(cur_slots, cur_quota, cur_lo, cur_hi, cur_budget, cur_groups),
            "groups": groups,
            "budget": budget,
            "_idle_w": idle_w,
        }

    def model(
        self, model: Any, count: int
    ) -> tuple[np.ndarray, np.ndarray, dict[Hashable, float], tuple[np.ndarray, np.ndarray] | None]:
        """The fit windows, identified lines, idle watts (affine costs, drift, min-energy) and the
        scatter of the last fits: their slots, their noise rebuilt from the windows (unchanged
        since those fits), or ``None`` (also when a state written before it was saved lacks it)."""
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
            if np.isinf(arr).any() or np.abs(np.nan_to_num(arr)).max(initial=0.0) > MAX_STORED:
                self.fail(field, "holds an infinite or absurd number")
            return arr

        hist = table("model.history", model.get("history", []), (estimation.WINDOW, 3))
        if (np.nan_to_num(hist, nan=1.0)[..., :2] <= 0).any() or (np.nan_to_num(hist)[..., 2] < 0).any():
            self.fail("model.history", "holds a non-positive sample count or time, or a negative energy")
        fit = table("model.fit", model.get("fit", []), (4,))
        if len(fit) != len(hist):
            self.fail("model.fit", f"has {len(fit)} entries, model.history {len(hist)}")
        idle_w: dict[Hashable, float] = {}
        for i, (p, w) in enumerate(self.pairs("model.idle_w", model.get("idle_w", []))):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
                self.fail(f"model.idle_w[{i}]", f"idle watts must be a finite number >= 0, got {w!r}")
            idle_w[self.ident(f"model.idle_w[{i}]", p)] = float(w)
        # Kept lazily: grown to one row per participant when the options that use them need it.
        if len(hist) and len(hist) < count:
            hist = np.concatenate([hist, np.full((count - len(hist), estimation.WINDOW, 3), np.nan)])
            fit = np.concatenate([fit, np.full((count - len(fit), 4), np.nan)])
        scatter = model.get("scatter_slots")
        if scatter is None or scatter == []:  # (no participant: no scatter either)
            return hist, fit, idle_w, None
        slots = self.int_list("model.scatter_slots", scatter, None, 0, max(count - 1, 0))
        if not len(hist) and len(slots):
            self.fail("model.scatter_slots", "names participants but the state holds no fit windows")
        if len(set(slots.tolist())) != len(slots):
            self.fail("model.scatter_slots", "lists a participant more than once")
        return hist, fit, idle_w, (slots, estimation.time_noise(hist[slots]))
