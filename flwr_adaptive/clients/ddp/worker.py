"""The DDP worker: one rank's round of data-parallel training on a per-step batch-size schedule.

Contract
--------
Every rank of a process group runs :meth:`DDPRank.train_round` with the same :class:`RoundPlan`.
All ranks then run the **same number of optimizer steps**; at step ``s`` rank ``i`` reads
``S[i, s]`` samples (``S = batch_schedule(quotas, steps)``, or the EMA baseline's per-step split),
sums their losses, scales by ``world / B_s`` (``B_s`` the step's global batch), back-propagates
and joins one gradient all-reduce whose average is the sample-mean gradient of the global batch.
A rank with an empty batch skips forward and backward, contributes zeros and still joins the
all-reduce: no padding, no dummy batch, no ``Join``. Every rank applies the same averaged
gradient, so the replicas stay identical (``RankTelemetry.params_digest`` checks it).

Per step the rank records forward, backward, the emulated slowness sleep, the all-reduce (its
wait for the slowest rank plus the transfer) and the optimizer step. ``time_s`` — what the
controller sees — is ``Σ_s slowdown × (forward + backward)``: its own compute on the emulated
device, waits excluded.

Why not ``torch.nn.parallel.DistributedDataParallel``: its reducer overlaps the all-reduce with
backward, so the wait for stragglers is hidden inside ``backward()`` and cannot be taken out of
``time_s``; and it needs every rank to run a forward pass, which an empty batch does not. The
flat post-backward all-reduce used here computes the same average (DDP's math) and measures
the wait exactly; it gives up DDP's overlap of communication with backward.

Emulated heterogeneity: a rank with ``slowdown`` k makes each step's compute last ``k ×`` its
measured compute ``c`` by sleeping *before* the all-reduce, so the other ranks really wait for
it. Compute is measured on the ``"process"`` clock (this process's CPU time; torch on one
thread, so contention with other ranks on shared cores does not inflate it) or on the ``"wall"``
clock (the default with CUDA, where CPU time does not see the GPU; the device is synchronized
before reading it). The sleep is ``max(0, k·c − w)`` with ``w`` the wall time the compute took:
on the wall clock (or with a core to itself) that is exactly ``(k − 1)·c``; when ranks share
cores and ``w > c`` the sleep absorbs the contention instead of stacking ``(k − 1)·c`` on top of
it, so on the wall clock the step still lasts ``k·c``. Where even that is impossible
(``w > k·c``) the excess is recorded as ``overrun_s``. Waits and round time are always wall
clock.

Cost
----
Per step: one all-reduce of ``P + 2·world`` numbers (P trainable parameters; the tail carries
every rank's compute time and batch size, which the EMA baseline and the per-step makespan
need) and two copies of the gradient into and out of a flat buffer. Memory: one flat buffer of
``P`` numbers.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from flwr_adaptive._logging import logger as log
from flwr_adaptive.clients.ddp.allreduce import GradientAllReduce
from flwr_adaptive.controller import Report
from flwr_adaptive.ema_batching import EmaBatchSizer
from flwr_adaptive.schedule import IndexStream, batch_schedule, loss_scales, step_makespan

__all__ = [
    "BALANCING",
    "WorkerSpec",
    "RoundPlan",
    "RankTelemetry",
    "GradientAllReduce",
    "DDPRank",
    "default_backend",
    "hardware_meter",
    "rank_device",
    "relative_slowdowns",
]

BALANCING = ("schedule", "ema")
"""``"schedule"``: per-rank quotas spread by ``batch_schedule`` (Equal or the controller's split);
``"ema"``: the per-step EMA batch-sizing baseline (quotas only fix the global batch)."""


_WARNED_GPUS: set = set()


def default_backend(ranks_per_host: int = 1) -> str:
    """``"nccl"`` when each of this host's ranks can have its own GPU, else ``"gloo"``.

    NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected"), so
    with more ranks than visible GPUs the ranks run gloo on the CPUs rather than failing to start
    (logged once per configuration). Pass ``backend=`` explicitly to override.
    """
    if not torch.cuda.is_available():
        return "gloo"
    gpus = torch.cuda.device_count()
    if gpus >= ranks_per_host:
        return "nccl"
    if (gpus, ranks_per_host) not in _WARNED_GPUS:
        _WARNED_GPUS.add((gpus, ranks_per_host))
        log.warning(
            "%d ranks on this host but %d visible GPU(s): NCCL needs one GPU per rank, so the ranks run "
            "gloo on the CPUs; give the process more GPUs or pass backend= explicitly",
            ranks_per_host,
            gpus,
        )
    return "gloo"


def rank_device(local_rank: int) -> torch.device:
    """The device of a rank: its own GPU (round-robin over the visible ones) or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def hardware_meter(rank: int, device: torch.device) -> Any:
    """A ``WorkerSpec.meter_fn`` reading the rank's own hardware counter.

    NVML's total-energy counter of the rank's GPU for a CUDA device, else what
    :func:`~flwr_adaptive.energy.auto_meter` finds for the CPU (RAPL, then the psutil model). A
    module-level function, so spawned ranks can unpickle it. Use it only when each rank has a
    device of its own (one GPU per rank, as with nccl): ranks sharing a GPU or a CPU package would
    each count the others' energy too.
    """
    from flwr_adaptive.energy import auto_meter

    if device.type == "cuda":
        return auto_meter(f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}")
    return auto_meter("cpu")


def relative_slowdowns(profiles: Sequence[Any]) -> tuple[list[float], list[float | None]]:
    """Per-rank ``(slowdowns, active watts)`` to emulate device profiles (anything with ``slowdown``).

    Profiles' slowdowns are relative to this host. Sleeping can only slow a rank down, so if some
    profile is faster than the host (slowdown < 1) all are divided by the smallest one (the
    fastest device then runs at host speed); otherwise they are used as they are. ``active_w``
    is read where the profile has it.
    """
    raw = [float(p.slowdown) for p in profiles]
    if not raw or min(raw) <= 0 or not all(math.isfinite(s) for s in raw):
        raise ValueError(f"profiles need finite slowdowns > 0, got {raw}")
    fastest = min(min(raw), 1.0)
    watts = [getattr(p, "active_w", None) for p in profiles]
    return [s / fastest for s in raw], [None if w is None else float(w) for w in watts]


def _default_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05)


