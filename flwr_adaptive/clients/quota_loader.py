"""``quota_data(DataLoader)``: the user's DataLoader re-created over this round's quota.

Contract
--------
:func:`loader_over` returns a :class:`QuotaLoader`: a ``torch.utils.data.DataLoader`` with the
user's settings (batch size, shuffle, workers, collate function, pin memory, drop_last, timeout,
worker init, generator, persistent workers) over the quota's lazy view of the dataset. It refuses
(``ValueError`` with the fix) what it cannot re-create: an ``IterableDataset``, a custom
``batch_sampler`` (or ``batch_size=None``), a sampler other than torch's sequential or plain
random one.

Batch size: when the round's config holds a reference quota (``keys.REFERENCE_QUOTA``, sent by a
strategy with ``scale_batch_size=True`` or ``"shrink"``), the loader reads the quota in batches of
``scaled_batch_size(B, samples, reference, max_batch_scale)`` (B the user's batch size, samples
the quota as selected; :mod:`flwr_adaptive.clients.batch_scaling`), so it takes the reference's
steps. Built inside the wrapped training call, the loader has that batch size from the start (its
``batch_size`` says it); built before (in ``client_fn``, as the legacy API's examples do), it
keeps the user's ``batch_size`` attribute and applies the scaled size each time it is iterated
or measured with ``len`` inside a call with a reference quota. Without one it is the user's
loader over the quota.

``drop_last`` drops a partial last batch after a full one, as torch does, and the reply counts the
samples trained (the quota less that batch: ``QuotaWindow.dropped``), so the node's cost per sample
and its weight are those of the work it did; a quota smaller than the
batch size (a slow node's share read at the user's batch size: ``scale_batch_size=False``) has no
full batch, and torch would yield none, so the round would take no optimizer step and reply with
the model it was sent. The loader reads such a quota as one batch instead, with one warning per
process naming the partition, the quota, the batch size and the fix (``min_quota`` >= the batch
size on the strategy, or ``drop_last=False``).

Cost
----
Persistent workers (``persistent_workers=True``) are kept between the epochs of one training call
and started again in the next (they hold the selection of the call that started them).

One DataLoader per ``quota_data`` call; a loader built before the call builds one more per
iteration in a round with a reference quota (its workers then start per iteration, even with
``persistent_workers``).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler

from flwr_adaptive._logging import logger as log
from flwr_adaptive.clients.batch_scaling import MAX_BATCH_SCALE, scaled_batch_size
from flwr_adaptive.clients.data import current_window

__all__ = ["QuotaLoader", "loader_over", "batch_size_now", "keeps_one_batch", "dropped_per_pass"]

_WARNED: set[str] = set()  # what was said once in this process


def batch_size_now(batch_size: int, dataset: Any, max_batch_scale: float | None) -> int:
    """The batch size to read ``dataset`` (the quota's view) in now: scaled in a window with a reference
    quota, else ``batch_size``."""
    window = current_window()
    if window is None or window.reference is None:
        return int(batch_size)
    return scaled_batch_size(int(batch_size), len(dataset), window.reference, max_batch_scale)


def keeps_one_batch(dataset: Any, batch_size: int, drop_last: bool) -> bool:
    """Whether ``drop_last`` must be lifted so that ``dataset`` (the quota's view) gives a batch: it holds
    fewer samples than one batch but at least one (one warning per process, with the fix)."""
    samples = len(dataset)
    if not (drop_last and 0 < samples < batch_size):
        return False
    if "one-batch" not in _WARNED:
        _WARNED.add("one-batch")
        window = current_window()
        log.warning(
            "quota_data: partition %s: the quota of %d samples is below the batch size %d of a DataLoader with "
            "drop_last=True, which would read it in no batch (no optimizer step, the model sent back untrained): "
            "reading it as one batch of %d. To keep full batches pass min_quota >= %d to the strategy, or "
            "scale_batch_size=True (a small quota is then read in smaller batches); said once",
            "?" if window is None else window.partition,
            samples,
            batch_size,
            samples,
            batch_size,
        )
    return True


def dropped_per_pass(loader: DataLoader) -> int:
    """Samples of ``loader``'s dataset its batches leave out of each pass: the partial last batch that
    ``drop_last`` drops."""
    dataset: Any = loader.dataset
    return len(dataset) % int(loader.batch_size or 1) if loader.drop_last else 0


class QuotaLoader(DataLoader):
    """A DataLoader over the quota whose batch size follows the round's reference quota (module doc).

    Parameters
    ----------
    dataset : map-style dataset
        The quota's view of the user's dataset.
    user_batch_size : int
        The user's batch size (what the reference quota is read in).
    max_batch_scale : float or None
        The cap on the batch-size factor (``scaled_batch_size``'s ``max_scale``).
    **settings
        The DataLoader settings; ``batch_size`` is the size to start with.
    """

    def __init__(self, dataset: Any, *, user_batch_size: int, max_batch_scale: float | None, **settings: Any) -> None:
        super().__init__(dataset, **settings)
        self._settings = settings
        self._user_batch_size = int(user_batch_size)
        self._max_batch_scale = max_batch_scale

    def _other(self) -> DataLoader | None:
        """A loader at the window's batch size (``drop_last`` lifted for a quota below one batch) when it
        differs from this one, else ``None``."""
        size = batch_size_now(self._user_batch_size, self.dataset, self._max_batch_scale)
        one_batch = keeps_one_batch(self.dataset, size, bool(self._settings.get("drop_last")))
        if size == self.batch_size and not one_batch:
            return None
        settings = {**self._settings, "batch_size": size}
        if one_batch:
            settings["drop_last"] = False
        return DataLoader(self.dataset, **settings)

    def __iter__(self) -> Any:
        other = self._other()
        window = current_window()
        if window is not None and window.dropped is None:
            # the first loader read in the call is its training (a second one, e.g. a train-loss pass at
            # another batch size, does not change what was trained)
            window.dropped = dropped_per_pass(other if other is not None else self)
        if other is not None:
            return iter(other)
        if self._iterator is not None and getattr(self, "_workers_window", None) is not window:
            # persistent workers read the selection of the call that started them (a forked worker's copy of
            # the window, a spawned one's pickled indices): not kept into another call
            stale, self._iterator = self._iterator, None
            getattr(stale, "_shutdown_workers", lambda: None)()
        self._workers_window = window
        return super().__iter__()

    def __len__(self) -> int:
        other = self._other()
        return super().__len__() if other is None else len(other)


def loader_over(loader: DataLoader, dataset: Any, max_batch_scale: float | None = MAX_BATCH_SCALE) -> QuotaLoader:
    """A :class:`QuotaLoader` like ``loader`` (same settings) over ``dataset`` (the quota's view)."""
    if isinstance(loader.dataset, IterableDataset):
        raise ValueError(
            "quota_data needs a map-style dataset (len + indexing); this DataLoader "
            "reads an IterableDataset: pass the quota to your own iterator instead"
        )
    if loader.batch_size is None:
        raise ValueError(
            "quota_data cannot re-create a DataLoader built with a custom batch_sampler "
            "(or batch_size=None): call quota_data on its dataset and build the loader "
            "over the result (batches of quota_batch_size(B) keep the strategy's batch scaling)"
        )
    sampler = loader.sampler
    if type(sampler) is RandomSampler and not sampler.replacement and sampler._num_samples is None:
        shuffle = True
    elif type(sampler) is SequentialSampler:
        shuffle = False
    else:
        raise ValueError(
            f"quota_data cannot re-create a DataLoader with a custom sampler "
            f"({type(sampler).__name__}): it draws indices over the whole dataset. "
            "Call quota_data on the dataset and build your loader over the result, with "
            "batch_size=quota_batch_size(B) to keep the strategy's batch scaling"
        )
    settings: dict[str, Any] = dict(
        shuffle=shuffle,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
    )
    if loader.num_workers > 0:
        settings.update(prefetch_factor=loader.prefetch_factor, multiprocessing_context=loader.multiprocessing_context)
    start = batch_size_now(loader.batch_size, dataset, max_batch_scale)  # inside the call: scaled from the start
    return QuotaLoader(
        dataset, user_batch_size=loader.batch_size, max_batch_scale=max_batch_scale, batch_size=start, **settings
    )
