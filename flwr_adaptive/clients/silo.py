"""The HFL-DDP silo client: one data owner whose k local ranks train with DDP, round by round.

Contract
--------
A silo owns one partition of the data. Per Flower round it receives the global model, its
budget (``keys.QUOTA``: samples per round, fixed by the server) and, from round 2 on, the
per-rank split of that budget (``keys.RANK_QUOTAS``, one int per rank, summing to the budget)
and the step count (``keys.DDP_STEPS``). It runs one DDP round on k local ranks
(:class:`~flwr_adaptive.clients.ddp.launch.LocalDDPGroup`: spawned processes, see "Backend" below),
every rank reading only the silo's own partition through the shared, seeded index stream, and
replies with the silo model (rank 0's weights: the replicas are identical) and:

- the PMA telemetry keys of :mod:`flwr_adaptive.clients.telemetry` for the silo as a whole, so any adaptive
  strategy can read it: ``keys.SAMPLES`` = Σ rank samples (= the budget), ``keys.TIME_S`` = the
  round's compute makespan ``Σ_s max_i t_{i,s}`` (waits excluded), ``keys.ENERGY_J`` = Σ rank
  active joules, ``keys.CPU_TIME_S`` = Σ rank forward + backward + optimizer seconds,
  ``keys.WALL_TIME_S`` = wall seconds of the whole call (rank start-up included);
- one list per rank for each of ``keys.SILO_RANK_KEYS`` (samples, own compute seconds, active
  joules, all-reduce seconds), in rank order. Silos with different k send lists of different
  lengths: aggregate them with
  :func:`flwr_adaptive.strategies.hierarchical_adaptive_strategy.aggregate_silo_metrics`, not Flower's
  default (it zips lists strictly).

Without ``keys.RANK_QUOTAS`` (round 1, or a server that does not know the silo's ranks yet) the
budget is split evenly; a list of the wrong length is logged and replaced by the even split.
Rank times are on the ranks' compute clock (``"process"``: each rank's CPU seconds, torch on
one thread; × the emulated slowdown when one is set, i.e. emulated device time), the waits on
the wall clock.

Emulated devices (``slowdowns`` given): host spikes are not amplified. A step whose CPU
seconds exceed :data:`SPIKE_HEADROOM` above the rank's median step of the round (scaled up for
a larger batch) is counted at that cap (:func:`despiked_steps`), in the rank times, the silo's
makespan and the modelled energy. Why: the ranks of all emulated devices share this host, so a
page fault, an interrupt or another process's burst inflates one step's CPU seconds (+40–50 %
on one or two of a round's ten steps, measured on a shared 2-core machine), and the emulation
multiplies that by the device's slowdown (3–15× for the testbed): host noise a real device,
computing alone, would not have, scaled into its clock. Contention only ever inflates CPU
time, so only the top is clipped; a slower round as a whole (every step slower) is kept. A
silo without ``slowdowns`` (real devices) reports its ranks' seconds as measured.

A round that started the ranks also pays torch's lazy set-up (first forward and backward) in
their compute time; the reply says so (``keys.COLD_START``), and the hierarchical strategy
replaces that round's estimates with the ranks' first warm round.

Backend: nccl when each rank can have its own GPU, else gloo on the CPUs (:func:`silo_backend`:
NCCL refuses two ranks on one GPU).

Failures: ranks that fail to start, or die in a round, raise ``RuntimeError`` naming the silo
and carrying the rank's traceback; Flower turns it into an error reply, the strategy skips the
silo for that round and the other silos' round completes. Start-up and every collective time
out after ``timeout_s`` (default 30 s, not torch's 30 minutes), so a broken silo cannot pin
the process (a Ray actor in simulation) that serves it. The next round starts fresh ranks.
(Ranks that all hang outside a collective, e.g. in a data loader that never returns, are not
timed out; Flower's round ``timeout`` then drops the silo's reply.)

Cost
----
Starting k ranks costs one Python + torch start each (≈ 3–5 s for two ranks on two shared
cores), far more than a small round. With ``keep_alive`` (default) a process keeps each silo's
ranks between rounds (at most ``max_alive`` silos per process, least recently used closed
first, and those of an earlier run closed when a new run starts; a silo is closed only between
its rounds; each kept rank holds one torch process, ≈ 0.3 GB resident), so a round costs only its
training plus one model transfer each way per rank. Flower's simulation engine may run any
silo in any of its actors: with several actors each may keep ranks of the same silo; one actor
(``client_resources`` num_cpus = the machine's cores) keeps exactly k ranks per silo. A
deployed SuperNode that starts a process per message keeps nothing and pays the start every
round (``keep_alive=False`` says so explicitly).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from flwr_adaptive import keys
from flwr_adaptive._logging import logger as log
from flwr_adaptive.clients.ddp.driver import equal_quotas, round_summary
from flwr_adaptive.clients.ddp.launch import LocalDDPGroup
from flwr_adaptive.clients.ddp.worker import RankTelemetry, RoundPlan, WorkerSpec, default_backend
from flwr_adaptive.clients.despike import SPIKE_HEADROOM, despiked_steps
from flwr_adaptive.clients.silo_audit import audit_reads, read_audit

if TYPE_CHECKING:
    from flwr.app import Context, Message

__all__ = [
    "Silo",
    "SiloRound",
    "silo_train",
    "split_budget",
    "silo_backend",
    "audit_reads",
    "read_audit",
    "close_silos",
    "SILO_STATE",
    "SPIKE_HEADROOM",
    "despiked_steps",
]


SILO_STATE = "flwr-adaptive-silo"
"""Name of the ``context.state`` record in which a silo keeps its index-stream position."""

SlowdownSpec = Sequence[float] | Callable[[int], Sequence[float] | None] | None


@dataclass
class SiloRound:
    """What one silo round produced.

    Attributes
    ----------
    quotas : list of int
        Samples assigned to each rank.
    telemetry : list of RankTelemetry
        Each rank's measurement, in rank order.
    state : dict or None
        The trained weights (rank 0's; the replicas are identical).
    start, end : int
        Index-stream positions before and after the round (``end`` is the next round's start).
    wall_s : float
        Wall seconds of the whole call, rank start-up included.
    cold_start : bool
        The ranks were started for this round: their compute includes torch's first-call set-up
        (reported as ``keys.COLD_START``, so the server does not take it for slowness).
    emulated : bool
        The ranks emulated devices (``slowdowns`` given): :meth:`metrics` reports their times
        with host spikes capped (:func:`despiked_steps`).
    """

    quotas: list[int]
    telemetry: list[RankTelemetry]
    state: dict[str, torch.Tensor] | None
    start: int
    end: int
    wall_s: float
    cold_start: bool = False
    emulated: bool = False

    @property
    def samples(self) -> int:
        """Samples processed by all ranks (the silo's budget)."""
        return int(sum(t.samples for t in self.telemetry))

    @property
    def clock(self) -> str:
        """The ranks' compute clock (``"process"`` or ``"wall"``)."""
        return self.telemetry[0].clock if self.telemetry else "wall"

    def metrics(
        self,
        partition_id: int | None = None,
        data_size: int | None = None,
        idle_w: float | None = None,
        momentum: float | None = None,
    ) -> dict[str, int | float | list[int] | list[float]]:
        """The reply's metrics: the silo's telemetry keys plus one list per rank (see module doc).

        Parameters
        ----------
        partition_id : int, optional
            The silo's stable id (``keys.UNKNOWN`` when ``None``).
        data_size : int, optional
            Samples in the silo's partition (``keys.UNKNOWN`` when ``None``).
        idle_w : float, optional
            Watts the silo's devices draw while waiting for other silos (``-1.0`` when unknown).
        momentum : float, optional
            The ranks' optimizer momentum (``keys.LOCAL_MOMENTUM``; ``-1.0`` when unknown). The
            silo's local work is its DDP round: ``keys.LOCAL_STEPS`` is the round's step count
            (every rank takes the same steps; one step is one global batch of the silo).
        """
        tel = sorted(self.telemetry, key=lambda t: t.rank)
        summary = round_summary(tel)
        energies = [t.energy_j for t in tel]
        times = [float(t.time_s) for t in tel]
        makespan = float(summary["makespan_s"])
        if self.emulated and tel:
            steps = np.array([despiked_steps(t.step_compute_s[t.rank], t.batch_sizes) for t in tel])
            despiked = steps.sum(axis=1)
            energies = [
                e if e is None or raw <= 0 else e * float(d) / raw for e, d, raw in zip(energies, despiked, times)
            ]
            times = despiked.tolist()
            makespan = float(steps.max(axis=0).sum())
        known = [e for e in energies if e is not None]
        measured = len(known) == len(energies)
        return {
            keys.NUM_EXAMPLES: self.samples,
            keys.SAMPLES: self.samples,
            keys.TIME_S: makespan,
            keys.CPU_TIME_S: float(sum(sum(t.forward_s) + sum(t.backward_s) + sum(t.optimizer_s) for t in tel)),
            keys.WALL_TIME_S: float(self.wall_s),
            keys.ENERGY_J: float(sum(known)) if measured else keys.UNMEASURED_ENERGY,
            keys.DATA_SIZE: keys.UNKNOWN if data_size is None else int(data_size),
            keys.PARTITION_ID: keys.UNKNOWN if partition_id is None else int(partition_id),
            keys.QUOTA_CAPPED: 0,
            keys.IDLE_W: float(keys.UNKNOWN) if idle_w is None else float(idle_w),
            keys.VIRTUAL_CLOCK: int(self.clock == "process"),
            keys.COLD_START: int(self.cold_start),
            # the ranks' start-up is HFL's own rule (keys.COLD_START and the start-up round)
            keys.SETUP_S: float(keys.UNKNOWN),
            keys.LOCAL_STEPS: int(tel[0].steps) if tel and tel[0].steps else keys.UNKNOWN,
            keys.LOCAL_MOMENTUM: float(keys.UNKNOWN) if momentum is None else float(momentum),
            keys.LOCAL_LR: float(keys.UNKNOWN),
            keys.LOCAL_PROXIMAL_MU: 0.0,  # the DDP worker adds no proximal term
            keys.RANK_SAMPLES: [int(t.samples) for t in tel],
            keys.RANK_TIME_S: [float(t) for t in times],
            keys.RANK_ENERGY_J: [keys.UNMEASURED_ENERGY if e is None else float(e) for e in energies],
            keys.RANK_WAIT_S: [float(t.wait_s) for t in tel],
        }


def split_budget(
    budget: int, ranks: int, rank_quotas: Sequence[int] | None = None, silo: Hashable = "silo"
) -> list[int]:
    """The per-rank quotas of one round: ``rank_quotas`` when they fit, else ``budget`` evenly.

    Parameters
    ----------
    budget : int
        The silo's samples for the round (``keys.QUOTA``).
    ranks : int
        Ranks of the silo's DDP group.
    rank_quotas : sequence of int, optional
        The server's split (``keys.RANK_QUOTAS``). Used when it has one non-negative int per
        rank summing to ``budget``; otherwise a warning is logged and the budget is split evenly
        (a server that has not seen this silo's ranks yet, or a silo whose rank count changed).
    """
    if rank_quotas is not None and len(rank_quotas) > 0:
        q = [int(v) for v in rank_quotas]
        if len(q) == ranks and sum(q) == budget and min(q) >= 0:
            return q
        log.warning(
            "silo %s: rank quotas %s do not fit %d ranks and a budget of %d; splitting the budget evenly",
            silo,
            q,
            ranks,
            budget,
        )
    return equal_quotas(budget, ranks)


def silo_backend(ranks: int, backend: str | None = None) -> str:
    """``backend`` if given; else :func:`~flwr_adaptive.clients.ddp.worker.default_backend` for the silo's k ranks.

    In Flower's simulation the actor only sees GPUs when ``client_resources`` asks for them
    (``num_gpus``).
    """
    return backend if backend is not None else default_backend(ranks)


class Silo:
    """One silo's k DDP ranks as local processes, kept alive across rounds.

    Parameters
    ----------
    spec : WorkerSpec
        Model, loss, optimizer and **the silo's own data** (e.g.
        ``flwr_adaptive.clients.ddp.tasks.task_spec(name, partition_id=pid, num_partitions=n)``).
    ranks : int
        k, the ranks of the silo's DDP group (default 2).
    backend : str, optional
        ``"gloo"`` or ``"nccl"``; default :func:`silo_backend` (nccl when every rank can have its
        own GPU, else gloo on the CPUs).
    timeout_s : float
        Start-up and collective timeout of the ranks (seconds).
    clock : str
        The ranks' compute clock: ``"process"``, ``"wall"`` or ``"auto"``.
    keep_alive : bool
        Keep the ranks between rounds (``False``: start and stop them in every ``train``).
    name : str
        The silo's name in errors and logs.

    Examples
    --------
    >>> with Silo(task_spec("mnist", partition_id=0, num_partitions=3), ranks=2) as silo:  # doctest: +SKIP
    ...     result = silo.train([300, 100], steps=10, state=global_weights, slowdowns=[1.0, 3.0])
    """

    def __init__(
        self,
        spec: WorkerSpec,
        ranks: int = 2,
        *,
        backend: str | None = None,
        timeout_s: float = 30.0,
        clock: str = "auto",
        keep_alive: bool = True,
        name: str = "silo",
    ) -> None:
        if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
            raise ValueError(f"silo {name}: ranks must be an int >= 1, got {ranks!r}")
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"silo {name}: timeout_s must be a number > 0, got {timeout_s!r}")
        self.spec = spec
        self.ranks = int(ranks)
        self.backend = silo_backend(self.ranks, backend)
        self.timeout_s = float(timeout_s)
        self.clock = clock
        self.keep_alive = bool(keep_alive)
        self.name = name
        self._group: LocalDDPGroup | None = None
        # One round at a time (the ranks serve one command stream); close() takes it too, so that
        # eviction or close_silos() never stops ranks mid-round. Reentrant: train() closes on failure.
        self._lock = threading.RLock()

    @property
    def alive(self) -> bool:
        """Whether ranks are running (kept from an earlier round)."""
        return self._group is not None

    def start(self) -> bool:
        """Start the ranks unless they run; returns whether they had to be started."""
        if self._group is not None:
            return False
        try:
            self._group = LocalDDPGroup(
                self.spec, self.ranks, backend=self.backend, timeout_s=self.timeout_s, clock=self.clock
            )
        except Exception as err:
            raise RuntimeError(
                f"silo {self.name}: its {self.ranks} DDP ranks failed to start "
                f"(backend {self.backend}, timeout {self.timeout_s:g} s): {err}"
            ) from err
        return True

    def train(
        self,
        quotas: Sequence[int],
        steps: int,
        *,
        state: Mapping[str, torch.Tensor] | None = None,
        start: int = 0,
        seed: int = 0,
        slowdowns: Sequence[float] | None = None,
        active_watts: Sequence[float | None] | None = None,
    ) -> SiloRound:
        """One DDP round: load ``state`` on every rank, train on these per-rank quotas, read back.

        Parameters
        ----------
        quotas : sequence of int
            Samples of each rank (one per rank; ``Σ >= steps``).
        steps : int
            Optimizer steps of the round, the same on every rank.
        state : mapping, optional
            Model weights to start from (the global model).
        start, seed : int
            Position in, and seed of, the silo's shuffled index stream.
        slowdowns, active_watts : sequence of float, optional
            Emulated per-rank slowness (``>= 1``) and active watts.

        Raises
        ------
        ValueError
            A plan that does not fit the silo (wrong number of quotas, Σ quotas < steps...).
        RuntimeError
            Ranks that failed to start or failed during the round (the ranks are stopped; the
            next call starts new ones).
        """
        plan = RoundPlan(
            quotas=[int(q) for q in quotas],
            steps=steps,
            start=int(start),
            seed=int(seed),
            slowdowns=None if slowdowns is None else [float(s) for s in slowdowns],
            active_watts=None if active_watts is None else list(active_watts),
        )
        try:
            plan.validate(self.ranks)
        except ValueError as err:
            raise ValueError(f"silo {self.name}: {err}") from None
        with self._lock:
            began = time.perf_counter()
            cold = self.start()
            group = self._group
            assert group is not None
            try:
                if state is not None:
                    group.set_state(dict(state))
                telemetry = group.run_round(plan)
                trained = group.get_state()
            except Exception as err:
                self.close()
                raise RuntimeError(f"silo {self.name}: the DDP round failed and its ranks were stopped: {err}") from err
            finally:
                if not self.keep_alive:
                    self.close()
            wall = time.perf_counter() - began
        end = plan.start + sum(t.samples for t in telemetry)
        return SiloRound(
            quotas=list(plan.quotas),
            telemetry=telemetry,
            state=trained,
            start=plan.start,
            end=end,
            wall_s=wall,
            cold_start=cold,
            emulated=plan.slowdowns is not None,
        )

    def close(self) -> None:
        """Stop the ranks (idempotent); a round in progress (another thread) is finished first."""
        with self._lock:
            group, self._group = self._group, None
            if group is not None:
                group.close()

    def __enter__(self) -> Silo:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------- silos kept in a process
_ALIVE: OrderedDict[tuple, Silo] = OrderedDict()
_ALIVE_LOCK = threading.Lock()


def _kept_silo(key: tuple, make: Callable[[], Silo], max_alive: int) -> Silo:
    """The silo kept under ``key`` (made on first use); closes the least recently used beyond ``max_alive``.

    ``key[0]`` is the Flower run id: silos kept by other runs (finished ones; one process serves
    one run at a time) are closed, so their ranks do not outlive their run.
    """
    with _ALIVE_LOCK:
        evicted = [_ALIVE.pop(k) for k in list(_ALIVE) if k[0] != key[0]]
        silo = _ALIVE.pop(key, None) or make()
        _ALIVE[key] = silo
        while len(_ALIVE) > max(max_alive, 1):
            evicted.append(_ALIVE.popitem(last=False)[1])
    for old in evicted:  # outside the lock: close() waits for a round in progress
        old.close()
    return silo


def close_silos() -> int:
    """Stop every silo kept in this process; returns how many were running."""
    with _ALIVE_LOCK:
        silos = list(_ALIVE.values())
        _ALIVE.clear()
    for silo in silos:
        silo.close()
    return len(silos)


def _int_config(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"config {key!r} must be an int, got {value!r}")
    return int(value)


def silo_train(
    msg: Message,
    context: Context,
    spec: WorkerSpec | Callable[[], WorkerSpec],
    *,
    ranks: int = 2,
    steps: int = 10,
    budget: int | None = None,
    slowdowns: SlowdownSpec = None,
    active_watts: Sequence[float | None] | None = None,
    idle_w: float | None = None,
    data_size: int | None = None,
    seed: int = 0,
    backend: str | None = None,
    timeout_s: float = 30.0,
    clock: str = "auto",
    keep_alive: bool = True,
    max_alive: int = 4,
    momentum: float | None = None,
) -> Message:
    """The body of a silo's ``@app.train()``: one DDP round on the received model and quotas.

    Parameters
    ----------
    msg : flwr.app.Message
        The train message: one ArrayRecord (the global model) and a ConfigRecord with
        ``keys.QUOTA``, optionally ``keys.RANK_QUOTAS``, ``keys.DDP_STEPS`` and ``keys.ROUND``.
    context : flwr.app.Context
        The node's context; ``node_config["partition-id"]`` names the silo, ``context.state``
        keeps its index-stream position between rounds.
    spec : WorkerSpec or callable
        The silo's DDP recipe over its own partition, or a zero-argument factory of it (only
        called when the ranks have to be started).
    ranks : int
        k, the silo's ranks (default 2).
    steps : int
        Optimizer steps per round when the server does not send ``keys.DDP_STEPS``.
    budget : int, optional
        Samples per round when the server does not send ``keys.QUOTA`` (a plain FedAvg server).
    slowdowns : sequence of float, or callable, optional
        Emulated per-rank slowness, or ``server_round -> slowdowns`` (drifting devices).
    active_watts : sequence of float, optional
        Per-rank active watts of the emulated devices (``energy_j = watts × time_s``).
    idle_w : float, optional
        The silo's idle watts while it waits for other silos (reported as ``keys.IDLE_W``).
    data_size : int, optional
        Samples in the silo's partition (reported as ``keys.DATA_SIZE``).
    seed : int
        Seed of the silo's shuffled index stream.
    backend, timeout_s, clock, keep_alive
        As for :class:`Silo`.
    max_alive : int
        Most silos whose ranks one process keeps between rounds.
    momentum : float, optional
        The momentum of the spec's optimizer (reported as ``keys.LOCAL_MOMENTUM`` for normalised
        aggregation; the default optimizer, SGD without momentum, is 0.0). ``None``: 0.0 with the
        default optimizer, unknown with ``spec.optimizer_fn``.

    Returns
    -------
    flwr.app.Message
        The reply: ``"arrays"`` (the silo model) and ``"metrics"`` (see the module docstring).
    """
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    config: Mapping[str, Any] = {}
    for record in msg.content.config_records.values():
        config = {**config, **dict(record)}
    arrays = list(msg.content.array_records.values())
    if len(arrays) != 1:
        raise ValueError(
            f"the train message carries {len(arrays)} ArrayRecords; a silo expects exactly one (the global model)"
        )
    pid_raw = context.node_config.get("partition-id")
    partition_id = None if pid_raw is None else int(pid_raw)
    name = f"{partition_id}" if partition_id is not None else f"node-{msg.metadata.dst_node_id}"
    silo_budget = _int_config(config, keys.QUOTA)
    if silo_budget is None:
        silo_budget = budget
    if silo_budget is None:
        raise ValueError(
            f"silo {name}: the server sent no {keys.QUOTA!r} and silo_train got no budget=; "
            "use the hierarchical strategy or pass budget="
        )
    steps = _int_config(config, keys.DDP_STEPS) or steps
    server_round = _int_config(config, keys.ROUND) or 0
    quotas = split_budget(silo_budget, ranks, config.get(keys.RANK_QUOTAS), silo=name)
    round_slowdowns = slowdowns(server_round) if callable(slowdowns) else slowdowns

    state = arrays[0].to_torch_state_dict()
    start = 0
    if SILO_STATE in context.state:
        start = int(cast(int, context.state[SILO_STATE]["stream-position"]))  # an int, as written below

    def make() -> Silo:
        return Silo(
            spec() if callable(spec) else spec,
            ranks,
            backend=backend,
            timeout_s=timeout_s,
            clock=clock,
            keep_alive=keep_alive,
            name=name,
        )

    if keep_alive:
        key = (getattr(msg.metadata, "run_id", None), name, ranks, backend)
        silo = _kept_silo(key, make, max_alive)
    else:
        silo = make()
    result = silo.train(
        quotas, steps, state=state, start=start, seed=seed, slowdowns=round_slowdowns, active_watts=active_watts
    )
    if result.state is None:  # Silo.train always returns rank 0's weights
        raise RuntimeError(f"silo {name}: the round returned no weights")
    context.state[SILO_STATE] = ConfigRecord({"stream-position": int(result.end)})
    if momentum is None and not callable(spec) and spec.optimizer_fn is None:
        momentum = 0.0  # the worker's default optimizer: plain SGD
    metrics = MetricRecord(
        result.metrics(partition_id=partition_id, data_size=data_size, idle_w=idle_w, momentum=momentum)
    )
    content = RecordDict({"arrays": ArrayRecord(result.state), "metrics": metrics})
    return Message(content=content, reply_to=msg)
