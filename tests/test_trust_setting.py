"""``strategy.trust`` set after construction is resolved as the constructor's ``trust=`` (and names nodes as the
strategy does), on every strategy that holds one."""

from __future__ import annotations

import pytest
from test_batch_shrinking import _fedavg, _legacy

from flwr_adaptive.strategies import AdaptiveStrategy, CostTrust, FedAsyncStrategy

pytestmark = pytest.mark.usefixtures("flower_identity")  # tests/conftest.py


def _make(kind):
    if kind == "message":
        return AdaptiveStrategy(_fedavg(3), budget=300)
    if kind == "legacy":
        return _legacy()
    return FedAsyncStrategy(budget=384, min_nodes=3)


@pytest.mark.parametrize("kind", ["message", "legacy", "fedasync"])
def test_a_trust_set_later_is_resolved_as_at_construction(kind):
    strategy = _make(kind)
    # Execute / Assert: True is the default rules (not the bool, which a round would call .believe on)
    strategy.trust = True
    assert isinstance(strategy.trust, CostTrust) and strategy.trust == CostTrust()
    # a tuned one is kept as given and names nodes as the strategy does (partitions, HFL's ranks)
    tuned = CostTrust(plausible_range=8.0, absurd_range=32.0)
    strategy.trust = tuned
    assert strategy.trust is tuned
    if hasattr(strategy, "who"):
        assert tuned.who == strategy.who
    # False and None: every claim believed
    for off in (False, None):
        strategy.trust = off
        assert strategy.trust is None
    # anything else is refused with the fix, the setting left as it was
    strategy.trust = tuned
    with pytest.raises(ValueError, match="CostTrust"):
        strategy.trust = "yes"
    assert strategy.trust is tuned
