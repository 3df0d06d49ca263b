"""Feature extraction: piece pooling by hand; parity of BERT and GPT-2 per-word vectors with
transformers' hidden states; ELMo's layers against the biLM itself; static vectors (both word2vec
formats, NNLM runs, OOV counted); invariance to batching and padding; files round trip; typed
errors naming file, line and value; the ``muppets embed`` command."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.cli import main
from muppets.errors import ConfigError, DataError
from muppets.recipes.elmo_pretrain import load_elmo
from muppets.recipes.nnlm_pretrain import load_nnlm
from muppets.tokenizers.characters import CharacterMapper
from muppets.transfer.embed import embed, embed_file, embed_sentences, load_embeddings, read_sentences
from muppets.transfer.embedders import load_embedder, locate_model, pool_pieces
from muppets.vectors import WordVectors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import tiny_bert, tiny_elmo, tiny_gpt, tiny_nnlm, tiny_vectors  # noqa: E402

SENTENCES = [["The", "river", "bank", "flooded", "."], ["unbelievably", "unremarkable", "stories"],
             ["a"], ["John", "went", "to", "the", "bank", "and", "deposited", "cash", "!"]]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backbones")
    return {"bert": tiny_bert(root / "bert"), "gpt": tiny_gpt(root / "gpt"),
            "elmo": tiny_elmo(root / "elmo-run" / "final"),
            "vectors": tiny_vectors(root / "w2v.txt"), "nnlm": tiny_nnlm(root / "nnlm-run" / "final")}


# ----------------------------------------------------------------------------- pooling by hand


def test_pool_pieces_by_hand():
    h = torch.arange(12.0).reshape(1, 6, 2)  # pieces: [CLS] w0a w0b w1 [SEP] pad  (word 2 has no piece)
    wop = torch.tensor([[-1, 0, 0, 1, -1, -1]])
    assert pool_pieces(h, wop, 3, "first")[0].tolist() == [[2.0, 3.0], [6.0, 7.0], [0.0, 0.0]]
    assert pool_pieces(h, wop, 3, "mean")[0].tolist() == [[3.0, 4.0], [6.0, 7.0], [0.0, 0.0]]
    assert pool_pieces(h, wop, 3, "last")[0].tolist() == [[4.0, 5.0], [6.0, 7.0], [0.0, 0.0]]
    no_specials = torch.tensor([[0, 0, 1, 1, 1, -1]])  # GPT-style: word 0 starts the row
    assert pool_pieces(h, no_specials, 2, "first")[0].tolist() == [[0.0, 1.0], [4.0, 5.0]]
    with pytest.raises(ConfigError, match="pooling"):
        pool_pieces(h, wop, 3, "max")


# ----------------------------------------------------------------------------- parity


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_bert_words_equal_transformers_hidden_states(models, pooling):
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertModel.from_pretrained(models["bert"]).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(models["bert"])
    ours = embed(models["bert"], SENTENCES, pooling=pooling)
    for words, got in zip(SENTENCES, ours):
        enc = hf_tok(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            states = ref(**enc, output_hidden_states=True).hidden_states  # L + 1 of (1, T, H)
        word_ids = enc.word_ids()
        assert got.shape == (len(states), len(words), 32)
        for k, layer in enumerate(states):
            for w in range(len(words)):
                rows = layer[0, [t for t, i in enumerate(word_ids) if i == w]]
                want = rows[0] if pooling == "first" else rows.mean(0)
                np.testing.assert_allclose(got[k, w], want.numpy(), atol=1e-5)


def test_gpt_words_equal_transformers_hidden_states_of_the_joined_text(models):
    transformers = pytest.importorskip("transformers")
    ref = transformers.GPT2Model.from_pretrained(models["gpt"]).eval()
    embedder = load_embedder(models["gpt"], pooling="last")
    ours = embed_sentences(embedder, SENTENCES)
    for words, got in zip(SENTENCES, ours):
        ids = embedder.tok.encode(" ".join(words))  # GPT reads the sentence as text
        pieces = embedder.pieces([words])[0]
        assert [i for p in pieces for i in p] == ids
        with torch.no_grad():
            states = ref(torch.tensor([ids]), output_hidden_states=True).hidden_states
        last = np.cumsum([len(p) for p in pieces]) - 1  # each word's last piece
        for k, layer in enumerate(states):
            np.testing.assert_allclose(got[k], layer[0, last].numpy(), atol=1e-5)


def test_elmo_layers_are_the_bilm_states_token_layer_duplicated(models):
    got = embed(models["elmo"], SENTENCES)
    lm, vocab = load_elmo(models["elmo"])
    chars, mask = CharacterMapper().batch(SENTENCES)  # <s> words </s>
    with torch.no_grad():
        states = lm.backbone.states(chars, mask)
    for b, (words, vectors) in enumerate(zip(SENTENCES, got)):
        n = len(words)
        assert vectors.shape == (3, n, 32)
        token = states.token[b, 1: n + 1].numpy()
        np.testing.assert_allclose(vectors[0], np.concatenate([token, token], -1), atol=1e-6)
        for k in (1, 2):
            both = torch.cat([states.forward[k - 1], states.backward[k - 1]], -1)[b, 1: n + 1]
            np.testing.assert_allclose(vectors[k], both.numpy(), atol=1e-5)


def test_default_pooling_is_the_last_piece_for_gpt_and_the_first_for_bert(models, tmp_path):
    """Issue 15, item 13: a left-to-right model has seen the whole word only at its last piece,
    so every entry point's default reads that one for GPT (and the first piece for BERT); the
    feature cache's key holds the pooling used, so runs before the change miss it."""
    from muppets.transfer.feature_cache import FeatureSource

    for kind, expected in (("gpt", "last"), ("bert", "first")):
        default = embed(models[kind], SENTENCES)
        explicit = embed(models[kind], SENTENCES, pooling=expected)
        for x, y in zip(default, explicit):
            np.testing.assert_array_equal(x, y)
        assert load_embedder(models[kind]).pooling == expected
        src = tmp_path / "in.txt"
        src.write_text("The river bank\n", encoding="utf-8")
        assert embed_file(models[kind], src, tmp_path / f"{kind}.npy")["pooling"] == expected
        source = FeatureSource(str(models[kind]), "all", cache_dir=tmp_path / "cache")
        assert source._key["pooling"] == expected == source.pooling
    first = embed(models["gpt"], SENTENCES, pooling="first")
    assert not np.allclose(first[1], embed(models["gpt"], SENTENCES)[1])  # multi-piece words differ
    with pytest.raises(ConfigError, match="pooling"):
        load_embedder(models["gpt"], pooling="middle")


