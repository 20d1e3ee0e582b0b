"""One PMA run of any policy in this process: Flower's strategy API, real training, an emulated device clock.

Contract
--------
:func:`run_pma` drives the policy's server strategy (``flwr_adaptive.strategies.build_strategy``,
exactly what the Flower App ``apps/pma`` builds) through ``Strategy.start`` on an
:class:`InProcessGrid`: a ``flwr.serverapp.Grid`` whose ``send_and_receive`` hands each
``Message`` to the client's train function in this process and returns its reply. The train
function is the Flower App's, composed the same way (``@telemetry_train`` around training on
``quota_data``), so quotas, telemetry, screening, aggregation and history are the ones a
``flwr run`` would use; what is left out is Flower's transport (SuperLink, SuperNodes, Ray), whose
start-up (≈ 20 s per ``flwr run``) would dominate hundreds of short runs.

Every node is one emulated device (:class:`~flwr_adaptive.devices.DeviceProfile`); its
:class:`~flwr_adaptive.energy.EmulatedMeter` turns the training call's seconds into device seconds
(× slowdown × jitter) and joules (× active watts). Two clocks feed the meter:

- ``"modelled"``: the seconds of a call are ``per_sample_s × samples`` with ``per_sample_s`` the
  task's host cost per sample, calibrated once (:func:`calibrate`) and passed in. Device time is
  then ``per_sample_s × samples × slowdown × jitter``: deterministic, the same on a loaded or an idle
  machine, so policies are compared on exactly the same costs (paired) whatever else runs.
- ``"measured"``: the training thread's CPU seconds (``time.thread_time``, torch on one thread), as
  the Flower App measures them. Noisy on a shared machine.

Seeds pair policies: the seed fixes the data partition of every node, the initial model, each
node's sample order (``quota_data``: partition and round) and each node's jitter draw
(``(seed, partition, round)``), so two policies of one seed differ only by their decisions.
The training really happens (losses are real); with ``train=False`` a node only reads its quota
(time and energy do not depend on the model on the modelled clock: a w_e sweep needs no training).

Overhead: the strategy's own wall time per round (``configure_train`` + ``aggregate_train``, the
controller included) and the controller's alone (``allocate`` + ``observe``) are timed in the run,
next to the round's wall time (clients train one after the other here) and its virtual makespan.

Cost
----
The training of ``rounds × budget`` samples plus one holdout evaluation per round; the strategy's
bookkeeping is a few milliseconds per round.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from flwr_adaptive import keys
from flwr_adaptive.devices import DeviceProfile
from flwr_adaptive.energy import EmulatedMeter

__all__ = ["CLOCKS", "RunSpec", "RunResult", "InProcessGrid", "calibrate", "run_pma", "load_task", "partitions"]

CLOCKS = ("modelled", "measured")


@functools.lru_cache(maxsize=4)
def load_task(name: str):
    """The task (cached per process), torch on one thread so that CPU time is the work's."""
    import torch

    from flwr_adaptive.clients.tasks import get_task

    torch.set_num_threads(1)
    return get_task(name, source="offline")


@functools.lru_cache(maxsize=16)
def partitions(name: str, num_partitions: int, seed: int, partitioner: str = "iid", alpha: float = 0.5) -> tuple:
    """Every node's training partition for ``seed`` and the shared holdout (cached).

    ``partitioner="iid"``: equal random shards; ``"dirichlet"``: Flower Datasets'
    ``DirichletPartitioner`` over the task's ``partition_by`` labels (class; the month for
    weather) with concentration ``alpha``, seeded by ``seed``.
    """
    task = load_task(name)
    if partitioner == "iid":  # the call of the IID tables, unchanged
        parts = [task.load(pid, num_partitions, seed=seed)[0] for pid in range(num_partitions)]
        return tuple(parts), task.data()[1]
    from flwr_adaptive.clients.tasks import partition_all

    train, holdout = task.data()
    for attempt in range(DIRICHLET_RESEEDS + 1):
        try:  # one split for all nodes (task.load would redo it per node)
            split = partition_all(train.labels, num_partitions, partitioner, alpha, seed + DIRICHLET_SEED_STEP * attempt)
            break
        except ValueError:
            if attempt == DIRICHLET_RESEEDS:
                raise
    return tuple(train.subset(ix) for ix in split), holdout


