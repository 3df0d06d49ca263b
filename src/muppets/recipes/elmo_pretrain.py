"""ELMo biLM pretraining from raw text: word vocabulary -> prepared corpus -> biLM -> ``final/``.

``muppets pretrain configs/elmo-small.yaml key=value …`` runs :func:`run` (once the command
routes ``elmo-…`` presets here). The stages mirror :mod:`muppets.recipes.gpt_pretrain`:

1. **vocabulary** — a :class:`~muppets.tokenizers.words.WordVocab` counted on the corpus once
   (``<run_dir>/vocab``; rebuilt only when its settings change) and reused. It is cased and
   keeps every word seen ``min_count`` times (default: all), so the character input keeps
   almost every spelling; the softmax uses its ``softmax_size`` most frequent ids
   (see :mod:`muppets.objectives.bilm`);
2. **corpus** — word-id shards prepared once for that vocabulary (``prepare_once``);
3. **training** — :class:`~muppets.train.Trainer` (exact resume, DDP under ``torchrun``) on
   :class:`~muppets.objectives.bilm.BiLMData`, evaluating forward and backward perplexity on
   held-out documents;
4. **export** — ``<run_dir>/final`` in our own format, written atomically (:func:`save_elmo`)
   and read back by :func:`load_elmo`::

       config.json          {"format": "muppets.elmo/1", "model": <ElmoConfig>}
       model.safetensors    the ElmoLanguageModel state dict (our parameter names)
       vocab/               words.txt + words.json (the WordVocab)
       muppets_config.json  the resolved run config
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from muppets.config import apply_overrides, from_dict, load_file, to_dict, write_json_atomic
from muppets.data.shards import TokenCorpus
from muppets.interop.safetensors_io import read_model_dir, write_weights
from muppets.models.elmo import ElmoConfig, ElmoLanguageModel
from muppets.objectives.bilm import BiLMData, BiLMDataConfig
from muppets.recipes.common import CorpusSection, pick_device, prepare_once
from muppets.recipes.word_vocab import WordVocabSection, ensure_word_vocab
from muppets.tokenizers.words import WordVocab
from muppets.train import TrainConfig, Trainer
from muppets.train.checkpoint import replace_dir
from muppets.train.distributed import barrier, init_distributed

log = logging.getLogger(__name__)

FORMAT = "muppets.elmo/1"


@dataclass
class ElmoModelSection:
    preset: str = "elmo-small"  # elmo-tiny | elmo-small | elmo-original
    overrides: dict = field(default_factory=dict)  # ElmoConfig fields to change, e.g. {dropout: 0.0}


@dataclass
class ElmoVocabSection(WordVocabSection):
    min_count: int = 1  # input words seen fewer times become <unk> (and lose their characters)
    lowercase: bool = False  # ELMo is cased: the char CNN sees capitals, the softmax keeps them apart
    softmax_size: int = 32768  # output words: the most frequent ids 0 … softmax_size-1 (rarer -> <unk>)


@dataclass
class ElmoPretrainConfig:
    run_dir: str = "runs/elmo-small"  # checkpoints, logs, vocab, corpus and final/ go here
    model: ElmoModelSection = field(default_factory=ElmoModelSection)
    vocab: ElmoVocabSection = field(default_factory=ElmoVocabSection)
    corpus: CorpusSection = field(default_factory=CorpusSection)
    data: BiLMDataConfig = field(default_factory=BiLMDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval_batch_size: int = 64  # windows per evaluation batch
    device: str = "auto"  # auto (cuda:<local rank> when CUDA is available, else cpu) | cpu | cuda:N


def load_config(path: str | Path | None, overrides: list[str]) -> ElmoPretrainConfig:
    """YAML/JSON file (optional) + dotted overrides, type-checked."""
    cfg = from_dict(ElmoPretrainConfig, load_file(path)) if path else ElmoPretrainConfig()
    return apply_overrides(cfg, overrides)


# ----------------------------------------------------------------------------- stages


def ensure_vocab(cfg: ElmoPretrainConfig, run_dir: Path) -> WordVocab:
    """The configured vocabulary, or one counted on the corpus (reused while its settings hold)."""
    sec = cfg.vocab
    base = WordVocabSection(**{f.name: getattr(sec, f.name) for f in fields(WordVocabSection)})
    vocab = ensure_word_vocab(base, cfg.corpus, run_dir)
    log.info("the softmax's %d words cover %.2f%% of the tokens", min(sec.softmax_size, len(vocab)),
             100 * softmax_coverage(vocab, sec.softmax_size))
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
    """A trainer ``evaluate`` callback: per direction the loss, perplexity and accuracy on the
    fixed held-out windows, and ``perplexity`` = exp of the mean of the two losses."""
    batches = data.eval_batches(batch_size)

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        device = next(model.parameters()).device
        sums = {k: [0.0, 0.0, 0.0] for k in ("fwd", "bwd")}  # loss, correct, count
        for batch in batches:
            out = model(**{k: v.to(device) for k, v in batch.items()})
            for k, acc in sums.items():
                acc[0] += float(out.loss_sums[k])
                acc[1] += float(out.correct[k])
                acc[2] += float(out.counts[k])
        metrics = {}
        for k, (loss, correct, n) in sums.items():
            metrics.update({f"{k}_loss": loss / n, f"{k}_perplexity": math.exp(min(loss / n, 50.0)),
                            f"{k}_accuracy": correct / n})
        metrics["perplexity"] = math.exp(min((metrics["fwd_loss"] + metrics["bwd_loss"]) / 2, 50.0))
        return metrics

    return evaluate


def unigram_baseline(data: BiLMData, batch_size: int) -> dict[str, float]:
    """Per direction, the held-out perplexity of the add-one-smoothed training unigram."""
    counts = data.token_counts()
    logp = np.log((counts + 1) / (counts.sum() + len(counts)))
    nll = {"fwd": [0.0, 0], "bwd": [0.0, 0]}
    for batch in data.eval_batches(batch_size):
        for k, key in (("fwd", "next_ids"), ("bwd", "prev_ids")):
            y = batch[key].numpy()
            y = y[y >= 0]
            nll[k][0] -= float(logp[y].sum())
            nll[k][1] += len(y)
    return {f"{k}_perplexity": math.exp(s / max(n, 1)) for k, (s, n) in nll.items()}


# ----------------------------------------------------------------------------- saving


def save_elmo(model: ElmoLanguageModel, vocab: WordVocab, directory: str | Path,
              run_config: dict | None = None) -> Path:
    """Write ``directory`` (see the module docstring) into a temporary sibling, then rename it."""
    directory = Path(directory)
    tmp = directory.with_name(f".tmp-{directory.name}-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    write_json_atomic(tmp / "config.json", {"format": FORMAT, "model": to_dict(model.cfg)})
    write_weights(model.state_dict(), tmp / "model.safetensors", metadata={"format": FORMAT})
    vocab.save(tmp / "vocab")
    if run_config is not None:
        write_json_atomic(tmp / "muppets_config.json", run_config)
    replace_dir(tmp, directory)
    return directory


def load_elmo(directory: str | Path) -> tuple[ElmoLanguageModel, WordVocab]:
    """The biLM (in eval mode) and its word vocabulary from a :func:`save_elmo` directory."""
    model, _ = read_model_dir(directory, FORMAT, "an ELMo model",
                              lambda meta: ElmoLanguageModel(from_dict(ElmoConfig, meta["model"])))
    return model, WordVocab.load(Path(directory) / "vocab")


# ----------------------------------------------------------------------------- the run


def _open_inputs(cfg: ElmoPretrainConfig, run_dir: Path) -> tuple[WordVocab, TokenCorpus]:
    vocab = ensure_vocab(cfg, run_dir)
    return vocab, prepare_once(cfg.corpus, vocab, run_dir)


def run(cfg: ElmoPretrainConfig, resume: bool = True) -> dict:
    """Vocabulary -> corpus -> biLM pretraining -> ``<run_dir>/final``. Returns a summary."""
    run_dir = Path(cfg.run_dir)
    dist = init_distributed()
    if dist.is_main:  # rank 0 counts / prepares; the others wait, then open what it wrote
        vocab, corpus = _open_inputs(cfg, run_dir)
    barrier()
    if not dist.is_main:
        vocab, corpus = _open_inputs(cfg, run_dir)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, vocab).to(pick_device(cfg.device, dist.local_rank))
    data = BiLMData(corpus, vocab, cfg.data, cfg.train.batch_size, cfg.train.accumulation, cfg.train.seed,
                    softmax_size=model.cfg.vocab_size, max_chars=model.cfg.max_chars)
    trainer = Trainer(model, data, cfg.train, run_dir, evaluate=evaluator(data, cfg.eval_batch_size),
                      run_config=to_dict(cfg))
    result = trainer.train(resume=resume)
    final = run_dir / "final"
    if dist.is_main:
        save_elmo(model, vocab, final, run_config=to_dict(cfg))
    summary = {"step": result.step, "stopped_early": result.stopped_early, "final": str(final), "model_kind": "ELMo",
               "eval": result.last_eval, "corpus": str(corpus.directory), "tokens": corpus.num_tokens,
               "documents": corpus.num_documents, "vocab_size": len(vocab), "softmax_size": model.cfg.vocab_size,
               "softmax_coverage": softmax_coverage(vocab, model.cfg.vocab_size)}
    if dist.is_main:
        summary["unigram_baseline"] = unigram_baseline(data, cfg.eval_batch_size)
        write_json_atomic(run_dir / "summary.json", summary)
    return summary
