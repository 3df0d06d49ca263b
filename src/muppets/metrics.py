"""Evaluation metrics: classification, correlation, entity span F1 (conlleval), SQuAD EM/F1.

Pure standard library + numpy. Each function states its formula; the reference tools they
reproduce (scikit-learn, scipy.stats, seqeval/conlleval, the official SQuAD v1.1 script) are
test oracles only and never imported here.

Argument order: ``(pred, gold)`` everywhere except :func:`entity_f1`, which follows seqeval's
``(gold_seqs, pred_seqs)``; :func:`compute` hides the difference behind one ``(preds, golds)``
call.

>>> compute("accuracy", [1, 0, 1, 1], [1, 1, 1, 0])
{'accuracy': 0.5}
>>> entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])["f1"]
0.0
>>> squad_f1("the cat sat", ["A cat sat down."])  # P = 2/2, R = 2/3
0.8
"""

from __future__ import annotations

import logging
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from muppets.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

# ============================================================================ helpers


def _paired(pred: Sequence[Any], gold: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Return ``pred`` and ``gold`` as equal-length, non-empty 1-D arrays, else raise DataError."""
    p, g = np.asarray(pred), np.asarray(gold)
    if p.ndim != 1 or g.ndim != 1:
        raise DataError("pred and gold must be 1-D sequences", value=(p.shape, g.shape))
    if len(p) != len(g):
        raise DataError("pred and gold differ in length", value=(len(p), len(g)))
    if len(p) == 0:
        raise DataError("cannot score an empty set of predictions")
    if (p.dtype.kind in "US") != (g.dtype.kind in "US"):
        raise DataError("pred and gold mix string and numeric labels", value=(p.dtype, g.dtype))
    return p, g


def _safe_div(num: float, den: float) -> float:
    """``num / den``, or 0.0 when ``den == 0`` (the convention of sklearn, seqeval, conlleval)."""
    return num / den if den else 0.0


def _f1_from_counts(correct: int, n_pred: int, n_gold: int) -> float:
    """F1 = 2PR / (P + R) with P = correct/n_pred, R = correct/n_gold; 0 when undefined."""
    precision, recall = _safe_div(correct, n_pred), _safe_div(correct, n_gold)
    return _safe_div(2 * precision * recall, precision + recall)


# ============================================================================ classification


class PRF(NamedTuple):
    """Precision, recall and F1 of one class (or of all entities)."""

    precision: float
    recall: float
    f1: float


def accuracy(pred: Sequence[Any], gold: Sequence[Any]) -> float:
    """Accuracy = (1/N) * sum_i [pred_i == gold_i].

    >>> accuracy([0, 1, 2, 2], [0, 1, 1, 2])
    0.75
    """
    p, g = _paired(pred, gold)
    return float(np.mean(p == g))


def precision_recall_f1(pred: Sequence[Any], gold: Sequence[Any], positive: Any = 1) -> PRF:
    """Binary precision, recall and F1 of the class ``positive``.

    P = TP / (TP + FP), R = TP / (TP + FN), F1 = 2PR / (P + R); each is 0 when its
    denominator is 0 (scikit-learn's ``zero_division`` default, without the warning).

    >>> precision_recall_f1([1, 1, 0, 0], [1, 0, 1, 0])
    PRF(precision=0.5, recall=0.5, f1=0.5)
    """
    p, g = _paired(pred, gold)
    p_pos, g_pos = p == positive, g == positive
    tp = int(np.sum(p_pos & g_pos))
    return PRF(_safe_div(tp, int(p_pos.sum())), _safe_div(tp, int(g_pos.sum())),
               _f1_from_counts(tp, int(p_pos.sum()), int(g_pos.sum())))


def f1_binary(pred: Sequence[Any], gold: Sequence[Any], positive: Any = 1) -> float:
    """F1 of the class ``positive``: 2PR / (P + R) (see :func:`precision_recall_f1`)."""
    return precision_recall_f1(pred, gold, positive).f1


def macro_f1(pred: Sequence[Any], gold: Sequence[Any], labels: Sequence[Any] | None = None) -> float:
    """Unweighted mean over classes of the one-vs-rest F1: (1/K) * sum_k F1_k.

    ``labels`` defaults to every label seen in ``pred`` or ``gold`` (as scikit-learn does);
    a class that is never predicted nor present scores F1 = 0.

    >>> macro_f1(["a", "b", "b"], ["a", "b", "c"])
    0.5555555555555555
    """
    p, g = _paired(pred, gold)
    classes = np.unique(np.concatenate([p, g])) if labels is None else list(labels)
    if len(classes) == 0:
        raise DataError("macro_f1 needs at least one label")
    scores = [_f1_from_counts(int(np.sum((p == c) & (g == c))), int(np.sum(p == c)), int(np.sum(g == c)))
              for c in classes]
    return float(np.mean(scores))


def _confusion(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Confusion matrix C (K, K) with C[i, j] = #{n : gold_n = class i, pred_n = class j}."""
    _, codes = np.unique(np.concatenate([gold, pred]), return_inverse=True)
    k = int(codes.max()) + 1
    g_idx, p_idx = codes[: len(gold)], codes[len(gold):]
    table = np.zeros((k, k), dtype=np.int64)
    np.add.at(table, (g_idx, p_idx), 1)
    return table


def matthews_corrcoef(pred: Sequence[Any], gold: Sequence[Any]) -> float:
    """Matthews correlation coefficient (binary or its multiclass generalisation, R_K).

    With confusion matrix C, t_k = sum_j C[k, j] (gold counts), p_k = sum_i C[i, k]
    (predicted counts), c = trace(C) and s = N:

        MCC = (c*s - sum_k t_k p_k) / sqrt((s^2 - sum_k p_k^2) * (s^2 - sum_k t_k^2))

    which for two classes is (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
    When the denominator is 0 (a constant prediction or gold) the result is 0.0, as sklearn.

    >>> matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0])
    0.5773502691896258
    """
    table = _confusion(*_paired(pred, gold))
    t_sum, p_sum = table.sum(axis=1), table.sum(axis=0)
    correct, total = int(np.trace(table)), int(table.sum())
    cov_tp = correct * total - int(t_sum @ p_sum)
    cov_pp = total * total - int(p_sum @ p_sum)
    cov_tt = total * total - int(t_sum @ t_sum)
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return float(cov_tp / math.sqrt(cov_tt * cov_pp))


# ============================================================================ correlation


def _vectors(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` as float64 vectors of equal length >= 2 with finite values."""
    a, b = _paired(x, y)
    a, b = a.astype(np.float64), b.astype(np.float64)
    if len(a) < 2:
        raise DataError("a correlation needs at least 2 points", value=len(a))
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise DataError("correlation inputs contain NaN or infinity")
    return a, b


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r = sum_i (x_i - mx)(y_i - my) / sqrt(sum_i (x_i - mx)^2 * sum_i (y_i - my)^2).

    Undefined when either input is constant: returns NaN (as scipy.stats.pearsonr) and logs a
    warning. The value is clipped to [-1, 1] against rounding.

    >>> round(pearson([1, 2, 3], [2, 4, 7]), 6)
    0.993399
    """
    a, b = _vectors(x, y)
    da, db = a - a.mean(), b - b.mean()
    norm = math.sqrt(float(da @ da)) * math.sqrt(float(db @ db))
    if norm == 0.0:
        logger.warning("pearson: an input is constant, the correlation is undefined (NaN)")
        return float("nan")
    return float(np.clip(float(da @ db) / norm, -1.0, 1.0))


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..N of ``x``; tied values share the mean of the ranks they span.

    A value v repeated m times after c smaller values gets rank c + (m + 1) / 2
    (scipy.stats.rankdata's ``method="average"``).

    >>> average_ranks([10, 20, 10, 30]).tolist()
    [1.5, 3.0, 1.5, 4.0]
    """
    _, inverse, counts = np.unique(np.asarray(x), return_inverse=True, return_counts=True)
    smaller = np.cumsum(counts) - counts  # (U,) how many values lie below each distinct value
    return (smaller + (counts + 1) / 2.0)[inverse.reshape(-1)]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho = Pearson's r of the average ranks (ties share their mean rank, as scipy).

    >>> spearman([1, 2, 2, 3], [1, 3, 2, 4])
    0.9486832980505138
    """
    a, b = _vectors(x, y)
    return pearson(average_ranks(a), average_ranks(b))


# ============================================================================ entity spans


class Span(NamedTuple):
    """One entity: its type and the token range ``[start, end)`` (end exclusive)."""

    type: str
    start: int
    end: int


_SCHEME_PREFIXES: dict[str, frozenset[str]] = {
    "BIO": frozenset("BIO"),
    "IOB2": frozenset("BIO"),
    "IOB1": frozenset("BIO"),
    "IOBES": frozenset("BIOES"),
}


def _scheme_prefixes(scheme: str) -> frozenset[str]:
    if scheme not in _SCHEME_PREFIXES:
        raise ConfigError(f"unknown tagging scheme {scheme!r}; expected one of {sorted(_SCHEME_PREFIXES)}")
    return _SCHEME_PREFIXES[scheme]


def _split_tag(tag: str, allowed: frozenset[str], scheme: str, index: int) -> tuple[str, str]:
    """``"B-PER" -> ("B", "PER")``, ``"O" -> ("O", "")``; the type may itself contain ``-``."""
    if tag == "O":
        return "O", ""
    prefix, sep, type_ = str(tag).partition("-")
    if not sep or not type_ or prefix not in allowed or prefix == "O":
        raise DataError(f"token {index}: not a {scheme} tag (prefixes {''.join(sorted(allowed))}, "
                        f"then '-TYPE')", value=tag)
    return prefix, type_


def _chunk_ends(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    """conlleval's endOfChunk (with seqeval's E/S rules): does an entity end before ``cur``?"""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and cur in ("B", "S", "O"):
        return True
    return prev != "O" and prev_type != cur_type


def _chunk_starts(prev: str, prev_type: str, cur: str, cur_type: str) -> bool:
    """conlleval's startOfChunk (with seqeval's E/S rules): does an entity start at ``cur``?"""
    if cur in ("B", "S"):
        return True
    if cur in ("I", "E") and prev in ("O", "E", "S"):
        return True
    return cur != "O" and prev_type != cur_type


def entity_spans(tags: Sequence[str], scheme: str = "BIO") -> list[Span]:
    """Decode one sentence's tags into entity spans exactly as conlleval does.

    Reading left to right with the previous prefix/type, an entity *ends* before the current
    token when the previous tag was E or S; or was B/I and the current is B, S or O; or the
    type changes after a non-O tag. An entity *starts* at B or S; at I/E after O, E or S; or
    wherever the type changes. So ill-formed sequences still decode: ``O I-X`` starts an X
    entity, ``B-X I-Y`` is two entities (X then Y). Under these rules IOB1 and BIO (IOB2)
    decode identically; ``scheme`` only fixes which prefixes are legal (E and S: IOBES only).
    The E/S rules are seqeval's extension (conlleval has no S tag).

    >>> entity_spans(["B-PER", "I-PER", "O", "I-LOC", "B-ORG", "I-MISC"])
    [Span(type='PER', start=0, end=2), Span(type='LOC', start=3, end=4), \
Span(type='ORG', start=4, end=5), Span(type='MISC', start=5, end=6)]
    """
    allowed = _scheme_prefixes(scheme)
    spans: list[Span] = []
    prev, prev_type, start = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):  # a final O closes an entity left open
        cur, cur_type = _split_tag(tag, allowed, scheme, i)
        if _chunk_ends(prev, prev_type, cur, cur_type):
            spans.append(Span(prev_type, start, i))
        if _chunk_starts(prev, prev_type, cur, cur_type):
            start = i
        prev, prev_type = cur, cur_type
    return spans


def _all_spans(seqs: Sequence[Sequence[str]], scheme: str) -> set[tuple[int, str, int, int]]:
    """Every entity of every sentence as ``(sentence index, type, start, end)``."""
    found: set[tuple[int, str, int, int]] = set()
    for k, tags in enumerate(seqs):
        try:
            found.update((k, *span) for span in entity_spans(tags, scheme))
        except DataError as err:
            raise DataError(f"sentence {k}, {err}") from err
    return found


def _check_sequences(gold_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]]) -> None:
    if len(gold_seqs) != len(pred_seqs):
        raise DataError("gold and predicted sentence counts differ", value=(len(gold_seqs), len(pred_seqs)))
    for k, (gold, pred) in enumerate(zip(gold_seqs, pred_seqs)):
        if isinstance(gold, str) or isinstance(pred, str):
            raise DataError(f"sentence {k}: expected a list of tags, got a string", value=gold)
        if len(gold) != len(pred):
            raise DataError(f"sentence {k}: gold and predicted tag counts differ",
                            value=(len(gold), len(pred)))


def entity_f1(
    pred_seqs: Sequence[Sequence[str]], gold_seqs: Sequence[Sequence[str]], scheme: str = "BIO"
) -> dict[str, Any]:
    """Entity-level (exact span and type) micro precision/recall/F1, as conlleval and seqeval.

    An entity counts as correct only if a predicted span has the same type, start and end as a
    gold span. With G gold, P predicted and C correct entities: precision = C/P, recall = C/G,
    F1 = 2PR/(P+R) (each 0 when undefined). ``per_type`` holds the same for each type seen in
    gold or predictions, plus ``support`` (its number of gold entities). Fractions, not %.

    Arguments are ``(predictions, gold)`` like every metric here (seqeval takes gold first).

    >>> r = entity_f1([["B-PER", "I-PER", "O", "B-ORG"]], [["B-PER", "I-PER", "O", "B-LOC"]])
    >>> r["precision"], r["recall"], r["per_type"]["PER"]["f1"]
    (0.5, 0.5, 1.0)
    """
    _check_sequences(gold_seqs, pred_seqs)
    gold, pred = _all_spans(gold_seqs, scheme), _all_spans(pred_seqs, scheme)
    correct = gold & pred
    per_type = {t: _entity_scores(correct, gold, pred, t) for t in sorted({s[1] for s in gold | pred})}
    return {
        "precision": _safe_div(len(correct), len(pred)),
        "recall": _safe_div(len(correct), len(gold)),
        "f1": _f1_from_counts(len(correct), len(pred), len(gold)),
        "support": len(gold),
        "per_type": per_type,
    }


def _entity_scores(correct: set, gold: set, pred: set, type_: str) -> dict[str, float]:
    """Precision/recall/F1/support restricted to entities of ``type_``."""
    n_correct = sum(1 for s in correct if s[1] == type_)
    n_gold = sum(1 for s in gold if s[1] == type_)
    n_pred = sum(1 for s in pred if s[1] == type_)
    return {"precision": _safe_div(n_correct, n_pred), "recall": _safe_div(n_correct, n_gold),
            "f1": _f1_from_counts(n_correct, n_pred, n_gold), "support": n_gold}


# ============================================================================ SQuAD v1.1

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 answer normalisation, in the official order.

    1. lower-case; 2. delete every ASCII punctuation character (``string.punctuation``);
    3. replace the whole words a / an / the by a space; 4. collapse whitespace to single spaces.

    >>> normalize_answer("  The  Eiffel-Tower, a landmark! ")
    'eiffeltower landmark'
    """
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _max_over_golds(score: Callable[[str, str], float], pred: str, golds: Sequence[str]) -> float:
    if isinstance(golds, str) or len(golds) == 0:
        raise DataError("expected a non-empty list of gold answers", value=golds)
    return max(score(pred, gold) for gold in golds)


def _exact(pred: str, gold: str) -> float:
    return float(normalize_answer(pred) == normalize_answer(gold))


def _token_f1(pred: str, gold: str) -> float:
    """Bag-of-tokens F1 of normalised answers: common = |pred ∩ gold| (multiset), P = common/|pred|,
    R = common/|gold|, F1 = 2PR/(P+R); 0 when nothing is shared (so also when either is empty)."""
    pred_tokens, gold_tokens = normalize_answer(pred).split(), normalize_answer(gold).split()
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def squad_exact_match(pred: str, golds: Sequence[str]) -> float:
    """EM = max_g [normalize(pred) == normalize(g)] over the gold answers g (1.0 or 0.0).

    >>> squad_exact_match("the Broncos", ["Denver Broncos", "Broncos"])
    1.0
    """
    return _max_over_golds(_exact, pred, golds)


def squad_f1(pred: str, golds: Sequence[str]) -> float:
    """F1 = max_g token-F1(pred, g) over the gold answers g, on normalised whitespace tokens.

    >>> squad_f1("Denver", ["Denver Broncos"])
    0.6666666666666666
    """
    return _max_over_golds(_token_f1, pred, golds)


def squad_gold_answers(dataset_json: Mapping[str, Any]) -> dict[str, list[str]]:
    """``{question id: [gold answer texts]}`` from a parsed SQuAD json, in file order."""
    if not isinstance(dataset_json, Mapping) or "data" not in dataset_json:
        raise DataError("not a SQuAD dataset: expected a JSON object with a 'data' list")
    if dataset_json.get("version") != "1.1":
        logger.warning("SQuAD scoring is defined for v1.1; dataset says version %r",
                       dataset_json.get("version"))
    try:
        return {qa["id"]: [a["text"] for a in qa["answers"]]
                for article in dataset_json["data"]
                for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    except (KeyError, TypeError) as err:
        raise DataError(f"malformed SQuAD dataset: missing or bad field {err}") from err


def squad_scores_from_answers(predictions: Mapping[str, str],
                              answers: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """EM and F1 as fractions in [0, 1] over every question of ``answers``, as every metric of
    muppets (the official script prints percent: 100 times these).

    EM = 1/Q * sum_q squad_exact_match(pred_q, golds_q), likewise F1. A question with no
    prediction scores 0 but still counts in Q; predictions for unknown ids are ignored
    (both as the official script).
    """
    if not answers:
        raise DataError("no questions to score")
    exact = f1 = 0.0
    missing = [qid for qid in answers if qid not in predictions]
    for qid, golds in answers.items():
        if qid in predictions:
            exact += squad_exact_match(predictions[qid], golds)
            f1 += squad_f1(predictions[qid], golds)
    if missing:
        logger.warning("%d of %d questions have no prediction and score 0 (first: %s)",
                       len(missing), len(answers), missing[0])
    return {"exact_match": exact / len(answers), "f1": f1 / len(answers)}


def squad_scores(predictions: Mapping[str, str], dataset_json: Mapping[str, Any]) -> dict[str, float]:
    """The official SQuAD v1.1 evaluation: ``{"exact_match": …, "f1": …}`` as fractions (see above)."""
    return squad_scores_from_answers(predictions, squad_gold_answers(dataset_json))


# ============================================================================ CMRC 2018


_CMRC_PUNCTUATION = frozenset(['-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=', '，', '。', '：', '？', '！',
                               '“', '”', '；', '’', '《', '》', '……', '·', '、', '「', '」', '（', '）', '－', '～',
                               '『', '』'])
_HAN = re.compile("[\u4e00-\u9fa5]")
_WORDS = re.compile(r"\w+|[^\w\s]")


def cmrc_segments(text: str) -> list[str]:
    """The official CMRC 2018 evaluation's ``mixed_segmentation(text, rm_punc=True)``: lower-cased,
    its punctuation list removed, each Han character a segment, other runs split into words.
    (The official script splits those runs with ``nltk.word_tokenize``; here ``\\w+`` or one
    other character, so an English contraction may split differently.)

    >>> cmrc_segments("《战国无双3》由光荣和ω-force开发")
    ['战', '国', '无', '双', '3', '由', '光', '荣', '和', 'ωforce', '开', '发']
    """
    segments, run = [], ""
    for ch in text.lower().strip():
        if ch in _CMRC_PUNCTUATION:
            continue
        if _HAN.match(ch):
            segments += _WORDS.findall(run) + [ch]
            run = ""
        else:
            run += ch
    return segments + _WORDS.findall(run)


def _longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common *contiguous* run of segments (the script's ``find_lcs``)."""
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        row = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                row[j + 1] = prev[j] + 1
                best = max(best, row[j + 1])
        prev = row
    return best


def _cmrc_f1(pred: str, gold: str) -> float:
    p, g = cmrc_segments(pred), cmrc_segments(gold)
    common = _longest_common_run(g, p)
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _cmrc_exact(pred: str, gold: str) -> float:
    strip = lambda s: "".join(ch for ch in s.lower().strip() if ch not in _CMRC_PUNCTUATION)  # noqa: E731
    return float(strip(pred) == strip(gold))


def cmrc_scores(predictions: Mapping[str, str], answers: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """CMRC 2018's official EM and F1 as fractions in [0, 1] (the official script prints 100 times
    these; max over the gold answers of each question):
    EM compares the answers with punctuation removed; F1 is the F1 of the longest common run of
    :func:`cmrc_segments` (characters for Chinese). A missing prediction scores 0.

    >>> cmrc_scores({"q": "北京大学"}, {"q": ["北京大学。", "北京"]})
    {'exact_match': 1.0, 'f1': 1.0}
    """
    if not answers:
        raise DataError("no questions to score")
    exact = sum(_max_over_golds(_cmrc_exact, predictions[q], g) for q, g in answers.items() if q in predictions)
    f1 = sum(_max_over_golds(_cmrc_f1, predictions[q], g) for q, g in answers.items() if q in predictions)
    return {"exact_match": exact / len(answers), "f1": f1 / len(answers)}


# ============================================================================ dispatcher


def _compute_f1(preds: Any, golds: Any, positive: Any = 1) -> dict[str, float]:
    prf = precision_recall_f1(preds, golds, positive)
    return {"accuracy": accuracy(preds, golds), **prf._asdict()}


def _compute_correlation(preds: Any, golds: Any) -> dict[str, float]:
    r, rho = pearson(preds, golds), spearman(preds, golds)
    return {"pearson": r, "spearman": rho, "corr": (r + rho) / 2.0}


def _compute_entity_f1(preds: Any, golds: Any, scheme: str = "BIO") -> dict[str, float]:
    report = entity_f1(preds, golds, scheme=scheme)
    flat = {key: float(report[key]) for key in ("precision", "recall", "f1")}
    flat.update({f"f1_{t}": scores["f1"] for t, scores in report["per_type"].items()})
    return flat


def token_accuracy(preds: Sequence[Sequence[Any]], golds: Sequence[Sequence[Any]]) -> float:
    """Accuracy over every token of every sentence (part-of-speech tagging): sentences must
    have equal lengths pairwise.

    >>> token_accuracy([["DT", "NN"], ["VB"]], [["DT", "VB"], ["VB"]])
    0.6666666666666666
    """
    if len(preds) != len(golds):
        raise DataError(f"{len(preds)} predicted sentences for {len(golds)} gold ones")
    flat_p, flat_g = [], []
    for i, (p, g) in enumerate(zip(preds, golds)):
        if len(p) != len(g):
            raise DataError(f"sentence {i}: {len(p)} predicted tags for {len(g)} gold tags")
        flat_p += list(p)
        flat_g += list(g)
    return accuracy(flat_p, flat_g)


def _compute_squad(preds: Any, golds: Any) -> dict[str, float]:
    if isinstance(golds, Mapping) and "data" in golds:
        return squad_scores(preds, golds)
    return squad_scores_from_answers(preds, golds)


_METRICS: dict[str, Callable[..., dict[str, float]]] = {
    "accuracy": lambda preds, golds: {"accuracy": accuracy(preds, golds)},
    "f1": _compute_f1,
    "mcc": lambda preds, golds: {"mcc": matthews_corrcoef(preds, golds)},
    "pearson_spearman": _compute_correlation,
    "entity_f1": _compute_entity_f1,
    "token_accuracy": lambda preds, golds: {"accuracy": token_accuracy(preds, golds)},
    "squad": _compute_squad,
    "cmrc2018": cmrc_scores,
}
METRIC_NAMES: tuple[str, ...] = tuple(_METRICS)


def compute(metric_name: str, preds: Any, golds: Any, **options: Any) -> dict[str, float]:
    """Score ``preds`` against ``golds`` with a named metric; returns a flat dict of floats.

    ========================  ==========================================  =====================
    name                      preds / golds                               keys
    ========================  ==========================================  =====================
    ``accuracy``              label sequences                             accuracy
    ``f1`` (positive=1)       label sequences                             accuracy, precision,
                                                                          recall, f1
    ``mcc``                   label sequences                             mcc
    ``pearson_spearman``      float sequences                             pearson, spearman,
                                                                          corr (their mean)
    ``entity_f1`` (scheme=)   lists of tag lists                          precision, recall, f1,
                                                                          f1_<TYPE>
    ``token_accuracy``        lists of tag lists (e.g. POS)               accuracy
    ``squad``                 {qid: text} / SQuAD json or {qid: [texts]}  exact_match, f1
    ``cmrc2018``              {qid: text} / {qid: [texts]} (Chinese)      exact_match, f1
    ========================  ==========================================  =====================

    >>> compute("mcc", [1, 1, 0, 0], [1, 0, 0, 0])
    {'mcc': 0.5773502691896258}
    """
    if metric_name not in _METRICS:
        raise ConfigError(f"unknown metric {metric_name!r}; expected one of {list(METRIC_NAMES)}")
    return _METRICS[metric_name](preds, golds, **options)
