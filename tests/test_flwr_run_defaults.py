"""`flwr run apps/pma` and `flwr run apps/hfl` with no options never hang.

Flower's default local federation starts 2 SuperNodes; apps/pma expects 11 (rounds wait for 6)
and apps/hfl 3 silos. Each run must end on its own, as a failed run whose log says in one line
what to pass, within the app's ``node-wait`` (30 s) plus Flower's start-up: well under a minute
here. Offline, on a private simulation SuperLink (free port, generated FLWR_HOME, see
``experiments.compare.LocalSuperLink``); every process started is stopped by PID and checked gone.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from experiments.compare import LocalSuperLink, console_script, stream_command, terminate_processes

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 120.0  # the watchdog: a hang fails the test here instead of blocking the suite


@pytest.fixture(scope="module")
def link(tmp_path_factory):
    """One simulation SuperLink for both runs; it and all its descendants are stopped after."""
    link = LocalSuperLink(tmp_path_factory.mktemp("flwr-run"))
    link.start()
    root = psutil.Process(link.proc.pid)
    seen: dict[int, psutil.Process] = {}
    try:
        yield link, seen
    finally:
        try:
            seen.update({p.pid: p for p in root.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
        procs = [root, *seen.values()]
        assert terminate_processes(procs) == 0
        assert [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def _flwr_run_default(link, seen, app: str, tmp_path: Path) -> tuple[str, float, str]:
    """``flwr run apps/<app>`` with nothing but the connection; (its output, wall s, Flower's status)."""
    superlink = link
    log_path = tmp_path / f"flwr-run-{app}.log"
    root = psutil.Process(superlink.proc.pid)

    def remember(line: str) -> None:
        try:
            seen.update({p.pid: p for p in root.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass

    started = time.perf_counter()
    code = stream_command([console_script("flwr"), "run", str(REPO / "apps" / app), "local", "--stream"],
                          env=superlink.env, log_path=log_path, timeout_s=RUN_TIMEOUT_S, on_line=remember)
    wall = time.perf_counter() - started
    text = log_path.read_text()
    assert code == 0, text[-3000:]  # flwr run exits 0 even for a failed run: the status says
    run_id = re.search(r"Successfully started run (\d+)", text)
    assert run_id is not None, text[-3000:]
    listed = subprocess.run([console_script("flwr"), "list", "local", "--format", "json"], env=superlink.env,
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    runs = json.loads(listed.stdout[listed.stdout.find("{"):])["runs"]
    status = [str(r["status"]) for r in runs if int(r["run-id"]) == int(run_id.group(1))]
    return text, wall, status[0] if status else listed.stdout


@pytest.mark.parametrize(
    "app, fix",
    [
        ("pma", 'apps/pma expects 11 nodes (num-clients) and each round waits for 6 (min-nodes): run with '
                '--federation-config "num-supernodes=11"'),
        ("hfl", 'apps/hfl runs num-silos=3 silos, one per SuperNode: run with --federation-config "num-supernodes=3"'),
    ],
)
def test_flwr_run_of_an_app_with_no_options_fails_on_its_own_with_the_fix_in_one_line(link, app, fix, tmp_path):
    superlink, seen = link
    # Execute: what a new user types (only the connection: the private SuperLink's "local")
    text, wall, status = _flwr_run_default(superlink, seen, app, tmp_path)
    # Assert: progress while waiting (connected / needed), then the failure carrying the fix
    assert "waits for" in text and "2 connected after 0 s" in text, text[-3000:]
    errors = [line for line in text.splitlines() if "NodeWaitError" in line and "connected nodes" in line]
    assert errors and fix in errors[-1], text[-3000:]
    assert status == "finished:failed"
    print(f"flwr run apps/{app}: ended in {wall:.1f} s (wall clock)")
