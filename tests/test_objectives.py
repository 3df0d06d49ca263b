"""MLM masking and NSP instance building: exact rules and statistical rates."""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import pytest
import torch

from muppets.data.shards import ShardWriter, TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.mlm import IGNORE, MaskingConfig, choose_targets, mask_sequence, word_groups
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds, split_documents
from muppets.objectives.nsp import plan_pairs, truncate_pair

from _tiny_corpora import random_corpus

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = SpecialIds(pad=PAD, cls=CLS, sep=SEP, mask=MASK, all=[PAD, UNK, CLS, SEP, MASK])
VOCAB = 500


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> TokenCorpus:
    """60 documents of 3..30 sentences of 3..25 tokens; token ids encode nothing in particular."""
    return random_corpus(tmp_path_factory.mktemp("c") / "corpus", documents=60, max_sentences=30, vocab_size=VOCAB)


def make_data(corpus, **kw) -> BertPretrainingData:
    cfg = PretrainDataConfig(max_seq_len=64, eval_examples=64, **kw)
    cont = np.zeros(VOCAB, bool)
    cont[400:] = True  # ids >= 400 play the role of ## pieces
    return BertPretrainingData(corpus, SPECIAL, cfg, batch_size=16, accumulation=1, seed=0,
                               is_continuation=cont)


def test_masking_rates_over_many_batches(corpus):
    data = make_data(corpus)
    n_maskable = n_targets = n_mask = n_random = n_same = 0
    for step in range(60):
        batch = data.micro_batches(step, 0, 1)[0]
        ids, pos, labels = batch["input_ids"].numpy(), batch["mlm_positions"].numpy(), batch["mlm_labels"].numpy()
        maskable = batch["attention_mask"].numpy() & ~np.isin(ids, [CLS, SEP])  # (B, T) real, not special
        n_maskable += int(maskable.sum())
        for b in range(len(ids)):
            keep = labels[b] != IGNORE
            p, y = pos[b][keep], labels[b][keep]
            assert maskable[b][p].all()  # a target is a real token, never [CLS], [SEP] or padding
            assert not np.isin(y, [PAD, CLS, SEP]).any()
            got = ids[b][p]
            n_targets += len(p)
            n_mask += int((got == MASK).sum())
            n_same += int(((got == y) & (got != MASK)).sum())
            n_random += int(((got != y) & (got != MASK)).sum())
    assert abs(n_targets / n_maskable - 0.15) < 0.01, n_targets / n_maskable
    assert abs(n_mask / n_targets - 0.8) < 0.02
    assert abs(n_random / n_targets - 0.1) < 0.015
    assert abs(n_same / n_targets - 0.1) < 0.015


def test_special_tokens_and_padding_never_targets(corpus):
    data = make_data(corpus)
    for step in range(20):
        b = data.micro_batches(step, 0, 1)[0]
        keep = b["mlm_labels"] != IGNORE
        rows = np.nonzero(keep.numpy())[0]
        pos = b["mlm_positions"].numpy()[keep.numpy()]
        labels = b["mlm_labels"].numpy()[keep.numpy()]
        assert not np.isin(labels, [PAD, CLS, SEP]).any()
        assert b["attention_mask"].numpy()[rows, pos].all()
        assert (pos > 0).all()  # never [CLS]
        # a random replacement is never a special token
        ids = b["input_ids"].numpy()[rows, pos]
        assert not np.isin(ids, [PAD, CLS, SEP, UNK]).any()


def test_nsp_is_half_random_and_segments_are_well_formed(corpus):
    data = make_data(corpus)
    labels, longest = [], 0
    for step in range(40):
        b = data.micro_batches(step, 0, 1)[0]
        labels += b["nsp_labels"].tolist()
        for ids, seg, m in zip(b["input_ids"], b["token_type_ids"], b["attention_mask"]):
            n = int(m.sum())
            assert n <= 64 and ids[0] == CLS and ids[n - 1] == SEP
            longest = max(longest, n)
            seps = np.flatnonzero(ids[:n].numpy() == SEP)
            assert len(seps) == 2
            assert (seg[: seps[0] + 1] == 0).all() and (seg[seps[0] + 1 : n] == 1).all()
    assert abs(np.mean(labels) - 0.5) < 0.05
    assert longest == 64  # the pairs fill max_seq_len


