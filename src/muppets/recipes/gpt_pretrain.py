"""GPT / GPT-2 pretraining from raw text: byte-level BPE -> prepared corpus -> causal LM -> HF dir.

``muppets pretrain configs/gpt-mini.yaml key=value …`` runs :func:`run` (the command picks this
recipe when ``model.preset`` names a GPT preset). The stages are every recipe's
(:mod:`muppets.recipes.common`, :mod:`muppets.recipes.pretraining`): the corpus is prepared once
per tokenizer and reused, the trainer resumes exactly, ``torchrun`` trains with DDP, and the
final model is an HF GPT-2 directory (``<run_dir>/final``) that ``transformers.GPT2LMHeadModel``
loads.

The corpus pipeline encodes sentence by sentence; for a byte-level BPE the space before a
sentence belongs to its first token, so the corpus is encoded with ``add_prefix_space`` — each
sentence as it appears inside running text — while the saved tokenizer keeps GPT-2's setting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from muppets.errors import ConfigError
from muppets.interop.hf_gpt import load_hf_gpt, save_hf_gpt
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.objectives.clm import CausalLMData, CLMDataConfig
from muppets.recipes.common import (PretrainedModelSection, RunSection, TokenizerSection, checkpoint_tokenizer,
                                    config_loader, corpus_texts, load_pretrained, open_inputs, pretraining_run,
                                    run_provenance, seeded_model, tokenizer_stage)
from muppets.recipes.pretraining import (Pretraining, held_out, held_out_evaluator, train_and_export,
                                         unigram_scores)
from muppets.tokenizers.bpe import ByteLevelBPETokenizer

log = logging.getLogger(__name__)


@dataclass
class GPTModelSection(PretrainedModelSection):
    preset: str = "gpt-mini"  # gpt-tiny | gpt-mini | gpt-small | gpt | gpt2 | gpt2-medium

    MODEL: ClassVar[Any] = GPTConfig


@dataclass
class BPETokenizerSection(TokenizerSection):
    path: str = "data:vocab/gpt2"  # GPT-2's vocab.json + merges.txt, or a saved tokenizer ("" = train one)
    vocab_size: int = 50257  # size of a newly trained vocabulary (256 bytes + merges + <|endoftext|>)


@dataclass
class GPTPretrainConfig(RunSection):
    run_dir: str = "runs/gpt-mini"  # checkpoints, logs, tokenizer, corpus and final/ go here
    model: GPTModelSection = field(default_factory=GPTModelSection)
    tokenizer: BPETokenizerSection = field(default_factory=BPETokenizerSection)
    data: CLMDataConfig = field(default_factory=CLMDataConfig)
    eval_batch_size: int = 32  # blocks per evaluation batch


# ----------------------------------------------------------------------------- stages


def ensure_tokenizer(cfg: GPTPretrainConfig, run_dir: Path) -> ByteLevelBPETokenizer:
    """The configured byte-level BPE, or one trained on the corpus (reused once trained)."""
    default = BPETokenizerSection.path  # GPT-2's BPE unless the checkpoint has its own
    return (checkpoint_tokenizer(cfg.model, cfg.tokenizer.path, ByteLevelBPETokenizer.load, default)
            or tokenizer_stage(cfg.tokenizer, run_dir, ByteLevelBPETokenizer.load, lambda: _train_tokenizer(cfg)))


def _train_tokenizer(cfg: GPTPretrainConfig) -> ByteLevelBPETokenizer:
    sec = cfg.tokenizer
    log.info("training a %d-token byte-level BPE on %s", sec.vocab_size, cfg.corpus.inputs)
    return ByteLevelBPETokenizer.train(corpus_texts(cfg.corpus, sec.max_documents), sec.vocab_size,
                                       min_frequency=sec.min_frequency)


def corpus_tokenizer(tok: ByteLevelBPETokenizer) -> ByteLevelBPETokenizer:
    """The tokenizer the corpus is encoded with: each sentence with its leading space."""
    return tok.with_prefix_space(True)


def build_model(cfg: GPTPretrainConfig, tok: ByteLevelBPETokenizer) -> GPTLanguageModel:
    if cfg.model.init_from:
        return load_pretrained(cfg.model, load_hf_gpt, tok.vocab_size)
    overrides = {"vocab_size": tok.vocab_size, "eos_token_id": tok.eos_id, **cfg.model.overrides}
    gpt = GPTConfig.preset(cfg.model.preset, **overrides)
    if cfg.data.block_size > gpt.max_position_embeddings:
        raise ConfigError(f"data.block_size {cfg.data.block_size} exceeds the model's "
                          f"{gpt.max_position_embeddings} positions")
    return GPTLanguageModel(gpt)


# ----------------------------------------------------------------------------- evaluation


def evaluator(data: CausalLMData, batch_size: int):
    """A trainer ``evaluate`` callback: next-token loss, perplexity and accuracy on the fixed
    held-out blocks (documents never trained on)."""
    return held_out_evaluator(data, batch_size, perplexity=("lm",))


def unigram_baseline(data: CausalLMData, batch_size: int, vocab_size: int) -> dict[str, float]:
    """Perplexity and accuracy of the add-one-smoothed training unigram on the held-out targets."""
    counts = data.stream.counts(vocab_size)  # read in place, chunk by chunk
    targets = held_out(data, batch_size, lambda b: b["labels"][:, 1:].reshape(-1).numpy())
    perplexity, accuracy = unigram_scores(counts, targets)
    return {"lm_perplexity": perplexity, "lm_accuracy": accuracy}


# ----------------------------------------------------------------------------- the run


load_config = config_loader(GPTPretrainConfig)  # what `muppets` calls: load_config, then run


def run(cfg: GPTPretrainConfig, resume: bool = True) -> dict:
    """Tokenizer -> corpus -> LM pretraining -> ``<run_dir>/final`` (HF GPT-2). Returns a summary."""
    with pretraining_run(cfg, resume):  # the run directory is this run's, and it may start there
        return _run(cfg, resume)


def _run(cfg: GPTPretrainConfig, resume: bool) -> dict:
    tok, corpus = open_inputs(cfg.run_dir, cfg.corpus, partial(ensure_tokenizer, cfg),
                              corpus_tokenizer)
    model = seeded_model(cfg, lambda: build_model(cfg, tok))
    data = CausalLMData(corpus, tok.eos_id, cfg.data, cfg.train.batch_size, cfg.train.accumulation,
                        cfg.train.seed)
    job = Pretraining(model, data, evaluator(data, cfg.eval_batch_size),
                      export=lambda final: save_hf_gpt(model, final, tok, provenance=run_provenance(cfg)),
                      baseline=lambda: unigram_baseline(data, cfg.eval_batch_size, model.cfg.vocab_size))
    return train_and_export(cfg, corpus, job, resume)
