"""The probing suite (issue 20): probes learn a learnable task; expected layer by hand; control
tasks fixed per word type and drawn from the label distribution; the structural probe's tree
distances, MST and UUAS by hand, and its training recovers a synthetic tree metric; a random
encoder differs from the model and is reproducible; the CoNLL-U reader; the command writes its
JSON and plots."""

from __future__ import annotations

import argparse
import doctest
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.analysis import structural_probe as sp
from muppets.analysis.probe_cli import add_parser, run, summary_lines
from muppets.analysis.probe_data import ProbeCorpus, WordTask, control_table, control_task, load_ud_trees
from muppets.analysis.probe_features import ProbeFeatureSource, load_split
from muppets.analysis.probe_models import MixProbe, differential_expected_layer, expected_layer
from muppets.analysis.probing import ProbeConfig, choose_layers, probe_model
from muppets.errors import ConfigError, DataError
from muppets.tasks.conllu import UDSentence, parse_conllu_text
from muppets.vectors import WordVectors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import WORDS, tiny_bert, tiny_vectors  # noqa: E402

VOCAB = [w for w in WORDS if w.isalpha()]  # 30 lower-case words the tiny models know


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def _sentences(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(VOCAB) for _ in range(rng.randint(3, 7))] for _ in range(n)]


def _chain_heads(n: int) -> list[int]:
    """Word i's head is word i + 1 (1-based i + 2); the last word is the root."""
    return [i + 2 if i + 1 < n else 0 for i in range(n)]


def _toy_corpus(label_of, spans_of=None) -> ProbeCorpus:
    S = {"train": _sentences(80, 1), "dev": _sentences(25, 2), "test": _sentences(25, 3)}
    tags = {s: [[label_of(w) for w in sent] for sent in v] for s, v in S.items()}
    tasks = {"pos": WordTask("pos", "toy", sorted({t for v in tags.values() for x in v for t in x}), tags, False)}
    if spans_of is not None:
        ner = {s: [[spans_of(w) for w in sent] for sent in v] for s, v in S.items()}
        tasks["ner"] = WordTask("ner", "toy", ["O", "B-X", "I-X"], ner, True)
    trees = {s: [UDSentence(str(i), sent, ["NOUN"] * len(sent), ["_"] * len(sent), _chain_heads(len(sent)),
                            ["dep"] * len(sent), "toy") for i, sent in enumerate(v)] for s, v in S.items()}
    return ProbeCorpus("toy", S, tasks, trees)


def _cfg(model: Path, tmp_path: Path, **kw) -> ProbeConfig:
    base = dict(model=str(model), tasks="pos", cache_dir=str(tmp_path / "cache"), batch_size=16, max_epochs=40,
                patience=8, lr=1e-2, rank=8, tree_epochs=3, random_baseline=False, control=False)
    return ProbeConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- probes learn


def test_linear_probe_learns_a_linear_property_of_static_vectors(tmp_path):
    path = tiny_vectors(tmp_path / "w2v.txt", dim=8)
    table = WordVectors.load(path)
    sign = {w: "P" if table.vectors[table.index[w]][0] > 0 else "N" for w in VOCAB}
    report = probe_model(_cfg(path, tmp_path, control=True), {"toy": _toy_corpus(sign.get)})
    row = report["tasks"]["pos"]["pretrained"]["layers"][0]
    assert row["layer"] == 0 and row["accuracy"] > 0.97
    assert row["selectivity"] == pytest.approx(row["accuracy"] - row["control_accuracy"])
    assert "mix" not in report["tasks"]["pos"]["pretrained"]  # one layer: nothing to mix


