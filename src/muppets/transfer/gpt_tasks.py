"""GPT-style fine-tuning (Radford et al. 2018, §3.3): task input transformations, a linear head
on the last token, and the auxiliary language-model loss.

- **Inputs.** Three new tokens are added to the byte-level vocabulary (their embeddings start
  random, as in the paper): classification ``<|start|> text <|extract|>``; entailment and other
  pairs ``<|start|> premise <|delim|> hypothesis <|extract|>``; similarity the same with *both*
  orders, whose final states are added (``orderings=2``); multiple choice one
  ``<|start|> context <|delim|> answer <|extract|>`` row per answer. :class:`GPTTaskTokenizer`
  gives :mod:`muppets.transfer.features` these layouts, so every task reader, batching and
  decoding step is shared with BERT.
- **Head.** The top-layer state of the last (``extract``) token feeds a linear layer
  (:class:`~muppets.heads.SentenceVector` with ``pool="last"``); token-level heads (tagging,
  spans) read every position as for BERT, each token seeing only its left context.
- **Loss.** ``L3 = L2 + λ · L1``: the task loss plus ``lm_coef`` times the mean next-token loss
  on the task's own inputs (0 disables it). In training the LM loss is its own term ``"lm"``:
  summed over the predicted tokens and divided by their count over the whole update (all
  micro-batches and ranks, :class:`~muppets.transfer.batching.EpochData` with
  ``lm_orderings``), so accumulation and DDP give the big-batch update, as for every other
  loss. A pair read in both orders is one text: only its first order feeds the LM loss.

A fine-tuned GPT task model is saved as an HF GPT-2 directory (``GPT2LMHeadModel`` loads its
backbone and tokenizer, added tokens included) plus ``task_head.safetensors`` and a
``muppets_task`` entry in ``config.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from tokenizers import AddedToken

from muppets.errors import CheckpointError
from muppets.heads import KINDS, TaskModel, build_head
from muppets.interop.hf_gpt import load_hf_gpt, save_hf_gpt
from muppets.interop.hf_tasks import names_entry
from muppets.interop.model_card import Provenance
from muppets.interop.safetensors_io import read_file, read_json_object, write_weights
from muppets.models.gpt import GPTBackbone, resize_token_embeddings
from muppets.nn.encoded import Encoded
from muppets.nn.linear_ce import linear_cross_entropy
from muppets.tokenizers.bpe import ByteLevelBPETokenizer
from muppets.tokenizers.wordpiece import _longest_first, content_budget
from muppets.transfer.batching import lm_targets

log = logging.getLogger(__name__)

TASK_TOKENS = ("<|start|>", "<|delim|>", "<|extract|>")
HEAD_FILE = "task_head.safetensors"


class GPTTaskTokenizer:
    """A byte-level BPE with GPT's task tokens, speaking the tokenizer interface that
    :mod:`muppets.transfer.features` uses (``cls_id`` = start, ``sep_id`` = delim, and
    :meth:`encode_for_model_batch` ending inputs with extract).

    Texts are encoded with a leading space (``add_prefix_space``), as words inside running text
    and as pre-split words (tagging) need.
    """

    def __init__(self, bpe: ByteLevelBPETokenizer) -> None:
        bpe = bpe.with_prefix_space(True)
        missing = [t for t in TASK_TOKENS if bpe.token_to_id(t) is None]
        if missing:
            bpe.backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
            bpe = ByteLevelBPETokenizer.from_json(bpe.to_json())  # fresh cached vocab size
        self.bpe = bpe
        self.cls_id, self.sep_id, self.extract_id = (bpe.token_to_id(t) for t in TASK_TOKENS)

    @classmethod
    def load(cls, directory: str | Path) -> GPTTaskTokenizer:
        return cls(ByteLevelBPETokenizer.load(directory))

    @property
    def backend(self):
        return self.bpe.backend

    @property
    def vocab_size(self) -> int:
        return self.bpe.vocab_size

    @property
    def pad_id(self) -> int:
        return self.bpe.pad_id

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.bpe.encode_batch(texts)

    def encodings(self, texts: Sequence[str]) -> list:
        """Full encodings (ids, offsets, word ids) of texts, as the WordPiece tokenizer's."""
        return self.bpe.backend.encode_batch(list(texts), add_special_tokens=False)

    def encode_words(self, sentences: Sequence[Sequence[str]]) -> list:
        """Encodings of sentences already split into words, as the WordPiece tokenizer's."""
        return self.bpe.backend.encode_batch([list(ws) for ws in sentences], is_pretokenized=True,
                                             add_special_tokens=False)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.bpe.decode(ids, skip_special_tokens)

    def encode_for_model_batch(self, texts: Sequence[str], text_pairs: Sequence[str] | None = None,
                               max_length: int | None = None) -> list[dict[str, list[int]]]:
        """``start a (delim b) extract``, cut longest-first to ``max_length``; no segments."""
        budget = content_budget(texts, text_pairs, max_length)
        firsts = self.encode_batch(texts)
        seconds = [None] * len(firsts) if text_pairs is None else self.encode_batch(text_pairs)
        out = []
        for a, b in zip(firsts, seconds):
            if budget is not None:
                a, b = _longest_first(a, b, budget)
            ids = [self.cls_id, *a, *([] if b is None else [self.sep_id, *b]), self.extract_id]
            out.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)})
        return out

    def save(self, directory: str | Path) -> Path:
        return self.bpe.save(directory)


