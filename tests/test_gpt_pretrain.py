"""GPT pretraining end to end on a tiny corpus: CLM blocks (packing, eos separators, every token a
target once per epoch, determinism), the recipe through ``muppets pretrain`` (a GPT preset picks
it), the HF GPT-2 directory it leaves, and ``muppets generate`` on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.cli import main as cli_main
from muppets.data.prepare import prepare_corpus
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.clm import CausalLMData, CLMDataConfig, block, document_stream, num_blocks
from muppets.recipes import bert_pretrain, gpt_pretrain, pick_recipe
from muppets.tokenizers import ByteLevelBPETokenizer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_pretrain_e2e import write_corpus  # noqa: E402

TINY = {"hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "num_layers": 2}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt")
    raw = write_corpus(root / "raw")
    texts = [line for line in (raw / "docs.txt").read_text().splitlines() if line.strip()]
    tok = ByteLevelBPETokenizer.train(texts, vocab_size=400, min_frequency=1)
    tok.save(root / "tok")
    prepare_corpus([raw], tok.with_prefix_space(True), root / "corpus", workers=1, progress=False)
    return root, tok, TokenCorpus(root / "corpus")


def test_stream_packs_documents_with_eos(setup):
    _, tok, corpus = setup
    docs = np.array([0, 3])
    stream = document_stream(corpus, docs, tok.eos_id)
    first = np.asarray(corpus.document_tokens(0))
    assert stream[len(first)] == tok.eos_id and np.array_equal(stream[:len(first)], first)
    assert (stream == tok.eos_id).sum() == 2 and stream[-1] == tok.eos_id
    assert tok.decode(first.tolist()).startswith(" ")  # sentences encoded as in running text


def test_blocks_cover_every_target_once_per_epoch(setup):
    _, tok, corpus = setup
    data = CausalLMData(corpus, tok.eos_id, CLMDataConfig(block_size=16), batch_size=4,
                        accumulation=1, seed=3)
    n = data.epoch_size
    assert n == num_blocks(len(data.stream), 16)
    starts = sorted(int(i) * 15 for i in data._order(0))
    assert starts == list(range(0, n * 15, 15))  # each block once; consecutive blocks share one token
    assert np.array_equal(block(data.stream, 1, 16)[0], block(data.stream, 0, 16)[-1])
    a = data.micro_batches(5, 0, 1)[0]
    assert torch.equal(a["input_ids"], data.micro_batches(5, 0, 1)[0]["input_ids"])  # deterministic
    assert torch.equal(a["input_ids"], a["labels"]) and a["input_ids"].shape == (4, 16)
    halves = [data.micro_batches(5, r, 2)[0]["input_ids"] for r in (0, 1)]
    assert torch.equal(torch.cat(halves), a["input_ids"])  # DDP ranks split the global batch
    assert data.normalizers(a) == {"lm": 4 * 15.0}
    assert sum(b["input_ids"].shape[0] for b in data.eval_batches(8)) > 0
    assert not set(data.eval_docs.tolist()) & set(range(corpus.num_documents)) - set(data.eval_docs.tolist())
    with pytest.raises(ConfigError, match="block"):
        CausalLMData(corpus, tok.eos_id, CLMDataConfig(block_size=10**7), 4, 1, 0)


def test_recipe_is_picked_by_preset(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  preset: gpt-mini\n")
    assert pick_recipe(cfg, []) is gpt_pretrain
    assert pick_recipe(cfg, ["model.preset=bert-mini"]) is bert_pretrain
    assert pick_recipe(None, []) is bert_pretrain


def test_pretrain_cli_then_transformers_then_generate(setup, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    root, tok, _ = setup
    config = tmp_path / "gpt.yaml"
    config.write_text(json.dumps({
        "run_dir": str(tmp_path / "run"), "model": {"preset": "gpt-tiny", "overrides": TINY},
        "tokenizer": {"path": str(root / "tok")},
        "corpus": {"inputs": [str(root / "raw")], "prepared": str(root / "corpus"), "workers": 1},
        "data": {"block_size": 32, "eval_fraction": 0.1, "eval_blocks": 8},
        "train": {"steps": 16, "batch_size": 4, "lr": 1e-2, "warmup_steps": 2, "eval_every": 4,
                  "checkpoint_every": 4, "log_every": 2, "progress": False}}))
    assert cli_main(["pretrain", str(config), "device=cpu"]) == 0
    out = capsys.readouterr().out
    assert "perplexity" in out and "unigram baseline" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    evals = [r["eval/lm_perplexity"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").open())
             if "eval/lm_perplexity" in r]
    assert summary["step"] == 16 and len(evals) == 4 and evals[-1] < evals[0] < tok.vocab_size
    final = tmp_path / "run" / "final"
    hf = transformers.GPT2LMHeadModel.from_pretrained(final).eval()
    from muppets.interop.hf_gpt import load_hf_gpt
    ours = load_hf_gpt(final).eval()
    ids = torch.tensor([tok.encode("The farmer carried a wooden boat")])
    with torch.no_grad():
        assert torch.allclose(ours(ids).logits, hf(ids).logits, atol=1e-5)
    assert transformers.AutoTokenizer.from_pretrained(final)("The farmer")["input_ids"] == tok.encode("The farmer")
    assert cli_main(["generate", "--model", str(final), "--max-new-tokens", "5", "The farmer"]) == 0
    streamed = capsys.readouterr().out
    greedy = transformers.GPT2LMHeadModel.from_pretrained(final).generate(
        torch.tensor([tok.encode("The farmer")]), max_new_tokens=5, do_sample=False,
        pad_token_id=tok.eos_id, eos_token_id=None)
    expected = tok.decode(greedy[0, len(tok.encode("The farmer")):].tolist())
    if tok.eos_id in greedy[0, len(tok.encode("The farmer")):].tolist():
        expected = tok.decode(greedy[0, len(tok.encode("The farmer")):].tolist()).split("<|endoftext|>")[0]
    assert streamed.startswith("The farmer" + expected)


HOSTILE = ["Tabs\t, CRLF\r\n,  two spaces, trailing space ", "北京 🙂 Café naïve — “quotes”", "\x00\x7f\u200b\ufeff",
           "<|endoftext|> is text here", "a" * 300, " leading space and ünïcödé never seen in training"]


def test_tokenizer_train_kind_bpe_round_trips_any_text_and_pretrains_a_gpt(setup, tmp_path, capsys):
    """``muppets tokenizer train --kind bpe`` writes the directory GPT pretraining and ``generate``
    load: any text encodes and decodes back byte for byte, and tokenizer.path takes it."""
    root = setup[0]
    out = tmp_path / "tok"
    train = ["tokenizer", "train", "--input", str(root / "raw"), "--out", str(out), "--vocab-size", "320",
             "--min-frequency", "1"]
    assert cli_main(train) == 0 and (out / "vocab.txt").is_file()  # a WordPiece first: --kind bpe replaces it
    assert cli_main([*train, "--kind", "bpe", "--cased"]) == 2
    assert "--cased applies to WordPiece only" in capsys.readouterr().err
    assert cli_main([*train, "--kind", "bpe", "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["merges.txt", "special_tokens_map.json", "tokenizer.json",
                                                     "tokenizer_config.json", "vocab.json"]  # no stale vocab.txt
    assert "320 tokens (byte-level BPE)" in capsys.readouterr().out
    tok = ByteLevelBPETokenizer.load(out)
    from_files = ByteLevelBPETokenizer.from_files(out / "vocab.json", out / "merges.txt")
    assert tok.vocab_size == 320 and tok.eos_id == 319 and from_files.to_json() == tok.to_json()
    for text in HOSTILE:
        ids = tok.encode_text_batch([text])[0]
        assert tok.decode(ids).encode("utf-8") == text.encode("utf-8") and tok.eos_id not in ids
    config = tmp_path / "gpt.yaml"
    config.write_text(json.dumps({
        "run_dir": str(tmp_path / "run"), "model": {"preset": "gpt-tiny", "overrides": TINY},
        "tokenizer": {"path": str(out)}, "corpus": {"inputs": [str(root / "raw")], "workers": 1},
        "data": {"block_size": 32, "eval_fraction": 0.1, "eval_blocks": 4},
        "train": {"steps": 3, "batch_size": 4, "lr": 1e-2, "log_every": 0, "progress": False, "plot": False}}))
    assert cli_main(["pretrain", str(config), "device=cpu"]) == 0
    final = tmp_path / "run" / "final"
    saved = ByteLevelBPETokenizer.load(final)
    assert (saved.merges, saved.vocab_size) == (tok.merges, 320)
    assert json.loads((final / "config.json").read_text())["vocab_size"] == 320
    capsys.readouterr()
    assert cli_main(["generate", str(final), "--max-new-tokens", "3", "The farmer"]) == 0  # MODEL first
    assert capsys.readouterr().out.startswith("The farmer")
