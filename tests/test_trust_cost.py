"""experiments.trust_cost: what cost trust's plausibility rule costs an honest fleet's round (hand-computed)."""

import numpy as np

from experiments.trust_cost import believed_costs, round_over_optimum
from flwr_adaptive.strategies import CostTrust


def test_an_honest_device_4x_faster_than_the_rest_is_believed_at_the_edge_and_the_round_is_1_5x_the_optimum():
    # 1 s/sample beside four at 8: the others' median / 4 = 2 > 1 (implausible), >= 8 / 16 (edge tier): taken at 2.
    costs = np.array([1.0, 8.0, 8.0, 8.0, 8.0])
    believed = believed_costs(costs, CostTrust())
    assert believed.tolist() == [2.0, 8.0, 8.0, 8.0, 8.0]
    # shares ∝ 1/believed: 0.5 and 0.125 each; round max(0.5·1, 0.125·8) = 1; optimum 1 / (1 + 4/8) = 2/3
    assert np.isclose(round_over_optimum(costs, believed), 1.5)
    wider = CostTrust(plausible_range=10, absurd_range=16)
    assert np.isclose(round_over_optimum(costs, believed_costs(costs, wider)), 1.0)


def test_the_fastest_group_is_judged_against_the_median_of_the_slower_rest():
    # 0.9 alone is within 4x of the others' median (3: 0.75 < 0.9); the two fastest as a group are not: the
    # slower rest's median is 5.5 and 0.9 < 5.5 / 4, so both are taken at that edge, 1.375.
    costs = np.array([0.5, 0.9, 3.0, 3.0, 8.0, 8.0])
    assert int(CostTrust().max_group * len(costs)) == 2
    assert believed_costs(costs, CostTrust()).tolist() == [1.375, 1.375, 3.0, 3.0, 8.0, 8.0]
    assert believed_costs(costs, CostTrust(max_group=0.1)).tolist() == [0.75, 0.9, 3.0, 3.0, 8.0, 8.0]