def test_bert_probe_report_per_layer_mix_and_random_encoder(tmp_path):
    model = tiny_bert(tmp_path / "bert")
    corpus = _toy_corpus(lambda w: "D" if w in ("the", "a") else "W", lambda w: "B-X" if w == "bank" else "O")
    cfg = _cfg(model, tmp_path, tasks="pos,ner,structural", random_baseline=True, control=True)
    report = probe_model(cfg, {"toy": corpus})
    pos = report["tasks"]["pos"]
    assert [r["layer"] for r in pos["pretrained"]["layers"]] == [0, 1, 2]
    assert pos["pretrained"]["best_layer"]["accuracy"] > 0.9  # word identity is in a random BERT's embeddings
    mix = pos["pretrained"]["mix"]
    assert sum(mix["weights"]) == pytest.approx(1.0, abs=1e-5)
    assert mix["mixed_layers"] == [0, 1, 2]  # its expected layer: test_report_expected_layer_of_hand_set_mix_weights
    assert "span_f1" in report["tasks"]["ner"]["pretrained"]["layers"][0]
    assert "selectivity" not in pos["random_encoder"]["layers"][0]  # control tasks: the model only
    assert [r["layer"] for r in report["tasks"]["structural"]["random_encoder"]["layers"]] == [0, 1, 2]
    assert report["data"]["toy"]["train"]["sentences"] == 80


def test_report_expected_layer_of_hand_set_mix_weights(tmp_path, monkeypatch):
    """The report's E[l] for mix weights set by hand on layers 1 and 2 (not positions 0 and 1):
    1 * 0.25 + 2 * 0.75 = 1.75."""
    from muppets.analysis import probing
    from muppets.analysis.probe_models import Fitted

    def hand_set(probe, losses, dev_score, stopping, seed):  # instead of training: fixed mix weights
        if probe.mix is not None:
            with torch.no_grad():
                probe.mix.logits.copy_(torch.log(torch.tensor([0.25, 0.75])))
        return Fitted(1, 1, 1.0)

    monkeypatch.setattr(probing, "train_early_stopping", hand_set)
    corpus = _toy_corpus(lambda w: "D" if w in ("the", "a") else "W")
    report = probe_model(_cfg(tiny_bert(tmp_path / "bert"), tmp_path, layers="1,2"), {"toy": corpus})
    mix = report["tasks"]["pos"]["pretrained"]["mix"]
    assert mix["mixed_layers"] == [1, 2] and mix["weights"] == pytest.approx([0.25, 0.75])
    assert mix["expected_layer"] == pytest.approx(1.75)


def test_expected_layer_of_hand_set_mix_weights():
    assert expected_layer([0.1, 0.2, 0.7]) == pytest.approx(1.6)
    assert expected_layer([0.5, 0.5], [1, 5]) == pytest.approx(3.0)
    probe = MixProbe(3, 4, 2)
    with torch.no_grad():
        probe.mix.logits.copy_(torch.log(torch.tensor([0.1, 0.2, 0.7])))
    assert expected_layer(probe.mix_weights()) == pytest.approx(1.6, abs=1e-6)
    with pytest.raises(ConfigError, match="sum"):
        expected_layer([0.5, 0.6])


def test_choose_layers():
    assert choose_layers("all", [0, 1, 2, 3]) == [0, 1, 2, 3]
    assert choose_layers("-1,0", [0, 1, 2, 3]) == [0, 3]
    with pytest.raises(ConfigError, match="outside"):
        choose_layers("4", [0, 1, 2, 3])


# ----------------------------------------------------------------------------- control task


def test_control_labels_are_fixed_per_type_and_follow_the_label_distribution():
    rng = np.random.default_rng(0)
    types = [f"w{i}" for i in range(6000)]
    train = [list(rng.choice(types, size=10)) for _ in range(400)]
    gold = [["A" if rng.random() < 0.7 else "B" if rng.random() < 0.66 else "C" for _ in s] for s in train]
    task = WordTask("t", "toy", ["A", "B", "C"], {"train": gold, "test": [["A", "A"]]}, spans=False)
    sentences = {"train": train, "test": [[types[0], "unseen"]]}
    table = control_table(task, sentences, seed=3)
    assert set(table) == {w for s in train for w in s} | {types[0], "unseen"}  # every type of every split
    control = control_task(task, sentences, seed=3)
    seen: dict[str, str] = {}
    for split in ("train", "test"):
        for words, labels in zip(sentences[split], control.tags[split]):
            for w, label in zip(words, labels):
                assert seen.setdefault(w, label) == label  # one label per type, in every split
    p_gold = Counter(t for s in gold for t in s)
    p_types = Counter(table.values())
    for label in "ABC":
        assert p_types[label] / len(table) == pytest.approx(p_gold[label] / sum(p_gold.values()), abs=0.03)
    assert control_table(task, sentences, seed=3) == table
    assert control_table(task, sentences, seed=4) != table


