"""The Flower comparison: ``flwr run apps/pma`` once per policy, offline, and one table.

Contract
--------
``python -m experiments.compare`` runs the PMA Flower App of this repository (the emulated 11-device
PMA federation, ``apps/pma``) through the real ``flwr run`` path, once per policy
(default Equal, Time-only, Low-energy and Min-energy; a policy named ``<policy>-paper``, e.g.
``time-paper``, runs it with the paper's estimation and deadband), and prints one table: makespan and energy summed over the
rounds (virtual clock: device time from the profiles), final holdout loss / accuracy, and the
wall time of each run. It then prints what the whole command cost: its wall time and the peak
resident memory of every process of the run (this command, ``flwr``, the SuperLink and all its
descendants: SuperExec, the simulation process, Ray's processes and actors), both measured.

How it stays offline and clean:

- ``FLWR_HOME`` is a fresh temporary folder with a generated ``config.toml`` whose ``local``
  connection points at a SuperLink this command starts itself on a free port (simulation mode,
  runtime dependency installation disabled, ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``),
  so nothing is downloaded, pyproject.toml is never rewritten, and no other SuperLink is reused.
- ``flwr run`` exits 0 even when a run failed: success is the ServerApp's own
  ``summary-<policy>.json`` saying ``"finished"``; anything else stops the command with the
  log's tail.
- At the end (also on error or Ctrl-C) every process of the run still alive is terminated by
  PID, and the command reports how many were left (0 expected).

Cost
----
About 20 s of start-up per run plus the rounds (~1 s each with MNIST and 2,200 samples per round
on this 2-core machine); one SuperLink for all runs; memory sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import psutil

from flwr_adaptive.strategies.registry import LABELS, parse_run_name

REPO = Path(__file__).resolve().parent.parent
PMA_APP = REPO / "apps" / "pma"
POLICIES = ("equal", "time", "low-energy", "min-energy")
_ROUND_LINE = re.compile(r"\[adaptive\] round (\d+) .*makespan ([0-9.]+) s")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def console_script(name: str) -> str:
    """A console script of this interpreter's environment (flwr, flower-superlink)."""
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found next to {sys.executable} or on PATH: run scripts/setup.sh")
    return found


class MemoryPeak:
    """Samples the summed RSS of a set of process trees until stopped; keeps the peak.

    RSS counts shared pages (torch's libraries) in every process that maps them, so the sum is
    an upper bound of what the run holds in RAM.
    """

    def __init__(self, interval_s: float = 0.2) -> None:
        self.roots: set[int] = {os.getpid()}
        self.seen: dict[int, psutil.Process] = {}
        self.peak_bytes = 0
        self.peak_procs = 0
        self._lock = threading.Lock()  # the sampler thread and the main thread both add to seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)

    def add_root(self, pid: int) -> None:
        self.roots.add(pid)

    def processes(self) -> list[psutil.Process]:
        procs: dict[int, psutil.Process] = {}
        for pid in list(self.roots):
            try:
                root = psutil.Process(pid)
                for p in [root, *root.children(recursive=True)]:
                    procs[p.pid] = p
            except psutil.NoSuchProcess:
                continue
        with self._lock:
            self.seen.update(procs)
        return list(procs.values())

    def seen_processes(self) -> dict[int, psutil.Process]:
        """A copy of every process seen so far, safe to iterate while the sampler runs."""
        with self._lock:
            return dict(self.seen)

    def stop(self) -> None:
        """Stop sampling (the peak is kept); idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            total, count = 0, 0
            for p in self.processes():
                try:
                    total += p.memory_info().rss
                    count += 1
                except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                    pass
            if total > self.peak_bytes:
                self.peak_bytes, self.peak_procs = total, count
            self._stop.wait(interval_s)

    def __enter__(self) -> "MemoryPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class LocalSuperLink:
    """A simulation-mode SuperLink of our own, on a free port, with a generated FLWR_HOME."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.home = workdir / "flwr-home"
        self.home.mkdir(parents=True)
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "local"\n\n[superlink.local]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n')
        self.log = workdir / "superlink.log"
        self.env = {**os.environ, "FLWR_HOME": str(self.home),
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        cmd = [console_script("flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
               "--host", "127.0.0.1", "--port", str(self.port), "--disable-runtime-dependency-installation"]
        with open(self.log, "w") as log:
            # A neutral working directory: Ray workers started under the SuperLink can import a
            # same-named package from its working directory instead of the app's FAB.
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.home.parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"flower-superlink exited with code {self.proc.returncode}; see {self.log}:\n"
                                 + self.log.read_text()[-2000:])
            if "Uvicorn running on" in self.log.read_text():
                return
            time.sleep(0.2)
        raise SystemExit(f"flower-superlink did not start within {timeout_s:.0f} s; see {self.log}")


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def terminate_processes(procs: list[psutil.Process], grace_s: float = 10.0) -> int:
    """Terminate these processes by PID (children first), kill what remains; returns survivors."""
    alive = [p for p in procs if _alive(p)]
    for p in reversed(alive):
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=5)
    return len([p for p in alive if _alive(p)])


