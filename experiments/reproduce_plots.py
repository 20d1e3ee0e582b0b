"""The PNG plots of the results page: convergence, the w_e sweep, per-round CV (``experiments.reproduce``).

Contract
--------
Each function draws one figure from the rows or curves it is given, writes it to ``path``
(matplotlib's Agg backend, 100 dpi) and returns ``path``. It computes nothing the tables do not:
means and 95 % bands over seeds through :func:`experiments.reproduce_figures.mean_ci`.

Cost
----
Matplotlib's drawing: about a second per figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.reproduce_figures import mean_ci
from experiments.reproduce_runs import extra_controller_policies, label


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_convergence(rows: pd.DataFrame, task: str, scenarios: Sequence[str], policies: Sequence[str],
                     path: Path) -> Path:
    """Holdout loss vs virtual time and vs energy: mean over seeds per round, 95 % band of the loss."""
    plt = _plt()
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(12, 4.2 * len(scenarios)), squeeze=False)
    pma = rows[(rows["kind"] == "pma") & (rows["task"] == task)]
    for i, scenario in enumerate(scenarios):
        sub = pma[pma["scenario"] == scenario]
        for policy in policies:
            run = sub[sub["policy"] == policy]
            if run.empty:
                continue
            g = run.groupby("round")
            x_t, x_e = g["virtual_time_s"].mean(), g["virtual_energy_j"].mean()
            stats = [mean_ci(v) for _, v in g["loss"]]
            m = np.array([s[0] for s in stats])
            h = np.nan_to_num(np.array([s[1] for s in stats]))
            for ax, x in ((axes[i, 0], x_t), (axes[i, 1], x_e)):
                line, = ax.plot(x.to_numpy(), m, marker=".", label=label(policy))
                ax.fill_between(x.to_numpy(), m - h, m + h, color=line.get_color(), alpha=0.15)
        axes[i, 0].set(title=f"{task}, {scenario}: holdout loss vs virtual time", xlabel="virtual seconds (cumulative)",
                       ylabel="holdout loss")
        axes[i, 1].set(title=f"{task}, {scenario}: holdout loss vs energy", xlabel="joules, active + idle (cumulative)",
                       ylabel="holdout loss")
        for ax in axes[i]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_sweep(sweep: pd.DataFrame, scenario: str, path: Path) -> Path:
    """Total energy and makespan per w_e (mean, 95 % bars), the minimum marked, companions as lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax2 = ax.twinx()
    sub = sweep[sweep["scenario"] == scenario]
    curve = sub[sub["w_e"].notna()]
    stats = curve.groupby("w_e").agg(list)
    w = stats.index.to_numpy()
    e = [mean_ci(v) for v in stats["energy_j"]]
    t = [mean_ci(v) for v in stats["makespan_s"]]
    em, eh = np.array([x[0] for x in e]), np.nan_to_num([x[1] for x in e])
    tm, th = np.array([x[0] for x in t]), np.nan_to_num([x[1] for x in t])
    ax.errorbar(w, em, yerr=eh, marker="o", color="tab:green", capsize=3, label="total energy (left)")
    ax2.errorbar(w, tm, yerr=th, marker="s", color="tab:blue", capsize=3, alpha=0.7, label="makespan (right)")
    k = int(np.argmin(em))
    ax.scatter([w[k]], [em[k]], s=180, facecolors="none", edgecolors="red", linewidths=2, zorder=5,
               label=f"minimum energy: w_e = {w[k]:g}")
    for policy, style in (("equal", ":"), *((p, "--") for p in extra_controller_policies())):
        comp = sub[(sub["policy"] == policy) & sub["w_e"].isna()]
        if len(comp):
            ax.axhline(comp["energy_j"].mean(), linestyle=style, color="gray" if policy == "equal" else "red",
                       label=f"{label(policy)}: energy {comp['energy_j'].mean():.4g} J, makespan "
                             f"{comp['makespan_s'].mean():.3g} s")
    ax.set(xlabel="w_e (w_t = 1 − w_e)", ylabel="total energy over the run, J (virtual clock)",
           title=f"w_e sweep, {scenario} scenario (mean over seeds, 95 % interval)")
    ax2.set_ylabel("makespan over the run, s (virtual clock)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper center")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_cv(curves: dict[str, dict[str, list[list[float]]]], title: str, path: Path) -> Path:
    """Per-round CV per policy (mean over seeds, 95 % band), one panel per setting."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    for ax, (setting, by_policy) in zip(axes[0], curves.items()):
        for policy, runs in by_policy.items():
            n = min(len(r) for r in runs)
            arr = np.array([r[:n] for r in runs], dtype=float)
            stats = [mean_ci(arr[:, j]) for j in range(n)]
            m = np.array([s[0] for s in stats])
            h = np.nan_to_num([s[1] for s in stats])
            x = np.arange(1, n + 1)
            line, = ax.plot(x, m, marker="o", label=policy)
            ax.fill_between(x, m - h, m + h, color=line.get_color(), alpha=0.15)
        ax.set(title=f"{title}: {setting}", xlabel="round", ylabel="CV of compute time")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
