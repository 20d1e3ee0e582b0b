"""The client side of normalised aggregation: steps, momentum, lr and proximal mu the wrappers report."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flwr_adaptive import keys
from flwr_adaptive.clients.local_work import StepCounter, counting
from flwr_adaptive.clients.telemetry import TelemetryClient, telemetry_train
from flwr_adaptive.normalized_averaging import local_work


def _message(config):
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "config": ConfigRecord(config)}),
                   dst_node_id=7, message_type="train")


def _context():
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=7, node_config={"partition-id": 1}, state=RecordDict(), run_config={})


def _train(steps, momentum=0.0, lr=0.05, extra=None):
    """A Message-API train function taking ``steps`` SGD steps on a tiny linear model."""

    def train(msg, context):
        from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        for _ in range(steps):
            opt.zero_grad()
            model(torch.ones(4, 2)).sum().backward()
            opt.step()
        metrics = {"num-examples": 4, **(extra or {})}
        return Message(RecordDict({"arrays": ArrayRecord([np.zeros(2)]), "metrics": MetricRecord(metrics)}),
                       reply_to=msg)

    return train


def test_wrapped_train_counts_optimizer_steps_and_reads_momentum_and_lr(flower_identity):
    # Execute
    reply = telemetry_train(_train(7, momentum=0.9, lr=0.05))(_message({keys.QUOTA: 4}), _context())
    metrics = reply.content["metrics"]
    # Assert
    assert metrics[keys.LOCAL_STEPS] == 7
    assert metrics[keys.LOCAL_MOMENTUM] == pytest.approx(0.9) and metrics[keys.LOCAL_LR] == pytest.approx(0.05)
    assert metrics[keys.LOCAL_PROXIMAL_MU] == 0.0


def test_steps_outside_the_wrapped_call_are_not_counted(flower_identity):
    _train(3)(_message({}), _context())  # unwrapped: no counter is active
    reply = telemetry_train(_train(2))(_message({keys.QUOTA: 4}), _context())
    assert reply.content["metrics"][keys.LOCAL_STEPS] == 2


def test_fedprox_mu_from_the_config_and_the_arguments_override_it(flower_identity):
    fedprox = _message({keys.QUOTA: 4, "proximal-mu": 0.3})
    assert telemetry_train(_train(1))(fedprox, _context()).content["metrics"][keys.LOCAL_PROXIMAL_MU] == 0.3
    mine = telemetry_train(_train(1), proximal_mu=0.0, momentum=0.5)(fedprox, _context()).content["metrics"]
    assert mine[keys.LOCAL_PROXIMAL_MU] == 0.0 and mine[keys.LOCAL_MOMENTUM] == 0.5


def test_a_step_count_the_train_function_reports_itself_is_kept(flower_identity):
    reply = telemetry_train(_train(2, extra={keys.LOCAL_STEPS: 40}))(_message({keys.QUOTA: 4}), _context())
    assert reply.content["metrics"][keys.LOCAL_STEPS] == 40


def test_without_any_step_the_count_is_unknown(flower_identity):
    metrics = telemetry_train(_train(0))(_message({keys.QUOTA: 4}), _context()).content["metrics"]
    assert metrics[keys.LOCAL_STEPS] == keys.UNKNOWN and metrics[keys.LOCAL_LR] == keys.UNKNOWN


def test_telemetry_client_reports_the_steps_of_its_fit(flower_identity):
    from flwr.client import NumPyClient

    class Client(NumPyClient):
        def fit(self, parameters, config):
            _train(5, momentum=0.5)(_message({}), _context())
            return parameters, 4, {}

    _, _, metrics = TelemetryClient(Client(), _context()).fit([np.ones(2)], {keys.QUOTA: 4, "proximal_mu": 0.1})
    assert metrics[keys.LOCAL_STEPS] == 5 and metrics[keys.LOCAL_MOMENTUM] == 0.5
    assert metrics[keys.LOCAL_PROXIMAL_MU] == pytest.approx(0.1)


@pytest.mark.parametrize("steps, momentum, mu", [(5, 0.0, 0.0), (5, 0.9, 0.0), (8, 0.0, 2.0), (12, 0.9, 0.5)])
def test_local_work_is_what_torch_sgd_does_on_a_linear_loss(steps, momentum, mu):
    # A linear loss has the constant gradient g, so torch's model change is −lr·‖a‖₁·g exactly
    # (the proximal term μ/2·‖w − w₀‖² added to the loss, as FedProx's clients do).
    lr, g = 0.1, torch.tensor([1.0, -2.0], dtype=torch.float64)
    w0 = torch.zeros(2, dtype=torch.float64)
    w = torch.nn.Parameter(w0.clone())
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum)
    counter = StepCounter()
    with counting(counter):
        for _ in range(steps):
            opt.zero_grad()
            (w @ g + mu / 2 * ((w - w0) ** 2).sum()).backward()
            opt.step()
    work = local_work(counter.steps, counter.seen_momentum, lr * mu)
    np.testing.assert_allclose((w.detach() - w0).numpy(), (-lr * work * g).numpy(), rtol=1e-10)
    assert counter.steps == steps and counter.lr == pytest.approx(lr)


def test_a_silo_reports_its_ddp_step_count_and_the_momentum_it_is_given():
    from test_silo import telemetry

    from flwr_adaptive.clients.silo import SiloRound

    steps = [[0.3, 0.5, 0.1], [0.4, 0.2, 0.1]]
    result = SiloRound(quotas=[60, 40], telemetry=[telemetry(0, 60, 0.9, steps), telemetry(1, 40, 0.7, steps)],
                       state=None, start=0, end=100, wall_s=1.0)
    m = result.metrics(partition_id=1, data_size=500, momentum=0.9)
    assert m[keys.LOCAL_STEPS] == 3 and m[keys.LOCAL_MOMENTUM] == 0.9 and m[keys.LOCAL_PROXIMAL_MU] == 0.0
    assert result.metrics()[keys.LOCAL_MOMENTUM] == keys.UNKNOWN


@pytest.fixture
def caveats(monkeypatch, caplog):
    """A fresh once-per-process memory of the local-work caveats; returns the logged text so far."""
    import logging

    from flwr_adaptive.clients import local_work as lw

    monkeypatch.setattr(lw, "_SAID", set(), raising=False)
    caplog.set_level(logging.WARNING, logger="flwr")
    return lambda: caplog.text


def _steps(opt, model, n):
    for _ in range(n):
        opt.zero_grad()
        model(torch.ones(4, 2)).sum().backward()
        opt.step()


def test_an_optimizer_reused_across_rounds_is_warned_about_its_carried_momentum(caveats):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with counting(StepCounter()):
        _steps(opt, model, 3)  # round 1: the buffer starts empty
    assert "momentum buffer from an earlier" not in caveats()
    with counting(StepCounter()) as second:
        _steps(opt, model, 1)  # round 2: the same optimizer, its buffer from round 1
    assert "momentum buffer from an earlier" in caveats() and "optimizer.state.clear()" in caveats()
    assert second.steps == 1
    # a fresh optimizer each round (or a cleared state) says nothing
    fresh = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with counting(StepCounter()):
        _steps(fresh, model, 2)
    assert caveats().count("momentum buffer from an earlier") == 1


@pytest.mark.parametrize(
    ("options", "said"),
    [({"nesterov": True}, "Nesterov momentum"), ({"dampening": 0.5}, "dampening > 0"), ({}, None)],
)
def test_nesterov_and_dampening_are_warned_as_counted_as_heavy_ball(caveats, options, said):
    model = torch.nn.Linear(2, 1)
    with counting(StepCounter()) as counter:
        _steps(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, **options), model, 2)
    assert counter.steps == 2 and counter.seen_momentum == pytest.approx(0.9)
    if said is None:
        assert caveats() == ""
    else:
        assert said in caveats() and "weighting='data-size'" in caveats()


def test_parameter_groups_report_the_largest_group_s_momentum_in_either_order(caveats):
    big, small = torch.nn.Linear(20, 20), torch.nn.Linear(2, 1)  # 420 and 3 elements

    def reported(groups):
        opt = torch.optim.SGD(groups, lr=0.1)
        with counting(StepCounter()) as counter:
            opt.zero_grad()
            (big(torch.ones(1, 20)).sum() + small(torch.ones(1, 2)).sum()).backward()
            opt.step()
        return counter.seen_momentum, counter.lr

    main = {"params": big.parameters(), "momentum": 0.9, "lr": 0.01}
    minor = {"params": small.parameters(), "momentum": 0.0, "lr": 0.1}
    assert reported([main, minor]) == (pytest.approx(0.9), pytest.approx(0.01))
    main["params"], minor["params"] = big.parameters(), small.parameters()
    assert reported([minor, main]) == (pytest.approx(0.9), pytest.approx(0.01))  # the order does not matter
    assert "different momenta [0.0, 0.9]" in caveats()


def test_two_optimizers_stepping_once_per_batch_took_the_batches_steps_not_twice(caveats):
    encoder, decoder = torch.nn.Linear(2, 8), torch.nn.Linear(8, 1)
    first = torch.optim.SGD(encoder.parameters(), lr=0.05, momentum=0.9)
    second = torch.optim.Adam(decoder.parameters(), lr=0.01)
    with counting(StepCounter()) as counter:
        for _ in range(5):
            first.zero_grad()
            second.zero_grad()
            decoder(encoder(torch.ones(4, 2))).sum().backward()
            first.step()
            second.step()
        first.zero_grad()
        encoder(torch.ones(4, 2)).sum().backward()
        first.step()  # one more encoder step: the encoder's optimizer stepped most
    assert counter.steps == 6
    assert counter.seen_momentum == pytest.approx(0.9) and counter.lr == pytest.approx(0.05)
    assert "two optimizers over different parameters stepped in one training call" in caveats()


def test_steps_in_another_thread_are_warned_about_and_counted_with_the_call_s_context(caveats):
    import contextvars
    import threading

    model = torch.nn.Linear(2, 1)

    def in_a_thread(run):
        thread = threading.Thread(target=run, args=(lambda: _steps(torch.optim.SGD(model.parameters(), lr=0.1),
                                                                   model, 3),))
        thread.start()
        thread.join()

    with counting(StepCounter()) as lost:
        in_a_thread(lambda f: f())
    assert lost.steps == 0 and "stepped in another thread" in caveats()
    assert "contextvars.copy_context().run" in caveats()
    with counting(StepCounter()) as carried:
        in_a_thread(contextvars.copy_context().run)
    assert carried.steps == 3
    _steps(torch.optim.SGD(model.parameters(), lr=0.1), model, 1)  # no call open: nothing to say
    assert caveats().count("stepped in another thread") == 1


def test_optimizers_over_the_same_parameters_add_up_their_steps(caveats):
    # helper-64: an optimizer rebuilt each epoch (4 x 5 steps) counted 5, a probe-then-fine-tune recipe
    # (Adam on the head for 10, then SGD on everything for 30) counted 30
    body, head = torch.nn.Linear(2, 8), torch.nn.Linear(8, 1)
    model = torch.nn.Sequential(body, head)
    with counting(StepCounter()) as epochs:
        for _ in range(4):
            _steps(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model, 5)
    assert epochs.steps == 20 and epochs.seen_momentum == pytest.approx(0.9)
    with counting(StepCounter()) as phases:
        _steps(torch.optim.Adam(head.parameters(), lr=0.01), model, 10)
        _steps(torch.optim.SGD(model.parameters(), lr=0.05), model, 30)
    assert phases.steps == 40 and phases.lr == pytest.approx(0.05)
    # one optimizer over two earlier lanes' parameters joins them: the head and the body took 10 steps each
    # side by side, then 5 together
    with counting(StepCounter()) as joined:
        first, second = torch.optim.SGD(body.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)
        for _ in range(10):
            first.zero_grad()
            second.zero_grad()
            model(torch.ones(4, 2)).sum().backward()
            first.step()
            second.step()
        _steps(torch.optim.SGD(model.parameters(), lr=0.2), model, 5)
    assert joined.steps == 15 and joined.lr == pytest.approx(0.2)
    assert "two optimizers over different parameters" in caveats()  # the side-by-side pair, said once


@pytest.mark.parametrize("order", ["encoder first", "decoder first"])
def test_a_tie_reports_the_larger_parameter_set_whatever_the_order_of_the_steps(order):
    encoder, decoder = torch.nn.Linear(100, 100), torch.nn.Linear(100, 1)  # 10,100 and 101 elements
    opts = [torch.optim.SGD(encoder.parameters(), lr=0.05, momentum=0.9), torch.optim.Adam(decoder.parameters(), lr=1e-3)]
    with counting(StepCounter()) as counter:
        for _ in range(3):
            for o in opts:
                o.zero_grad()
            decoder(encoder(torch.ones(4, 100))).sum().backward()
            for o in opts if order == "encoder first" else opts[::-1]:
                o.step()
    assert counter.steps == 3 and counter.seen_momentum == pytest.approx(0.9) and counter.lr == pytest.approx(0.05)


def test_steps_in_another_thread_of_a_wrapped_train_function_are_warned_about(caveats, flower_identity):
    import threading

    inner = _train(3)

    def train(msg, context):
        out = []
        thread = threading.Thread(target=lambda: out.append(inner(msg, context)))
        thread.start()
        thread.join()
        return out[0]

    reply = telemetry_train(train)(_message({keys.QUOTA: 4}), _context())
    assert reply.content["metrics"][keys.LOCAL_STEPS] == keys.UNKNOWN
    assert "stepped in another thread" in caveats()