def test_isnext_pairs_are_contiguous_text(corpus):
    """For IsNext, B starts exactly where A ends in the corpus (before truncation trims edges)."""
    rng = np.random.default_rng(1)
    plan = plan_pairs(corpus.sentence_ends, corpus.document_ends, np.arange(corpus.num_documents),
                      1000, 0.0, rng)  # budget large enough: no truncation
    nxt = ~plan.is_random
    assert nxt.any() and plan.is_random.any()
    assert np.array_equal(plan.a_hi[nxt], plan.b_lo[nxt])
    # NotNext B lies in another document than A
    doc_of = lambda tok: np.searchsorted(corpus.sentence_ends, tok, side="right")
    rnd = plan.is_random
    da = np.searchsorted(corpus.document_ends, doc_of(plan.a_lo[rnd]), side="right")
    db = np.searchsorted(corpus.document_ends, doc_of(plan.b_lo[rnd]), side="right")
    assert (da != db).all()


def test_short_seq_prob_yields_shorter_sequences(corpus):
    rng = np.random.default_rng(2)
    docs = np.arange(corpus.num_documents)
    full = plan_pairs(corpus.sentence_ends, corpus.document_ends, docs, 64, 0.0, rng)
    short = plan_pairs(corpus.sentence_ends, corpus.document_ends, docs, 64, 0.5, rng)
    length = lambda p: (p.a_hi - p.a_lo + p.b_hi - p.b_lo)
    assert length(full).max() <= 61 and length(short).max() <= 61
    assert length(short).mean() < length(full).mean() - 5
    assert len(short) > len(full)


def test_truncate_pair_trims_the_longer_segment():
    rng = np.random.default_rng(0)
    a_lo, a_hi, b_lo, b_hi = truncate_pair(0, 50, 100, 110, 40, rng)
    assert (a_hi - a_lo) + (b_hi - b_lo) == 40 and b_hi - b_lo == 10
    a_lo, a_hi, b_lo, b_hi = truncate_pair(0, 30, 100, 130, 41, rng)
    assert (a_hi - a_lo) + (b_hi - b_lo) == 41 and abs((a_hi - a_lo) - (b_hi - b_lo)) <= 1


def test_whole_word_masking_takes_whole_words():
    ids = np.array([CLS, 10, 401, 402, 11, 12, 403, SEP] * 1)
    cont = np.zeros(VOCAB, bool)
    cont[400:] = True
    maskable = np.arange(1, 7)
    groups = word_groups(maskable, cont[ids[maskable]])
    assert [g.tolist() for g in groups] == [[1, 2, 3], [4], [5, 6]]
    cfg = MaskingConfig(masked_lm_prob=0.5, whole_word=True)
    for seed in range(50):
        m = mask_sequence(ids, maskable, cfg, MASK, np.arange(5, 400), np.random.default_rng(seed), cont)
        chosen = set(m.positions.tolist())
        for g in groups:
            assert set(g.tolist()) <= chosen or not (set(g.tolist()) & chosen)
        assert len(chosen) <= 3


def test_budget_is_rounded_share_capped_by_max_predictions():
    rng = np.random.default_rng(0)
    cfg = MaskingConfig(max_predictions=20)
    assert len(choose_targets(np.arange(1, 101), None, cfg, rng)) == 15
    assert len(choose_targets(np.arange(1, 301), None, cfg, rng)) == 20
    assert len(choose_targets(np.arange(1, 3), None, cfg, rng)) == 1


def test_batches_are_a_pure_function_of_step_and_fresh_each_epoch(corpus):
    a, b = make_data(corpus), make_data(corpus)
    x, y = a.micro_batches(3, 0, 1)[0], b.micro_batches(3, 0, 1)[0]
    assert all(np.array_equal(x[k], y[k]) for k in x)
    # rank shares of a 2-process step are the halves of the 1-process step
    halves = [a.micro_batches(3, r, 2)[0] for r in range(2)]
    assert np.array_equal(np.concatenate([h["nsp_labels"] for h in halves]), x["nsp_labels"])
    # example g is a row of its epoch's plan, masked by a generator of (seed, g) ...
    plan = a._plan(0)
    for g, epoch, row in ((0, 0, 0), (7, 0, 7), (len(plan) + 3, 1, 3)):
        built = a.build(a._plan(epoch), row, np.random.default_rng([0, 11, g]))
        assert all(np.array_equal(a.example(g)[k], built[k]) for k in ("ids", "positions", "labels"))
    # ... so the same instance, met again as another example (e.g. in a later epoch), gets another mask
    first = a.build(plan, 0, np.random.default_rng([0, 11, 0]))
    masks = [a.build(plan, 0, np.random.default_rng([0, 11, g])) for g in (1, 2, 3)]
    for again in masks:
        assert np.array_equal(unmasked(again), unmasked(first))  # the same tokens ...
    assert any(not np.array_equal(again["positions"], first["positions"]) for again in masks)  # ... masked anew
    # and every epoch draws a new plan (other pairs), not only new masks
    assert not np.array_equal(a._plan(1).a_lo[:50], plan.a_lo[:50])


def unmasked(example: dict) -> np.ndarray:
    """An example's token ids with the original tokens put back at its MLM targets."""
    ids = example["ids"].copy()
    ids[example["positions"]] = example["labels"]
    return ids


