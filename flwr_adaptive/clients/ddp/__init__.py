"""The DDP regime in one import: worker, round driver, local launcher, ``torchrun`` entry point.

- :mod:`flwr_adaptive.clients.ddp.worker` — one rank's round on a per-step batch-size schedule
  (:class:`DDPRank`, :class:`RoundPlan`, :class:`RankTelemetry`).
- :mod:`flwr_adaptive.clients.ddp.allreduce` — the flat gradient all-reduce the ranks join every
  step (:class:`GradientAllReduce`).
- :mod:`flwr_adaptive.clients.ddp.driver` — between rounds: the controller and the plans
  (:class:`RoundDriver`, :func:`ddp_controller`, :func:`round_summary`).
- :mod:`flwr_adaptive.clients.ddp.launch` — k local ranks as spawned processes (:class:`LocalDDPGroup`,
  :func:`run_ddp_round`).
- :mod:`flwr_adaptive.clients.ddp.run` — ``torchrun --nproc-per-node K -m flwr_adaptive.clients.ddp ...``.
- :mod:`flwr_adaptive.clients.ddp.tasks` — the project's tasks (:mod:`flwr_adaptive.clients.tasks`) as worker specs
  (:func:`task_spec`).
- :mod:`flwr_adaptive.clients.ddp.toy` — small synthetic tasks for tests and the benchmark.

The schedule, its loss scales and the sampler live in :mod:`flwr_adaptive.schedule`; the EMA
batch-sizing baseline's arithmetic in :mod:`flwr_adaptive.ema_batching`.
"""

from flwr_adaptive.clients.ddp.driver import DDP_POLICIES, RoundDriver, ddp_controller, equal_quotas, round_summary
from flwr_adaptive.clients.ddp.launch import DDPRoundResult, LocalDDPGroup, run_ddp_round
from flwr_adaptive.clients.ddp.tasks import task_spec
from flwr_adaptive.clients.ddp.worker import (
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
