"""The in-process runner's non-IID parts (``experiments.inprocess``): a run budgeted by time stops at
the first round past it or at its target, a run is the same whether it is its process's first or
not, Dirichlet partitions are skewed, disjoint and cover the data, the per-group metrics recombine
to the holdout, proximal training is plain training at mu = 0 and stays nearer the global model
otherwise."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_a_budgeted_run_stops_at_the_first_round_past_its_time_or_at_its_target():
    # Prepare: weather, no training (modelled clock: the time does not depend on the model), Equal's 3 rounds
    import dataclasses

    from experiments.inprocess import RunSpec, run_pma
    from experiments.reproduce import scenario_profiles

    base = RunSpec("equal", "weather", scenario_profiles("wide", 0), rounds=3, budget=440, per_sample_s=1e-3,
                   train=False)
    equal = run_pma(base).rounds
    budget = float(equal["virtual_time_s"].iloc[-1])
    # Act: Time-only to Equal's time (cap 20 rounds); the same with a target the untrained model already meets.
    # (The caps were 12 rounds; with the wide fleet's fastest devices believed at the plausible range's edge
    # rather than the median, Time-only's and FedAsync's rounds are shorter and reached the cap first.)
    timed = run_pma(dataclasses.replace(base, policy="time", rounds=20, min_rounds=3, time_budget_s=budget)).rounds
    target = run_pma(dataclasses.replace(base, policy="time", rounds=12, min_rounds=3, time_budget_s=budget,
                                         stop_target=1e9, stop_higher=False)).rounds
    short = run_pma(dataclasses.replace(base, policy="time", rounds=4, min_rounds=3, time_budget_s=100 * budget)).rounds
    # FedAsync writes a round-equivalent's row after its evaluation: it stops on its time only, keeping every row
    fedasync = run_pma(dataclasses.replace(base, policy="fedasync", rounds=20, min_rounds=3, time_budget_s=budget,
                                           stop_target=1e9, stop_higher=False)).rounds
    # Assert: past Equal's rounds (its rounds are shorter), ended by the first round at or beyond the budget
    t = timed["virtual_time_s"].to_numpy()
    assert (equal["stop"] == "rounds").all() and (timed["stop"] == "time budget").all()
    assert len(timed) - 1 > 3 and t[-1] >= budget > t[-2]
    assert (target["stop"] == "target").all() and target["round"].max() == 3  # not before min_rounds
    assert (short["stop"] == "cap").all() and short["round"].max() == 4
    assert (fedasync["stop"] == "time budget").all() and fedasync["virtual_time_s"].iloc[-1] >= budget
    with pytest.raises(ValueError, match="min_rounds"):
        dataclasses.replace(base, min_rounds=4)
    with pytest.raises(ValueError, match="time_budget_s"):
        dataclasses.replace(base, time_budget_s=0.0)


def test_a_run_is_the_same_as_the_process_first_run_and_after_another():
    # Prepare: a process that has made no wrapped training call yet (a fresh reproduce worker), Time-only on the
    # modelled clock without training, whose round-2 split rests on every node's round-1 cost
    from experiments.inprocess import RunSpec, run_pma
    from experiments.reproduce import scenario_profiles
    from flwr_adaptive.clients import telemetry

    spec = RunSpec("time", "weather", scenario_profiles("testbed", 0), rounds=3, budget=440, per_sample_s=1e-3,
                   train=False)
    saved = list(telemetry._WARM)
    telemetry._WARM.clear()
    try:
        # Act: the same run first in the process and again after it
        first, second = run_pma(spec).clients, run_pma(spec).clients
    finally:
        telemetry._WARM[:] = saved
    # Assert: no node of the first run was taken as a cold start (unobserved), so every round's split is the same
    assert (first["status"] != "cold-start").all()
    assert first["quota"].tolist() == second["quota"].tolist()
    assert first["quota"].nunique() > 1  # the split moved: the round-1 costs were observed


def test_a_measured_run_warms_its_task_up_before_it_starts_warm(monkeypatch):
    # Prepare: record the untimed warm-up (torch's lazy set-up would otherwise be node 0's round-1 cost)
    import dataclasses

    from experiments import inprocess
    from experiments.reproduce import scenario_profiles

    warmed: list[str] = []
    monkeypatch.setattr(inprocess, "_warm_up", warmed.append)
    spec = inprocess.RunSpec("equal", "weather", scenario_profiles("testbed", 0), rounds=1, budget=110,
                             per_sample_s=1e-3, train=False)
    # Act: a modelled run, then the same on the measured clock
    inprocess.run_pma(spec)
    inprocess.run_pma(dataclasses.replace(spec, clock="measured", per_sample_s=None, train=True))
    # Assert: only the measured run warmed its task up
    assert warmed == ["weather"]


def test_dirichlet_partitions_are_skewed_disjoint_and_cover_the_training_data():
    # Prepare: weather's label is the month of the target hour
    from experiments.inprocess import partitions

    def skew(parts):  # mean total-variation distance of each partition's label mix from the pooled mix
        labels = np.concatenate([p.labels for p in parts])
        pooled = np.bincount(labels, minlength=12) / len(labels)
        return np.mean([0.5 * np.abs(np.bincount(p.labels, minlength=12) / len(p) - pooled).sum() for p in parts])

    iid, _ = partitions("weather", 11, 0)
    d03, _ = partitions("weather", 11, 0, "dirichlet", 0.3)
    d01, _ = partitions("weather", 11, 0, "dirichlet", 0.1)
    # Assert: more skew at smaller α, none to speak of for IID; the same samples, each in one partition
    assert skew(iid) < 0.1 < skew(d03) < skew(d01)
    ids = np.concatenate([p.ids for p in d03])
    assert len(ids) == len(np.unique(ids)) == sum(len(p) for p in iid)
    assert partitions("weather", 11, 1, "dirichlet", 0.3)[0][0].ids.tolist() != d03[0].ids.tolist()


def test_group_metrics_recombine_to_the_holdout_and_bound_the_worst_client():
    # Prepare: weather, a fresh model, the holdout split by month
    from experiments.inprocess import group_metrics, holdout_groups, load_task, partitions

    task = load_task("weather")
    model = task.make_model(seed=0)
    parts, holdout = partitions("weather", 11, 0, "dirichlet", 0.3)
    groups = holdout_groups("weather")
    # Act
    overall, worst = group_metrics(task, model, groups, parts)
    whole = task.evaluate(model, holdout)
    per_month = [task.evaluate(model, sub)["mse"] for _, sub in groups]
    # Assert: the month-by-month pass gives the whole holdout's figures; a client's error is a mix of months'
    assert overall["mse"] == pytest.approx(whole["mse"], rel=1e-5)
    assert overall["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert min(per_month) <= worst <= max(per_month)


def test_proximal_training_is_plain_training_at_mu_zero_and_stays_nearer_the_global_model():
    import torch

    from experiments.inprocess import load_task, partitions, train_proximal

    task = load_task("weather")
    data = partitions("weather", 11, 0)[0][0]
    idx = np.arange(min(256, len(data)))

    def trained(fn, *extra):
        model = task.make_model(seed=0)
        fn(task, model, data, idx, *extra) if extra else task.train(model, data, idx)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    start = torch.cat([p.detach().flatten() for p in task.make_model(seed=0).parameters()])
    plain, zero, prox = trained(None), trained(train_proximal, 0.0), trained(train_proximal, 10.0)
    # Assert
    assert torch.allclose(plain, zero)
    assert (prox - start).norm() < (plain - start).norm()
