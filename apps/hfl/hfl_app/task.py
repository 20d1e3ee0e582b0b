"""HFL-DDP as a Flower App: silos (data owners) that each train with DDP on k local ranks.

Contract
--------
:func:`make_apps` builds the ServerApp and the ClientApp (``server_app.py`` and ``client_app.py``
export them as ``app``) that run hierarchical federated learning on one of the project's tasks
(default MNIST, offline):

- Every SuperNode is a **silo**: partition ``partition-id`` of ``num-partitions`` (IID) is its
  own data. Per round it runs one DDP round on k ranks (:func:`flwr_adaptive.clients.silo_train`;
  ``ranks`` = ``"2"`` by default, or a comma list cycled over the silos, e.g. ``"2,3"``). Ranks
  are emulated devices (the silos' ranks take the fleet's devices in turn), slowed by the DDP
  worker's sleep. ``spread`` picks the fleet: ``"testbed"`` (default) the 11 cited boards,
  ``"wide"`` 11 devices with lognormal σ = 1 slowdowns drawn per ``seed`` (:func:`wide_fleet`, the
  "wide" scenario of the project's results). With ``drift-round`` > 0, rank 0 of every silo
  computes ``drift-factor`` × slower from that round on.
- The server runs :class:`flwr_adaptive.strategies.HierarchicalAdaptiveStrategy` around FedAvg:
  the controller's groups are the silos, so samples move only between ranks of one silo and
  each silo processes ``silo-budget`` samples every round; silo models are averaged by samples,
  then evaluated on the task's holdout.
- With ``out-dir``: ``history-<policy>.csv`` (per round), ``-clients.csv`` (per silo),
  ``-ranks.csv`` (per rank) and ``summary-<policy>.json`` (``<policy>-paper`` with ``paper = true``), whose ``"status"`` is
  ``"finished"`` only when every round ran (``flwr run`` exits 0 even when a run failed); the
  CSVs get each round's rows as it ends and the summary is rewritten, so a run that dies leaves
  its rounds so far (an exception marks the summary ``"failed"``).
- With ``state-dir``: the controller state and the global model are saved after every round
  (:class:`~flwr_adaptive.strategies.resumable.ResumableRun`); a ServerApp restarted with the same
  ``state-dir`` and ``num-server-rounds`` continues at the next round from that model.

A round with fewer than ``num-silos`` connected SuperNodes for ``node-wait`` seconds (default 20)
fails the run with the fix in one line, never an endless wait.

Run config keys: :data:`DEFAULTS` (the same as ``pyproject.toml``); ``audit-dir`` logs the sample
ids every rank read (:func:`flwr_adaptive.clients.silo.audit_reads`).

Cost
----
Per round and silo: ``silo-budget`` samples of DDP training over its ranks; the first round
also starts the ranks (≈ 3–5 s per silo of two ranks on two shared cores), later rounds reuse
them (``keep-alive``). The server evaluates on the holdout once per round.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.clients.ddp.tasks import task_spec
from flwr_adaptive.clients.ddp.worker import WorkerSpec
from flwr_adaptive.clients.silo import audit_reads, silo_train
from flwr_adaptive.controller import POLICIES
from flwr_adaptive.devices import DeviceProfile, get_testbed, slowdown_at
from flwr_adaptive.strategies.hierarchical_adaptive_strategy import HierarchicalAdaptiveStrategy, aggregate_silo_metrics
from flwr_adaptive.strategies.registry import run_name
from flwr_adaptive.strategies.resumable import ResumableRun
from flwr_adaptive.strategies.run_summary import RunSummary, rounds_trained

__all__ = ["make_apps", "HflApps", "DEFAULTS", "SPREADS", "silo_ranks", "silo_devices", "wide_fleet",
           "task_silo_spec"]

DEFAULTS: dict[str, Any] = {
    "policy": "time", "num-server-rounds": 5, "num-silos": 3, "silo-budget": 600, "steps": 10, "ranks": "2",
    "task": "mnist", "smoothing": 0.5, "deadband": -1.0, "slack": -1.0, "paper": False,
    "weighting": "samples", "seed": 0, "lr": 0.0,
    "timeout": 600.0, "rank-timeout": 30.0, "backend": "auto", "keep-alive": True, "drift-round": 0,
    "drift-factor": 2.0, "spread": "testbed", "out-dir": "", "state-dir": "", "audit-dir": "", "node-wait": 20.0,
}

SPREADS = ("testbed", "wide")
"""The device fleets whose devices the silos' ranks emulate (run-config key ``spread``)."""

WIDE_SIGMA = 1.0
"""σ of the log-slowdowns of the ``wide`` fleet."""

SiloSpec = Callable[[int, int, dict], WorkerSpec]


def policy_default(value: float) -> float | None:
    """A run-config number where a negative value stands for "the strategy's default" (``None``)."""
    value = float(value)
    return None if value < 0 else value


