"""Tiny random backbones of every kind, saved as the directories / files users point at
(shared by the feature-extraction, feature-transfer and polysemy tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from muppets.generate import GenerationConfig, choose
from muppets.interop.hf_bert import save_hf_bert
from muppets.interop.hf_gpt import save_hf_gpt
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.models.elmo import ElmoConfig, ElmoLanguageModel
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.models.nnlm import NNLM, NNLMConfig
from muppets.recipes.elmo_pretrain import save_elmo
from muppets.recipes.nnlm_pretrain import save_nnlm
from muppets.tokenizers import ByteLevelBPETokenizer, WordPieceTokenizer
from muppets.tokenizers.words import WordVocab
from muppets.vectors import WordVectors

WORDS = ("the a river bank money cash deposit loan water fish boat apple fruit tree company phone "
         "good great bad awful movie film plot john mary paris london went to and was is in . , !").split()
CORPUS = [" ".join(WORDS), "unbelievably unremarkable stories of banks and rivers", "which who what ?"] * 3


def tiny_bert(directory: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-wide random BERT with a WordPiece vocabulary trained on :data:`CORPUS`."""
    tok = WordPieceTokenizer.train(CORPUS, vocab_size=200, min_frequency=1)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                     intermediate_size=37, max_position_embeddings=64, pad_token_id=tok.pad_id)
    return save_hf_bert(BertForPreTraining(cfg), directory, tok)


def tiny_gpt(directory: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-wide random GPT-2 with a byte-level BPE trained on :data:`CORPUS`."""
    tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=300, min_frequency=1)
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=tok.vocab_size, max_position_embeddings=64, hidden_size=32, num_layers=2,
                    num_heads=4, intermediate_size=64, eos_token_id=tok.eos_id)
    return save_hf_gpt(GPTLanguageModel(cfg), directory, tok)


def tiny_elmo(directory: Path, seed: int = 0, lowercase: bool = False) -> Path:
    """An ``elmo-tiny`` biLM (3 layers of 32) with a word vocabulary of :data:`CORPUS`."""
    vocab = WordVocab.build(CORPUS, min_count=1, lowercase=lowercase)
    torch.manual_seed(seed)
    model = ElmoLanguageModel(ElmoConfig.preset("elmo-tiny", vocab_size=len(vocab), dropout=0.0))
    return save_elmo(model, vocab, directory)


def tiny_vectors(path: Path, dim: int = 8, seed: int = 0, binary: bool = False) -> Path:
    """Random word2vec vectors for :data:`WORDS` (lower case)."""
    rng = np.random.default_rng(seed)
    return WordVectors(list(WORDS), rng.normal(size=(len(WORDS), dim)).astype(np.float32)).save(path, binary=binary)


def tiny_nnlm(directory: Path, seed: int = 0) -> Path:
    """An ``nnlm-tiny`` with a vocabulary of :data:`CORPUS`, saved as a run's ``final/``."""
    vocab = WordVocab.build(CORPUS, min_count=1)
    torch.manual_seed(seed)
    return save_nnlm(NNLM(NNLMConfig.preset("nnlm-tiny", vocab_size=len(vocab))), vocab, directory)


def full_logits_greedy(model: GPTLanguageModel, prompt: list[int], n: int) -> list[int]:
    """Greedy tokens from full forward passes without a cache (no copies, no screen, no compiled
    step): the reference the decoding tests compare every fast path with."""
    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            ids.append(out[-1])
    return out


def full_logits_sampled(model: GPTLanguageModel, prompt: list[int], cfg: GenerationConfig) -> list[int]:
    """Sampled tokens from full forward passes without a cache, drawn by ``choose`` with the
    generator :func:`~muppets.generate.generate` seeds from ``cfg.seed``: the sampling reference."""
    generator = torch.Generator().manual_seed(cfg.seed)
    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(cfg.max_new_tokens):
            out.append(int(choose(model(torch.tensor([ids])).logits[:, -1], cfg, generator)))
            ids.append(out[-1])
    return out
