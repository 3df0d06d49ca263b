"""BERT pretraining from raw text, end to end: tokenizer -> prepared corpus -> MLM+NSP -> HF dir.

With ``model.init_from`` it continues the MLM pretraining of any bidirectional encoder family of
:mod:`muppets.families` (BERT, RoBERTa / XLM-R / CamemBERT, DistilBERT, ELECTRA): the directory's
family reads its weights and its own tokenizer, and ``final/`` is written back in that family's
names, so transformers' ``AutoModelForMaskedLM`` loads it as it loaded the checkpoint.

``muppets pretrain configs/bert-mini.yaml key=value …`` runs :func:`run`. Every stage reuses
its output when it already exists and matches (a tokenizer directory, a prepared corpus whose
tokenizer fingerprint matches), so re-running the command resumes rather than restarts. The
same command under ``torchrun --nproc_per_node=K`` trains with DDP: rank 0 prepares the
tokenizer and corpus while the other ranks wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from torch import nn

from muppets import families
from muppets.config import write_json_atomic
from muppets.data.shards import TokenCorpus, corpus_meta
from muppets.errors import ConfigError
from muppets.families import Family
from muppets.interop import hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.objectives.mlm import IGNORE
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds
from muppets.paths import resolve_model_path
from muppets.recipes import multilingual
from muppets.recipes.common import (PretrainedModelSection, RunSection, TokenizerSection,
                                    checkpoint_tokenizer, config_loader, corpus_texts, load_pretrained, open_inputs,
                                    prepare_once, pretraining_run, run_provenance, seeded_model, tokenizer_stage)
from muppets.recipes.pretraining import (Pretraining, held_out, held_out_evaluator, train_and_export,
                                         unigram_scores)
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train.distributed import dist_info, init_distributed
from muppets.transfer.pretraining_gain import TransferSection

log = logging.getLogger(__name__)


@dataclass
class BertModelSection(PretrainedModelSection):
    preset: str = "bert-mini"  # bert-tiny | bert-mini | bert-small | bert-medium | bert-base | bert-large
    pretrain_dropout: float = -1.0  # hidden and attention dropout while pretraining only (-1 = the model's own); final/config.json keeps the model's own, which fine-tuning then uses (Cramming: 0 here, 0.1 there)
    head_warmup_steps: int = 0  # with init_from: the first N updates train only the MLM head (transform, output bias, and an untied decoder); the loaded encoder and the word embeddings wait, so a fresh head's first gradients never reach them

    LOADED_OVERRIDES: ClassVar[tuple[str, ...]] = hf_bert.LOADED_OVERRIDES
    MODEL: ClassVar[Any] = BertConfig

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.pretrain_dropout == -1.0 or 0.0 <= self.pretrain_dropout < 1.0):
            raise ConfigError(f"model.pretrain_dropout={self.pretrain_dropout}: expected -1 (off) or a rate in [0, 1)")
        if self.head_warmup_steps < 0:
            raise ConfigError(f"model.head_warmup_steps={self.head_warmup_steps}: expected a count of updates >= 0")
        if self.head_warmup_steps and not self.init_from:
            raise ConfigError(f"model.head_warmup_steps={self.head_warmup_steps} warms up a fresh MLM head on a loaded "
                              "encoder: set model.init_from (a random model has nothing to protect)")


@dataclass
class WordPieceSection(TokenizerSection):
    path: str = ""  # tokenizer directory or vocab.txt ("" = train one into <run_dir>/tokenizer, once)
    lowercase: bool = True  # lower-case (and strip accents) before WordPiece
    chinese_script: str = ""  # "" (as written) | simplified | traditional: convert Chinese text first (OpenCC)
    limit_alphabet: int = 1000  # characters a trained vocabulary can hold (the most frequent); the rest become [UNK]: raise it for Chinese (thousands of characters)


@dataclass
class PretrainConfig(RunSection):
    run_dir: str = "runs/bert-mini"  # checkpoints, logs, tokenizer, corpus and final/ go here
    model: BertModelSection = field(default_factory=BertModelSection)
    tokenizer: WordPieceSection = field(default_factory=WordPieceSection)
    data: PretrainDataConfig = field(default_factory=PretrainDataConfig)
    transfer: TransferSection = field(default_factory=TransferSection)

    # settings that steer only what happens after the trained steps: a finished run asked again
    # with them changed runs its transfer again and trains nothing (muppets.train.rundir.check_resume)
    AFTER_TRAINING: ClassVar[tuple[str, ...]] = ("transfer.",)


# ----------------------------------------------------------------------------- stages


def init_family(cfg: PretrainConfig) -> Family:
    """The family this run reads and writes: ``model.init_from``'s (its config.json's
    ``model_type``), else BERT's (a fresh model of a BERT preset). A causal family is refused:
    it continues with its own objective (``gpt_pretrain``)."""
    if not cfg.model.init_from:
        return families.for_model_type(families.DEFAULT_MODEL_TYPE)
    family = families.of_directory(resolve_model_path(cfg.model.init_from))
    if family.causal:
        raise ConfigError(f"model.init_from={cfg.model.init_from} is a {family.name} (left-to-right) model: masked-LM "
                          "pretraining continues bidirectional encoders only (a GPT preset or directory picks gpt_pretrain)")
    return family


def ensure_tokenizer(cfg: PretrainConfig, run_dir: Path) -> Any:
    """Load the configured tokenizer (with ``model.init_from``: the checkpoint's own, read by its
    family), or train a WordPiece one on the corpus (reused if already trained)."""
    script = cfg.tokenizer.chinese_script
    read = init_family(cfg).tokenizer

    def load(path: Path) -> Any:  # a vocab.txt or a tokenizer directory
        if path.is_file():
            tok = WordPieceTokenizer.from_vocab(path, lowercase=cfg.tokenizer.lowercase)
        else:
            tok = read(path)
        if hasattr(tok, "with_chinese_script"):
            return tok.with_chinese_script(script, path)
        if script:
            raise ConfigError(f"tokenizer.chinese_script={script} converts text for WordPiece tokenizers; the "
                              f"tokenizer at {path} is {tok!r}: leave tokenizer.chinese_script empty")
        return tok

    return (checkpoint_tokenizer(cfg.model, cfg.tokenizer.path, load)
            or tokenizer_stage(cfg.tokenizer, run_dir, load, lambda: _train_tokenizer(cfg)))


def _train_tokenizer(cfg: PretrainConfig) -> WordPieceTokenizer:
    sec = cfg.tokenizer
    if cfg.corpus.languages:  # a shared vocabulary on a smoothed sample of every language
        sample = multilingual.tokenizer_sample(cfg.corpus, sec.max_documents, cfg.train.seed)
        texts = sample.texts()
    else:
        texts = corpus_texts(cfg.corpus, sec.max_documents)
    log.info("training a %d-token WordPiece vocabulary on %s", sec.vocab_size, cfg.corpus.languages or cfg.corpus.inputs)
    tok = WordPieceTokenizer.train(texts, sec.vocab_size, chinese_script=sec.chinese_script,
                                   lowercase=sec.lowercase, min_frequency=sec.min_frequency,
                                   limit_alphabet=sec.limit_alphabet, model_max_length=cfg.data.max_seq_len)
    if cfg.corpus.languages:
        multilingual.write_sample_report(sample, Path(cfg.run_dir), tok)
    return tok


def ensure_corpus(cfg: PretrainConfig, tok: WordPieceTokenizer, run_dir: Path) -> TokenCorpus:
    """Open the prepared corpus, preparing it first unless it exists for this tokenizer."""
    return prepare_once(cfg.corpus, tok, run_dir)


def build_model(cfg: PretrainConfig, tok: WordPieceTokenizer) -> BertForPreTraining:
    """A random BERT of the preset (or ``model.init_from``); without NSP its pooler and NSP
    head are frozen (see :meth:`BertForPreTraining.train_nsp`)."""
    return _new_or_loaded(cfg, tok).train_nsp(cfg.data.nsp)


def head_warmup(cfg: PretrainConfig, model: BertForPreTraining) -> Callable[[int], list[nn.Parameter]] | None:
    """The trainer's ``frozen`` callback for ``model.head_warmup_steps``: before that many
    updates, every parameter but the MLM head's own (its transform and output bias, and the
    decoder when it is untied; a tied decoder is the word embeddings, which wait with the
    encoder); None when the setting is 0."""
    steps = cfg.model.head_warmup_steps
    if not steps:
        return None
    head = {id(p) for p in model.mlm.parameters()}
    waiting = [p for p in model.parameters() if id(p) not in head]

    def frozen(step: int) -> list[nn.Parameter]:
        return waiting if step < steps else []

    log.info("model.head_warmup_steps=%d: the first %d updates train only the MLM head (%d parameters); the "
             "encoder joins after them", steps, steps, sum(p.numel() for p in model.mlm.parameters()))
    return frozen


def _pretrain_dropout(cfg: PretrainConfig) -> dict:
    """The config fields ``model.pretrain_dropout`` sets while pretraining (none when -1)."""
    rate = cfg.model.pretrain_dropout
    return {} if rate < 0 else {"hidden_dropout": rate, "attention_dropout": rate}


def export_dropout(cfg: PretrainConfig) -> tuple[float, float] | None:
    """The (hidden, attention) dropout final/config.json states under ``model.pretrain_dropout``:
    the model's own (the preset with ``model.overrides``, or ``init_from``'s config.json); None
    when pretraining used the model's own (nothing to restore)."""
    if cfg.model.pretrain_dropout < 0:
        return None
    if cfg.model.init_from:
        own = init_family(cfg).read_config(resolve_model_path(cfg.model.init_from))
    else:
        own = BertConfig.preset(cfg.model.preset, **cfg.model.overrides)
    return own.hidden_dropout, own.attention_dropout