# ----------------------------------------------------------------------------- static vectors


def test_static_vectors_both_formats_lowercase_fallback_and_oov(models, tmp_path):
    text = models["vectors"]
    binary = WordVectors.load(text).save(tmp_path / "w2v.bin", binary=True)
    a, b = load_embedder(text), load_embedder(binary)
    got_a, got_b = embed_sentences(a, SENTENCES), embed_sentences(b, SENTENCES)
    wv = WordVectors.load(text)
    for x, y in zip(got_a, got_b):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(got_a[0][0, 0], wv["the"])  # "The" found lower-cased
    assert not got_a[0][0, 3].any()  # "flooded" is unknown: zeros
    unknown = sum(w.lower() not in wv for s in SENTENCES for w in s)
    assert a.stats["oov"] == unknown > 0 and a.stats["words"] == sum(map(len, SENTENCES))
    strict = load_embedder(text, oov="error")
    with pytest.raises(DataError, match="flooded"):
        embed_sentences(strict, [["the", "flooded"]])


def test_nnlm_run_gives_the_rows_of_c(models):
    run_dir = models["nnlm"].parent
    assert locate_model(run_dir) == ("nnlm", models["nnlm"])
    model, vocab = load_nnlm(models["nnlm"])
    got = embed(run_dir, [["river", "bank"]])[0]
    rows = model.embeddings.weight.detach()[[vocab.token_to_id("river"), vocab.token_to_id("bank")]]
    np.testing.assert_allclose(got[0], rows.numpy())