#: Flower's DirichletPartitioner redraws 10 times until every partition holds its minimum (10 samples);
#: with 2 classes and α = 0.1 that fails for most seeds, so the draw's seed moves on by this step, at most
#: this many times (the same on every machine: the split stays a function of the run's seed).
DIRICHLET_SEED_STEP, DIRICHLET_RESEEDS = 7919, 40


@functools.lru_cache(maxsize=4)
def holdout_groups(name: str) -> tuple:
    """``((label, holdout subset), …)``: the holdout split by the partitioner's label (class; month for weather)."""
    holdout = load_task(name).data()[1]
    return tuple((int(g), holdout.subset(np.flatnonzero(holdout.labels == g))) for g in np.unique(holdout.labels))


def group_metrics(task: Any, model: Any, groups: Sequence[tuple[int, Any]],
                  parts: Sequence[Any]) -> tuple[dict[str, float], float]:
    """The holdout metrics of ``model`` computed group by group, and the worst group's figure.

    The holdout's metrics are sample-weighted means, so evaluating each label's subset and
    weighting by its size gives the whole holdout's figures (one pass, no second evaluation).
    The worst figure: for a classifier the lowest per-class accuracy; for a regression task the
    highest **per-client** error, client ``i``'s error being ``Σ_g share_i(g) · error_g`` with
    ``share_i(g)`` the fraction of its training samples in group ``g`` (its own data's mix).
    """
    per = [(g, sub, task.evaluate(model, sub)) for g, sub in groups]
    n = sum(len(sub) for _, sub, _ in per)
    out: dict[str, float] = {}
    for key in per[0][2]:
        if key == "samples":
            continue
        out[key] = float(sum(len(sub) * float(m[key]) for _, sub, m in per) / n)
    out["samples"] = float(n)
    metric = task.metric
    by_group = {g: float(m[metric]) for g, _, m in per}
    if task.higher_is_better:
        return out, min(by_group.values())
    worst = 0.0
    for part in parts:
        labels, counts = np.unique(part.labels, return_counts=True)
        err = sum(c * by_group.get(int(g), out[metric]) for g, c in zip(labels, counts)) / counts.sum()
        worst = max(worst, float(err))
    return out, worst


def calibrate(name: str, samples: int = 256, repeats: int = 5) -> float:
    """Host CPU seconds per training sample of task ``name`` (median of ``repeats`` timed calls).

    One untimed call first (torch's lazy set-up is not training cost); then ``repeats`` calls of
    ``train`` on ``samples`` samples, timed with the thread's CPU clock, torch on one thread.
    """
    task = load_task(name)
    data = task.data()[0]
    rng = np.random.default_rng(0)
    model = task.make_model(seed=0)
    task.train(model, data, rng.integers(0, len(data), size=min(64, len(data))))
    per_sample = []
    for _ in range(repeats):
        idx = rng.integers(0, len(data), size=samples)
        t0 = time.thread_time()
        task.train(model, data, idx)
        per_sample.append((time.thread_time() - t0) / samples)
    return float(np.median(per_sample))


@functools.lru_cache(maxsize=None)
def _warm_up(name: str) -> None:
    """Task ``name``'s one-off set-up in this process (torch's lazy set-up, the first call's allocations), untimed."""
    calibrate(name, samples=32, repeats=1)


