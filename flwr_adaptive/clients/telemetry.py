"""The client telemetry wrapper: train on the quota, measure, report under one set of keys.

Contract
--------
Wrap a Message-API train function with :func:`telemetry_train` or a ``NumPyClient`` with
:class:`TelemetryClient`, and call :func:`flwr_adaptive.clients.data.quota_data` where the client builds its
training data. For each training call the wrapper

1. reads the round's config: ``keys.QUOTA`` (absent without our strategy: all local data),
   ``keys.ALLOW_CYCLING``, ``keys.ROUND`` and ``keys.REFERENCE_QUOTA`` (batch scaling; a malformed
   value is logged and ignored: :mod:`flwr_adaptive.clients.batch_scaling`), and opens a
   :class:`~flwr_adaptive.clients.data.QuotaWindow` so that ``quota_data`` selects exactly the quota
   in a seeded order;
2. measures the call: wall time (``time.perf_counter``), the process's own CPU time
   (``time.process_time``) and one energy-meter window (:mod:`flwr_adaptive.energy`; the emulated
   meter in simulation, whose seconds are device time on the virtual clock);
3. adds the telemetry to the reply's metrics (the MetricRecord / ``fit`` metrics dict):

   ===================  =====================================================================
   ``keys.SAMPLES``     samples selected by ``quota_data`` (per pass over the data), less the
                        partial last batch its DataLoader drops (``drop_last=True``); without a
                        ``quota_data`` call, the reply's ``num-examples``
   ``keys.TIME_S``      the meter's seconds (virtual clock when emulated, else wall)
   ``keys.CPU_TIME_S``  process CPU seconds of the call
   ``keys.WALL_TIME_S`` wall seconds of the call
   ``keys.ENERGY_J``    active joules of the call; -1.0 when unmeasured
   ``keys.DATA_SIZE``   local data size seen by ``quota_data``; -1 when unknown
   ``keys.PARTITION_ID`` ``node_config["partition-id"]``; -1 when absent
   ``keys.QUOTA_CAPPED`` 1 when the quota exceeded the local data and cycling was off
   ``keys.IDLE_W``      the device's idle watts (emulated meters know them); -1.0 when unknown
   ``keys.VIRTUAL_CLOCK`` 1 when ``TIME_S`` / ``ENERGY_J`` are on the virtual clock
   ``keys.COLD_START``  1 on the first wrapped call in this process (it pays imports and
                        torch's first-call set-up; the strategy does not take it at face value)
   ``keys.SETUP_S``     wall seconds of the call beyond its steady training steps: set-up
                        before the first step (data loader start-up, model to device), the
                        first step's warm-up and what follows the last step; from the torch
                        optimizer steps (or :func:`mark_step` calls) it saw, -1.0 with fewer
                        than 2 (``StepCounter.setup_s``). The strategy takes it as the node's
                        fixed per-round cost, not as per-sample compute
   ``keys.LOCAL_*``     the local work: optimizer steps, momentum, lr, proximal μ
                        (:mod:`flwr_adaptive.clients.local_work`); a value the train function
                        put in the reply itself is kept. ``LOCAL_STEPS`` is 0 when the call read
                        none of the quota ``quota_data`` selected and took no optimizer step
                        (``Measured.no_step_read``): the strategy skips such a reply
   ``num-examples``     set to ``SAMPLES`` only when the client did not set it
   ===================  =====================================================================

The measured window is the whole wrapped call (model loading included): in a synchronous round
that is what the others wait for, and the controller balances exactly that. A meter that fails
gives unmeasured energy and wall time, never an exception; an exception of the train function
itself propagates (Flower turns it into an error reply, which the strategy skips).

``@telemetry_train`` must sit directly below ``@app.train()``: decorators apply bottom-up, so above
it Flower would register (and call) the unwrapped function. The wrapper detects that order when it
is applied (the function is already registered in a ``ClientApp`` in scope) and raises a
``TypeError`` that shows the right order; the strategy stops the run in its first round too.

Cost
----
Three clock reads and one meter window per call, plus the data helper's permutation.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from flwr_adaptive import keys
from flwr_adaptive._logging import logger as log
from flwr_adaptive.clients.batch_scaling import reference_of
from flwr_adaptive.clients.data import QuotaWindow, close_window, open_window, quota_data
from flwr_adaptive.clients.local_work import _CURRENT as _STEPS
from flwr_adaptive.clients.local_work import StepCounter, begin_counting, end_counting

__all__ = ["telemetry_train", "TelemetryClient", "Measured", "TrainingWindow", "quota_data", "mark_warm", "mark_step"]


Clock = Callable[[], float]
MeterSpec = Any  # None (auto_meter), a meter, or a callable (context, server_round) -> meter

_AUTO_METER: list[Any] = []  # one auto-detected meter per process (detection logs its choice once)
_WARM: list[bool] = []  # non-empty once this process has made a wrapped training call


def mark_warm() -> None:
    """Declare this process warmed up: its wrapped calls are no longer reported as cold starts.

    Call it after your own per-process warm-up (imports, one throw-away training step outside the
    measured call); without it the first wrapped call in the process reports ``keys.COLD_START``.
    """
    if not _WARM:
        _WARM.append(True)


def mark_step() -> None:
    """Mark the end of one training step of the running wrapped call (outside one: nothing).

    Torch optimizer steps are stamped on their own; call this after each step when you train
    without a torch optimizer, so that the wrapper can tell the call's one-off set-up from its
    steady steps (``keys.SETUP_S``).
    """
    counter = _STEPS.get()
    if counter is not None:
        counter.stamp()


def _resolve_meter(spec: MeterSpec, context: Any, server_round: int) -> Any:
    if spec is None:
        if not _AUTO_METER:
            from flwr_adaptive.energy import auto_meter

            _AUTO_METER.append(auto_meter())
        return _AUTO_METER[0]
    if hasattr(spec, "begin_window"):
        return spec
    if callable(spec):
        return spec(context, server_round)
    raise ValueError(
        f"meter must be None, a meter (begin_window/end_window) or a callable "
        f"(context, server_round) -> meter; got {type(spec).__name__}"
    )


def _check_meter_spec(spec: MeterSpec) -> None:
    if spec is None or hasattr(spec, "begin_window") or callable(spec):
        return
    raise ValueError(
        f"meter must be None (auto-detect), a meter with begin_window/end_window, or a "
        f"callable (context, server_round) -> meter; got {spec!r}"
    )


def _int_of(config: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = config.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"config {key!r} must be an int, got {value!r}")
    return int(value)


_SAID: set[str] = set()  # fallbacks already logged in this process (said once, not every round)


def _usable(measurement: Any) -> Any:
    """The meter's measurement, or ``None`` (wall time, no energy) when its seconds are unusable.

    A meter that returns NaN, infinite, zero or negative seconds would make every reply of the
    node invalid (the server skips such telemetry), so the node would train at the minimum quota
    for the whole run: its wall time is reported instead, and this is logged once per process.
    """
    if measurement is None:
        return None
    try:
        seconds = float(measurement.seconds)
    except (TypeError, ValueError, AttributeError):
        seconds = math.nan
    if math.isfinite(seconds) and seconds > 0:
        return measurement
    if "bad-seconds" not in _SAID:
        _SAID.add("bad-seconds")
        log.warning(
            "energy meter %s returned %r seconds; reporting wall time and no energy instead (said once)",
            getattr(measurement, "source", type(measurement).__name__),
            seconds,
        )
    return None


class Measured:
    """The outcome of one measured training call; ``metrics()`` gives the telemetry keys."""

    def __init__(
        self, window: QuotaWindow, partition: int | None, work: StepCounter | None = None, config: Any = None
    ) -> None:
        self.window = window
        self.partition = partition
        self.work = StepCounter() if work is None else work
        self.config: Mapping[str, Any] = config or {}
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.measurement: Any = None
        self.idle_w: float | None = None
        self.cold = False

    def metrics(self, num_examples: Any = None) -> dict[str, int | float]:
        """The telemetry keys (see the module docstring) as plain ints and floats.

        Raises
        ------
        RuntimeError
            A set-up error (``keys.SETUP_ERROR_MARK``): the call selected a quota, never read it and
            still took optimizer steps, so it trained on other data (``quota_data``'s result was
            thrown away) and its samples would be reported wrongly. The reply is an error: the
            strategy stops the run in round 1 when every node's shows it, else skips the reply.
        """
        self.check_read()
        m = _usable(self.measurement)
        time_s = float(m.seconds) if m is not None else self.wall_s
        joules = m.joules if m is not None else None
        setup = self.work.setup_s(self.wall_s)
        w = self.window
        if w.samples is not None:
            samples = int(w.samples) - (w.dropped or 0)
        elif isinstance(num_examples, (int, float)) and not isinstance(num_examples, bool):
            samples = int(num_examples)
        else:
            samples = 0
        return {
            keys.SAMPLES: samples,
            keys.TIME_S: time_s,
            keys.CPU_TIME_S: float(self.cpu_s),
            keys.WALL_TIME_S: float(self.wall_s),
            keys.ENERGY_J: keys.UNMEASURED_ENERGY if joules is None else float(joules),
            keys.DATA_SIZE: keys.UNKNOWN if w.size is None else int(w.size),
            keys.PARTITION_ID: keys.UNKNOWN if self.partition is None else int(self.partition),
            keys.QUOTA_CAPPED: int(w.capped),
            keys.IDLE_W: float(keys.UNKNOWN) if self.idle_w is None else float(self.idle_w),
            keys.VIRTUAL_CLOCK: int(m is not None and getattr(m, "clock", "wall") == "virtual"),
            keys.COLD_START: int(self.cold),
            keys.SETUP_S: float(keys.UNKNOWN) if setup is None else setup,
            **self.work.metrics(self.config),
            **self.no_step_read(),
        }

    def check_read(self) -> None:
        """Raise when the call took optimizer steps on data other than the quota it selected."""
        w = self.window
        if w.samples and not w.was_read() and self.work.steps:
            raise RuntimeError(
                f"{keys.SETUP_ERROR_MARK} partition {self.partition}: quota_data selected {int(w.samples)} samples "
                f"but the training read none of them, while the optimizer took {self.work.steps} steps: it trained "
                "on other data, and the reply would report the quota as trained. Train on what quota_data "
                "returns (trainloader = quota_data(trainloader), not quota_data(trainloader) alone); a DataLoader "
                "with persistent_workers=True built once over quota_data's view keeps reading its first round's "
                "selection: pass the DataLoader itself to quota_data, or build it inside the train function"
            )

    def no_step_read(self) -> dict[str, int]:
        """``{keys.LOCAL_STEPS: 0}`` when the call selected a quota, read none of it and took no optimizer
        step (its update is the model it was sent, so the strategy must not average it in as trained;
        one warning per process with the fix), else ``{}``."""
        w = self.window
        if not w.samples or w.was_read() or self.work.steps:
            return {}
        if "no-read" not in _SAID:
            _SAID.add("no-read")
            log.warning(
                "partition %s: the training call read none of the %d samples quota_data selected and took no "
                "optimizer step: the reply says %s = 0, so the strategy skips it rather than average an untrained "
                "model in. A DataLoader with drop_last=True and a batch size above the quota reads no batch: pass "
                "the DataLoader itself to quota_data (it reads such a quota as one batch), or set drop_last=False; "
                "said once",
                self.partition,
                int(w.samples),
                keys.LOCAL_STEPS,
            )
        return {keys.LOCAL_STEPS: 0}


class TrainingWindow:
    """Open the quota window and the meter window around one training call.

    Parameters
    ----------
    config : Mapping
        The round's config (quota, cycling, round).
    context : flwr.app.Context or None
        The client's context (partition id, node id for seeding and the meter factory).
    meter : None, meter or callable
        See :func:`telemetry_train`.
    seed : int
        Base seed of the sample order.
    cpu_clock, wall_clock : callable
        Injectable clocks (tests pass fakes so expected values are exact).
    momentum, proximal_mu : float, optional
        The local optimizer's momentum and proximal μ when the wrapper cannot read them (see
        :mod:`flwr_adaptive.clients.local_work`).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        context: Any,
        meter: MeterSpec = None,
        seed: int = 0,
        cpu_clock: Clock = time.process_time,
        wall_clock: Clock = time.perf_counter,
        momentum: float | None = None,
        proximal_mu: float | None = None,
    ) -> None:
        node_config = getattr(context, "node_config", None) or {}
        partition = node_config.get("partition-id")
        partition = None if partition is None else int(partition)
        server_round = _int_of(config, keys.ROUND, 0) or 0
        quota = _int_of(config, keys.QUOTA, None)
        order_key = partition if partition is not None else int(getattr(context, "node_id", 0) or 0)
        self.window = QuotaWindow(
            quota,
            allow_cycling=bool(config.get(keys.ALLOW_CYCLING, False)),
            reference=reference_of(config),
            seed=seed,
            partition=order_key,
            server_round=server_round,
        )
        self.result = Measured(self.window, partition, StepCounter(momentum, proximal_mu, wall_clock), config)
        self._meter_spec, self._context, self._round = meter, context, server_round
        self._cpu, self._wall = cpu_clock, wall_clock
        self._meter: Any = None
        self._name = f"train-round-{server_round}"

    def __enter__(self) -> Measured:
        self.result.cold = not _WARM
        if not _WARM:
            _WARM.append(True)
        self._token = open_window(self.window)
        self._steps_token = begin_counting(self.result.work)
        try:
            meter = _resolve_meter(self._meter_spec, self._context, self._round)
            if self._round >= 1 and hasattr(meter, "set_round"):
                meter.set_round(self._round)
            meter.begin_window(self._name)
            self._meter = meter
            profile = getattr(meter, "profile", None)
            idle = getattr(meter, "idle_w", getattr(profile, "idle_w", None))
            self.result.idle_w = None if idle is None else float(idle)
        except Exception as exc:  # a meter never stops training: fall back to wall time
            log.warning("energy meter unavailable for this round (%s); reporting wall time and no energy", exc)
            self._meter = None
        self._c0, self._w0 = self._cpu(), self._wall()
        return self.result

    def __exit__(self, *exc_info: Any) -> None:
        # The meter's window ends first: a meter that emulates a slower device by sleeping
        # (SleepEmulatedMeter) makes the call last longer, and the wall time includes that.
        if self._meter is not None:
            try:
                self.result.measurement = self._meter.end_window(self._name)
            except Exception as exc:
                log.warning("energy meter failed at the end of the round (%s); no energy reported", exc)
        self.result.cpu_s = self._cpu() - self._c0
        self.result.wall_s = self._wall() - self._w0
        end_counting(self._steps_token)
        close_window(self._token)


