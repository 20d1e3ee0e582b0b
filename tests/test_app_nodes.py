"""The apps' node-side choices: which meter measures a node, and how many nodes a round waits for."""

from __future__ import annotations

import tomllib

import pytest
from flwr.app import Context, RecordDict

from experiments import APPS_DIR
from flwr_adaptive.energy import EmulatedMeter, SleepEmulatedMeter
from pma_app import task as pma
from lite_app import task as lite


def _context(node_config: dict, run_config: dict | None = None) -> Context:
    return Context(run_id=1, node_id=5, node_config=node_config, state=RecordDict(), run_config=run_config or {})


NODE = {"partition-id": 3, "num-partitions": 4}


def test_under_the_simulation_engine_a_node_is_its_emulated_testbed_device_on_the_virtual_clock(monkeypatch):
    monkeypatch.setattr(pma, "in_simulation", lambda: True)
    meter = pma.node_meter(_context(NODE), 2)
    assert type(meter) is EmulatedMeter and meter.profile.name == pma._profiles(0.05)[3].name


def test_under_the_deployment_engine_a_node_is_measured_by_the_machine_s_real_meter(monkeypatch):
    monkeypatch.setattr(pma, "in_simulation", lambda: False)
    meter = pma.node_meter(_context(NODE), 2)
    assert not isinstance(meter, EmulatedMeter) and meter.source in ("rapl", "nvml", "psutil-model")
    # clock='virtual' asks for the emulated device anyway
    assert type(pma.node_meter(_context(NODE, {"clock": "virtual"}), 2)) is EmulatedMeter


def test_a_device_node_config_emulates_that_board_by_sleeping_on_the_wall_clock(monkeypatch):
    monkeypatch.setattr(pma, "in_simulation", lambda: True)  # the node config wins over the engine
    meter = pma.node_meter(_context({**NODE, "device": "rpi3b+"}), 1)
    assert isinstance(meter, SleepEmulatedMeter) and meter.profile.name == "rpi3b+"
    with pytest.raises(ValueError, match=r"device='cray-1' is not a testbed board; use one of .*rpi4"):
        pma.node_meter(_context({**NODE, "device": "cray-1"}), 1)
    with pytest.raises(ValueError, match=r"clock='sundial' is not one of auto, virtual, wall"):
        pma.node_meter(_context(NODE, {"clock": "sundial"}), 1)


def test_a_node_without_partition_id_fails_with_the_node_config_line_to_add(monkeypatch):
    monkeypatch.setattr(pma, "in_simulation", lambda: False)
    with pytest.raises(ValueError, match=r'--node-config "partition-id=<i> num-partitions=<n>"'):
        pma.node_meter(_context({}, {"clock": "virtual"}), 1)


@pytest.mark.parametrize("app", [pma, lite])
@pytest.mark.parametrize("clients, explicit, expected", [(11, 0, 6), (4, 0, 2), (3, 0, 2), (1, 0, 1), (11, 9, 9)])
def test_rounds_wait_for_half_the_population_by_default_or_the_min_nodes_given(app, clients, explicit, expected):
    cfg = {**app.DEFAULTS, "num-clients": clients, "min-nodes": explicit}
    assert app.min_nodes(cfg) == expected
    with pytest.raises(ValueError, match="min-nodes=-1 must be >= 0"):
        app.min_nodes({**cfg, "min-nodes": -1})


def test_the_lite_app_defaults_equal_its_pyproject_config():
    config = tomllib.loads((APPS_DIR / "lite" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert lite.DEFAULTS == config


def test_the_lite_app_refuses_a_slowdown_that_would_speed_a_node_up():
    assert lite.slowdown({}) == 1.0 and lite.slowdown({"slowdown": 4}) == 4.0
    for bad in (0.5, "fast", float("nan")):
        with pytest.raises(ValueError, match="must be a number >= 1"):
            lite.slowdown({"slowdown": bad})


@pytest.mark.parametrize("switch", [False, True])
def test_the_lite_server_app_s_server_time_switch_reaches_the_strategy(monkeypatch, tmp_path, switch):
    # Prepare: stop the ServerApp right after it built its strategy (no grid, no rounds)
    from lite_app import server_app

    built = []

    class Stop(Exception):
        pass

    def start(self, strategy, *args, **kwargs):
        built.append(strategy)
        raise Stop

    monkeypatch.setattr(server_app.ResumableRun, "start", start)
    context = _context({}, {"server-time": switch, "out-dir": str(tmp_path)})
    # Execute
    with pytest.raises(Stop):
        server_app.main(None, context)
    # Assert: the run config's switch is the strategy's server_time (off by default)
    assert built and built[0].server_time is switch
