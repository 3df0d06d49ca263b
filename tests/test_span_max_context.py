"""SQuAD decoding with max-context (BERT's ``run_squad.py``, ``_check_is_max_context``): a span
is scored only in the window where its start token has the most context, score =
min(left context, right context) + 0.01 * window length."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from muppets.tasks.spec import SpanExample
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.transfer.features import FeatureOptions, max_context_windows, span_features
from muppets.transfer.predict import SpanOptions, decode_spans

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_finetune import CORPUS  # noqa: E402

# 15 one-piece tokens: the(0) movie(1) was(2) good(3) and(4) the(5) plot(6) was(7) dull(8)
# and(9) the(10) story(11) was(12) bad(13) .(14)
CONTEXT = "the movie was good and the plot was dull and the story was bad ."
HEAD = 4  # [CLS] where ? [SEP]
# budget = 13 - 4 - 1 = 8 context tokens per window, stride 4: windows [0, 8), [4, 12), [8, 15)
OPTIONS = FeatureOptions(max_seq_len=13, doc_stride=4, max_query_len=8)


@pytest.fixture(scope="module")
def tok() -> WordPieceTokenizer:
    return WordPieceTokenizer.train(CORPUS, vocab_size=400, min_frequency=1)


def test_max_context_rule_by_hand():
    # BERT's own example: "the man went to the store and bought a gallon of milk", windows of
    # 5 tokens every 3 (the last one 3 long). "bought" (7): window 1 has 4 left and 0 right
    # -> 0 + 0.05; window 2 has 1 left and 3 right -> 1 + 0.05: window 2.
    # "to" (3): window 0: min(3, 1) + 0.05 = 1.05 > window 1: min(0, 4) + 0.05.
    # "of" (10): window 2: min(4, 0) + 0.05 = 0.05 < window 3: min(1, 1) + 0.03 = 1.03.
    windows = [(0, 5), (3, 5), (6, 5), (9, 3)]
    assert max_context_windows(windows, 12) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3]
    # equal context on both sides: the longer window wins by 0.01 * length ...
    assert max_context_windows([(0, 3), (0, 5)], 3) == [1, 1, 1]  # token 1: 1.03 vs 1.05
    # ... and on a full tie the first window does (BERT's strict ">")
    assert max_context_windows([(0, 3), (0, 3)], 3) == [0, 0, 0]
    assert max_context_windows([(0, 0)], 0) == []


def test_features_flag_the_max_context_window_of_each_token(tok):
    ex = SpanExample("q", "where ?", CONTEXT, [], "t", "toy")
    feats = span_features([ex], tok, OPTIONS)
    assert [len(f.input_ids) - HEAD - 1 for f in feats] == [8, 8, 7]
    best = max_context_windows([(0, 8), (4, 8), (8, 7)], 15)
    # hand: "good" (3) only in window 0; "plot" (6): w0 min(6, 1) vs w1 min(2, 5) -> w1;
    # "dull" (8): w1 min(4, 3) = 3 vs w2 min(0, 6) = 0 -> w1; "story" (11): w1 min(7, 0) vs w2 min(3, 3) -> w2
    assert [best[k] for k in (3, 6, 8, 11)] == [0, 1, 1, 2]
    for w, (f, start) in enumerate(zip(feats, (0, 4, 8))):
        assert f.is_max_context[:HEAD] == [False] * HEAD and f.is_max_context[-1] is False
        inside = f.is_max_context[HEAD:-1]
        assert inside == [best[start + j] == w for j in range(len(inside))]
    # every context token is the max-context token of exactly one window
    assert sum(sum(f.is_max_context) for f in feats) == 15


def _logits(feats, spans):
    """Zero logits, then ``spans[(window, context token)] = score`` as a one-token span
    (start and end logits score / 2 each)."""
    out = [np.zeros((len(f.input_ids), 2), dtype=np.float32) for f in feats]
    for (w, k), score in spans.items():
        pos = HEAD + k - (0, 4, 8)[w]
        out[w][pos] = score / 2
    return out


def answers(*args) -> list[tuple[str, float]]:
    """(text, score) of decode_spans' (text, score, start, end)."""
    return [p[:2] for p in decode_spans(*args)]


def test_a_span_at_a_window_edge_loses_to_the_same_span_where_it_is_central(tok):
    ex = SpanExample("q", "where ?", CONTEXT, [], "t", "toy")
    feats = span_features([ex], tok, OPTIONS)
    pieces = [tok.id_to_token(i) for i in feats[2].input_ids]
    assert pieces[HEAD] == "dull" and [tok.id_to_token(i) for i in feats[1].input_ids][HEAD + 2] == "plot"
    # "dull" opens window 2 (no left context) and scores 10 there; in window 1, where it is
    # central, it scores 5; "plot" scores 7 in window 1, its max-context window.
    logits = _logits(feats, {(2, 8): 10.0, (1, 8): 5.0, (1, 6): 7.0})
    assert answers([ex], feats, logits, SpanOptions(max_context=False)) == [("dull", 10.0)]
    assert answers([ex], feats, logits, SpanOptions()) == [("plot", 7.0)]
    # alone, "dull" is still the answer, with its score from the central window
    logits = _logits(feats, {(2, 8): 10.0, (1, 8): 5.0})
    assert answers([ex], feats, logits, SpanOptions()) == [("dull", 5.0)]
    # a longer span is judged by its start token: "dull and the story" (8..11) lies in
    # windows 1 and 2, and only window 1 (the max-context window of "dull") scores it
    logits = _logits(feats, {})
    logits[1][HEAD + 8 - 4, 0], logits[1][HEAD + 11 - 4, 1] = 3.0, 3.0
    logits[2][HEAD + 8 - 8, 0], logits[2][HEAD + 11 - 8, 1] = 4.0, 4.0
    assert answers([ex], feats, logits, SpanOptions()) == [("dull and the story", 6.0)]
    assert answers([ex], feats, logits, SpanOptions(max_context=False)) == [("dull and the story", 8.0)]


def test_doctests():
    import doctest

    from muppets.transfer import features, predict
    assert doctest.testmod(features).failed == 0 and doctest.testmod(predict).failed == 0
