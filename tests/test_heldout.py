"""The held-out split (muppets.data.heldout): whole documents on a corpus of many, blocks of text
on a few long ones. Two "books" with NSP train, about ``eval_fraction`` of their tokens is held
out, no sentence is on both sides, the split is a function of the corpus and ``split_seed``,
and the log says what was held out; a corpus of many documents is split as before."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest

from muppets.data.heldout import split_corpus, split_documents
from muppets.objectives.clm import CausalLMData, CLMDataConfig
from muppets.objectives.mlm_nsp import NSP_DOCUMENT_TOKENS, BertPretrainingData, PretrainDataConfig, SpecialIds

from _tiny_corpora import book_corpus, random_corpus

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, all=[0, 1, 2, 3, 4])
EOS = 1


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """Two "books" of 3,000 and 2,400 sentences (about 76,000 tokens): two documents, both long."""
    return book_corpus(tmp_path_factory.mktemp("books") / "corpus", [3000, 2400])


def _share(split) -> float:
    lengths = np.diff(split.corpus.document_token_ends, prepend=np.int64(0))
    return float(lengths[split.eval_docs].sum()) / split.corpus.num_tokens


def test_two_books_with_nsp_train_and_hold_out_about_eval_fraction(books, caplog):
    with caplog.at_level(logging.INFO):
        data = BertPretrainingData(books, SPECIAL, PretrainDataConfig(max_seq_len=64, eval_examples=64), 8, 1, 0)
    split = data.split
    assert split.by_text and data.corpus.is_regrouped and data.corpus.num_documents > 4
    assert split.held_out_share == pytest.approx(_share(split))
    assert abs(split.held_out_share / 0.02 - 1) < 0.25, split.held_out_share  # not half the text
    assert len(data.eval_docs) >= 2 and len(data.train_docs) >= 2
    assert data.micro_batches(0, 0, 1)[0]["nsp_labels"].numel() == 8
    held = np.concatenate([b["nsp_labels"].numpy() for b in data.eval_batches(16)])
    assert held.any() and not held.all()  # NotNext pairs on the held-out side too
    text = caplog.text
    assert (f"held out {split.held_out_tokens:,} of {books.num_tokens:,} tokens ({split.held_out_share:.1%}): "
            f"{len(data.eval_docs)} blocks of text") in text
    assert "from 2 of the 2 documents (too few documents to hold out whole ones)" in text


def test_no_sentence_is_on_both_sides_and_no_piece_crosses_a_book(books):
    split = split_corpus(books, 0.02, 1234, min_each=2, document_tokens=NSP_DOCUMENT_TOKENS)
    bounds = split.corpus.doc_sentence_bounds  # (D', 2) sentences of each piece
    assert bounds[0, 0] == 0 and bounds[-1, 1] == books.num_sentences
    assert (bounds[1:, 0] == bounds[:-1, 1]).all()  # the pieces partition the sentences
    assert np.array_equal(np.union1d(split.train_docs, split.eval_docs), np.arange(len(bounds)))
    assert not np.intersect1d(split.train_docs, split.eval_docs).size
    stored = np.asarray(books.document_ends)
    book_of = lambda s: np.searchsorted(stored, s, side="right")  # noqa: E731
    assert np.array_equal(book_of(bounds[:, 0]), book_of(bounds[:, 1] - 1))
    lengths = np.diff(split.corpus.document_token_ends, prepend=np.int64(0))
    assert lengths[split.train_docs].max() < 1.5 * NSP_DOCUMENT_TOKENS  # pseudo-documents, chapter-sized
    assert len(split.train_docs) > 2 * books.num_tokens / NSP_DOCUMENT_TOKENS / 3


def test_the_text_split_is_a_function_of_the_corpus_and_split_seed(books):
    a, b, other = (split_corpus(books, 0.02, seed) for seed in (1234, 1234, 99))
    assert np.array_equal(a.corpus.document_ends, b.corpus.document_ends)
    assert np.array_equal(a.eval_docs, b.eval_docs)
    blocks = lambda s: {tuple(r) for r in s.corpus.doc_sentence_bounds[s.eval_docs]}  # noqa: E731
    assert blocks(a) != blocks(other)
    view = pickle.loads(pickle.dumps(a.corpus))  # what a worker process gets: the same documents
    assert view.is_regrouped and np.array_equal(view.document_ends, a.corpus.document_ends)


def test_gpt_on_two_books_holds_out_about_eval_fraction_of_the_tokens(books):
    data = CausalLMData(books, EOS, CLMDataConfig(block_size=32), 4, 1, 0)
    blocks = len(data.eval_docs)
    held = len(data.eval_stream) - blocks  # its tokens, less an end of text after each block
    assert abs(held / books.num_tokens / 0.02 - 1) < 0.25, held
    assert len(data.stream) - len(data.stream.docs) + held == books.num_tokens  # every token on one side


def test_many_documents_keep_the_whole_document_split(tmp_path):
    corpus = random_corpus(tmp_path / "c", documents=60, max_sentences=30)
    for min_each in (1, 2):
        split = split_corpus(corpus, 0.02, 1234, min_each=min_each)
        train, held = split_documents(60, 0.02, 1234, min_each=min_each)
        assert split.corpus is corpus and not split.by_text
        assert np.array_equal(split.train_docs, train) and np.array_equal(split.eval_docs, held)


def test_a_document_holding_most_of_the_text_is_not_held_out_whole(tmp_path, caplog):
    held = int(split_documents(30, 0.02, 1234)[1][0])  # the document a whole-document split holds out
    sentences = [6] * 30
    sentences[held] = 3000
    corpus = book_corpus(tmp_path / "c", sentences)
    with caplog.at_level(logging.INFO):
        split = split_corpus(corpus, 0.02, 1234)
    assert split.by_text and abs(split.held_out_share / 0.02 - 1) < 0.25
    assert split.whole_share > 0.9 and f"whole documents would hold out {split.whole_share:.1%}" in caplog.text