def _kill_tree(pid: int) -> None:
    """Kill a process and all its descendants (listed first: once it dies they are re-parented)."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    # SIGKILL takes effect when a process is next scheduled: on a loaded machine a killed process
    # can still look alive for a while. Return once all are gone (zombies count: their parent or
    # init reaps them), so that callers and their checks see the tree dead.
    deadline = time.monotonic() + 5.0
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.01)


def stream_command(cmd: list[str], *, env: dict[str, str], log_path: Path, timeout_s: float,
                   on_start: Callable[[int], None] | None = None,
                   on_line: Callable[[str], None] | None = None) -> int:
    """Run ``cmd``, copy its output to ``log_path`` line by line, return its exit code.

    A watchdog timer kills the command and its descendants ``timeout_s`` seconds (wall clock)
    after the start, also when it prints nothing at all, and ``TimeoutError`` is raised.
    ``on_start`` gets the PID, ``on_line`` every output line.
    """
    expired = threading.Event()
    with open(log_path, "w") as log:
        # run from the log's folder, not the repository: the app is passed by absolute path and no
        # package of the working directory can shadow the app's own (see LocalSuperLink.start)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=log_path.parent)

        def expire() -> None:
            expired.set()
            _kill_tree(proc.pid)

        watchdog = threading.Timer(timeout_s, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            if on_start is not None:
                on_start(proc.pid)
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if on_line is not None:
                    on_line(line)
            proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:  # interrupted (Ctrl-C, a failing on_line): leave nothing behind
                _kill_tree(proc.pid)
                proc.wait()
    if expired.is_set():
        raise TimeoutError(f"{Path(cmd[0]).name} ran past {timeout_s:.0f} s (wall clock) and was killed "
                           f"with its descendants; see {log_path}")
    return proc.returncode


def pma_command(policy: str, args: argparse.Namespace, out_dir: Path) -> list[str]:
    """``flwr run apps/pma`` (the PMA app) for ``policy`` (a run name, see ``parse_run_name``) on the
    ``local`` SuperLink."""
    name, paper = parse_run_name(policy)
    run_config = (f"policy='{name}' paper={str(paper).lower()} num-server-rounds={args.rounds} budget={args.budget} "
                  f"task='{args.task}' seed={args.seed} jitter={float(args.jitter)} out-dir='{out_dir}'")
    federation = f"num-supernodes={args.clients} client-resources-num-cpus={args.cpus_per_client}"
    config_args = ["-c", run_config, "-c", f"num-clients={args.clients}"]
    return [console_script("flwr"), "run", str(PMA_APP), "local", "--stream", *config_args,
            "--federation-config", federation]


def pma_progress(policy: str, line: str, args: argparse.Namespace) -> str | None:
    """The progress line printed for an ``[adaptive] round`` log line of the PMA app (else None)."""
    m = _ROUND_LINE.search(line)
    if m is None:
        return None
    return (f"  [{LABELS.get(policy, policy)}] round {m.group(1)}/{args.rounds}: "
            f"makespan {float(m.group(2)):.3f} s (virtual clock)")


CommandBuilder = Callable[[str, argparse.Namespace, Path], list[str]]
ProgressLine = Callable[[str, str, argparse.Namespace], "str | None"]


def run_policy(link: LocalSuperLink, memory: MemoryPeak, policy: str, args: argparse.Namespace,
               out_dir: Path, *, command: CommandBuilder = pma_command,
               progress: ProgressLine = pma_progress) -> dict[str, Any]:
    """One ``flwr run`` with this policy; returns its summary (raises SystemExit on failure).

    Parameters
    ----------
    command : callable (default: :func:`pma_command`)
        ``(policy, args, out_dir) -> argv`` of the ``flwr run`` (which App, which run config).
        The App writes ``summary-<policy>.json`` to ``out_dir``.
    progress : callable (default: :func:`pma_progress`)
        ``(policy, line, args) -> str or None``: what to print for a line of the run's output.
    """
    cmd = command(policy, args, out_dir)
    log_path = out_dir / f"flwr-run-{policy}.log"

    def on_line(line: str) -> None:
        text = progress(policy, line, args)
        if text is not None:
            print(text, flush=True)

    started = time.perf_counter()
    try:
        code = stream_command(cmd, env=link.env, log_path=log_path, timeout_s=args.run_timeout,
                              on_start=memory.add_root, on_line=on_line)
    except TimeoutError as err:
        raise SystemExit(f"flwr run ({policy}): {err}") from None
    wall = time.perf_counter() - started
    summary_path = out_dir / f"summary-{policy}.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"status": "missing"}
    if summary.get("status") != "finished":
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"the {policy} run did not finish (flwr run exit code {code}, summary "
                         f"status {summary.get('status')!r}); last lines of {log_path}:\n{tail}")
    summary["wall_s"] = wall
    return summary


def run_policies(policies: list[str], args: argparse.Namespace, out_dir: Path, *,
                 command: CommandBuilder = pma_command, progress: ProgressLine = pma_progress,
                 app_label: str = "apps/pma") -> tuple[dict[str, dict[str, Any]], MemoryPeak, int]:
    """``flwr run`` once per policy on a private SuperLink; then stop every process of the run.

    ``command`` and ``progress`` choose the App and its progress lines (see ``run_policy``;
    default: the PMA app, ``apps/pma``); ``app_label`` names the App in the printed
    ``flwr run`` lines.

    Returns ``(summaries, memory, left)``: each policy's summary (see ``run_policy``), the memory
    sampler (its peak) and how many processes survived termination (0 expected). Writes
    ``processes.json`` to ``out_dir``: every process the run had as ``[PID, start time]``, for
    whoever checks that none survived without mistaking a reused PID for a survivor. On failure
    (``SystemExit`` from ``run_policy``, Ctrl-C) the processes are stopped too, then it re-raises.
    """
    summaries: dict[str, dict[str, Any]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="flwr-adaptive-run-"))
    link = LocalSuperLink(workdir)
    memory = MemoryPeak()
    left = 0
    with memory:
        try:
            link.start()
            assert link.proc is not None
            memory.add_root(link.proc.pid)  # so that the SuperLink and its descendants are stopped at the end
            print(f"SuperLink (pid {link.proc.pid}) on 127.0.0.1:{link.port}, FLWR_HOME={link.home}", flush=True)
            for i, policy in enumerate(policies, 1):
                print(f"-- [{i}/{len(policies)}] {LABELS.get(policy, policy)}: flwr run {app_label} local -c "
                      f"\"policy='{policy}' ...\"", flush=True)
                summaries[policy] = run_policy(link, memory, policy, args, out_dir, command=command,
                                               progress=progress)
                print(f"   done in {summaries[policy]['wall_s']:.1f} s (wall clock)", flush=True)
        finally:
            memory.stop()  # from here on only this thread reads and adds to memory.seen
            me = os.getpid()
            procs = {p.pid: p for p in memory.processes() if p.pid != me}
            for pid, p in memory.seen_processes().items():
                if pid != me:
                    procs.setdefault(pid, p)
            left = terminate_processes(list(procs.values()))
            shutil.rmtree(workdir, ignore_errors=True)
            seen = []
            for pid, p in memory.seen_processes().items():
                if pid != me:
                    try:
                        seen.append([pid, p.create_time()])
                    except psutil.Error:
                        seen.append([pid, None])
            (out_dir / "processes.json").write_text(json.dumps(sorted(seen, key=lambda x: x[0])))
    return summaries, memory, left


def comparison_table(out_dir: Path, summaries: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per policy: virtual-clock totals, final holdout metrics, wall time of the run."""
    rows = []
    base = None
    for policy, summary in summaries.items():
        hist = pd.read_csv(out_dir / f"history-{policy}.csv")
        final = summary["rounds"][-1] if summary["rounds"] else {}
        row = {
            "policy": LABELS.get(policy, policy),
            "rounds": len(hist),
            "makespan_s (virtual)": hist["makespan_s"].sum(),
            "energy_j (virtual)": hist["energy_j"].sum(),
            "idle_j (virtual)": hist["idle_j"].sum(),
            "mean CV busy": hist["cv_busy"].mean(),
            "final holdout loss": final.get("loss", float("nan")),
            "final holdout acc": final.get("accuracy", float("nan")),
            "run wall_s": summary["wall_s"],
        }
        if base is None:
            base = row
        row["makespan vs first"] = row["makespan_s (virtual)"] / base["makespan_s (virtual)"]
        row["energy vs first"] = row["energy_j (virtual)"] / base["energy_j (virtual)"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("policy")


def require_positive(ap: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> None:
    """Exit with a usage error naming the first option in ``names`` that is below 1."""
    for name in names:
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def fresh_out_dir(path: str | Path) -> Path:
    """``path`` created, without the per-policy files of an earlier run (their policies may differ)."""
    out_dir = Path(path).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*-*.*"):
        if old.name.startswith(("summary-", "history-", "flwr-run-")):
            old.unlink()
    return out_dir


def add_run_arguments(ap: argparse.ArgumentParser, out: Path, run_timeout_s: float, budget_help: str) -> None:
    """The options every ``flwr run`` comparison command shares (this one, ``experiments.baselines``)."""
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=2200, help=budget_help)
    ap.add_argument("--clients", type=int, default=11, help="emulated devices (testbed device = id %% 11)")
    ap.add_argument("--task", default="mnist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jitter", type=float, default=0.05, help="lognormal sigma of each device's time factor")
    ap.add_argument("--cpus-per-client", type=int, default=2,
                    help="Ray CPUs per client: 2 on a 2-core machine = one client actor (least memory)")
    ap.add_argument("--out", default=str(out), help="folder for CSVs, JSONs and logs")
    ap.add_argument("--run-timeout", type=float, default=run_timeout_s, help="seconds before one flwr run is killed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma-separated: equal, time, low-energy, energy, min-energy, static, oort, "
                         "fedasync, or time-paper / low-energy-paper / energy-paper (the paper's estimation "
                         "and deadband); the first one is the baseline")
    add_run_arguments(ap, out=REPO / "results" / "flower", run_timeout_s=600.0,
                      budget_help="samples per round, split among the clients")
    args = ap.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in LABELS]
    if bad or not policies:
        ap.error(f"unknown policies {bad}; choose from {', '.join(LABELS)}")
    if args.jitter < 0:
        ap.error(f"--jitter must be >= 0, got {args.jitter}")
    require_positive(ap, args, ("rounds", "budget", "clients", "cpus_per_client"))

    started = time.perf_counter()
    out_dir = fresh_out_dir(args.out)
    print(f"== Flower comparison: `flwr run apps/pma` per policy, {args.clients} emulated devices, {args.rounds} rounds, "
          f"budget {args.budget} samples/round, task {args.task} (offline) ==", flush=True)
    summaries, memory, left = run_policies(policies, args, out_dir)
    table = comparison_table(out_dir, summaries)
    table.to_csv(out_dir / "comparison.csv")
    pd.set_option("display.width", 220)
    print(f"\n== Result ({args.rounds} rounds; makespan and energy: VIRTUAL clock, summed over rounds; "
          f"energy = active + idle while waiting; run wall_s: WALL clock) ==")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    wall = time.perf_counter() - started
    print(f"\nThis command: {wall:.1f} s wall clock; peak resident memory of the run's processes "
          f"{memory.peak_bytes / 2**30:.2f} GB (sum of RSS over {memory.peak_procs} processes: this "
          f"command, flwr, the SuperLink and its descendants incl. Ray; shared pages counted per process); "
          f"processes left running: {left}")
    print(f"CSV: {out_dir / 'comparison.csv'}; per-round histories and logs in {out_dir}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
