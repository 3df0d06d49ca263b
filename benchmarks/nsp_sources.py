"""Where NotNext segments come from: uniform vs length-weighted choice of the random document.

On the shared corpus (56 Gutenberg books + 1,032 Wikipedia articles) prints, for one epoch plan
of the prepared corpus, the share of A segments and of NotNext B segments that come from books,
and what a uniform document draw (google-research/bert's) would give.

    python benchmarks/nsp_sources.py --corpus runs/bert-mini/corpus
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from muppets.data.readers import list_files
from muppets.data.shards import TokenCorpus
from muppets.objectives.nsp import plan_pairs
from muppets.paths import data_dir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True, help="prepared books + wiki corpus (books first)")
    args = ap.parse_args()
    corpus = TokenCorpus(args.corpus)
    n_books = len(list_files([data_dir() / "english-corpus/books"]))  # one document per book, first
    docs = np.arange(corpus.num_documents)
    plan = plan_pairs(corpus.sentence_ends, corpus.document_ends, docs, 128, 0.1, np.random.default_rng(0))
    doc_of = lambda tok: np.searchsorted(corpus.document_ends, np.searchsorted(corpus.sentence_ends, tok, side="right"), side="right")  # noqa: E731
    book_tokens = int(corpus.sentence_ends[corpus.document_ends[n_books - 1] - 1])
    result = {
        "documents": corpus.num_documents, "books": n_books,
        "book_share_of_tokens": book_tokens / corpus.num_tokens,
        "book_share_of_A": float((doc_of(plan.a_lo) < n_books).mean()),
        "book_share_of_notnext_B_length_weighted": float((doc_of(plan.b_lo[plan.is_random]) < n_books).mean()),
        "book_share_of_notnext_B_if_uniform": n_books / corpus.num_documents,
        "notnext_share": float(plan.is_random.mean()),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