# ----------------------------------------------------------------------------- structural probe


def test_tree_distances_mst_and_uuas_by_hand():
    heads = [2, 0, 2, 3]  # 1 <- 2 -> 3 -> 4 (words 0..3; word 1 is the root)
    d = sp.tree_distances(heads)
    assert d.tolist() == [[0, 1, 2, 3], [1, 0, 1, 2], [2, 1, 0, 1], [3, 2, 1, 0]]
    assert sp.mst_edges(d.astype(float)) == {(0, 1), (1, 2), (2, 3)}
    hand = np.array([[0, 4, 1, 9], [4, 0, 2, 7], [1, 2, 0, 3], [9, 7, 3, 0]], dtype=float)
    assert sp.mst_edges(hand) == {(0, 2), (1, 2), (2, 3)}  # Kruskal: 1, 2, 3 (4 would close a cycle)
    assert sp.mst_edges(hand, skip=[False, False, True, False]) == {(0, 1), (1, 3)}  # punctuation left out
    assert sp.uuas_counts(d.astype(float), d.astype(float), [False] * 4) == (3, 3)  # gold distances: UUAS 1
    assert sp.uuas_counts(hand, d.astype(float), [False] * 4) == (2, 3)
    with pytest.raises(ConfigError, match="tree"):
        sp.tree_distances([0, 0])


def test_distance_spearman_is_one_for_monotone_predictions():
    gold = [sp.tree_distances([2, 0, 2, 3, 4]).astype(float)]
    assert sp.distance_spearman([g ** 2 + 1.0 * (g > 0) for g in gold], gold) == pytest.approx(1.0)
    assert math.isnan(sp.distance_spearman(gold, [g[:2, :2] for g in gold][:0]))


def _random_tree(rng: random.Random, n: int) -> list[int]:
    """1-based heads of a random tree: word 0 is the root, word i > 0 hangs under an earlier word."""
    return [0] + [rng.randint(1, i) for i in range(1, n)]


def _tree_vectors(heads: list[int], dim: int, gen: torch.Generator) -> torch.Tensor:
    """``h_i`` = sum of orthonormal edge vectors on the root path: ``||h_i − h_j||² = d_T(i, j)``."""
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen))
    h = torch.zeros(len(heads), dim)
    for i in range(1, len(heads)):  # parents come first
        h[i] = h[heads[i] - 1] + q[i]
    return h


def test_structural_probe_loss_decreases_and_recovers_a_tree_metric():
    rng, gen, dim = random.Random(0), torch.Generator().manual_seed(0), 12
    mixing = torch.randn(dim, dim, generator=gen) / dim ** 0.5 + torch.eye(dim)  # B must undo this map

    def batch(count: int):
        heads = [_random_tree(rng, rng.randint(4, 10)) for _ in range(count)]
        T = max(map(len, heads))
        h = torch.zeros(count, T, dim)
        gold = torch.zeros(count, T, T)
        for b, hs in enumerate(heads):
            h[b, : len(hs)] = _tree_vectors(hs, dim, gen) @ mixing
            gold[b, : len(hs), : len(hs)] = torch.from_numpy(sp.tree_distances(hs).astype(np.float32))
        return heads, h, gold, torch.tensor([len(x) for x in heads])

    torch.manual_seed(0)
    probe = sp.StructuralProbe(dim, dim)
    optimizer = torch.optim.Adam(probe.parameters(), lr=0.02)
    losses = []
    for _ in range(300):
        _, h, gold, lengths = batch(16)
        loss = sp.structural_loss(probe(h), gold, lengths)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-20:]) < 0.2 * np.mean(losses[:5])
    heads, h, gold, lengths = batch(20)
    with torch.no_grad():
        predicted = probe(h).numpy()
    counts = [sp.uuas_counts(predicted[b, :n, :n], gold[b, :n, :n].numpy(), [False] * n)
              for b, n in enumerate(lengths.tolist())]
    assert sum(c for c, _ in counts) / sum(t for _, t in counts) > 0.95