class _Counter:
    """A clock the train function advances by the modelled cost of what it processed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class InProcessGrid:
    """A ``flwr.serverapp.Grid`` whose nodes are train functions in this process.

    Parameters
    ----------
    handlers : dict
        ``{node_id: (train_fn, context)}``; ``train_fn(message, context) -> Message``.
    on_call : callable, optional
        Called with the seconds (wall) every ``send_and_receive`` spent in the nodes.
    """

    def __init__(self, handlers: dict[int, tuple[Callable, Any]], on_call: Callable[[float], None] | None = None):
        self.handlers = handlers
        self.on_call = on_call

    # -- the parts of the Grid interface that strategies use
    def get_node_ids(self) -> list[int]:
        return list(self.handlers)

    def send_and_receive(self, messages: Iterable[Any], *, timeout: float | None = None) -> list[Any]:
        from flwr.app import Error, Message

        t0 = time.perf_counter()
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            fn, context = self.handlers[node]
            try:
                reply = fn(msg, context)
            except Exception as err:  # what Flower does with a ClientApp exception: an error reply
                reply = Message(error=Error(code=0, reason=f"{type(err).__name__}: {err}"), reply_to=msg)
            replies.append(reply)
        if self.on_call is not None:
            self.on_call(time.perf_counter() - t0)
        return replies

    # -- the rest of the abstract interface (unused by the strategies here)
    def set_run(self, run: Any) -> None:  # pragma: no cover - not called
        self._run = run

    @property
    def run(self) -> Any:  # pragma: no cover - not called
        return getattr(self, "_run", None)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # pragma: no cover
        from flwr.app import Message

        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id)

    def push_messages(self, messages):  # pragma: no cover - not called
        raise NotImplementedError("InProcessGrid answers through send_and_receive only")

    def pull_messages(self, message_ids):  # pragma: no cover - not called
        raise NotImplementedError("InProcessGrid answers through send_and_receive only")


def make_grid(handlers: dict[int, tuple[Callable, Any]], on_call: Callable[[float], None] | None = None):
    """An :class:`InProcessGrid` that is also a ``flwr.serverapp.Grid`` (what ``Strategy.start`` expects)."""
    from flwr.serverapp import Grid

    cls = type("InProcessFlowerGrid", (InProcessGrid, Grid), {})
    return cls(handlers, on_call)


@dataclass(frozen=True)
class RunSpec:
    """One PMA run: what trains, on which devices, under which policy, on which clock."""

    policy: str
    task: str
    profiles: tuple[DeviceProfile, ...]
    seed: int = 0
    rounds: int = 10
    budget: int = 2200
    clock: str = "modelled"
    per_sample_s: float | None = None  # the modelled clock's host seconds per sample
    train: bool = True
    w_energy: float | None = None  # set: a weighted controller w_t = 1 − w_e instead of policy's
    smoothing: float = 0.5
    deadband: float | None = None  # None: each policy's own default, as the Flower App does
    label: str = ""
    meta: dict = field(default_factory=dict, compare=False)
    # --- private, non-IID data (experiments.noniid); the defaults are the IID tables' runs
    partitioner: str = "iid"  # or "dirichlet" over the task's partition_by labels
    alpha: float = 0.5  # Dirichlet concentration
    weighting: str | None = "samples"  # None: the strategy's own default
    allow_cycling: bool = True  # False: private data, each quota capped at the node's data size
    inner: str = "fedavg"  # or "fedprox" (Flower's FedProx; the clients add its proximal term)
    proximal_mu: float = 0.0
    min_quota: int = 1  # the floor on a participant's quota
    group_eval: bool = False  # evaluate per label: the worst class (client, for regression) per round
    lr: float | None = None  # the local optimizer's learning rate; None: the task's default_lr
    options: tuple = ()  # further keyword options of the strategy, ((name, value), …)
    # --- runs to a time budget (experiments.noniid): ``rounds`` is then the cap. From round ``min_rounds``
    # on, the run stops once its cumulative virtual time reaches ``time_budget_s`` or its headline metric
    # reaches ``stop_target`` (``stop_higher``: accuracy-like), whichever comes first.
    time_budget_s: float | None = None
    stop_target: float | None = None
    stop_higher: bool = True
    min_rounds: int = 0

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {self.clock!r}")
        if self.clock == "modelled" and not (isinstance(self.per_sample_s, float) and self.per_sample_s > 0):
            raise ValueError(f"the modelled clock needs per_sample_s > 0 (from calibrate({self.task!r})), "
                             f"got {self.per_sample_s!r}")
        if self.inner not in ("fedavg", "fedprox"):
            raise ValueError(f"inner must be 'fedavg' or 'fedprox', got {self.inner!r}")
        if self.lr is not None and not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0 or None, got {self.lr!r}")
        if not 0 <= self.min_rounds <= self.rounds:
            raise ValueError(f"min_rounds must be in [0, rounds={self.rounds}], got {self.min_rounds!r}")
        if self.time_budget_s is not None and not (math.isfinite(self.time_budget_s) and self.time_budget_s > 0):
            raise ValueError(f"time_budget_s must be a finite number of seconds > 0 or None, "
                             f"got {self.time_budget_s!r}")
        if not self.train and self.clock != "modelled":
            raise ValueError("train=False is only meaningful on the modelled clock (the measured clock "
                             "measures the training)")


@dataclass
class RunResult:
    """Per-round figures of one run (``rounds``) and its per-client rows (``clients``)."""

    spec: RunSpec
    rounds: pd.DataFrame
    clients: pd.DataFrame
    wall_s: float


def _weighted_strategy(inner: Any, spec: RunSpec):
    """An AdaptiveStrategy whose controller weighs time by 1 − w_e and energy by w_e."""
    from flwr_adaptive.controller import POLICIES, AllocationController
    from flwr_adaptive.strategies import AdaptiveStrategy

    w_e = float(spec.w_energy)

    class WeightedAdaptiveStrategy(AdaptiveStrategy):
        """Time-only's controller settings with the weights ``(1 − w_e, w_e)``."""

        def make_controller(self) -> AllocationController:
            # the strategy's own options (deadband, smoothing…) override the policy's defaults
            policy = POLICIES["time"].controller_kwargs(paper=getattr(self, "paper", False))
            kwargs = {**policy, **self._controller_kwargs, "w_time": 1.0 - w_e, "w_energy": w_e}
            return AllocationController(self.budget, **kwargs)

    strategy = WeightedAdaptiveStrategy(inner, budget=spec.budget, policy="time", smoothing=spec.smoothing,
                                        deadband=spec.deadband, weighting="samples", allow_cycling=True)
    strategy.policy = spec.label or f"w_e={w_e:g}"
    return strategy


