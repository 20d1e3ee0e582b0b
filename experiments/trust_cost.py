"""What cost trust's plausibility rule costs an honest fleet's round: ``python -m experiments.trust_cost``.

Per fleet (the results page's scenarios and seeds), the devices' true per-sample costs are claimed in
one round of 100 samples each and believed by :meth:`flwr_adaptive.strategies.CostTrust.believe`
(rule 2: each claim against the median of the others, the ``k`` fastest as one group against the
median of the slower rest; a first round, so rule 3 has no estimate to cap by); Time-only's split is then
proportional to the believed speeds and its round lasts ``max(q_i · cost_i)``. Printed: the fastest
device's speed over the fleet's median, how many honest devices are held back, and that round over
the optimum (every claim believed), for the default rule and the settings given with ``--settings``.
Exact arithmetic on the devices' slowdowns (no training, no jitter): the per-round price the
results page's trust part measures with training, of the modelled clock.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from experiments.reproduce_runs import SCENARIOS, scenario_profiles
from flwr_adaptive.strategies import CostTrust
from flwr_adaptive.strategies.reports import ClientReport

_SAMPLES = 100


def believed_costs(costs: np.ndarray, trust: CostTrust) -> np.ndarray:
    """The per-sample costs ``trust`` believes for honest claims ``costs`` (one first round, every node,
    on the virtual clock)."""
    claims = [ClientReport(node_id=i, partition_id=i, quota=_SAMPLES, samples=_SAMPLES, time_s=float(c) * _SAMPLES,
                           cpu_time_s=float(c) * _SAMPLES, wall_time_s=float(c) * _SAMPLES, energy_j=None,
                           data_size=None, capped=False, idle_w=None, virtual_clock=True)
              for i, c in enumerate(costs)]
    believed = trust.believe(1, claims)
    return np.array([believed[i].time_s / _SAMPLES for i in range(len(costs))])


def round_over_optimum(costs: np.ndarray, believed: np.ndarray) -> float:
    """Time-only's round on the believed costs over its round on the true ones (shares ∝ 1/cost)."""
    shares = (1 / believed) / np.sum(1 / believed)
    return float(np.max(shares * costs) * np.sum(1 / costs))


def table(scenario: str, seeds: int, settings: dict[str, CostTrust]) -> list[str]:
    """The markdown table of one scenario (the testbed is one fleet whatever the seed: one row)."""
    seeds = 1 if scenario == "testbed" else seeds
    head = ["seed", "fastest × median"] + [f"{name}: held, round × optimum" for name in settings]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for seed in range(seeds):
        costs = np.array([p.slowdown for p in scenario_profiles(scenario, seed)])
        cells = [str(seed), f"{np.median(costs) / costs.min():.2f}"]
        for trust in settings.values():
            believed = believed_costs(costs, dataclasses.replace(trust))  # a fresh copy: no warnings' memory
            held = int(np.sum(~np.isclose(believed, costs, rtol=1e-9)))
            cells.append(f"{held}, {round_over_optimum(costs, believed):.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: testbed, wide")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--settings", default="max_group=0.2;plausible_range=6",
                    help="';'-separated CostTrust settings beside the default, each 'name=value[,name=value]'")
    args = ap.parse_args(argv)
    settings = {"default": CostTrust()}
    ints = {f.name for f in dataclasses.fields(CostTrust) if f.type in (int, "int")}
    for spec in filter(None, (s.strip() for s in args.settings.split(";"))):
        pairs = [(k.strip(), v) for k, v in (kv.split("=") for kv in spec.split(","))]
        options = {k: (int if k in ints else float)(v) for k, v in pairs}
        if "plausible_range" in options and "absurd_range" not in options:
            options["absurd_range"] = max(CostTrust().absurd_range, options["plausible_range"])
        settings[spec] = CostTrust(**options)
    for scenario in filter(None, (s.strip() for s in args.scenarios.split(","))):
        print(f"\n{scenario} (11 devices, honest claims, Time-only's split on the believed costs)\n")
        print("\n".join(table(scenario, args.seeds, settings)))


if __name__ == "__main__":
    main()