@dataclass
class WorkerSpec:
    """What every rank builds once. Spawned ranks receive it pickled: use module-level callables.

    Parameters
    ----------
    model_fn : callable
        ``() -> torch.nn.Module``. Rank 0's initial parameters are broadcast to the others.
    data : tuple of tensors, torch Dataset, or callable
        The dataset every rank may read (the trusted-domain setting; for a silo, its partition):
        ``(inputs..., targets)`` tensors of equal length, a map-style ``Dataset`` whose items are
        such tuples, or a zero-argument callable returning either (loads inside the rank).
    loss_fn : callable or None
        ``(outputs, targets) -> scalar``: the **sum** of per-sample losses, e.g.
        ``torch.nn.CrossEntropyLoss(reduction="sum")``; the worker applies ``world / B_s``.
        The batch is ``(inputs..., targets)`` and the outputs are ``model(*inputs)``.
    optimizer_fn : callable, optional
        ``(parameters) -> Optimizer``; default SGD with lr 0.05.
    seed : int
        ``torch.manual_seed`` before ``model_fn`` (rank 0's model is broadcast anyway).
    batch_loss_fn : callable, optional
        ``(model, batch) -> scalar`` sum of per-sample losses, instead of ``loss_fn`` (for models
        whose batch is not ``(inputs..., targets)``, e.g. a task's ``loss(model, batch, "sum")``).
    collate_fn : callable, optional
        ``(dataset, indices) -> batch`` for a Dataset ``data`` (default: ``default_collate`` of
        the items); ``indices`` is a non-empty int64 array.
    meter_fn : callable, optional
        ``(rank, device) -> meter`` with ``begin_window(name)`` / ``end_window(name)`` returning a
        measurement with ``joules`` (e.g. ``lambda r, d: flwr_adaptive.energy.auto_meter(str(d))``).
        Each step's forward + backward is one window, so ``energy_j`` is the active energy of the
        rank's compute, waits excluded. A meter that fails to build or read gives
        ``energy_j = None``, never an error. ``RoundPlan.active_watts`` takes precedence.
    """

    model_fn: Callable[[], torch.nn.Module]
    data: Any
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None
    optimizer_fn: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer] | None = None
    seed: int = 0
    batch_loss_fn: Callable[[torch.nn.Module, tuple], torch.Tensor] | None = None
    collate_fn: Callable[[Any, np.ndarray], tuple] | None = None
    meter_fn: Callable[[int, torch.device], Any] | None = None