def _config_of(content: Any) -> Mapping[str, Any]:
    """The ConfigRecord carrying the quota (else the first one, else empty)."""
    records = list(content.config_records.values())
    for record in records:
        if keys.QUOTA in record:
            return record
    return records[0] if records else {}


def telemetry_train(
    fn: Callable | None = None,
    *,
    meter: MeterSpec = None,
    seed: int = 0,
    cpu_clock: Clock = time.process_time,
    wall_clock: Clock = time.perf_counter,
    momentum: float | None = None,
    proximal_mu: float | None = None,
):
    """Wrap a Message-API train function ``(msg, context) -> Message`` with quota + telemetry.

    Parameters
    ----------
    fn : callable
        The train function (use as ``@telemetry_train`` or ``@telemetry_train(meter=...)``,
        below ``@app.train()``).
    meter : None, meter, or callable (context, server_round) -> meter
        ``None``: the best meter of this machine (:func:`flwr_adaptive.energy.auto_meter`,
        detected once per process). In simulation pass a factory of
        :class:`~flwr_adaptive.energy.EmulatedMeter` for the node's device profile.
    seed : int (default: 0)
        Base seed of the sample order (combined with the partition id and the round).
    cpu_clock, wall_clock : callable
        Clocks for ``CPU_TIME_S`` / ``WALL_TIME_S`` (tests inject fakes).
    momentum : float, optional
        Your local optimizer's momentum, for normalised aggregation; by default the wrapper reads
        it from the torch optimizer that steps (:mod:`flwr_adaptive.clients.local_work`).
    proximal_mu : float, optional
        The proximal μ your train function applies; by default FedProx's ``proximal-mu`` from the
        round's config (pass 0.0 if your function ignores it).

    Examples
    --------
    ::

        @app.train()
        @telemetry_train
        def train(msg, context):
            ...
            trainloader = quota_data(trainloader)   # the one data helper
            ...
    """

    _check_meter_spec(meter)

    def decorate(train_fn: Callable) -> Callable:
        _check_not_registered(train_fn)

        @functools.wraps(train_fn)
        def wrapper(msg: Any, context: Any) -> Any:
            from flwr.app import MetricRecord

            config = _config_of(msg.content)
            with TrainingWindow(config, context, meter, seed, cpu_clock, wall_clock, momentum, proximal_mu) as measured:
                reply = train_fn(msg, context)
            if reply.has_error():
                return reply
            metric_records = list(reply.content.metric_records.values())
            if metric_records:
                record = metric_records[0]
            else:
                record = MetricRecord()
                reply.content["metrics"] = record
            telemetry = measured.metrics(record.get(keys.NUM_EXAMPLES))
            for key, value in telemetry.items():
                if key not in keys.LOCAL_WORK_KEYS or key not in record:  # a count of your own is kept
                    record[key] = value
            if keys.NUM_EXAMPLES not in record:
                record[keys.NUM_EXAMPLES] = telemetry[keys.SAMPLES]
            return reply

        wrapper.__flwr_adaptive_telemetry__ = True  # type: ignore[attr-defined]
        return wrapper

    return decorate(fn) if fn is not None else decorate


