"""One word-level view of every backbone: pre-split words in, per-WORD vectors per layer out.

:func:`load_embedder` reads what a model name points at and returns an :class:`Embedder`:

==========  ===========================================  =======================================
kind        what the name points at                      layers (``num_layers`` x ``dim``)
==========  ===========================================  =======================================
``bert``    an HF BERT directory, ``minilm``, or a       ``L + 1``: the embedding output, then
            pretraining run (its ``final/``); likewise   every block (``H`` wide)
            ``roberta``, ``distilbert``, ``electra``
            (every encoder of :mod:`muppets.families`)
``gpt``     an HF GPT-2 / GPT-1 directory or run         ``L + 1`` (GPT-2's top layer is after
                                                         its final LayerNorm)
``elmo``    an ELMo run (its ``final/``) or a            ``L + 1`` of width ``2p``: the char-CNN
            :func:`~muppets.recipes.elmo_pretrain.       token layer duplicated ``[x; x]``, then
            save_elmo` directory                         every biLSTM layer ``[h_fwd; h_bwd]``
                                                         (Peters et al. 2018, §3.2)
``nnlm``    an NNLM run (its ``final/``)                 1: the rows of C (a static lookup)
``static``  a word2vec text/binary or GloVe file, or a   1: the vectors (a static lookup)
            word2vec run (its ``vectors.bin``)
==========  ===========================================  =======================================

Sub-word models read a sentence as pieces and give each word the ``first`` piece's vector,
the ``mean`` of its pieces, or the ``last`` one; :func:`pool_pieces` does it for every layer at
once. ``auto`` (every entry point's default, :func:`resolve_pooling`) takes the ``last`` piece for
GPT, the only one a left-to-right model reads after it has seen the whole word, and the ``first``
for BERT, the piece fine-tuning's tagging labels. BERT inputs are
``[CLS] pieces [SEP]`` (the same WordPiece split as fine-tuning's tagging features); GPT reads
the words joined by single spaces, as text; ELMo reads ``<s> words </s>`` as it was trained.
A word that gives no piece at all (e.g. a lone control character) gets a zero vector and is
counted in :attr:`Embedder.stats` (``empty_words``).

Static vectors look a word up as written, then lower-cased; a word found neither way is
out of vocabulary: it gets a zero vector (``oov="zero"``) and is counted (``stats["oov"]``), or
raises :class:`~muppets.errors.DataError` (``oov="error"``).

Every embedder runs in eval mode under ``torch.inference_mode``; :mod:`muppets.transfer.embed`
adds length-bucketed batching, layer selection and files.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from muppets.errors import ConfigError, DataError
from muppets.paths import resolve_model_path
from muppets.train.device import move, pick_device, to_device
from muppets.vectors import WordVectors

log = logging.getLogger(__name__)

POOLINGS = ("first", "mean", "last")  # how a word's pieces become one vector
POOLING_CHOICES = ("auto", *POOLINGS)  # what a user may ask for: auto = resolve_pooling(kind)
OOV_POLICIES = ("zero", "error")  # static vectors: what an unknown word gets
KINDS = ("elmo", "nnlm", "static")  # besides every family of muppets.families (bert, gpt, roberta …)
_RUN_VECTORS = ("vectors.bin", "embeddings.bin")  # word2vec / NNLM run directories


# ----------------------------------------------------------------------------- pooling


def resolve_pooling(kind: str, pooling: str) -> str:
    """The pooling a ``kind`` of model uses for ``pooling``: ``auto`` is its family's default
    (``last`` for a left-to-right model, GPT) and ``first`` for every other."""
    from muppets import families

    if pooling not in POOLING_CHOICES:
        raise ConfigError(f"pooling {pooling!r} is not one of {', '.join(POOLING_CHOICES)}")
    if pooling != "auto":
        return pooling
    return families.get(kind).default_pooling if families.is_family(kind) else "first"


def pool_pieces(hidden: torch.Tensor, word_of_piece: torch.Tensor, num_words: int,
                pooling: str) -> torch.Tensor:
    """Per-word vectors from per-piece states.

    ``hidden (B, T, H)``; ``word_of_piece (B, T)`` long, the word index of each piece, -1 at
    specials and padding (a word's pieces are consecutive) -> ``(B, num_words, H)``, zero for
    a word with no piece.

    >>> h = torch.arange(8.0).reshape(1, 4, 2)       # 4 pieces: [CLS] a ##b [SEP]
    >>> wop = torch.tensor([[-1, 0, 0, -1]])
    >>> pool_pieces(h, wop, 1, "first").tolist(), pool_pieces(h, wop, 1, "mean").tolist()
    ([[[2.0, 3.0]]], [[[3.0, 4.0]]])
    """
    if pooling not in POOLINGS:
        raise ConfigError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
    B, T, H = hidden.shape
    valid = word_of_piece >= 0  # (B, T)
    slot = torch.where(valid, word_of_piece, torch.full_like(word_of_piece, num_words))  # (B, T); W = discard
    if pooling == "mean":
        sums = hidden.new_zeros(B, num_words + 1, H).scatter_add_(1, slot[..., None].expand(B, T, H), hidden)
        counts = hidden.new_zeros(B, num_words + 1).scatter_add_(1, slot, valid.to(hidden.dtype))
        return sums[:, :num_words] / counts[:, :num_words, None].clamp_min(1.0)
    pad = torch.full_like(word_of_piece[:, :1], -2)  # (B, 1): differs from every word index
    neighbour = torch.cat([pad, word_of_piece[:, :-1]], 1) if pooling == "first" else \
        torch.cat([word_of_piece[:, 1:], pad], 1)  # (B, T): the previous / next piece's word
    keep = valid & (word_of_piece != neighbour)  # the first / last piece of each word
    slot = torch.where(keep, slot, torch.full_like(slot, num_words))
    out = hidden.new_zeros(B, num_words + 1, H).scatter_(1, slot[..., None].expand(B, T, H), hidden)
    return out[:, :num_words]


def words_without_pieces(word_of_piece: torch.Tensor, lengths: Sequence[int]) -> int:
    """How many of the real words (``lengths[b]`` per row) no piece points at."""
    found = sum(len(set(row[row >= 0].tolist())) for row in word_of_piece)
    return int(sum(lengths)) - found


# ----------------------------------------------------------------------------- embedders


class Embedder:
    """Pre-split sentences -> per-word vectors of every layer (see the module docstring).

    Attributes: ``kind`` (one of :data:`KINDS`), ``source`` (the resolved path),
    ``num_layers``, ``dim``, ``max_positions`` (model positions a sentence may use; None =
    no limit) and ``stats`` (a Counter: ``words``, plus ``oov`` / ``empty_words``).
    """

    kind = ""

    def __init__(self, source: Path, num_layers: int, dim: int, max_positions: int | None = None) -> None:
        self.source, self.num_layers, self.dim = source, num_layers, dim
        self.max_positions = max_positions
        self.stats: Counter = Counter()

    def positions(self, sentences: Sequence[Sequence[str]]) -> list[int]:
        """Model positions each sentence takes (pieces + specials): bucketing and length checks."""
        return [len(s) for s in sentences]

    def embed_batch(self, sentences: Sequence[Sequence[str]], layers: Sequence[int]) -> list[np.ndarray]:
        """Per sentence, ``(len(layers), n_words, dim)`` float32 (``layers`` already resolved)."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"kind": self.kind, "source": str(self.source), "num_layers": self.num_layers, "dim": self.dim}


class StaticEmbedder(Embedder):
    """A word-vector table as a one-layer backbone (word2vec, GloVe, NNLM rows)."""

    kind = "static"

    def __init__(self, vectors: WordVectors, source: Path, oov: str = "zero", kind: str = "static") -> None:
        if oov not in OOV_POLICIES:
            raise ConfigError(f"oov {oov!r} is not one of {', '.join(OOV_POLICIES)}")
        super().__init__(source, 1, vectors.vector_size)
        self.vectors, self.oov, self.kind = vectors, oov, kind
        self._table = np.vstack([vectors.vectors, np.zeros((1, self.dim), np.float32)])  # (V + 1, d); last: OOV

    def row(self, word: str) -> int:
        """Row of ``word`` (as written, else lower-cased); -1 when out of vocabulary."""
        index = self.vectors.index
        found = index.get(word, index.get(word.lower(), -1))
        if found < 0 and self.oov == "error":
            raise DataError(f"word not in the {len(self.vectors)} vectors of {self.source} (oov='error')", value=word)
        return found

    def embed_batch(self, sentences: Sequence[Sequence[str]], layers: Sequence[int]) -> list[np.ndarray]:
        out = []
        for words in sentences:
            rows = np.array([self.row(w) for w in words], dtype=np.int64)  # (n,)
            self.stats["words"] += len(words)
            self.stats["oov"] += int((rows < 0).sum())
            out.append(self._table[rows][None].repeat(len(layers), 0))  # (K, n, d); -1 picks the zero row
        return out


class ContextualEmbedder(Embedder):
    """Shared flow of the contextual models: :meth:`encode` to model inputs and a
    word-of-piece map, one forward pass, :func:`pool_pieces` on every chosen layer."""

    def __init__(self, model: torch.nn.Module, source: Path, num_layers: int, dim: int,
                 max_positions: int | None, pooling: str, device: str) -> None:
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
        super().__init__(source, num_layers, dim, max_positions)
        self.device = pick_device(device)
        self.model = model.to(self.device).eval()
        self.pooling = pooling

    def encode(self, sentences: Sequence[Sequence[str]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Model inputs (tensors, and flags such as ``unpad``) and ``word_of_piece (B, T)`` (-1 at
        specials and padding)."""
        raise NotImplementedError

    def embed_batch(self, sentences: Sequence[Sequence[str]], layers: Sequence[int]) -> list[np.ndarray]:
        inputs, word_of_piece = self.encode(sentences)
        lengths = [len(s) for s in sentences]
        W = max(lengths)
        with torch.inference_mode():
            encoded = self.model(**to_device(inputs, self.device))
            wop = move(word_of_piece, self.device)
            pooled = torch.stack([pool_pieces(encoded.layers[k].float(), wop, W, self.pooling)
                                  for k in layers], 1)  # (B, K, W, H)
        self.stats["words"] += sum(lengths)
        self.stats["empty_words"] += words_without_pieces(word_of_piece, lengths)
        array = pooled.cpu().numpy()
        return [np.ascontiguousarray(array[b, :, :n]) for b, n in enumerate(lengths)]


def _pad_rows(rows: Sequence[Sequence[int]], words: Sequence[Sequence[int]], pad_id: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad id rows: ``ids (B, T)``, ``mask (B, T)`` and ``word_of_piece (B, T)`` (-1 = none)."""
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    wop = torch.full((len(rows), T), -1, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for b, (row, word) in enumerate(zip(rows, words)):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        wop[b, : len(word)] = torch.tensor(word, dtype=torch.long)
        mask[b, : len(row)] = 1
    return ids, mask, wop


class SubwordEmbedder(ContextualEmbedder):
    """A sentence as ``head + the words' pieces + tail`` ids: :meth:`pieces` splits the words,
    :meth:`inputs` names the model's arguments."""

    head: list[int] = []  # ids before the first word ([CLS])
    tail: list[int] = []  # ids after the last word ([SEP])
    pad_id = 0

    def pieces(self, sentences: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        """Per sentence, per word, its piece ids."""
        raise NotImplementedError

    def inputs(self, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def positions(self, sentences: Sequence[Sequence[str]]) -> list[int]:
        extra = len(self.head) + len(self.tail)
        return [sum(len(p) for p in pieces) + extra for pieces in self.pieces(sentences)]

    def encode(self, sentences: Sequence[Sequence[str]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        rows, words = [], []
        for pieces in self.pieces(sentences):
            rows.append([*self.head, *(i for p in pieces for i in p), *self.tail])
            words.append([-1] * len(self.head) + [w for w, p in enumerate(pieces) for _ in p] + [-1] * len(self.tail))
        ids, mask, wop = _pad_rows(rows, words, self.pad_id)
        return self.inputs(ids, mask), wop


class BertEmbedder(SubwordEmbedder):
    """``[CLS] pieces [SEP]`` (RoBERTa: ``<s> pieces </s>``) through an encoder backbone of any
    encoder family (segment 0 everywhere)."""

    kind = "bert"

    def __init__(self, directory: Path, pooling: str = "first", device: str = "cpu") -> None:
        from muppets import families

        family = families.of_directory(directory)
        self.kind = family.name
        model = family.load(directory).backbone
        self.tok = family.tokenizer(directory)
        self.head, self.tail, self.pad_id = [self.tok.cls_id], [self.tok.sep_id], self.tok.pad_id
        cfg = model.cfg
        super().__init__(model, directory, cfg.num_layers + 1, cfg.hidden_size, cfg.max_positions,
                         pooling, device)

    def pieces(self, sentences: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        from muppets.transfer.features import word_pieces  # fine-tuning's split, so both agree

        return word_pieces(self.tok, sentences)

    def inputs(self, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        # unpad: the blocks skip the padding rows (muppets.nn.packing); pooling never reads them
        return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask, "unpad": True}


class GPTEmbedder(SubwordEmbedder):
    """The words joined by single spaces, as GPT reads text (no added token)."""

    kind = "gpt"

    def __init__(self, directory: Path, pooling: str = "last", device: str = "cpu") -> None:
        from muppets import families

        family = families.of_directory(directory)
        self.kind = family.name
        model = family.load(directory).backbone
        self.tok = family.tokenizer(directory)
        self.pad_id = self.tok.pad_id
        cfg = model.cfg
        super().__init__(model, directory, cfg.num_layers + 1, cfg.hidden_size, cfg.max_position_embeddings,
                         pooling, device)

    def pieces(self, sentences: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        """Word ``i > 0`` is encoded with its leading space, which is how GPT-2's pre-tokenizer
        cuts ``" ".join(words)``."""
        space = "" if self.tok.add_prefix_space else " "
        flat = self.tok.encode_batch([w if i == 0 else space + w for words in sentences for i, w in enumerate(words)])
        out, start = [], 0
        for words in sentences:
            out.append(flat[start: start + len(words)])
            start += len(words)
        return out

    def inputs(self, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"input_ids": ids, "attention_mask": mask}


class ElmoEmbedder(ContextualEmbedder):
    """``<s> words </s>`` as characters through the biLM backbone; one position per word."""

    kind = "elmo"

    def __init__(self, directory: Path, device: str = "cpu") -> None:
        from muppets.recipes.elmo_pretrain import load_elmo
        from muppets.tokenizers.characters import CharacterMapper

        lm, vocab = load_elmo(directory)
        words = vocab.settings
        self.lowercase = words.lowercase  # the char CNN saw the vocabulary's spelling
        self.chars = CharacterMapper(lm.cfg.max_chars, words.bos_token, words.eos_token, words.pad_token)
        super().__init__(lm.backbone, directory, lm.cfg.num_layers + 1, lm.cfg.output_dim, None, "first", device)

    def positions(self, sentences: Sequence[Sequence[str]]) -> list[int]:
        return [len(s) + 2 for s in sentences]

    def encode(self, sentences: Sequence[Sequence[str]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        rows = [[w.lower() for w in s] if self.lowercase else list(s) for s in sentences]
        char_ids, mask = self.chars.batch(rows, add_boundaries=True)  # (B, T, C), (B, T)
        steps = torch.arange(mask.shape[1])[None, :] - 1  # (1, T): position t holds word t - 1
        lengths = torch.tensor([len(s) for s in sentences])[:, None]  # (B, 1)
        wop = torch.where((steps >= 0) & (steps < lengths), steps, torch.full_like(steps, -1))  # (B, T)
        return {"char_ids": char_ids, "mask": mask}, wop


# ----------------------------------------------------------------------------- locating models


def _config(directory: Path) -> dict | None:
    path = directory / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not readable JSON: {err}") from err
    return data if isinstance(data, dict) else None


def locate_model(name: str | Path) -> tuple[str, Path]:
    """``(kind, path)`` of what ``name`` points at (see the module docstring's table)."""
    from muppets.recipes.elmo_pretrain import FORMAT as ELMO_FORMAT
    from muppets import families
    from muppets.transfer.finetune import resolve_model

    if str(name) == "minilm":
        minilm = resolve_model("minilm")
        return families.of_directory(minilm).name, minilm
    path = resolve_model_path(name)  # a path as given (a run: its final/), else a model id in the HF cache
    if path.is_file():
        return "static", path
    if not path.is_dir():
        raise ConfigError(f"model {str(name)!r}: no such file or directory ({path})")
    for candidate in (path, path / "final"):
        meta = _config(candidate)
        if meta is None:
            continue
        if meta.get("format") == ELMO_FORMAT:
            return "elmo", candidate
        if {"context_size", "embedding_dim"} <= set(meta) and (candidate / "vocab").is_dir():
            return "nnlm", candidate
        if "model_type" in meta and any(candidate.glob("*.safetensors")):
            return families.of_directory(candidate).name, candidate
    for file in _RUN_VECTORS:
        if (path / file).is_file():
            return "static", path / file
    raise ConfigError(f"model {str(name)!r}: unknown model kind at {path} (expected an HF model directory "
                      "(BERT, RoBERTa, DistilBERT, ELECTRA, GPT), 'minilm', an ELMo / NNLM / word2vec run, "
                      "or a word-vector file)")


def load_embedder(name: str | Path, pooling: str = "auto", device: str = "cpu", oov: str = "zero",
                  vector_format: str = "auto") -> Embedder:
    """The :class:`Embedder` of the model ``name`` points at (:func:`locate_model`)."""
    resolve_pooling("", pooling)  # a bad value fails before the model is located
    kind, path = locate_model(name)
    pooling = resolve_pooling(kind, pooling)
    log.info("embedding with the %s model at %s", kind, path)
    from muppets import families

    if families.is_family(kind):
        return (GPTEmbedder if families.get(kind).causal else BertEmbedder)(path, pooling, device)
    if kind == "elmo":
        return ElmoEmbedder(path, device)
    if kind == "nnlm":
        from muppets.recipes.nnlm_pretrain import load_nnlm

        model, vocab = load_nnlm(path)
        return StaticEmbedder(model.word_vectors(vocab.words), path, oov, kind="nnlm")
    try:
        vectors = WordVectors.load(path, fmt=vector_format)
    except DataError as err:
        raise ConfigError(f"model {str(name)!r}: a file is read as word vectors (word2vec text/binary or "
                          f"GloVe), and this one is not: {err}") from err
    return StaticEmbedder(vectors, path, oov)