def exporter(cfg: PretrainConfig, model: BertForPreTraining, tok: Any) -> Callable[[Path], Path]:
    """What writes ``final/``: the model in its family's names (``init_from``'s, else BERT's)
    with its tokenizer and a model card naming the checkpoint and corpus it came from. The family
    and dropout are read now: ``init_from``'s directory may
    change during a long run."""
    family, dropout, provenance = init_family(cfg), export_dropout(cfg), run_provenance(cfg)
    return lambda final: family.save(model, final, tok, dropout, provenance=provenance)


def _new_or_loaded(cfg: PretrainConfig, tok: Any) -> BertForPreTraining:
    if cfg.model.init_from:
        family = init_family(cfg)
        heads = ("mlm", "nsp") if cfg.data.nsp else ("mlm",)  # a head the checkpoint lacks is a warning
        load = partial(family.load, heads=heads, **{**cfg.model.overrides, **_pretrain_dropout(cfg)})
        model = load_pretrained(cfg.model, load, tok.vocab_size)
        if cfg.data.max_seq_len > model.cfg.max_positions:
            raise ConfigError(f"data.max_seq_len={cfg.data.max_seq_len} exceeds the "
                              f"{model.cfg.max_positions} positions of model.init_from={cfg.model.init_from}")
        return model
    overrides = {"vocab_size": tok.vocab_size, "pad_token_id": tok.pad_id,
                 "max_position_embeddings": max(512, cfg.data.max_seq_len), **cfg.model.overrides,
                 **_pretrain_dropout(cfg)}
    return BertForPreTraining(BertConfig.preset(cfg.model.preset, **overrides))


