"""Every layer's per-word vectors of a frozen backbone, computed once and cached — of the
trained model, or of a randomly initialised encoder of the same architecture.

:class:`ProbeFeatureSource` is the feature cache of feature-based transfer
(:class:`~muppets.transfer.feature_cache.FeatureSource`, mode ``mix`` = every layer) with one
addition: ``random_seed`` swaps the weights for a fresh initialisation of the same model before
anything is embedded — the "randomly initialised encoder" baseline of probing papers (e.g.
Hewitt & Manning 2019's ``ELMo0``, Tenney et al. 2019b's lexical baselines). Same tokenizer, same
shapes, same pooling; the weights come from the model family's own initialisation
(:func:`randomize_embedder`). The cache key gains the seed and the version of this file, so a
random encoder never reads the trained model's vectors or stale ones.

:func:`load_split` turns a split's cached vectors into one ``(K, N, D)`` tensor (every word of
the split, sentence after sentence; :func:`load_sentence_split`: one mean vector per sentence)
and :class:`Standardizer` z-scores each layer with the train split's mean and standard deviation
per dimension. A linear map can undo z-scoring, so it changes no probe's capacity; it puts every
layer on one scale, which keeps Adam's step sizes comparable across layers and models (GPT-2-style
residual streams have a few huge dimensions) and lets a scalar mix's weights say which layer
helps rather than which layer is large.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from muppets.errors import ConfigError, DataError
from muppets.transfer.embedders import Embedder, StaticEmbedder
from muppets.transfer.embed import embed_sentences, load_embeddings, save_embeddings
from muppets.transfer.feature_cache import FeatureSource, code_version, plan_layers

log = logging.getLogger(__name__)

PROBE_CODE = ("analysis/probe_features.py",)  # re-initialises a model and pools sentences (part of the cache keys)


def randomize_embedder(embedder: Embedder, seed: int) -> None:
    """Replace ``embedder``'s weights in place by a fresh initialisation of the same model.

    BERT / GPT / ELMo: a new ``BertForPreTraining`` / ``GPTLanguageModel`` / ``ElmoLanguageModel``
    of the same config is built under ``torch.manual_seed(seed)`` (each runs its family's
    initialisation: N(0, 0.02) with GPT-2's residual scaling; bilm-tf's for ELMo) and its
    backbone's weights are loaded. Static vectors (word2vec, GloVe, NNLM): every row is redrawn
    from N(0, σ²), σ the table's own standard deviation (the OOV zero row stays zero).
    """
    if isinstance(embedder, StaticEmbedder):
        rng = np.random.default_rng(seed)
        table = embedder._table  # (V + 1, d), the last row is the OOV zeros
        table[:-1] = rng.normal(0.0, float(table[:-1].std()) or 1.0, size=table[:-1].shape).astype(table.dtype)
        return
    model = getattr(embedder, "model", None)
    cfg = getattr(model, "cfg", None)
    torch.manual_seed(seed)
    from muppets import families

    if families.is_family(embedder.kind):  # the family's own model, built fresh from the same config
        fresh = families.get(embedder.kind).build(cfg).backbone
    elif embedder.kind == "elmo":
        from muppets.models.elmo import ElmoLanguageModel

        fresh = ElmoLanguageModel(cfg).backbone
    else:
        raise ConfigError(f"no random initialisation for a {embedder.kind!r} model")
    model.load_state_dict(fresh.state_dict())
    model.eval()


class ProbeFeatureSource(FeatureSource):
    """Every layer of ``model`` per word, cached (see the module docstring); ``random_seed``
    (an int) embeds with a randomly initialised encoder of the same architecture instead."""

    def __init__(self, model: str, *, cache_dir: str | Path, random_seed: int | None = None,
                 pooling: str = "auto", dtype: str = "float16", batch_size: int = 32, device: str = "cpu",
                 progress: bool = False) -> None:
        super().__init__(model, "mix", cache_dir=cache_dir, pooling=pooling, dtype=dtype, batch_size=batch_size,
                         device=device, progress=progress)
        self.random_seed = random_seed
        if random_seed is not None:
            self._key = {**self._key, "random_init": int(random_seed), "random_code": code_version(PROBE_CODE)}

    def embedder(self) -> Embedder:
        fresh = self._embedder is None
        embedder = super().embedder()
        if fresh and self.random_seed is not None:
            randomize_embedder(embedder, self.random_seed)
            log.info("random encoder: %s re-initialised (seed %d)", self.path, self.random_seed)
        return embedder


def fits(embedder: Embedder, sentences: Sequence[Sequence[str]]) -> list[bool]:
    """Whether each sentence fits the model's positions (pieces + specials); always True for
    models without a limit (ELMo, static vectors)."""
    if embedder.max_positions is None:
        return [True] * len(sentences)
    return [0 < n <= embedder.max_positions for n in embedder.positions(sentences)]


@dataclass
class SplitFeatures:
    """A split's vectors: ``vectors (K, N, D)`` (float16 or float32, every word of every sentence
    in order) for the model's layers ``layers``; ``lengths`` are the sentences' word counts."""

    vectors: torch.Tensor
    layers: list[int]
    lengths: list[int]

    @property
    def num_words(self) -> int:
        return int(self.vectors.shape[1])

    def offsets(self) -> np.ndarray:
        """``(S + 1,)`` start of each sentence's words (and the end)."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)


