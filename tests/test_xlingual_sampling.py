"""Exponentially smoothed language sampling (p_l ∝ n_l^α) for the tokenizer sample and the
language-balanced pretraining batches; and a tiny multilingual BERT run end to end."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.data.language_sampling import LanguageSample, count_units, smoothed_probabilities
from muppets.data.shards import ShardWriter, TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.mlm import MaskingConfig
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds
from muppets.objectives.multilingual import LanguageBalancedData, allocate, language_seed
from muppets.recipes import bert_pretrain
from muppets.tokenizers.wordpiece import WordPieceTokenizer


# ----------------------------------------------------------------------------- probabilities


def test_probabilities_match_the_formula() -> None:
    sizes = {"en": 8.8e6, "zh": 8.0e6, "de": 2.1e6, "es": 2.5e6}
    for alpha in (0.0, 0.3, 0.7, 1.0):
        probs = smoothed_probabilities(sizes, alpha)
        weights = {k: v ** alpha for k, v in sizes.items()}
        for lang in sizes:
            assert probs[lang] == pytest.approx(weights[lang] / sum(weights.values()), rel=1e-12)
    assert smoothed_probabilities(sizes, 1.0)["en"] == pytest.approx(8.8 / 21.4)
    assert smoothed_probabilities(sizes, 0.0)["de"] == pytest.approx(0.25)
    low = smoothed_probabilities(sizes, 0.7)
    assert low["de"] > 2.1 / 21.4 and low["en"] < 8.8 / 21.4  # smoothing moves mass to small languages


@pytest.mark.parametrize("bad", [{"en": 1.0, "de": 0.0}, {}])
def test_probabilities_refuse_empty_languages(bad: dict) -> None:
    with pytest.raises(ConfigError):
        smoothed_probabilities(bad, 0.7)


def test_alpha_outside_0_1_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="language_alpha"):
        smoothed_probabilities({"en": 1.0}, 1.5)


def test_units_count_words_and_cjk_characters() -> None:
    assert count_units("Der Müller kam.") == 3
    assert count_units("他说，妈妈，我回来了。") == 8 + 3  # 8 ideographs; the full-width marks stay words
    assert count_units("BERT 模型 works") == 4


def test_tokenizer_sample_shares_follow_the_probabilities() -> None:
    rng = random.Random(0)
    texts = {"en": [" ".join(["word"] * rng.randint(3, 9)) for _ in range(20000)],
             "de": [" ".join(["wort"] * rng.randint(3, 9)) for _ in range(3000)],
             "zh": ["字" * rng.randint(2, 6) for _ in range(1500)]}
    sample = LanguageSample({k: (lambda v=v: iter(v)) for k, v in texts.items()}, alpha=0.7, seed=3)
    drawn = list(sample.texts())
    report = sample.report()["languages"]
    units = {k: sum(map(count_units, v)) for k, v in texts.items()}
    probs = smoothed_probabilities(units, 0.7)
    assert sum(r["sampled_units"] for r in report.values()) == sum(map(count_units, drawn))
    for lang in texts:
        assert report[lang]["units"] == units[lang]
        assert report[lang]["probability"] == pytest.approx(probs[lang])
        assert report[lang]["sampled_share"] == pytest.approx(probs[lang], abs=0.01)
    assert report["zh"]["rate"] > 1 > report["en"]["rate"]  # Chinese upsampled (repeated), English thinned
    again = LanguageSample({k: (lambda v=v: iter(v)) for k, v in texts.items()}, alpha=0.7, seed=3)
    assert list(again.texts()) == drawn  # the same sample in every run


# ----------------------------------------------------------------------------- batch composition


def test_allocate_is_exact_in_expectation_and_never_off_by_more_than_one() -> None:
    probs = np.array([0.43, 0.27, 0.17, 0.08, 0.05])
    rng = np.random.default_rng(0)
    draws = np.stack([allocate(12, probs, rng) for _ in range(20000)])  # (draws, L)
    assert (draws.sum(1) == 12).all()
    assert ((draws == np.floor(12 * probs)) | (draws == np.ceil(12 * probs))).all()
    np.testing.assert_allclose(draws.mean(0), 12 * probs, atol=0.02)


def _corpus(path: Path, seed: int, docs: int = 8) -> TokenCorpus:
    if path.exists():  # the same corpus, opened again (a second run over it)
        return TokenCorpus(path)
    rng = np.random.default_rng(seed)
    with ShardWriter(path, vocab_size=60) as writer:
        for _ in range(docs):
            writer.add_document([rng.integers(10, 60, rng.integers(3, 8)).tolist() for _ in range(rng.integers(4, 9))])
    return TokenCorpus(path)


SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, all=[0, 1, 2, 3, 4])
PROBS = [0.5, 0.3, 0.2]


def _data(root: Path, batch_size: int = 10, seed: int = 7) -> LanguageBalancedData:
    cfg = PretrainDataConfig(max_seq_len=24, masking=MaskingConfig(max_predictions=4), eval_examples=8)
    parts = {lang: BertPretrainingData(_corpus(root / lang, i), SPECIAL, cfg, batch_size, 1,
                                       language_seed(seed, i))
             for i, lang in enumerate(["en", "de", "zh"])}
    return LanguageBalancedData(parts, PROBS, batch_size, 1, seed)


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_balanced_batches_are_a_pure_function_of_the_step(tmp_path: Path) -> None:
    first, resumed = _data(tmp_path), _data(tmp_path)
    late = resumed.micro_batches(17, 0, 1)  # a resumed run starts at step 17
    for step in range(18):
        batch = first.micro_batches(step, 0, 1)
    assert _equal(batch[0], late[0])
    # two DDP ranks build exactly the two halves of the single-process batch (rows up to padding)
    halves = [_data(tmp_path).micro_batches(5, rank, 2)[0] for rank in (0, 1)]
    whole = first.micro_batches(5, 0, 1)[0]
    rows = [(h["input_ids"][i][h["attention_mask"][i]], h["mlm_labels"][i], h["nsp_labels"][i])
            for h in halves for i in range(len(h["input_ids"]))]
    assert len(rows) == len(whole["input_ids"]) == 10
    for i, (ids, labels, nsp) in enumerate(rows):
        assert torch.equal(ids, whole["input_ids"][i][whole["attention_mask"][i]])
        assert torch.equal(labels, whole["mlm_labels"][i]) and nsp == whole["nsp_labels"][i]
    assert not _equal(first.micro_batches(3, 0, 1)[0], first.micro_batches(4, 0, 1)[0])


def test_balanced_batches_follow_the_probabilities_and_read_each_language_in_order(tmp_path: Path) -> None:
    data = _data(tmp_path, batch_size=10)
    located = [data.locate_language(g) for g in range(10 * 500)]
    langs = np.array([lang for lang, _ in located])
    for lang, p in enumerate(PROBS):
        assert data.composition(0)[lang] == round(10 * p)  # 5 / 3 / 2 exactly: no fractional part
        numbers = [k for la, k in located if la == lang]
        assert numbers == list(range(len(numbers)))  # the language's own examples, in order, none skipped
    np.testing.assert_allclose(np.bincount(langs) / len(langs), PROBS)
    uneven = LanguageBalancedData(data.parts and dict(zip(data.languages, data.parts)), [0.45, 0.37, 0.18], 8, 1, 7)
    shares = np.bincount([uneven.locate_language(g)[0] for g in range(8 * 3000)]) / (8 * 3000)
    np.testing.assert_allclose(shares, [0.45, 0.37, 0.18], atol=0.005)


def test_probabilities_must_sum_to_one(tmp_path: Path) -> None:
    data = _data(tmp_path)
    with pytest.raises(ConfigError):
        LanguageBalancedData(dict(zip(data.languages, data.parts)), [0.5, 0.5, 0.5], 8, 1, 0)


# ----------------------------------------------------------------------------- end to end


def _write_languages(root: Path) -> dict:
    rng = random.Random(1)
    en, de, zh = root / "en", root / "de", root / "zh"
    for d in (en, de, zh):
        d.mkdir(parents=True)
    words_en = "the farmer carried a wooden boat near the river before sunrise".split()
    words_de = "der müller trug ein hölzernes boot an den fluß vor sonnenaufgang".split()
    for i in range(6):
        (en / f"doc{i}.txt").write_text("\n".join(" ".join(rng.sample(words_en, 7)).capitalize() + "."
                                                 for _ in range(12)) + "\n", encoding="utf-8")
        lines = [" ".join(rng.sample(words_de, 8)).capitalize() + "." for _ in range(12)]
        (de / f"novel{i}.txt").write_text("\nErstes Kapitel\n" + "\n".join(lines), encoding="utf-8")
    chars = "他说妈妈我回来了北京天津之间面积公里"
    docs = "".join(f'<doc id="{i}" url="u" title="t{i}">\nt{i}\n\n'
                   + "\n".join("".join(rng.sample(chars, 8)) + "。" + "".join(rng.sample(chars, 6)) + "（）。"
                               for _ in range(8)) + "\n</doc>\n" for i in range(6))
    (zh / "zhwiki_00.txt").write_text(docs, encoding="utf-8")
    return {"en": [str(en)], "de": {"inputs": [str(de)], "format": "novel-wrapped"},
            "zh": {"inputs": [str(zh)], "format": "zhwiki"}}


def test_the_sample_report_names_a_language_its_vocabulary_cannot_read(tmp_path: Path, caplog) -> None:
    from muppets.recipes import multilingual

    texts = {"en": ["the cat sat on the mat"] * 20, "zh": ["他说北京很大龘龘"] * 20}
    sample = LanguageSample({lang: (lambda t=t: iter(t)) for lang, t in texts.items()})
    tok = WordPieceTokenizer.train(sample.texts(), vocab_size=120, min_frequency=1, limit_alphabet=14)
    with caplog.at_level(logging.WARNING, logger="muppets.recipes.multilingual"):
        multilingual.write_sample_report(sample, tmp_path, tok)
    shares = {lang: v["unk_share"] for lang, v in json.loads((tmp_path / "language_sample.json").read_text())
              ["languages"].items()}
    assert shares["en"] == 0.0 and shares["zh"] > 0.1
    assert "of zh's pieces [UNK]" in caplog.text and "of en's" not in caplog.text


def test_tiny_multilingual_pretraining_run(tmp_path: Path) -> None:
    tiny = json.dumps({"hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "num_layers": 2})
    cfg = bert_pretrain.load_config(None, [
        f"run_dir={tmp_path / 'run'}", f"model.overrides={tiny}", "model.preset=bert-tiny",
        "tokenizer.vocab_size=300", "tokenizer.min_frequency=1", "tokenizer.limit_alphabet=2000", "corpus.workers=1",
        "corpus.languages=" + json.dumps(_write_languages(tmp_path / "raw")),
        "data.max_seq_len=32", "data.masking.max_predictions=5", "data.eval_examples=12",
        "data.eval_fraction=0.3", "train.steps=2", "train.batch_size=6", "train.progress=false",
        "train.tensorboard=false", "train.threads=1", "eval_batch_size=8"])
    summary = bert_pretrain.run(cfg)
    run = tmp_path / "run"
    assert summary["step"] == 2 and (run / "final" / "config.json").is_file()
    assert set(summary["languages"]) == {"en", "de", "zh"}
    assert sum(v["probability"] for v in summary["languages"].values()) == pytest.approx(1.0)
    sample = json.loads((run / "language_sample.json").read_text())
    assert sample["alpha"] == 0.7 and all(v["sampled_units"] > 0 for v in sample["languages"].values())
    assert all(v["unk_share"] == 0.0 for v in sample["languages"].values())  # every character has room
    for lang in ("en", "de", "zh"):
        assert (run / "languages" / lang / "corpus" / "meta.json").is_file()
    tok = WordPieceTokenizer.load(run / "tokenizer")
    ids = tok.encode("他说北京")
    assert len(ids) == 4 and tok.unk_id not in ids  # CJK characters one piece each, all in the vocabulary