def _wraps(candidate: Any, fn: Callable, depth: int = 4) -> bool:
    """Whether ``candidate`` is ``fn`` or a Flower mod chain around it (closures, a few levels)."""
    if candidate is fn:
        return True
    if depth == 0 or not callable(candidate):
        return False
    cells = getattr(candidate, "__closure__", None) or ()
    for cell in cells:
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(inner) and _wraps(inner, fn, depth - 1):
            return True
    return False


def _check_not_registered(fn: Callable) -> None:
    """Raise when ``fn`` is already registered in a ClientApp in the caller's scope (decorator order)."""
    frame: FrameType | None = sys._getframe(2)  # the caller of decorate: telemetry_train(fn), or the user's scope
    for _ in range(3):
        if frame is None:
            return
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                registered = getattr(value, "_registered_funcs", None)
                if type(value).__name__ != "ClientApp" or not isinstance(registered, dict):
                    continue
                for name, func in registered.items():
                    if _wraps(func, fn):
                        action = name.split(".", 1)[-1]
                        call = "train()" if action == "default" else f"train({action!r})"
                        raise TypeError(
                            f"{keys.SETUP_ERROR_MARK} @telemetry_train is above @app.{call}, so Flower registered "
                            f"{fn.__name__!r} unwrapped: it would train on all data and report no telemetry. "
                            f"Decorators apply bottom-up: put @telemetry_train on the line directly below "
                            f"@app.{call}:\n\n    @app.{call}\n    @telemetry_train\n"
                            f"    def {fn.__name__}(msg, context):\n        ...\n"
                        )
        frame = frame.f_back


