"""What ``experiments.reproduce`` takes in: its options are checked before anything runs, and its
scenarios' device fleets (wide vs testbed, the wide DDP ranks' lognormal slowdowns) are what the
page says they are. Hand-computed; nothing is run."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_wide_scenario_is_wider_than_the_testbed():
    # Prepare
    from experiments.reproduce import scenario_profiles

    spread = lambda ps: np.log([p.slowdown for p in ps]).std()  # noqa: E731
    # Assert: σ of log-slowdown near 1 on average over seeds, well above the testbed's; fleets differ by seed
    wide = [spread(scenario_profiles("wide", s)) for s in range(20)]
    assert 0.7 < np.mean(wide) < 1.2 and spread(scenario_profiles("testbed", 0)) < 0.6
    assert scenario_profiles("wide", 0) != scenario_profiles("wide", 1)
    assert scenario_profiles("wide", 3) == scenario_profiles("wide", 3)


def test_wide_ddp_slowdowns_are_lognormal_mid_quantiles():
    # Prepare: Φ⁻¹(1/8, 3/8, 5/8, 7/8) = ∓1.1503, ∓0.3186; exp, scaled so the fastest is 2
    from experiments.reproduce import lognormal_quartile_slowdowns

    expected = [2.0, 2.0 * math.exp(1.1503 - 0.3186), 2.0 * math.exp(1.1503 + 0.3186), 2.0 * math.exp(2 * 1.1503)]
    # Assert
    assert lognormal_quartile_slowdowns() == pytest.approx(expected, abs=0.01)


def test_options_are_checked_early():
    from experiments import reproduce

    with pytest.raises(SystemExit):
        reproduce.parse_args(["--policies", "time,energy"])  # no Equal: no target, no Δ
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--tasks", "imagenet"])
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--seeds", "1"])
    for bad in (["--noniid-rounds", "imagenet=3"], ["--noniid-rounds", "mnist=x"], ["--noniid-lr", "mnist=-1"],
                ["--noniid-round-cap", "0"], ["--noniid-rounds", "0"]):
        with pytest.raises(SystemExit):
            reproduce.parse_args(bad)
    # per-task rounds: a number for every task, or task=rounds over the defaults
    assert set(reproduce.parse_args(["--noniid-rounds", "7"]).noniid_rounds.values()) == {7}
    args = reproduce.parse_args(["--noniid-rounds", "weather=3", "--noniid-lr", "mnist=0.2"])
    default = reproduce.parse_args([])
    assert args.noniid_rounds == {**default.noniid_rounds, "weather": 3}
    assert args.noniid_lr == {**default.noniid_lr, "mnist": 0.2}


def test_hfl_and_measured_options_are_checked_early():
    from experiments import reproduce

    with pytest.raises(SystemExit):
        reproduce.parse_args(["--measured-policies", "time,energy"])  # no Equal to compare with
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--hfl-policies", "equal,oort"])  # Oort-like is not a controller policy
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--measured-seeds", "1"])
    args = reproduce.parse_args([])
    assert (args.hfl_seeds, args.hfl_rounds, args.ddp_rounds, args.measured_seeds) == (3, 10, 10, 5)
    assert args.hfl_policies == ["equal", "time", "min-energy"]


def test_the_measured_rows_default_to_measured_rows_and_are_checked_when_named():
    from experiments import noniid, reproduce

    rows = "equal-fedavg,time-norm-cap8-shrink,time-norm-cap8-eqsteps"
    assert reproduce.parse_args(["--noniid-rows", rows]).noniid_measured_rows == [
        r for r in noniid.MEASURED_ROWS if r in rows.split(",")]
    named = reproduce.parse_args(["--noniid-rows", rows, "--noniid-measured-rows", rows])
    assert named.noniid_measured_rows == rows.split(",")
    for bad in ("time-norm-cap8-shrink", "equal-fedavg,time-samples"):  # no reference; a row not run
        with pytest.raises(SystemExit):
            reproduce.parse_args(["--noniid-rows", rows, "--noniid-measured-rows", bad])


def test_the_main_part_runs_its_own_rows_by_default_and_every_row_on_all():
    from experiments import noniid, reproduce
    from experiments.noniid_page import floor_rows
    from experiments.noniid_parts import part_args

    default, every = reproduce.parse_args([]), reproduce.parse_args(["--noniid-rows", "all"])
    quick = reproduce.parse_args(["--quick"])
    # the main part's rows: the reference, Time-only and Min-energy as a user gets them, each floor family with its
    # "none" row; the other parts keep their own rows unless rows are named ("all" names every row)
    assert default.noniid_rows == list(noniid.MAIN_ROWS) and not default.noniid_rows_given
    assert {"equal-fedavg", noniid.default_row("time"), noniid.default_row("min-energy")} <= set(default.noniid_rows)
    assert set(floor_rows(default.noniid_rows)) == {"normalised, rescale ≤ 8", "samples"}
    # the default's own floor (shrunk batches) is a column of the normalised rule's floor table, next to "none"
    assert floor_rows(default.noniid_rows)["normalised, rescale ≤ 8"][:2] == [
        ("none", "time-norm-cap8"), ("shrunk batches (default)", noniid.default_row("time"))]
    assert set(noniid.LATER_ALPHA_ROWS) <= set(default.noniid_rows)
    assert every.noniid_rows == list(noniid.ROWS) and every.noniid_rows_given
    assert part_args(every, "trust").noniid_rows == list(noniid.ROWS)
    assert part_args(default, "trust").noniid_rows != default.noniid_rows
    assert quick.noniid_rows == list(noniid.QUICK_ROWS)


def test_the_finished_only_page_with_no_finished_run_stops_with_the_fix(tmp_path):
    from experiments import reproduce

    # Execute: the non-IID page from an empty run folder
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["--only-noniid", "--noniid-finished-only", "--noniid-tasks", "mnist",
                        "--work", str(tmp_path / "runs"), "--out", str(tmp_path / "page")])
    # Assert: one line that says what is missing and what to run (it crashed with KeyError: 'task')
    assert "none of the" in str(stop.value) and "run without --noniid-finished-only first" in str(stop.value)


def test_the_baselines_part_takes_its_own_rows_tasks_and_first_alpha_unless_they_are_named():
    # Prepare
    from experiments import reproduce
    from experiments.noniid_parts import BASELINE_ROWS, QUICK_BASELINE_ROWS, part_args

    # Execute
    default = part_args(reproduce.parse_args(["--noniid-part", "baselines"]), "baselines")
    named = part_args(reproduce.parse_args(["--noniid-tasks", "weather", "--noniid-rows", "equal-fedavg,static"]),
                      "baselines")
    quick = part_args(reproduce.parse_args(["--quick"]), "baselines")
    main = reproduce.parse_args([])
    # Assert: its defaults, the named flags over them, the first α only, no measured clock; main is untouched
    assert default.noniid_rows == list(BASELINE_ROWS) and default.noniid_tasks == ["mnist", "sentiment", "weather"]
    assert default.noniid_alphas == [0.3] and default.noniid_measured_seeds == 0
    assert named.noniid_rows == ["equal-fedavg", "static"] and named.noniid_tasks == ["weather"]
    assert quick.noniid_rows == list(QUICK_BASELINE_ROWS) and quick.noniid_tasks == ["weather"]
    assert part_args(main, "main") is main and main.noniid_alphas == [0.3, 0.1] and main.noniid_measured_seeds == 5
    assert reproduce.noniid_parts(main) == ["main", "baselines", "batch-scaling", "trust", "objective"]
    assert reproduce.noniid_parts(reproduce.parse_args(["--noniid-part", "baselines"])) == ["baselines"]


def test_the_batch_scaling_part_runs_every_scale_batch_size_on_every_task_and_its_quick_form_reuses_the_main_part():
    from experiments import reproduce
    from experiments.noniid_parts import PARTS, part_args
    from experiments.noniid_rows import QUICK_ROWS, ROWS

    default = part_args(reproduce.parse_args(["--noniid-part", "batch-scaling"]), "batch-scaling")
    quick = part_args(reproduce.parse_args(["--quick"]), "batch-scaling")
    assert default.noniid_tasks == ["mnist", "sentiment", "weather"] and default.noniid_alphas == [0.3]
    assert default.noniid_measured_seeds == 0
    modes = {dict(ROWS[r].options).get("scale_batch_size") for r in default.noniid_rows if r != "equal-fedavg"}
    assert modes == {False, True, "shrink"}
    assert set(quick.noniid_rows) <= set(QUICK_ROWS) and quick.noniid_tasks == ["weather"]
    assert PARTS["batch-scaling"].csv == "noniid-batch-scaling.csv"


def test_the_trust_part_runs_the_default_with_each_cost_trust_rule():
    from experiments import reproduce
    from experiments.noniid_parts import PARTS, part_args
    from experiments.noniid_rows import QUICK_ROWS, ROWS, default_row
    from flwr_adaptive.strategies import CostTrust

    default = part_args(reproduce.parse_args(["--noniid-part", "trust"]), "trust")
    quick = part_args(reproduce.parse_args(["--quick"]), "trust")
    assert default.noniid_tasks == ["mnist", "sentiment", "weather"] and default.noniid_measured_seeds == 0
    # the default row, and the same settings with the rule before the edge and with trust off
    assert default_row() in default.noniid_rows and "equal-fedavg" in default.noniid_rows
    trusts = {r: dict(ROWS[r].options).get("trust", True) for r in default.noniid_rows if r != "equal-fedavg"}
    before = [t for t in trusts.values() if isinstance(t, CostTrust)]
    assert sorted(map(str, trusts.values())).count("False") == 1 and len(before) == 1
    assert before[0].absurd_range == before[0].plausible_range == CostTrust().plausible_range
    for r in trusts:  # the trust rows differ from the default in their trust only
        other = {k: v for k, v in ROWS[r].options if k != "trust"}
        assert other == {k: v for k, v in ROWS[default_row()].options if k != "trust"}, r
    # the quick form adds one row to the main part's quick rows
    assert len(set(quick.noniid_rows) - set(QUICK_ROWS)) == 1 and quick.noniid_tasks == ["weather"]
    assert PARTS["trust"].csv == "noniid-trust.csv"


def test_a_stateful_strategy_option_is_copied_for_every_run(monkeypatch):
    # Prepare: the strategy is built with what the run passes it, then the run stops
    import flwr_adaptive.strategies as strategies
    from experiments import inprocess
    from experiments.noniid import spec_of
    from experiments.reproduce_runs import scenario_profiles

    class Built(Exception):
        pass

    seen = []

    def capture(policy, **options):
        seen.append(options["trust"])
        raise Built

    monkeypatch.setattr(strategies, "build_strategy", capture)
    spec = spec_of("time-norm-cap8-shrink-trust-median", "weather", scenario_profiles("testbed", 0), 0, 0.3, 2, 1100,
                   "modelled", 1e-5, "testbed")
    # Execute: two runs of one spec (a row's CostTrust is one object for all its runs)
    for _ in range(2):
        with pytest.raises(Built):
            inprocess.run_pma(spec)
    # Assert: each run got its own copy of the rules (a CostTrust keeps strikes across rounds)
    row_trust = dict(spec.options)["trust"]
    assert seen[0] == row_trust and seen[0] is not row_trust and seen[1] is not seen[0]


def test_a_part_replaces_its_own_block_only_and_a_new_one_follows_the_main_part():
    # Prepare: a page with the main part, another section and Files
    from experiments.noniid_parts import PARTS, splice_part

    main, base = PARTS["main"], PARTS["baselines"]
    page = f"# R\n\n{main.start}\nM\n{main.end}\n\n## Other\ny\n\n## Files\nx\n"
    # Execute
    once = splice_part(page, [base.start, "B1", base.end], "baselines")
    twice = splice_part(once, [base.start, "B2", base.end], "baselines")
    main_again = splice_part(twice, [main.start, "M2", main.end], "main")
    # Assert: inserted after the main part; replaced, not duplicated; the main part's splice leaves it alone
    assert once == f"# R\n\n{main.start}\nM\n{main.end}\n\n{base.start}\nB1\n{base.end}\n\n## Other\ny\n\n## Files\nx\n"
    assert twice == once.replace("B1", "B2")
    assert main_again == twice.replace("\nM\n", "\nM2\n")
    # without a main part: before Files
    assert splice_part("# R\n\n## Files\nx\n", ["B"], "baselines") == "# R\n\nB\n\n## Files\nx\n"
    # a later part follows the nearest earlier part on the page, whichever parts the page has
    scale = PARTS["batch-scaling"]
    third = splice_part(once, [scale.start, "S", scale.end], "batch-scaling")
    assert third.index(base.end) < third.index(scale.start) < third.index("## Other")
    assert splice_part(page, [scale.start, "S", scale.end], "batch-scaling").index(main.end) < page.index("## Other")
    assert splice_part(third.replace(f"{base.start}\nB1\n{base.end}\n\n", ""), [base.start, "B", base.end],
                       "baselines").index(base.end) < third.index(scale.start)


def test_a_page_whose_part_markers_are_out_of_order_is_refused_with_the_fix():
    from experiments.noniid_parts import PARTS, splice_part

    base = PARTS["baselines"]
    page = f"# R\n\n{base.end}\nold\n{base.start}\n"
    with pytest.raises(ValueError, match="comes before its .*restore the pair in order"):
        splice_part(page, [base.start, "B", base.end], "baselines")


def test_the_modelled_clock_unit_given_is_used_and_one_unlike_the_work_folders_runs_stops_with_the_fix(
        monkeypatch, tmp_path):
    from experiments import reproduce

    args = reproduce.parse_args(["--per-sample-s", "mnist=1.878e-04,weather=2.517e-05"])
    assert args.per_sample_s == {"mnist": 1.878e-04, "weather": 2.517e-05}
    assert reproduce.parse_args([]).per_sample_s == {}  # default: calibrated at start
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--per-sample-s", "mnist=-1"])
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--per-sample-s", "mnist=0.1,cifar=1"])

    def calibrate(task):
        calls.append(task)
        return 9.0

    calls: list[str] = []
    monkeypatch.setattr(reproduce, "calibrate", calibrate)
    unit = reproduce.modelled_unit
    assert unit("mnist", {}, {"mnist": 1e-4}, {"mnist": 2e-4}, tmp_path) == 1e-4  # given beats measured
    assert unit("mnist", {"mnist": 3e-4}, {}, {"mnist": 2e-4}, tmp_path) == 3e-4  # the saved runs' unit
    assert unit("mnist", {}, {}, {"mnist": 2e-4}, tmp_path) == 2e-4  # this invocation's calibration
    assert calls == [] and unit("sentiment", {}, {}, {}, tmp_path) == 9.0 and calls == ["sentiment"]
    assert unit("mnist", {"mnist": 1e-4}, {"mnist": 1e-4}, {}, tmp_path) == 1e-4
    with pytest.raises(SystemExit, match="--fresh or another --work"):
        unit("mnist", {"mnist": 3e-4}, {"mnist": 1e-4}, {}, tmp_path)
