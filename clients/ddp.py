"""The DDP regime in one import: worker, round driver, local launcher, ``torchrun`` entry point.

- :mod:`clients.ddp_worker` — one rank's round on a per-step batch-size schedule
  (:class:`DDPRank`, :class:`RoundPlan`, :class:`RankTelemetry`, :class:`GradientAllReduce`).
- :mod:`clients.ddp_driver` — between rounds: the controller and the plans
  (:class:`RoundDriver`, :func:`ddp_controller`, :func:`round_summary`).
- :mod:`clients.ddp_launch` — k local ranks as spawned processes (:class:`LocalDDPGroup`,
  :func:`run_ddp_round`).
- :mod:`clients.ddp_run` — ``torchrun --nproc-per-node K -m clients.ddp_run ...``.
- :mod:`clients.ddp_tasks` — the project's tasks (:mod:`clients.tasks`) as worker specs
  (:func:`task_spec`).
- :mod:`clients.ddp_toy` — small synthetic tasks for tests and the benchmark.

The schedule, its loss scales and the sampler live in :mod:`flwr_adaptive.schedule`; the EMA
batch-sizing baseline's arithmetic in :mod:`flwr_adaptive.ema_batching`.
"""

from clients.ddp_driver import DDP_POLICIES, RoundDriver, ddp_controller, equal_quotas, round_summary
from clients.ddp_launch import DDPRoundResult, LocalDDPGroup, run_ddp_round
from clients.ddp_tasks import task_spec
from clients.ddp_worker import (
    BALANCING,
    DDPRank,
    GradientAllReduce,
    RankTelemetry,
    RoundPlan,
    WorkerSpec,
    default_backend,
    rank_device,
    relative_slowdowns,
)

__all__ = [
    "BALANCING",
    "DDP_POLICIES",
    "DDPRank",
    "DDPRoundResult",
    "GradientAllReduce",
    "LocalDDPGroup",
    "RankTelemetry",
    "RoundDriver",
    "RoundPlan",
    "WorkerSpec",
    "ddp_controller",
    "default_backend",
    "equal_quotas",
    "rank_device",
    "relative_slowdowns",
    "round_summary",
    "run_ddp_round",
    "task_spec",
]
