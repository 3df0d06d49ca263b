"""GPT / GPT-2 pretraining from raw text: byte-level BPE -> prepared corpus -> causal LM -> HF dir.

``muppets pretrain configs/gpt-mini.yaml key=value …`` runs :func:`run` (the command picks this
recipe when ``model.preset`` names a GPT preset). The stages are BERT's
(:mod:`muppets.recipes.bert_pretrain`): the corpus is prepared once per tokenizer and reused, the
trainer resumes exactly, ``torchrun`` trains with DDP, and the final model is an HF GPT-2
directory (``<run_dir>/final``) that ``transformers.GPT2LMHeadModel`` loads.

The corpus pipeline encodes sentence by sentence; for a byte-level BPE the space before a
sentence belongs to its first token, so the corpus is encoded with ``add_prefix_space`` — each
sentence as it appears inside running text — while the saved tokenizer keeps GPT-2's setting.
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
from muppets.interop.hf_gpt import load_hf_gpt, save_hf_gpt
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.objectives.clm import CausalLMData, CLMDataConfig
from muppets.paths import resolve_data_path
from muppets.recipes.common import CorpusSection, pick_device, prepare_once
from muppets.tokenizers.bpe import ByteLevelBPETokenizer
from muppets.train import TrainConfig, Trainer
from muppets.train.distributed import barrier, init_distributed

log = logging.getLogger(__name__)


@dataclass
class GPTModelSection:
    preset: str = "gpt-mini"  # gpt-tiny | gpt-mini | gpt-small | gpt | gpt2 | gpt2-medium
    overrides: dict = field(default_factory=dict)  # GPTConfig fields to change, e.g. {hidden_dropout: 0.0}
    init_from: str = ""  # HF GPT-2 directory to continue pretraining from ("" = random init)


@dataclass
class BPETokenizerSection:
    path: str = "data:vocab/gpt2"  # GPT-2's vocab.json + merges.txt, or a saved tokenizer ("" = train one)
    vocab_size: int = 50257  # size of a newly trained vocabulary (256 bytes + merges + <|endoftext|>)
    min_frequency: int = 2  # merges seen fewer times are not learned
    max_documents: int = 0  # train on at most this many documents (0 = all)


@dataclass
class GPTPretrainConfig:
    run_dir: str = "runs/gpt-mini"  # checkpoints, logs, tokenizer, corpus and final/ go here
    model: GPTModelSection = field(default_factory=GPTModelSection)
    tokenizer: BPETokenizerSection = field(default_factory=BPETokenizerSection)
    corpus: CorpusSection = field(default_factory=CorpusSection)
    data: CLMDataConfig = field(default_factory=CLMDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval_batch_size: int = 32  # blocks per evaluation batch
    device: str = "auto"  # auto (cuda:<local rank> when CUDA is available, else cpu) | cpu | cuda:N


def load_config(path: str | Path | None, overrides: list[str]) -> GPTPretrainConfig:
    """YAML/JSON file (optional) + dotted overrides, type-checked."""
    cfg = from_dict(GPTPretrainConfig, load_file(path)) if path else GPTPretrainConfig()
    return apply_overrides(cfg, overrides)


# ----------------------------------------------------------------------------- stages


def ensure_tokenizer(cfg: GPTPretrainConfig, run_dir: Path) -> ByteLevelBPETokenizer:
    """The configured byte-level BPE, or one trained on the corpus (reused once trained)."""
    sec = cfg.tokenizer
    if sec.path:
        return ByteLevelBPETokenizer.load(resolve_data_path(sec.path))
    out = run_dir / "tokenizer"
    if out.is_dir() and any(out.iterdir()):
        return ByteLevelBPETokenizer.load(out)
    log.info("training a %d-token byte-level BPE on %s", sec.vocab_size, cfg.corpus.inputs)
    tok = ByteLevelBPETokenizer.train(_training_texts(cfg), sec.vocab_size,
                                      min_frequency=sec.min_frequency)
    tok.save(out)
    return tok


def _training_texts(cfg: GPTPretrainConfig):
    inputs = [resolve_data_path(p) for p in cfg.corpus.inputs]
    for i, doc in enumerate(iter_documents(inputs, cfg.corpus.format, errors=cfg.corpus.errors)):
        if cfg.tokenizer.max_documents and i >= cfg.tokenizer.max_documents:
            return
        yield from doc.paragraphs


def corpus_tokenizer(tok: ByteLevelBPETokenizer) -> ByteLevelBPETokenizer:
    """The tokenizer the corpus is encoded with: each sentence with its leading space."""
    return tok.with_prefix_space(True)


def build_model(cfg: GPTPretrainConfig, tok: ByteLevelBPETokenizer) -> GPTLanguageModel:
    if cfg.model.init_from:
        model = load_hf_gpt(resolve_data_path(cfg.model.init_from))
        if model.cfg.vocab_size < tok.vocab_size:
            raise ConfigError(f"model.init_from has {model.cfg.vocab_size} tokens, the tokenizer {tok.vocab_size}")
        return model
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
    batches = data.eval_batches(batch_size)

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        loss = correct = n = 0.0
        device = next(model.parameters()).device
        for batch in batches:
            out = model(**{k: v.to(device) for k, v in batch.items()})
            loss, correct, n = (loss + float(out.loss_sums["lm"]), correct + float(out.correct["lm"]),
                                n + float(out.counts["lm"]))
        return {"lm_loss": loss / n, "lm_perplexity": math.exp(min(loss / n, 50.0)), "lm_accuracy": correct / n}

    return evaluate


def unigram_baseline(data: CausalLMData, batch_size: int, vocab_size: int) -> dict[str, float]:
    """Perplexity and accuracy of the add-one-smoothed training unigram on the held-out targets."""
    counts = data.stream.counts(vocab_size)  # read in place, chunk by chunk
    logp = np.log((counts + 1) / (counts.sum() + vocab_size))
    top, nll, hits, n = int(counts.argmax()), 0.0, 0, 0
    for batch in data.eval_batches(batch_size):
        targets = batch["labels"][:, 1:].reshape(-1).numpy()
        nll, hits, n = nll - float(logp[targets].sum()), hits + int((targets == top).sum()), n + len(targets)
    return {"lm_perplexity": math.exp(nll / n), "lm_accuracy": hits / n}


# ----------------------------------------------------------------------------- the run


def _open_inputs(cfg: GPTPretrainConfig, run_dir: Path) -> tuple[ByteLevelBPETokenizer, TokenCorpus]:
    tok = ensure_tokenizer(cfg, run_dir)
    return tok, prepare_once(cfg.corpus, corpus_tokenizer(tok), run_dir)


def run(cfg: GPTPretrainConfig, resume: bool = True) -> dict:
    """Tokenizer -> corpus -> LM pretraining -> ``<run_dir>/final`` (HF GPT-2). Returns a summary."""
    run_dir = Path(cfg.run_dir)
    dist = init_distributed()
    if dist.is_main:  # rank 0 trains / prepares; the others wait, then open what it wrote
        tok, corpus = _open_inputs(cfg, run_dir)
    barrier()
    if not dist.is_main:
        tok, corpus = _open_inputs(cfg, run_dir)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, tok).to(pick_device(cfg.device, dist.local_rank))
    data = CausalLMData(corpus, tok.eos_id, cfg.data, cfg.train.batch_size, cfg.train.accumulation,
                        cfg.train.seed)
    trainer = Trainer(model, data, cfg.train, run_dir, evaluate=evaluator(data, cfg.eval_batch_size),
                      run_config=to_dict(cfg))
    result = trainer.train(resume=resume)
    final = run_dir / "final"
    if dist.is_main:
        save_hf_gpt(model, final, tok)
        write_json_atomic(final / "muppets_config.json", to_dict(cfg))
    summary = {"step": result.step, "stopped_early": result.stopped_early, "final": str(final),
               "eval": result.last_eval, "corpus": str(corpus.directory),
               "tokens": corpus.num_tokens, "documents": corpus.num_documents}
    if dist.is_main:
        summary["unigram_baseline"] = unigram_baseline(data, cfg.eval_batch_size, model.cfg.vocab_size)
        write_json_atomic(run_dir / "summary.json", summary)
    return summary
