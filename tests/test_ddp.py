"""Tests of the DDP regime: worker accounting, gradient equivalence, launcher, driver, torchrun.

Multi-rank tests spawn real gloo ranks (seconds each on 2 cores), so they share one 3-rank group
and keep to a few tiny float64 steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from flwr_adaptive.clients.ddp.driver import RoundDriver, equal_quotas, round_summary
from flwr_adaptive.clients.ddp.launch import LocalDDPGroup, run_ddp_round
from flwr_adaptive.clients.ddp.toy import tiny_task
from flwr_adaptive.clients.ddp.worker import DDPRank, GradientAllReduce, RankTelemetry, RoundPlan, WorkerSpec, relative_slowdowns
from flwr_adaptive.schedule import IndexStream

from ddp_support import reference_training

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- helpers
def initial_state(spec: WorkerSpec) -> dict[str, torch.Tensor]:
    torch.manual_seed(spec.seed + 1)  # not rank 0's init: the test also checks set_state
    return {k: v.detach().clone() for k, v in spec.model_fn().state_dict().items()}


def assert_same_weights(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0.0, atol=1e-12, msg=f"parameter {k}")


def telemetry(rank: int, time_s: float, samples: int, wait_s: float = 0.0, wall_s: float = 1.0,
              step_compute: list[list[float]] | None = None) -> RankTelemetry:
    return RankTelemetry(rank=rank, world=2, steps=2, samples=samples, time_s=time_s, energy_j=None,
                         wait_s=wait_s, wall_s=wall_s, clock="process", slowdown=1.0,
                         step_compute_s=step_compute or [[0.0, 0.0], [0.0, 0.0]])


# ---------------------------------------------------------------------------- a real 3-rank group
@pytest.fixture(scope="module")
def group():
    with LocalDDPGroup(tiny_task(), world=3, backend="gloo", timeout_s=30) as g:
        yield g


@pytest.mark.slow
def test_one_uneven_step_with_an_empty_rank_equals_one_step_on_the_union_batch(group):
    # Prepare: ranks read 5, 0 and 3 samples of one global batch of 8
    spec = tiny_task()
    start = initial_state(spec)
    group.set_state(start)
    # Execute
    tel = group.run_round(RoundPlan(quotas=[5, 0, 3], steps=1, start=0, seed=0))
    trained = group.get_state()
    # Assert
    assert_same_weights(trained, reference_training(spec, [8], state=start))
    assert [t.batch_sizes for t in tel] == [[5], [0], [3]]
    assert [t.steps for t in tel] == [1, 1, 1]
    assert len({t.params_digest for t in tel}) == 1
    assert tel[1].time_s == 0.0 and tel[1].samples == 0


@pytest.mark.slow
def test_a_round_with_quotas_below_the_step_count_equals_single_process_training(group):
    # Prepare: rank 1's quota 2 < 4 steps gives it empty batches; SGD momentum carries over steps
    spec = tiny_task()
    start = initial_state(spec)
    group.set_state(start)
    plan = RoundPlan(quotas=[9, 2, 5], steps=4, start=10, seed=3)
    # Execute
    tel = group.run_round(plan)
    trained = group.get_state()
    # Assert
    assert [t.steps for t in tel] == [4, 4, 4]
    assert [t.samples for t in tel] == [9, 2, 5]
    assert 0 in tel[1].batch_sizes
    assert len({t.params_digest for t in tel}) == 1
    per_step = np.array([t.batch_sizes for t in tel]).sum(axis=0).tolist()
    assert_same_weights(trained, reference_training(spec, per_step, start=10, seed=3, state=start))


@pytest.mark.slow
def test_ema_balancing_keeps_the_global_batch_and_the_single_process_update(group):
    # Prepare
    spec = tiny_task()
    start = initial_state(spec)
    group.set_state(start)
    group.reset_ema()
    # Execute
    tel = group.run_round(RoundPlan(quotas=[4, 4, 4], steps=3, balancing="ema", seed=1))
    trained = group.get_state()
    # Assert
    sizes = np.array([t.batch_sizes for t in tel])
    assert sizes.sum(axis=0).tolist() == [4, 4, 4]
    assert [t.steps for t in tel] == [3, 3, 3]
    assert len({t.params_digest for t in tel}) == 1
    assert_same_weights(trained, reference_training(spec, [4, 4, 4], seed=1, state=start))
    # every rank received every rank's step times with the all-reduce, so all agree on the makespan
    assert len({round(t.makespan_s, 12) for t in tel}) == 1


@pytest.mark.slow
def test_a_plan_for_the_wrong_number_of_ranks_is_refused_before_it_reaches_the_ranks(group):
    # Execute / Assert
    with pytest.raises(ValueError, match="quotas has 2 entries for 3 ranks"):
        group.run_round(RoundPlan(quotas=[5, 5], steps=2))
    assert group.run_round(RoundPlan(quotas=[2, 2, 2], steps=2))[0].steps == 2  # the group still works


@pytest.mark.slow
def test_a_failing_rank_stops_the_group_with_its_traceback():
    # Prepare: weights that do not fit the model make every rank's load_state_dict raise
    bad_state = {"0.weight": torch.zeros(1)}
    # Execute / Assert
    with pytest.raises(RuntimeError, match=r"DDP rank \d failed during set_state(.|\n)*size mismatch"):
        run_ddp_round(tiny_task(), quotas=[2, 2], steps=2, state=bad_state, backend="gloo", timeout_s=20)


# ---------------------------------------------------------------------------- one in-process rank, fake clocks
class FakeClocks:
    """A CPU clock and a wall clock that advance only when the fake model or ``sleep`` says so.

    ``stretch`` is how much longer than its CPU time the compute takes on the wall clock (other
    processes sharing the core).
    """

    def __init__(self, stretch: float = 1.0) -> None:
        self.cpu_now = 0.0
        self.wall_now = 0.0
        self.stretch = stretch

    def cpu(self) -> float:
        return self.cpu_now

    def wall(self) -> float:
        return self.wall_now

    def work(self, cpu_seconds: float) -> None:
        self.cpu_now += cpu_seconds
        self.wall_now += cpu_seconds * self.stretch

    def sleep(self, seconds: float) -> None:
        self.wall_now += seconds


class TimedLinear(torch.nn.Module):
    """Costs 2 ms per sample forward and 3 ms per sample backward of CPU time on the fake clocks."""

    def __init__(self, clocks: FakeClocks) -> None:
        super().__init__()
        self.clocks = clocks
        self.lin = torch.nn.Linear(2, 2, dtype=torch.float64)

    def forward(self, x):
        n = len(x)
        self.clocks.work(0.002 * n)
        out = self.lin(x)
        out.register_hook(lambda g: self.clocks.work(0.003 * n))
        return out


@pytest.fixture
def single_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def timed_rank(clocks: FakeClocks, meter_fn=None) -> DDPRank:
    x = torch.randn(30, 2, dtype=torch.float64)
    spec = WorkerSpec(model_fn=lambda: TimedLinear(clocks), data=(x, torch.zeros(30, dtype=torch.long)),
                      loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
                      optimizer_fn=lambda p: torch.optim.SGD(p, lr=0.1), meter_fn=meter_fn)
    return DDPRank(spec, device=torch.device("cpu"), clock="process", compute_clock=clocks.cpu,
                   wall_clock=clocks.wall, sleep=clocks.sleep)


def test_time_s_is_slowdown_times_compute_and_excludes_waits(single_rank_group):
    # Prepare: a core to itself (wall = CPU time), slowdown 2.5, batches 3, 3, 2, 2
    clocks = FakeClocks(stretch=1.0)
    rank = timed_rank(clocks)
    plan = RoundPlan(quotas=[10], steps=4, slowdowns=[2.5], active_watts=[6.0])
    # Execute
    tel = rank.train_round(plan)
    # Assert
    assert tel.batch_sizes == [3, 3, 2, 2]
    assert tel.forward_s == pytest.approx([0.006, 0.006, 0.004, 0.004], abs=1e-12)
    assert tel.backward_s == pytest.approx([0.009, 0.009, 0.006, 0.006], abs=1e-12)
    assert tel.sleep_s == pytest.approx([1.5 * 0.015, 1.5 * 0.015, 1.5 * 0.010, 1.5 * 0.010], abs=1e-12)
    assert tel.time_s == pytest.approx(2.5 * 0.050, abs=1e-12)
    assert tel.wall_s == pytest.approx(tel.time_s, abs=1e-12)  # the fake all-reduce took no time
    assert tel.wait_s == 0.0 and tel.overrun_s == pytest.approx(0.0, abs=1e-12)
    assert tel.energy_j == pytest.approx(6.0 * tel.time_s)
    assert tel.makespan_s == pytest.approx(tel.time_s)
    report = tel.report()
    assert (report.time_s, report.samples) == (pytest.approx(0.125), 10)


def test_the_slowness_sleep_absorbs_contention_so_a_step_lasts_slowdown_times_compute(single_rank_group):
    # Prepare: the compute takes twice its CPU time on the wall clock (a shared core)
    clocks = FakeClocks(stretch=2.0)
    rank = timed_rank(clocks)
    # Execute
    tel = rank.train_round(RoundPlan(quotas=[10], steps=2, slowdowns=[2.5]))  # batches 5, 5
    # Assert: CPU compute 25 ms per step, 50 ms of it on the wall clock, 62.5 ms emulated
    assert tel.compute_wall_s == pytest.approx([0.050, 0.050], abs=1e-12)
    assert tel.sleep_s == pytest.approx([0.0125, 0.0125], abs=1e-12)
    assert tel.time_s == pytest.approx(0.125, abs=1e-12)
    assert tel.wall_s == pytest.approx(0.125, abs=1e-12)
    assert tel.overrun_s == pytest.approx(0.0, abs=1e-12)


def test_contention_beyond_the_slowdown_is_reported_as_overrun(single_rank_group):
    # Prepare: stretch 2 but slowdown 1.5: the step cannot be made as short as emulated
    clocks = FakeClocks(stretch=2.0)
    rank = timed_rank(clocks)
    # Execute
    tel = rank.train_round(RoundPlan(quotas=[10], steps=2, slowdowns=[1.5]))
    # Assert
    assert tel.sleep_s == [0.0, 0.0]
    assert tel.time_s == pytest.approx(1.5 * 0.050, abs=1e-12)
    assert tel.overrun_s == pytest.approx(2 * (0.050 - 0.0375), abs=1e-12)


class FakeMeter:
    """10 W of the fake CPU clock per window, like a model meter."""

    def __init__(self, clocks: FakeClocks) -> None:
        self.clocks, self.open = clocks, {}

    def begin_window(self, name):
        self.open[name] = self.clocks.cpu()

    def end_window(self, name):
        return types.SimpleNamespace(joules=10.0 * (self.clocks.cpu() - self.open.pop(name)))


def test_a_meter_measures_the_compute_windows_only(single_rank_group):
    # Prepare
    clocks = FakeClocks(stretch=1.0)
    rank = timed_rank(clocks, meter_fn=lambda r, d: FakeMeter(clocks))
    # Execute
    tel = rank.train_round(RoundPlan(quotas=[10], steps=2, slowdowns=[3.0]))
    # Assert: 50 ms of CPU compute at 10 W; neither the slowness sleep nor the all-reduce counts
    assert tel.energy_j == pytest.approx(0.5, abs=1e-12)


def test_a_meter_that_cannot_be_built_leaves_energy_unmeasured_and_training_going(single_rank_group):
    # Prepare
    def broken(rank, device):
        raise RuntimeError("no powercap here")
    rank = timed_rank(FakeClocks(), meter_fn=broken)
    # Execute
    tel = rank.train_round(RoundPlan(quotas=[10], steps=2))
    # Assert
    assert tel.energy_j is None and tel.samples == 10 and tel.report().energy_j is None


def test_a_project_task_runs_as_a_ddp_spec_with_the_tasks_own_training_step(single_rank_group):
    # Prepare: one rank, one step of 16 MNIST samples: the mean-loss step of Task.train
    from flwr_adaptive.clients.ddp.tasks import task_spec
    from flwr_adaptive.clients.tasks import get_task

    rank = DDPRank(task_spec("mnist", seed=3), device=torch.device("cpu"))
    start = rank.state_dict()
    task = get_task("mnist", source="offline")
    train, _ = task.data()
    model = task.make_model(seed=3)
    model.load_state_dict(start)
    # Execute
    tel = rank.train_round(RoundPlan(quotas=[16], steps=1, seed=5))
    task.train(model, train, IndexStream(len(train), seed=5).take(16), batch_size=16)
    # Assert
    assert tel.samples == 16
    for k, v in model.state_dict().items():
        torch.testing.assert_close(rank.state_dict()[k], v, rtol=1e-5, atol=1e-6, msg=f"parameter {k}")


def test_loss_with_mean_reduction_is_refused(single_rank_group):
    # Prepare
    spec = tiny_task()
    spec.loss_fn = torch.nn.CrossEntropyLoss()  # reduction="mean"
    # Execute / Assert
    with pytest.raises(ValueError, match="reduction='mean'.*pass reduction='sum'"):
        DDPRank(spec, device=torch.device("cpu"))


def test_gradient_all_reduce_gives_zero_gradient_for_unused_parameters(single_rank_group):
    # Prepare: one parameter without a gradient (an empty batch, or a branch not taken)
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(2))
    a.grad = torch.tensor([1.0, 2.0, 3.0])
    sync = GradientAllReduce([a, b], world=1, extra=2)
    # Execute
    tail = sync([0.5, 7.0])
    # Assert
    assert a.grad.tolist() == [1.0, 2.0, 3.0]
    assert b.grad.tolist() == [0.0, 0.0]
    assert tail.tolist() == [0.5, 7.0]


def test_gradient_all_reduce_refuses_mixed_dtypes():
    # Execute / Assert
    with pytest.raises(ValueError, match="cast the model to one dtype"):
        GradientAllReduce([torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64))],
                          world=2)


# ---------------------------------------------------------------------------- plans, driver, summaries
@pytest.mark.parametrize(
    "plan, match",
    [(RoundPlan(quotas=[1, 1], steps=3), "budget Σ quotas = 2 is below steps = 3"),
     (RoundPlan(quotas=[5, 5], steps=2, slowdowns=[1.0, 0.5]), "slowdowns must be finite numbers >= 1"),
     (RoundPlan(quotas=[5, -1], steps=2), "quotas must be ints >= 0"),
     (RoundPlan(quotas=[5, 5], steps=2, balancing="lbbsp"), "balancing must be one of")],
)
def test_bad_plans_are_refused_naming_the_value(plan, match):
    # Execute / Assert
    with pytest.raises(ValueError, match=match):
        plan.validate(2)


def test_driver_splits_inversely_to_measured_time_per_sample_and_advances_the_stream():
    # Prepare: rank 1 needs twice the time per sample of rank 0
    driver = RoundDriver(world=2, budget=100, steps=5, policy="time", deadband=0.0)
    first = driver.plan()
    # Execute
    driver.observe([telemetry(0, 1.0, first.quotas[0]), telemetry(1, 2.0, first.quotas[1])])
    second = driver.plan()
    # Assert
    assert first.quotas == [50, 50] and first.start == 0
    assert second.quotas == [67, 33]  # ∝ 1/τ = 50 : 25
    assert second.start == 100


def test_driver_gives_every_rank_at_least_one_sample_per_step_by_default():
    # Prepare: rank 1 is absurdly slow
    driver = RoundDriver(world=2, budget=100, steps=20, policy="time", deadband=0.0)
    first = driver.plan()
    # Execute
    driver.observe([telemetry(0, 1.0, first.quotas[0]), telemetry(1, 1000.0, first.quotas[1])])
    # Assert
    assert driver.plan().quotas == [80, 20]


def test_driver_refuses_a_budget_below_world_times_min_quota_when_built():
    # Prepare / Execute / Assert: 4 ranks × 5 steps need 20 samples; the check is at construction
    with pytest.raises(ValueError, match=r"budget 10 cannot give each of the 4 ranks min_quota 5 .* "
                                         r"needs budget >= 20"):
        RoundDriver(world=4, budget=10, steps=5, policy="time")
    # a smaller min_quota is allowed (empty batches), and then plans are made
    driver = RoundDriver(world=4, budget=10, steps=5, policy="time", min_quota=1)
    assert sum(driver.plan().quotas) == 10


def test_equal_and_ema_policies_hand_out_equal_quotas_without_a_controller():
    # Prepare
    equal = RoundDriver(world=3, budget=10, steps=2, policy="equal")
    ema = RoundDriver(world=3, budget=10, steps=2, policy="ema")
    # Execute
    plans = equal.plan(), ema.plan()
    # Assert
    assert plans[0].quotas == plans[1].quotas == equal_quotas(10, 3) == [4, 3, 3]
    assert (plans[0].balancing, plans[1].balancing) == ("schedule", "ema")
    assert equal.controller is None and ema.controller is None


def test_round_summary_uses_per_step_makespan_and_excludes_waits_from_compute():
    # Prepare: each rank is slowest in one step; rank 0 also waited 1 s of its 4 s wall
    steps = [[3.0, 1.0], [1.0, 3.0]]
    tel = [telemetry(0, 4.0, 10, wait_s=1.0, wall_s=4.0, step_compute=steps),
           telemetry(1, 4.0, 10, wait_s=3.0, wall_s=4.0, step_compute=steps)]
    # Execute
    summary = round_summary(tel)
    # Assert
    assert summary["compute_cv"] == 0.0
    assert summary["makespan_s"] == 6.0
    assert summary["wait_share"] == 0.5


class Profile:
    def __init__(self, slowdown, active_w):
        self.slowdown, self.active_w = slowdown, active_w


def test_profiles_faster_than_the_host_are_rescaled_so_that_the_fastest_runs_at_host_speed():
    # Execute
    slowdowns, watts = relative_slowdowns([Profile(0.5, 10.0), Profile(1.5, 4.0)])
    # Assert
    assert slowdowns == [1.0, 3.0] and watts == [10.0, 4.0]


def test_profiles_slower_than_the_host_keep_their_slowdowns():
    # Execute
    slowdowns, _ = relative_slowdowns([Profile(2.0, 1.0), Profile(1.25, 1.0)])
    # Assert
    assert slowdowns == [2.0, 1.25]


# ---------------------------------------------------------------------------- torchrun
@pytest.mark.slow
def test_torchrun_entry_point_runs_adaptive_rounds_with_equal_step_counts(tmp_path):
    # Prepare
    out = tmp_path / "rounds.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "flwr_adaptive.clients.ddp", "--task", "flwr_adaptive.clients.ddp.toy:tiny_task", "--rounds", "2", "--budget", "24",
           "--steps", "4", "--slowdowns", "1,2", "--backend", "gloo", "--timeout-s", "30", "--meter", "hardware",
           "--json", str(out)]
    # Execute
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    # Assert
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = json.loads(out.read_text())
    assert [r["round"] for r in log["rounds"]] == [1, 2]
    for r in log["rounds"]:
        tel = r["telemetry"]
        assert [t["steps"] for t in tel] == [4, 4]
        assert sum(t["samples"] for t in tel) == 24
        assert len({t["params_digest"] for t in tel}) == 1
        assert all(t["energy_j"] is not None and t["energy_j"] >= 0.0 for t in tel)  # --meter hardware
    assert log["rounds"][1]["plan"]["start"] == 24
    assert "round 2:" in proc.stdout and "wall" in proc.stdout and "J (ranks' meters)" in proc.stdout


def test_hardware_meter_reads_the_cpu_counters_for_a_cpu_rank():
    from flwr_adaptive.clients.ddp.worker import hardware_meter

    assert hardware_meter(0, torch.device("cpu")).source in ("rapl", "psutil-model")


@pytest.mark.parametrize("gpus, ranks, expected", [(0, 1, "gloo"), (1, 1, "nccl"), (1, 2, "gloo"), (4, 4, "nccl")])
def test_default_backend_needs_one_gpu_per_rank(monkeypatch, gpus, ranks, expected):
    import torch

    from flwr_adaptive.clients.ddp.worker import default_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert default_backend(ranks) == expected


@pytest.mark.parametrize("idle_watts, expected", [([5.0, 11.0], [500, 500]), (None, [550, 450])])
def test_driver_min_energy_prices_waiting_with_the_ranks_idle_watts(idle_watts, expected):
    # Prepare: two equally fast ranks drawing 10 W and 12 W; with idle draw the even split (nobody
    # waits) is cheapest, without it the 10 W rank takes what the 10 % slack allows
    driver = RoundDriver(world=2, budget=1000, steps=10, policy="min-energy", idle_watts=idle_watts, deadband=0.0)
    for _ in range(4):
        plan = driver.plan()
        # Execute
        driver.observe([RankTelemetry(rank=r, world=2, steps=10, samples=q, time_s=0.001 * q,
                                      energy_j=(10.0, 12.0)[r] * 0.001 * q, wait_s=0.0, wall_s=1.0,
                                      clock="process", slowdown=1.0) for r, q in enumerate(plan.quotas)])
    # Assert
    assert driver.plan().quotas == expected


def test_driver_takes_the_paper_model_and_checks_idle_watts():
    # Execute / Assert: the named policy fits affine costs; paper=True is the per-sample model
    assert RoundDriver(world=2, budget=100, steps=5, policy="time").controller.cost_model == "affine"
    assert RoundDriver(world=2, budget=100, steps=5, policy="time", paper=True).controller.cost_model == "per-sample"
    with pytest.raises(ValueError, match="idle_watts needs one entry per rank"):
        RoundDriver(world=2, budget=100, steps=5, policy="min-energy", idle_watts=[1.0])
