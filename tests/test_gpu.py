"""Checks on a real NVIDIA GPU: NVML energy and the nccl DDP path. Skipped without CUDA.

CI has no GPU, so these run where one is lent (``pytest tests/test_gpu.py -v -s``); the same code is
tested against fakes in tests/test_energy.py and tests/test_ddp.py. What only real hardware can
show: NVML's counter moves with the load, ``auto_meter`` picks it, nccl ranks train on the GPU
exactly like one process, and the ``torchrun`` entry point reports NVML energy per rank.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from flwr_adaptive.clients.ddp.launch import LocalDDPGroup  # noqa: E402
from flwr_adaptive.clients.ddp.toy import tiny_task  # noqa: E402
from flwr_adaptive.clients.ddp.worker import RoundPlan, default_backend, hardware_meter  # noqa: E402
from flwr_adaptive.energy import NvmlMeter, auto_meter  # noqa: E402

from ddp_support import reference_training  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA")
ROOT = Path(__file__).resolve().parents[1]


def keep_the_gpu_busy(seconds: float) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def test_nvml_energy_rises_with_load_and_matches_a_plausible_power():
    # Prepare
    pytest.importorskip("pynvml")
    meter = NvmlMeter(gpus=[0])
    keep_the_gpu_busy(0.2)  # CUDA context and kernels loaded before the windows
    # Execute
    meter.begin_window("idle")
    time.sleep(1.5)
    idle = meter.end_window("idle")
    meter.begin_window("busy")
    keep_the_gpu_busy(2.0)
    busy = meter.end_window("busy")
    # Assert
    idle_w, busy_w = idle.joules / idle.seconds, busy.joules / busy.seconds
    print(f"NVML: idle {idle_w:.0f} W, busy (bf16 8192² matmuls) {busy_w:.0f} W over {busy.seconds:.2f} s")
    assert (busy.source, busy.clock, set(busy.domains)) == ("nvml", "wall", {"gpu0"})
    assert 20.0 < busy_w < 2000.0
    assert busy_w > 1.5 * idle_w


def test_nvml_counter_steps_are_short_against_the_counter_window():
    # The counter is read only for windows >= counter_window_s: its steps must be a small part of that
    pytest.importorskip("pynvml")
    import threading

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    worker = threading.Thread(target=keep_the_gpu_busy, args=(1.5,))
    worker.start()
    time.sleep(0.2)
    last, since, steps = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter(), []
    while worker.is_alive():
        now_mj, now = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter()
        if now_mj != last:
            steps.append((now - since, (now_mj - last) / 1000.0))
            last, since = now_mj, now
    worker.join()
    period = sorted(s[0] for s in steps[1:])[len(steps[1:]) // 2]
    print(f"NVML counter: a step every {1000 * period:.0f} ms (median of {len(steps) - 1}), "
          f"{sorted(s[1] for s in steps)[len(steps) // 2]:.1f} J per step under load")
    assert len(steps) >= 3 and period <= 0.25 * NvmlMeter(gpus=[0]).counter_window_s


def test_nvml_short_windows_read_the_power_draw_the_counter_would_miss():
    # Prepare: the counter advances every ~100 ms; one 8192³ bf16 product takes ~1.5 ms
    pytest.importorskip("pynvml")
    meter = NvmlMeter(gpus=[0])
    meter.begin_window("long")
    keep_the_gpu_busy(1.5)
    long = meter.end_window("long")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    # Execute: 200 windows of one product each
    joules = seconds = 0.0
    for _ in range(200):
        meter.begin_window("step")
        a @ a
        torch.cuda.synchronize()
        m = meter.end_window("step")
        joules, seconds = joules + m.joules, seconds + m.seconds
    # Assert: the short windows' mean power is the long window's, within the power reading's lag
    print(f"NVML: {long.joules / long.seconds:.0f} W over a {long.seconds:.2f} s window (counter), "
          f"{joules / seconds:.0f} W over 200 windows of {1000 * seconds / 200:.2f} ms (power draw)")
    assert 0.5 < (joules / seconds) / (long.joules / long.seconds) < 1.5


def test_auto_meter_reads_nvml_for_a_gpu_and_falls_back_for_a_missing_one():
    pytest.importorskip("pynvml")
    assert auto_meter("cuda").source == "nvml"
    assert auto_meter("cuda:0").source == "nvml"
    assert auto_meter(f"cuda:{torch.cuda.device_count()}").source in ("rapl", "psutil-model")


def test_default_backend_is_nccl_only_with_a_gpu_per_rank():
    gpus = torch.cuda.device_count()
    assert default_backend(gpus) == "nccl"
    assert default_backend(gpus + 1) == "gloo"


def test_nccl_ranks_train_on_their_gpus_like_one_process_and_meter_them_with_nvml():
    # Prepare: one rank per GPU, nccl, NVML per rank; float64 keeps the CPU reference tight
    pytest.importorskip("pynvml")
    world = torch.cuda.device_count()
    spec = dataclasses.replace(tiny_task(n=256), meter_fn=hardware_meter)
    torch.manual_seed(7)
    start = {k: v.detach().clone() for k, v in spec.model_fn().state_dict().items()}
    quotas = [12 + 3 * r for r in range(world)]
    plan = RoundPlan(quotas=quotas, steps=3, start=5, seed=2)
    # Execute
    with LocalDDPGroup(spec, world=world, backend="nccl", timeout_s=60) as group:
        group.set_state(start)
        tel = group.run_round(plan)
        trained = group.get_state()
    # Assert
    per_step = [sum(t.batch_sizes[s] for t in tel) for s in range(3)]
    want = reference_training(spec, per_step, start=5, seed=2, state=start)
    for k in want:
        torch.testing.assert_close(trained[k], want[k], rtol=0.0, atol=1e-10, msg=f"parameter {k}")
    assert [t.samples for t in tel] == quotas
    assert {t.clock for t in tel} == {"wall"}  # CUDA work is timed on the wall clock, synchronized
    assert all(t.energy_j is not None and t.energy_j >= 0.0 for t in tel)
    assert len({t.params_digest for t in tel}) == 1


def test_torchrun_entry_point_runs_nccl_rounds_with_nvml_energy(tmp_path):
    # Prepare
    pytest.importorskip("pynvml")
    out = tmp_path / "rounds.json"
    world = torch.cuda.device_count()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
           "-m", "flwr_adaptive.clients.ddp", "--task", "flwr_adaptive.clients.ddp.toy:cnn_task", "--rounds", "3",
           "--budget", str(4000 * world), "--steps", "20", "--json", str(out)]
    # Execute
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    # Assert
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    log = json.loads(out.read_text())
    assert log["backend"] == "nccl" and [r["round"] for r in log["rounds"]] == [1, 2, 3]
    for r in log["rounds"]:
        tel = r["telemetry"]
        assert sum(t["samples"] for t in tel) == 4000 * world
        assert all(t["energy_j"] is not None and t["energy_j"] >= 0.0 for t in tel)
        assert {t["clock"] for t in tel} == {"wall"}
    assert "energy" in proc.stdout and "backend nccl" in proc.stdout
