"""What cost trust's plausibility rule costs an honest fleet's round: ``python -m experiments.trust_cost``.

Per fleet (the results page's scenarios and seeds), the devices' true per-sample costs are judged by
rule 2 of :class:`flwr_adaptive.strategies.CostTrust` (each claim against the median of the others,
the ``k`` fastest as one group against the median of the slower rest); Time-only's split is then
proportional to the believed speeds and its round lasts ``max(q_i · cost_i)``. Printed: the fastest
device's speed over the fleet's median, how many honest devices are held back, and that round over
the optimum (every claim believed), for the default rule and the settings given with ``--settings``.
Exact arithmetic on the devices' slowdowns (no training, no jitter): the per-round price the
results page's trust part measures with training, of the modelled clock.
"""

from __future__ import annotations

import argparse

import numpy as np

from experiments.reproduce_runs import SCENARIOS, scenario_profiles
from flwr_adaptive.strategies import CostTrust
from flwr_adaptive.strategies.trust import _references, _tiered


def believed_costs(costs: np.ndarray, trust: CostTrust) -> np.ndarray:
    """The per-sample costs rule 2 believes for honest claims ``costs`` (one round, every node)."""
    references = _references(costs, trust.plausible_range, max(int(trust.max_group * len(costs)), 1))
    believed = _tiered(costs, references, trust.plausible_range, trust.absurd_range)
    return np.where(np.isfinite(believed), believed, costs)


def round_over_optimum(costs: np.ndarray, believed: np.ndarray) -> float:
    """Time-only's round on the believed costs over its round on the true ones (shares ∝ 1/cost)."""
    shares = (1 / believed) / np.sum(1 / believed)
    return float(np.max(shares * costs) * np.sum(1 / costs))


def table(scenario: str, seeds: int, settings: dict[str, CostTrust]) -> list[str]:
    head = ["seed", "fastest × median"] + [f"{name}: held, round × optimum" for name in settings]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for seed in range(seeds):
        costs = np.array([p.slowdown for p in scenario_profiles(scenario, seed)])
        cells = [str(seed), f"{np.median(costs) / costs.min():.2f}"]
        for trust in settings.values():
            believed = believed_costs(costs, trust)
            cells.append(f"{int(np.sum(believed != costs))}, {round_over_optimum(costs, believed):.3f}")
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
    for spec in filter(None, (s.strip() for s in args.settings.split(";"))):
        options = {k.strip(): float(v) for k, v in (kv.split("=") for kv in spec.split(","))}
        if "plausible_range" in options and "absurd_range" not in options:
            options["absurd_range"] = max(CostTrust().absurd_range, options["plausible_range"])
        settings[spec] = CostTrust(**options)
    for scenario in filter(None, (s.strip() for s in args.scenarios.split(","))):
        print(f"\n{scenario} (11 devices, honest claims, Time-only's split on the believed costs)\n")
        print("\n".join(table(scenario, args.seeds, settings)))


if __name__ == "__main__":
    main()
