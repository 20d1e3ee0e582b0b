"""The deployment targets' pieces that need no deployment: the ideal round, the case list, the
SuperLink's ``--database`` (what the ``superlink-restart`` case restarts it on)."""

from __future__ import annotations

import pytest

from experiments import deploy_targets
from experiments.deployment import LocalDeployment


def test_the_ideal_round_balances_start_up_and_compute_hand_computed():
    # 4 nodes at slowdown 1, 1, 2, 4, 0.1 s per sample, 600 samples: Σ 1/(c·k) = 10 + 10 + 5 + 2.5
    assert deploy_targets.ideal_round_s(600, 0.1, (1.0, 1.0, 2.0, 4.0)) == pytest.approx(600 / 27.5)
    # a 1 s × slowdown start-up: (600 + 4 · 1 / 0.1) / 27.5
    assert deploy_targets.ideal_round_s(600, 0.1, (1.0, 1.0, 2.0, 4.0), 1.0) == pytest.approx(640 / 27.5)


def test_the_superlink_restart_case_is_listed_and_an_unknown_case_is_refused(capsys):
    assert "superlink-restart" in deploy_targets.CASES
    with pytest.raises(SystemExit):
        deploy_targets.main(["--cases", "superlink-crash"])
    assert "unknown cases ['superlink-crash']" in capsys.readouterr().err


def test_a_deployment_with_a_database_runs_its_superlink_on_it(tmp_path):
    dep = LocalDeployment(0, workdir=tmp_path, database=True)
    cmd = dep.superlink_command()
    assert cmd[cmd.index("--database") + 1] == str(tmp_path / "superlink.db")
    assert "--database" not in LocalDeployment(0, workdir=tmp_path / "mem").superlink_command()
    with pytest.raises(RuntimeError, match="not running"):
        dep.restart_superlink()  # never started
