"""Local DDP launcher: k ranks as spawned processes on this machine, driven round by round.

Contract
--------
:class:`LocalDDPGroup` starts ``world`` rank processes once (``spawn`` start method, so it is safe
inside threads, Ray actors and CUDA processes), joins them in one process group and keeps their
models between rounds. ``run_round(plan)`` runs one round on every rank and returns each rank's
:class:`~flwr_adaptive.clients.ddp.worker.RankTelemetry`; ``set_state`` / ``get_state`` move model weights in
and out (a Flower silo client sets the global model, trains a round, reads the result back).
:func:`run_ddp_round` does all of that once: start, (load), train one round, read, stop.

The rendezvous is a ``TCPStore`` that the launcher itself listens on (port chosen by the OS and
held for the group's lifetime, so two groups on one host never race for a port). Collectives
time out after ``timeout_s`` (default 60 s) instead of torch's 30 minutes, so a dead rank ends
the round with an error within a minute. Each rank runs torch on one thread: ranks share the
host's cores, and more threads per rank would only make them contend.

A rank that raises, or dies, ends the round: the launcher stops all ranks and raises
``RuntimeError`` with the rank's traceback (DDP cannot go on without a rank; the caller decides
what a failed round means, e.g. a silo client reports the failure to the server).

Cost
----
Starting a group costs one Python + torch start per rank (≈ 2–4 s with 4 ranks on 2 cores);
a round then costs only its training plus one pipe message each way per rank.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
import torch.distributed as dist

from flwr_adaptive.clients.ddp.worker import DDPRank, RankTelemetry, RoundPlan, WorkerSpec, default_backend, rank_device

__all__ = ["LocalDDPGroup", "DDPRoundResult", "run_ddp_round"]

_HOST = "127.0.0.1"


def _rank_main(
    rank: int, world: int, port: int, spec: WorkerSpec, backend: str, timeout_s: float, clock: str, conn: Connection
) -> None:
    """Body of one spawned rank: join the group, build the rank, serve commands until "stop"."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by an earlier parallel region; intra-op threads are what matter
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        device = rank_device(rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.TCPStore(_HOST, port, world, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        worker = DDPRank(spec, device=device, clock=clock)
        conn.send(("ok", None))
    except BaseException:  # noqa: BLE001 - reported to the launcher, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    try:
        while True:
            command, arg = conn.recv()
            if command == "stop":
                break
            try:
                if command == "round":
                    result: Any = worker.train_round(arg)
                elif command == "set_state":
                    worker.load_state_dict(arg)
                    result = None
                elif command == "get_state":
                    result = worker.state_dict() if rank == 0 else None
                elif command == "reset_ema":
                    worker.reset_ema()
                    result = None
                else:
                    raise ValueError(f"unknown command {command!r}")
                conn.send(("ok", result))
            except Exception:  # noqa: BLE001 - reported to the launcher, which raises it
                conn.send(("error", traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):
        pass  # the launcher went away
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class LocalDDPGroup:
    """``world`` DDP ranks as local processes, kept alive across rounds.

    Parameters
    ----------
    spec : WorkerSpec
        Model, data, loss and optimizer recipe (pickled to every rank).
    world : int
        Number of ranks (``>= 1``).
    backend : str, optional
        ``"gloo"`` or ``"nccl"``; default :func:`~flwr_adaptive.clients.ddp.worker.default_backend` (nccl when
        CUDA is present).
    timeout_s : float
        Timeout of the rendezvous and of every collective.
    clock : str
        Compute clock of the ranks: ``"process"``, ``"wall"`` or ``"auto"``.

    Examples
    --------
    >>> with LocalDDPGroup(mlp_task(), world=4) as group:            # doctest: +SKIP
    ...     telemetry = group.run_round(RoundPlan(quotas=[500] * 4, steps=10))
    """

    def __init__(
        self, spec: WorkerSpec, world: int, backend: str | None = None, timeout_s: float = 60.0, clock: str = "auto"
    ) -> None:
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError(f"world must be an int >= 1, got {world!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.world = world
        self.backend = backend or default_backend(world)
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {self.backend!r}")
        self.timeout_s = float(timeout_s)
        timeout = datetime.timedelta(seconds=timeout_s)
        # The launcher's store holds its OS-chosen port for the group's lifetime: no port race.
        self._store = dist.TCPStore(_HOST, 0, world, is_master=True, wait_for_workers=False, timeout=timeout)
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        try:
            for rank in range(world):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_rank_main,
                    name=f"ddp-rank-{rank}",
                    daemon=True,
                    args=(rank, world, self._store.port, spec, self.backend, self.timeout_s, clock, child),
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            self._collect("start")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ commands
    def _collect(self, what: str) -> list[Any]:
        """Wait for one reply per rank; on an error or a dead rank stop the group and raise."""
        results: list[Any] = [None] * self.world
        pending = dict(enumerate(self._conns))
        sentinels = {p.sentinel: r for r, p in enumerate(self._procs)}
        while pending:
            ready = wait(list(pending.values()) + list(sentinels))
            for obj in ready:
                rank = next((r for r, c in pending.items() if c is obj), None)
                if rank is None:
                    continue  # a sentinel: handled below, after any message the rank left
                try:
                    status, payload = pending[rank].recv()  # obj is that connection
                except EOFError:
                    continue  # the rank died; its sentinel says so
                del pending[rank]
                if status == "error":
                    self.close()
                    raise RuntimeError(f"DDP rank {rank} failed during {what}; the group is stopped:\n{payload}")
                results[rank] = payload
            dead = [r for s, r in sentinels.items() if s in ready]
            if dead:
                code = self._procs[dead[0]].exitcode
                self.close()
                raise RuntimeError(f"DDP rank {dead[0]} exited during {what} (exit code {code}); the group is stopped")
        return results

    def _command(self, command: str, arg: Any = None, what: str | None = None) -> list[Any]:
        if not self._procs:
            raise RuntimeError("this LocalDDPGroup is closed; start a new one")
        for conn in self._conns:
            conn.send((command, arg))
        return self._collect(what or command)

    def run_round(self, plan: RoundPlan) -> list[RankTelemetry]:
        """Train one round on every rank; returns the ranks' telemetry in rank order."""
        plan.validate(self.world)  # here, so bad input is a ValueError and not a rank traceback
        return self._command("round", plan, "a round")

    def set_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load the same model weights on every rank (resets the optimizers)."""
        self._command("set_state", state)

    def get_state(self) -> dict[str, torch.Tensor]:
        """Rank 0's model weights (the replicas are identical)."""
        return self._command("get_state")[0]

    def reset_ema(self) -> None:
        """Forget the EMA baseline's throughput estimates on every rank."""
        self._command("reset_ema")

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop every rank (idempotent)."""
        for conn in self._conns:
            try:
                conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

    def __enter__(self) -> LocalDDPGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_procs", None):
            self.close()


@dataclass
class DDPRoundResult:
    """What :func:`run_ddp_round` returns: per-rank telemetry and the trained weights."""

    telemetry: list[RankTelemetry]
    state: dict[str, torch.Tensor] | None


def run_ddp_round(
    spec: WorkerSpec,
    quotas: Sequence[int],
    steps: int,
    *,
    state: dict[str, torch.Tensor] | None = None,
    start: int = 0,
    seed: int = 0,
    slowdowns: Sequence[float] | None = None,
    active_watts: Sequence[float | None] | None = None,
    balancing: str = "schedule",
    backend: str | None = None,
    timeout_s: float = 60.0,
    clock: str = "auto",
    return_state: bool = True,
) -> DDPRoundResult:
    """Start ``len(quotas)`` local ranks, train one round with these per-rank quotas, stop.

    Parameters
    ----------
    spec : WorkerSpec
        Model, data, loss and optimizer recipe.
    quotas : sequence of int
        Samples per rank (``Σ >= steps``).
    steps : int
        Optimizer steps, the same on every rank.
    state : dict, optional
        Model weights to start from (e.g. the global model of a federated round).
    start, seed : int
        Index-stream position and shuffling seed (see :class:`~flwr_adaptive.clients.ddp.worker.RoundPlan`).
    slowdowns, active_watts : sequence of float, optional
        Emulated per-rank slowness (``>= 1``) and active watts.
    balancing : str
        ``"schedule"`` or ``"ema"``.
    backend, timeout_s, clock
        As for :class:`LocalDDPGroup`.
    return_state : bool
        Read the trained weights back from rank 0.
    """
    plan = RoundPlan(
        quotas=[int(q) for q in quotas],
        steps=steps,
        start=start,
        seed=seed,
        slowdowns=None if slowdowns is None else list(slowdowns),
        active_watts=None if active_watts is None else list(active_watts),
        balancing=balancing,
    )
    plan.validate(len(plan.quotas))
    with LocalDDPGroup(spec, len(plan.quotas), backend=backend, timeout_s=timeout_s, clock=clock) as group:
        if state is not None:
            group.set_state(state)
        telemetry = group.run_round(plan)
        trained = group.get_state() if return_state else None
    return DDPRoundResult(telemetry=telemetry, state=trained)
