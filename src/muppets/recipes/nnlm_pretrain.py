"""NNLM (Bengio et al. 2003) from raw text: word vocabulary -> prepared corpus -> n-gram LM -> embeddings.

``muppets nnlm train [config.yaml] key=value …`` runs :func:`run`. The vocabulary keeps the
``vocab.max_size`` most frequent words (the paper's vocabularies had 16-18k words; rarer words
become ``<unk>``, which is predicted like any word), the corpus is prepared once, and the shared
:class:`~muppets.train.Trainer` trains with exact resume, evaluating held-out perplexity.
Outputs::

    <run_dir>/final/           config.json + model.safetensors (the NNLM) and vocab/ (the WordVocab)
    <run_dir>/embeddings.bin   the rows of C as word vectors (word2vec binary; specials left out)
    <run_dir>/summary.json     steps, held-out perplexity and the unigram baseline's
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from muppets.config import apply_overrides, from_dict, load_file, to_dict, write_json_atomic
from muppets.models.nnlm import NNLM, NNLMConfig
from muppets.objectives.nnlm import NNLMData, NNLMDataConfig
from muppets.recipes.common import CorpusSection, pick_device, prepare_once
from muppets.recipes.gpt_pretrain import evaluator as lm_evaluator
from muppets.recipes.word_vocab import WordVocabSection, ensure_word_vocab
from muppets.tokenizers.words import WordVocab
from muppets.train import TrainConfig, Trainer

__all__ = ["NNLMRunConfig", "load_config", "run", "perplexity_evaluator", "unigram_baseline", "save_nnlm", "load_nnlm"]

log = logging.getLogger(__name__)


@dataclass
class NNLMModelSection:
    preset: str = "nnlm-small"  # nnlm-tiny | nnlm-small | nnlm-base
    overrides: dict = field(default_factory=dict)  # NNLMConfig fields to change, e.g. {direct: false}


def _default_vocab() -> WordVocabSection:
    return WordVocabSection(max_size=20_000)


def _default_train() -> TrainConfig:
    return TrainConfig(steps=20_000, batch_size=256, lr=1e-3, weight_decay=0.0, warmup_steps=200,
                       eval_every=2_000, checkpoint_every=2_000)


@dataclass
class NNLMRunConfig:
    run_dir: str = "runs/nnlm"  # vocab, corpus, checkpoints, final/ and embeddings.bin go here
    model: NNLMModelSection = field(default_factory=NNLMModelSection)
    vocab: WordVocabSection = field(default_factory=_default_vocab)
    corpus: CorpusSection = field(default_factory=CorpusSection)
    data: NNLMDataConfig = field(default_factory=NNLMDataConfig)
    train: TrainConfig = field(default_factory=_default_train)
    eval_batch_size: int = 1024  # held-out examples per evaluation batch
    device: str = "auto"  # auto | cpu | cuda:N


def load_config(path: str | Path | None, overrides: list[str]) -> NNLMRunConfig:
    """YAML/JSON file (optional) + dotted overrides, type-checked."""
    cfg = from_dict(NNLMRunConfig, load_file(path)) if path else NNLMRunConfig()
    return apply_overrides(cfg, overrides)


def perplexity_evaluator(data: NNLMData, batch_size: int):
    """A trainer ``evaluate`` callback: held-out cross entropy ``lm_loss``, ``lm_perplexity`` =
    exp(lm_loss) and ``lm_accuracy`` (GPT's evaluator: it only needs ``eval_batches``)."""
    return lm_evaluator(data, batch_size)


def unigram_baseline(data: NNLMData, vocab_size: int, batch_size: int) -> dict[str, float]:
    """Perplexity of the add-one-smoothed training unigram, and the accuracy of always guessing
    the most frequent word, on the same held-out targets."""
    counts = data.stream.counts(vocab_size)  # every target word, read in place
    logp = np.log((counts + 1) / (counts.sum() + vocab_size))
    targets = np.concatenate([b["labels"].numpy() for b in data.eval_batches(batch_size)])
    return {"lm_perplexity": float(math.exp(-logp[targets].mean())),
            "lm_accuracy": float((targets == counts.argmax()).mean())}


def save_nnlm(model: NNLM, vocab: WordVocab, directory: str | Path) -> Path:
    """``config.json`` + ``model.safetensors`` + ``vocab/``."""
    directory = model.save(directory)
    vocab.save(directory / "vocab")
    return directory


def load_nnlm(directory: str | Path) -> tuple[NNLM, WordVocab]:
    """A model written by :func:`save_nnlm`, in eval mode, and its vocabulary."""
    directory = Path(directory)
    return NNLM.load(directory).eval(), WordVocab.load(directory / "vocab")


def run(cfg: NNLMRunConfig, resume: bool = True) -> dict:
    """Vocabulary -> corpus -> NNLM training -> ``final/`` and ``embeddings.bin``; returns a summary."""
    run_dir = Path(cfg.run_dir)
    vocab = ensure_word_vocab(cfg.vocab, cfg.corpus, run_dir)
    corpus = prepare_once(cfg.corpus, vocab, run_dir)
    torch.manual_seed(cfg.train.seed)
    model_cfg = NNLMConfig.preset(cfg.model.preset, **{"vocab_size": len(vocab), **cfg.model.overrides})
    model = NNLM(model_cfg).to(pick_device(cfg.device, 0))
    data = NNLMData(corpus, model_cfg.context_size, vocab.bos_id, vocab.eos_id, cfg.data,
                    cfg.train.batch_size, cfg.train.accumulation, cfg.train.seed)
    trainer = Trainer(model, data, cfg.train, run_dir, evaluate=perplexity_evaluator(data, cfg.eval_batch_size),
                      run_config=to_dict(cfg))
    result = trainer.train(resume=resume)
    final = save_nnlm(model, vocab, run_dir / "final")
    model.word_vectors(vocab.words).save(run_dir / "embeddings.bin", binary=True)
    summary = {"step": result.step, "stopped_early": result.stopped_early, "final": str(final),
               "embeddings": str(run_dir / "embeddings.bin"), "eval": result.last_eval,
               "unigram_baseline": unigram_baseline(data, len(vocab), cfg.eval_batch_size),
               "corpus_tokens": corpus.num_tokens, "vocab": len(vocab), "model_kind": "muppets NNLM"}
    write_json_atomic(run_dir / "summary.json", summary)
    return summary
