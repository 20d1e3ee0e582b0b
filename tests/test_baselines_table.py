"""The baselines' comparison table (``experiments.baselines.baseline_table``): time and energy to
Equal's loss at 80 % of the rounds, on hand-made histories; Equal is needed for the target."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def _summary(losses, wall=1.0):
    return {"rounds": [{"round": r, "loss": v, "accuracy": 1.0 - v / 10} for r, v in enumerate(losses)], "wall_s": wall}


def _history(policy, makespans, energies, clients):
    import pandas as pd

    return pd.DataFrame({"round": range(1, len(makespans) + 1), "policy": policy, "makespan_s": makespans,
                         "energy_j": energies, "clients": clients})


def test_baseline_table_measures_time_and_energy_to_equals_loss_at_80_percent():
    import pandas as pd

    from experiments.baselines import baseline_table

    # Prepare: 5 rounds; Equal's loss after round 4 (80 %) is 0.6. Oort reaches it in round 2,
    # excluding devices 2 and 3 of 4 (idle 1 W and 3 W) in every round; FedAsync never does.
    summaries = {"equal": _summary([2.0, 1.0, 0.8, 0.7, 0.6, 0.5]),
                 "oort": _summary([2.0, 0.9, 0.55, 0.5, 0.45, 0.4]),
                 "fedasync": _summary([2.0, 1.5, 1.2, 1.0, 0.9, 0.8])}
    histories = {"equal": _history("equal", [2.0] * 5, [10.0] * 5, [4] * 5),
                 "oort": _history("oort", [1.0] * 5, [4.0] * 5, [2] * 5),
                 "fedasync": _history("fedasync", [0.5] * 5, [3.0] * 5, [8] * 5)}
    oort_rows = pd.DataFrame({"round": [r for r in range(1, 6) for _ in (0, 1)], "partition_id": [0, 1] * 5,
                              "status": "ok"})
    async_rows = pd.DataFrame({"round": [1, 1, 1], "partition_id": [0, 1, 2], "status": ["ok", "ok", "error"]})
    clients = {"equal": None, "oort": oort_rows, "fedasync": async_rows}

    # Execute
    table, target, t_round = baseline_table(histories, clients, summaries, rounds=5, n_clients=4,
                                            idle_w={0: 5.0, 1: 5.0, 2: 1.0, 3: 3.0})

    # Assert
    assert (t_round, target) == (4, 0.6)
    assert table.loc["Equal", "time to target s (virtual)"] == 8.0
    assert table.loc["Equal", "energy to target J (virtual)"] == 40.0
    assert table.loc["Oort-like", "rounds to target"] == 2
    assert table.loc["Oort-like", "time to target s (virtual)"] == 2.0
    assert table.loc["Oort-like", "energy to target J (virtual)"] == 8.0
    assert table.loc["Oort-like", "energy to target, excluded idle incl. J"] == 8.0 + 2 * (1.0 + 3.0) * 1.0
    assert table.loc["Oort-like", "excluded / round"] == 2.0 and table.loc["Oort-like", "never selected"] == 2
    assert np.isnan(table.loc["FedAsync", "time to target s (virtual)"])
    assert table.loc["FedAsync", "total time s (virtual)"] == 2.5
    assert table.loc["FedAsync", "never selected"] == 2  # device 3 never ran, device 2 only failed
    assert table.loc["Oort-like", "final holdout loss"] == 0.4


def test_baseline_table_needs_equal_for_the_target():
    from experiments.baselines import baseline_table

    with pytest.raises(ValueError, match="include 'equal'"):
        baseline_table({}, {}, {"oort": _summary([1.0])}, rounds=1, n_clients=1)
