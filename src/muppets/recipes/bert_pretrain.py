"""BERT pretraining from raw text, end to end: tokenizer -> prepared corpus -> MLM+NSP -> HF dir.

``muppets pretrain configs/bert-mini.yaml key=value …`` runs :func:`run`. Every stage reuses
its output when it already exists and matches (a tokenizer directory, a prepared corpus whose
tokenizer fingerprint matches), so re-running the command resumes rather than restarts. The
same command under ``torchrun --nproc_per_node=K`` trains with DDP: rank 0 prepares the
tokenizer and corpus while the other ranks wait.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from muppets.config import apply_overrides, from_dict, load_file, to_dict, write_json_atomic
from muppets.data.readers import iter_documents
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.interop.hf_bert import load_hf_bert, save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.objectives.mlm import IGNORE
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds
from muppets.recipes.common import CorpusSection, pick_device, prepare_once
from muppets.paths import resolve_data_path
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train import TrainConfig, Trainer
from muppets.train.distributed import barrier, init_distributed

log = logging.getLogger(__name__)


@dataclass
class ModelSection:
    preset: str = "bert-mini"  # bert-tiny | bert-mini | bert-small | bert-medium | bert-base | bert-large
    overrides: dict = field(default_factory=dict)  # BertConfig fields to change, e.g. {hidden_dropout: 0.0}
    init_from: str = ""  # HF BERT directory to continue pretraining from ("" = random init)


@dataclass
class TokenizerSection:
    path: str = ""  # existing tokenizer dir or vocab.txt ("" = train one into <run_dir>/tokenizer)
    vocab_size: int = 30522  # size of a newly trained vocabulary
    lowercase: bool = True  # lower-case (and strip accents) before WordPiece
    min_frequency: int = 2  # pieces seen fewer times are not added
    max_documents: int = 0  # train on at most this many documents (0 = all)


@dataclass
class PretrainConfig:
    run_dir: str = "runs/bert-mini"  # checkpoints, logs, tokenizer, corpus and final/ go here
    model: ModelSection = field(default_factory=ModelSection)
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    corpus: CorpusSection = field(default_factory=CorpusSection)
    data: PretrainDataConfig = field(default_factory=PretrainDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval_batch_size: int = 64  # sequences per evaluation batch
    device: str = "auto"  # auto (cuda:<local rank> when CUDA is available, else cpu) | cpu | cuda:N


def load_config(path: str | Path | None, overrides: list[str]) -> PretrainConfig:
    """YAML/JSON file (optional) + dotted overrides, type-checked."""
    cfg = from_dict(PretrainConfig, load_file(path)) if path else PretrainConfig()
    return apply_overrides(cfg, overrides)


# ----------------------------------------------------------------------------- stages


def ensure_tokenizer(cfg: PretrainConfig, run_dir: Path) -> WordPieceTokenizer:
    """Load the configured tokenizer, or train one on the corpus (reused if already trained)."""
    sec = cfg.tokenizer
    if sec.path:
        path = resolve_data_path(sec.path)
        if path.is_file():
            return WordPieceTokenizer.from_vocab(path, lowercase=sec.lowercase)
        return WordPieceTokenizer.load(path)
    out = run_dir / "tokenizer"
    if (out / "tokenizer.json").is_file():
        return WordPieceTokenizer.load(out)
    log.info("training a %d-token WordPiece vocabulary on %s", sec.vocab_size, cfg.corpus.inputs)
    tok = WordPieceTokenizer.train(_training_texts(cfg), sec.vocab_size, lowercase=sec.lowercase,
                                   min_frequency=sec.min_frequency,
                                   model_max_length=cfg.data.max_seq_len)
    tok.save(out)
    return tok


def _training_texts(cfg: PretrainConfig):
    inputs = [resolve_data_path(p) for p in cfg.corpus.inputs]
    for i, doc in enumerate(iter_documents(inputs, cfg.corpus.format, errors=cfg.corpus.errors)):
        if cfg.tokenizer.max_documents and i >= cfg.tokenizer.max_documents:
            return
        yield from doc.paragraphs


def ensure_corpus(cfg: PretrainConfig, tok: WordPieceTokenizer, run_dir: Path) -> TokenCorpus:
    """Open the prepared corpus, preparing it first unless it exists for this tokenizer."""
    return prepare_once(cfg.corpus, tok, run_dir)


def build_model(cfg: PretrainConfig, tok: WordPieceTokenizer) -> BertForPreTraining:
    """A random BERT of the preset (or ``model.init_from``); without NSP its pooler and NSP
    head are frozen (see :meth:`BertForPreTraining.train_nsp`)."""
    return _new_or_loaded(cfg, tok).train_nsp(cfg.data.nsp)


def _new_or_loaded(cfg: PretrainConfig, tok: WordPieceTokenizer) -> BertForPreTraining:
    if cfg.model.init_from:
        model = load_hf_bert(resolve_data_path(cfg.model.init_from))
        if model.cfg.vocab_size < tok.vocab_size:
            raise ConfigError(f"model.init_from has {model.cfg.vocab_size} tokens, the tokenizer "
                              f"{tok.vocab_size}")
        return model
    overrides = {"vocab_size": tok.vocab_size, "pad_token_id": tok.pad_id,
                 "max_position_embeddings": max(512, cfg.data.max_seq_len), **cfg.model.overrides}
    return BertForPreTraining(BertConfig.preset(cfg.model.preset, **overrides))


def special_ids(tok: WordPieceTokenizer) -> SpecialIds:
    ids = [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]
    return SpecialIds(pad=tok.pad_id, cls=tok.cls_id, sep=tok.sep_id, mask=tok.mask_id, all=ids)


# ----------------------------------------------------------------------------- evaluation


def evaluator(data: BertPretrainingData, batch_size: int):
    """A trainer ``evaluate`` callback: MLM accuracy / perplexity and NSP accuracy on the fixed
    held-out batches (documents never trained on)."""
    batches = data.eval_batches(batch_size)

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        sums = {"mlm_loss": 0.0, "mlm_correct": 0.0, "mlm_n": 0.0,
                "nsp_loss": 0.0, "nsp_correct": 0.0, "nsp_n": 0.0}
        device = next(model.parameters()).device
        for batch in batches:
            out = model(**{k: v.to(device) for k, v in batch.items()})
            for term in out.loss_sums:
                sums[f"{term}_loss"] += float(out.loss_sums[term])
                sums[f"{term}_correct"] += float(out.correct[term])
                sums[f"{term}_n"] += float(out.counts[term])
        return summarize(sums)

    return evaluate


def summarize(sums: dict[str, float]) -> dict[str, float]:
    out = {}
    if sums["mlm_n"]:
        out["mlm_accuracy"] = sums["mlm_correct"] / sums["mlm_n"]
        out["mlm_loss"] = sums["mlm_loss"] / sums["mlm_n"]
        out["mlm_perplexity"] = math.exp(min(out["mlm_loss"], 50.0))
    if sums["nsp_n"]:
        out["nsp_accuracy"] = sums["nsp_correct"] / sums["nsp_n"]
        out["nsp_loss"] = sums["nsp_loss"] / sums["nsp_n"]
    return out


def unigram_baseline(data: BertPretrainingData, batch_size: int) -> dict[str, float]:
    """What token frequencies alone score on the same held-out targets: accuracy of always
    predicting the most frequent training token, perplexity of the unigram distribution, and
    the NSP majority class."""
    corpus, counts = data.corpus, np.zeros(data.corpus.vocab_size, dtype=np.int64)
    for d in data.train_docs:
        counts += np.bincount(corpus.document_tokens(int(d)), minlength=len(counts))
    logp = np.log((counts + 1) / (counts.sum() + len(counts)))  # add-one smoothed
    top, hits, nll, n, nsp = int(counts.argmax()), 0, 0.0, 0, []
    for batch in data.eval_batches(batch_size):
        labels = batch["mlm_labels"].numpy()
        labels = labels[labels != IGNORE]
        hits, nll, n = hits + int((labels == top).sum()), nll - float(logp[labels].sum()), n + len(labels)
        if "nsp_labels" in batch:
            nsp.extend(batch["nsp_labels"].tolist())
    out = {"mlm_accuracy": hits / n, "mlm_perplexity": math.exp(nll / n)}
    if nsp:
        out["nsp_accuracy"] = max(np.mean(nsp), 1 - np.mean(nsp))
    return out


# ----------------------------------------------------------------------------- the run


def run(cfg: PretrainConfig, resume: bool = True) -> dict:
    """Tokenizer -> corpus -> pretraining -> ``<run_dir>/final`` (HF format). Returns a summary."""
    run_dir = Path(cfg.run_dir)
    dist = init_distributed()
    if dist.is_main:  # rank 0 trains / prepares; the others wait, then open what it wrote
        tok = ensure_tokenizer(cfg, run_dir)
        corpus = ensure_corpus(cfg, tok, run_dir)
    barrier()
    if not dist.is_main:
        tok = ensure_tokenizer(cfg, run_dir)
        corpus = ensure_corpus(cfg, tok, run_dir)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, tok).to(pick_device(cfg.device, dist.local_rank))
    data = BertPretrainingData(corpus, special_ids(tok), cfg.data, cfg.train.batch_size,
                               cfg.train.accumulation, cfg.train.seed, tok.is_continuation)
    trainer = Trainer(model, data, cfg.train, run_dir, evaluate=evaluator(data, cfg.eval_batch_size),
                      run_config=to_dict(cfg))
    result = trainer.train(resume=resume)
    final = run_dir / "final"
    if dist.is_main:
        save_hf_bert(model, final, tok)
        write_json_atomic(final / "muppets_config.json", to_dict(cfg))
    summary = {"step": result.step, "stopped_early": result.stopped_early, "final": str(final),
               "eval": result.last_eval, "corpus": str(corpus.directory),
               "tokens": corpus.num_tokens, "documents": corpus.num_documents}
    if dist.is_main:
        summary["unigram_baseline"] = unigram_baseline(data, cfg.eval_batch_size)
        write_json_atomic(run_dir / "summary.json", summary)
    return summary