def test_held_out_documents_are_disjoint_and_fixed(corpus):
    train, held = split_documents(100, 0.1, seed=5)
    assert len(held) == 10 and not set(train) & set(held) and len(train) + len(held) == 100
    assert np.array_equal(held, split_documents(100, 0.1, seed=5)[1])
    data = make_data(corpus)
    e1, e2 = data.eval_batches(16), data.eval_batches(16)
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(e1, e2) for k in x)


# ----------------------------------------------------------------------------- epochs (issue 14 item 9)


def test_every_epoch_covers_its_own_plan_exactly_once(corpus):
    """Plans differ in length from epoch to epoch; the examples of epoch e are exactly plan e."""
    data = make_data(corpus)
    plans = [data._plan(e) for e in range(3)]
    assert len({len(p) for p in plans}) > 1  # otherwise this test proves nothing
    start = 0
    for plan in plans:
        expected = Counter(tuple(unmasked(data.build(plan, r, np.random.default_rng(0)))) for r in range(len(plan)))
        seen = Counter(tuple(unmasked(data.example(g))) for g in range(start, start + len(plan)))
        assert seen == expected
        start += len(plan)


# ----------------------------------------------------------------------------- MLM only (issue 14 item 2)


def test_mlm_only_sequences_are_packed_full(corpus):
    """Without NSP, sentences are packed up to max_seq_len: >= 95% of the positions are real tokens."""
    data = make_data(corpus, nsp=False)
    real = positions = 0
    for step in range(30):
        b = data.micro_batches(step, 0, 1)[0]
        assert "nsp_labels" not in b and (b["token_type_ids"] == 0).all()
        real, positions = real + int(b["attention_mask"].sum()), positions + b["attention_mask"].numel()
    assert real / positions >= 0.95, real / positions
    full = make_data(corpus, nsp=False, short_seq_prob=0.0)
    lengths = [len(full.example(g)["ids"]) for g in range(len(full._plan(0)))]
    assert lengths.count(64) > 0.9 * len(lengths)  # a separator at either edge is dropped: 63
    assert sum(n < 63 for n in lengths) <= 1  # and the epoch's last sequence may be shorter


def test_mlm_only_epoch_reads_every_training_token_once(corpus):
    """One epoch of packed sequences holds each token of the training documents exactly once
    ([SEP] between documents), the short ones included."""
    data = make_data(corpus, nsp=False, short_seq_prob=0.3)
    n = len(data._plan(0))
    seqs = [unmasked(data.example(g)) for g in range(n)]
    assert all(s[0] == CLS and s[-1] == SEP and CLS not in s[1:] for s in seqs)
    body = np.concatenate([s[1:-1] for s in seqs])
    train_tokens = np.concatenate([corpus.document_tokens(int(d)) for d in data.train_docs])
    assert np.array_equal(np.sort(body[body != SEP]), np.sort(train_tokens))
    assert (body == SEP).sum() <= len(data.train_docs) - 1  # document separators
    lengths = np.array([len(s) for s in seqs])
    assert 0.2 < (lengths < 64).mean() < 0.4  # short_seq_prob of them shorter (and the last one)


# ----------------------------------------------------------------------------- held-out NSP (issue 14 item 8)


def write_corpus(path, doc_sentences: list[int], seed: int = 0) -> TokenCorpus:
    """Documents of the given numbers of 8..20-token sentences."""
    rng = np.random.default_rng(seed)
    with ShardWriter(path, vocab_size=VOCAB) as w:
        for n in doc_sentences:
            w.add_document([rng.integers(5, VOCAB, size=rng.integers(8, 21)).tolist() for _ in range(n)])
        w.finish()
    return TokenCorpus(path)


def test_held_out_nsp_has_notnext_pairs(corpus, caplog):
    """60 documents x 2% would hold out one document, where no NotNext pair can be drawn."""
    with caplog.at_level(logging.INFO, logger="muppets.objectives.mlm_nsp"):
        data = make_data(corpus)
        batches = data.eval_batches(16)
    assert len(data.eval_docs) == 2
    labels = np.concatenate([b["nsp_labels"].numpy() for b in batches])
    assert labels.any() and not labels.all()
    text = caplog.text
    assert "training NSP pairs (epoch 0)" in text and "held-out NSP pairs" in text and "NotNext" in text
    assert f"only {len(labels)} held-out NSP pairs (2 documents)" in text  # too few to measure NSP well
    with caplog.at_level(logging.INFO, logger="muppets.objectives.mlm_nsp"):
        caplog.clear()
        make_data(corpus, eval_fraction=0.5).eval_batches(16)
    assert "held-out NSP pairs" in caplog.text and "only" not in caplog.text


