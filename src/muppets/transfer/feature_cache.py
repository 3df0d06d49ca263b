"""A model's per-word features for a task: which layers (:func:`plan_layers`), embedded once and
cached on disk (:class:`FeatureSource`), so that every task-model run after the first — other
seeds, other task-model settings, other variants that read the same layers — starts at once.

A cache file is :func:`~muppets.transfer.embed.save_embeddings`' format (float16 by default: half
the memory, and far below the noise of the task models), named
``<task>-<split>-<kind>-<hash>.safetensors``; the hash covers the model's files (names, sizes,
modification times), the layer mode, the pooling (sub-word models) or OOV policy (static
vectors), the stored dtype, the version of the code that computes the vectors
(:func:`code_version`) and every word of the split, so any change misses the cache instead of
reading stale vectors. The vectors a run trains on are always read back from that file, so a
first run and a cached run see the same numbers."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from muppets.families import is_family
from muppets.errors import ConfigError
from muppets.transfer.embed import embed_sentences, load_embeddings, resolve_layers, save_embeddings
from muppets.transfer.embedders import Embedder, load_embedder, locate_model, resolve_pooling

log = logging.getLogger(__name__)

LAYER_MODES = ("mix", "last", "last4sum", "last4cat")  # or a layer number
STATIC_KINDS = ("static", "nnlm")

EMBEDDING_CODE = (
    "transfer/embedders.py", "transfer/embed.py", "transfer/batching.py", "transfer/feature_cache.py",
    "transfer/features.py", "vectors.py", "config.py", "recipes/elmo_pretrain.py", "recipes/nnlm_pretrain.py",
    "recipes/word_vocab.py", "nn", "models", "interop", "tokenizers",
)  # paths under src/muppets/ of the code that turns words into vectors; a folder counts with every .py in it
NUMERIC_LIBRARIES = ("torch", "tokenizers", "numpy", "safetensors")  # their kernels and formats shape the numbers


def is_int(text: str) -> bool:
    """Whether ``text`` is a (possibly negative) integer, e.g. a layer number."""
    try:
        int(text)
    except ValueError:
        return False
    return True


def plan_layers(mode: str, num_layers: int) -> tuple[list[int], str]:
    """Which layers to embed and how to combine them (a :data:`~muppets.transfer.feature_models.
    COMBINES` name).

    >>> plan_layers("mix", 3), plan_layers("last4cat", 7), plan_layers("-2", 3), plan_layers("mix", 1)
    (([0, 1, 2], 'mix'), ([3, 4, 5, 6], 'cat'), ([1], 'single'), ([0], 'single'))
    """
    if num_layers == 1:  # static vectors: one layer, nothing to choose
        return [0], "single"
    if mode == "mix":
        return list(range(num_layers)), "mix"
    if mode == "last":
        return [num_layers - 1], "single"
    if mode in ("last4sum", "last4cat"):
        if num_layers < 4:
            raise ConfigError(f"layers={mode}: the model has only {num_layers} layers")
        return list(range(num_layers - 4, num_layers)), "sum" if mode == "last4sum" else "cat"
    if not is_int(mode):
        raise ConfigError(f"layers={mode!r}: expected {', '.join(LAYER_MODES)} or a layer number")
    return resolve_layers([int(mode)], num_layers), "single"


def _stamp(path: Path) -> list:
    """Names, sizes and modification times of a model's files (a changed model misses the cache)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [[str(p.relative_to(path) if p != path else p.name), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def _library_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def code_version(sources: Sequence[str] = EMBEDDING_CODE, root: Path | None = None) -> str:
    """A hash of the embedding code: the bytes of every ``sources`` file under ``root`` (the
    ``muppets`` package; a folder stands for all its ``.py`` files, so a new file there counts
    too) and the versions of :data:`NUMERIC_LIBRARIES`.

    Why a hash of the source and not an ``EMBEDDER_VERSION`` constant bumped by hand: the vectors
    depend on some thirty files — the embedders, the shared ``nn/`` blocks, every backbone, its
    loader and tokenizer — that are edited for other reasons, and a constant stays valid only
    while everyone who touches one of them remembers to bump it (a stale cache is exactly such an
    omission). A hash cannot be forgotten. Its price is a spurious miss: an edit that changes no
    number (a comment) re-embeds once, which costs minutes, where a stale hit silently trains on
    wrong vectors. A listed path that no longer exists hashes as missing (a test keeps the list
    in step with the package).
    """
    root = Path(__file__).resolve().parents[1] if root is None else Path(root)
    digest = hashlib.sha1()
    for name in sources:
        target = root / name
        for file in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            digest.update(file.relative_to(root).as_posix().encode("utf-8") + b"\0")
            digest.update((file.read_bytes() if file.is_file() else b"<missing>") + b"\0")
    for library in NUMERIC_LIBRARIES:
        digest.update(f"{library}=={_library_version(library)}\n".encode("utf-8"))
    return digest.hexdigest()[:16]


