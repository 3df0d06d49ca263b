"""Continued MLM pretraining (``muppets pretrain … model.init_from=DIR``) from a tiny RoBERTa,
XLM-R, DistilBERT and ELECTRA-generator directory written by transformers: the run reads the
directory's own tokenizer.json / vocab through its family, trains two steps, and writes
``final/`` back in the same family, which ``AutoModelForMaskedLM`` loads with no missing key
and whose tokenizer gives the checkpoint's ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from _tiny_backbones import CORPUS  # noqa: E402
from _tiny_families import tiny_family_dir  # noqa: E402

from muppets import families  # noqa: E402
from muppets.errors import CheckpointError  # noqa: E402
from muppets.interop.model_card import read_model_card  # noqa: E402
from muppets.recipes import bert_pretrain, pick_recipe  # noqa: E402

NAMES = ("roberta", "xlm-roberta", "distilbert", "electra")
TEXT = "the river bank was good and mary went to london"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"text": f"{CORPUS[i % len(CORPUS)]} . {TEXT} {i}"}) for i in range(40)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("name", NAMES)
def test_continued_pretraining_saves_back_in_the_same_family(name, tmp_path):
    start = tiny_family_dir(name, tmp_path / "start")
    run_dir = tmp_path / "run"
    args = [f"run_dir={run_dir}", f"model.init_from={start}", f"corpus.inputs=[{_corpus(tmp_path)}]",
            "corpus.workers=1", "data.nsp=false", "data.max_seq_len=24", "data.eval_examples=4", "train.steps=2",
            "train.batch_size=4", "train.eval_every=0", "train.threads=1", "train.lr=1e-2"]
    assert pick_recipe(None, args) is bert_pretrain
    bert_pretrain.run(bert_pretrain.load_config(None, args))
    final = run_dir / "final"
    assert not (run_dir / "tokenizer").exists()  # the checkpoint's own tokenizer, none trained
    assert families.of_directory(final).name == families.of_directory(start).name
    card = read_model_card(final)
    assert card["base_model"] == str(start) and card["datasets"] == [str(tmp_path / "corpus.jsonl")]
    assert card["pipeline_tag"] == "fill-mask" and card["library_name"] == "muppets"
    before = json.loads((start / "config.json").read_text())
    assert json.loads((final / "config.json").read_text())["model_type"] == before["model_type"]
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info  # (RoBERTa's pooler is written for AutoModel)
    assert type(model).__name__ == type(transformers.AutoModelForMaskedLM.from_pretrained(start)).__name__
    theirs, ours = transformers.AutoTokenizer.from_pretrained(start), transformers.AutoTokenizer.from_pretrained(final)
    assert ours(TEXT, "money")["input_ids"] == theirs(TEXT, "money")["input_ids"]
    ids = torch.tensor([theirs(TEXT)["input_ids"]])
    old = transformers.AutoModelForMaskedLM.from_pretrained(start).eval()
    with torch.no_grad():
        moved = (model.eval()(ids).logits - old(ids).logits).abs().max()
    assert 0 < moved < 1e3  # it trained, and stayed finite


def test_a_directory_of_an_unknown_model_type_names_its_config(tmp_path):
    directory = tmp_path / "odd"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "albert"}))
    (directory / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"odd/config.json: key 'model_type' is 'albert'"):
        pick_recipe(None, [f"model.init_from={directory}"])