def test_nsp_on_three_documents_holds_out_blocks_of_text(tmp_path):
    """Fewer than 4 documents: NSP holds out blocks of text instead (2 on each side at least),
    and a corpus too small even for that says so."""
    corpus = write_corpus(tmp_path / "c", [5, 6, 7])
    data = make_data(corpus)
    assert data.split.by_text and len(data.eval_docs) >= 2 and len(data.train_docs) >= 2
    labels = np.concatenate([b["nsp_labels"].numpy() for b in data.eval_batches(16)])
    assert len(labels) and data.micro_batches(0, 0, 1)[0]["nsp_labels"].numel() == 16
    assert len(make_data(corpus, nsp=False).eval_docs) >= 1  # MLM alone needs no NotNext pairs
    with pytest.raises(ConfigError, match="too little text for 2 training and 2 held-out documents.*data.nsp=false"):
        make_data(write_corpus(tmp_path / "tiny", [1, 2]))


def test_notnext_draws_succeed_next_to_a_dominant_document(tmp_path):
    """A short document beside a long one still gets NotNext partners, and failures are counted."""
    corpus = write_corpus(tmp_path / "c", [300, 3])
    plan = plan_pairs(corpus.sentence_ends, corpus.document_ends, np.array([0, 1]), 64, 0.0,
                      np.random.default_rng(0))
    assert plan.not_next_failed == 0 and plan.not_next_drawn > 0
    assert 0.4 < plan.is_random.mean() < 0.6, plan.is_random.mean()
    alone = plan_pairs(corpus.sentence_ends, corpus.document_ends, np.array([0]), 64, 0.0,
                       np.random.default_rng(0))
    assert alone.not_next_failed == alone.not_next_drawn > 0 and not alone.is_random.any()


def _target_share(batches) -> float:
    targets = sum(int((b["mlm_labels"] != IGNORE).sum()) for b in batches)
    maskable = sum(int((b["attention_mask"] & ~torch.isin(b["input_ids"], torch.tensor([CLS, SEP]))).sum())
                   for b in batches)
    return targets / maskable


def test_held_out_masking_rate_can_differ_from_training(corpus):
    """Trained at 40%, scored at 15%: the held-out sequences are the same, only the mask differs."""
    from dataclasses import replace
    masking = MaskingConfig(masked_lm_prob=0.4, max_predictions=30)
    at_40 = make_data(corpus, masking=masking)
    at_15 = make_data(corpus, masking=masking, eval_masked_lm_prob=0.15)
    assert abs(_target_share(at_40.micro_batches(0, 0, 1)) - 0.4) < 0.03
    assert abs(_target_share(at_15.micro_batches(0, 0, 1)) - 0.4) < 0.03  # training is untouched
    held_40, held_15 = at_40.eval_batches(16), at_15.eval_batches(16)
    assert abs(_target_share(held_40) - 0.4) < 0.03
    assert abs(_target_share(held_15) - 0.15) < 0.02
    plain = make_data(corpus, masking=replace(masking, masked_lm_prob=0.15)).eval_batches(16)
    for a, b in zip(held_15, plain):  # the same as a run trained at 15%
        assert torch.equal(a["mlm_labels"], b["mlm_labels"]) and torch.equal(a["input_ids"], b["input_ids"])


def test_a_binding_prediction_cap_is_logged_and_a_bad_rate_refused(corpus, caplog):
    with caplog.at_level("WARNING"):
        make_data(corpus, masking=MaskingConfig(masked_lm_prob=0.4, max_predictions=20))
    assert "max_predictions=20 caps it" in caplog.text
    with pytest.raises(ConfigError, match=r"eval_masked_lm_prob: 1\.5 must be in \[0, 1\)"):
        make_data(corpus, eval_masked_lm_prob=1.5)


@pytest.mark.parametrize("setting, words", [({"max_seq_len": 3}, "max_seq_len: 3 must be >= 8"),
                                            ({"short_seq_prob": 1.5}, r"short_seq_prob: 1\.5 must be in \[0, 1\]"),
                                            ({"eval_examples": 0}, "eval_examples: 0 must be >= 1")])
def test_pretraining_data_settings_are_checked(setting, words):
    from muppets.objectives.mlm_nsp import PretrainDataConfig

    with pytest.raises(ConfigError, match=words):
        PretrainDataConfig(**setting)
    with pytest.raises(ConfigError, match="eval_fraction"):
        split_documents(10, 1.5, seed=1)


def test_no_held_out_sequence_is_an_error_before_training():
    from muppets.recipes.pretraining import fixed_eval_batches

    class NoHeldOut:
        def eval_batches(self, batch_size):
            return []

    with pytest.raises(ConfigError, match="no held-out sequences.*raise data.eval_fraction"):
        fixed_eval_batches(NoHeldOut(), 8)