class CausalTaskBackbone(nn.Module):
    """A GPT backbone under the task-model call; segment ids are unused (delimiters separate texts)."""

    def __init__(self, gpt: GPTBackbone) -> None:
        super().__init__()
        self.gpt = gpt
        self.cfg = gpt.cfg

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> Encoded:
        return self.gpt(input_ids, attention_mask)


class GPTTaskModel(TaskModel):
    """GPT backbone + task head; training loss ``task + lm_coef · LM`` (GPT §3.3, eq. 5)."""

    family = "gpt"  # its muppets.families entry (saving writes a GPT directory)

    def __init__(self, gpt: GPTBackbone, head: nn.Module, kind: str, lm_coef: float = 0.5) -> None:
        super().__init__(CausalTaskBackbone(gpt), head, kind)
        self.lm_coef = lm_coef

    @property
    def lm_orderings(self) -> int:
        """Rows per input (2: a pair in both orders) of which the LM loss reads the first; 0 = off."""
        return getattr(getattr(self.head, "vector", None), "orderings", 1) if self.lm_coef > 0 else 0

    def auxiliary_losses(self, encoded: Encoded, input_ids: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """``{"lm": (lm_coef · summed next-token loss, predicted tokens)}``; {} when lm_coef is 0."""
        if self.lm_coef == 0.0:
            return {}
        total, count = self.lm_loss_sum(encoded, input_ids)
        return {"lm": (self.lm_coef * total, count)}

    def lm_loss_sum(self, encoded: Encoded, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed next-token cross entropy over the tokens :func:`lm_targets` picks from the
        inputs ``(B·R, T)`` (R = :attr:`lm_orderings`), and their number."""
        R = self.lm_orderings or 1
        mask = lm_targets(encoded.mask, R)  # (B, T - 1): position t predicts t + 1
        rows, targets = encoded.last[::R, :-1][mask], input_ids[::R, 1:][mask]  # (M, H), (M,)
        weight = self.backbone.gpt.embeddings.tokens.weight  # tied output layer
        total, _ = linear_cross_entropy(rows, weight, None, targets)
        return total, mask.sum()


def build_gpt_task_model(directory: str | Path, kind: str, num_labels: int, tok: GPTTaskTokenizer,
                         orderings: int = 1, lm_coef: float = 0.5,
                         dropout_p: float | None = None, pool: str = "last",
                         dropout: float | None = None) -> GPTTaskModel:
    """A fresh task model on an HF GPT-2 / GPT-1 directory, the embeddings grown for ``tok``;
    ``dropout`` replaces every dropout of the backbone (and the head's unless ``dropout_p``)."""
    lm = load_hf_gpt(directory) if dropout is None else load_hf_gpt(
        directory, hidden_dropout=dropout, embedding_dropout=dropout, attention_dropout=dropout)
    if tok.vocab_size > lm.cfg.vocab_size:
        resize_token_embeddings(lm, tok.vocab_size)
    cfg = lm.cfg
    head = build_head(kind, cfg.hidden_size, num_labels, cfg.hidden_dropout if dropout_p is None else dropout_p,
                      cfg.initializer_range, pool=pool, orderings=orderings)
    return GPTTaskModel(lm.backbone, head, kind, lm_coef)


def save_gpt_task_model(model: GPTTaskModel, directory: str | Path, tok: GPTTaskTokenizer,
                        labels: Sequence[str] = (), provenance: Provenance | None = None,
                        label_names: Sequence[str] = ()) -> Path:
    """HF GPT-2 directory (backbone, tokenizer) + ``task_head.safetensors`` + ``muppets_task``
    (with the labels' readable names as ``label_names`` where they differ from the labels)."""
    directory = Path(directory)
    vector = getattr(model.head, "vector", None)
    task = {"kind": model.kind, "labels": list(labels), **names_entry(labels, label_names), "lm_coef": model.lm_coef,
            "orderings": getattr(vector, "orderings", 1), "pool": getattr(vector, "pool", "last"),
            "num_labels": _num_labels(model)}
    save_hf_gpt(model.backbone.gpt, directory, tok, extra_config={"muppets_task": task}, provenance=provenance)
    write_weights(dict(model.head.state_dict()), directory / HEAD_FILE, {"format": "pt"})
    return directory


def load_gpt_task_model(directory: str | Path) -> GPTTaskModel:
    """A task model saved by :func:`save_gpt_task_model`."""
    directory = Path(directory)
    task = read_json_object(directory / "config.json").get("muppets_task")
    if not task or task.get("kind") not in KINDS or not (directory / HEAD_FILE).is_file():
        raise CheckpointError(f"{directory}: not a GPT task model (no muppets_task kind or {HEAD_FILE})")
    lm = load_hf_gpt(directory)
    cfg = lm.cfg
    head = build_head(task["kind"], cfg.hidden_size, task.get("num_labels", 0), cfg.hidden_dropout,
                      cfg.initializer_range, pool=task.get("pool", "last"), orderings=task.get("orderings", 1))
    head.load_state_dict(read_file(directory / HEAD_FILE))
    return GPTTaskModel(lm.backbone, head, task["kind"], task.get("lm_coef", 0.0))


def _num_labels(model: TaskModel) -> int:
    classifier = getattr(model.head, "classifier", None)
    return classifier.out_features if classifier is not None and model.kind in ("classify", "pair", "tag") else 0
