"""pma-app: the ServerApp. The policy's strategy (flwr-adaptive's adaptive strategy around FedAvg,
or a baseline) with centralized evaluation on the task's holdout after every round.

With ``out-dir``: ``history-<policy>.csv`` (per round) and ``history-<policy>-clients.csv`` (per
client), both appended after every round, and ``summary-<policy>.json`` (``<policy>-paper`` with
``paper = true``), rewritten after every round, whose ``"status"`` is ``"finished"`` only when every round ran (``flwr run`` exits 0 even
when a run failed, so callers check that file; ``"failed"`` carries the error, and a ServerApp
killed outright leaves ``"running"`` at its last round). Rounds wait for ``min-nodes`` connected
nodes (default: half of ``num-clients``) and go on without nodes that left; a round that has
fewer for ``node-wait`` seconds (default 20) fails the run with the fix in one line (Flower's
default local federation has 2 nodes: ``-c "num-clients=2"``). A negative
``deadband`` or ``slack`` (the defaults) means the policy's own default.

With ``state-dir``: the controller state and, for the synchronous policies, the global model,
round number and holdout metrics are checkpointed after every round
(:class:`~flwr_adaptive.strategies.resumable.ResumableRun`); a ServerApp restarted with the same
``state-dir`` and ``num-server-rounds`` continues at the next round from that model.
"""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.strategies import build_strategy
from flwr_adaptive.strategies.registry import run_name
from flwr_adaptive.strategies.resumable import ResumableRun
from flwr_adaptive.strategies.run_summary import RunSummary, rounds_trained
from pma_app.task import DEFAULTS, load_task, min_nodes, node_wait_hint, run_config

app = ServerApp()


def policy_default(value: float) -> float | None:
    """A run-config number where a negative value stands for "the policy's default" (``None``)."""
    value = float(value)
    return None if value < 0 else value


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` of PMA with the chosen policy."""
    cfg = run_config(context)
    out_dir = Path(cfg["out-dir"]) if cfg["out-dir"] else None
    policy = str(cfg["policy"])
    name = run_name(policy, bool(cfg["paper"]))  # "time-paper" with paper=true: its files apart
    summary = RunSummary(out_dir, name, cfg["task"], {k: cfg[k] for k in DEFAULTS})
    with summary.guard():
        run(grid, cfg, summary, out_dir, policy, name)


def run(grid: Grid, cfg: dict, summary: RunSummary, out_dir: Path | None, policy: str, name: str) -> None:
    """The run itself (inside the summary's guard: an exception marks the summary failed)."""
    task = load_task(cfg["task"])
    _, holdout = task.data()
    waits_for = min_nodes(cfg)
    num_rounds = int(cfg["num-server-rounds"])
    strategy = build_strategy(
        policy, strategy=FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=waits_for,
                                min_available_nodes=waits_for),
        budget=int(cfg["budget"]), num_nodes=waits_for, seed=int(cfg["seed"]),
        oort_fraction=float(cfg["oort-fraction"]), fedasync_alpha=float(cfg["fedasync-alpha"]),
        fedasync_staleness=str(cfg["fedasync-staleness"]), fedasync_order=str(cfg["fedasync-order"]), smoothing=float(cfg["smoothing"]),
        deadband=policy_default(cfg["deadband"]), slack=policy_default(cfg["slack"]),
        paper=bool(cfg["paper"]), weighting=str(cfg["weighting"]),
        allow_cycling=bool(cfg["allow-cycling"]), state_dir=cfg["state-dir"] or None)
    # a round short of nodes fails the run after node-wait seconds with the fix, never hangs
    strategy.node_wait_hint = node_wait_hint(cfg)
    if policy == "fedasync":
        strategy.wait_s = float(cfg["node-wait"])
    else:
        strategy.node_wait_s = float(cfg["node-wait"])
    model = task.make_model(seed=int(cfg["seed"]))
    last = [time.perf_counter()]

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        now = time.perf_counter()
        model.load_state_dict(arrays.to_torch_state_dict())
        metrics = dict(task.evaluate(model, holdout))
        if server_round > 0:
            metrics["round_wall_s"] = now - last[0]  # the server's wall clock: what the round cost
        summary.add_round(server_round, metrics)
        if out_dir is not None and server_round > 0 and hasattr(strategy, "append_history"):
            strategy.append_history(out_dir / f"history-{name}.csv", server_round)
        summary.write()
        last[0] = time.perf_counter()
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    started = time.perf_counter()
    train_config = ConfigRecord({"lr": float(cfg["lr"])})
    initial = ArrayRecord(model.state_dict())
    if policy == "fedasync":  # its own asynchronous loop (round-equivalents), not checkpointed
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=num_rounds, timeout=float(cfg["timeout"]),
                       train_config=train_config, evaluate_fn=evaluate)
        done, resumed = len(strategy.history) == num_rounds, 0
    else:
        resumable = ResumableRun(cfg["state-dir"] or None)
        resumed = summary.resume_from(resumable.load())
        result = resumable.start(strategy, grid, initial, num_rounds=num_rounds, timeout=float(cfg["timeout"]),
                                 train_config=train_config, evaluate_fn=evaluate)
        done = max(result.evaluate_metrics_serverapp, default=0) == num_rounds
    trained = rounds_trained(strategy) + resumed  # rounds before a resumption trained too
    summary.finish(done, time.perf_counter() - started, trained)
    summary.check()  # a run that aggregated nothing ends as failed, not normally