class FeatureSource:
    """A model's per-word features, embedded once per (words, layers) and cached on disk.

    The model is only loaded on a cache miss; ``kind`` and ``path`` come from
    :func:`~muppets.transfer.embedders.locate_model`.
    """

    def __init__(self, model: str, mode: str, *, cache_dir: str | Path, pooling: str = "auto", oov: str = "zero",
                 dtype: str = "float16", batch_size: int = 32, device: str = "cpu", progress: bool = False) -> None:
        self.kind, self.path = locate_model(model)
        self.name, self.mode, self.cache_dir, self.dtype = model, mode, Path(cache_dir), dtype
        pooling = resolve_pooling(self.kind, pooling)  # the key holds what is used: auto = last for GPT
        self.pooling, self.oov, self.batch_size, self.device, self.progress = pooling, oov, batch_size, device, progress
        self._embedder: Embedder | None = None
        self._key = {"kind": self.kind, "path": str(self.path.resolve()), "files": _stamp(self.path), "mode": mode,
                     "pooling": pooling if is_family(self.kind) else None,
                     "oov": oov if self.kind in STATIC_KINDS else None, "dtype": dtype, "code": code_version()}

    def embedder(self) -> Embedder:
        """The model, loaded on first use."""
        if self._embedder is None:
            self._embedder = load_embedder(self.path, self.pooling, self.device, self.oov)
        return self._embedder

    def cache_path(self, sentences: Sequence[Sequence[str]], tag: str) -> Path:
        digest = hashlib.sha1(json.dumps(self._key, sort_keys=True).encode("utf-8"))
        for words in sentences:
            digest.update(("\t".join(words) + "\n").encode("utf-8"))
        return self.cache_dir / f"{tag}-{self.kind}-{digest.hexdigest()[:20]}.safetensors"

    def features(self, sentences: Sequence[Sequence[str]], tag: str) -> tuple[list[np.ndarray], dict]:
        """Per sentence ``(K, n, D)`` (float16 or float32) and the metadata (layers, combine, counts)."""
        path = self.cache_path(sentences, tag)
        if path.is_file():
            loaded = load_embeddings(path)
            log.info("features from the cache: %s", path)
            return loaded.sentences, loaded.metadata
        embedder = self.embedder()
        layers, combine = plan_layers(self.mode, embedder.num_layers)
        before = dict(embedder.stats)
        log.info("embedding %d sentences (%s) with %s, layers %s", len(sentences), tag, self.path, layers)
        vectors = embed_sentences(embedder, sentences, layers, self.batch_size, source=tag, progress=self.progress)
        counts = {k: v - before.get(k, 0) for k, v in embedder.stats.items()}
        meta = {**embedder.describe(), "layers": layers, "combine": combine, "mode": self.mode, **counts}
        save_embeddings(path, vectors, meta, dtype=self.dtype)
        return load_embeddings(path).sentences, meta
