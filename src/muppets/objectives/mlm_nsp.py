"""BERT pretraining batches (MLM + NSP, or MLM alone) from a prepared corpus, as a deterministic step source.

Epoch ``e`` is a plan drawn from ``(seed, e)``: sentence pairs with IsNext/NotNext labels
(:mod:`muppets.objectives.nsp`), or without NSP whole-corpus packed sequences
(:func:`muppets.objectives.mlm.plan_packed`). Plans differ in length from epoch to epoch and
each epoch covers its own plan exactly once (:class:`~muppets.objectives.step_data.PretrainingData`).
Example ``g`` of the whole run (``g = step * batch_size + i``) is masked with a generator seeded
by ``(seed, g)``. Every batch is thus a pure function of ``(seed, step)``: a resumed run sees
exactly the batches it would have seen, each DDP rank builds just its own slice of the global
batch, and the masks differ every epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from muppets.data.heldout import CorpusSplit, split_corpus, split_documents  # noqa: F401 (split_documents: re-exported)
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.mlm import IGNORE, MaskingConfig, PackedPlan, mask_sequence, plan_packed
from muppets.objectives.nsp import PairPlan, plan_pairs
from muppets.objectives.step_data import EpochCache, PretrainingData, in_batches

log = logging.getLogger(__name__)


@dataclass
class SpecialIds:
    pad: int
    cls: int
    sep: int
    mask: int
    all: list[int] = field(default_factory=list)  # every special id (never a random replacement)


@dataclass
class PretrainDataConfig:
    max_seq_len: int = 128  # tokens per sequence including [CLS] and the [SEP]s
    short_seq_prob: float = 0.1  # share of instances with a random shorter target length
    nsp: bool = True  # sentence pairs with IsNext/NotNext labels; False = MLM alone on packed text, no NSP loss
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    eval_fraction: float = 0.02  # share held out for evaluation: of the documents (at least 1; 2 with NSP), or of the text when they are few or long (muppets.data.heldout)
    eval_examples: int = 512  # held-out sequences scored at every evaluation
    eval_masked_lm_prob: float = 0.0  # held-out masking rate (0 = the training rate); 0.15 keeps runs trained at other rates comparable
    split_seed: int = 1234  # fixes which documents (or blocks of text) are held out, independent of the run seed

    def __post_init__(self) -> None:
        checks = [("max_seq_len", self.max_seq_len >= 8, ">= 8 ([CLS], two segments and their [SEP]s)"),
                  ("short_seq_prob", 0.0 <= self.short_seq_prob <= 1.0, "in [0, 1]"),
                  ("eval_examples", self.eval_examples >= 1, ">= 1"),
                  ("eval_masked_lm_prob", 0.0 <= self.eval_masked_lm_prob < 1.0, "in [0, 1)")]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(f"{name}: {getattr(self, name)!r} must be {rule}", key=name)


class BertPretrainingData(PretrainingData):
    """The trainer's ``StepData`` for BERT: batches of ``input_ids``, ``token_type_ids``,
    ``attention_mask`` ``(B, T)``, ``mlm_positions``, ``mlm_labels`` ``(B, P)`` and, with NSP,
    ``nsp_labels`` ``(B,)``."""

    def __init__(self, corpus: TokenCorpus, special: SpecialIds, cfg: PretrainDataConfig,
                 batch_size: int, accumulation: int, seed: int,
                 is_continuation: np.ndarray | None = None) -> None:
        super().__init__(batch_size, accumulation, seed)
        self.corpus, self.special, self.cfg = corpus, special, cfg
        self.is_continuation = is_continuation
        if cfg.masking.whole_word and is_continuation is None:
            raise ConfigError("whole-word masking needs the tokenizer's ##-piece lookup")
        self.units = stored_units(corpus, cfg.masking)
        for name, rate in (("masking.masked_lm_prob", cfg.masking.masked_lm_prob),
                           ("eval_masked_lm_prob", cfg.eval_masked_lm_prob or cfg.masking.masked_lm_prob)):
            if not 0 < rate < 1:
                raise ConfigError(f"data.{name}={rate}: a rate strictly between 0 and 1")
            warn_if_capped(name, rate, cfg.masking.max_predictions, cfg.max_seq_len)
        vocab = np.arange(corpus.vocab_size)
        self.random_ids = vocab[~np.isin(vocab, special.all)]
        self.split = split_for(corpus, cfg)
        self.corpus = self.split.corpus  # the split's documents (pieces of the stored ones after a text split)
        self.train_docs, self.eval_docs = self.split.train_docs, self.split.eval_docs
        self._plan = EpochCache(self._draw_plan)
        if len(self._plan(0)) == 0:
            raise ConfigError(f"{corpus.directory}: the training documents yield no instances")
        log.info("pretraining data: %d train / %d held-out documents, %d %s in epoch 0",
                 len(self.train_docs), len(self.eval_docs), len(self._plan(0)),
                 "sentence pairs" if cfg.nsp else "packed sequences")

    def epoch_length(self, epoch: int) -> int:
        return len(self._plan(epoch))

    def _draw_plan(self, epoch: int) -> PairPlan | PackedPlan:
        plan = self.make_plan(self.train_docs, np.random.default_rng([self.seed, 7, epoch]))
        log_plan(plan, "training", f" (epoch {epoch})")
        return plan

    def make_plan(self, docs: np.ndarray, rng: np.random.Generator) -> PairPlan | PackedPlan:
        """Sentence pairs (NSP) or packed sequences (MLM alone) over documents ``docs``."""
        plan = plan_pairs if self.cfg.nsp else plan_packed
        return plan(self.corpus.sentence_ends, self.corpus.document_ends, docs, self.cfg.max_seq_len,
                    self.cfg.short_seq_prob, rng)

    # --- StepData protocol -------------------------------------------------------------
    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        out = {"mlm": float((batch["mlm_labels"] != IGNORE).sum())}
        if "nsp_labels" in batch:
            out["nsp"] = float(batch["nsp_labels"].numel())
        return out

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    # --- building examples -------------------------------------------------------------
    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        """Collate global examples ``examples`` into one padded batch."""
        epochs, rows = self.locate(examples)
        return self.collate([self.build(self._plan(int(e)), int(r), self.mask_rng(g))
                             for g, e, r in zip(examples, epochs, rows)])

    def example(self, g: int) -> dict:
        """Global example ``g``: its instance from its epoch's plan and a fresh mask."""
        (epoch,), (row,) = self.locate(range(g, g + 1))
        return self.build(self._plan(int(epoch)), int(row), self.mask_rng(g))

    def mask_rng(self, g: int) -> np.random.Generator:
        """The generator of global example ``g``'s mask."""
        return np.random.default_rng([self.seed, 11, g])

    def build(self, plan: PairPlan | PackedPlan, row: int, rng: np.random.Generator,
              masking: MaskingConfig | None = None) -> dict:
        """Instance ``row`` of ``plan``, masked with ``rng`` (and ``masking``, default the
        training one): ``ids``, ``segments`` ``(T,)``, ``positions``, ``labels`` ``(P,)`` and
        ``nsp`` (1 = NotNext)."""
        if isinstance(plan, PairPlan):
            ids, segments, maskable = self.pair(plan, row)
            nsp = int(plan.is_random[row])
        else:
            ids, segments, maskable = self.packed(plan, row)
            nsp = 0
        units = None if self.units is None else self.sequence_units(plan, row)
        m = mask_sequence(ids, maskable, masking or self.cfg.masking, self.special.mask, self.random_ids, rng,
                          self.is_continuation, units)
        return {"ids": m.input_ids, "segments": segments, "positions": m.positions, "labels": m.labels, "nsp": nsp}

    def pair(self, plan: PairPlan, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``[CLS] A [SEP] B [SEP]``: ids, segments ``(T,)`` and the maskable positions."""
        toks, sp = self.corpus.tokens, self.special
        a = np.asarray(toks[plan.a_lo[row]:plan.a_hi[row]], dtype=np.int64)
        b = np.asarray(toks[plan.b_lo[row]:plan.b_hi[row]], dtype=np.int64)
        ids = np.concatenate([[sp.cls], a, [sp.sep], b, [sp.sep]])
        segments = np.concatenate([np.zeros(len(a) + 2, np.int64), np.ones(len(b) + 1, np.int64)])
        maskable = np.concatenate([np.arange(1, len(a) + 1), np.arange(len(a) + 2, len(a) + 2 + len(b))])
        return ids, segments, maskable

    def packed(self, plan: PackedPlan, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``[CLS] text [SEP]`` (document separators inside): ids, segments ``(T,)``, maskable positions."""
        body, is_sep = plan.sequence(row, self.corpus.tokens, self.special.sep)
        ids = np.concatenate([[self.special.cls], body, [self.special.sep]])
        return ids, np.zeros(len(ids), np.int64), 1 + np.flatnonzero(~is_sep)

    def sequence_units(self, plan: PairPlan | PackedPlan, row: int) -> np.ndarray:
        """``(T,)`` unit-start bits of instance ``row``, aligned with its ids (0 at [CLS] and the [SEP]s)."""
        units = self.units
        if isinstance(plan, PairPlan):
            a, b = units[plan.a_lo[row]:plan.a_hi[row]], units[plan.b_lo[row]:plan.b_hi[row]]
            return np.concatenate([[0], a, [0], b, [0]]).astype(np.uint8)
        body, _ = plan.sequence(row, units, 0)  # the same cut as the ids: the bits of its tokens
        return np.concatenate([[0], body, [0]]).astype(np.uint8)

    def collate(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate(rows, self.special.pad, self.cfg.masking.max_predictions, self.cfg.nsp)

    def eval_batches(self, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Fixed held-out batches: the same documents, instances and masks at every evaluation."""
        plan = self.make_plan(self.eval_docs, np.random.default_rng([self.cfg.split_seed, 13]))
        log_plan(plan, "held-out")
        n = min(self.cfg.eval_examples, len(plan))
        if isinstance(plan, PairPlan):
            check_nsp_eval(plan, n, len(self.eval_docs))
        masking = self.cfg.masking
        if self.cfg.eval_masked_lm_prob:
            masking = replace(masking, masked_lm_prob=self.cfg.eval_masked_lm_prob)
        rows = [self.build(plan, r, np.random.default_rng([self.cfg.split_seed, 17, r]), masking) for r in range(n)]
        return in_batches(rows, batch_size, self.collate)


def stored_units(corpus: TokenCorpus, masking: MaskingConfig) -> np.ndarray | None:
    """The corpus' unit-start bits when ``masking`` needs them (None for piece masking); a
    corpus prepared without them, or without the level asked for, is a :class:`ConfigError`."""
    levels = masking.unit_levels()
    if not levels:
        return None
    what = f"data.masking.level={masking.level}" + (f" (levels {levels})" if masking.level == "mixture" else "")
    if corpus.units is None:
        raise ConfigError(f"{what} masks units whose boundaries are stored when the corpus is prepared, and "
                          f"the prepared corpus {corpus.directory} has none: set corpus.segmenter (jieba for "
                          "Chinese, pretokenizer for English; corpus.entity_lexicon for entities) and prepare it again")
    stored = corpus.meta["units"].get("levels", [])
    missing = [name for name in levels if name not in stored]
    if missing:
        raise ConfigError(f"{what}: the prepared corpus {corpus.directory} stores the levels {stored}, not "
                          f"{missing}" + (" (set corpus.entity_lexicon and prepare it again)" if "entity" in missing else ""))
    return np.asarray(corpus.units)


def warn_if_capped(name: str, rate: float, max_predictions: int, max_seq_len: int) -> None:
    """Warn when ``max_predictions`` keeps a full sequence below the masking ``rate`` (e.g.
    40% of 128 tokens is 50 targets, more than the default cap of 20)."""
    wanted = round(rate * (max_seq_len - 2))
    if wanted > max_predictions:
        log.warning("data.%s=%g asks for %d targets in a full %d-token sequence, but data.masking.max_predictions="
                    "%d caps it (an effective rate of %.0f%%); raise max_predictions", name, rate, wanted,
                    max_seq_len, max_predictions, 100 * max_predictions / (max_seq_len - 2))


def log_plan(plan: PairPlan | PackedPlan, which: str, when: str = "") -> None:
    """Log a plan's size (and NSP's real NotNext rate); warn when NotNext draws failed."""
    if isinstance(plan, PackedPlan):
        log.info("%s MLM sequences%s: %s", which, when, f"{len(plan):,}")
        return
    log.info("%s NSP pairs%s: %s", which, when, plan.summary())
    if plan.not_next_failed > 0.01 * max(plan.not_next_drawn, 1):
        log.warning("%s NSP pairs%s: %d of %d NotNext draws found no other document; those instances "
                    "were dropped", which, when, plan.not_next_failed, plan.not_next_drawn)


def check_nsp_eval(plan: PairPlan, used: int, n_docs: int, enough: int = 100) -> None:
    """Warn when the held-out NSP pairs cannot measure NSP accuracy: the ``used`` first pairs
    hold one label only, or the held-out documents yield so few pairs that its standard error
    exceeds 5 points."""
    labels = plan.is_random[:used]
    if used == 0 or labels.all() or not labels.any():
        log.warning("the %d held-out NSP pairs (%d documents) hold one label only: NSP accuracy cannot be "
                    "evaluated; raise data.eval_fraction", used, n_docs)
    elif len(plan) < enough:
        log.warning("only %d held-out NSP pairs (%d documents): NSP accuracy has a standard error of about "
                    "%.0f points; raise data.eval_fraction", len(plan), n_docs, 50 / np.sqrt(len(plan)))


NSP_DOCUMENT_TOKENS = 2048  # with a text split, the training text is cut into documents of about this size (a chapter)


def split_for(corpus: TokenCorpus, cfg: PretrainDataConfig) -> CorpusSplit:
    """The held-in / held-out split (:func:`~muppets.data.heldout.split_corpus`); with NSP at
    least 2 documents on each side, so that both have NotNext pairs (a B segment from another
    document of the same side), and a text split cuts the training text into pseudo-documents
    of about :data:`NSP_DOCUMENT_TOKENS`."""
    return split_corpus(corpus, cfg.eval_fraction, cfg.split_seed, min_each=2 if cfg.nsp else 1,
                        document_tokens=NSP_DOCUMENT_TOKENS if cfg.nsp else 0)


def collate(rows: Sequence[dict], pad_id: int, max_predictions: int, nsp: bool) -> dict[str, torch.Tensor]:
    """Pad examples to the longest in the batch; MLM targets padded to ``max_predictions``."""
    B, T = len(rows), max(len(r["ids"]) for r in rows)
    P = max(max_predictions, max(len(r["positions"]) for r in rows))
    ids = np.full((B, T), pad_id, np.int64)
    segments = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), bool)
    positions = np.zeros((B, P), np.int64)
    labels = np.full((B, P), IGNORE, np.int64)
    for i, r in enumerate(rows):
        n, k = len(r["ids"]), len(r["positions"])
        ids[i, :n], segments[i, :n], mask[i, :n] = r["ids"], r["segments"], True
        positions[i, :k], labels[i, :k] = r["positions"], r["labels"]
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(segments),
             "attention_mask": torch.from_numpy(mask), "mlm_positions": torch.from_numpy(positions),
             "mlm_labels": torch.from_numpy(labels)}
    if nsp:
        batch["nsp_labels"] = torch.tensor([r["nsp"] for r in rows], dtype=torch.long)
    return batch
