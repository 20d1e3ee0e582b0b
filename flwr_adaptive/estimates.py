"""The per-participant estimate store of the allocation controller: slots, EMA, affine history, drift, ageing.

Contract
--------
One slot per participant ever registered (and not dropped), arrays indexed by slot:

- ``tau`` / ``eps``: the smoothed seconds / joules per sample (the paper's EMA), NaN = no
  estimate. Each recorded report is one EMA step ``x̂ ← α·x + (1 − α)·x̂``, in the order
  ``observe`` was called; a participant's first report initialises.
- ``unanswered``: positive quotas given since the participant last reported. An estimate whose
  participant left ``forget_after`` of them unanswered is stale: :meth:`EstimateStore.fresh`
  forgets it (the participant is new again).
- ``lo`` / ``hi``: each participant's ``[min_quota, max_quota]``, from the controller's bounds.
- ``hist`` / ``fit`` (only with affine costs or drift detection, grown lazily): the last
  ``estimation.WINDOW`` observations ``(samples, seconds, joules)`` and the last identified line
  ``(a, b, c, d)`` of ``t = a + b·n``, ``e = c + d·n``. A report far from what the model predicts
  (``drift``, or beyond :data:`DRIFT_Z` × the participants' median scatter around the lines of
  windows with :data:`MIN_SCATTER_REPORTS`+ reports when that is more; at the quota measured
  last, against that report)
  rescales the participant's history at once instead of being smoothed in.

How estimates age: by their participant's own history, not by server rounds. An estimate is
dropped (the participant is treated as new again and gets the median cost) once the participant was
given a positive quota ``forget_after`` times in a row without reporting. A node that is sampled
every tenth round and reports each time keeps its estimate; a node that stops answering loses it
after ``forget_after`` unanswered quotas. With every participant in every round this is the same
rule as counting rounds since the last report. Participants that leave for good are dropped
with :meth:`AllocationController.forget` or :meth:`AllocationController.prune`; slots without an
estimate are dropped by ``allocate`` on its own, so the state stays linear in the participants
that have an estimate or are in the current split.

Reports are recorded in O(1) by the controller's ``observe`` (``pending`` / ``pending_new``),
a batch by ``observe_many`` (``pending_blocks``: arrays, in call order), and applied by
:meth:`EstimateStore.flush`, all participants seen for the first time registered together.
:meth:`EstimateStore.model` turns the estimates into each participant's affine time and energy
with the unknowns filled and the clipping rules applied (what the split and the solver use).
The store knows nothing about budgets, groups or the current split: the controller owns those
and renumbers its split when slots are dropped (:meth:`EstimateStore.drop` returns the map).

Cost
----
``flush``: vectorised, O(R) for R recorded reports (one layer per repeat of a participant),
plus one concatenate per array for new participants. ``model`` and ``noise_floor``: O(P·WINDOW)
for P participants. Dropping slots: O(S) for S slots.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from flwr_adaptive import estimation
from flwr_adaptive.limits import ParticipantId

__all__ = ["EstimateStore", "MAX_STORED", "median", "nan_median"]

#: Largest magnitude of a history or fit entry (the state reader refuses more): accepted reports
#: stay far below it (≤ MAX_PER_SAMPLE × MAX_BUDGET ≈ 1e166).
MAX_STORED = 1e300

#: Measured scatters (of log time, around the windows' lines) within which a jump is jitter.
DRIFT_Z = 6.0
#: Fewest reports in a window before its scatter counts (4: identical devices with 30 % jitter
#: moved their split in 39 % of rounds 2–9 (3 reports: 33 %, 6: 50 %) and 2-rank silos followed
#: a 2× step at 10 % jitter in 100 of 100 seeds (3 reports: 48, 6: 99); tests/test_deadband.py).
MIN_SCATTER_REPORTS = 4
#: Take :meth:`EstimateStore.record`'s shortcuts where the plain computation's result is known
#: (full windows, everyone at the last quota, a contiguous history); tests compare both.
SHORTCUTS = True

Bounds = Callable[[list[ParticipantId]], tuple[np.ndarray, np.ndarray]]


class EstimateStore:
    """Per-participant cost estimates, kept in slot-indexed arrays.

    Parameters
    ----------
    bounds : callable
        ``bounds(ids) -> (lo, hi)``: the int64 ``[min_quota, max_quota]`` of newly registered ids.
    smoothing, forget_after, cost_clip, cost_model, drift
        As for ``AllocationController`` (already validated there).
    """

    #: Per-slot arrays (first axis = slot): attribute → (dtype, value of a new slot, shape of one
    #: slot's entry). Registration, rollback and pruning go through this table, so an array
    #: listed here always has one row per participant. ``lo``/``hi`` come from the bounds.
    SLOT_ARRAYS: dict[str, tuple[Any, Any, tuple[int, ...]]] = {
        "tau": (float, math.nan, ()),
        "eps": (float, math.nan, ()),
        "unanswered": (np.int64, 0, ()),
    }
    #: Per-slot arrays kept only by some options (``hist``/``fit``: affine costs, drift): empty
    #: while unused, else grown to one row per participant by ``grow_model`` when needed.
    LAZY_SLOT_ARRAYS: dict[str, tuple[int, ...]] = {"hist": (estimation.WINDOW, 3), "fit": (4,)}

    def __init__(
        self,
        bounds: Bounds,
        smoothing: float,
        forget_after: int,
        cost_clip: float,
        cost_model: str,
        drift: float | None,
    ) -> None:
        self.bounds = bounds
        self.smoothing = smoothing
        self.forget_after = forget_after
        self.cost_clip = cost_clip
        self.cost_model = cost_model
        self.drift = drift
        self.drift_count = 0  # observations flagged as a step change so far (not saved in the state)
        self.index: dict[ParticipantId, int] = {}
        self.ids: list[ParticipantId] = []
        self.tau = np.empty(0)  # smoothed seconds per sample, NaN = no estimate
        self.eps = np.empty(0)  # smoothed joules per sample, NaN = no estimate
        # positive quotas given since the last report: the age of an estimate (see forget_after)
        self.unanswered = np.empty(0, dtype=np.int64)
        self.lo = np.empty(0, dtype=np.int64)
        self.hi = np.empty(0, dtype=np.int64)
        self.pending: list[tuple[int, float, float, int]] = []  # (slot, time, energy, samples)
        # (k, 4) float rows of the same, recorded before ``pending`` (``observe_many``), in call order
        self.pending_blocks: list[np.ndarray] = []
        # reports of participants without a slot yet, registered together at the next flush
        self.pending_new: list[tuple[ParticipantId, float, float, int]] = []
        self.slot_cache: tuple[list[ParticipantId], np.ndarray] = ([], np.empty(0, dtype=np.int64))
        # Beyond the paper (cost_model="affine", drift, min-energy): grown lazily to len(ids).
        self.hist = np.empty((0, estimation.WINDOW, 3))  # last (samples, seconds, joules), NaN = none
        self.fit = np.empty((0, 4))  # last identified (a, b, c, d) of t = a + b·n, e = c + d·n
        # (slots, noise of their time fits) from the last affine_estimates, until hist changes:
        # the gain deadband's noise floor reuses the fits of the same allocate
        self.noise_cache: tuple[np.ndarray, np.ndarray] | None = None
        # (rows, their fit before) of each block affine_estimates wrote since the last checkpoint
        self.fit_undo: list[tuple[np.ndarray | slice, np.ndarray]] = []

    # ------------------------------------------------------------------ slots
    def slots(self, participants: list[ParticipantId]) -> np.ndarray:
        """Slot of each participant, registering new ones (cached for an unchanged list)."""
        cached_ids, cached_slots = self.slot_cache
        if participants == cached_ids:
            return cached_slots
        index = self.index
        new = [p for p in dict.fromkeys(participants) if p not in index]
        if new:
            self.register(new)
        slots = np.fromiter(map(index.__getitem__, participants), dtype=np.int64, count=len(participants))
        self.slot_cache = (list(participants), slots)
        return slots

    def register(self, new: list[ParticipantId]) -> None:
        """Give every id of ``new`` (valid, distinct, unregistered) a slot: one concatenate per array."""
        lo, hi = self.bounds(new)
        start = len(self.ids)
        self.index.update(zip(new, range(start, start + len(new))))
        self.ids.extend(new)
        for name, (dtype, fill, shape) in self.SLOT_ARRAYS.items():
            grown = np.full((len(new), *shape), fill, dtype=dtype)
            setattr(self, name, np.concatenate([getattr(self, name), grown]))
        self.lo = np.concatenate([self.lo, lo])
        self.hi = np.concatenate([self.hi, hi])

    def truncate(self, count: int) -> None:
        """Undo the registrations after the first ``count`` slots (a refused call changes nothing)."""
        if len(self.ids) == count:
            return
        for p in self.ids[count:]:
            del self.index[p]
        del self.ids[count:]
        for name in (*self.SLOT_ARRAYS, *self.LAZY_SLOT_ARRAYS, "lo", "hi"):
            setattr(self, name, getattr(self, name)[:count])
        self.slot_cache = ([], np.empty(0, dtype=np.int64))
        # The fits' scatter sets the next report's drift threshold (record): a question that
        # registered a newcomer (costs) must leave it, or it changes later splits; only a cache
        # that names an undone slot goes.
        cached = self.noise_cache
        if cached is not None and len(cached[0]) and int(cached[0].max()) >= count:
            self.noise_cache = None

    def checkpoint(self) -> tuple[int, tuple[np.ndarray, np.ndarray] | None]:
        """What :meth:`rollback` restores: the slot count and the fits' scatter (pending reports
        flushed first); the fits written from here on are recorded to be undone."""
        self.fit_undo = []
        return len(self.ids), self.noise_cache

    def rollback(self, checkpoint: tuple[int, tuple[np.ndarray, np.ndarray] | None]) -> None:
        """Undo what a refused call did since :meth:`checkpoint`: the fits it wrote (a
        re-levelled line re-levelled twice differs in its last bits), the scatter it cached
        (the next reports' drift threshold) and the slots it registered."""
        for rows, before in reversed(self.fit_undo):
            self.fit[rows] = before
        self.fit_undo = []
        count, self.noise_cache = checkpoint
        self.truncate(count)

    def reset_cache(self) -> None:
        """Forget what is cached by slot (after slots were renumbered or the state replaced)."""
        self.slot_cache = ([], np.empty(0, dtype=np.int64))
        self.noise_cache = None

    def drop(self, dead: np.ndarray) -> np.ndarray:
        """Remove the slots where ``dead`` (a mask over slots) is true; renumber the others.

        Pending reports must be flushed first. Returns the new slot of every old slot (-1 for a
        dropped one), so that the owner can renumber what it keeps by slot.
        """
        if any(len(getattr(self, name)) for name in self.LAZY_SLOT_ARRAYS):
            self.grow_model()  # one row per participant before rows are dropped
        keep = np.flatnonzero(~dead)
        renumber = np.full(len(self.ids), -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        self.ids = [self.ids[i] for i in keep.tolist()]
        self.index = dict(zip(self.ids, range(len(self.ids))))
        for name in (*self.SLOT_ARRAYS, "lo", "hi"):
            setattr(self, name, getattr(self, name)[keep])
        for name in self.LAZY_SLOT_ARRAYS:
            if len(getattr(self, name)):
                setattr(self, name, getattr(self, name)[keep])
        self.reset_cache()
        return renumber

    # ------------------------------------------------------------------ reports
    def add_block(self, rows: np.ndarray) -> None:
        """Record ``rows`` ``(slot, time, energy, samples)`` after everything recorded so far."""
        if self.pending:  # keep the call order: the reports recorded one by one come first
            self.pending_blocks.append(self.pending_rows())
        self.pending_blocks.append(rows)

    def pending_rows(self) -> np.ndarray:
        """``pending`` as a (k, 4) float array, emptied."""
        count = 4 * len(self.pending)
        rows = np.fromiter(itertools.chain.from_iterable(self.pending), dtype=float, count=count).reshape(-1, 4)
        self.pending = []
        return rows

    def clear_pending(self) -> None:
        """Drop every recorded, not yet applied report (a replaced state)."""
        self.pending, self.pending_new, self.pending_blocks = [], [], []

    def flush(self) -> None:
        """Register the new participants together, then apply the recorded reports as EMA steps in call order."""
        if self.pending_new:
            new = [p for p in dict.fromkeys(r[0] for r in self.pending_new) if p not in self.index]
            if new:
                self.register(new)
            index = self.index
            self.pending.extend((index[p], t, e, n) for p, t, e, n in self.pending_new)
            self.pending_new = []
        if not self.pending and not self.pending_blocks:
            return
        blocks = self.pending_blocks
        if self.pending:
            blocks.append(self.pending_rows())
        obs = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        self.pending_blocks = []
        slots = obs[:, 0].astype(np.int64)
        tau_obs = obs[:, 1] / obs[:, 3]
        eps_obs = obs[:, 2] / obs[:, 3]
        every = len(slots) == len(self.ids) and (len(slots) < 2 or bool((slots[1:] > slots[:-1]).all()))
        if every or np.bincount(slots).max() == 1:  # (every slot once, in order: the arrays themselves)
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
            self.grow_model()
        for sel in layers:
            s = slots[sel]
            if tracks_history:
                self.record(s, obs[sel, 3], obs[sel, 1], obs[sel, 2], every)
            for est, new_obs in ((self.tau, tau_obs[sel]), (self.eps, eps_obs[sel])):
                old = est if every else est[s]  # (every: the array itself, read in full before it is written)
                updated = np.where(np.isnan(old), new_obs, a * new_obs + (1.0 - a) * old)
                est[slice(None) if every else s] = np.where(np.isnan(new_obs), old, updated)
        self.unanswered[slice(None) if every else slots] = 0

    def fresh(self, slots: np.ndarray, forget: bool = True) -> np.ndarray:
        """Mask of participants with a fresh estimate; stale ones (``forget_after``) are forgotten.

        An estimate is stale once its participant left ``forget_after`` positive quotas in a
        row unanswered (its own history, not server rounds).
        """
        stale = self.unanswered[slots] >= self.forget_after
        if not forget:
            kept: np.ndarray = ~np.isnan(self.tau[slots]) & ~stale
            return kept
        if stale.any():
            gone = slots[stale]
            self.forget_model(gone)
            self.tau[gone] = np.nan
            self.eps[gone] = np.nan
            self.unanswered[gone] = 0
        known: np.ndarray = ~np.isnan(self.tau[slots])
        return known

    def estimates(self) -> dict[ParticipantId, tuple[float, float | None]]:
        """Smoothed ``(seconds per sample, joules per sample)`` of every participant with an estimate."""
        self.flush()
        # by slot (the index's order): the strategies ask every round, a Python loop over numpy
        # scalars cost ~3 us per participant
        known = np.flatnonzero(~np.isnan(self.tau))
        ids = self.ids
        eps = [None if e != e else e for e in self.eps[known].tolist()]  # e != e: NaN, unmeasured
        return {ids[i]: (t, e) for i, t, e in zip(known.tolist(), self.tau[known].tolist(), eps)}

    def term(self, values: np.ndarray, known: np.ndarray, name: str) -> np.ndarray:
        """Each participant's ratio of ``values`` to their median, clipped to ``cost_clip``."""
        if not known.any():
            return np.ones(len(values))
        v = values[known]
        if np.isnan(v).any():
            raise ValueError(
                f"{name} is unmeasured for some participants but its weight is > 0: "
                "report energy_j from every participant or use a policy with w_energy=0"
            )
        med = median(v)
        if not med > 0:
            raise ValueError(
                f"median {name} per sample is {med!r} (must be > 0 to normalise); "
                f"check the reports or set its weight to 0"
            )
        ratio = np.ones(len(values))
        ratio[known] = np.clip(v / med, 1.0 / self.cost_clip, self.cost_clip)
        return ratio  # participants without an estimate get the median (ratio 1)

    def weighted_cost(self, slots: np.ndarray, known: np.ndarray, w_time: float, w_energy: float) -> np.ndarray:
        """The paper's cost ``c_i = w_t·τ̂_i/median(τ̂) + w_e·ε̂_i/median(ε̂)`` (1 when both weights are 0)."""
        cost = np.zeros(len(slots))
        if w_time > 0:
            cost += w_time * self.term(self.tau[slots], known, "time")
        if w_energy > 0:
            cost += w_energy * self.term(self.eps[slots], known, "energy")
        if w_time == 0 and w_energy == 0:
            cost += 1.0
        return cost

    # ------------------------------------------------------------------ beyond the paper: estimation
    def grow_model(self) -> None:
        """Extend the history and fit arrays to every registered participant."""
        grow = len(self.ids) - len(self.hist)
        if grow > 0:
            self.hist = np.concatenate([self.hist, np.full((grow, estimation.WINDOW, 3), np.nan)])
            self.fit = np.concatenate([self.fit, np.full((grow, 4), np.nan)])

    def predict(self, s: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Seconds and joules that participants ``s`` are expected to need for ``n`` samples."""
        fit = self.fit[s]
        use_fit = self.cost_model == "affine"
        t = np.where(use_fit & ~np.isnan(fit[:, 1]), fit[:, 0] + fit[:, 1] * n, self.tau[s] * n)
        e = np.where(use_fit & ~np.isnan(fit[:, 3]), fit[:, 2] + fit[:, 3] * n, self.eps[s] * n)
        return t, e

    def record(self, s: np.ndarray, n: np.ndarray, t: np.ndarray, e: np.ndarray, every: bool | None = None) -> None:
        """Detect a step change, then append one observation to each of ``s`` (slots unique;
        ``every``: whether ``s`` is every slot in order, ``None``: not known)."""
        threshold: float | np.ndarray = self.drift if self.drift is not None else 0.0
        scatter = 0.0  # DRIFT_Z × the measured scatter of log time (0: not measured)
        if self.drift is not None and self.noise_cache is not None:
            # A jump within DRIFT_Z × the participants' measured scatter (their median: one
            # window's is itself noisy; a 6-point fit's residuals understate it) is jitter, not a
            # step change: rescaling a window to one noisy report made identical devices with 30 %
            # jitter wander (3 ×: the split still moved in 21 % of rounds, 6 ×: 6 %). Only windows
            # of MIN_SCATTER_REPORTS+ reports measure it (a line through 3 reports at moving
            # quotas is mostly misfit); fewer everywhere: the bare ``drift``.
            slots, noise = self.noise_cache
            # (windows: the history itself, no gather, when the fits were of every slot in order)
            times = self.windows(slots)[:, :, 1]
            if not (SHORTCUTS and times.shape[1] >= MIN_SCATTER_REPORTS and np.isfinite(times).all()):  # (all full)
                noise = np.where(np.isfinite(times).sum(axis=1) >= MIN_SCATTER_REPORTS, noise, np.nan)
            if np.isfinite(noise).any():
                scatter = DRIFT_Z * nan_median(noise)
                threshold = max(self.drift, math.expm1(scatter))
        self.noise_cache = None
        if every is None:  # every slot in order
            every = len(s) == len(self.hist) and (len(s) < 2 or bool((s[1:] > s[:-1]).all()))
        if self.drift is not None:
            rows = self.hist if every else self.hist[s]  # (the history itself: views)
            fit = self.fit if every else self.fit[s]
            last_n = rows[:, -1, 0]
            # Without a fitted line, judge against the last observation's cost per sample: the EMA
            # mixes observations at other quotas, and a fixed cost makes their per-sample costs
            # differ (a device with a 40 % fixed share measured at 600 and then 2,000 samples
            # looks 25 % "faster" at 2,300 than its EMA says, with no drift at all).
            # At the quota measured last, the last report is the same work timed again: it needs no
            # model (a line through a few reports at other quotas can miss it by more than the
            # jitter: 3 reports of a rank at 200, 65, 41 samples mispredicted 41 by 60 % and hid a
            # 2× speed-up). The difference of two reports holds the jitter twice: the noise-scaled
            # threshold widens by √2 there.
            repeat = n == last_n
            # (everyone at the quota measured last, a settled split: the masks below select everyone,
            # the widened threshold is everyone's and every observation is near: none is computed)
            repeated = SHORTCUTS and bool(repeat.all())
            no_line = repeat if repeated else (self.cost_model != "affine") | np.isnan(fit[:, 1]) | repeat
            if scatter > 0:
                widened = max(self.drift, math.expm1(scatter * math.sqrt(2)))
                threshold = widened if repeated else np.where(repeat, widened, threshold)
            by_last = no_line & ~np.isnan(last_n)
            with np.errstate(divide="ignore", invalid="ignore"):
                last_t = rows[:, -1, 1] / last_n * n
                last_e = rows[:, -1, 2] / last_n * n
            if by_last.all():  # (a settled split: every quota the last one) no model prediction is kept
                pred_t, pred_e = last_t, last_e
            else:
                pred_t, pred_e = self.predict(s, n)
                pred_t = np.where(by_last, last_t, pred_t)
                pred_e = np.where(by_last, last_e, pred_e)
            # Far from the last quota a prediction extrapolates (a fixed cost, or a fitted line's
            # noise, looks like drift there): only judge observations near the quota measured last.
            jump = estimation.drifted(t, pred_t, threshold) | estimation.drifted(e, pred_e, threshold)
            if not repeated:  # (at the last quota n / last_n is exactly 1: near)
                jump &= np.abs(n / last_n - 1.0) <= 0.25
            if jump.any():
                j = s[jump]
                scale_t = (t / pred_t)[jump]
                with np.errstate(divide="ignore", invalid="ignore"):  # no energy predicted: scale 1
                    ratio_e = e / pred_e
                scale_e = np.where(np.isfinite(ratio_e), ratio_e, 1.0)[jump]
                with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                    self.hist[j, :, 1] *= scale_t[:, None]
                    self.hist[j, :, 2] *= scale_e[:, None]
                    self.fit[j, 0:2] *= scale_t[:, None]
                    self.fit[j, 2:4] *= scale_e[:, None]
                # A jump across most of the float range can push the rescaled window out of what
                # is computable (and saveable): such a window says nothing; it restarts.
                rescaled = np.concatenate([self.hist[j].reshape(len(j), -1), self.fit[j]], axis=1)
                with np.errstate(invalid="ignore"):
                    wild = ~(np.nan_to_num(np.abs(rescaled), nan=1.0) <= MAX_STORED).all(axis=1)
                    wild |= (np.nan_to_num(self.hist[j, :, 1], nan=1.0) <= 0).any(axis=1)
                if wild.any():
                    self.hist[j[wild]] = np.nan
                    self.fit[j[wild]] = np.nan
                self.tau[j] = np.nan  # the EMA restarts from this observation
                self.eps[j] = np.nan
                self.drift_count += int(jump.sum())
        hist = self.hist
        if every:
            # every slot in order (everyone reported): slices, not a gather and a scatter of all
            # windows; contiguous, the shift is one move of the whole array by one observation
            # (each window's oldest is overwritten by its next, its newest slot by the next
            # window's oldest, then by the new observation): not ~P short strided copies
            if SHORTCUTS and hist.flags.c_contiguous:
                flat = hist.reshape(-1)
                flat[:-3] = flat[3:]
            else:
                hist[:, :-1] = hist[:, 1:]
            hist[:, -1, 0], hist[:, -1, 1], hist[:, -1, 2] = n, t, e
        else:
            hist[s, :-1] = hist[s, 1:]
            hist[s, -1] = np.stack([n, t, e], axis=1)

    def forget_model(self, gone: np.ndarray) -> None:
        """Drop the history and fits of participants whose estimate is dropped."""
        self.noise_cache = None
        if len(self.hist):
            gone = gone[gone < len(self.hist)]
            self.hist[gone] = np.nan
            self.fit[gone] = np.nan

    def affine_estimates(self, slots: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(a, b, c, d)`` per participant from its window; the last identified line re-levelled
        when the window does not identify one, the per-sample estimate before that.

        Time and energy are fitted in one call (their rows stacked: the fit is row by row), and
        participants a block of ``estimation.FIT_BLOCK`` at a time (each participant's line is its
        own: the same results), so that the transposed windows and the fit's temporaries stay in
        the cache.
        """
        self.grow_model()
        block = estimation.FIT_BLOCK
        # every slot in order (all participants of the store): blocks are slices, not gathers
        every = len(slots) == len(self.ids) and (len(slots) < 2 or bool((slots[1:] > slots[:-1]).all()))
        blocks = [slice(s, s + block) if every else slots[s : s + block] for s in range(0, len(slots), block)]
        if len(blocks) == 1:
            out, noise = self._affine_block(blocks[0])
        else:
            parts = [self._affine_block(rows) for rows in blocks]
            out = tuple(np.concatenate([part[0][i] for part in parts]) for i in range(4))
            noise = np.concatenate([part[1] for part in parts])
        self.noise_cache = (slots, noise)
        return out

    def windows(self, slots: np.ndarray) -> np.ndarray:
        """``hist[slots]`` to read: the array itself (no copy) when ``slots`` is every slot in order."""
        if len(slots) == len(self.hist) and (len(slots) < 2 or bool((slots[1:] > slots[:-1]).all())):
            return self.hist
        rows: np.ndarray = self.hist[slots]
        return rows

    def _affine_block(self, slots: np.ndarray | slice) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """:meth:`affine_estimates` of distinct ``slots`` (or a slice of them), and the noise of their time fits."""
        n, (fa, fb, fidentified, fnoise, ffilled, fsum) = estimation.fit_rows(self.hist[slots])
        # Time and energy side by side, (K, P) rows (k = 0: fit columns a, b; k = 1: c, d), one numpy
        # call for both; a copy (read while self.fit is written), its transpose what a rollback restores
        self.fit_undo.append((slots, (lines := np.ascontiguousarray(self.fit[slots].T)).T))
        stored_a, stored_b = lines[0::2], lines[1::2]
        with np.errstate(divide="ignore", invalid="ignore"):
            predicted = stored_a + stored_b * n[:, None, :]  # (WINDOW, K, P)
            if ffilled is not None:
                predicted = np.where(ffilled, predicted, 0.0)
            level = fsum / predicted.sum(axis=0)
            relevel = ~fidentified & ~np.isnan(stored_b) & np.isfinite(level) & (level > 0)
        if SHORTCUTS and not fidentified.any() and relevel.all():  # (a settled split: every line re-levelled)
            a = new_a = stored_a * level
            b = new_b = stored_b * level
        else:
            per_sample = np.stack([self.tau[slots], self.eps[slots]])
            a = np.where(fidentified, fa, np.where(relevel, stored_a * level, 0.0))
            b = np.where(fidentified, fb, np.where(relevel, stored_b * level, per_sample))
            keep = fidentified | relevel  # the entries not kept get their own values back:
            new_a, new_b = (a, b) if keep.all() else (np.where(keep, a, stored_a), np.where(keep, b, stored_b))
        for k in range(2):  # by column: a write through the (K, P) -> (P, 2) transpose costs ~4x as much
            self.fit[slots, 2 * k], self.fit[slots, 2 * k + 1] = new_a[k], new_b[k]
        return (a[0], b[0], a[1], b[1]), fnoise[0]

    def noise_floor(self, slots: np.ndarray) -> float:
        """The predicted gain that jitter alone produces: 3 × the median relative scatter of the
        participants' recent times around their model, over √(window); capped at 0.1."""
        if not len(self.hist):
            return 0.0  # no history kept (cost_model="per-sample" without drift detection)
        cached = self.noise_cache
        if cached is not None and (cached[0] is slots or np.array_equal(cached[0], slots)):
            noise = cached[1]  # the time fits of this allocate (affine costs), hist unchanged since
        else:
            self.grow_model()
            hist = self.hist[slots]
            noise = estimation.fit_affine(hist[..., 0], hist[..., 1])[3]
        if not np.isfinite(noise).any():
            return 0.0
        return min(0.1, 3.0 * nan_median(noise) / math.sqrt(estimation.WINDOW))

    def model(self, slots: np.ndarray, known: np.ndarray, budget_total: int) -> tuple[np.ndarray, ...]:
        """Time ``a + b·n`` and active energy ``c + d·n`` of each participant (``d`` NaN: no energy
        figures anywhere), with the unknowns and the clipping rules of the weighted cost."""
        if self.cost_model == "affine":
            a, b, c, d = self.affine_estimates(slots)
        else:
            a, b = np.zeros(len(slots)), self.tau[slots].copy()
            c, d = np.zeros(len(slots)), self.eps[slots].copy()
        # Every participant known (the steady state): the masks below select every entry, so the
        # arrays themselves stand for their masked copies (the same values in the same order).
        everyone = bool(known.all())
        if not everyone:
            a, b, c, d = (np.where(known, x, np.nan) for x in (a, b, c, d))
        med_b = nan_median(b if everyone else b[known])
        if not med_b > 0:
            raise ValueError(f"median time per sample is {med_b!r} (must be > 0); check the reports")
        b = np.clip(b if everyone else np.where(known, b, med_b), med_b / self.cost_clip, med_b * self.cost_clip)
        share = med_b * budget_total / max(len(slots), 1)  # the median participant's equal-share time
        a = np.clip(a if everyone else np.where(known, a, nan_median(a[known])), 0.0, self.cost_clip * share)
        measured = known & ~np.isnan(d)
        if not measured.any():
            return a, b, c, np.full(len(slots), np.nan)
        if measured.all():
            power = median(d / b)  # watts of the median participant
        else:
            power = median(d[measured] / b[measured])
            d = np.where(measured, d, power * b)
            c = np.where(measured, c, power * a)
        if not power >= 0:
            raise ValueError(f"median active power is {power!r} W (must be >= 0); check energy_j")
        d = np.clip(d, power * b / self.cost_clip, power * b * self.cost_clip)
        c = np.clip(c, 0.0, power * a * self.cost_clip + power * share)
        return a, b, c, d


def nan_median(v: np.ndarray) -> float:
    """``np.nanmedian`` of a 1-D array (NaN when empty), without its dispatch and copies: the
    median of the non-NaN values, the same value (a median does not depend on the order)."""
    nan = np.isnan(v)
    if nan.any():
        v = v[~nan]
    return median(v) if len(v) else math.nan


def median(v: np.ndarray) -> float:
    """``float(np.median(v))`` of a non-empty 1-D float array, the same value, by the one
    partition ``np.median`` itself does (the middle element, or the two middle ones added and
    halved as its mean of them does; NaN when ``v`` holds a NaN, which a partition puts last)
    without its dispatch through ``_ureduce`` (~20 µs a call: several per ``allocate``). Its mean
    sums from ``+0.0``, so ``0.0 +`` below: a median of ``-0.0`` values is ``0.0``, as there."""
    size = len(v)
    k = size // 2
    if size % 2:
        part = np.partition(v, (k, size - 1))
        middle = 0.0 + float(part[k])
    else:
        part = np.partition(v, (k - 1, k, size - 1))
        middle = (0.0 + float(part[k - 1] + part[k])) / 2
    return math.nan if math.isnan(part[-1]) else middle
