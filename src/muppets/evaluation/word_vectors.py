"""Word-similarity and analogy benchmarks for static word vectors, scored exactly as gensim does.

* **Word similarity** (WordSim-353, Finkelstein et al. 2002; SimLex-999, Hill et al. 2015):
  Spearman's rho (and Pearson's r) between the human scores and cos(a, b) over the pairs whose
  two words are both among the ``restrict_vocab`` most frequent words; the other pairs are
  skipped and counted as out-of-vocabulary (``oov_ratio`` = skipped / all pairs).
* **Analogies** (the Google set, Mikolov et al. 2013a, ``questions-words.txt``): a : b :: c : ?
  answered by 3CosAdd, argmax_w cos(w, b̂ - â + ĉ) over the ``restrict_vocab`` (300,000) most
  frequent words with a, b and c excluded; accuracy over the questions whose four words are all
  known (the others are skipped and counted in ``oov_ratio``).

With ``case_insensitive=True`` (the default, as in gensim's ``evaluate_word_pairs`` /
``evaluate_word_analogies``) every word — vocabulary and test set — is compared in upper case,
and a word with several case variants takes the vector of the most frequent one. File parsing
follows gensim too: ``#`` lines and malformed lines are skipped, analogy sections start with
``": "``. The test files ship inside the gensim package (``gensim/test/test_data``);
:func:`gensim_test_file` finds them without importing gensim. Analogy questions are scored in
batches (one matrix product per batch instead of gensim's one pass over the vocabulary per
question), so the full Google set takes seconds.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from muppets.errors import ConfigError, DataError
from muppets.metrics import pearson, spearman
from muppets.vectors import RESTRICT_VOCAB, WordVectors

__all__ = ["PairScore", "AnalogyScore", "gensim_test_file", "evaluate_word_pairs",
           "evaluate_analogies", "evaluate_standard"]

logger = logging.getLogger(__name__)

WORDSIM353 = "wordsim353.tsv"
SIMLEX999 = "simlex999.txt"
GOOGLE_ANALOGIES = "questions-words.txt"
_CANDIDATES = 5  # gensim looks at the 5 best answers, skipping words outside the vocabulary


@dataclass
class PairScore:
    """Word-similarity result."""

    spearman: float  # Spearman's rho between human and cosine similarities
    pearson: float  # Pearson's r between them
    pairs: int  # pairs scored
    oov: int  # pairs skipped because a word is unknown
    oov_ratio: float  # oov / (pairs + oov), in [0, 1] (gensim reports it in percent)


@dataclass
class AnalogyScore:
    """Analogy result."""

    accuracy: float  # correct / questions scored (0 when none could be scored)
    correct: int  # questions answered correctly
    total: int  # questions scored
    oov: int  # questions skipped because a word is unknown
    oov_ratio: float  # oov / all well-formed questions, in [0, 1]
    sections: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (correct, total)


def gensim_test_file(name: str) -> Path:
    """``<site-packages>/gensim/test/test_data/<name>`` (gensim is located, not imported)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{name} ships with gensim, which is not installed: pip install gensim, "
                          "or pass the file's path")
    path = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data" / name
    if not path.is_file():
        raise ConfigError(f"{path}: not found in the installed gensim package")
    return path


def _known_words(wv: WordVectors, restrict_vocab: int | None, case_insensitive: bool) -> dict[str, int]:
    """Lookup key -> row over the first ``restrict_vocab`` words; the first variant of a key wins."""
    known: dict[str, int] = {}
    for i, word in enumerate(wv.words[:restrict_vocab]):
        known.setdefault(word.upper() if case_insensitive else word, i)
    return known


def _read_lines(path: str | Path) -> list[str]:
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataError(f"cannot read ({err.strerror})", path=path) from err
    except UnicodeDecodeError as err:
        raise DataError(f"not UTF-8 ({err.reason})", path=path, position=err.start) from err


def evaluate_word_pairs(wv: WordVectors, path: str | Path, restrict_vocab: int | None = RESTRICT_VOCAB,
                        case_insensitive: bool = True, delimiter: str = "\t") -> PairScore:
    """Spearman / Pearson correlation of cos(a, b) with the human scores of ``path``."""
    known = _known_words(wv, restrict_vocab, case_insensitive)
    gold, model, oov = [], [], 0
    for line in _read_lines(path):
        fields = line.split(delimiter)
        if not line or line.startswith("#") or len(fields) != 3:
            continue
        a, b, score = (f.upper() for f in fields) if case_insensitive else fields
        try:
            human = float(score)
        except ValueError:
            continue
        if a not in known or b not in known:
            oov += 1
            continue
        ia, ib = known[a], known[b]
        gold.append(human)
        model.append(float(np.dot(wv.vectors[ia] / wv.norms[ia], wv.vectors[ib] / wv.norms[ib])))
    if not gold:
        raise DataError("no pair with both words in the vocabulary (or no valid line)", path=path)
    score = PairScore(spearman(gold, model), pearson(gold, model), len(gold), oov, oov / (len(gold) + oov))
    logger.info("%s: Spearman %.4f, Pearson %.4f over %d pairs (%.1f%% out of vocabulary)",
                Path(path).name, score.spearman, score.pearson, score.pairs, 100 * score.oov_ratio)
    return score