def _train_fn(spec: RunSpec, parts: Sequence[Any]):
    """The Flower App's train function, on the chosen clock; returns (fn, clock counter or None)."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    from flwr_adaptive.clients import quota_batch_size, quota_data, telemetry_train

    task = load_task(spec.task)
    counter = _Counter() if spec.clock == "modelled" else None
    cpu_clock = counter if counter is not None else time.thread_time

    def meter(context, server_round):
        pid = int(context.node_config["partition-id"])
        rng = np.random.default_rng([spec.seed, pid, int(server_round)])
        return EmulatedMeter(spec.profiles[pid], cpu_clock=cpu_clock, rng=rng)

    @telemetry_train(meter=meter, cpu_clock=cpu_clock)
    def train(msg, context):
        pid = int(context.node_config["partition-id"])
        data = parts[pid]
        indices = quota_data(np.arange(len(data)))
        if spec.train:
            model = task.make_model()
            model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
            config = msg.content.config_records
            mu = float(next(iter(config.values())).get("proximal-mu", 0.0)) if config else 0.0
            bs = quota_batch_size(task.default_batch_size)  # scaled by quota / reference with scale_batch_size
            stats = (task.train(model, data, indices, lr=spec.lr, batch_size=bs) if mu == 0
                     else train_proximal(task, model, data, indices, mu, lr=spec.lr, batch_size=bs))
            arrays, loss, samples = ArrayRecord(model.state_dict()), float(stats["loss"]), int(stats["samples"])
        else:
            arrays, loss, samples = msg.content["arrays"], 1.0, int(len(indices))
        if counter is not None:
            counter.now += spec.per_sample_s * samples
        # The local work a normalised aggregation needs (steps, momentum, FedProx's μ from the config) is
        # the telemetry wrapper's to report, as for any Flower App.
        metrics = MetricRecord({keys.TRAIN_LOSS: loss, keys.NUM_EXAMPLES: samples})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    if counter is None:
        return train

    def from_zero(msg, context):
        # Each call's modelled seconds start from 0: the same bits whatever order the nodes are called in.
        counter.now = 0.0
        return train(msg, context)

    return from_zero


def train_proximal(task: Any, model: Any, data: Any, indices: np.ndarray, mu: float,
                   lr: float | None = None, batch_size: int | None = None) -> dict[str, float | int]:
    """``task.train`` with FedProx's proximal term ``μ/2 · ‖w − w_global‖²`` added to every batch's loss.

    Flower's FedProx (server side) only sends ``proximal-mu``; the client adds the term (as
    Flower's own FedProx examples do). Same batches (``batch_size``, default the task's), optimizer
    and order as ``task.train``.
    """
    import torch

    from flwr_adaptive.clients.tasks import as_indices

    idx = as_indices(indices, len(data))
    bs = task.default_batch_size if batch_size is None else int(batch_size)
    anchor = [p.detach().clone() for p in model.parameters()]
    model.train()
    opt = task.make_optimizer(model, float(task.default_lr if lr is None else lr))
    total, samples, steps = 0.0, 0, 0
    for start in range(0, len(idx), bs):
        chunk = idx[start:start + bs]
        loss = task.loss(model, task.collate(data, chunk))
        prox = sum(torch.sum((p - a) ** 2) for p, a in zip(model.parameters(), anchor))
        opt.zero_grad(set_to_none=True)
        (loss + 0.5 * mu * prox).backward()
        opt.step()
        total += float(loss.detach()) * len(chunk)
        samples += len(chunk)
        steps += 1
    return {"loss": total / samples if samples else 0.0, "samples": samples, "steps": steps}


def _timed(fn: Callable, bucket: list[float]) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            bucket.append(time.perf_counter() - t0)
    return wrapper


@contextlib.contextmanager
def server_identity():
    """The identity Flower gives a ServerApp process (messages read it when they are built), restored after."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    saved = {a: getattr(TaskIdentity, a) for a in ("_task_id", "_run_id", "_node_id")}
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = 1, 1, SUPERLINK_NODE_ID
    try:
        yield
    finally:
        for a, v in saved.items():
            setattr(TaskIdentity, a, v)


