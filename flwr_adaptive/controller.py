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
``observe`` validates and records (O(1), no numpy; ``observe_many`` a round's reports at once,
vectorised); ``allocate`` registers all participants seen for the first time in one step,
applies the recorded EMA steps, computes costs and solves the bounded split vectorised:
O(P log P) for P live participants (a sort over the bounds' breakpoints), plus one loop over groups.

Where the rest lives
--------------------
What is accepted (the :class:`Report`, the numeric limits, the refusals): ``flwr_adaptive.limits``.
The per-participant estimates (EMA, affine history, drift, how estimates age):
``flwr_adaptive.estimates``. The bounded integer split: ``flwr_adaptive.split``; the affine and
min-energy splits: ``flwr_adaptive.solver``. The saved state: ``flwr_adaptive.state_format``.
The named policies: ``flwr_adaptive.policies``. This round's proposed split (the option's
solver): ``flwr_adaptive.proposal``; the committed split and the deadband that keeps it:
``flwr_adaptive.deadband``. This module holds the API: it checks the arguments, records the
reports, commits the split and keeps the per-participant settings.

This module imports numpy only: it is shared by the Flower strategies, the DDP launcher and the
experiments, none of which it knows about.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from flwr_adaptive.batch_reports import observe_many
from flwr_adaptive.deadband import CommittedSplit
from flwr_adaptive.estimates import EstimateStore
from flwr_adaptive.excitation import excite
from flwr_adaptive.limits import (
    MAX_BUDGET,
    MAX_COST_CLIP,
    MAX_IDLE_W,
    MAX_PER_SAMPLE,
    MAX_WEIGHT,
    MIN_PER_SAMPLE,
    MIN_WEIGHT,
    NEVER,
    UNBOUNDED,
    ParticipantId,
    Report,
    as_id,
    check_budget_groups,
    check_drift,
    check_fixed_seconds,
    check_idle_watts,
    check_int,
    check_participants,
    check_settings,
    check_slack,
    id_list,
    parse_bound,
    show,
    store_bound,
    validate_report,
)
from flwr_adaptive.policies import (
    BEYOND_PAPER,
    COST_MODELS,
    DEADBAND_RULES,
    OBJECTIVES,
    PAPER_SETTINGS,
    POLICIES,
    Policy,
)
from flwr_adaptive.proposal import propose
from flwr_adaptive.split import group_codes
from flwr_adaptive.state_format import StateReader, write_state

