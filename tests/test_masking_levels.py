"""Masking levels of the MLM objective (piece / whole_word / phrase / entity / mixture) and the
masking units stored with a prepared corpus.

Invariants: units never split a pre-tokenizer word, a segmenter (jieba) word or a lexicon
entity; a masked unit is masked whole; the expected number of targets is the piece budget
(the configured rate) at every level, over a large sample; 80/10/10 per masked piece; asking
for units a corpus does not store is a ConfigError; and a tiny ``muppets pretrain`` run on
Chinese text with jieba whole-word masking goes through the recipe.
"""

from __future__ import annotations

import doctest
import json
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from muppets import cli
from muppets.config import apply_overrides
from muppets.data.prepare import prepare_corpus
from muppets.data.shards import TokenCorpus
from muppets.data.units import (UNIT_BITS, Lexicon, UnitMarker, UnitSpec, english_phrases, tagged_entities,
                                wiki_titles, write_lexicon)
from muppets.errors import ConfigError, DataError
from muppets.objectives.mlm import MaskingConfig, MaskingMixture, choose_targets, draw_level, mask_sequence
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig
from muppets.paths import data_dir
from muppets.recipes import bert_pretrain
from muppets.recipes.common import CorpusSection, prepare_once
from muppets.tokenizers.wordpiece import WordPieceTokenizer

jieba = pytest.importorskip("jieba")  # the optional `chinese` extra

ZH_VOCAB = data_dir() / "vocab" / "bert-base-chinese" / "vocab.txt"
EN_VOCAB = data_dir() / "vocab" / "bert-base-uncased" / "vocab.txt"
ENTITIES = ["北京大学", "中国科学院", "上海交通大学", "长江", "张明", "国家图书馆"]
_CLAUSES = ["北京大学的研究员在上海工作", "中国科学院发表了一份新的研究报告", "张明昨天去国家图书馆借了三本书",
            "长江是中国最长的河流", "上海交通大学的学生参加了比赛", "这家公司的市场份额继续扩大",
            "他们在北京举办了国际学术会议", "今年的经济增长速度比去年更快", "张明说这个问题非常复杂",
            "新的高速铁路连接了两座城市", "研究人员发现了一种新的植物", "国家图书馆收藏了很多古籍"]