def silo_ranks(pattern: str | int, partition_id: int) -> int:
    """k of silo ``partition_id`` from ``ranks``: an int, or a comma list cycled over the silos."""
    items = [p.strip() for p in str(pattern).split(",") if p.strip()]
    try:
        values = [int(p) for p in items]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise ValueError(f"ranks must be an int >= 1 or a comma list of them (e.g. \"2,3\"), got {pattern!r}")
    return values[partition_id % len(values)]


def wide_fleet(seed: int, sigma: float = WIDE_SIGMA) -> tuple[DeviceProfile, ...]:
    """11 devices whose slowdowns are ``median(testbed) × exp(σ·z)``, ``z ~ N(0, 1)``, drawn per ``seed``.

    The same fleet as the "wide" scenario of the PMA results (each seed is another fleet; the
    watts are those of the testbed's boards in order; no jitter: the emulation's own noise is
    jitter enough). Sleeping cannot speed a rank up, so when some device is faster than this host
    (slowdown < 1) the whole fleet is divided by the fastest one: the ratios between ranks, which
    are what the split sees, stay those drawn.
    """
    testbed = get_testbed(jitter_sigma=0.0)
    rng = np.random.default_rng([20221, int(seed)])
    median = float(np.median([p.slowdown for p in testbed]))
    slow = median * np.exp(float(sigma) * rng.standard_normal(len(testbed)))
    slow = slow / min(float(slow.min()), 1.0)
    return tuple(DeviceProfile(f"wide-{i}", p.arch, slowdown=round(float(s), 4), active_w=p.active_w,
                               idle_w=p.idle_w, jitter_sigma=0.0, model=f"lognormal σ={float(sigma):g}")
                 for i, (p, s) in enumerate(zip(testbed, slow)))


def silo_devices(pattern: str | int, partition_id: int, drift_round: int = 0, drift_factor: float = 2.0,
                 spread: str = "testbed", seed: int = 0) -> list[DeviceProfile]:
    """The emulated devices of silo ``partition_id``'s ranks (the fleet's devices in turn, silo after silo).

    ``spread`` picks the fleet (:data:`SPREADS`): ``"testbed"`` (the 11 cited boards) or
    ``"wide"`` (:func:`wide_fleet` of ``seed``). With ``drift_round`` > 0 the silo's rank 0
    computes ``drift_factor`` × slower from that round.
    """
    if spread not in SPREADS:
        raise ValueError(f"spread must be one of {SPREADS}, got {spread!r}")
    fleet = get_testbed(jitter_sigma=0.0) if spread == "testbed" else wide_fleet(seed)
    first = sum(silo_ranks(pattern, p) for p in range(partition_id))
    devices = [fleet[(first + r) % len(fleet)] for r in range(silo_ranks(pattern, partition_id))]
    if drift_round > 0:
        d = devices[0]
        devices[0] = replace(d, drift_from_round=int(drift_round), drift_slowdown=d.slowdown * float(drift_factor))
    return devices


@functools.lru_cache(maxsize=4)
def _task(name: str):
    from flwr_adaptive.clients.tasks import get_task

    return get_task(name, source="offline")


@functools.lru_cache(maxsize=16)
def _partition(name: str, partition_id: int, num_partitions: int, seed: int):
    return _task(name).load(partition_id, num_partitions, seed=seed)[0]


def task_silo_spec(partition_id: int, num_partitions: int, cfg: dict) -> WorkerSpec:
    """The silo's DDP recipe: the task's model, loss and optimizer over **its partition only**.

    The partition is loaded here, once per process, and shipped to the ranks with the spec (a
    few MB), so the ranks do not load the data source themselves.
    """
    lr = float(cfg["lr"]) or None
    spec = replace(task_spec(cfg["task"], lr=lr, seed=int(cfg["seed"])),
                   data=_partition(cfg["task"], partition_id, num_partitions, int(cfg["seed"])))
    if cfg["audit-dir"]:
        spec = audit_reads(spec, Path(cfg["audit-dir"]) / f"silo-{partition_id}")
    return spec


@dataclass
class HflApps:
    """The two apps plus, after a run in this process, the strategy that ran it and its result."""

    server_app: ServerApp
    client_app: ClientApp
    config: dict = field(default_factory=dict)
    strategy: HierarchicalAdaptiveStrategy | None = None
    result: Any = None  # flwr.serverapp.strategy.Result


