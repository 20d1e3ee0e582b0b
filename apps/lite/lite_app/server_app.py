"""lite-app: the ServerApp. The policy's strategy around FedAvg; after every round the holdout MSE,
the round's server-side wall time, the history CSVs and ``summary-<policy>.json`` are written, so a
run that dies leaves everything up to its last round."""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.strategies import build_strategy
from flwr_adaptive.strategies.run_summary import RunSummary
from lite_app.task import DEFAULTS, holdout, initial_weights, min_nodes, mse, run_config

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` rounds with the chosen policy."""
    cfg = run_config(context)
    out_dir = Path(cfg["out-dir"]) if cfg["out-dir"] else None
    policy = str(cfg["policy"])
    summary = RunSummary(out_dir, policy, "lite", {k: cfg[k] for k in DEFAULTS})
    waits_for = min_nodes(cfg)
    strategy = build_strategy(
        policy, strategy=FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=waits_for,
                                min_available_nodes=waits_for),
        budget=int(cfg["budget"]), num_nodes=waits_for, seed=int(cfg["seed"]),
        smoothing=float(cfg["smoothing"]), deadband=float(cfg["deadband"]), allow_cycling=True,
        state_dir=cfg["state-dir"] or None)
    x_holdout, y_holdout = holdout(int(cfg["seed"]))
    last = [time.perf_counter()]

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        now = time.perf_counter()
        metrics = {"mse": mse(arrays.to_numpy_ndarrays()[0], x_holdout, y_holdout)}
        if server_round > 0:
            metrics["round_wall_s"] = now - last[0]
        last[0] = now
        summary.add_round(server_round, metrics)
        summary.write()
        if out_dir is not None and server_round > 0:
            strategy.save_history(out_dir / f"history-{policy}.csv")
        return MetricRecord(metrics)

    started = time.perf_counter()
    strategy.start(grid=grid, initial_arrays=ArrayRecord([initial_weights()]),
                   num_rounds=int(cfg["num-server-rounds"]), timeout=float(cfg["timeout"]),
                   train_config=ConfigRecord({}), evaluate_fn=evaluate)
    summary.finish(len(strategy.history) == int(cfg["num-server-rounds"]), time.perf_counter() - started)