__all__ = [
    "AllocationController",
    "Report",
    "Policy",
    "POLICIES",
    "PAPER_SETTINGS",
    "BEYOND_PAPER",
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
        ``set_min_quota`` / ``set_max_quota`` change one participant's bound later.
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
        w_time, w_energy, smoothing, deadband, cost_clip = check_settings(
            w_time=w_time, w_energy=w_energy, smoothing=smoothing, deadband=deadband, cost_clip=cost_clip
        )
        for name, value, allowed in (
            ("objective", objective, OBJECTIVES),
            ("cost_model", cost_model, COST_MODELS),
            ("deadband_rule", deadband_rule, DEADBAND_RULES),
        ):
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, allowed))}")
        slack, drift = check_slack(slack), check_drift(drift)
        self.objective = objective
        self.slack = slack
        self.deadband_rule = deadband_rule
        forget_after = min(check_int("forget_after", forget_after, minimum=1), NEVER)
        self.w_time, self.w_energy = w_time, w_energy
        self.deadband = deadband

        self.budget, self.groups = check_budget_groups(budget, groups)

        min_default, self._min_map = parse_bound("min_quota", min_quota, default=0)
        self._default_min = 0 if min_default is None else min_default  # parse_bound refuses min_quota=None
        self._default_max, self._max_map = parse_bound("max_quota", max_quota, default=None)
        if self._default_max is not None and self._default_max < self._default_min:
            raise ValueError(f"max_quota={self._default_max} is below min_quota={self._default_min}")

        # Learned state: the estimates, one slot per participant ever seen (see EstimateStore).
        self._store = EstimateStore(
            self._bounds,
            smoothing=smoothing,
            forget_after=forget_after,
            cost_clip=cost_clip,
            cost_model=cost_model,
            drift=drift,
        )
        self._round = 0  # number of allocate() calls so far
        self._probe = False  # the last split was an excitation (excitation.py): the deadband does not hold it
        self._committed = CommittedSplit()  # the committed split and what it was computed under
        self._idle_w: dict[ParticipantId, float] = {}
        self._fixed_s: dict[ParticipantId, float] = {}  # per-round seconds beyond the reported compute

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

    def set_max_quota(self, participant: ParticipantId, max_quota: int | None) -> None:
        """Set (or with ``None`` remove) one participant's upper bound, e.g. its local data size.

        A bound above ``MAX_BUDGET`` cannot bind and is stored as ``MAX_BUDGET``.
        """
        self._set_bound(store_bound(self._max_map, "max_quota", participant, max_quota))

    def set_min_quota(self, participant: ParticipantId, min_quota: int | None) -> None:
        """Set (or with ``None`` remove: the default ``min_quota`` applies) one participant's lower bound."""
        self._set_bound(store_bound(self._min_map, "min_quota", participant, min_quota))

    def _set_bound(self, participant: ParticipantId) -> None:
        if (slot := self._store.index.get(participant)) is not None:  # a registered slot holds its bounds
            (self._store.lo[slot],), (self._store.hi[slot],) = self._bounds([participant])

    def set_group(self, participant: ParticipantId, group: Hashable, budget: int | None = None) -> None:
        """Put ``participant`` in ``group`` (controllers built with ``groups=`` only).

        ``budget`` sets or changes that group's budget; a group never given one must get it here.
        A participant that changes group releases the deadband (its old split no longer applies).
        """
        if self.groups is None or not isinstance(self.budget, dict):
            raise ValueError("set_group needs a controller built with groups= (and budget={group: int})")
        participant = as_id(participant)
        group = as_id(group, "group name")
        if budget is not None:
            budget = check_int(f"budget[{group!r}]", budget, maximum=MAX_BUDGET)
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
        participant = as_id(participant)
        if watts is None:
            self._idle_w.pop(participant, None)
            return
        self._idle_w[participant] = check_idle_watts(participant, watts)

    def set_fixed_time(self, participant: ParticipantId, seconds: float | None) -> None:
        """Set (or with ``None`` forget) the seconds per round ``participant`` costs beyond its
        reported compute (what a server observes: start-up, polling, transfer); they are added
        to its affine model's fixed term ``a`` when splitting and predicting."""
        participant = as_id(participant)
        if seconds is None:
            self._fixed_s.pop(participant, None)
            return
        self._fixed_s[participant] = check_fixed_seconds(participant, seconds)

    def _max_of(self, participant: ParticipantId) -> int:
        bound = self._max_map.get(participant, self._default_max)
        return UNBOUNDED if bound is None else bound

    # ------------------------------------------------------------------ observe
    def observe(self, participant: ParticipantId, report: Report) -> None:
        """Record one round's report of ``participant``; raises ``ValueError`` on bad input.

        Refused (and nothing recorded): non-finite or non-positive ``time_s``, ``samples`` not
        an int in ``[1, MAX_BUDGET]``, negative ``energy_j``, a per-sample time (or, with
        ``w_energy > 0``, energy) outside ``[MIN_PER_SAMPLE, MAX_PER_SAMPLE]``, an energy per
        sample above ``MAX_PER_SAMPLE`` (with ``w_energy = 0`` too: the energy is still kept,
        for drift detection, min-energy and the saved state), ``energy_j=None``
        with ``w_energy > 0``, an id that is not ``str`` or ``int``. A participant seen for the
        first time gets its slot at the next ``allocate`` (all new ones together).
        """
        # Fast path first: this runs once per participant per round.
        exact = type(report) is Report
        t: Any
        e: Any
        n: Any
        if exact:
            t, e, n = report.time_s, report.energy_j, report.samples
        else:  # not a Report: validated below (the fields may be missing)
            t = getattr(report, "time_s", None)
            e = getattr(report, "energy_j", None)
            n = getattr(report, "samples", None)
        if not (
            exact
            and type(n) is int
            and 0 < n <= MAX_BUDGET
            and type(t) is float
            and MIN_PER_SAMPLE <= t / n <= MAX_PER_SAMPLE
            and (
                (e is None and self.w_energy == 0.0)
                or (
                    type(e) is float
                    and (
                        MIN_PER_SAMPLE <= e / n <= MAX_PER_SAMPLE
                        or (self.w_energy == 0.0 and 0.0 <= e / n <= MAX_PER_SAMPLE)
                    )
                )
            )
        ):
            t, e, n = self._validate(participant, report, t, e, n)
        if e is None:
            e = math.nan
        store = self._store
        try:
            slot = store.index.get(participant)
        except TypeError:  # unhashable: not an id
            raise ValueError(
                f"participant id must be str or int, got {show(participant)} ({type(participant).__name__})"
            ) from None
        if slot is not None and (type(participant) is str or type(participant) is int):
            store.pending.append((slot, t, e, n))
        else:
            store.pending_new.append((as_id(participant), t, e, n))

    def observe_many(self, ids: Sequence[ParticipantId], samples: Any, time_s: Any, energy_j: Any = None) -> None:
        """``observe(ids[i], Report(time_s[i], energy_j[i] (None: all None), samples[i]))`` for each i,
        in order, vectorised (``flwr_adaptive.batch_reports``): same refusals, messages and state."""
        observe_many(
            self, ids, samples, time_s, energy_j, vectorised=type(self).observe is AllocationController.observe
        )

    def _validate(self, participant: Any, report: Any, t: Any, e: Any, n: Any) -> tuple[float, float | None, int]:
        """The report's ``(time_s, energy_j, samples)`` as numbers, or ``ValueError`` naming the field."""
        return validate_report(participant, report, t, e, n, self.w_energy)

    # ------------------------------------------------------------------ internal state
    def _bounds(self, new: list[ParticipantId]) -> tuple[np.ndarray, np.ndarray]:
        """``[min_quota, max_quota]`` of participants getting a slot (the store asks at registration)."""
        lo = np.array([self._min_map.get(p, self._default_min) for p in new], dtype=np.int64)
        hi = np.array([self._max_of(p) for p in new], dtype=np.int64)
        return lo, hi

    # The estimation settings live in the store (one source of truth); read-only here.
    smoothing = property(lambda self: self._store.smoothing, doc="EMA weight of the newest observation.")
    forget_after = property(lambda self: self._store.forget_after, doc="Unanswered quotas before forgetting.")
    cost_clip = property(lambda self: self._store.cost_clip, doc="Clip range of each term's ratio to its median.")
    cost_model = property(lambda self: self._store.cost_model, doc='``"per-sample"`` or ``"affine"``.')
    drift = property(lambda self: self._store.drift, doc="Step-change threshold, ``None``: disabled.")

    drift_count = property(lambda self: self._store.drift_count, doc="Step changes flagged so far (not saved).")

    def _slots(self, participants: list[ParticipantId]) -> np.ndarray:
        """Slot of each participant in the estimate store, registering new ones."""
        return self._store.slots(participants)

    def _drop_slots(self, dead: np.ndarray) -> None:
        """Remove the slots where ``dead`` (a mask over slots) is true; renumber the current split.

        Pending reports must be flushed first. Dropping a participant of the current split
        forgets the split (the deadband releases: the participant set changed anyway).
        """
        self._committed.renumber(self._store.drop(dead))

    def _compact(self) -> None:
        """Drop slots that hold nothing: no estimate and not in the current split."""
        dead = np.isnan(self._store.tau)
        dead[self._committed.slots] = False
        if dead.any():
            self._drop_slots(dead)

    def forget(self, participants: Sequence[ParticipantId], config: bool = False) -> None:
        """Drop what was learned about ``participants`` (unknown ids are ignored).

        Use it for participants that left for good (e.g. a node id that will not come back), so
        that the state stays linear in live participants. A forgotten participant that returns
        is new again. With ``config=True`` its ``min_quota``/``max_quota`` entries, its idle
        power and its group are dropped too. Forgetting a participant of the current split releases the deadband.
        """
        ids = [as_id(p) for p in id_list(participants)]
        self._store.flush()
        slots = [self._store.index[p] for p in ids if p in self._store.index]
        if slots:
            dead = np.zeros(len(self._store.ids), dtype=bool)
            dead[slots] = True
            self._drop_slots(dead)
        if config:
            for p in ids:
                self._max_map.pop(p, None)
                self._min_map.pop(p, None)
                self._idle_w.pop(p, None)
                self._fixed_s.pop(p, None)
                if self.groups is not None:
                    self.groups.pop(p, None)

    def prune(self, keep: Sequence[ParticipantId], config: bool = False) -> list[ParticipantId]:
        """Forget every participant not in ``keep``; returns the ids forgotten (see ``forget``)."""
        live = {as_id(p) for p in id_list(keep)}
        self._store.flush()
        gone = [p for p in self._store.ids if p not in live]
        if config:
            known = set(self._max_map) | set(self._min_map) | set(self._idle_w) | set(self.groups or ())
            gone += [p for p in known if p not in live and p not in self._store.index]
        self.forget(gone, config=config)
        return gone

    def estimates(self) -> dict[ParticipantId, tuple[float, float | None]]:
        """Smoothed ``(seconds per sample, joules per sample)`` of every participant with an estimate."""
        return self._store.estimates()

    def predict_seconds(self, quotas: Mapping[ParticipantId, int]) -> dict[ParticipantId, float]:
        """Seconds each participant with an estimate is expected to need for its quota.

        The cost model in use (affine ``a + b·n`` once fitted, else the smoothed per-sample cost
        × n) plus its fixed time (``set_fixed_time``); participants without an estimate are left
        out. Registers no participant.
        """
        store = self._store
        store.flush()
        store.grow_model()
        known = [(p, store.index[p], int(n)) for p, n in quotas.items() if p in store.index]
        if not known:
            return {}
        slots = np.array([s for _, s, _ in known], dtype=np.int64)
        t, _ = store.predict(slots, np.array([n for _, _, n in known], dtype=float))
        t = t + np.array([self._fixed_s.get(p, 0.0) for p, _, _ in known], dtype=float)
        return {p: float(v) for (p, _, _), v in zip(known, t) if math.isfinite(v) and v > 0}

    def costs(self, participants: Sequence[ParticipantId]) -> dict[ParticipantId, float]:
        """The combined dimensionless cost ``c_i`` the next ``allocate(participants)`` would use."""
        participants = check_participants(participants)
        self._store.flush()
        registered = len(self._store.ids)
        try:
            slots = self._slots(participants)
            cost = self._store.weighted_cost(slots, self._store.fresh(slots, forget=False), self.w_time, self.w_energy)
            return dict(zip(participants, cost.tolist()))
        finally:
            self._store.truncate(registered)  # a question registers nobody

    @property
    def current(self) -> dict[ParticipantId, int]:
        """The committed split (what the last ``allocate`` returned)."""
        cur = self._committed
        return dict(zip((self._store.ids[s] for s in cur.slots.tolist()), cur.quota.tolist()))

    # ------------------------------------------------------------------ allocate
    def allocate(self, participants: Sequence[ParticipantId]) -> dict[ParticipantId, int]:
        """Return this round's split ``{participant: samples}`` and commit it as the current one.

        Raises
        ------
        ValueError
            On duplicate or ill-typed ids, a participant without a group (with ``groups``), or
            bounds that cannot hold a group's budget (``Σ min_quota > budget`` or
            ``Σ max_quota < budget``).
        """
        participants = check_participants(participants, self._store.slot_cache[0])
        self._store.flush()
        checkpoint = self._store.checkpoint()
        try:
            slots = self._slots(participants)
            quotas = self._split(participants, slots)
        except BaseException:
            self._store.rollback(checkpoint)  # a refused call registers nobody and fits nothing
            raise
        return dict(zip(participants, quotas.tolist()))

    def _split(self, participants: list[ParticipantId], slots: np.ndarray) -> np.ndarray:
        """Compute and commit this round's split; raises before changing anything."""
        known = self._store.fresh(slots, forget=False)
        lo, hi = self._store.lo[slots], self._store.hi[slots]
        bad = np.flatnonzero(lo > hi)
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"participant {participants[i]!r}: min_quota {lo[i]} exceeds max_quota {hi[i]}")
        codes, names = group_codes(participants, self.groups)
        budgets = [self.budget[g] for g in names] if isinstance(self.budget, dict) else [self.budget]
        proposal = propose(
            self._store,
            participants,
            slots,
            known,
            lo,
            hi,
            codes,
            names,
            budgets,
            objective=self.objective,
            w_time=self.w_time,
            w_energy=self.w_energy,
            slack=self.slack,
            fixed_s=self._fixed_s,
            idle_w=self._idle_w,
        )
        group_of = None if self.groups is None else [names[c] for c in codes.tolist()]
        # time only: the recent reports say whether the held split is balanced within their noise
        balance = self.objective == "weighted" and self.w_energy == 0 and self.w_time > 0
        kept = self._committed.kept(
            deadband=self.deadband,
            rule=self.deadband_rule,
            budget=self.budget,
            slot_count=len(self._store.ids),
            slots=slots,
            lo=lo,
            hi=hi,
            proposed=proposal.split,
            codes=codes,
            budgets=budgets,
            group_of=group_of,
            predicted=proposal.predicted,
            bound=proposal.bound,
            noise_floor=self._store.noise_floor,
            history=self._store.windows(slots) if balance and len(self._store.hist) == len(self._store.ids) else None,
            fixed=np.array([self._fixed_s.get(p, 0.0) for p in participants]) if self._fixed_s else None,
            balance_times=balance,
        )
        quotas = proposal.split() if kept is None or self._probe else kept  # solved only when not kept
        # Commit: nothing above changed the controller.
        self._store.fresh(slots, forget=True)
        self._round += 1
        kept = None if self._probe else kept  # an excited split is not held
        excited = None if kept is not None else excite(self._store, slots, quotas, lo, hi, codes)
        quotas, kept, self._probe = (quotas, kept, False) if excited is None else (excited, None, True)
        if kept is None:  # quotas is kept otherwise
            self._committed = CommittedSplit(slots.copy(), quotas, lo, hi, copy.deepcopy(self.budget), group_of)
        self._store.unanswered[slots[quotas > 0]] += 1
        self._compact()
        return quotas

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
        """The learned state as plain JSON types (ids keep their str / int type); see ``state_format``."""
        return write_state(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned (also after a ``json`` round-trip).

        The controller must be built with the same arguments as the one that saved the state.
        Everything is checked before anything changes: a state that is not what ``state_dict``
        writes (wrong lengths or types, non-positive or non-finite costs, a split that does not
        sum to its budget, another policy's weights) raises a ``ValueError`` naming the field,
        and the controller stays as it was. Version 1 states (estimates aged by server rounds)
        are converted: the rounds since a participant's last report count as unanswered quotas.
        """
        store, loaded = StateReader(self, state).read()
        self._store.clear_pending()
        self._store.reset_cache()  # then the state's own scatter (``noise_cache``), if it has one
        for name, value in store.items():
            setattr(self._store, name, value)
        for name, value in loaded.items():
            setattr(self, name, value)