def make_apps(config: dict | None = None, silo_spec: SiloSpec = task_silo_spec) -> HflApps:
    """Build the ServerApp and ClientApp.

    Parameters
    ----------
    config : dict, optional
        Overrides of :data:`DEFAULTS` (the run config, when given, overrides both).
    silo_spec : callable
        ``(partition_id, num_partitions, config) -> WorkerSpec``: each silo's DDP recipe over its
        own data (default :func:`task_silo_spec`).
    """
    base = {**DEFAULTS, **(config or {})}
    unknown = sorted(set(base) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown HFL config keys {unknown}; known: {sorted(DEFAULTS)}")
    if base["spread"] not in SPREADS:
        raise ValueError(f"HFL config spread must be one of {SPREADS}, got {base['spread']!r}")
    apps = HflApps(ServerApp(), ClientApp(), base)

    def cfg_of(context: Context) -> dict:
        return {**base, **dict(context.run_config)}

    @apps.client_app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg = cfg_of(context)
        pid, n = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
        k = silo_ranks(cfg["ranks"], pid)
        devices = silo_devices(cfg["ranks"], pid, int(cfg["drift-round"]), float(cfg["drift-factor"]),
                               spread=str(cfg["spread"]), seed=int(cfg["seed"]))
        # Slowdowns relative to this host; sleeping cannot speed a rank up, so at least 1.
        return silo_train(
            msg, context, spec=lambda: silo_spec(pid, n, cfg), ranks=k, steps=int(cfg["steps"]),
            budget=int(cfg["silo-budget"]),
            slowdowns=lambda rnd: [max(slowdown_at(d, max(rnd, 1)), 1.0) for d in devices],
            active_watts=[d.active_w for d in devices], idle_w=float(sum(d.idle_w for d in devices)),
            data_size=len(_partition(cfg["task"], pid, n, int(cfg["seed"]))), seed=int(cfg["seed"]),
            backend=None if cfg["backend"] == "auto" else str(cfg["backend"]), timeout_s=float(cfg["rank-timeout"]),
            keep_alive=bool(cfg["keep-alive"]))

    @apps.server_app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = cfg_of(context)
        out_dir = Path(cfg["out-dir"]) if cfg["out-dir"] else None
        name = run_name(str(cfg["policy"]), bool(cfg["paper"]))  # "time-paper" with paper=true: its files apart
        summary = RunSummary(out_dir, name, cfg["task"], {k: cfg[k] for k in DEFAULTS})
        with summary.guard():  # an exception marks the summary failed
            run(grid, cfg, summary, out_dir, name)

    def run(grid: Grid, cfg: dict, summary: RunSummary, out_dir: Path | None, name: str) -> None:
        task = _task(cfg["task"])
        _, holdout = task.data()
        n = int(cfg["num-silos"])
        policy = str(cfg["policy"])
        num_rounds = int(cfg["num-server-rounds"])
        strategy = HierarchicalAdaptiveStrategy(
            FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n,
                   train_metrics_aggr_fn=aggregate_silo_metrics),
            budget=int(cfg["silo-budget"]), steps=int(cfg["steps"]), policy=policy,
            smoothing=float(cfg["smoothing"]), deadband=policy_default(cfg["deadband"]),
            slack=policy_default(cfg["slack"]), paper=bool(cfg["paper"]), weighting=str(cfg["weighting"]),
            state_dir=cfg["state-dir"] or None)
        # a round short of silos fails the run after node-wait seconds with the fix, never hangs
        strategy.node_wait_s = float(cfg["node-wait"])
        strategy.node_wait_hint = (
            f"apps/hfl runs num-silos={n} silos, one per SuperNode: run with --federation-config "
            f"\"num-supernodes={n}\" (simulation) or start {n} SuperNodes, or pass -c \"num-silos=2\" for Flower's "
            "default local federation of 2; -c \"node-wait=<s>\" waits longer")
        apps.strategy = strategy
        model = task.make_model(seed=int(cfg["seed"]))

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            model.load_state_dict(arrays.to_torch_state_dict())
            metrics = {k: float(v) for k, v in task.evaluate(model, holdout).items()}
            summary.add_round(server_round, metrics)
            if out_dir is not None and server_round > 0:  # a run that dies leaves its rounds so far
                strategy.append_history(out_dir / f"history-{name}.csv", server_round)
            summary.write()
            return MetricRecord(metrics)

        started = time.perf_counter()
        # with state-dir the model is checkpointed every round: a restarted ServerApp continues from it
        resumable = ResumableRun(cfg["state-dir"] or None)
        resumed = summary.resume_from(resumable.load())
        if out_dir is not None and not resumed:  # a fresh run's per-round rows go to fresh files
            for suffix in ("", "-clients", "-ranks"):
                (out_dir / f"history-{name}{suffix}.csv").unlink(missing_ok=True)
        apps.result = resumable.start(strategy, grid, ArrayRecord(model.state_dict()), num_rounds=num_rounds,
                                      timeout=float(cfg["timeout"]), train_config=ConfigRecord({}), evaluate_fn=evaluate)
        wall = time.perf_counter() - started
        if out_dir is not None and not resumed:  # (a resumed run's files hold the earlier rounds too)
            strategy.save_history(out_dir / f"history-{name}.csv")
        done = max(apps.result.evaluate_metrics_serverapp, default=0) == num_rounds
        summary.finish(done, wall, rounds_trained(strategy) + resumed)
        summary.check()  # a run that aggregated nothing ends as failed, not normally

    return apps