def load_split(source: FeatureSource, sentences: Sequence[Sequence[str]], tag: str) -> SplitFeatures:
    """The cached (or freshly embedded) vectors of ``sentences`` as one ``(K, N, D)`` tensor."""
    per_sentence, meta = source.features(sentences, tag)
    array = np.concatenate(per_sentence, axis=1)  # (K, N, D)
    del per_sentence
    if not np.isfinite(array).all():
        raise DataError(f"{tag}: the model's vectors overflow {array.dtype} (use a float32 cache)",
                        path=source.cache_path(sentences, tag))
    return SplitFeatures(torch.from_numpy(array), list(meta["layers"]), [len(s) for s in sentences])


def load_sentence_split(source: FeatureSource, sentences: Sequence[Sequence[str]], tag: str,
                        chunk: int = 512) -> SplitFeatures:
    """One vector per sentence, the mean of its words' vectors at every layer, as a
    :class:`SplitFeatures` whose sentences each count one "word" (``(K, S, D)``).

    Only the means are kept and cached (``<tag>-mean-…`` beside the word caches, keyed also by
    this file's code): the sentences are embedded ``chunk`` at a time, so a corpus of long texts
    (ChnSentiCorp: a million characters in train) never holds every word's vectors at once.
    """
    path = source.cache_path(sentences, f"{tag}-mean{code_version(PROBE_CODE)[:8]}")
    if not path.is_file():
        embedder = source.embedder()
        layers, _ = plan_layers(source.mode, embedder.num_layers)
        log.info("embedding %d sentences (%s) with %s, layers %s, keeping their means", len(sentences), tag,
                 source.path, layers)
        means: list[np.ndarray] = []
        for start in range(0, len(sentences), chunk):
            words = embed_sentences(embedder, sentences[start:start + chunk], layers, source.batch_size, source=tag,
                                    progress=source.progress)  # each (K, n, D) float32
            means += [v.mean(axis=1, keepdims=True) for v in words]  # (K, 1, D)
        save_embeddings(path, means, {**embedder.describe(), "layers": layers, "pooled": "mean over words"},
                        dtype=source.dtype)
    else:
        log.info("sentence means from the cache: %s", path)
    loaded = load_embeddings(path)
    pooled = np.concatenate(loaded.sentences, axis=1)  # (K, S, D)
    if not np.isfinite(pooled).all():
        raise DataError(f"{tag}: the model's vectors overflow the cache's dtype (use a float32 cache)", path=path)
    return SplitFeatures(torch.from_numpy(pooled), list(loaded.metadata["layers"]), [1] * len(sentences))


def pair_features(first: SplitFeatures, second: SplitFeatures) -> SplitFeatures:
    """Each pair as ``[u, v, |u − v|, u ⊙ v]`` of its two texts' vectors at every layer (the
    sentence-pair features of InferSent and SentEval): ``(K, S, 4D)`` in the texts' dtype
    (float16 from a float16 cache: four times the texts' vectors is the largest array here)."""
    if first.vectors.shape != second.vectors.shape:
        raise DataError(f"pair features: {tuple(first.vectors.shape)} first texts, "
                        f"{tuple(second.vectors.shape)} second")
    u, v = first.vectors.float(), second.vectors.float()  # (K, S, D) each
    both = torch.cat([u, v, (u - v).abs(), u * v], dim=-1).to(first.vectors.dtype)  # kept in the cache's dtype
    return SplitFeatures(both, first.layers, first.lengths)


class Standardizer:
    """Per layer and dimension ``(x − μ) / σ`` with the statistics of one split (train).

    ``mean`` and ``std`` are ``(K, D)`` float32; σ below ``1e-6`` (a constant dimension) is 1.
    """

    def __init__(self, features: SplitFeatures, chunk: int = 65536) -> None:
        K, N, D = features.vectors.shape
        total = torch.zeros(K, D, dtype=torch.float64)
        squares = torch.zeros(K, D, dtype=torch.float64)
        for start in range(0, N, chunk):
            block = features.vectors[:, start: start + chunk].double()  # (K, n, D)
            total += block.sum(1)
            squares += (block * block).sum(1)
        mean = total / max(N, 1)
        var = (squares / max(N, 1) - mean * mean).clamp_min(0.0)
        std = var.sqrt()
        self.mean, self.std = mean.float(), torch.where(std < 1e-6, torch.ones_like(std), std).float()

    def rows(self, features: SplitFeatures, layer_slots: Sequence[int], index: torch.Tensor) -> torch.Tensor:
        """Standardised ``(B, len(layer_slots), D)`` float32 for the words ``index (B,)``;
        ``layer_slots`` index the ``K`` axis of ``features.vectors``."""
        slots = torch.as_tensor(list(layer_slots), dtype=torch.long)
        if len(slots) == 1:
            x = features.vectors[int(slots[0])][index].float()[None]  # (1, B, D)
        else:
            x = features.vectors[:, index][slots].float()  # (K', B, D): gather the words first
        x = (x - self.mean[slots, None]) / self.std[slots, None]
        return x.transpose(0, 1)  # (B, K', D)
