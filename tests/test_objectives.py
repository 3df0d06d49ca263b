"""MLM masking and NSP instance building: exact rules and statistical rates."""

from __future__ import annotations

import numpy as np
import pytest

from muppets.data.shards import ShardWriter, TokenCorpus
from muppets.objectives.mlm import IGNORE, MaskingConfig, choose_targets, mask_sequence, word_groups
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds, split_documents
from muppets.objectives.nsp import plan_pairs, truncate_pair

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = SpecialIds(pad=PAD, cls=CLS, sep=SEP, mask=MASK, all=[PAD, UNK, CLS, SEP, MASK])
VOCAB = 500


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> TokenCorpus:
    """60 documents of 3..30 sentences of 3..25 tokens; token ids encode nothing in particular."""
    rng = np.random.default_rng(0)
    out = tmp_path_factory.mktemp("c") / "corpus"
    with ShardWriter(out, vocab_size=VOCAB) as w:
        for _ in range(60):
            doc = [rng.integers(5, VOCAB, size=rng.integers(3, 26)).tolist()
                   for _ in range(rng.integers(3, 31))]
            w.add_document(doc)
        w.finish()
    return TokenCorpus(out)


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
        maskable = (ids != PAD) & (ids != CLS) & (ids != SEP) | (ids == MASK)
        n_maskable += int(((batch["attention_mask"].numpy()) & (np.isin(ids, [CLS, SEP]) == False)).sum())
        for b in range(len(ids)):
            keep = labels[b] != IGNORE
            p, y = pos[b][keep], labels[b][keep]
            assert np.all(np.isin(ids[b][p], [CLS, SEP, PAD]) == False) or np.all(ids[b][p] != PAD)
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
    labels = []
    for step in range(40):
        b = data.micro_batches(step, 0, 1)[0]
        labels += b["nsp_labels"].tolist()
        for ids, seg, m in zip(b["input_ids"], b["token_type_ids"], b["attention_mask"]):
            n = int(m.sum())
            assert n <= 64 and ids[0] == CLS and ids[n - 1] == SEP
            seps = np.flatnonzero(ids[:n].numpy() == SEP)
            assert len(seps) == 2
            assert (seg[: seps[0] + 1] == 0).all() and (seg[seps[0] + 1 : n] == 1).all()
    assert abs(np.mean(labels) - 0.5) < 0.05


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
    # the same instance in the next epoch gets another mask
    e = a.epoch_size
    first = a.example(0)
    again = a.example(e)
    assert np.array_equal(first["labels"].shape, first["labels"].shape)
    assert not (np.array_equal(first["positions"], again["positions"]) and np.array_equal(first["ids"], again["ids"]))


def test_held_out_documents_are_disjoint_and_fixed(corpus):
    train, held = split_documents(100, 0.1, seed=5)
    assert len(held) == 10 and not set(train) & set(held) and len(train) + len(held) == 100
    assert np.array_equal(held, split_documents(100, 0.1, seed=5)[1])
    data = make_data(corpus)
    e1, e2 = data.eval_batches(16), data.eval_batches(16)
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(e1, e2) for k in x)
