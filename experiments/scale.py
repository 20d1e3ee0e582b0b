"""The strategy's own cost per round at cross-device scale, next to FedAvg's (wall clock).

Flower's ``FedAvg(fraction_train=F)`` and ``AdaptiveStrategy`` around the same ``FedAvg`` are
driven directly, without Ray or a SuperLink: ``configure_train`` on a grid listing the
population, one fabricated reply per message (a two-float model and the telemetry a wrapped
client sends), ``aggregate_train``. The replies are built outside the timed calls. Per row:

- ``fedavg ms``: FedAvg's ``configure_train + aggregate_train`` per round;
- ``adaptive ms``: the same through ``AdaptiveStrategy`` (FedAvg runs inside it);
- ``own ms`` = adaptive − fedavg: what the plugin adds per round (screening, controller, history,
  state), and ``own µs/node``: that per sampled node;
- ``controller ms``: the controller's ``observe`` calls and one ``allocate`` alone, per round.

Round 1 (registration of every sampled node, the equal split) is timed apart from the mean of
the later rounds. Each figure is the median of ``--repeat`` runs of the rounds. The machine is
shared: read the ratios within one run, not the absolute times across runs.

``--flower 100,1000`` adds rows from a real Flower round: ``flwr.simulation.run_simulation`` in this
process (Ray backend, one CPU per client actor) with N SuperNodes whose ClientApp trains on a
small numpy array through ``@telemetry_train`` + ``quota_data`` and replies with a two-float
model. One ServerApp runs ``FedAvg(fraction_train=0.1)`` for ``--rounds`` rounds, then
``AdaptiveStrategy`` around the same FedAvg. :class:`MethodTimer` times, per round, the
strategy's ``configure_train`` + ``aggregate_train`` and the round's wall time (``configure_train``
entered to ``aggregate_train`` returned, the clients' round trip included); around the adaptive
strategy a second timer on the inner FedAvg gives the plugin's own time (outer − inner).

Usage: ``python -m experiments.scale`` (``--quick``: the two smaller rows, what the test runs;
``--flower 100,1000``: the Flower simulation rows, minutes each, never run by the tests).
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import time
from typing import Sequence

import numpy as np
import pandas as pd

from flwr_adaptive import keys
from flwr_adaptive.clients.telemetry import quota_data, telemetry_train
from flwr_adaptive.controller import AllocationController, Report
from flwr_adaptive.strategies import AdaptiveStrategy

from experiments.cross_device import _Grid, _message_identity

SIZES = ((100, 1_000), (1_000, 10_000), (10_000, 100_000))  # (sampled nodes, population)


def _replies(messages, slowdown: dict[int, float]):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    out = []
    for m in messages:
        node = m.metadata.dst_node_id
        config = next(iter(m.content.config_records.values()), {})
        samples = int(config.get(keys.QUOTA, 64))
        t = 0.002 * samples * slowdown[node]
        metrics = {keys.SAMPLES: samples, keys.TIME_S: t, keys.CPU_TIME_S: t, keys.WALL_TIME_S: t,
                   keys.ENERGY_J: -1.0, keys.DATA_SIZE: -1, keys.PARTITION_ID: node % 10**9,
                   keys.QUOTA_CAPPED: 0, keys.IDLE_W: -1.0, keys.VIRTUAL_CLOCK: 1, "num-examples": samples}
        out.append(Message(RecordDict({"arrays": ArrayRecord([np.zeros(2, dtype=np.float32)]),
                                       "metrics": MetricRecord(metrics)}), reply_to=m))
    return out


def _rounds(make, sampled: int, population: int, rounds: int, seed: int, clock=time.perf_counter) -> list[float]:
    """Seconds of configure_train + aggregate_train in each round (replies built untimed), on ``clock``."""
    from flwr.app import ArrayRecord, ConfigRecord

    node_ids = [10**9 + i for i in range(population)]
    slowdown = dict(zip(node_ids, np.exp(np.random.default_rng(seed).standard_normal(population)).tolist()))
    grid = _Grid(node_ids)
    arrays, config = ArrayRecord([np.zeros(2, dtype=np.float32)]), ConfigRecord({})
    strategy = make(sampled / population)
    random.seed(seed)
    times = []
    for rnd in range(1, rounds + 1):
        gc.collect()
        t0 = clock()
        msgs = list(strategy.configure_train(rnd, arrays, config, grid))
        t1 = clock()
        replies = _replies(msgs, slowdown)
        t2 = clock()
        strategy.aggregate_train(rnd, replies)
        t3 = clock()
        times.append((t1 - t0) + (t3 - t2))
    return times


def _fedavg(fraction: float):
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(fraction_train=fraction, fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=1)


def _controller_rounds(sampled: int, population: int, rounds: int, seed: int, clock=time.perf_counter) -> list[float]:
    rng = np.random.default_rng(seed)
    slowdown = np.exp(rng.standard_normal(population))
    ctrl = AllocationController.from_policy("time", 64 * sampled)
    times = []
    for _ in range(rounds):
        ids = rng.choice(population, sampled, replace=False).tolist()
        t0 = clock()
        quotas = ctrl.allocate(ids)
        for p in ids:
            ctrl.observe(p, Report(time_s=float(0.002 * quotas[p] * slowdown[p]) or 1e-9, samples=max(quotas[p], 1)))
        times.append(clock() - t0)
    return times


def measure(sampled: int, population: int, rounds: int = 4, repeat: int = 3, seed: int = 0,
            clock=time.perf_counter) -> dict:
    """One row: FedAvg vs the adaptive strategy at ``sampled`` of ``population`` nodes.

    ``clock``: wall time by default (what a server waits); ``time.process_time`` counts this process's
    CPU only, so a ratio within one run is not moved by other processes sharing the cores.
    """
    def adaptive(fraction: float) -> AdaptiveStrategy:
        # trust=False: fabricated replies carry no delivery stamps to weigh
        return AdaptiveStrategy(_fedavg(fraction), budget=64 * sampled, policy="time", trust=False)

    runs = {"fedavg": [], "adaptive": [], "controller": []}
    with _message_identity():
        for r in range(repeat):
            runs["fedavg"].append(_rounds(_fedavg, sampled, population, rounds, seed + r, clock))
            runs["adaptive"].append(_rounds(adaptive, sampled, population, rounds, seed + r, clock))
            runs["controller"].append(_controller_rounds(sampled, population, rounds, seed + r, clock))
    first = {k: float(np.median([t[0] for t in v])) for k, v in runs.items()}
    later = {k: float(np.median([np.mean(t[1:]) for t in v])) for k, v in runs.items()}
    own = later["adaptive"] - later["fedavg"]
    return {"sampled": sampled, "population": population,
            "fedavg_ms": 1e3 * later["fedavg"], "adaptive_ms": 1e3 * later["adaptive"], "own_ms": 1e3 * own,
            "own_us_per_node": 1e6 * own / sampled, "own_share": own / later["adaptive"],
            "controller_ms": 1e3 * later["controller"],
            "round1_fedavg_ms": 1e3 * first["fedavg"], "round1_adaptive_ms": 1e3 * first["adaptive"]}


def format_table(df: pd.DataFrame) -> str:
    lines = ["Strategy cost per round (wall clock, driven directly, two-float model; rounds 2+ averaged)",
             "| sampled / population | fedavg ms | adaptive ms | own ms | own µs/node | own share | controller ms "
             "| round 1: fedavg / adaptive ms |", "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.sampled:,} / {r.population:,} | {r.fedavg_ms:.1f} | {r.adaptive_ms:.1f} | {r.own_ms:.1f} "
                     f"| {r.own_us_per_node:.0f} | {r.own_share:.0%} | {r.controller_ms:.2f} "
                     f"| {r.round1_fedavg_ms:.0f} / {r.round1_adaptive_ms:.0f} |")
    return "\n".join(lines)


class MethodTimer:
    """Per-round wall seconds spent in one strategy object's ``configure_train`` + ``aggregate_train``.

    Wraps the two methods on the instance (the class is untouched), so a wrapper strategy that calls
    ``self.strategy.configure_train`` reaches the inner timer too: time the wrapper and its inner
    strategy with one timer each, and the difference is the wrapper's own. ``configure_train``'s
    messages are listed inside the timed call (a generator would otherwise run untimed).

    Attributes
    ----------
    seconds : dict[int, float]
        Round → seconds inside the two methods.
    entered, returned : dict[int, float]
        Round → ``time.perf_counter()`` when ``configure_train`` was first entered and
        ``aggregate_train`` last returned; their difference is the round's wall time.
    """

    def __init__(self, strategy, clock=time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[int, float] = {}
        self.entered: dict[int, float] = {}
        self.returned: dict[int, float] = {}
        strategy.configure_train = self._timed(strategy.configure_train, listed=True)
        strategy.aggregate_train = self._timed(strategy.aggregate_train, listed=False)

    def _timed(self, method, listed: bool):
        @functools.wraps(method)
        def call(server_round, *args, **kwargs):
            t0 = self.clock()
            if listed:
                self.entered.setdefault(server_round, t0)
            try:
                out = method(server_round, *args, **kwargs)
                return list(out) if listed else out
            finally:
                t1 = self.clock()
                self.seconds[server_round] = self.seconds.get(server_round, 0.0) + (t1 - t0)
                if not listed:
                    self.returned[server_round] = t1
        return call

    def round_wall(self, server_round: int) -> float:
        """Seconds from ``configure_train`` entered to ``aggregate_train`` returned in ``server_round``."""
        return self.returned[server_round] - self.entered[server_round]


def _flower_apps(num_nodes: int, rounds: int, fraction: float, timers: dict):
    """A ServerApp running FedAvg, then AdaptiveStrategy(FedAvg), and a tiny telemetry ClientApp."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    client = ClientApp()

    @client.train()
    @telemetry_train()
    def train(msg, context):
        data = quota_data(np.arange(256, dtype=np.float32))
        model = np.full(2, float(np.mean(data)) if len(data) else 0.0, dtype=np.float32)
        return Message(RecordDict({"arrays": ArrayRecord([model]),
                                   "metrics": MetricRecord({"num-examples": len(data)})}), reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid, context):
        while len(list(grid.get_node_ids())) < num_nodes:
            time.sleep(0.1)
        sampled = int(num_nodes * fraction)
        for name in ("fedavg", "adaptive"):
            fedavg = _fedavg(fraction)
            fedavg.min_available_nodes = num_nodes
            if name == "fedavg":
                strategy, timers[name] = fedavg, (MethodTimer(fedavg), None)
            else:
                strategy = AdaptiveStrategy(fedavg, budget=64 * sampled, policy="time")
                timers[name] = (MethodTimer(strategy), MethodTimer(fedavg))
            strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(2, dtype=np.float32)]),
                           num_rounds=rounds, timeout=600.0)

    return server, client


