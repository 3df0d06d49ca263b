"""Provenance: every directory a family writes carries a README.md model card whose YAML front
matter is Hub metadata (library_name, license, base_model, datasets, pipeline_tag, metrics from
metrics.json) and a config.json stating the muppets version, which transformers still loads.
The project ships a LICENSE (the licence pyproject.toml declares) and py.typed."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from _tiny_backbones import tiny_bert

import muppets
from muppets import families
from muppets.interop.model_card import Provenance, read_model_card, write_model_card
from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model

ROOT = Path(__file__).resolve().parents[1]


def test_a_saved_encoder_has_a_card_and_a_versioned_config_transformers_loads(tmp_path):
    transformers = pytest.importorskip("transformers")
    source = tiny_bert(tmp_path / "src")
    family = families.of_directory(source)
    family.save(family.load(source), tmp_path / "out", family.tokenizer(source),
                provenance=Provenance(base_model="org/tiny-bert", datasets=("data:english-corpus/wiki",)))
    card = read_model_card(tmp_path / "out")
    assert card["library_name"] == "muppets" and card["license"] == "apache-2.0"
    assert card["base_model"] == "org/tiny-bert" and card["datasets"] == ["data:english-corpus/wiki"]
    assert card["pipeline_tag"] == "fill-mask" and card["tags"] == ["muppets", "bert"]
    assert "from `org/tiny-bert`" in (tmp_path / "out" / "README.md").read_text()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["muppets_version"] == muppets.__version__
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and model.config.model_type == "bert"
    assert read_model_card(source)["pipeline_tag"] == "fill-mask" and "base_model" not in read_model_card(source)


def test_a_task_model_card_takes_its_task_and_the_metrics(tmp_path):
    transformers = pytest.importorskip("transformers")
    source = tiny_bert(tmp_path / "src")
    tok = load_tokenizer(source)
    torch.manual_seed(0)
    save_task_model(new_task_model(source, "tag", 3, tok), tmp_path / "best", tok, ["O", "B-X", "I-X"],
                    provenance=Provenance(base_model=str(source), datasets=("conll2003",)))
    card = read_model_card(tmp_path / "best")
    assert card["pipeline_tag"] == "token-classification" and "model-index" not in card
    write_model_card(tmp_path / "best", Provenance(base_model=str(source), datasets=("conll2003",)),
                     metrics={"dev": {"span_f1": 0.5, "loss": float("nan")}, "test": {"span_f1": 0.25}, "steps": 3})
    card = read_model_card(tmp_path / "best")
    result = card["model-index"][0]["results"][0]
    assert result["dataset"]["name"] == "conll2003" and result["task"]["type"] == "token-classification"
    assert result["metrics"] == [{"type": "span_f1", "value": 0.5, "name": "dev span_f1"},
                                 {"type": "span_f1", "value": 0.25, "name": "test span_f1"}]  # NaN left out
    assert "| test span_f1 | 0.2500 |" in (tmp_path / "best" / "README.md").read_text()
    model = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "best")
    assert model.config.num_labels == 3 and model.config.muppets_version == muppets.__version__


def test_a_gpt_directory_has_a_text_generation_card(tmp_path):
    from _tiny_backbones import tiny_gpt

    directory = tiny_gpt(tmp_path / "gpt")
    assert read_model_card(directory)["pipeline_tag"] == "text-generation"
    assert json.loads((directory / "config.json").read_text())["muppets_version"] == muppets.__version__


def test_the_project_ships_its_licence_and_py_typed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["muppets"]
    assert "py.typed" in data and (ROOT / "src" / "muppets" / "py.typed").is_file()