def test_structural_loss_by_hand():
    predicted = torch.tensor([[[0.0, 2.0, 9.0], [2.0, 0.0, 9.0], [9.0, 9.0, 0.0]]])
    gold = torch.tensor([[[0.0, 1.0, 5.0], [1.0, 0.0, 5.0], [5.0, 5.0, 0.0]]])
    assert float(sp.structural_loss(predicted, gold, torch.tensor([2]))) == pytest.approx(2.0 / 4)


# ----------------------------------------------------------------------------- random encoder and reader


def test_random_encoder_differs_from_the_model_and_is_reproducible(tmp_path):
    model = tiny_bert(tmp_path / "bert")
    sentences = _sentences(4, 0)
    trained = load_split(ProbeFeatureSource(str(model), cache_dir=tmp_path / "c"), sentences, "t")
    randoms = [load_split(ProbeFeatureSource(str(model), cache_dir=tmp_path / f"c{i}", random_seed=5), sentences, "t")
               for i in range(2)]
    assert trained.vectors.shape == randoms[0].vectors.shape == (3, sum(map(len, sentences)), 32)
    assert not torch.allclose(trained.vectors.float(), randoms[0].vectors.float(), atol=1e-2)
    assert torch.equal(randoms[0].vectors, randoms[1].vectors)
    a = ProbeFeatureSource(str(model), cache_dir=tmp_path / "c")
    b = ProbeFeatureSource(str(model), cache_dir=tmp_path / "c", random_seed=5)
    assert a.cache_path(sentences, "t") != b.cache_path(sentences, "t")


def test_conllu_reader_skips_ranges_and_empty_nodes_and_names_bad_lines():
    text = ("# sent_id = s1\n"
            "1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
            "1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_\n"
            "2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_\n"
            "3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_\n"
            "3.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t3:conj\t_\n\n")
    (s,) = parse_conllu_text(text)
    assert s.words == ["do", "n't", "go"] and s.heads == [3, 3, 0] and s.head_indices() == [2, 2, -1]
    with pytest.raises(DataError, match=r"x.conllu:2: HEAD"):
        parse_conllu_text("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t7\tdep\t_\t_\n", "x.conllu")
    with pytest.raises(DataError, match="exactly one root"):
        parse_conllu_text("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n")


# ----------------------------------------------------------------------------- the command


