"""NNLM (Bengio et al. 2003) from raw text: word vocabulary -> prepared corpus -> n-gram LM -> embeddings.

``muppets nnlm train [config.yaml] key=value …`` runs :func:`run`. The vocabulary keeps the
``vocab.max_size`` most frequent words (the paper's vocabularies had 16-18k words; rarer words
become ``<unk>``, which is predicted like any word), the corpus is prepared once, and the shared
:class:`~muppets.train.Trainer` trains with exact resume, evaluating held-out perplexity.
Outputs::

    <run_dir>/final/           config.json + model.safetensors (the NNLM), vocab/ (the WordVocab)
                               and muppets_config.json (the resolved run config)
    <run_dir>/embeddings.bin   the rows of C as word vectors (word2vec binary; specials left out)
    <run_dir>/summary.json     steps, held-out perplexity and the unigram baseline's
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from muppets.models.nnlm import NNLM, NNLMConfig
from muppets.objectives.nnlm import NNLMData, NNLMDataConfig
from muppets.recipes.common import (ModelSection, RunSection, config_loader, open_inputs, pretraining_run,
                                    seeded_model)
from muppets.recipes.pretraining import (Pretraining, held_out, held_out_evaluator, train_and_export,
                                         unigram_scores)
from muppets.recipes.word_vocab import WordVocabSection, ensure_word_vocab
from muppets.tokenizers.words import WordVocab
from muppets.train import TrainConfig

__all__ = ["NNLMRunConfig", "load_config", "run", "perplexity_evaluator", "unigram_baseline", "save_nnlm", "load_nnlm"]

log = logging.getLogger(__name__)


@dataclass
class NNLMModelSection(ModelSection):
    preset: str = "nnlm-small"  # nnlm-tiny | nnlm-small | nnlm-base

    MODEL: ClassVar[Any] = NNLMConfig


def _default_vocab() -> WordVocabSection:
    return WordVocabSection(max_size=20_000)


def _default_train() -> TrainConfig:
    return TrainConfig(steps=20_000, batch_size=256, lr=1e-3, weight_decay=0.0, warmup_steps=200,
                       eval_every=2_000, checkpoint_every=2_000)


@dataclass
class NNLMRunConfig(RunSection):
    run_dir: str = "runs/nnlm"  # vocab, corpus, checkpoints, final/ and embeddings.bin go here
    train: TrainConfig = field(default_factory=_default_train)
    eval_batch_size: int = 1024  # held-out examples per evaluation batch
    model: NNLMModelSection = field(default_factory=NNLMModelSection)
    vocab: WordVocabSection = field(default_factory=_default_vocab)
    data: NNLMDataConfig = field(default_factory=NNLMDataConfig)


def perplexity_evaluator(data: NNLMData, batch_size: int):
    """A trainer ``evaluate`` callback: held-out cross entropy ``lm_loss``, ``lm_perplexity`` =
    exp(lm_loss) and ``lm_accuracy``."""
    return held_out_evaluator(data, batch_size, perplexity=("lm",))


def unigram_baseline(data: NNLMData, vocab_size: int, batch_size: int) -> dict[str, float]:
    """Perplexity of the add-one-smoothed training unigram, and the accuracy of always guessing
    the most frequent word, on the same held-out targets."""
    counts = data.stream.counts(vocab_size)  # every target word, read in place
    perplexity, accuracy = unigram_scores(counts, held_out(data, batch_size, lambda b: b["labels"].numpy()))
    return {"lm_perplexity": perplexity, "lm_accuracy": accuracy}


def save_nnlm(model: NNLM, vocab: WordVocab, directory: str | Path) -> Path:
    """``config.json`` + ``model.safetensors`` + ``vocab/``."""
    directory = model.save(directory)
    vocab.save(directory / "vocab")
    return directory


def load_nnlm(directory: str | Path) -> tuple[NNLM, WordVocab]:
    """A model written by :func:`save_nnlm`, in eval mode, and its vocabulary."""
    directory = Path(directory)
    return NNLM.load(directory).eval(), WordVocab.load(directory / "vocab")


load_config = config_loader(NNLMRunConfig)  # what `muppets` calls: load_config, then run


def run(cfg: NNLMRunConfig, resume: bool = True) -> dict:
    """Vocabulary -> corpus -> NNLM training -> ``final/`` and ``embeddings.bin``; returns a summary."""
    with pretraining_run(cfg, resume):  # the run directory is this run's, and it may start there
        return _run(cfg, resume)


def _run(cfg: NNLMRunConfig, resume: bool) -> dict:
    vocab, corpus = open_inputs(cfg.run_dir, cfg.corpus, partial(ensure_word_vocab, cfg.vocab, cfg.corpus))
    model_cfg = NNLMConfig.preset(cfg.model.preset, **{"vocab_size": len(vocab), **cfg.model.overrides})
    model = seeded_model(cfg, lambda: NNLM(model_cfg))
    data = NNLMData(corpus, model_cfg.context_size, vocab.bos_id, vocab.eos_id, cfg.data,
                    cfg.train.batch_size, cfg.train.accumulation, cfg.train.seed)
    embeddings = Path(cfg.run_dir) / "embeddings.bin"

    def export(final: Path) -> None:
        save_nnlm(model, vocab, final)
        model.word_vectors(vocab.words).save(embeddings, binary=True)

    job = Pretraining(model, data, perplexity_evaluator(data, cfg.eval_batch_size), export,
                      baseline=lambda: unigram_baseline(data, len(vocab), cfg.eval_batch_size),
                      summary={"embeddings": str(embeddings), "vocab": len(vocab), "model_kind": "muppets NNLM"})
    return train_and_export(cfg, corpus, job, resume)
