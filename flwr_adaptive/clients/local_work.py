"""The local work behind a client's update: optimizer steps, momentum, learning rate, proximal μ.

Contract
--------
Normalised aggregation (``weighting="normalized"``, :mod:`flwr_adaptive.normalized_averaging`)
needs, per reply, how much local work produced the update. The telemetry wrapper opens one
:class:`StepCounter` per training call (:func:`counting`) and reports :meth:`StepCounter.metrics`:

============================  ==========================================================================
``keys.LOCAL_STEPS``          torch optimizer steps taken inside the call (process-wide
                              ``torch.optim`` step hooks, attributed to the call running in this
                              thread through a context variable). Optimizers over overlapping
                              parameters add up (one rebuilt each epoch; a second phase over the
                              same model); over disjoint ones the most stepped set counts (an
                              encoder's and a decoder's optimizer each stepping once per batch
                              took τ steps, not 2τ); -1 when none was seen (no torch, or torch
                              imported only inside the call)
``keys.LOCAL_MOMENTUM``       ``momentum=`` given to the wrapper, else the ``momentum`` of the largest
                              parameter group of that set's latest optimizer (SGD, RMSprop; on a tie
                              of steps, the set with more elements); -1 when unknown (e.g. Adam,
                              which has none: the server counts it as plain SGD)
``keys.LOCAL_LR``             the ``lr`` of that group at its last step; -1 when unknown
``keys.LOCAL_PROXIMAL_MU``    ``proximal_mu=`` given to the wrapper, else the μ Flower's FedProx sent in
                              the round's config (``keys.FEDPROX_MU_KEYS``: FedProx requires the
                              client to apply it), else 0.0
============================  ==========================================================================

Each step's end is also stamped on the wall clock (:meth:`StepCounter.stamp`; without a torch
optimizer call :func:`flwr_adaptive.clients.telemetry.mark_step` after each step): the telemetry
wrapper reports the call's time beyond its steady steps as ``keys.SETUP_S``
(:meth:`StepCounter.setup_s`).

A key your train function put in the reply itself (e.g. ``local-steps`` counted by hand, for a
framework other than torch) is kept: the wrapper adds only the keys that are absent.

What the keys cannot say is warned about, once per process, with the fix, at an optimizer's
first step in a call: a momentum buffer carried over from an earlier round (the optimizer was
built once and reused: the update then holds more work than its steps say; build it inside the
train function, or ``optimizer.state.clear()`` each round), Nesterov momentum or
``dampening`` > 0 (counted as heavy-ball momentum: Nesterov's work is understated, up to
(1 + ρ)× at one step, dampening's overstated), parameter groups with different momenta (the
largest group's is reported), a second optimizer over other parameters in the same call, and
(at its step) an optimizer stepping in another thread while a call runs (context variables do
not follow a new thread). Weight decay and learning-rate schedules within the round are not
modelled (the last step's rate is reported).

Cost
----
Per optimizer step: two context-variable reads, a dict lookup and a clock read; per optimizer
and call, once: a pass over its parameter groups and its state (the checks above).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from flwr_adaptive import keys
from flwr_adaptive._logging import logger

__all__ = ["StepCounter", "begin_counting", "counting", "end_counting", "fedprox_mu"]

_CURRENT: contextvars.ContextVar[StepCounter | None] = contextvars.ContextVar("flwr_adaptive_steps", default=None)
_HOOKED: list[Any] = []  # the process-wide hook's handle, once torch is loaded


def _finite(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def fedprox_mu(config: Mapping[str, Any]) -> float | None:
    """The proximal μ Flower's FedProx sent in the round's config (``None``: none sent)."""
    for key in keys.FEDPROX_MU_KEYS:
        if key in config:
            return _finite(config[key])
    return None


class StepCounter:
    """Counts the optimizer steps of one wrapped training call (see the module docstring).

    Parameters
    ----------
    momentum : float, optional
        The local optimizer's momentum, when the wrapper cannot read it (or to override it).
    proximal_mu : float, optional
        The proximal μ the train function applies (overrides FedProx's config entry; 0.0 when
        your client ignores FedProx's ``proximal-mu``).
    clock : callable
        The wall clock that stamps the end of each step (``time.perf_counter``; tests pass fakes).
    """

    def __init__(
        self, momentum: float | None = None, proximal_mu: float | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self.lanes: list[_Lane] = []  # optimizers over overlapping parameters share a lane: their steps add up
        # id(optimizer) -> (the optimizer, held for the call so that its id stays its own; its lane; its
        # largest parameter group's index)
        self._seen: dict[int, tuple[Any, _Lane, int]] = {}
        self.momentum = momentum
        self.proximal_mu = proximal_mu
        self.clock = time.perf_counter if clock is None else clock
        self.timed = 0  # step ends stamped (optimizer steps, or mark_step calls)
        self.first_at = math.nan  # clock at the end of the first stamped step
        self.last_at = math.nan  # clock at the end of the last one

    def stamp(self) -> None:
        """The end of one training step: what tells the steady steps from the one-off set-up."""
        now = self.clock()
        if not self.timed:
            self.first_at = now
        self.last_at = now
        self.timed += 1

    def setup_s(self, wall_s: float) -> float | None:
        """Seconds of a ``wall_s``-long call beyond its steady steps, ``None`` with < 2 stamps.

        The steady step is the mean interval between the first and the last stamp; the call's
        time beyond ``timed`` steady steps is its one-off part: what ran before the first step
        (data loader start-up, the model moved to its device), the first step's warm-up (the
        first CUDA kernels, allocator growth) and what runs after the last step.
        """
        if self.timed < 2:
            return None
        steady = (self.last_at - self.first_at) / (self.timed - 1)
        extra = wall_s - self.timed * steady
        if not math.isfinite(extra):
            return None
        return min(max(extra, 0.0), max(wall_s, 0.0))

    def _reported(self) -> _Lane | None:
        """The lane with the most steps (on a tie, the most parameter elements): what the reply reports."""
        return max(self.lanes, key=lambda lane: (lane.steps, lane.numel), default=None)

    @property
    def steps(self) -> int:
        """Steps of the lane that stepped most in this call (0: none)."""
        lane = self._reported()
        return 0 if lane is None else lane.steps

    @property
    def seen_momentum(self) -> float | None:
        """The momentum of that lane's latest step's largest parameter group (``None``: none seen)."""
        lane = self._reported()
        return None if lane is None else lane.momentum

    @property
    def lr(self) -> float | None:
        """The learning rate of that group at that lane's latest step (``None``: none seen)."""
        lane = self._reported()
        return None if lane is None else lane.lr

    def before(self, optimizer: Any) -> None:
        """An optimizer is about to step (the pre-step hook): at its first step in this call, the
        checks of the module docstring, its lane and which parameter group it reports."""
        if id(optimizer) in self._seen:
            return
        groups = list(getattr(optimizer, "param_groups", None) or [])
        params = {id(p): int(getattr(p, "numel", lambda: 1)()) for g in groups for p in g.get("params", ())}
        overlapping = [lane for lane in self.lanes if lane.params.keys() & params.keys()]
        if overlapping:  # the same parameters (an optimizer rebuilt per epoch, a second phase): steps add up
            lane = overlapping[0]
            for other in overlapping[1:]:  # one optimizer over two lanes' parameters: one lane from now on
                lane.params.update(other.params)
                lane.steps = max(lane.steps, other.steps)  # the parameters stepped most
                self.lanes.remove(other)
                self._seen = {k: (o, lane if ln is other else ln, g) for k, (o, ln, g) in self._seen.items()}
            lane.params.update(params)
        else:
            lane = _Lane(params)
            self.lanes.append(lane)
            if len(self.lanes) == 2:
                _say_once(
                    "two-optimizers",
                    "two optimizers over different parameters stepped in one training call (%s the second): the "
                    "reply reports the steps, momentum and lr of the one that stepped most, as if it alone "
                    "trained; normalised aggregation is exact when every parameter takes as many steps, e.g. an "
                    "encoder's and a decoder's optimizer each stepping once per batch",
                    type(optimizer).__name__,
                )
        self._seen[id(optimizer)] = (optimizer, lane, _largest(groups, params))
        _check_momentum(optimizer, groups)

    def observe(self, optimizer: Any) -> None:
        """One optimizer step (called by the step hook)."""
        self.stamp()
        self.before(optimizer)  # a step the pre-step hook did not see (torch without it)
        _, lane, main = self._seen[id(optimizer)]
        lane.steps += 1
        groups = getattr(optimizer, "param_groups", None) or [{}]
        group = groups[min(main, len(groups) - 1)]
        lane.lr = _finite(group.get("lr"))
        lane.momentum = _finite(group.get("momentum")) if "momentum" in group else None

    def metrics(self, config: Mapping[str, Any]) -> dict[str, int | float]:
        """The local-work keys for the reply (``config``: the round's config, for FedProx's μ)."""
        momentum = self.momentum if self.momentum is not None else self.seen_momentum
        mu = self.proximal_mu if self.proximal_mu is not None else fedprox_mu(config)
        return {
            keys.LOCAL_STEPS: int(self.steps) if self.steps else keys.UNKNOWN,
            keys.LOCAL_MOMENTUM: float(keys.UNKNOWN) if momentum is None else float(momentum),
            keys.LOCAL_LR: float(keys.UNKNOWN) if self.lr is None or self.lr <= 0 else float(self.lr),
            keys.LOCAL_PROXIMAL_MU: 0.0 if mu is None else float(mu),
        }