def test_locate_model_kinds_and_unknown(models, tmp_path):
    assert locate_model(models["elmo"].parent) == ("elmo", models["elmo"])  # a run dir: its final/
    assert locate_model(models["bert"])[0] == "bert" and locate_model(models["gpt"])[0] == "gpt"
    w2v_run = tmp_path / "w2v-run"
    w2v_run.mkdir()
    (w2v_run / "config.json").write_text('{"run_dir": "x"}')
    tiny_vectors(w2v_run / "vectors.bin", binary=True)
    assert locate_model(w2v_run) == ("static", w2v_run / "vectors.bin")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="unknown model kind"):
        locate_model(tmp_path / "empty")
    with pytest.raises(ConfigError, match="no such file"):
        locate_model(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("just some words\n")
    with pytest.raises(ConfigError, match="not"):
        load_embedder(tmp_path / "notes.txt")


# ----------------------------------------------------------------------------- invariance


@pytest.mark.parametrize("kind", ["bert", "gpt", "elmo"])
def test_batching_order_and_padding_do_not_change_word_vectors(models, kind):
    embedder = load_embedder(models[kind], pooling="mean")
    together = embed_sentences(embedder, SENTENCES, batch_size=4)  # padded to the longest
    alone = [embed_sentences(embedder, [s], batch_size=1)[0] for s in SENTENCES]
    shuffled = embed_sentences(embedder, SENTENCES[::-1], batch_size=3)[::-1]
    for x, y, z in zip(together, alone, shuffled):
        np.testing.assert_allclose(x, y, atol=1e-5)
        np.testing.assert_allclose(x, z, atol=1e-5)


def test_layer_choice_matches_all_layers(models):
    embedder = load_embedder(models["bert"])
    every = embed_sentences(embedder, SENTENCES[:2])
    picked = embed_sentences(embedder, SENTENCES[:2], layers=[-1, 0])
    for a, b in zip(every, picked):
        np.testing.assert_array_equal(b, a[[2, 0]])
    with pytest.raises(ConfigError, match="layer 3 does not exist.*3 layers"):
        embed_sentences(embedder, SENTENCES, layers=[3])


# ----------------------------------------------------------------------------- files and errors


@pytest.mark.parametrize("suffix", [".npy", ".safetensors"])
def test_embed_file_round_trip(models, tmp_path, suffix):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n", encoding="utf-8")
    meta = embed_file(models["elmo"], src, tmp_path / f"out{suffix}", layers=[0, -1])
    back = load_embeddings(tmp_path / f"out{suffix}")
    direct = embed(models["elmo"], SENTENCES, layers=[0, -1])
    assert meta["layers"] == [0, 2] and back.metadata["layers"] == [0, 2]
    assert back.metadata["num_words"] == sum(map(len, SENTENCES)) == meta["num_words"]
    for x, y in zip(back.sentences, direct):
        np.testing.assert_array_equal(x, y)


def test_bad_inputs_name_file_line_and_value(models, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a good line\n   \nanother\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.txt:2: empty line"):
        read_sentences(bad)
    bad.write_bytes(b"fine\nbroken \xff byte\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: not UTF-8"):
        read_sentences(bad)
    with pytest.raises(DataError, match="sentence 2 is an empty sentence"):
        embed(models["vectors"], [["ok"], []])
    with pytest.raises(DataError, match="sentence 1 is a string"):
        embed(models["vectors"], ["not split"])
    long = tmp_path / "long.txt"
    long.write_text("short line\n" + " ".join(["river"] * 70) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"long\.txt:2: sentence 2 needs 72 positions.*at most 64"):
        embed_file(models["bert"], long, tmp_path / "x.npy")
    with pytest.raises(ConfigError, match="must end in"):
        embed_file(models["bert"], long, tmp_path / "x.pt")


@pytest.mark.parametrize("kind", ["bert", "gpt", "elmo"])
def test_truncate_keeps_the_longest_word_prefix_that_fits(models, kind):
    embedder = load_embedder(models[kind])
    long = ["unbelievably", "river", "bank", "unremarkable"] * 6  # pieces and words vary in size
    limit = min(embedder.positions([long])[0], embedder.max_positions or 10 ** 6) - 5  # below the model's own
    with pytest.raises(DataError, match=f"sentence 2 needs .* max_positions allows at most {limit}.*--truncate"):
        embed_sentences(embedder, [SENTENCES[0], long], max_positions=limit)
    short, cut = embed_sentences(embedder, [SENTENCES[0], long], max_positions=limit, truncate=True)
    n = cut.shape[1]
    assert embedder.positions([long[:n]])[0] <= limit < embedder.positions([long[:n + 1]])[0]
    np.testing.assert_allclose(cut, embed_sentences(embedder, [long[:n]])[0], atol=1e-5)  # the prefix, as if alone
    np.testing.assert_allclose(short, embed_sentences(embedder, [SENTENCES[0]])[0], atol=1e-5)  # others untouched
    assert embedder.stats["truncated"] == 1


def test_truncate_to_the_models_own_limit_and_in_the_cli(models, tmp_path, capsys):
    src = tmp_path / "long.txt"
    src.write_text("short line\n" + " ".join(["river"] * 70) + "\n", encoding="utf-8")  # 72 positions, model 64
    out = tmp_path / "v.npy"
    meta = embed_file(models["bert"], src, out, truncate=True)
    assert [v.shape[1] for v in load_embeddings(out).sentences] == [2, 62]  # [CLS] + 62 words + [SEP]
    assert meta["truncated"] == 1 and meta["max_positions"] == 64
    assert main(["embed", "--model", str(models["bert"]), "--input", str(src), "--out", str(out),
                 "--max-positions", "10", "--truncate"]) == 2  # v.npy and v.json exist
    assert "v.npy, " in capsys.readouterr().err
    assert main(["embed", "--model", str(models["bert"]), "--input", str(src), "--out", str(out),
                 "--max-positions", "10", "--truncate", "--overwrite"]) == 0
    assert [v.shape[1] for v in load_embeddings(out).sentences] == [2, 8]  # "short line" is exactly 10 positions here: kept whole
    assert "1 lines cut to the words that fit in 10 positions" in capsys.readouterr().out
    assert main(["embed", "--model", str(models["bert"]), "--input", str(src), "--out", str(out),
                 "--max-positions", "0", "--overwrite"]) == 2
    assert "--max-positions 0: must be >= 1" in capsys.readouterr().err
    one_long_word = [["river" * 15, "bank"]]  # a first word of 43 pieces, which cannot fit: still an error
    embedder = load_embedder(models["bert"])
    with pytest.raises(DataError, match="sentence 1 needs 45 positions.*its first word alone does not fit"):
        embed_sentences(embedder, one_long_word, max_positions=4, truncate=True)
    assert embedder.stats["truncated"] == 0  # not counted as cut
    static = embed_file(models["vectors"], src, out, max_positions=3, truncate=True)  # static vectors: words
    assert [v.shape[1] for v in load_embeddings(out).sentences] == [2, 3] and static["truncated"] == 1
    assert embed_file(models["vectors"], src, out, truncate=True)["truncated"] == 0  # no limit: nothing cut


def test_cli_embed_and_its_errors(models, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("the river bank\nxyzzy money\n", encoding="utf-8")
    out = tmp_path / "v.safetensors"
    assert main(["embed", "--model", str(models["vectors"]), "--input", str(src), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 sentences, 5 words" in printed and "out of vocabulary: 1 of 5 words" in printed
    assert [v.shape for v in load_embeddings(out).sentences] == [(1, 3, 8), (1, 2, 8)]
    assert main(["embed", "--model", str(models["gpt"]), "--input", str(src), "--out", str(out),
                 "--layers", "0,7", "--overwrite"]) == 2
    assert "layer 7 does not exist" in capsys.readouterr().err


def test_doctests():
    import doctest

    from muppets.transfer import embed as embed_module
    from muppets.transfer import embedders as embedders_module

    assert doctest.testmod(embed_module).failed == 0 and doctest.testmod(embedders_module).failed == 0