def special_ids(tok: WordPieceTokenizer) -> SpecialIds:
    ids = [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]
    return SpecialIds(pad=tok.pad_id, cls=tok.cls_id, sep=tok.sep_id, mask=tok.mask_id, all=ids)


# ----------------------------------------------------------------------------- evaluation


def evaluator(data: BertPretrainingData, batch_size: int):
    """A trainer ``evaluate`` callback: MLM accuracy / loss / perplexity and NSP accuracy /
    loss on the fixed held-out batches (documents never trained on)."""
    return held_out_evaluator(data, batch_size, perplexity=("mlm",))


def unigram_baseline(data: BertPretrainingData, batch_size: int) -> dict[str, float]:
    """What token frequencies alone score on the same held-out targets: accuracy of always
    predicting the most frequent training token, perplexity of the unigram distribution, and
    the NSP majority class."""
    counts = np.zeros(data.corpus.vocab_size, dtype=np.int64)
    for d in data.train_docs:
        counts += np.bincount(data.corpus.document_tokens(int(d)), minlength=len(counts))
    labels = held_out(data, batch_size, lambda b: b["mlm_labels"][b["mlm_labels"] != IGNORE].numpy())
    perplexity, accuracy = unigram_scores(counts, labels)
    out = {"mlm_accuracy": accuracy, "mlm_perplexity": perplexity}
    if data.cfg.nsp:
        nsp = held_out(data, batch_size, lambda b: b["nsp_labels"].numpy())
        out["nsp_accuracy"] = float(max(nsp.mean(), 1 - nsp.mean()))
    return out