def _write_data(root: Path) -> None:
    """Tiny CoNLL-2003 and UD EWT folders in the shared data layout."""
    rng = random.Random(0)
    (root / "conll2003").mkdir(parents=True)
    (root / "ud-english-ewt").mkdir(parents=True)
    for split, name in (("train", "eng.train"), ("dev", "eng.testa"), ("test", "eng.testb")):
        sentences = _sentences(30 if split == "train" else 10, hash(split) % 100)
        lines, blocks = [], []
        for sent in sentences:
            for w in sent:
                pos, chunk = ("DT", "B-NP") if w in ("the", "a") else ("NN", "I-NP")
                lines.append(f"{w} {pos} {chunk} {'I-LOC' if w in ('paris', 'london') else 'O'}")
            lines.append("")
            rows = [f"{i + 1}\t{w}\t{w}\t{'DET' if w in ('the', 'a') else 'NOUN'}\t_\t_\t{h}\t"
                    f"{'root' if h == 0 else 'det' if w in ('the', 'a') else 'nmod:poss'}\t_\t_"
                    for i, (w, h) in enumerate(zip(sent, _random_tree(rng, len(sent))))]
            blocks.append("\n".join(rows) + "\n")
        (root / "conll2003" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        (root / "ud-english-ewt" / f"en_ewt-ud-{split}.conllu").write_text("\n".join(blocks), encoding="utf-8")


def test_cumulative_scoring_needs_the_mix_and_the_layers_from_zero(tmp_path):
    model = tiny_bert(tmp_path / "bert")
    corpus = {"toy": _toy_corpus(lambda w: "D" if w in ("the", "a") else "W")}
    with pytest.raises(ConfigError, match="needs mix"):
        probe_model(_cfg(model, tmp_path, cumulative=True, mix=False), corpus)
    with pytest.raises(ConfigError, match="0..l"):
        probe_model(_cfg(model, tmp_path, cumulative=True, layers="0,2"), corpus)
    assert not list((tmp_path / "cache").glob("probe-*"))  # refused before any corpus was embedded


def test_probe_command_writes_json_and_plots(tmp_path, capsys):
    _write_data(tmp_path / "data")
    model = tiny_bert(tmp_path / "bert")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "out"
    args = parser.parse_args(["probe", str(model), "--out", str(out), "--data-dir", str(tmp_path / "data"),
                              "--cache-dir", str(tmp_path / "cache"), "--epochs", "2", "--rank", "4",
                              "--max-train-sentences", "20", "--threads", "1", "--cumulative"])
    assert run(args) == 0
    report = json.loads((out / "probe.json").read_text())
    assert set(report["tasks"]) == {"pos", "chunk", "ner", "upos", "deprel", "structural"}
    for name in ("pos", "chunk", "ner", "upos", "deprel"):
        result = report["tasks"][name]
        assert len(result["pretrained"]["layers"]) == 3 and "selectivity" in result["pretrained"]["layers"][0]
        assert "expected_layer" in result["pretrained"]["mix"] and "random_encoder" in result
    assert report["tasks"]["deprel"]["labels"] == 3  # root, det, nmod (nmod:poss -> nmod)
    assert "uuas" in report["tasks"]["structural"]["random_encoder"]["layers"][0]
    assert report["data"]["conll2003"]["train"]["sentences"] == 20
    cumulative = report["tasks"]["chunk"]["pretrained"]["cumulative"]
    assert cumulative["accuracy"]["layers"] == [0, 1, 2] and len(cumulative["span_f1"]["delta"]) == 2
    assert "cumulative" not in report["tasks"]["chunk"]["random_encoder"]  # the model only
    for png in ("probe_layers.png", "probe_mix.png", "probe_cumulative.png"):
        assert (out / png).stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "structural" in printed and "E[l]" in printed and "E_Δ[l]" in printed
    assert len(summary_lines(report)) == 6


def test_mix_probe_puts_its_weight_on_the_informative_layer():
    from muppets.analysis.probe_features import SplitFeatures, Standardizer
    from muppets.analysis.probing import WordSplits, fit_word_probe

    gen = torch.Generator().manual_seed(0)
    features, tags = {}, {}
    for split, n in (("train", 2000), ("dev", 400), ("test", 400)):
        y = torch.randint(0, 2, (n,), generator=gen)
        x = torch.randn(3, n, 4, generator=gen)
        x[2, :, 0] += 3.0 * (2 * y - 1)  # only layer 2 knows the label
        features[split] = SplitFeatures(x, [0, 1, 2], [n])
        tags[split] = [["AB"[int(v)] for v in y]]
    task = WordTask("t", "toy", ["A", "B"], tags, spans=False)
    cfg = ProbeConfig(batch_size=64, max_epochs=10, patience=3, lr=1e-2, mix_lr=5e-2)
    data = WordSplits(features, Standardizer(features["train"]), cfg)
    mix = fit_word_probe(task, data, [0, 1, 2], seed=0)
    assert mix["accuracy"] > 0.97
    assert mix["weights"][2] > 0.6 and mix["expected_layer"] > 1.5
    assert fit_word_probe(task, data, [0], seed=0)["accuracy"] < 0.6  # layer 0 alone: chance


def test_differential_expected_layer_by_hand():
    r = differential_expected_layer([0.50, 0.70, 0.65, 0.85], [0, 1, 2, 3])
    assert r["delta"] == pytest.approx([0.20, -0.05, 0.20])  # a negative gain is kept, as in the paper
    assert r["expected_layer"] == pytest.approx((1 * 0.20 + 2 * -0.05 + 3 * 0.20) / 0.35)
    assert math.isnan(differential_expected_layer([0.6, 0.6, 0.5])["expected_layer"])  # no gain: undefined
    with pytest.raises(ConfigError, match="at least two"):
        differential_expected_layer([0.5])


def test_probe_models_doctests():
    from muppets.analysis import probe_models

    assert doctest.testmod(probe_models).failed == 0


def test_cumulative_scoring_finds_the_layer_that_adds_the_information(monkeypatch):
    from muppets.analysis import probing
    from muppets.analysis.probe_features import SplitFeatures, Standardizer
    from muppets.analysis.probing import WordSplits, probe_word_task

    gen = torch.Generator().manual_seed(1)
    features, tags = {}, {}
    for split, n in (("train", 2000), ("dev", 400), ("test", 400)):
        y = torch.randint(0, 2, (n,), generator=gen)
        x = torch.randn(4, n, 4, generator=gen)
        x[2, :, 0] += 3.0 * (2 * y - 1)  # layer 2 knows the label; layer 3 copies it
        x[3] = x[2]
        features[split] = SplitFeatures(x, [0, 1, 2, 3], [n])
        tags[split] = [["AB"[int(v)] for v in y]]
    task = WordTask("t", "toy", ["A", "B"], tags, spans=False)
    cfg = ProbeConfig(batch_size=64, max_epochs=10, patience=3, lr=1e-2, mix_lr=5e-2)
    fitted: list[list[int]] = []
    fit = probing.fit_word_probe

    def counting_fit(task, data, slots, seed):
        fitted.append(list(slots))
        return fit(task, data, slots, seed)

    monkeypatch.setattr(probing, "fit_word_probe", counting_fit)
    out = probe_word_task(task, None, WordSplits(features, Standardizer(features["train"]), cfg), [0, 1, 2, 3],
                          "toy", cumulative=True)
    # one probe per layer, the full mix, then only the mixes over 0..1 and 0..2: the others are reused
    assert fitted == [[0], [1], [2], [3], [0, 1, 2, 3], [0, 1], [0, 1, 2]]
    cum = out["cumulative"]["accuracy"]
    assert cum["layers"] == [0, 1, 2, 3] and cum["scores"][0] == out["layers"][0]["accuracy"]
    assert cum["scores"][-1] == out["mix"]["accuracy"]  # the full mix is reused, not refitted
    assert cum["delta"][1] > 0.4 and abs(cum["delta"][0]) < 0.1 and abs(cum["delta"][2]) < 0.05
    assert cum["expected_layer"] == pytest.approx(2.0, abs=0.3)
    assert "cumulative" not in probe_word_task(task, None, WordSplits(features, Standardizer(features["train"]), cfg),
                                               [0, 1], "toy")


def _write_gsd(root: Path) -> None:
    """A tiny UD Chinese GSDSimp folder: dev (20 sentences) and test (10), no train, as staged."""
    rng = random.Random(1)
    (root / "ud-chinese-gsdsimp").mkdir(parents=True)
    words = ["北京", "大学", "的", "学生", "在", "上海", "工作", "。"]
    for split, n in (("dev", 20), ("test", 10)):
        blocks = []
        for k in range(n):
            sent = [rng.choice(words) for _ in range(rng.randint(3, 7))]
            rows = [f"{i + 1}\t{w}\t{w}\t{'PUNCT' if w == '。' else 'PART' if w == '的' else 'NOUN'}\t_\t_\t{h}\t"
                    f"{'root' if h == 0 else 'punct' if w == '。' else 'nmod'}\t_\tSpaceAfter=No"
                    for i, (w, h) in enumerate(zip(sent, _random_tree(rng, len(sent))))]
            blocks.append(f"# sent_id = {split}-{k}\n" + "\n".join(rows) + "\n")
        (root / "ud-chinese-gsdsimp" / f"zh_gsdsimp-ud-{split}.conllu").write_text("\n".join(blocks), encoding="utf-8")


def test_gsd_probes_train_on_four_fifths_of_dev_select_on_the_rest_and_report_test(tmp_path):
    _write_gsd(tmp_path / "data")
    trees = load_ud_trees("gsd", tmp_path / "data")
    assert [len(trees[s]) for s in ("train", "dev", "test")] == [16, 4, 10]
    staged = load_ud_trees("gsd", tmp_path / "data")["train"] + trees["dev"]
    assert len({tuple(t.words) + (i,) for i, t in enumerate(staged)}) == 20  # every dev sentence once
    model = tiny_bert(tmp_path / "bert")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "out"
    args = parser.parse_args(["probe", str(model), "--tasks", "zh-upos,zh-deprel,zh-structural", "--out", str(out),
                              "--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "cache"),
                              "--epochs", "2", "--rank", "4", "--threads", "1", "--no-random-baseline"])
    assert run(args) == 0
    report = json.loads((out / "probe.json").read_text())
    assert set(report["tasks"]) == {"zh-upos", "zh-deprel", "zh-structural"}
    assert report["tasks"]["zh-structural"]["corpus"] == "gsd" and report["data"]["gsd"]["test"]["sentences"] == 10
    assert "uuas" in report["tasks"]["zh-structural"]["pretrained"]["layers"][0]
    assert report["tasks"]["zh-upos"]["labels"] == 3  # NOUN, PART, PUNCT
    assert (out / "probe_layers.png").stat().st_size > 1000


def test_real_gsd_split_sizes():
    trees = load_ud_trees("gsd")
    assert [len(trees[s]) for s in ("train", "dev", "test")] == [400, 100, 500]


@pytest.mark.parametrize("labels", [2, 3])
def test_logistic_probe_equals_scikit_learns_logistic_regression(labels):
    from sklearn.linear_model import LogisticRegression

    from muppets.analysis.probe_models import fit_logistic

    g = torch.Generator().manual_seed(labels)
    mixing = torch.randn(16, 16, generator=g) + 3 * torch.eye(16)
    x = torch.randn(600, 16, generator=g) @ mixing  # correlated, badly scaled features
    y = (x @ torch.randn(16, labels, generator=g) + 4 * torch.randn(600, labels, generator=g)).argmax(1)
    for c in (0.01, 1.0, 10.0):
        probe, fit = fit_logistic(x, y, labels, c)
        reference = LogisticRegression(C=c, max_iter=20000, tol=1e-10).fit(x.double().numpy(), y.numpy())
        with torch.no_grad():
            ours = torch.softmax(probe(x), -1).numpy()
        assert fit.converged and np.abs(ours - reference.predict_proba(x.double().numpy())).max() < 1e-3


def test_logistic_probe_leaves_out_labels_train_never_shows():
    from muppets.analysis.probe_models import fit_logistic

    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=g)
    y = (x[:, 0] > 0).long() * 2  # labels 0 and 2 of 3; label 1 only in dev / test
    probe, fit = fit_logistic(x, y, 3, 1.0)
    with torch.no_grad():
        predicted = probe(x).argmax(-1)
    assert fit.converged and fit.iterations < 200 and set(predicted.tolist()) <= {0, 2}
    assert (predicted == y).float().mean() > 0.95