def measure_flower(num_nodes: int, rounds: int = 4, fraction: float = 0.1) -> dict:
    """One row from Flower's simulation engine: per-round wall and strategy times at ``num_nodes``."""
    from flwr.simulation import run_simulation

    timers: dict = {}
    server, client = _flower_apps(num_nodes, rounds, fraction, timers)
    t0 = time.perf_counter()
    run_simulation(server, client, num_supernodes=num_nodes, backend_config={"client_resources": {"num_cpus": 1}})
    total = time.perf_counter() - t0
    if set(timers) != {"fedavg", "adaptive"} or len(timers["adaptive"][0].returned) < rounds:
        raise RuntimeError(f"the Flower simulation at {num_nodes} nodes did not finish its rounds "
                           f"(timed: {sorted(timers)}); rerun with fewer nodes or look at Flower's log above")
    later = range(2, rounds + 1)
    fed, _ = timers["fedavg"]
    outer, inner = timers["adaptive"]

    def mean(values):
        return 1e3 * float(np.mean(list(values)))

    own = [outer.seconds[r] - inner.seconds[r] for r in later]
    sampled = int(num_nodes * fraction)
    return {"nodes": num_nodes, "sampled": sampled,
            "fedavg_round_ms": mean(fed.round_wall(r) for r in later),
            "fedavg_strategy_ms": mean(fed.seconds[r] for r in later),
            "adaptive_round_ms": mean(outer.round_wall(r) for r in later),
            "adaptive_strategy_ms": mean(outer.seconds[r] for r in later),
            "own_ms": mean(own), "own_us_per_node": 1e6 * float(np.mean(own)) / sampled,
            "own_share_of_round": float(np.mean(own)) / float(np.mean([outer.round_wall(r) for r in later])),
            "round1_fedavg_ms": 1e3 * fed.round_wall(1), "round1_adaptive_ms": 1e3 * outer.round_wall(1),
            "round1_own_ms": 1e3 * (outer.seconds[1] - inner.seconds[1]), "simulation_s": total}


