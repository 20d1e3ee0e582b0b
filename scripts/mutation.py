"""Mutation testing of the core and the strategies with cosmic-ray (run by ``scripts/mutation.sh``).

Each target is one source file (optionally only some of its functions: ``path::Class.method``) and
the test files that guard it. For each target the script copies the working tree to a temporary
folder (cosmic-ray rewrites the file it mutates in place; the checkout is never touched), asks
cosmic-ray for every mutant of the file, keeps the operators listed in ``OPERATORS`` on the
selected lines (optionally a seeded random sample of them), runs the target's tests against each
mutant (``pytest -x``: the first failure kills it) and prints the score (killed / (killed +
survived)) and every survivor as a diff. A mutant that times out counts as killed (an infinite
loop is a failure the suite would notice by its timeout); one that fails to import is
"incompetent" and does not count.

Usage (from the repository root, through scripts/mutation.sh)::

    scripts/mutation.sh                       # every target, every mutant (hours on 2 cores)
    scripts/mutation.sh --sample 20           # 20 mutants per target, seeded
    scripts/mutation.sh --quick               # 3 mutants per target
    scripts/mutation.sh --targets trust,solver --sample 10 --seed 1
    scripts/mutation.sh --list                # the targets and their tests

Exit status 0 when every run mutant was killed, 1 when some survived, 2 on a usage or set-up error.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    name: str
    path: str  # source file, relative to the repository root
    tests: tuple[str, ...]  # test files run against each mutant
    functions: tuple[str, ...] = ()  # only these (qualified) functions; empty: the whole file


# pytest arguments (files, node ids, -k expressions). The controller's slowest tests (a
# hypothesis interleaving property, three 8-13 s closed loops) are left out of its runs: a mutant
# runs the rest in ~30 s on 2 shared cores.
_CONTROLLER_TESTS = (
    "tests/test_controller.py",
    "tests/test_controller_beyond.py",
    "tests/test_controller_limits.py",
    "tests/test_controller_state_files.py",
    "tests/test_controller_ageing.py",
    "tests/test_option_plumbing.py",
    "-k",
    "not hostile_interleavings and not affine_fit_reaches and not paper_flag_reproduces and not early_rounds_benchmark",
)
_PLUMBING_TESTS = ("tests/test_option_plumbing.py", "tests/test_dropin_mistakes.py")

#: What the issue asks to be mutated: the controller (the files of its split), the solver, the
#: estimation, screening, trust, and the strategies' option plumbing (their constructors and the
#: registry), each with the test files that guard it.
TARGETS = [
    Target("controller", "flwr_adaptive/controller.py", _CONTROLLER_TESTS),
    Target("estimates", "flwr_adaptive/estimates.py", _CONTROLLER_TESTS),
    Target("limits", "flwr_adaptive/limits.py", _CONTROLLER_TESTS),
    Target("policies", "flwr_adaptive/policies.py", _CONTROLLER_TESTS),
    Target("split", "flwr_adaptive/split.py", _CONTROLLER_TESTS),
    Target("proposal", "flwr_adaptive/proposal.py", _CONTROLLER_TESTS),
    Target("deadband", "flwr_adaptive/deadband.py", _CONTROLLER_TESTS),
    Target("state_format", "flwr_adaptive/state_format.py", _CONTROLLER_TESTS),
    Target(
        "solver",
        "flwr_adaptive/solver.py",
        (
            "tests/test_solver.py",
            "tests/test_controller_beyond.py",
            "-k",
            "not affine_fit_reaches and not paper_flag_reproduces and not early_rounds_benchmark",
        ),
    ),
    Target(
        "makespan",
        "flwr_adaptive/makespan.py",
        (
            "tests/test_solver.py",
            "tests/test_controller_beyond.py",
            "-k",
            "not affine_fit_reaches and not paper_flag_reproduces and not early_rounds_benchmark",
        ),
    ),
    Target("estimation", "flwr_adaptive/estimation.py", _CONTROLLER_TESTS),
    Target(
        "screening",
        "flwr_adaptive/strategies/screening.py",
        ("tests/test_hostile_replies.py", "tests/test_strategy_core.py"),
    ),
    Target("trust", "flwr_adaptive/strategies/trust.py", ("tests/test_hostile_replies.py", "tests/test_cost_trust.py", "tests/test_liar.py")),
    Target(
        "plumbing-core",
        "flwr_adaptive/strategies/core.py",
        _PLUMBING_TESTS,
        ("AdaptiveCore.__init__", "AdaptiveCore.make_controller"),
    ),
    # AdaptiveCore.__init__'s parameter checks, moved out of it unchanged (strategies composition)
    Target("plumbing-options", "flwr_adaptive/strategies/options.py", _PLUMBING_TESTS, ("checked_budget",)),
    Target(
        "plumbing-strategies",
        "flwr_adaptive/strategies/adaptive_strategy.py",
        _PLUMBING_TESTS,
        ("AdaptiveStrategy.__init__", "AdaptiveStrategy._one_per_node"),
    ),
    Target(
        "plumbing-legacy",
        "flwr_adaptive/strategies/legacy_adaptive_strategy.py",
        _PLUMBING_TESTS,
        ("LegacyAdaptiveStrategy.__init__", "LegacyAdaptiveStrategy.configure_fit"),
    ),
    Target("plumbing-registry", "flwr_adaptive/strategies/registry.py", _PLUMBING_TESTS, ("build_strategy",)),
]

#: cosmic-ray operators kept: arithmetic swaps among + - * / //, every comparison, negations,
#: boolean constants and connectives, numbers, loop and exception mutations. Left out: bitwise
#: and shift operators (this code has none to mutate into meaningfully; nearly all such mutants
#: are type errors) and the variable replacer/inserter (random names, mostly incompetent).
OPERATORS = re.compile(
    r"core/(ReplaceBinaryOperator_(Add|Sub|Mul|Div|FloorDiv|Mod|Pow)_(Add|Sub|Mul|Div|FloorDiv)"
    r"|ReplaceComparisonOperator_\w+|ReplaceUnaryOperator_\w+|AddNot|ReplaceTrueWithFalse|ReplaceFalseWithTrue"
    r"|ReplaceAndWithOr|ReplaceOrWithAnd|ReplaceBreakWithContinue|ReplaceContinueWithBreak|NumberReplacer"
    r"|ZeroIterationForLoop|ExceptionReplacer|RemoveDecorator)$"
)


def function_lines(path: Path, names: tuple[str, ...]) -> set[int]:
    """Line numbers of the named (qualified) functions' bodies in ``path``, docstrings left out."""
    tree = ast.parse(path.read_text())
    found: dict[str, ast.AST] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                found[qual] = child
                visit(child, qual + ".")

    visit(tree, "")
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"[mutation] {path}: no function {', '.join(missing)} (renamed? update TARGETS)")
    lines: set[int] = set()
    for name in names:
        node = found[name]
        body = list(node.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
            body = body[1:]  # the docstring
        for stmt in body:
            lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return lines


def copy_tree(dst: Path) -> None:
    """The working tree's tracked and untracked-but-not-ignored files (what a clean clone plus your edits has)."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def run_target(target: Target, work: Path, sample: int | None, seed: int, timeout_s: float, python: str) -> dict:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    tests = shlex.join(target.tests)
    # -p no:cacheprovider: no .pytest_cache writes; -n 0: one process (the machine is shared)
    command = f"{shlex.quote(python)} -m pytest -x -q -n 0 -p no:cacheprovider {tests}"
    config = work / f"mutation-{target.name}.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{target.path}"\n'
        f"timeout = {timeout_s}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n\n"
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    session = work / f"mutation-{target.name}.sqlite"
    session.unlink(missing_ok=True)
    cosmic = str(Path(python).parent / "cosmic-ray")
    subprocess.run([cosmic, "init", str(config), str(session)], cwd=work, check=True)

    lines = function_lines(work / target.path, target.functions) if target.functions else None
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(db.pending_work_items, key=lambda w: w.job_id)
        eligible = [
            w
            for w in items
            if all(OPERATORS.match(m.operator_name) for m in w.mutations)
            and (lines is None or all(m.start_pos[0] in lines for m in w.mutations))
        ]
        chosen = eligible if sample is None or sample >= len(eligible) else random.Random(seed).sample(eligible, sample)
        keep = {w.job_id for w in chosen}
        skipped = [w.job_id for w in items if w.job_id not in keep]
        if skipped:
            db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not selected"))
    print(
        f"[mutation] {target.name}: {len(chosen)} of {len(eligible)} eligible mutants "
        f"({len(items)} generated) against {tests}",
        flush=True,
    )
    started = time.monotonic()
    if chosen:
        subprocess.run([cosmic, "exec", str(config), str(session)], cwd=work, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started

    killed, survived, incompetent = [], [], []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            m = item.mutations[0]
            entry = {
                "line": m.start_pos[0],
                "operator": m.operator_name,
                "occurrence": m.occurrence,
                "diff": result.diff or "",
                "outcome": str(result.test_outcome),
                "worker": str(result.worker_outcome),
            }
            # a timeout is reported by cosmic-ray as killed (abnormal worker outcome)
            if result.test_outcome == TestOutcome.SURVIVED:
                survived.append(entry)
            elif result.test_outcome == TestOutcome.INCOMPETENT:
                incompetent.append(entry)
            else:
                killed.append(entry)
    counted = len(killed) + len(survived)
    return {
        "target": target.name,
        "path": target.path,
        "generated": len(items),
        "eligible": len(eligible),
        "run": len(chosen),
        "killed": len(killed),
        "survived": len(survived),
        "incompetent": len(incompetent),
        "score": (len(killed) / counted) if counted else None,
        "wall_s": wall,
        "survivors": sorted(survived, key=lambda e: e["line"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", help="comma-separated target names (default: all; see --list)")
    ap.add_argument("--sample", type=int, help="run this many mutants per target (seeded), not all")
    ap.add_argument("--quick", action="store_true", help="3 mutants per target (same as --sample 3)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one mutant's tests may take")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--list", action="store_true", help="print the targets and their tests, then exit")
    ap.add_argument("--only", action="append", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    targets = list(TARGETS)
    if args.only:  # the script's own test: 'name=path::f1,f2;pytest args', repeatable
        targets = []
        for only in args.only:
            name, rest = only.split("=", 1)
            source, tests = rest.split(";", 1)
            path, _, funcs = source.partition("::")
            targets.append(Target(name, path, tuple(shlex.split(tests)), tuple(filter(None, funcs.split(",")))))
    if args.list:
        for t in targets:
            print(f"{t.name:20s} {t.path}{'::' + ','.join(t.functions) if t.functions else ''}  <- {' '.join(t.tests)}")
        return 0
    if args.targets:
        wanted = args.targets.split(",")
        unknown = [w for w in wanted if w not in {t.name for t in targets}]
        if unknown:
            ap.error(f"unknown targets {unknown}; choose from {', '.join(t.name for t in targets)}")
        targets = [t for t in targets if t.name in wanted]
    sample = 3 if args.quick else args.sample
    if sample is not None and sample < 1:
        ap.error("--sample must be >= 1")
    missing = [t.path for t in targets if not (REPO / t.path).is_file()]
    if missing:
        print(f"[mutation] no such source files: {missing} (moved? update TARGETS in {__file__})", file=sys.stderr)
        return 2

    results = []
    with tempfile.TemporaryDirectory(prefix="flwr-adaptive-mutation-") as tmp:
        work = Path(tmp)
        copy_tree(work)
        env_python = sys.executable
        os.environ.pop("PYTEST_ADDOPTS", None)
        for target in targets:
            results.append(run_target(target, work, sample, args.seed, args.timeout, env_python))
            r = results[-1]
            score = "n/a" if r["score"] is None else f"{r['score']:.0%}"
            print(
                f"[mutation] {r['target']}: score {score} ({r['killed']} killed, {r['survived']} survived, "
                f"{r['incompetent']} incompetent; {r['wall_s']:.0f} s)",
                flush=True,
            )

    print("\n== Mutation score per target (killed / (killed + survived); cosmic-ray) ==")
    print("| target | file | mutants run / eligible | killed | survived | incompetent | score |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        score = "n/a" if r["score"] is None else f"{r['score']:.0%}"
        print(
            f"| {r['target']} | {r['path']} | {r['run']} / {r['eligible']} | {r['killed']} | {r['survived']} "
            f"| {r['incompetent']} | {score} |"
        )
    total_k = sum(r["killed"] for r in results)
    total_s = sum(r["survived"] for r in results)
    if total_k + total_s:
        print(
            f"| all | | {sum(r['run'] for r in results)} | {total_k} | {total_s} | "
            f"{sum(r['incompetent'] for r in results)} | {total_k / (total_k + total_s):.0%} |"
        )
    for r in results:
        for s in r["survivors"]:
            print(f"\n-- SURVIVED {r['path']}:{s['line']} {s['operator']} (occurrence {s['occurrence']})\n{s['diff']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if total_s else 0


if __name__ == "__main__":
    sys.exit(main())