class _Lane:
    """Optimizers over overlapping parameters in one call: their steps, and what the latest one read."""

    def __init__(self, params: dict[int, int]) -> None:
        self.params = dict(params)  # id(parameter) -> its number of elements
        self.steps = 0
        self.lr: float | None = None
        self.momentum: float | None = None

    @property
    def numel(self) -> int:
        return sum(self.params.values())


_SAID: set[str] = set()  # the caveats already logged in this process


def _say_once(tag: str, msg: str, *args: Any) -> None:
    if tag not in _SAID:
        _SAID.add(tag)
        logger.warning("[adaptive] " + msg + " (said once)", *args)


def _largest(groups: list[Any], numel: Mapping[int, int]) -> int:
    """Index of the parameter group with the most elements (``numel``: by parameter id; the first on a tie)."""
    sizes = [sum(numel[id(p)] for p in g.get("params", ())) for g in groups]
    return max(range(len(sizes)), key=lambda i: (sizes[i], -i)) if sizes else 0


def _check_momentum(optimizer: Any, groups: list[Any]) -> None:
    """The momentum caveats of the module docstring, for an optimizer's first step in a call."""
    name = type(optimizer).__name__
    state = getattr(optimizer, "state", None) or {}
    if any(isinstance(s, Mapping) and s.get("momentum_buffer") is not None for s in list(state.values())):
        _say_once(
            "carried-momentum",
            "%s starts this round with a momentum buffer from an earlier one (the optimizer is reused across "
            "rounds): the update holds more work than its local steps say, so normalised aggregation scales it "
            "wrongly (one step at momentum 0.9 after a round of 10 moves the model ~7x what is counted); build "
            "the optimizer inside your train function each round, or call optimizer.state.clear() before training",
            name,
        )
    if any(g.get("nesterov") for g in groups):
        _say_once(
            "nesterov",
            "%s uses Nesterov momentum, which normalised aggregation counts as heavy-ball momentum: its work is "
            "understated (up to (1 + momentum)x at one step), so a node with few steps is scaled up too much; use "
            "nesterov=False for exact normalisation, or weighting='data-size'",
            name,
        )
    if any((_finite(g.get("dampening")) or 0.0) > 0 for g in groups):
        _say_once(
            "dampening",
            "%s uses dampening > 0, which normalised aggregation counts as undamped heavy-ball momentum: its work "
            "is overstated (at momentum 0.9, dampening 0.9 and 10 steps, 41 counted for 10 done); use dampening=0 "
            "for exact normalisation, or weighting='data-size'",
            name,
        )
    momenta = {_finite(g.get("momentum")) for g in groups if "momentum" in g}
    if len(momenta) > 1:
        _say_once(
            "group-momenta",
            "%s has parameter groups with different momenta %s: the reply reports the largest group's; "
            "normalised aggregation is exact with one momentum for every group",
            name,
            sorted(m for m in momenta if m is not None),
        )


