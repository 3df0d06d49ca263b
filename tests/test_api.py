"""The top-level API: ``import muppets`` is light (no torch), its names load on first use,
``muppets.load`` returns the right object per directory kind, ``muppets.encode`` gives
sentence-transformers' vectors, and the docstring examples run."""

from __future__ import annotations

import doctest
import pydoc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import muppets
from muppets.interop.hf_bert import save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.tokenizers import WordPieceTokenizer
from muppets.transfer.models import new_task_model, save_task_model

SRC = str(Path(muppets.__file__).resolve().parents[1])


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def test_import_muppets_loads_no_torch_and_the_names_come_on_first_use():
    code = ("import sys, muppets; assert 'torch' not in sys.modules, 'torch at import';"
            "assert 'numpy' not in sys.modules; muppets.weak.ABSTAIN; assert 'torch' not in sys.modules;"
            "muppets.Predictor; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": SRC})


def test_help_shows_the_api():
    text = pydoc.render_doc(muppets, renderer=pydoc.plaintext)
    for name in ("load", "Predictor", "encode", "weak", "MajorityVote", "LabelModel"):
        assert name in text
    assert set(muppets.__all__) <= set(dir(muppets))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        muppets.nope  # noqa: B018


def test_docstring_examples_run():
    import muppets.api

    assert doctest.testmod(muppets).failed == 0 and doctest.testmod(muppets.api).failed == 0


def test_load_returns_the_right_object(tmp_path):
    tok = WordPieceTokenizer.train(["john went to paris with mary", "a good film"], vocab_size=200, min_frequency=1)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37,
                     max_position_embeddings=64, pad_token_id=tok.pad_id)
    save_hf_bert(BertForPreTraining(cfg), tmp_path / "bert", tok)
    save_task_model(new_task_model(tmp_path / "bert", "tag", 3, tok), tmp_path / "tagger", tok, ["O", "B-PER", "I-PER"])
    pretrained = muppets.load(tmp_path / "bert")
    assert isinstance(pretrained, BertForPreTraining) and not pretrained.training
    tagger = muppets.load(tmp_path / "tagger")
    assert isinstance(tagger, muppets.Predictor) and tagger.kind == "tag"
    assert isinstance(tagger("john went to paris"), list)
    sentence = muppets.load("minilm")
    assert isinstance(sentence, muppets.SentenceModel)
    with pytest.raises(muppets.errors.ConfigError, match="nowhere"):
        muppets.load(tmp_path / "nowhere")


def test_encode_equals_sentence_transformers():
    st = pytest.importorskip("sentence_transformers")
    from muppets.paths import resolve_model_path

    texts = ["The bank closed.", "A river bank.", "Money in the bank"]
    ours = muppets.encode(texts, model="minilm")
    theirs = st.SentenceTransformer(str(resolve_model_path("minilm")), device="cpu").encode(texts)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    assert np.allclose(ours, theirs, atol=1e-5)
    assert np.allclose(muppets.encode(texts[0], model="minilm"), theirs[0], atol=1e-5)
