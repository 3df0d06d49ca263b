"""The pretraining objectives' shared StepData (objectives/step_data.py): epochs of varying
length, per-instance caches, and the real (non-padding) tokens every objective reports and the
trainer logs per step."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest
import torch

from muppets.data.shards import TokenCorpus
from muppets.objectives.bilm import BiLMData, BiLMDataConfig
from muppets.objectives.clm import CausalLMData, CLMDataConfig
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds
from muppets.objectives.nnlm import NNLMData, NNLMDataConfig
from muppets.objectives.step_data import EpochCache, PretrainingData, spread
from muppets.tokenizers.words import WordVocab
from muppets.train import Trainer, read_log

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _toy_train import ToyData, ToyModel, toy_config  # noqa: E402
from _tiny_corpora import random_corpus, word_corpus  # noqa: E402

VOCAB = 500
SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, all=[0, 1, 2, 3, 4])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> TokenCorpus:
    """20 documents of 3..12 sentences of 3..25 tokens (ids 5..499)."""
    return random_corpus(tmp_path_factory.mktemp("c") / "corpus", documents=20, max_sentences=12, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> tuple[WordVocab, TokenCorpus]:
    """The generated 46-document corpus as word ids (for the biLM)."""
    return word_corpus(tmp_path_factory.mktemp("w"))


BLOCK = 16  # CLM block size
MICRO = 4  # examples per micro-batch: batch 8, accumulation 2, one rank


def all_objectives(corpus: TokenCorpus, words: tuple[WordVocab, TokenCorpus]) -> dict[str, PretrainingData]:
    vocab, word_ids = words
    bert = PretrainDataConfig(max_seq_len=48, eval_fraction=0.2)
    mlm = PretrainDataConfig(max_seq_len=48, nsp=False, short_seq_prob=0.3)  # short sequences are padded
    return {
        "bert": BertPretrainingData(corpus, SPECIAL, bert, 8, 2, 0),
        "bert-mlm": BertPretrainingData(corpus, SPECIAL, mlm, 8, 2, 0),
        "clm": CausalLMData(corpus, 3, CLMDataConfig(block_size=BLOCK), 8, 2, 0),
        "bilm": BiLMData(word_ids, vocab, BiLMDataConfig(window=12), 8, 2, 0, softmax_size=60),
        "nnlm": NNLMData(corpus, 3, 1, 2, NNLMDataConfig(eval_fraction=0.2), 8, 2, 0),
    }


REAL = {  # the non-padding tokens of a micro-batch, counted without the objective's own mask
    "bert": lambda b: int((b["input_ids"] != SPECIAL.pad).sum()),  # the corpus holds ids 5..499, never [PAD]
    "bert-mlm": lambda b: int((b["input_ids"] != SPECIAL.pad).sum()),
    "clm": lambda b: len(b["input_ids"]) * BLOCK,  # whole blocks of the stream
    "bilm": lambda b: int(b["char_ids"].any(-1).sum()),  # every word has characters, <pad> none
    "nnlm": lambda b: MICRO,  # one target word (with its context) per example
}
POSITIONS = {"bert": "input_ids", "bert-mlm": "input_ids", "bilm": "mask"}  # padded objectives: (B, T) inputs


def test_num_tokens_counts_the_real_tokens_of_every_objective(corpus, words):
    padded = set()
    for name, data in all_objectives(corpus, words).items():
        for step in (0, 7):
            for batch in data.micro_batches(step, 0, 1):
                real = REAL[name](batch)
                assert data.num_tokens(batch) == real, name
                if name in POSITIONS and real < batch[POSITIONS[name]].numel():
                    padded.add(name)
    assert padded == set(POSITIONS)  # the count was checked on batches with padding


def test_trainer_logs_real_tokens_per_step(tmp_path):
    data = ToyData(8, 2)
    Trainer(ToyModel(), data, toy_config(steps=3), tmp_path).train()
    steps = [r for r in read_log(tmp_path) if "loss" in r]
    expected = [sum(data.num_tokens(b) for b in data.micro_batches(s, 0, 1)) for s in range(3)]
    assert [r["real_tokens"] for r in steps] == expected == [48, 48, 48]


def test_step_data_does_not_pin_itself(corpus, words):
    """The epoch caches belong to the instance: a dropped StepData is freed."""
    refs = []
    for data in all_objectives(corpus, words).values():
        data.micro_batches(3, 0, 1)
        refs.append(weakref.ref(data))
    del data
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


class Uneven(PretrainingData):
    """Epoch e holds 3 + e % 3 examples, each the pair (epoch, position)."""

    order_salt = 5

    def epoch_length(self, epoch: int) -> int:
        return 3 + epoch % 3

    def batch(self, examples: range) -> dict[str, torch.Tensor]:
        epochs, positions = self.locate(examples)
        return {"epoch": torch.from_numpy(epochs), "position": torch.from_numpy(positions),
                "row": torch.from_numpy(self.rows(examples))}


def test_epochs_of_different_lengths_follow_each_other():
    data = Uneven(batch_size=4, accumulation=2, seed=0)
    batches = [b for step in range(6) for b in data.micro_batches(step, 0, 1)]
    epochs = torch.cat([b["epoch"] for b in batches]).tolist()
    positions = torch.cat([b["position"] for b in batches]).tolist()
    assert epochs == [0] * 3 + [1] * 4 + [2] * 5 + [3] * 3 + [4] * 4 + [5] * 5
    assert positions == [*range(3), *range(4), *range(5), *range(3), *range(4), *range(5)]
    rows = torch.cat([b["row"] for b in batches]).tolist()
    assert sorted(rows[3:7]) == [0, 1, 2, 3] and sorted(rows[7:12]) == list(range(5))  # a permutation each
    again = Uneven(batch_size=4, accumulation=2, seed=0)  # a pure function of (seed, step): resume, DDP
    rank1 = torch.cat([b["row"] for b in again.micro_batches(5, 1, 2)])
    assert torch.equal(rank1, data.micro_batches(5, 0, 1)[1]["row"])


def test_epoch_cache_keeps_the_last_epochs():
    built = []
    cache = EpochCache(lambda e: built.append(e) or e * 10, size=2)
    assert [cache(0), cache(1), cache(0), cache(2), cache(0), cache(1)] == [0, 10, 0, 20, 0, 10]
    assert built == [0, 1, 2, 1]


def test_spread_picks_evenly():
    assert spread(10, 3).tolist() == [0, 4, 9] and spread(3, 10).tolist() == [0, 1, 2]
    assert spread(5, 0).tolist() == [] and spread(0, 4).tolist() == []
