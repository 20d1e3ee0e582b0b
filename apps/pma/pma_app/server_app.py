"""pma-app: the ServerApp. The policy's strategy (flwr-adaptive's adaptive strategy around FedAvg,
or a baseline) with centralized evaluation on the task's holdout after every round.

With ``out-dir``: ``history-<policy>.csv`` (per round), ``history-<policy>-clients.csv`` (per
client) and ``summary-<policy>.json`` (``<policy>-paper`` with ``paper = true``), whose ``"status"`` is ``"finished"`` only when every round
ran (``flwr run`` exits 0 even when a run failed, so callers check that file). A negative
``deadband`` or ``slack`` (the defaults) means the policy's own default.
"""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.strategies import build_strategy
from flwr_adaptive.strategies.registry import run_name
from flwr_adaptive.strategies.run_summary import RunSummary, rounds_trained
from pma_app.task import DEFAULTS, load_task, run_config

app = ServerApp()


def policy_default(value: float) -> float | None:
    """A run-config number where a negative value stands for "the policy's default" (``None``)."""
    value = float(value)
    return None if value < 0 else value


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` of PMA with the chosen policy."""
    cfg = run_config(context)
    task = load_task(cfg["task"])
    _, holdout = task.data()
    n = int(cfg["num-clients"])
    out_dir = Path(cfg["out-dir"]) if cfg["out-dir"] else None
    policy = str(cfg["policy"])
    name = run_name(policy, bool(cfg["paper"]))  # "time-paper" with paper=true: its files apart
    summary = RunSummary(out_dir, name, cfg["task"], {k: cfg[k] for k in DEFAULTS})
    strategy = build_strategy(
        policy, strategy=FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n),
        budget=int(cfg["budget"]), num_nodes=n, seed=int(cfg["seed"]),
        oort_fraction=float(cfg["oort-fraction"]), fedasync_alpha=float(cfg["fedasync-alpha"]),
        fedasync_staleness=str(cfg["fedasync-staleness"]), smoothing=float(cfg["smoothing"]),
        deadband=policy_default(cfg["deadband"]), slack=policy_default(cfg["slack"]),
        paper=bool(cfg["paper"]), weighting=str(cfg["weighting"]),
        allow_cycling=bool(cfg["allow-cycling"]), state_dir=cfg["state-dir"] or None)
    model = task.make_model(seed=int(cfg["seed"]))

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        metrics = task.evaluate(model, holdout)
        summary.add_round(server_round, metrics)
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    started = time.perf_counter()
    strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                   num_rounds=int(cfg["num-server-rounds"]), timeout=float(cfg["timeout"]),
                   train_config=ConfigRecord({"lr": float(cfg["lr"])}), evaluate_fn=evaluate)
    wall = time.perf_counter() - started
    if out_dir is not None:
        strategy.save_history(out_dir / f"history-{name}.csv")
    summary.finish(len(strategy.history) == int(cfg["num-server-rounds"]), wall, rounds_trained(strategy))
    summary.check()  # a run that aggregated nothing ends as failed, not normally