# ----------------------------------------------------------------------------- the run


load_config = config_loader(PretrainConfig)  # what `muppets` calls: load_config, then run


def check_masking_units(cfg: PretrainConfig) -> None:
    """Before anything is prepared: a masking level beyond ``piece`` needs units stored with the
    corpus, so ``corpus.segmenter`` (and for entities ``corpus.entity_lexicon``) must be set,
    unless the prepared corpus already stores them (checked in full once it is open)."""
    levels = cfg.data.masking.unit_levels()
    meta = corpus_meta(Path(cfg.corpus.prepared) if cfg.corpus.prepared else Path(cfg.run_dir) / "corpus")
    if (meta or {}).get("units") or not levels:
        return
    if not cfg.corpus.segmenter:
        raise ConfigError(f"data.masking.level={cfg.data.masking.level} masks units ({', '.join(levels)}) whose "
                          "boundaries are stored when the corpus is prepared: set corpus.segmenter=jieba (Chinese) "
                          "or corpus.segmenter=pretokenizer (English)")
    if "entity" in levels and not cfg.corpus.entity_lexicon:
        raise ConfigError(f"data.masking.level={cfg.data.masking.level} masks entities: set corpus.entity_lexicon "
                          "(a file, one entity per line)" + (" or data.masking.mixture.entity=0"
                                                               if cfg.data.masking.level == "mixture" else ""))


def run(cfg: PretrainConfig, resume: bool = True) -> dict:
    """Tokenizer -> corpus -> pretraining -> ``<run_dir>/final`` (HF format) -> with
    ``transfer.task``, the fine-tuning of final/ and of a random initialisation of it
    (:mod:`muppets.transfer.pretraining_gain`). Returns a summary."""
    check_masking_units(cfg)
    if cfg.transfer.task and init_distributed().world > 1:
        raise ConfigError(f"transfer.task={cfg.transfer.task} fine-tunes in one process after pretraining: under "
                          "torchrun leave it empty (transfer.task=), then run the same config without torchrun")
    with pretraining_run(cfg, resume):  # the run directory is this run's, and it may start there
        if cfg.corpus.languages:  # one corpus per language, language-balanced batches
            summary = multilingual.run(cfg, resume)
        else:
            summary = _run(cfg, resume)
        return with_transfer(cfg, summary)


def with_transfer(cfg: PretrainConfig, summary: dict) -> dict:
    """``summary`` with ``transfer``, the result of :func:`muppets.transfer.pretraining_gain.run`,
    when ``transfer.task`` is set and the pretraining finished (rewritten into summary.json)."""
    if not cfg.transfer.task or summary.get("interrupted") or not dist_info().is_main:
        return summary
    from muppets.transfer import pretraining_gain

    summary["transfer"] = pretraining_gain.run(cfg.transfer, Path(cfg.run_dir), cfg.device)
    write_json_atomic(Path(cfg.run_dir) / "summary.json", summary)
    return summary


def _run(cfg: PretrainConfig, resume: bool) -> dict:
    tok, corpus = open_inputs(cfg.run_dir, cfg.corpus, partial(ensure_tokenizer, cfg))
    model = seeded_model(cfg, lambda: build_model(cfg, tok))
    data = BertPretrainingData(corpus, special_ids(tok), cfg.data, cfg.train.batch_size,
                               cfg.train.accumulation, cfg.train.seed, tok.is_continuation)
    job = Pretraining(model, data, evaluator(data, cfg.eval_batch_size),
                      export=exporter(cfg, model, tok),
                      baseline=lambda: unigram_baseline(data, cfg.eval_batch_size), frozen=head_warmup(cfg, model))
    return train_and_export(cfg, corpus, job, resume)
