"""Plots of a Flower comparison: per-round makespan, energy, busy-time CV and the last round's quotas.

Usage: ``python -m experiments.plots [results/flower]`` (``./run.sh`` calls it at the end).

Reads the ``history-<policy>.csv`` / ``history-<policy>-clients.csv`` files that
``experiments.compare`` writes and saves ``comparison.png`` next to them. All times and energies
are on the clock the histories name (the virtual clock in the emulated testbed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from flwr_adaptive.devices import get_testbed
from flwr_adaptive.strategies.registry import LABELS


def load_histories(folder: Path) -> dict[str, tuple[pd.DataFrame, pd.DataFrame | None]]:
    """``{policy: (per-round history, per-client history or None)}`` found in ``folder``."""
    found = {}
    for path in sorted(folder.glob("history-*.csv")):
        if path.stem.endswith("-clients"):
            continue
        policy = path.stem[len("history-"):]
        clients = folder / f"history-{policy}-clients.csv"
        found[policy] = (pd.read_csv(path), pd.read_csv(clients) if clients.exists() else None)
    return found


def plot_comparison(folder: str | Path) -> Path:
    """Draw the four panels for every policy in ``folder``; returns the PNG's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    histories = load_histories(folder)
    if not histories:
        raise FileNotFoundError(f"no history-*.csv in {folder}: run `python -m experiments.compare` first")
    clock = next(iter(histories.values()))[0].get("clock", pd.Series(["?"])).iloc[0]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (ax_time, ax_energy), (ax_cv, ax_quota) = axes
    width = 0.8 / len(histories)
    for k, (policy, (rounds, clients)) in enumerate(histories.items()):
        label = LABELS.get(policy, policy)
        ax_time.plot(rounds["round"], rounds["makespan_s"], marker="o", label=label)
        ax_energy.plot(rounds["round"], rounds["energy_j"], marker="o", label=label)
        ax_cv.plot(rounds["round"], rounds["cv_busy"], marker="o", label=label)
        if clients is not None and len(clients):
            last = clients[clients["round"] == clients["round"].max()].sort_values("partition_id")
            ax_quota.bar(last["partition_id"] + (k - (len(histories) - 1) / 2) * width, last["quota"],
                         width=width, label=label)
    ax_time.set(title=f"Round makespan ({clock} clock)", xlabel="round", ylabel="seconds")
    ax_energy.set(title=f"Round energy, active + idle ({clock} clock)", xlabel="round", ylabel="joules")
    ax_cv.set(title="CV of busy time across clients (0 = all finish together)", xlabel="round", ylabel="CV")
    ax_quota.set(title="Last round's quota per client", ylabel="samples")
    devices = get_testbed()
    ticks = sorted(set().union(*(set(c["partition_id"]) for _, c in histories.values() if c is not None)))
    ax_quota.set_xticks(ticks, [f"{t}:{devices[int(t) % len(devices)].name}" for t in ticks], rotation=45, ha="right", fontsize=7)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = folder / "comparison.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.plots [FOLDER]``: redraw ``comparison.png`` of a comparison's results."""
    import argparse

    ap = argparse.ArgumentParser(description="Redraw comparison.png from the CSVs of a comparison run.")
    ap.add_argument("folder", nargs="?", default=str(Path(__file__).resolve().parent.parent / "results" / "flower"),
                    help="results folder of `python -m experiments.compare` (default: results/flower)")
    args = ap.parse_args(argv)
    if not Path(args.folder).is_dir():
        ap.error(f"{args.folder} is not a folder: run `python -m experiments.compare` (or ./run.sh) first")
    print(f"plot: {plot_comparison(args.folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