_OPEN = [0]  # wrapped calls running in this process (any thread), under _OPEN_LOCK
_OPEN_LOCK = threading.Lock()


def _on_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    counter = _CURRENT.get()
    if counter is not None:
        counter.observe(optimizer)
    elif _OPEN[0]:
        _say_once(
            "other-thread",
            "%s stepped in another thread than the wrapped training call's while it ran: its steps are not "
            "counted and quota_data there reads the whole dataset, not the quota (both follow the call's "
            "context); train in the call's thread, or start the thread with contextvars.copy_context().run",
            type(optimizer).__name__,
        )


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    counter = _CURRENT.get()
    if counter is not None:
        counter.before(optimizer)


def _hook_torch() -> None:
    """Install the process-wide step hooks once torch is loaded (never imports torch itself)."""
    if _HOOKED or "torch" not in sys.modules:
        return
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    except ImportError:  # a torch without global optimizer hooks: steps stay unknown
        _HOOKED.append(None)
        return
    _HOOKED.append((register_optimizer_step_pre_hook(_before_step), register_optimizer_step_post_hook(_on_step)))


def begin_counting(counter: StepCounter) -> contextvars.Token[StepCounter | None]:
    """From now on, attribute the optimizer steps taken in this thread to ``counter`` (the telemetry
    wrapper's call window); :func:`end_counting` with the token returned ends it."""
    _hook_torch()
    with _OPEN_LOCK:
        _OPEN[0] += 1
    return _CURRENT.set(counter)


def end_counting(token: contextvars.Token[StepCounter | None]) -> None:
    """End what :func:`begin_counting` began."""
    _CURRENT.reset(token)
    with _OPEN_LOCK:
        _OPEN[0] = max(_OPEN[0] - 1, 0)


@contextlib.contextmanager
def counting(counter: StepCounter) -> Iterator[StepCounter]:
    """Attribute the optimizer steps taken in this thread to ``counter`` while the block runs."""
    token = begin_counting(counter)
    try:
        yield counter
    finally:
        end_counting(token)
