"""lite-app: the ClientApp. Trains the received weights on this round's quota of the node's
partition, then sleeps ``sample-cost-s × slowdown`` per sample: the emulated cost of the work.
``@telemetry_train`` measures it with this machine's real meter (wall clock). The reply also
carries ``clientapp-start-s``: wall seconds from this process's creation to the start of the
training call (interpreter, imports, app loading; under the Deployment Engine a SuperNode starts
one ClientApp process per message, and the controller never sees that time)."""

from __future__ import annotations

import time

import numpy as np
import psutil
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flwr_adaptive import keys
from flwr_adaptive.clients import mark_warm, node_partition, quota_data, telemetry_train
from lite_app.task import partition, run_config, sgd, slowdown

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """The per-message start-up (``startup-s × slowdown``, unmeasured: a slow board imports
    slowly too), then the measured call.

    The measured call holds no per-process set-up (the imports above run when Flower loads the
    app, before any call is measured), so with ``mark-warm`` (default) no call is a cold start,
    although under the Deployment Engine every message gets a fresh process; ``mark-warm=false``
    is an app written without this project's helpers: every call reports a cold start.
    """
    cfg = run_config(context)
    if bool(cfg["mark-warm"]):
        mark_warm()
    time.sleep(float(cfg["startup-s"]) * slowdown(context.node_config))
    return _train(msg, context)


@telemetry_train
def _train(msg: Message, context: Context) -> Message:
    """SGD on the quota, then the emulated cost; reply with the weights and the loss."""
    started_s = time.time() - psutil.Process().create_time()
    cfg = run_config(context)
    pid, _ = node_partition(context.node_config)
    k = slowdown(context.node_config)
    x, y = partition(pid, int(cfg["seed"]))
    indices = quota_data(np.arange(len(x)))
    weights = msg.content["arrays"].to_numpy_ndarrays()[0]
    weights, loss = sgd(weights, x[indices], y[indices], float(cfg["lr"]))
    time.sleep(len(indices) * float(cfg["sample-cost-s"]) * k)
    metrics = MetricRecord({keys.TRAIN_LOSS: loss, keys.NUM_EXAMPLES: int(len(indices)),
                            "clientapp-start-s": float(started_s)})
    return Message(RecordDict({"arrays": ArrayRecord([weights]), "metrics": metrics}), reply_to=msg)