def _numpy_client_base():
    from flwr.client import NumPyClient

    return NumPyClient


class TelemetryClient(_numpy_client_base()):  # type: ignore[misc]
    """A ``NumPyClient`` that trains its wrapped client on the quota and reports telemetry.

    Parameters
    ----------
    client : NumPyClient
        Your client; its ``fit`` reads data built with :func:`quota_data` (a DataLoader or
        dataset built in ``client_fn`` resolves the quota when ``fit`` reads it).
    context : flwr.app.Context, optional
        The context given to ``client_fn`` (partition id for the sample order and telemetry).
    meter, seed, cpu_clock, wall_clock, momentum, proximal_mu
        As in :func:`telemetry_train`.

    Examples
    --------
    ::

        def client_fn(context):
            trainloader = quota_data(load_data(...))
            return TelemetryClient(FlowerClient(trainloader), context).to_client()
    """

    def __init__(
        self,
        client: Any,
        context: Any = None,
        *,
        meter: MeterSpec = None,
        seed: int = 0,
        cpu_clock: Clock = time.process_time,
        wall_clock: Clock = time.perf_counter,
        momentum: float | None = None,
        proximal_mu: float | None = None,
    ) -> None:
        _check_meter_spec(meter)
        self.client = client
        self.context = context
        self._meter, self._seed, self._cpu, self._wall = meter, seed, cpu_clock, wall_clock
        self._momentum, self._proximal_mu = momentum, proximal_mu

    def get_properties(self, config):
        return self.client.get_properties(config)

    def get_parameters(self, config):
        return self.client.get_parameters(config)

    def fit(self, parameters, config):
        """The wrapped ``fit`` inside the quota and meter windows, plus the telemetry metrics."""
        with TrainingWindow(
            config, self.context, self._meter, self._seed, self._cpu, self._wall, self._momentum, self._proximal_mu
        ) as measured:
            params, num_examples, metrics = self.client.fit(parameters, config)
        metrics = dict(metrics or {})
        telemetry = measured.metrics(num_examples)
        metrics.update({k: v for k, v in telemetry.items() if k not in keys.LOCAL_WORK_KEYS or k not in metrics})
        return params, num_examples, metrics

    def evaluate(self, parameters, config):
        return self.client.evaluate(parameters, config)
