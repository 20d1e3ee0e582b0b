"""A local Flower deployment: one SuperLink and N SuperNodes on this machine, stopped by PID.

Contract
--------
:class:`LocalDeployment` starts Flower's Deployment Engine the way a user does on real machines
(``flower-superlink`` + ``flower-supernode --node-config "partition-id=i num-partitions=n ..."``),
on free ports of 127.0.0.1, with

- a generated ``FLWR_HOME`` (``<workdir>/flwr-home/config.toml``) whose connection ``deploy``
  points at the SuperLink, so ``flwr run <app> deploy`` / ``flwr list deploy`` reach it and
  nothing of the user's own ``~/.flwr`` is read or written; every SuperNode gets its own
  ``FLWR_HOME`` (where Flower installs the app it receives);
- runtime dependency installation disabled (offline), Flower's telemetry off;
- optionally TLS (certificates made by ``scripts/certs.sh``) and SuperNode authentication
  (keys made by the same script, public keys registered with ``flwr supernode register``).

Every process it starts, and every descendant it has seen (Flower's ``flower-superexec``,
``flwr-serverapp`` and ``flwr-clientapp`` children), is stopped by PID in :meth:`stop`, which
also runs when the ``with`` block raises. :meth:`kill_node` SIGKILLs one SuperNode with its
descendants (a crashed machine) and :meth:`start_node` brings it back with the same node config
(it gets a new node id from the SuperLink).

Used by ``tests/test_deployment.py``, ``python -m experiments.deploy_bench`` and the recipe of
``docs/deployment.md``. ``python -m experiments.deployment --nodes 3`` starts one and waits
(Ctrl-C stops everything).

Cost
----
Start-up ≈ 5–10 s for the SuperLink and each SuperNode on a loaded 2-core machine (Python
imports); each ``flwr`` CLI call ≈ 2–9 s for the same reason. A SuperNode polls the SuperLink
every 3 s when idle (Flower's fixed interval), and starts one ``flwr-clientapp`` process per
message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import psutil

from experiments.compare import REPO, console_script, free_port, stream_command, terminate_processes

__all__ = ["LocalDeployment", "RunOutcome", "format_run_config", "CONNECTION"]

CONNECTION = "deploy"
"""Name of the connection in the generated ``config.toml`` (``flwr run <app> deploy``)."""

_RUN_ID = re.compile(r"Successfully started run (\d+)")
_NODE_ID = re.compile(r"SuperNode ID: (\d+)")


def format_run_config(config: Mapping[str, Any]) -> str:
    """``{"policy": "time", "budget": 600}`` → ``policy='time' budget=600`` (``flwr run -c``)."""
    parts = []
    for key, value in config.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        elif isinstance(value, (str, os.PathLike)):
            text = str(value)
            if "'" in text:
                raise ValueError(f"run config value of {key!r} contains a single quote: {text!r}")
            text = f"'{text}'"
        else:
            raise ValueError(f"run config value of {key!r} must be a bool, int, float or str, got {value!r}")
        parts.append(f"{key}={text}")
    return " ".join(parts)


def _node_config_arg(config: Mapping[str, Any]) -> str:
    parts = []
    for key, value in config.items():
        if isinstance(value, str):
            parts.append(f'{key}="{value}"')
        elif isinstance(value, bool):
            parts.append(f"{key}={'true' if value else 'false'}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


@dataclass
class RunOutcome:
    """One ``flwr run``: exit code, run id (``None`` when it did not start), log, wall time."""

    exit_code: int
    run_id: int | None
    log_path: Path
    wall_s: float
    lines: list[str] = field(default_factory=list, repr=False)


@dataclass
class _Node:
    index: int
    config: dict[str, Any]
    port: int
    home: Path
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    starts: int = 0
    node_ids: list[int] = field(default_factory=list)


class LocalDeployment:
    """One SuperLink and ``num_nodes`` SuperNodes on 127.0.0.1 (see the module docstring).

    Parameters
    ----------
    num_nodes : int
        SuperNodes to start (0 is allowed: add them with :meth:`add_node`).
    node_config : callable or sequence of mappings, optional
        Each node's ``--node-config``. Default: ``partition-id=i num-partitions=num_nodes``. A
        callable gets the node index and returns the mapping; a sequence gives one per node.
    workdir : str or Path, optional
        Where logs, ``FLWR_HOME``\\s, certificates and keys go (default: a new temporary folder,
        removed by :meth:`stop` unless ``keep_workdir``).
    tls : bool (default: False)
        Serve the SuperLink over TLS with certificates from ``scripts/certs.sh``; the
        SuperNodes and the ``flwr`` CLI verify it with the generated CA.
    supernode_auth : bool (default: False)
        Turn on SuperNode authentication: the SuperLink accepts only SuperNodes whose public key
        was registered (``flwr supernode register``); each node signs with its private key.
        Flower requires TLS for it, so it implies ``tls``.
    keep_workdir : bool (default: False)
        Keep a temporary ``workdir`` after :meth:`stop` (logs for debugging).
    env : mapping, optional
        Extra environment variables of every Flower process.
    database : bool (default: False)
        Run the SuperLink with ``--database <workdir>/superlink.db`` (its state survives
        :meth:`restart_superlink`); else its state is in memory.
    """

    def __init__(self, num_nodes: int, *, node_config: Callable[[int], Mapping[str, Any]]
                 | Sequence[Mapping[str, Any]] | None = None, workdir: str | os.PathLike | None = None,
                 tls: bool = False, supernode_auth: bool = False, keep_workdir: bool = False,
                 env: Mapping[str, str] | None = None, database: bool = False) -> None:
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
            raise ValueError(f"num_nodes must be an int >= 0, got {num_nodes!r}")
        if node_config is not None and not callable(node_config) and len(node_config) != num_nodes:
            raise ValueError(f"node_config lists {len(node_config)} node configs for {num_nodes} nodes; "
                             "give one per node or a callable index -> config")
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="flwr-adaptive-deploy-") if workdir is None else workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.keep_workdir = keep_workdir
        self.tls = bool(tls or supernode_auth)
        self.supernode_auth = bool(supernode_auth)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.address = f"{self.host}:{self.port}"
        self.home = self.workdir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        self.certs = self.workdir / "certs"
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, **(env or {}), "FLWR_HOME": str(self.home),
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "FLWR_TELEMETRY_ENABLED": "0",
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.superlink: subprocess.Popen | None = None
        self.superlink_log = self.workdir / "superlink.log"
        self.database = self.workdir / "superlink.db" if database else None
        self.superlink_starts = 0
        self._seen: dict[int, psutil.Process] = {}  # every process started or seen below ours
        self._nodes: list[_Node] = []
        self._stopped = False
        configs = [self._default_config(i, num_nodes, node_config) for i in range(num_nodes)]
        for config in configs:
            self._new_node(config)

    # ------------------------------------------------------------------ set-up
    @staticmethod
    def _default_config(i: int, n: int, spec: Any) -> dict[str, Any]:
        if spec is None:
            return {"partition-id": i, "num-partitions": n}
        return dict(spec(i) if callable(spec) else spec[i])

    def _new_node(self, config: Mapping[str, Any]) -> _Node:
        i = len(self._nodes)
        node = _Node(i, dict(config), free_port(), self.workdir / f"node-{i}" / "flwr-home")
        node.home.mkdir(parents=True, exist_ok=True)
        self._nodes.append(node)
        return node

    def _write_config(self) -> None:
        lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]",
                 f'address = "{self.address}"']
        if self.tls:
            lines.append(f'root-certificates = "{self.certs / "ca.crt"}"')
        else:
            lines.append("insecure = true")
        (self.home / "config.toml").write_text("\n".join(lines) + "\n")

    def _make_certs(self) -> None:
        script = REPO / "scripts" / "certs.sh"
        nodes = len(self._nodes) if self.supernode_auth else 0
        done = subprocess.run(["bash", str(script), str(self.certs), str(nodes)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{script} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")

    def _remember(self, proc: psutil.Process | int) -> None:
        try:
            p = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
            self._seen.setdefault(p.pid, p)
            for child in p.children(recursive=True):
                self._seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def _popen(self, cmd: list[str], log_path: Path, env: Mapping[str, str]) -> subprocess.Popen:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, env=dict(env), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        self._remember(proc.pid)
        return proc

    # ------------------------------------------------------------------ SuperLink
    def superlink_command(self) -> list[str]:
        """The ``flower-superlink`` command line this deployment runs."""
        cmd = [console_script("flower-superlink"), "--host", self.host, "--port", str(self.port),
               "--disable-runtime-dependency-installation"]
        if self.tls:
            cmd += ["--ssl-ca-certfile", str(self.certs / "ca.crt"), "--ssl-certfile",
                    str(self.certs / "server.pem"), "--ssl-keyfile", str(self.certs / "server.key")]
        else:
            cmd.append("--insecure")
        if self.supernode_auth:
            cmd.append("--enable-supernode-auth")
        if self.database is not None:
            cmd += ["--database", str(self.database)]
        return cmd

    def start(self, timeout_s: float = 120.0) -> "LocalDeployment":
        """Start the SuperLink, then every SuperNode; return when all are connected."""
        if self.tls:
            self._make_certs()
        self._write_config()
        self._start_superlink(timeout_s)
        if self.supernode_auth:
            for node in self._nodes:
                self.register_node(node.index)
        for node in self._nodes:
            self.start_node(node.index, wait=False)
        for node in self._nodes:
            self.wait_node(node.index, timeout_s)
        return self

    def _start_superlink(self, timeout_s: float) -> None:
        self.superlink_starts += 1
        if self.superlink_starts > 1:
            self.superlink_log = self.workdir / f"superlink-start{self.superlink_starts}.log"
        self.superlink = self._popen(self.superlink_command(), self.superlink_log, self.env)
        log_path = self.superlink_log
        self._wait_for(lambda: "Uvicorn running on" in log_path.read_text(), self.superlink, log_path,
                       "flower-superlink", timeout_s)
        self._remember(self.superlink.pid)

    def restart_superlink(self, timeout_s: float = 120.0) -> None:
        """SIGKILL the SuperLink with its descendants (its ``flower-superexec`` and the running
        ``flwr-serverapp``: the SuperLink's machine crashed) and start it again on the same port
        (and ``--database``, whose state it then reads back). The SuperNodes keep retrying."""
        if self.superlink is None or self.superlink.poll() is not None:
            raise RuntimeError("the SuperLink is not running")
        procs = self._sigkill_tree(self.superlink.pid)
        psutil.wait_procs(procs, timeout=30)
        self.superlink.wait()
        self._start_superlink(timeout_s)

    def _wait_for(self, ready: Callable[[], bool], proc: subprocess.Popen, log_path: Path, name: str,
                  timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}; last lines of {log_path}:\n"
                                   + _tail(log_path))
            time.sleep(0.2)
        raise TimeoutError(f"{name} was not ready within {timeout_s:.0f} s; last lines of {log_path}:\n"
                           + _tail(log_path))

    # ------------------------------------------------------------------ SuperNodes
    @property
    def num_nodes(self) -> int:
        """SuperNodes of this deployment (running or not)."""
        return len(self._nodes)

    def add_node(self, config: Mapping[str, Any], start: bool = True, register: bool = True) -> int:
        """Add a SuperNode with this node config (started unless ``start=False``); its index.

        With ``supernode_auth`` the node gets a new key pair, registered with the SuperLink
        unless ``register=False`` (a node the SuperLink must refuse).
        """
        node = self._new_node(config)
        if self.supernode_auth and self.superlink is not None:
            key = self.certs / f"node-{node.index}"
            for path in (key, key.with_suffix(".pub")):
                path.unlink(missing_ok=True)
            subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", "", "-f", str(key)],
                           check=True, capture_output=True)
            if register:
                self.register_node(node.index)
        if start:
            self.start_node(node.index)
        return node.index

    def node_command(self, index: int) -> list[str]:
        """The ``flower-supernode`` command line of node ``index``."""
        node = self._nodes[index]
        cmd = [console_script("flower-supernode"), "--superlink", self.address, "--host", self.host,
               "--port", str(node.port)]
        if node.config:
            cmd += ["--node-config", _node_config_arg(node.config)]
        if self.tls:
            cmd += ["--root-certificates", str(self.certs / "ca.crt")]
        else:
            cmd.append("--insecure")
        if self.supernode_auth:
            cmd += ["--auth-supernode-private-key", str(self.certs / f"node-{index}")]
        return cmd

    def register_node(self, index: int) -> None:
        """Register node ``index``'s public key with the SuperLink (SuperNode authentication)."""
        key = self.certs / f"node-{index}.pub"
        done = subprocess.run([console_script("flwr"), "supernode", "register", str(key), CONNECTION],
                              env=self.env, capture_output=True, text=True, cwd=self.workdir, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"flwr supernode register {key} failed (exit {done.returncode}):\n"
                               f"{done.stdout}{done.stderr}")

    def start_node(self, index: int, wait: bool = True, timeout_s: float = 120.0) -> None:
        """Start (or restart) SuperNode ``index`` with its node config."""
        node = self._nodes[index]
        if node.proc is not None and node.proc.poll() is None:
            raise RuntimeError(f"SuperNode {index} is already running (pid {node.proc.pid})")
        node.starts += 1
        node.log_path = self.workdir / f"node-{index}-start{node.starts}.log"
        node.proc = self._popen(self.node_command(index), node.log_path, {**self.env, "FLWR_HOME": str(node.home)})
        if wait:
            self.wait_node(index, timeout_s)

    def wait_node(self, index: int, timeout_s: float = 120.0) -> int:
        """Wait until SuperNode ``index`` is connected; its node id (new at every start)."""
        node = self._nodes[index]
        assert node.proc is not None and node.log_path is not None
        found: list[int] = []

        def connected() -> bool:
            m = _NODE_ID.search(node.log_path.read_text())
            if m:
                found.append(int(m.group(1)))
            return bool(m)

        self._wait_for(connected, node.proc, node.log_path, f"flower-supernode {index}", timeout_s)
        self._remember(node.proc.pid)  # its flower-superexec child exists by now
        node.node_ids.append(found[0])
        return found[0]

    def node_pid(self, index: int) -> int | None:
        """PID of SuperNode ``index`` (``None`` when it is not running)."""
        proc = self._nodes[index].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def node_ids(self, index: int) -> list[int]:
        """Flower node ids SuperNode ``index`` had, one per start, in order."""
        return list(self._nodes[index].node_ids)

    def node_log(self, index: int) -> str:
        """The log of SuperNode ``index``'s latest start."""
        path = self._nodes[index].log_path
        return path.read_text() if path is not None and path.exists() else ""

    def stop_node(self, index: int, timeout_s: float = 60.0) -> None:
        """SIGTERM SuperNode ``index`` and wait for it (an operator's restart, not a crash)."""
        node = self._nodes[index]
        if node.proc is None or node.proc.poll() is not None:
            raise RuntimeError(f"SuperNode {index} is not running")
        self._remember_tree()
        node.proc.terminate()
        node.proc.wait(timeout=timeout_s)

    def kill_node(self, index: int) -> None:
        """SIGKILL SuperNode ``index`` and its descendants (a machine that crashed)."""
        node = self._nodes[index]
        if node.proc is None or node.proc.poll() is not None:
            raise RuntimeError(f"SuperNode {index} is not running")
        self._sigkill_tree(node.proc.pid)
        node.proc.wait()

    def _sigkill_tree(self, pid: int) -> list[psutil.Process]:
        """SIGKILL ``pid`` and its descendants (a machine that crashed), remembered for the final sweep."""
        try:
            root = psutil.Process(pid)
            procs = [*root.children(recursive=True), root]
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            self._seen.setdefault(p.pid, p)
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        return procs

    # ------------------------------------------------------------------ the flwr CLI
    def flwr(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        """Run ``flwr <args>`` against this deployment's ``FLWR_HOME``."""
        return subprocess.run([console_script("flwr"), *args], env=self.env, capture_output=True, text=True,
                              cwd=self.workdir, timeout=timeout_s)

    def run(self, app: str | os.PathLike, run_config: Mapping[str, Any] | str = "", *, timeout_s: float = 600.0,
            on_line: Callable[[str], None] | None = None, log_name: str = "flwr-run.log") -> RunOutcome:
        """``flwr run <app> deploy --stream -c <run_config>``; returns when the run ends.

        ``flwr run`` exits 0 even when the run failed: read :meth:`run_status` (or the app's own
        summary) for the outcome.
        """
        cmd = [console_script("flwr"), "run", str(Path(app).resolve()), CONNECTION, "--stream"]  # from any cwd
        config = run_config if isinstance(run_config, str) else format_run_config(run_config)
        if config:
            cmd += ["-c", config]
        lines: list[str] = []
        run_id: list[int] = []

        def each(line: str) -> None:
            lines.append(line)
            m = _RUN_ID.search(line)
            if m and not run_id:
                run_id.append(int(m.group(1)))
            self._remember_tree()
            if on_line is not None:
                on_line(line)

        log_path = self.workdir / log_name
        started = time.perf_counter()
        code = stream_command(cmd, env=self.env, log_path=log_path, timeout_s=timeout_s,
                              on_start=self._remember, on_line=each)
        return RunOutcome(code, run_id[0] if run_id else None, log_path, time.perf_counter() - started, lines)

    def runs(self) -> list[dict[str, Any]]:
        """``flwr list deploy --format json``: one dict per run (``run-id``, ``status``, ...)."""
        done = self.flwr("list", CONNECTION, "--format", "json")
        start = done.stdout.find("{")
        if done.returncode != 0 or start < 0:
            raise RuntimeError(f"flwr list failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
        data = json.loads(done.stdout[start:])
        if not data.get("success", False):
            raise RuntimeError(f"flwr list reported failure: {data}")
        return list(data.get("runs", []))

    def run_status(self, run_id: int) -> str:
        """``status`` of one run as ``flwr list`` shows it (e.g. ``finished:completed``)."""
        for run in self.runs():
            if int(run.get("run-id", -1)) == int(run_id):
                return str(run.get("status"))
        raise KeyError(f"run {run_id} is not listed by flwr list")

    def nodes_online(self) -> dict[int, str]:
        """``flwr supernode list``: ``{node id: status}`` as the SuperLink sees them."""
        done = self.flwr("supernode", "list", CONNECTION, "--format", "json")
        start = done.stdout.find("{")
        if done.returncode != 0 or start < 0:
            raise RuntimeError(f"flwr supernode list failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
        return {int(n["node-id"]): str(n["status"]) for n in json.loads(done.stdout[start:]).get("nodes", [])}

    # ------------------------------------------------------------------ tear-down
    def _remember_tree(self) -> None:
        roots = [self.superlink] + [n.proc for n in self._nodes]
        for proc in roots:
            if proc is not None and proc.poll() is None:
                self._remember(proc.pid)

    def processes(self) -> list[psutil.Process]:
        """Every process of this deployment seen so far that is still alive."""
        self._remember_tree()
        alive = []
        for p in self._seen.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        return alive

    def stop(self, grace_s: float = 10.0) -> int:
        """Stop every process of the deployment by PID (children first); returns survivors (0)."""
        procs = self.processes()
        # Children before parents: SuperNodes and the SuperLink restart nothing once their
        # children are gone, and a parent killed first would re-parent its children.
        depth = {p.pid: _depth(p) for p in procs}
        procs.sort(key=lambda p: depth[p.pid])
        left = terminate_processes(procs, grace_s=grace_s)
        for proc in [self.superlink] + [n.proc for n in self._nodes]:
            if proc is not None and proc.poll() is None:
                proc.wait(timeout=5)
        self._stopped = True
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return left

    def __enter__(self) -> "LocalDeployment":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        if not self._stopped:
            self.stop()


def _depth(p: psutil.Process) -> int:
    try:
        return len(p.parents())
    except psutil.Error:
        return 0


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "".join(path.read_text().splitlines(keepends=True)[-lines:])
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> int:
    """Start a local deployment, print how to use it, wait for Ctrl-C, stop everything."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3, help="SuperNodes (partition-id 0..n-1)")
    ap.add_argument("--slowdown", type=float, nargs="*", default=[],
                    help="node-config slowdown=k per node (apps/lite: sleep-emulated slower devices)")
    ap.add_argument("--device", nargs="*", default=[],
                    help="node-config device=<profile> per node (apps/pma: sleep-emulated testbed boards)")
    ap.add_argument("--tls", action="store_true", help="TLS with certificates from scripts/certs.sh")
    ap.add_argument("--auth", action="store_true", help="SuperNode authentication (implies --tls)")
    ap.add_argument("--workdir", default=None, help="logs and FLWR_HOME (default: a temporary folder)")
    args = ap.parse_args(argv)

    def config(i: int) -> dict[str, Any]:
        c: dict[str, Any] = {"partition-id": i, "num-partitions": args.nodes}
        if i < len(args.slowdown):
            c["slowdown"] = args.slowdown[i]
        if i < len(args.device):
            c["device"] = args.device[i]
        return c

    dep = LocalDeployment(args.nodes, node_config=config, workdir=args.workdir, tls=args.tls,
                          supernode_auth=args.auth, keep_workdir=True)
    try:
        dep.start()
        print(f"SuperLink (pid {dep.superlink.pid if dep.superlink else '?'}) on {dep.address}; "
              f"{dep.num_nodes} SuperNodes; logs in {dep.workdir}", flush=True)
        print(f"  FLWR_HOME={dep.home} FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 "
              f"flwr run apps/lite {CONNECTION} --stream", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        left = dep.stop()
    print(f"stopped the deployment; processes left running: {left}", flush=True)
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