def test_logistic_probe_keeps_the_c_that_is_best_on_dev(tmp_path):
    from muppets.analysis.probe_models import LOGISTIC_C, fit_logistic
    from muppets.analysis.probing import WordSplits, _label_ids, fit_word_probe
    from muppets.analysis.probe_features import SplitFeatures, Standardizer

    g = torch.Generator().manual_seed(1)
    sizes = {"train": 120, "dev": 60, "test": 60}
    vectors = {s: torch.randn(1, n, 30, generator=g) for s, n in sizes.items()}
    tags = {s: [["P" if float(v[0, i, :3].sum() + torch.randn(1, generator=g)) > 0 else "N"] for i in range(n)]
            for (s, n), v in zip(sizes.items(), vectors.values())}
    task = WordTask("sst2", "toy", ["N", "P"], tags, spans=False)
    features = {s: SplitFeatures(v, [0], [1] * v.shape[1]) for s, v in vectors.items()}
    data = WordSplits(features, Standardizer(features["train"]), ProbeConfig(probe="logistic"))
    row = fit_word_probe(task, data, [0], seed=0)
    x = {s: data.rows(s, [0], torch.arange(sizes[s]))[:, 0] for s in sizes}
    y = {s: _label_ids(task, s) for s in sizes}
    dev = {}
    for c in LOGISTIC_C:
        probe, _ = fit_logistic(x["train"], y["train"], 2, c)
        with torch.no_grad():
            dev[c] = float((probe(x["dev"]).argmax(-1) == y["dev"]).float().mean())
    assert row["C"] == min(c for c in LOGISTIC_C if dev[c] == max(dev.values()))  # ties: the stronger penalty
    assert row["dev_accuracy"] == pytest.approx(max(dev.values())) and row["estimator"] == "logistic"


