"""pma-app: the ClientApp. Flower's generated shape plus flwr-adaptive's two additions:
``@telemetry_train`` (under ``@app.train()``) and ``quota_data`` over the training data. The
meter is the node's (``pma_app.task.node_meter``: emulated in simulation, real in deployment)."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flwr_adaptive import keys
from flwr_adaptive.clients import node_partition, quota_data, telemetry_train
from pma_app.task import CPU_CLOCK, load_partition, load_task, node_meter, run_config, warm_up

app = ClientApp()


@telemetry_train(meter=node_meter, cpu_clock=CPU_CLOCK)
def _train_quota(msg: Message, context: Context) -> Message:
    """The measured part: train the received model on this round's quota of the partition."""
    cfg = run_config(context)
    task = load_task(cfg["task"])
    pid, n = node_partition(context.node_config)
    train_set = load_partition(cfg["task"], pid, n, int(cfg["seed"]))
    model = task.make_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    indices = quota_data(np.arange(len(train_set)))
    lr = float(msg.content["config"].get("lr", 0.0)) or None
    stats = task.train(model, train_set, indices, lr=lr)
    metrics = MetricRecord({keys.TRAIN_LOSS: float(stats["loss"]), keys.NUM_EXAMPLES: int(stats["samples"])})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Per-process set-up first (cached, not measured: one simulation process serves many
    emulated devices, and its first call would otherwise bill them the imports), then the
    measured training on the quota."""
    cfg = run_config(context)
    pid, n = node_partition(context.node_config)  # a SuperNode without them fails here, with the fix
    warm_up(cfg["task"])
    load_partition(cfg["task"], pid, n, int(cfg["seed"]))
    return _train_quota(msg, context)
