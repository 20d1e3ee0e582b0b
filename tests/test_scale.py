"""Cross-device scale: the cautious prior, the cross-device scenario and the overhead benchmark."""

from __future__ import annotations

import pytest

from flwr_adaptive.strategies.core import AdaptiveCore
from flwr_adaptive.strategies.reports import ClientReport


def _report(node, part, quota, seconds_per_sample):
    return ClientReport(node, part, quota, quota, quota * seconds_per_sample, 0.0, 0.0, None, None, False,
                        None, True)


def test_first_seen_nodes_are_capped_at_the_share_of_the_cautious_quantile():
    # Prepare: four nodes measured at 1, 1, 2 and 4 ms per sample
    core = AdaptiveCore(1000, "time", deadband=0.0, allow_cycling=True)
    core.trust = None
    costs = {1: 0.001, 2: 0.001, 3: 0.002, 4: 0.004}
    q1 = core.quotas_for(1, list(costs))
    core.begin_round(1, q1)
    reports = [_report(n, n, q, costs[n]) for n, q in q1.items()]
    core.observe_replies(1, reports)
    core.end_round(1, reports, {})
    # Execute: round 2 trains two measured nodes (1 and 4) and three new ones
    q2 = core.quotas_for(2, [1, 4, 5, 6, 7])
    # Assert: k = 3 newcomers are priced at the 75th percentile of the recent costs (2.5 ms):
    # cap = 1000 / (2.5 ms × (1/1 ms + 1/4 ms + 3/2.5 ms)) = 163; the measured nodes share the rest 4:1
    assert [q2[n] for n in (5, 6, 7)] == [163, 163, 163]
    assert sum(q2.values()) == 1000 and q2[1] == pytest.approx(4 * q2[4], abs=1)


def test_a_single_newcomer_gets_the_median_share_as_before():
    core = AdaptiveCore(300, "time", deadband=0.0, allow_cycling=True)
    core.trust = None
    q1 = core.quotas_for(1, [1, 2])
    core.begin_round(1, q1)
    reports = [_report(1, 1, q1[1], 0.001), _report(2, 2, q1[2], 0.001)]
    core.observe_replies(1, reports)
    core.end_round(1, reports, {})
    assert core.quotas_for(2, [1, 2, 3]) == {1: 100, 2: 100, 3: 100}


def test_cross_device_quick_form_cautious_prior_beats_the_median_prior_and_loses_no_sample(capsys):
    from experiments import cross_device

    df = cross_device.main(["--quick", "--populations", "lognormal", "--fractions", "0.1",
                            "--policies", "equal", "time", "time-median-prior"])
    out = capsys.readouterr().out
    by = df.set_index("policy")["round_s"]
    # Assert: adaptation survives F = 0.1, and the cautious prior is what keeps first-seen nodes in step
    assert by["Time-only"] < by["Time-only, median prior"] < by["Equal"]
    assert (df["not_processed"] == 0).all()
    assert "| lognormal | 0.1 | Time-only |" in out


def test_scale_quick_form_prints_one_row_per_size(capsys):
    from experiments import scale

    row = scale.measure(100, 1000, rounds=2, repeat=1)
    assert row["own_ms"] == pytest.approx(row["adaptive_ms"] - row["fedavg_ms"])
    assert row["adaptive_ms"] > 0 and row["fedavg_ms"] > 0 and row["controller_ms"] > 0
    print(scale.format_table(__import__("pandas").DataFrame([row])))
    assert "| 100 / 1,000 |" in capsys.readouterr().out