def chinese_documents(n_docs: int = 80, seed: int = 7) -> str:
    """Blank-line separated documents of 4-9 sentences, made of the clauses above."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = ["，".join(rng.sample(_CLAUSES, rng.randint(1, 3))) + rng.choice("。。！？")
                     for _ in range(rng.randint(4, 9))]
        docs.append("".join(sentences))
    return "\n\n".join(docs) + "\n"


@pytest.fixture(scope="module")
def zh_tok() -> WordPieceTokenizer:
    return WordPieceTokenizer.from_vocab(ZH_VOCAB)


@pytest.fixture(scope="module")
def zh_corpus(tmp_path_factory: pytest.TempPathFactory, zh_tok: WordPieceTokenizer) -> tuple[Path, Path]:
    """(raw corpus dir, prepared corpus dir with jieba units and the entity lexicon)."""
    root = tmp_path_factory.mktemp("zh")
    (root / "raw").mkdir()
    (root / "raw" / "docs.txt").write_text(chinese_documents(), encoding="utf-8")
    (root / "entities.txt").write_text("# people, places, organisations\n" + "".join(f"{e}\tX\n" for e in ENTITIES),
                                       encoding="utf-8")
    prepare_corpus([root / "raw"], zh_tok, root / "corpus", workers=1, progress=False,
                   units=UnitSpec("jieba", str(root / "entities.txt")))
    return root, root / "corpus"


def data_for(corpus: Path, tok: WordPieceTokenizer, nsp: bool = False, **masking) -> BertPretrainingData:
    from muppets.recipes.bert_pretrain import special_ids

    cfg = PretrainDataConfig(max_seq_len=32, nsp=nsp, masking=MaskingConfig(max_predictions=20, **masking),
                             eval_examples=16, eval_fraction=0.1)
    return BertPretrainingData(TokenCorpus(corpus), special_ids(tok), cfg, 8, 1, 0, tok.is_continuation)


# ============================================================================ units


def test_lexicon_matching_and_file_errors(tmp_path: Path) -> None:
    lex = Lexicon(["北京", "北京大学", "Paris", "New York"])
    assert lex.find("我在北京大学，北京") == [(2, 6), (7, 9)]  # longest first, no overlap
    assert lex.find("Parisian Paris, New York's") == [(9, 14), (16, 24)]  # no match glued to a word
    bad = tmp_path / "lex.txt"
    bad.write_text("北京\tLOC\n\tORG\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"lex\.txt:2: a lexicon line starts with a tab"):
        Lexicon.read(bad)
    bad.write_text("# only a comment\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no entity"):
        Lexicon.read(bad)
    with pytest.raises(ConfigError, match="corpus.segmenter='spacy'"):
        UnitSpec("spacy")


def test_lexicon_from_a_tagging_tasks_training_split(tmp_path: Path) -> None:
    from muppets.tasks.spec import TagExample

    examples = [TagExample("a", list("张明在北京大学"), ["B-PER", "I-PER", "O", "B-ORG", "I-ORG", "I-ORG", "I-ORG"], "x:1"),
                TagExample("b", ["New", "York", "is", "big"], ["B-LOC", "I-LOC", "O", "O"], "x:2")]
    path = tmp_path / "lex.txt"
    assert write_lexicon(tagged_entities(examples), path) == 3
    assert path.read_text(encoding="utf-8") == "张明\tPER\n北京大学\tORG\nNew York\tLOC\n"
    assert Lexicon.read(path).find("张明去了New York") == [(0, 2), (4, 12)]


def test_lexicon_from_wikiextractor_titles(tmp_path: Path) -> None:
    shard = tmp_path / "wiki_00"
    shard.write_text('<doc id="1" url="u" title="北京大学">\n北京大学\n\n正文。\n</doc>\n'
                     '<doc id="2" url="u" title="上海 (电视剧)">\n上海\n</doc>\n<doc id="3" url="u" title="京">\n'
                     '</doc>\n<doc id="4" url="u" title="AT&amp;T">\n</doc>\n', encoding="utf-8")
    assert list(wiki_titles([shard])) == [("北京大学", "TITLE"), ("上海", "TITLE"), ("AT&T", "TITLE")]
    out = tmp_path / "lex.txt"
    assert cli.main(["data", "lexicon", "--wiki-titles", str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == "北京大学\tTITLE\n上海\tTITLE\nAT&T\tTITLE\n"
    assert cli.main(["data", "lexicon", "--wiki-titles", str(shard), "--out", str(out)]) == 2  # never overwritten
    assert cli.main(["data", "lexicon", "--task", "msra-ner", "--out", str(out), "--overwrite"]) == 0
    assert Lexicon.read(out).find("北京大学") == [(0, 4)]  # an ORG of MSRA's training slice


def _unit_ids(flags: np.ndarray, bit: int) -> np.ndarray:
    """(L,) index of the unit each token belongs to, for one sentence's flags."""
    return np.cumsum((flags & bit) != 0) - 1