def format_flower_table(df: pd.DataFrame) -> str:
    lines = ["Flower simulation (wall clock; run_simulation in-process, Ray, fraction_train=0.1; rounds 2+ averaged)",
             "| nodes (sampled) | FedAvg round ms | FedAvg strategy ms | adaptive round ms | adaptive strategy ms "
             "| own ms | own µs/node | own share of round | round 1: FedAvg / adaptive ms (own) | simulation s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.nodes:,} ({r.sampled:,}) | {r.fedavg_round_ms:.0f} | {r.fedavg_strategy_ms:.1f} "
                     f"| {r.adaptive_round_ms:.0f} | {r.adaptive_strategy_ms:.1f} | {r.own_ms:.1f} "
                     f"| {r.own_us_per_node:.0f} | {r.own_share_of_round:.1%} "
                     f"| {r.round1_fedavg_ms:.0f} / {r.round1_adaptive_ms:.0f} ({r.round1_own_ms:.0f}) "
                     f"| {r.simulation_s:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the two smaller sizes, 3 rounds, 1 repeat")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--flower", default="", metavar="N[,N...]",
                    help="also run Flower's simulation engine at these node counts (e.g. 100,1000; minutes each)")
    ap.add_argument("--no-direct", action="store_true", help="skip the directly driven table (with --flower)")
    args = ap.parse_args(argv)
    if args.rounds < 2 or args.repeat < 1:
        ap.error("--rounds must be >= 2 and --repeat >= 1")
    try:
        flower_nodes = [int(n) for n in args.flower.split(",") if n.strip()]
    except ValueError:
        ap.error(f"--flower takes node counts separated by commas, e.g. 100,1000; got {args.flower!r}")
    if args.no_direct and not flower_nodes:
        ap.error("--no-direct leaves nothing to run: add --flower N[,N...] or drop --no-direct")
    if any(n < 10 for n in flower_nodes):
        ap.error(f"--flower node counts must be >= 10 (a tenth of them is sampled); got {flower_nodes}")
    sizes, rounds, repeat = (SIZES[:2], 3, 1) if args.quick else (SIZES, args.rounds, args.repeat)
    import logging

    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # one INFO line per round and node set would be the benchmark
    try:
        df = pd.DataFrame([] if args.no_direct else [measure(s, p, rounds, repeat) for s, p in sizes])
        if not args.no_direct:
            print(format_table(df), flush=True)
        if flower_nodes:
            flower = pd.DataFrame([measure_flower(n, max(args.rounds, 2)) for n in flower_nodes])
            print(format_flower_table(flower))
            df.attrs["flower"] = flower
    finally:
        flwr_logger.setLevel(level)
    return df


if __name__ == "__main__":
    main()
