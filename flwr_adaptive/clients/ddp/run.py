"""``torchrun`` entry point: adaptive DDP rounds across real processes, hosts and GPUs.

Usage (one host, four ranks; on several hosts add torchrun's ``--nnodes``/``--rdzv-*`` options)::

    torchrun --nproc-per-node 4 -m flwr_adaptive.clients.ddp --task flwr_adaptive.clients.ddp.toy:cnn_task \\
        --policy time --rounds 5 --budget 4000 --steps 20 [--slowdowns 1,1.5,2,3] [--json out.json]

Contract
--------
Every rank joins the group torchrun describes (``env://``; nccl when every local rank has a GPU of
its own, else gloo),
builds the task's :class:`~flwr_adaptive.clients.ddp.worker.WorkerSpec` (``--task module:factory``, called with
no arguments) and runs ``--rounds`` rounds. Rank 0 owns the
:class:`~flwr_adaptive.clients.ddp.driver.RoundDriver` (and so the controller): before each round it broadcasts
the plan, after it gathers every rank's telemetry, feeds the controller and prints one line per
round. With ``--json`` rank 0 writes every round's plan, summary and per-rank telemetry. Energy
(``--meter``): with a GPU per rank each rank reads its GPU's NVML counter over its compute
windows; otherwise the emulated watts of ``--slowdowns`` or nothing (the controller then uses time).

Cost
----
Per round: one object broadcast and one object gather on top of the training itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.distributed as dist

from flwr_adaptive.clients.ddp.driver import DDP_POLICIES, RoundDriver, round_summary
from flwr_adaptive.clients.ddp.worker import (
    DDPRank,
    RoundPlan,
    WorkerSpec,
    default_backend,
    hardware_meter,
    rank_device,
)

__all__ = ["main", "load_task", "parse_args"]


def load_task(ref: str) -> WorkerSpec:
    """Build the ``WorkerSpec`` named by ``"module:factory"`` (the factory takes no arguments)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--task must look like 'package.module:factory', got {ref!r}")
    spec = getattr(importlib.import_module(module_name), attr)()
    if not isinstance(spec, WorkerSpec):
        raise ValueError(
            f"--task {ref!r} returned {type(spec).__name__}, expected a flwr_adaptive.clients.ddp.worker.WorkerSpec"
        )
    return spec


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    p = argparse.ArgumentParser(prog="torchrun ... -m flwr_adaptive.clients.ddp", description=__doc__.split("\n")[0])
    p.add_argument(
        "--task", default="flwr_adaptive.clients.ddp.toy:cnn_task", help="module:factory returning a WorkerSpec"
    )
    p.add_argument("--policy", default="time", choices=DDP_POLICIES)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=int, default=4000, help="samples per round over all ranks")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per round (same on every rank)")
    p.add_argument("--slowdowns", type=_floats, default=None, help="emulated per-rank slowness, e.g. 1,2,3 (>= 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadband", type=float, default=0.02, help="controller deadband")
    p.add_argument("--smoothing", type=float, default=0.5, help="controller EMA weight of the newest round")
    p.add_argument("--timeout-s", type=float, default=60.0, help="collective timeout")
    p.add_argument("--backend", default=None, choices=["gloo", "nccl"], help="default: nccl with CUDA, else gloo")
    p.add_argument(
        "--meter",
        default="auto",
        choices=["auto", "hardware", "none"],
        help="energy per rank: 'hardware' reads the rank's own counter (NVML on its GPU); 'auto' (default) "
        "does so when every rank has a GPU of its own (nccl), else leaves energy to --slowdowns' "
        "emulated watts or unmeasured",
    )
    p.add_argument("--json", default=None, help="rank 0 writes every round's telemetry here")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rounds on this rank; returns the exit status."""
    args = parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print(
            "flwr_adaptive.clients.ddp must be started by torchrun (RANK / WORLD_SIZE are not set); for one host "
            "without torchrun use flwr_adaptive.clients.ddp.launch.LocalDDPGroup",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(1)
    backend = args.backend or default_backend(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = rank_device(local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        spec = load_task(args.task)
        if spec.meter_fn is None and (args.meter == "hardware" or (args.meter == "auto" and backend == "nccl")):
            spec = dataclasses.replace(spec, meter_fn=hardware_meter)
        worker = DDPRank(spec, device=device)
        driver = None
        if rank == 0:
            driver = RoundDriver(
                world,
                args.budget,
                args.steps,
                policy=args.policy,
                slowdowns=args.slowdowns,
                seed=args.seed,
                deadband=args.deadband,
                smoothing=args.smoothing,
            )
            print(
                f"[ddp_run] {world} ranks, backend {backend}, policy {args.policy}; compute on the "
                f"{worker.clock} clock (× emulated slowdown), waits and round time on the wall clock",
                flush=True,
            )
        log = []
        for r in range(1, args.rounds + 1):
            box = [driver.plan() if driver else None]
            dist.broadcast_object_list(box, src=0)
            plan = cast(RoundPlan, box[0])  # rank 0's plan, broadcast to every rank
            telemetry = worker.train_round(plan)
            gathered: list[Any] | None = [None] * world if rank == 0 else None
            dist.gather_object(telemetry, gathered, dst=0)
            if driver is not None and gathered is not None:  # rank 0 drives and gathers
                driver.observe(gathered)
                summary = round_summary(gathered)
                joules = [t.energy_j for t in gathered]
                energy = f"  energy {sum(joules):.1f} J (ranks' meters)" if all(j is not None for j in joules) else ""
                print(
                    f"[ddp_run] round {r}: quotas {summary['quotas']}  compute CV {summary['compute_cv']:.3f} "
                    f"({summary['clock']} clock)  sync-wait share {summary['wait_share']:.1%} (wall)  makespan "
                    f"Σ_s max_i t {summary['makespan_s']:.3f} s ({summary['clock']} clock)  round "
                    f"{summary['wall_s']:.3f} s (wall){energy}",
                    flush=True,
                )
                log.append(
                    {
                        "round": r,
                        "plan": vars(plan),
                        "summary": summary,
                        "telemetry": [t.to_dict() for t in gathered],
                        "time": time.time(),
                    }
                )
        if rank == 0 and args.json:
            with open(args.json, "w") as fh:
                json.dump({"world": world, "backend": backend, "policy": args.policy, "rounds": log}, fh)
        # A non-root rank returns from the last gather before rank 0 has received it; tearing its
        # gloo pairs down then aborted it once ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