@dataclass
class RoundPlan:
    """One round, identical on every rank.

    Parameters
    ----------
    quotas : list of int
        Samples per rank; ``Σ quotas`` (the round's budget) must be at least ``steps``. With
        ``balancing="ema"`` only the sum matters (it fixes each step's global batch).
    steps : int
        Optimizer steps of the round, the same on every rank.
    start : int
        Position of the round's first sample in the shared index stream (samples consumed by
        earlier rounds).
    seed : int
        Shuffling seed of the index stream.
    slowdowns : list of float, optional
        Emulated slowness per rank (``>= 1``; 1 = host speed). ``None``: no emulation.
    active_watts : list of float, optional
        Per-rank active watts: ``energy_j = active_watts × time_s`` (the emulated meter).
    balancing : str
        ``"schedule"`` or ``"ema"`` (see :data:`BALANCING`).
    ema_smoothing : float
        EMA weight of the EMA baseline (used with ``balancing="ema"``).
    shuffle : bool
        Reshuffle the stream every epoch.
    """

    quotas: list[int]
    steps: int
    start: int = 0
    seed: int = 0
    slowdowns: list[float] | None = None
    active_watts: list[float | None] | None = None
    balancing: str = "schedule"
    ema_smoothing: float = 0.5
    shuffle: bool = True

    def validate(self, world: int) -> None:
        """Raise ``ValueError`` naming the bad field and what to do."""
        quotas = list(self.quotas)
        if len(quotas) != world:
            raise ValueError(f"quotas has {len(quotas)} entries for {world} ranks: give one quota per rank")
        if any(isinstance(q, bool) or not isinstance(q, (int, np.integer)) or q < 0 for q in quotas):
            raise ValueError(f"quotas must be ints >= 0, got {quotas}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, (int, np.integer)) or self.steps < 1:
            raise ValueError(f"steps must be an int >= 1, got {self.steps!r}")
        if sum(quotas) < self.steps:
            raise ValueError(
                f"the round's budget Σ quotas = {sum(quotas)} is below steps = {self.steps}: every "
                f"step needs at least one sample somewhere; lower steps or raise the budget"
            )
        if self.slowdowns is not None:
            if len(self.slowdowns) != world:
                raise ValueError(f"slowdowns has {len(self.slowdowns)} entries for {world} ranks")
            bad = [s for s in self.slowdowns if not (isinstance(s, (int, float)) and math.isfinite(s) and s >= 1)]
            if bad:
                raise ValueError(
                    f"slowdowns must be finite numbers >= 1 (sleeping cannot speed a rank up), got "
                    f"{bad}; divide by the fastest (see relative_slowdowns)"
                )
        if self.active_watts is not None and len(self.active_watts) != world:
            raise ValueError(f"active_watts has {len(self.active_watts)} entries for {world} ranks")
        if self.balancing not in BALANCING:
            raise ValueError(f"balancing must be one of {BALANCING}, got {self.balancing!r}")
        if not 0.0 < self.ema_smoothing <= 1.0:
            raise ValueError(f"ema_smoothing must lie in (0, 1], got {self.ema_smoothing!r}")


@dataclass
class RankTelemetry:
    """One rank's measurement of one round (picklable; ``asdict`` gives JSON types).

    ``time_s`` is the rank's own compute on the emulated device, ``Σ_s slowdown × (forward +
    backward)`` on ``clock``, waits excluded — the controller's input. ``wait_s`` (all-reduce:
    waiting for the slowest rank plus the transfer), ``wall_s``, ``sleep_s`` and
    ``compute_wall_s`` are wall-clock seconds; ``overrun_s`` is how much longer than
    ``slowdown × compute`` the compute took on the wall clock (contention the sleep could not
    absorb; near 0 when the emulation is faithful). Per-step lists have one entry per step;
    ``step_compute_s[j][s]`` is rank ``j``'s emulated compute at step ``s`` as every rank
    received it with the all-reduce.
    """

    rank: int
    world: int
    steps: int
    samples: int
    time_s: float
    energy_j: float | None
    wait_s: float
    wall_s: float
    clock: str
    slowdown: float
    overrun_s: float = 0.0
    batch_sizes: list[int] = field(default_factory=list)
    forward_s: list[float] = field(default_factory=list)
    backward_s: list[float] = field(default_factory=list)
    compute_wall_s: list[float] = field(default_factory=list)
    sleep_s: list[float] = field(default_factory=list)
    allreduce_s: list[float] = field(default_factory=list)
    optimizer_s: list[float] = field(default_factory=list)
    step_compute_s: list[list[float]] = field(default_factory=list)
    loss_sum: float = 0.0
    params_digest: str = ""

    def report(self) -> Report:
        """The controller's :class:`~flwr_adaptive.controller.Report` for this rank."""
        return Report(time_s=float(self.time_s), energy_j=self.energy_j, samples=int(self.samples))

    @property
    def makespan_s(self) -> float:
        """``Σ_s max_i t_{i,s}`` of the round (every rank computes the same value)."""
        return step_makespan(np.asarray(self.step_compute_s))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types."""
        return asdict(self)


def _load_data(data: Any, device: torch.device) -> tuple[tuple[torch.Tensor, ...] | None, Any, int]:
    """``(tensors on device, None, n)`` for tensor tuples, ``(None, dataset, n)`` for a Dataset."""
    if callable(data) and not isinstance(data, torch.utils.data.Dataset):
        data = data()
    if isinstance(data, (tuple, list)) and data and all(isinstance(t, torch.Tensor) for t in data):
        lengths = {len(t) for t in data}
        if len(lengths) != 1 or len(data) < 2:
            raise ValueError(
                f"data must be (inputs..., targets) tensors of one length, got lengths {[len(t) for t in data]}"
            )
        return tuple(t.to(device) for t in data), None, lengths.pop()
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return None, data, len(data)
    raise ValueError(
        f"data must be a tuple of tensors, a map-style Dataset or a callable returning one; got {type(data).__name__}"
    )


class DDPRank:
    """One rank's model, optimizer, data and gradient all-reduce, kept across rounds.

    Build it after ``torch.distributed.init_process_group``; building broadcasts rank 0's
    parameters and buffers to every rank (as ``DistributedDataParallel``'s constructor does).

    Parameters
    ----------
    spec : WorkerSpec
        The model, data, loss and optimizer recipe.
    device : torch.device, optional
        Default: :func:`rank_device` of the rank.
    clock : str
        ``"process"``, ``"wall"`` or ``"auto"`` (wall with CUDA, else process), see the module
        docstring.
    compute_clock, wall_clock, sleep : callable, optional
        Injected clocks and sleep (tests use fakes so expected values are exact).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        device: torch.device | None = None,
        clock: str = "auto",
        compute_clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError("DDPRank needs torch.distributed.init_process_group() first")
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.device = device if device is not None else rank_device(self.rank)
        if clock == "auto":
            clock = "wall" if self.device.type == "cuda" else "process"
        if clock not in ("process", "wall"):
            raise ValueError(f"clock must be 'process', 'wall' or 'auto', got {clock!r}")
        self.clock = clock
        self.wall_clock = wall_clock or time.perf_counter
        self.compute_clock = compute_clock or (time.process_time if clock == "process" else self.wall_clock)
        self.sleep = sleep or time.sleep
        if (spec.loss_fn is None) == (spec.batch_loss_fn is None):
            raise ValueError(
                "WorkerSpec needs exactly one of loss_fn (outputs, targets) and batch_loss_fn "
                "(model, batch), both summing per-sample losses"
            )
        reduction = getattr(spec.loss_fn, "reduction", "sum")
        if reduction != "sum":
            raise ValueError(
                f"loss_fn has reduction={reduction!r}; the DDP worker needs the sum of "
                "per-sample losses (it scales by world / B_s itself): pass reduction='sum'"
            )
        self.spec = spec
        torch.manual_seed(spec.seed)
        self.model = spec.model_fn().to(self.device)
        with torch.no_grad():
            for t in list(self.model.parameters()) + list(self.model.buffers()):
                dist.broadcast(t.data, src=0)
        self.tensors, self.dataset, self.dataset_size = _load_data(spec.data, self.device)
        self.optimizer = (spec.optimizer_fn or _default_optimizer)(self.model.parameters())
        self.sync = GradientAllReduce(self.model.parameters(), self.world, extra=2 * self.world)
        self.ema: EmaBatchSizer | None = None
        self.meter = None
        if spec.meter_fn is not None:
            try:
                self.meter = spec.meter_fn(self.rank, self.device)
            except Exception as exc:  # noqa: BLE001 - a missing meter must not stop training
                log.warning("rank %d: energy meter unavailable (%s); energy_j will be None", self.rank, exc)

    def _measure_begin(self) -> None:
        if self.meter is not None:
            try:
                self.meter.begin_window("ddp-compute")
            except Exception as exc:  # noqa: BLE001
                log.warning("rank %d: energy meter failed (%s); energy_j will be None", self.rank, exc)
                self.meter = None

    def _measure_end(self) -> float | None:
        if self.meter is None:
            return None
        try:
            joules = getattr(self.meter.end_window("ddp-compute"), "joules", None)
        except Exception as exc:  # noqa: BLE001
            log.warning("rank %d: energy meter failed (%s); energy_j will be None", self.rank, exc)
            self.meter = None
            return None
        return None if joules is None else float(joules)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load model weights on this rank (every rank must load the same) and reset the optimizer."""
        self.model.load_state_dict(state)
        self.optimizer = (self.spec.optimizer_fn or _default_optimizer)(self.model.parameters())

    def reset_ema(self) -> None:
        """Forget the EMA baseline's throughput estimates (e.g. between experiments)."""
        self.ema = None

    def params_digest(self) -> str:
        """SHA-1 of the parameters' bytes: equal on every rank iff the replicas are identical."""
        h = hashlib.sha1()
        for p in self.model.parameters():
            h.update(p.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    # ------------------------------------------------------------------ one step's pieces
    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _fetch(self, indices: np.ndarray) -> tuple[torch.Tensor, ...]:
        if self.tensors is not None:
            idx = torch.from_numpy(indices).to(self.device)
            return tuple(t.index_select(0, idx) for t in self.tensors)
        if self.spec.collate_fn is not None:
            batch = self.spec.collate_fn(self.dataset, indices)
        else:
            batch = torch.utils.data.default_collate([self.dataset[int(i)] for i in indices])
        return tuple(t.to(self.device) if isinstance(t, torch.Tensor) else t for t in batch)

    def _step_loss(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        if self.spec.batch_loss_fn is not None:
            return self.spec.batch_loss_fn(self.model, batch)
        *inputs, target = batch
        assert self.spec.loss_fn is not None  # __init__: exactly one of loss_fn and batch_loss_fn
        return self.spec.loss_fn(self.model(*inputs), target)

    # ------------------------------------------------------------------ the round
    def train_round(self, plan: RoundPlan) -> RankTelemetry:
        """Train one round; every rank of the group must call it with the same ``plan``."""
        plan.validate(self.world)
        rank, world = self.rank, self.world
        slowdown = 1.0 if plan.slowdowns is None else float(plan.slowdowns[rank])
        schedule = batch_schedule(list(plan.quotas), plan.steps)
        if plan.balancing == "ema" and self.ema is None:
            self.ema = EmaBatchSizer(world, smoothing=plan.ema_smoothing)
        ema = self.ema
        stream = IndexStream(self.dataset_size, seed=plan.seed, start=plan.start, shuffle=plan.shuffle)
        global_batches = schedule.sum(axis=0)
        tel = RankTelemetry(
            rank=rank,
            world=world,
            steps=0,
            samples=0,
            time_s=0.0,
            energy_j=None,
            wait_s=0.0,
            wall_s=0.0,
            clock=self.clock,
            slowdown=slowdown,
        )
        step_compute = np.zeros((world, plan.steps))
        loss_sum = 0.0
        joules: float | None = 0.0 if self.meter is not None else None
        self.model.train()
        wall_start = self.wall_clock()
        for s in range(plan.steps):
            if plan.balancing == "ema" and ema is not None:
                sizes = ema.split(int(global_batches[s]))
            else:
                sizes = schedule[:, s]
            scale = float(loss_scales(sizes[:, None], world)[0])
            mine = IndexStream.rank_slice(stream.take(int(sizes.sum())), sizes, rank)
            self.optimizer.zero_grad(set_to_none=True)

            self._measure_begin()
            w_start = self.wall_clock()
            c0 = self.compute_clock()
            if len(mine):
                loss = self._step_loss(self._fetch(mine))
                self._sync_device()
                c1 = self.compute_clock()
                (loss * scale).backward()
                self._sync_device()
                c2 = self.compute_clock()
                loss_sum += float(loss.detach())
            else:
                c1 = c2 = c0  # empty batch: zero gradient, but it still joins the all-reduce
            step_joules = self._measure_end()
            joules = None if joules is None or step_joules is None else joules + step_joules
            step_time = slowdown * (c2 - c0)
            compute_wall = self.wall_clock() - w_start
            nap = step_time - compute_wall
            if nap > 0:
                self.sleep(nap)
            else:
                tel.overrun_s -= nap
                nap = 0.0

            tail = np.zeros(2 * world)
            tail[rank] = step_time
            tail[world + rank] = len(mine)
            w0 = self.wall_clock()
            summed = self.sync(tail)
            w1 = self.wall_clock()

            o0 = self.compute_clock()
            self.optimizer.step()
            self._sync_device()
            o1 = self.compute_clock()

            step_compute[:, s] = summed[:world]
            if plan.balancing == "ema" and ema is not None:
                ema.update(summed[:world], np.rint(summed[world:]).astype(np.int64))
            tel.steps += 1
            tel.samples += len(mine)
            tel.batch_sizes.append(len(mine))
            tel.forward_s.append(c1 - c0)
            tel.backward_s.append(c2 - c1)
            tel.compute_wall_s.append(compute_wall)
            tel.sleep_s.append(nap)
            tel.allreduce_s.append(w1 - w0)
            tel.optimizer_s.append(o1 - o0)
        tel.wall_s = self.wall_clock() - wall_start
        # The own entry is exact; the others went through the all-reduce's dtype.
        step_compute[rank] = slowdown * (np.array(tel.forward_s) + np.array(tel.backward_s))
        tel.time_s = float(step_compute[rank].sum())
        tel.wait_s = float(sum(tel.allreduce_s))
        tel.step_compute_s = step_compute.tolist()
        tel.loss_sum = loss_sum
        watts = None if plan.active_watts is None else plan.active_watts[rank]
        if watts is not None:
            tel.energy_j = float(watts) * tel.time_s
        else:
            tel.energy_j = joules
        tel.params_digest = self.params_digest()
        return tel