def run_pma(spec: RunSpec) -> RunResult:
    """Run ``spec`` and return its per-round and per-client figures.

    ``rounds`` columns: the strategy's history (``round, makespan_s, energy_j, active_j, idle_j,
    cv_busy, clients, samples, clock`` …) plus ``loss`` and the task's headline metric on the
    holdout after the round, the cumulative ``virtual_time_s`` / ``virtual_energy_j``, and, for
    the synchronous policies, ``strategy_s`` (configure + aggregate), ``controller_s`` (allocate +
    observe) and ``round_wall_s`` (wall clock, clients in sequence). Row 0 is the initial model.
    ``stop`` says why the run ended: ``"rounds"`` (a run of ``spec.rounds``), or for a budgeted run
    (``time_budget_s`` / ``stop_target`` set; ``rounds`` is then its cap) ``"time budget"``,
    ``"target"`` or ``"cap"``.
    """
    import logging

    from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from flwr_adaptive.clients import mark_warm
    from flwr_adaptive.strategies import build_strategy

    started = time.perf_counter()
    random.seed(spec.seed)  # FedAvg samples (orders) its nodes with Python's random: the same order per seed
    task = load_task(spec.task)
    n = len(spec.profiles)
    parts, holdout = partitions(spec.task, n, spec.seed, spec.partitioner, spec.alpha)
    train = _train_fn(spec, parts)
    # The grid's nodes share this process, so only the first node of the process's first run would report a
    # cold start (its round-1 cost then unobserved): that run would differ from the same run after another one.
    # A device's start-up is not what a run here models (the modelled clock charges samples only; the measured
    # clock gets the task's untimed warm-up first), so every run starts warm, the same whatever ran before.
    if spec.clock == "measured":
        _warm_up(spec.task)
    mark_warm()
    node_ids = [1000 + pid for pid in range(n)]  # stable here; the strategies key by partition id
    run_config = {"task": spec.task, "seed": spec.seed}
    handlers = {node: (train, Context(run_id=1, node_id=node, node_config={"partition-id": pid, "num-partitions": n},
                                      state=RecordDict(), run_config=run_config))
                for pid, node in enumerate(node_ids)}
    client_s: list[float] = []
    grid = make_grid(handlers, on_call=client_s.append)
    sampling = dict(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)
    if spec.inner == "fedprox":
        from flwr.serverapp.strategy import FedProx

        inner = FedProx(proximal_mu=spec.proximal_mu, **sampling)
    else:
        inner = FedAvg(**sampling)
    if spec.w_energy is not None:
        strategy = _weighted_strategy(inner, spec)
    elif spec.policy == "pyramid":
        from experiments.pyramid_strategy import PyramidStrategy

        strategy = PyramidStrategy(inner, budget=spec.budget, smoothing=spec.smoothing,
                                   **({} if spec.weighting is None else {"weighting": spec.weighting}))
    else:
        options = dict(smoothing=spec.smoothing, deadband=spec.deadband, allow_cycling=spec.allow_cycling)
        if spec.weighting is not None and spec.policy != "fedasync":
            options["weighting"] = spec.weighting
        if spec.min_quota != 1:
            options["min_quota"] = spec.min_quota
        # a copy per run: an option may hold state across rounds (a CostTrust's strikes)
        options.update({name: copy.deepcopy(value) for name, value in spec.options})
        strategy = build_strategy(spec.policy, strategy=inner, budget=spec.budget, num_nodes=n, seed=spec.seed,
                                  **options)
    configure_s: list[float] = []
    aggregate_s: list[float] = []
    controller_s: list[float] = []
    sync = hasattr(strategy, "configure_train")
    if sync:
        strategy.configure_train = _timed(strategy.configure_train, configure_s)
        strategy.aggregate_train = _timed(strategy.aggregate_train, aggregate_s)
        ctrl = getattr(strategy, "controller", None)
        if ctrl is not None:
            ctrl.allocate = _timed(ctrl.allocate, controller_s)
            ctrl.observe = _timed(ctrl.observe, controller_s)
    model = task.make_model(seed=spec.seed)
    evals: dict[int, dict[str, float]] = {}
    groups = holdout_groups(spec.task) if spec.group_eval else None
    marks: list[tuple[int, int, float]] = []  # (round, len(controller_s), perf_counter) at each evaluation
    budgeted = spec.time_budget_s is not None or spec.stop_target is not None
    stopped = ["rounds"]  # why the run ended: "rounds" (all of them), "cap", "time budget" or "target"

    def stop_here(server_round: int) -> str | None:
        """Why a budgeted run ends after ``server_round`` (``None``: it goes on)."""
        if not budgeted or server_round < max(spec.min_rounds, 1):
            return None
        value = evals[server_round].get(task.metric)
        # FedAsync writes a round-equivalent's history row after its evaluation: a stop there would lose the
        # row that reached the target, so an asynchronous run stops on its time budget only.
        if spec.stop_target is not None and sync and value is not None and (
                value >= spec.stop_target if spec.stop_higher else value <= spec.stop_target):
            return "target"
        if spec.time_budget_s is not None:
            # The strategies append the round's history row before the evaluation (FedAsync after it: one
            # round-equivalent late, which only adds data).
            spent = float(pd.to_numeric(strategy.history.get("makespan_s", pd.Series(dtype=float))).sum())
            if spent >= spec.time_budget_s * (1 - 1e-9):
                return "time budget"
        return None

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        if groups is not None:
            model.load_state_dict(arrays.to_torch_state_dict())
            overall, worst = group_metrics(task, model, groups, parts)
            evals[server_round] = {**overall, "worst_group": worst}
        elif spec.train or server_round == 0:
            model.load_state_dict(arrays.to_torch_state_dict())
            evals[server_round] = {k: float(v) for k, v in task.evaluate(model, holdout).items()}
        else:
            evals[server_round] = dict(evals[0])
        marks.append((server_round, len(controller_s), time.perf_counter()))
        why = stop_here(server_round)
        if why is not None:
            stopped[0] = why
            raise _Stopped(why)
        return MetricRecord({k: v for k, v in evals[server_round].items()})

    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.WARNING)
    try:
        with server_identity():
            # Flower's Strategy.start has no stopping rule: the evaluation ends a budgeted run by raising.
            strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=spec.rounds,
                           timeout=3600.0, train_config=ConfigRecord({}), evaluate_fn=evaluate)
    except _Stopped:
        pass
    finally:
        flwr_logger.setLevel(level)
    hist = strategy.history.copy()
    if budgeted and stopped[0] == "rounds":
        stopped[0] = "cap"
    # A stopped run ran the rounds it evaluated (FedAsync writes a round's row after its evaluation: one less).
    expected = spec.rounds if stopped[0] in ("rounds", "cap") else len(evals) - 1
    if not (len(hist) == expected or (stopped[0] in ("target", "time budget") and len(hist) == expected - 1 >= 1)):
        raise RuntimeError(f"{spec.policy} on {spec.task} (seed {spec.seed}) ran {len(hist)} of {expected} rounds; "
                           "see the [adaptive] warnings above")
    hist = hist.sort_values("round").reset_index(drop=True)
    evals = {r: {("holdout_samples" if k == "samples" else k): v for k, v in m.items()} for r, m in evals.items()}
    for key in evals[0]:  # the holdout's size is not the round's "samples"
        hist[key] = [evals[int(r)][key] for r in hist["round"]]
    if sync:
        hist["strategy_s"] = np.add(configure_s[:len(hist)], aggregate_s[:len(hist)])
        hist["configure_s"] = configure_s[:len(hist)]
        hist["aggregate_s"] = aggregate_s[:len(hist)]
        bounds = [m[1] for m in marks]  # controller calls up to each evaluation (index 0: before round 1)
        hist["controller_s"] = [float(sum(controller_s[bounds[i]:bounds[i + 1]])) for i in range(len(hist))]
        hist["round_wall_s"] = np.add(hist["strategy_s"].to_numpy(), client_s[:2 * len(hist):2])
    hist["virtual_time_s"] = hist["makespan_s"].cumsum()
    hist["virtual_energy_j"] = hist["energy_j"].cumsum()
    first = {"round": 0, "virtual_time_s": 0.0, "virtual_energy_j": 0.0, **evals[0]}
    hist = pd.concat([pd.DataFrame([first]), hist], ignore_index=True)
    hist["policy"] = spec.label or spec.policy
    hist["stop"] = stopped[0]
    clients = strategy.client_history.copy()
    clients["policy"] = spec.label or spec.policy
    return RunResult(spec, hist, clients, time.perf_counter() - started)


class _Stopped(Exception):
    """A budgeted run's evaluation ends :meth:`Strategy.start` (its time budget or target is reached)."""


def idle_model_note(profiles: Sequence[DeviceProfile]) -> str:
    """One line describing a fleet: slowdown range and spread (for logs and the results page)."""
    s = np.array([p.slowdown for p in profiles])
    return (f"{len(s)} devices, slowdown {s.min():.2f}–{s.max():.2f} (max/min {s.max() / s.min():.1f}×, "
            f"σ of log-slowdown {np.log(s).std():.2f})")


def fmt_s(seconds: float) -> str:
    """``1 h 02 min``, ``3 min 05 s`` or ``12.3 s``."""
    if not math.isfinite(seconds):
        return "?"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{seconds:.1f} s"
