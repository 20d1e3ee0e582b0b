"""lite-app: the ServerApp. The policy's strategy around FedAvg. After every round: the holdout MSE
and the round's server-side wall time in ``summary-<policy>.json``, that round's rows appended to
the history CSVs, and (with ``state-dir``) the model checkpointed, so a run that dies leaves
everything up to its last round and a restarted ServerApp continues from there."""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flwr_adaptive.strategies import build_strategy
from flwr_adaptive.strategies.resumable import ResumableRun
from flwr_adaptive.strategies.round_timeout import RoundTimeout
from flwr_adaptive.strategies.run_summary import RunSummary, rounds_trained
from lite_app.task import DEFAULTS, holdout, initial_weights, min_nodes, mse, run_config

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-server-rounds`` rounds with the chosen policy."""
    cfg = run_config(context)
    out_dir = Path(cfg["out-dir"]) if cfg["out-dir"] else None
    policy = str(cfg["policy"])
    summary = RunSummary(out_dir, policy, "lite", {k: cfg[k] for k in DEFAULTS})
    with summary.guard():
        waits_for = min_nodes(cfg)
        num_rounds = int(cfg["num-server-rounds"])
        strategy = build_strategy(
            policy, strategy=FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=waits_for,
                                    min_available_nodes=waits_for),
            budget=int(cfg["budget"]), num_nodes=waits_for, seed=int(cfg["seed"]),
            smoothing=float(cfg["smoothing"]), allow_cycling=True, state_dir=cfg["state-dir"] or None)
        # opt-in: where Flower's start-up dwarfs the compute and scatters, its noise would drive the split
        strategy.server_time = bool(cfg["server-time"])
        if float(cfg["round-timeout-factor"]) > 0:  # each round's timeout from the prediction
            strategy.round_timeout = RoundTimeout(float(cfg["round-timeout-factor"]),
                                                  float(cfg["round-timeout-floor-s"]), float(cfg["timeout"]))
        x_holdout, y_holdout = holdout(int(cfg["seed"]))
        last = [time.perf_counter()]

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            now = time.perf_counter()
            metrics = {"mse": mse(arrays.to_numpy_ndarrays()[0], x_holdout, y_holdout)}
            if server_round > 0:
                metrics["round_wall_s"] = now - last[0]  # the server's wall clock: what the round cost
            summary.add_round(server_round, metrics)
            if out_dir is not None and server_round > 0:
                strategy.append_history(out_dir / f"history-{policy}.csv", server_round)
            summary.write()
            last[0] = time.perf_counter()
            return MetricRecord(metrics)

        resumable = ResumableRun(cfg["state-dir"] or None)
        resumed = summary.resume_from(resumable.load())
        started = time.perf_counter()
        result = resumable.start(strategy, grid, ArrayRecord([initial_weights()]), num_rounds=num_rounds,
                                 timeout=float(cfg["timeout"]), train_config=ConfigRecord({}), evaluate_fn=evaluate)
        summary.data["train_metrics"] = {str(r): {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}
                                         for r, m in result.train_metrics_clientapp.items()}
        summary.finish(max(result.evaluate_metrics_serverapp, default=0) == num_rounds,
                       time.perf_counter() - started, rounds_trained(strategy) + resumed)
        summary.check()
