"""strategies.sent_model.SentModel: the model a Message-API round sent, and a reply rescaled against it."""

import math
from collections import OrderedDict

import numpy as np
from flwr.app import Array, ArrayRecord

from flwr_adaptive.strategies.sent_model import SentModel


def _record(**arrays):
    return ArrayRecord(array_dict=OrderedDict((k, Array(v)) for k, v in arrays.items()))


def test_before_a_model_is_sent_nothing_is_rescaled_and_replies_are_compared_with_each_other():
    sent = SentModel()
    reply = _record(w=np.ones(2, dtype=np.float32))
    assert sent.numpy() is None and sent.layout is None
    assert sent.rescaled(reply, 2.0, 8.0) == (None, None)
    assert sent.bound("normalized", 8.0) is None


def test_a_reply_moves_to_x_plus_scale_times_its_update_by_name():
    sent = SentModel()
    sent.start(_record(w=np.array([1.0, 2.0], dtype=np.float32), b=np.array([0.5], dtype=np.float32)))
    reply = _record(b=np.array([1.5], dtype=np.float32), w=np.array([2.0, 1.0], dtype=np.float32))
    new, reason = sent.rescaled(reply, 2.0, 8.0)
    # hand-computed: w = [1, 2] + 2·([2, 1] − [1, 2]) = [3, 0]; b = 0.5 + 2·(1.5 − 0.5) = 2.5
    assert reason is None and list(new.keys()) == ["b", "w"]
    assert new["w"].numpy().tolist() == [3.0, 0.0] and new["b"].numpy().tolist() == [2.5]
    assert sent.rescaled(_record(other=np.ones(1, dtype=np.float32)), 2.0, 8.0) == (None, None)  # a name it lacks


def test_an_unbounded_factor_that_overflows_is_refused_with_the_reason_and_a_bounded_one_is_left_to_screening():
    sent = SentModel()
    sent.start(_record(w=np.zeros(1, dtype=np.float32)))
    reply = _record(w=np.array([3e38], dtype=np.float32))
    new, reason = sent.rescaled(reply, 2.0, math.inf)
    assert new is None and "rescaled by 2" in reason
    assert sent.bound("normalized", 8.0) is not None and sent.bound("samples", 8.0) is None


def test_each_round_decodes_its_own_model():
    sent = SentModel()
    sent.start(_record(w=np.zeros(1, dtype=np.float32)))
    assert sent.numpy()["w"].tolist() == [0.0]
    sent.start(_record(w=np.ones(1, dtype=np.float32)))
    assert sent.numpy()["w"].tolist() == [1.0] and sent.layout is not None