def test_logistic_probe_on_word_tasks_and_its_mix(tmp_path):
    path = tiny_vectors(tmp_path / "w2v.txt", dim=8)
    table = WordVectors.load(path)
    sign = {w: "P" if table.vectors[table.index[w]][0] > 0 else "N" for w in VOCAB}
    report = probe_model(_cfg(path, tmp_path, probe="logistic", control=True), {"toy": _toy_corpus(sign.get)})
    row = report["tasks"]["pos"]["pretrained"]["layers"][0]
    assert row["accuracy"] > 0.97 and row["converged"] and "selectivity" in row and "best_epoch" not in row
    model = tiny_bert(tmp_path / "bert")
    report = probe_model(_cfg(model, tmp_path, probe="logistic"), {"toy": _toy_corpus(sign.get)})
    pos = report["tasks"]["pos"]["pretrained"]
    assert all(r["estimator"] == "logistic" for r in pos["layers"]) and pos["mix"]["estimator"] == "linear"
    with pytest.raises(ConfigError, match="cumulative"):
        probe_model(_cfg(model, tmp_path, probe="logistic", cumulative=True), {"toy": _toy_corpus(sign.get)})
    with pytest.raises(ConfigError, match="logistic"):
        probe_model(_cfg(model, tmp_path, probe="svm"), {"toy": _toy_corpus(sign.get)})