def test_units_never_split_a_word_or_an_entity(zh_corpus, zh_tok) -> None:
    root, _ = zh_corpus
    marker = UnitMarker(UnitSpec("jieba", str(root / "entities.txt")))
    sentences = [s + "。" for s in chinese_documents().replace("\n", "").replace("！", "。").replace("？", "。")
                 .split("。") if s]
    checked = {"words": 0, "entities": 0, "phrases": 0}
    for text, enc in zip(sentences, zh_tok.encode_text_with_words(sentences)):
        flags = marker.flags(text, enc.offsets, enc.word_ids)
        starts = np.array([s for s, _ in enc.offsets])
        word = _unit_ids(flags, UNIT_BITS["whole_word"])
        assert flags[0] & 7 == 7  # every level starts at the first token
        for level in ("phrase", "entity"):  # coarser levels are unions of whole words
            assert np.all(flags & UNIT_BITS["whole_word"] >= (flags & UNIT_BITS[level]) // UNIT_BITS[level])
        spans, pos = [], 0
        for piece in jieba.lcut(text):
            spans.append((pos, pos + len(piece)))
            pos += len(piece)
        for level, found in (("whole_word", spans), ("entity", Lexicon(ENTITIES).find(text))):
            units = _unit_ids(flags, UNIT_BITS[level])
            for a, b in found:  # every jieba word / entity lies inside one unit of its level
                inside = units[(starts >= a) & (starts < b)]
                assert len(set(inside.tolist())) == 1, (text, text[a:b], level)
            checked["words" if level == "whole_word" else "entities"] += len(found)
        for a, b in Lexicon(ENTITIES).find(text):  # an entity's unit: the jieba words that cover it
            units = _unit_ids(flags, UNIT_BITS["entity"])
            members = np.flatnonzero(units == units[np.searchsorted(starts, a)])
            lo = max(s for s, _ in spans if s <= a)
            hi = min(e for _, e in spans if e >= b)  # "张明说" when jieba reads 张明说 as one word
            assert text[starts[members[0]]:enc.offsets[members[-1]][1]] == text[lo:hi]
            checked["widened"] = checked.get("widened", 0) + ((lo, hi) != (a, b))
        checked["phrases"] += int(((flags & UNIT_BITS["phrase"]) == 0).sum() - ((flags & 1) == 0).sum())
        assert len(set(word.tolist())) < len(word)  # jieba words are coarser than characters
    assert checked["words"] > 500 and checked["entities"] > 50 and checked["phrases"] > 20, checked
    assert 0 < checked["widened"] < checked["entities"], checked


def test_stored_units_are_the_markers_and_workers_do_not_change_them(zh_corpus, zh_tok, tmp_path) -> None:
    root, corpus_dir = zh_corpus
    corpus = TokenCorpus(corpus_dir)
    assert corpus.units is not None and len(corpus.units) == corpus.num_tokens
    meta = corpus.meta["units"]
    assert meta["segmenter"] == "jieba" and meta["levels"] == ["whole_word", "phrase", "entity"]
    assert len(meta["entity_lexicon_sha256"]) == 64
    prepare_corpus([root / "raw"], zh_tok, tmp_path / "two", workers=2, batch_docs=4, progress=False,
                   units=UnitSpec("jieba", str(root / "entities.txt")))
    again = TokenCorpus(tmp_path / "two")
    assert np.array_equal(again.tokens, corpus.tokens) and np.array_equal(again.units, corpus.units)
    plain = prepare_corpus([root / "raw"], zh_tok, tmp_path / "plain", workers=1, progress=False)
    assert TokenCorpus(plain.out_dir).units is None
    assert np.array_equal(TokenCorpus(plain.out_dir).tokens, corpus.tokens)  # units change no token


def test_english_words_are_the_pretokenizer_words_and_phrases_are_stopword_free_runs(tmp_path: Path) -> None:
    tok = WordPieceTokenizer.from_vocab(EN_VOCAB)
    text = ("The unaffable directors of the New York Stock Exchange said on Monday that "
            "tokenization of Parisian markets rose sharply.")
    enc = tok.encode_text_with_words([text])[0]
    flags = UnitMarker(UnitSpec("pretokenizer")).flags(text, enc.offsets, enc.word_ids)
    # whole words: exactly Google's rule (a piece and its ## continuations)
    assert np.array_equal((flags & 1) != 0, ~tok.is_continuation[enc.ids])
    units: list[list[str]] = []
    for token, f in zip(enc.tokens, flags):
        if f & UNIT_BITS["phrase"]:
            units.append([token])
        else:
            units[-1].append(token)
    phrases = [" ".join(u) for u in units if len(u) > 1 and any(not t.startswith("##") for t in u[1:])]
    assert phrases == ["una ##ffa ##ble directors", "new york stock exchange", "parisian markets rose sharply"]
    assert english_phrases(["a", "b", "c", "d", "e", "f", "of", "g"]) == [(1, 5)]  # 4 words at most


# ============================================================================ choosing targets


def _units_of(n: int, sizes: list[int], rng: np.random.Generator) -> np.ndarray:
    """``(n,)`` bool continuation flags of random units drawn from ``sizes``."""
    starts = np.cumsum(rng.choice(sizes, size=n)) - 1  # (n,) more unit ends than needed
    cont = np.ones(n, dtype=bool)
    cont[0] = False
    cont[starts[starts < n - 1] + 1] = False
    return cont


@pytest.mark.parametrize("sizes", [[1, 2, 2, 3], [2, 3, 4], [1, 4, 6, 8]])
def test_expected_masked_fraction_is_the_rate_at_every_unit_size(sizes: list[int]) -> None:
    rng = np.random.default_rng(0)
    cfg = MaskingConfig(masked_lm_prob=0.15, max_predictions=40)
    maskable = np.arange(1, 127)  # 126 tokens: round(0.15 * 126) = 19 targets for pieces
    exact, google = [], []
    for _ in range(20_000):
        cont = _units_of(len(maskable), sizes, rng)
        exact.append(len(choose_targets(maskable, cont, cfg, rng, exact=True)))
        assert exact[-1] < 19 + max(sizes)  # at most one unit minus one piece over
        google.append(len(choose_targets(maskable, cont, cfg, rng, exact=False)))
    assert len(choose_targets(maskable, None, cfg, rng)) == 19
    # standard error of the mean < 0.02 targets: 0.1 is > 5 standard errors
    assert abs(np.mean(exact) - 19) < 0.1, np.mean(exact)
    assert abs(np.mean(exact) / 126 - 0.15) < 0.002
    if 1 not in sizes:  # skipping the unit that crosses the budget falls short without 1-piece units
        assert np.mean(google) < 19 - 0.2, np.mean(google)  # measured: 18.71 with units of 2-4


def test_the_cap_holds_when_the_rate_asks_for_more() -> None:
    rng = np.random.default_rng(1)
    cfg = MaskingConfig(masked_lm_prob=0.15, max_predictions=10)
    maskable = np.arange(1, 127)
    for _ in range(500):
        assert len(choose_targets(maskable, _units_of(126, [2, 3, 4], rng), cfg, rng, exact=True)) <= 10


def test_mixture_draws_each_level_in_proportion() -> None:
    cfg = MaskingConfig(level="mixture", mixture=MaskingMixture(piece=0.5, whole_word=0.3, phrase=0.2, entity=0.0))
    rng = np.random.default_rng(2)
    draws = [draw_level(cfg, rng) for _ in range(20_000)]
    shares = {level: draws.count(level) / len(draws) for level in set(draws)}
    assert set(shares) == {"piece", "whole_word", "phrase"} and cfg.unit_levels() == ["whole_word", "phrase"]
    assert shares["piece"] == pytest.approx(0.5, abs=0.015) and shares["phrase"] == pytest.approx(0.2, abs=0.015)


def test_replacement_is_80_10_10_per_masked_piece() -> None:
    rng = np.random.default_rng(3)
    ids = np.concatenate([[2], np.arange(1000, 1126), [3]])  # [CLS] 126 distinct ids [SEP]
    maskable = np.arange(1, 127)
    units = np.zeros(len(ids), dtype=np.uint8)
    cfg = MaskingConfig(level="whole_word")
    counts = np.zeros(3)
    for _ in range(3000):
        units[1:127] = (~_units_of(126, [1, 2, 3, 4], rng)).astype(np.uint8)  # bit 1 = whole_word start
        m = mask_sequence(ids, maskable, cfg, 4, np.arange(10, 900), rng, units=units)
        out = m.input_ids[m.positions]
        counts += [(out == 4).sum(), ((out != 4) & (out != m.labels)).sum(), (out == m.labels).sum()]
    shares = counts / counts.sum()
    assert shares == pytest.approx([0.8, 0.1, 0.1], abs=0.01)


# ============================================================================ through the data


def _whole(data: BertPretrainingData, level: str, rows: int = 300) -> tuple[int, float]:
    """(sequences checked, mean targets / maskable); asserts no unit of ``level`` is partly masked."""
    from muppets.objectives.mlm import PackedPlan

    plan, bit, fractions = data._plan(0), UNIT_BITS.get(level), []
    for row in range(min(rows, len(plan))):
        _, _, maskable = data.packed(plan, row) if isinstance(plan, PackedPlan) else data.pair(plan, row)
        targets = set(data.build(plan, row, data.mask_rng(row))["positions"].tolist())
        fractions.append(len(targets) / len(maskable))
        if bit is None:  # piece, or a mixture (whose level per sequence is not known here)
            continue
        units, inside = data.sequence_units(plan, row), set(maskable.tolist())
        for p in targets:  # a neighbour in the same unit (no unit start, no separator between) is masked too
            if p + 1 in inside and not units[p + 1] & bit:
                assert p + 1 in targets, (level, row, p)
            if p - 1 in inside and not units[p] & bit:
                assert p - 1 in targets, (level, row, p)
    return len(fractions), float(np.mean(fractions))


def test_every_level_masks_whole_units_at_the_piece_rate(zh_corpus, zh_tok) -> None:
    _, corpus = zh_corpus
    _, piece = _whole(data_for(corpus, zh_tok), "piece")
    for level in ("whole_word", "phrase", "entity"):
        n, fraction = _whole(data_for(corpus, zh_tok, level=level), level)
        assert n >= 100 and fraction == pytest.approx(piece, abs=0.01), (level, fraction, piece)
    n, fraction = _whole(data_for(corpus, zh_tok, level="mixture"), "mixture")
    assert fraction == pytest.approx(piece, abs=0.01)
    nsp = data_for(corpus, zh_tok, nsp=True, level="whole_word")  # pairs: [CLS] A [SEP] B [SEP]
    _whole(nsp, "whole_word", rows=100)


def test_asking_for_units_a_corpus_does_not_store_is_a_config_error(zh_corpus, zh_tok, tmp_path) -> None:
    root, _ = zh_corpus
    plain = prepare_corpus([root / "raw"], zh_tok, tmp_path / "plain", workers=1, progress=False).out_dir
    with pytest.raises(ConfigError, match="data.masking.level=whole_word .* has none: set corpus.segmenter"):
        data_for(plain, zh_tok, level="whole_word")
    no_entities = prepare_corpus([root / "raw"], zh_tok, tmp_path / "words", workers=1, progress=False,
                                 units=UnitSpec("jieba")).out_dir
    with pytest.raises(ConfigError, match=r"stores the levels \['whole_word', 'phrase'\], not \['entity'\]"):
        data_for(no_entities, zh_tok, level="mixture")
    data_for(no_entities, zh_tok, level="mixture", mixture=MaskingMixture(entity=0.0))  # fine without entities
    data_for(plain, zh_tok)  # piece masking needs nothing stored


def test_masking_settings_are_checked() -> None:
    cfg = apply_overrides(bert_pretrain.PretrainConfig(), [
        "data.masking.level=mixture", "data.masking.mixture.entity=0", "corpus.segmenter=jieba"])
    assert cfg.data.masking.unit_levels() == ["whole_word", "phrase"] and cfg.corpus.segmenter == "jieba"
    with pytest.raises(ConfigError, match="data.masking.level='words'"):
        apply_overrides(bert_pretrain.PretrainConfig(), ["data.masking.level=words"])
    with pytest.raises(ConfigError, match="whole_word=true is Google's"):
        MaskingConfig(whole_word=True, level="phrase")
    with pytest.raises(ConfigError, match="weights must be >= 0"):
        MaskingConfig(level="mixture", mixture=MaskingMixture(piece=-1.0))
    with pytest.raises(ConfigError, match="corpus.entity_lexicon needs corpus.segmenter"):
        CorpusSection(entity_lexicon="x.txt").units()


def test_prepare_once_reprepares_its_own_corpus_for_units_and_refuses_a_named_one(zh_corpus, zh_tok, tmp_path) -> None:
    root, _ = zh_corpus
    run_dir = tmp_path / "run"
    plain = prepare_once(CorpusSection(inputs=[str(root / "raw")], workers=1), zh_tok, run_dir)
    assert plain.units is None
    sec = CorpusSection(inputs=[str(root / "raw")], workers=1, segmenter="jieba")
    with_units = prepare_once(sec, zh_tok, run_dir)
    assert with_units.units is not None and with_units.directory == plain.directory
    created = with_units.meta["created"]
    assert prepare_once(sec, zh_tok, run_dir).meta["created"] == created  # reused
    assert prepare_once(CorpusSection(inputs=[str(root / "raw")], workers=1), zh_tok, run_dir).units is not None
    named = CorpusSection(inputs=[str(root / "raw")], workers=1, prepared=str(run_dir / "corpus"),
                          segmenter="pretokenizer")
    with pytest.raises(ConfigError, match="does not store the masking units"):
        prepare_once(named, zh_tok, tmp_path / "other-run")

    # a lexicon is the same when its content is: a copy elsewhere reuses the corpus, an edit does not
    lexicon = tmp_path / "entities.txt"
    lexicon.write_text("北京\tLOC\n", encoding="utf-8")
    first = prepare_once(CorpusSection(inputs=[str(root / "raw")], workers=1, segmenter="jieba",
                                       entity_lexicon=str(lexicon), prepared=str(tmp_path / "lex-corpus")),
                         zh_tok, tmp_path / "run-a")
    copy = tmp_path / "copy" / "entities.txt"
    copy.parent.mkdir()
    copy.write_bytes(lexicon.read_bytes())
    again = CorpusSection(inputs=[str(root / "raw")], workers=1, segmenter="jieba", entity_lexicon=str(copy),
                          prepared=str(tmp_path / "lex-corpus"))
    assert prepare_once(again, zh_tok, tmp_path / "run-b").meta["created"] == first.meta["created"]
    copy.write_text("上海\tLOC\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="does not store the masking units"):
        prepare_once(again, zh_tok, tmp_path / "run-b")


# ============================================================================ the recipe


def test_pretrain_recipe_with_jieba_whole_word_masking(zh_corpus, tmp_path, one_thread) -> None:
    root, _ = zh_corpus
    config = {
        "model": {"preset": "bert-tiny", "overrides": {"hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
                                                       "num_layers": 2}},
        "tokenizer": {"path": str(ZH_VOCAB)},
        "corpus": {"inputs": [str(root / "raw")], "workers": 1, "segmenter": "jieba",
                   "entity_lexicon": str(root / "entities.txt")},
        "data": {"max_seq_len": 32, "nsp": False, "masking": {"level": "whole_word", "max_predictions": 5},
                 "eval_examples": 16, "eval_fraction": 0.1},
        "train": {"batch_size": 4, "steps": 2, "lr": 1e-3, "progress": False, "tensorboard": False,
                  "threads": 1, "log_every": 1},
        "eval_batch_size": 8,
    }
    path = tmp_path / "zh.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="set corpus.segmenter=jieba"):  # before anything is prepared
        bert_pretrain.run(bert_pretrain.load_config(path, [f"run_dir={run_dir}", "corpus.segmenter="]))
    assert not (run_dir / "corpus").exists()
    summary = bert_pretrain.run(bert_pretrain.load_config(path, [f"run_dir={run_dir}"]))
    assert summary["step"] == 2
    saved = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert saved["data"]["masking"]["level"] == "whole_word" and saved["corpus"]["segmenter"] == "jieba"
    meta = json.loads((run_dir / "corpus" / "meta.json").read_text(encoding="utf-8"))
    assert meta["units"]["levels"] == ["whole_word", "phrase", "entity"]
    summary = bert_pretrain.run(bert_pretrain.load_config(path, [f"run_dir={tmp_path / 'mix'}",
                                                                 "data.masking.level=mixture",
                                                                 f"corpus.prepared={run_dir / 'corpus'}"]))
    assert summary["step"] == 2


def test_docstring_examples_run() -> None:
    import muppets.data.units
    import muppets.objectives.mlm

    assert doctest.testmod(muppets.data.units).failed == 0
    assert doctest.testmod(muppets.objectives.mlm).failed == 0