def _read_analogies(path: str | Path, case_insensitive: bool) -> list[tuple[str, list[str]]]:
    """``(section, [a, b, c, expected])`` for every well-formed question line."""
    section, questions = None, []
    for lineno, line in enumerate(_read_lines(path), 1):
        if line.startswith(": "):
            section = line.lstrip(": ").strip()
            continue
        if section is None:
            raise DataError("question before the first ': section' line", path=path, line=lineno)
        words = line.split()
        if len(words) == 4:
            questions.append((section, [w.upper() for w in words] if case_insensitive else words))
    return questions


def evaluate_analogies(wv: WordVectors, path: str | Path, restrict_vocab: int | None = RESTRICT_VOCAB,
                       case_insensitive: bool = True, batch_size: int = 256) -> AnalogyScore:
    """Accuracy of 3CosAdd on the analogy questions of ``path`` (see the module docstring)."""
    known = _known_words(wv, restrict_vocab, case_insensitive)
    questions = _read_analogies(path, case_insensitive)
    scored = [(s, q) for s, q in questions if all(w in known for w in q)]
    rows = np.array([[known[w] for w in q[:3]] for _, q in scored], dtype=np.int64).reshape(-1, 3)  # (Q, 3)
    predicted = _answer(wv, rows, restrict_vocab, case_insensitive, known, batch_size)
    sections: dict[str, tuple[int, int]] = {}
    for (section, q), guess in zip(scored, predicted):
        right, total = sections.get(section, (0, 0))
        sections[section] = (right + (guess == q[3]), total + 1)
    correct = sum(r for r, _ in sections.values())
    oov = len(questions) - len(scored)
    result = AnalogyScore(correct / len(scored) if scored else 0.0, correct, len(scored), oov,
                          oov / len(questions) if questions else 0.0, sections)
    logger.info("%s: accuracy %.4f (%d/%d), %.1f%% of the questions out of vocabulary",
                Path(path).name, result.accuracy, correct, len(scored), 100 * result.oov_ratio)
    return result


def _answer(wv: WordVectors, rows: np.ndarray, restrict_vocab: int | None, case_insensitive: bool,
            known: dict[str, int], batch_size: int) -> list[str | None]:
    """The predicted word (lookup key) of each question ``rows[q] = (a, b, c)``, as gensim picks it:
    among the best candidates (a, b, c excluded), the first whose key is known and not a query word."""
    unit = wv.vectors / wv.norms[:, None]  # (V, d)
    answers: list[str | None] = []
    for start in range(0, len(rows), batch_size):
        abc = rows[start:start + batch_size]  # (q, 3)
        queries = unit[abc[:, 1]] + unit[abc[:, 2]] - unit[abc[:, 0]]  # (q, d)
        scores = wv.cosines(queries, restrict_vocab)  # (q, R)
        take = min(_CANDIDATES + 3, scores.shape[1])
        top = np.argpartition(-scores, take - 1, axis=1)[:, :take]  # (q, take)
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), 1, kind="stable"), 1)
        for query, candidates in zip(abc, top):
            answers.append(_pick(wv, query, candidates, case_insensitive, known))
    return answers


def _pick(wv: WordVectors, query: np.ndarray, candidates: np.ndarray, case_insensitive: bool,
          known: dict[str, int]) -> str | None:
    ignore = {wv.words[i].upper() if case_insensitive else wv.words[i] for i in query}
    guess = None
    for i in [c for c in candidates.tolist() if c not in set(query.tolist())][:_CANDIDATES]:
        guess = wv.words[i].upper() if case_insensitive else wv.words[i]
        if guess in known and guess not in ignore:
            break
    return guess


def evaluate_standard(wv: WordVectors, restrict_vocab: int | None = RESTRICT_VOCAB) -> dict[str, float]:
    """WordSim-353 and SimLex-999 Spearman, Google analogy accuracy, and their OOV ratios (a
    similarity set with no known pair scores NaN instead of raising)."""
    scores: dict[str, float] = {}
    for key, name in (("wordsim353", WORDSIM353), ("simlex999", SIMLEX999)):
        try:
            pairs = evaluate_word_pairs(wv, gensim_test_file(name), restrict_vocab)
            scores.update({f"{key}_spearman": pairs.spearman, f"{key}_oov_ratio": pairs.oov_ratio})
        except DataError as err:
            logger.warning("%s", err)
            scores.update({f"{key}_spearman": float("nan"), f"{key}_oov_ratio": 1.0})
    an = evaluate_analogies(wv, gensim_test_file(GOOGLE_ANALOGIES), restrict_vocab)
    return {**scores, "analogy_accuracy": an.accuracy, "analogy_oov_ratio": an.oov_ratio,
            "analogy_questions": float(an.total)}