def test_a_report_of_other_settings_is_refused_before_any_work(tmp_path: Path) -> None:
    from muppets.analysis.probing import run_probing

    out = tmp_path / "results"
    out.mkdir()
    cfg = ProbeConfig(model="minilm", tasks="pos", out=str(out), data_dir=str(tmp_path / "no-data"))
    (out / "probe.json").write_text(json.dumps({"config": {**vars(ProbeConfig(tasks="pos", out=str(out))),
                                                           "data_dir": cfg.data_dir, "probe": "mlp"}}))
    before = (out / "probe.json").read_bytes()
    with pytest.raises(ConfigError, match=r"other settings \(probe: 'mlp' -> 'linear'\).*--overwrite"):
        run_probing(cfg)  # refused before the (missing) data is read
    assert (out / "probe.json").read_bytes() == before
    (out / "probe.json").write_text("my own notes")
    with pytest.raises(ConfigError, match="is not a probe report; it is left as it is"):
        run_probing(cfg)
    assert (out / "probe.json").read_text() == "my own notes"
    with pytest.raises(DataError):  # with overwrite the run goes on: here to the (missing) data
        run_probing(cfg, overwrite=True)
    # the same settings, asked for with another spelling of the folder and another cache: no refusal
    (out / "probe.json").write_text(json.dumps({"config": {**vars(cfg), "out": "", "cache_dir": "elsewhere"}}))
    with pytest.raises(DataError):
        run_probing(cfg)


@pytest.mark.parametrize("setting", [{"max_train_sentences": -1}, {"hidden": 0}, {"dropout": 1.0},
                                     {"patience": 0}, {"lr": 0.0}, {"mix_lr": -1.0}])
def test_probe_settings_are_checked(setting) -> None:
    """When the config is made, before any model is loaded or sentence embedded (patience=0 used to
    fail only in the first probe's training, after all the embedding)."""
    with pytest.raises(ConfigError, match=next(iter(setting))):
        ProbeConfig(**setting)
