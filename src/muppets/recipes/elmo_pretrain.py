"""ELMo biLM pretraining from raw text: word vocabulary -> prepared corpus -> biLM -> ``final/``.

``muppets pretrain configs/elmo-small.yaml key=value …`` runs :func:`run` (once the command
routes ``elmo-…`` presets here). The stages are every recipe's (:mod:`muppets.recipes.common`,
:mod:`muppets.recipes.pretraining`):

1. **vocabulary** — a :class:`~muppets.tokenizers.words.WordVocab` counted on the corpus once
   (``<run_dir>/vocab``; rebuilt only when its settings change) and reused. It is cased and
   keeps every word seen ``min_count`` times (default: all), so the character input keeps
   almost every spelling; the softmax uses its ``softmax_size`` most frequent ids
   (see :mod:`muppets.objectives.bilm`);
2. **corpus** — word-id shards prepared once for that vocabulary (``prepare_once``);
3. **training** — :class:`~muppets.train.Trainer` (exact resume, DDP under ``torchrun``) on
   :class:`~muppets.objectives.bilm.BiLMData`, evaluating forward and backward perplexity on
   held-out documents;
4. **export** — ``<run_dir>/final`` in our own format, written atomically (:func:`save_elmo`;
   the run config is added after) and read back by :func:`load_elmo`::

       config.json          {"format": "muppets.elmo/1", "model": <ElmoConfig>}
       model.safetensors    the ElmoLanguageModel state dict (our parameter names)
       vocab/               words.txt + words.json (the WordVocab)
       muppets_config.json  the resolved run config
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import torch

from muppets.config import atomic_dir, from_dict, to_dict, write_json_atomic
from muppets.interop.safetensors_io import read_model_dir, write_weights
from muppets.models.elmo import ElmoConfig, ElmoLanguageModel
from muppets.objectives.bilm import BiLMData, BiLMDataConfig
from muppets.recipes.common import (ModelSection, RunSection, config_loader, open_inputs, pretraining_run,
                                    seeded_model)
from muppets.recipes.pretraining import (Pretraining, held_out, held_out_evaluator, perplexity_of,
                                         train_and_export, unigram_scores)
from muppets.recipes.word_vocab import WordVocabSection, ensure_word_vocab
from muppets.tokenizers.words import WordVocab

log = logging.getLogger(__name__)

FORMAT = "muppets.elmo/1"


@dataclass
class ElmoModelSection(ModelSection):
    preset: str = "elmo-small"  # elmo-tiny | elmo-small | elmo-original

    MODEL: ClassVar[Any] = ElmoConfig


@dataclass
class ElmoVocabSection(WordVocabSection):
    min_count: int = 1  # input words seen fewer times become <unk> (and lose their characters)
    lowercase: bool = False  # ELMo is cased: the char CNN sees capitals, the softmax keeps them apart
    softmax_size: int = 32768  # output words: the most frequent ids 0 … softmax_size-1 (rarer -> <unk>)


@dataclass
class ElmoPretrainConfig(RunSection):
    run_dir: str = "runs/elmo-small"  # checkpoints, logs, vocab, corpus and final/ go here
    model: ElmoModelSection = field(default_factory=ElmoModelSection)
    vocab: ElmoVocabSection = field(default_factory=ElmoVocabSection)
    data: BiLMDataConfig = field(default_factory=BiLMDataConfig)


# ----------------------------------------------------------------------------- stages


def ensure_vocab(cfg: ElmoPretrainConfig, run_dir: Path) -> WordVocab:
    """The configured vocabulary, or one counted on the corpus (reused while its settings hold)."""
    vocab, size = ensure_word_vocab(cfg.vocab, cfg.corpus, run_dir), cfg.vocab.softmax_size
    log.info("the softmax's %d words cover %.2f%% of the tokens", min(size, len(vocab)),
             100 * softmax_coverage(vocab, size))
    return vocab


def softmax_coverage(vocab: WordVocab, softmax_size: int) -> float:
    """Share of the counted tokens whose word is inside the softmax (not an ``<unk>`` target)."""
    counts = vocab.counts
    return float(counts[4:softmax_size].sum() / max(1, counts[1:].sum()))


def build_model(cfg: ElmoPretrainConfig, vocab: WordVocab) -> ElmoLanguageModel:
    size = min(cfg.vocab.softmax_size, len(vocab))
    return ElmoLanguageModel(ElmoConfig.preset(cfg.model.preset, **{"vocab_size": size, **cfg.model.overrides}))


# ----------------------------------------------------------------------------- evaluation


def evaluator(data: BiLMData, batch_size: int):
    """A trainer ``evaluate`` callback: per direction (``fwd``, ``bwd``) the loss, perplexity
    and accuracy on the fixed held-out windows, and ``perplexity`` = exp of the mean of the
    two losses."""
    per_direction = held_out_evaluator(data, batch_size, perplexity=("fwd", "bwd"))

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        metrics = per_direction(model)
        metrics["perplexity"] = perplexity_of((metrics["fwd_loss"] + metrics["bwd_loss"]) / 2)
        return metrics

    return evaluate


def unigram_baseline(data: BiLMData, batch_size: int) -> dict[str, float]:
    """Per direction, the held-out perplexity of the add-one-smoothed training unigram."""
    counts, out = data.token_counts(), {}
    for k, key in (("fwd", "next_ids"), ("bwd", "prev_ids")):
        targets = held_out(data, batch_size, lambda b: b[key][b[key] >= 0].numpy())
        out[f"{k}_perplexity"] = unigram_scores(counts, targets)[0]
    return out


# ----------------------------------------------------------------------------- saving


def save_elmo(model: ElmoLanguageModel, vocab: WordVocab, directory: str | Path,
              run_config: dict | None = None) -> Path:
    """Write ``directory`` (see the module docstring) into a temporary sibling, then rename it."""
    directory = Path(directory)
    with atomic_dir(directory) as tmp:
        write_json_atomic(tmp / "config.json", {"format": FORMAT, "model": to_dict(model.cfg)})
        write_weights(model.state_dict(), tmp / "model.safetensors", metadata={"format": FORMAT})
        vocab.save(tmp / "vocab")
        if run_config is not None:
            write_json_atomic(tmp / "muppets_config.json", run_config)
    return directory


def load_elmo(directory: str | Path) -> tuple[ElmoLanguageModel, WordVocab]:
    """The biLM (in eval mode) and its word vocabulary from a :func:`save_elmo` directory."""
    model, _ = read_model_dir(directory, FORMAT, "an ELMo model",
                              lambda meta: ElmoLanguageModel(from_dict(ElmoConfig, meta["model"])))
    return model, WordVocab.load(Path(directory) / "vocab")


# ----------------------------------------------------------------------------- the run


load_config = config_loader(ElmoPretrainConfig)  # what `muppets` calls: load_config, then run


def run(cfg: ElmoPretrainConfig, resume: bool = True) -> dict:
    """Vocabulary -> corpus -> biLM pretraining -> ``<run_dir>/final``. Returns a summary."""
    with pretraining_run(cfg, resume):  # the run directory is this run's, and it may start there
        return _run(cfg, resume)


def _run(cfg: ElmoPretrainConfig, resume: bool) -> dict:
    vocab, corpus = open_inputs(cfg.run_dir, cfg.corpus, partial(ensure_vocab, cfg))
    model = seeded_model(cfg, lambda: build_model(cfg, vocab))
    data = BiLMData(corpus, vocab, cfg.data, cfg.train.batch_size, cfg.train.accumulation, cfg.train.seed,
                    softmax_size=model.cfg.vocab_size, max_chars=model.cfg.max_chars)
    job = Pretraining(model, data, evaluator(data, cfg.eval_batch_size),
                      export=lambda final: save_elmo(model, vocab, final),
                      baseline=lambda: unigram_baseline(data, cfg.eval_batch_size),
                      summary={"model_kind": "ELMo", "vocab_size": len(vocab), "softmax_size": model.cfg.vocab_size,
                               "softmax_coverage": softmax_coverage(vocab, model.cfg.vocab_size)})
    return train_and_export(cfg, corpus, job, resume)
