"""The policy registry builds every baseline and controller policy by name (and refuses unknown names);
the Flower App's defaults are its pyproject app config and name every policy option."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def test_registry_builds_every_policy_and_rejects_unknown_names():
    from flwr_adaptive.strategies import AdaptiveStrategy
    from flwr_adaptive.strategies.fedasync_strategy import FedAsyncStrategy
    from flwr_adaptive.strategies.oort_strategy import OortStrategy
    from flwr_adaptive.strategies.registry import POLICY_NAMES, build_strategy
    from flwr_adaptive.strategies.static_profiling_strategy import StaticProfilingStrategy

    # Execute
    built = {p: build_strategy(p, budget=100, num_nodes=3, oort_fraction=0.5, fedasync_alpha=0.3) for p in POLICY_NAMES}
    # Assert
    assert type(built["static"]) is StaticProfilingStrategy and built["static"].policy == "time"
    assert type(built["oort"]) is OortStrategy and built["oort"].fraction == 0.5
    assert type(built["fedasync"]) is FedAsyncStrategy and built["fedasync"].mixer.alpha == 0.3
    assert built["fedasync"].min_nodes == 3
    for p in ("equal", "time", "low-energy", "energy"):
        assert type(built[p]) is AdaptiveStrategy and built[p].policy == p
    with pytest.raises(ValueError, match="unknown policy 'fedprox'; choose one of equal, time, low-energy, energy, "
                                         "min-energy, static, oort, fedasync"):
        build_strategy("fedprox", budget=100)


def test_flower_app_defaults_equal_the_pyproject_app_config_and_name_every_policy_option():
    import tomllib
    from pathlib import Path

    from experiments import APPS_DIR
    from pma_app.task import DEFAULTS

    # Prepare: flwr run refuses -c keys that pyproject.toml's app config does not declare.
    config = tomllib.loads((APPS_DIR / "pma" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    # Assert: same keys and the same defaults (a value changed in one place only would make a
    # plain `flwr run apps/pma` and the tests' direct calls of the app disagree)
    assert DEFAULTS == config
    assert {"oort-fraction", "fedasync-alpha", "fedasync-staleness"} <= set(config)
