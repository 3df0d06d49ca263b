"""Masking units — words, phrases, entities — found once when a corpus is prepared.

Whole-word, phrase and entity masking (Cui et al. 2019, Chinese-BERT-wwm; Sun et al. 2019,
ERNIE 1.0 §3.2) mask *units* rather than single pieces. Which tokens form a unit is decided
here, while :func:`muppets.data.prepare.prepare_corpus` tokenizes the text, and stored beside
the tokens as ``units.bin``: one ``uint8`` per token whose bits say that the token *starts* a
unit at a level (:data:`UNIT_BITS`). Each level is a partition of every sentence's tokens:

* ``whole_word`` — the words of the **segmenter**: ``pretokenizer`` (BERT's pre-tokenizer:
  a run of letters/digits, or one punctuation mark or CJK character; for English this is a
  token and its ``##`` pieces) or ``jieba`` (Chinese words, ``jieba.lcut`` with its HMM for
  unknown words; the optional ``chinese`` extra).
* ``phrase`` — ERNIE's phrase level: multi-word chunks (below) are units, every other word is
  a unit of its own.
* ``entity`` — spans of an entity **lexicon** file found in the text are units, every other
  word is a unit of its own. :func:`write_lexicon` writes one from :func:`wiki_titles` (the
  article titles of a WikiExtractor corpus: 40,930 for the shared Chinese Wikipedia) or from
  :func:`tagged_entities` (the entities of a tagging task's training split, e.g. MSRA NER).

The chunker of the phrase level, chosen to need nothing beyond the segmenter:

* ``pretokenizer`` (English): maximal runs of 2+ consecutive words that are alphanumeric and
  not in :data:`ENGLISH_STOPWORDS` (determiners, pronouns, prepositions, conjunctions,
  auxiliaries), cut into chunks of at most :data:`MAX_PHRASE_WORDS` words — "the new york
  stock exchange said" gives ``new york stock exchange``. A stopword, a punctuation mark or a
  sentence end closes a run, so chunks approximate base noun phrases (plus some verb+object
  runs) without a tagger; spaCy-style noun chunks would need a parser and a model.
* ``jieba`` (Chinese): maximal runs of 2+ consecutive jieba words whose part of speech (jieba's
  dictionary tag) is nominal, adjectival, numeral or measure word (:data:`PHRASE_TAGS`): the
  Chinese base noun phrase (``中国 科学院 研究员``, ``一个 赛季``). Words the dictionary lacks
  (found by the HMM: mostly names) count as nouns when they are 2+ Han characters. Tags are
  looked up rather than computed by ``jieba.posseg``'s HMM, which runs at about 3 k characters
  a second (days for a corpus), against 250 k for the lookup.

Units never split a word: a token starts a unit of a level only if it starts a pre-tokenizer
word, a segmenter word, and is not inside a phrase or entity span. A span edge that falls
inside a word is thus widened to the whole word ("Paris" in "Parisian" masks "parisian").
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from muppets.config import atomic_path, read_utf8
from muppets.data.shards import UNITS_FILE  # (N,) uint8 beside tokens.bin: bit set = the token starts a unit
from muppets.errors import ConfigError, DataError

__all__ = ["UNITS_FILE", "UNIT_BITS", "SEGMENTERS", "MAX_PHRASE_WORDS", "ENGLISH_STOPWORDS", "PHRASE_TAGS",
           "UnitSpec", "Lexicon", "UnitMarker", "units_from_spans", "english_phrases", "write_lexicon",
           "tagged_entities", "wiki_titles"]

logger = logging.getLogger(__name__)

UNIT_BITS = {"whole_word": 1, "phrase": 2, "entity": 4}
SEGMENTERS = ("pretokenizer", "jieba")
UNITS_VERSION = 1  # changes when the same settings would give other units
MAX_PHRASE_WORDS = 4  # longest phrase, in words (ERNIE's phrases are short: 2-4 words)
ENGLISH_STOPWORDS = frozenset("""
a an the this that these those some any each every no all both either neither such
i me my mine we us our ours you your yours he him his she her hers it its they them their theirs
what which who whom whose where when why how there here
of in on at by for with from to into onto upon over under about above below between among through
during before after since until till against without within across along around behind beyond
near off out up down per via than as like
and or but nor so yet if then else because while although though unless whether
is am are was were be been being have has had having do does did done doing
will would shall should can could may might must ought
not no nor only also just very too again once more most much many few less least
""".split())
PHRASE_TAGS = frozenset({"n", "nr", "nrt", "nrfg", "ns", "nt", "nz", "ng", "nl", "vn", "an",
                         "a", "b", "j", "m", "mq", "q"})  # jieba/ICTCLAS tags of base-NP words


@dataclass(frozen=True)
class UnitSpec:
    """Which units a prepared corpus stores: the segmenter and an optional entity lexicon."""

    segmenter: str  # pretokenizer | jieba
    entity_lexicon: str = ""  # a lexicon file: one entity per line ("" = no entity level)

    def __post_init__(self) -> None:
        if self.segmenter not in SEGMENTERS:
            raise ConfigError(f"corpus.segmenter={self.segmenter!r}: one of {SEGMENTERS} "
                              "(or empty for no stored masking units)")

    @property
    def levels(self) -> list[str]:
        """The masking levels a corpus prepared with this spec supports (besides ``piece``)."""
        return ["whole_word", "phrase"] + (["entity"] if self.entity_lexicon else [])

    def describe(self) -> dict[str, Any]:
        """What ``meta.json`` records under ``units`` (a corpus is reused only if it matches)."""
        lexicon = {}
        if self.entity_lexicon:
            path = Path(self.entity_lexicon)
            lexicon = {"entity_lexicon": str(path), "entity_lexicon_sha256": _sha256(path)}
        chunker = "english-stopword-runs" if self.segmenter == "pretokenizer" else "jieba-np-tags"
        return {"version": UNITS_VERSION, "file": UNITS_FILE, "segmenter": self.segmenter,
                "phrase_chunker": chunker, "max_phrase_words": MAX_PHRASE_WORDS,
                "levels": self.levels, **lexicon}

    def matches(self, stored: dict[str, Any] | None) -> bool:
        """Whether a corpus whose ``meta.json`` records ``stored`` holds these units: the same
        settings and the same lexicon content (its hash), wherever the lexicon file lives."""
        if stored is None:
            return False
        mine = {k: v for k, v in self.describe().items() if k != "entity_lexicon"}
        return mine == {k: v for k, v in stored.items() if k != "entity_lexicon"}


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise DataError(f"cannot read the entity lexicon ({err.strerror})", path=path) from None


# ----------------------------------------------------------------------------- entity lexicon


def _is_word_char(ch: str) -> bool:
    """A letter or digit of a script written with spaces (so a match must not continue into it)."""
    return ch.isalnum() and not _is_cjk(ch)


def _is_cjk(ch: str) -> bool:
    return "CJK" in unicodedata.name(ch, "") or "\u3040" <= ch <= "\u30ff"


class Lexicon:
    """Entity strings, matched leftmost-longest without overlaps.

    A lexicon file has one entity per line, optionally followed by a tab and its type
    (``北京大学\\tORG``; the type is kept for counting only); blank lines and lines starting
    with ``#`` are skipped. Matching is exact (case included). An entity that starts or ends
    with a letter or digit of a spaced script must not be glued to another one ("Paris" is not
    found in "Parisian"); CJK entities match anywhere.

    >>> Lexicon(["北京", "北京大学", "Paris"]).find("他在北京大学读书，Parisian Paris")
    [(2, 6), (18, 23)]
    """

    def __init__(self, entities: Iterable[str], source: str | Path | None = None) -> None:
        self.entries = frozenset(e for e in entities if e)
        if not self.entries:
            raise DataError("the entity lexicon holds no entity", path=source)
        by_first: dict[str, set[int]] = {}
        for entry in self.entries:
            by_first.setdefault(entry[0], set()).add(len(entry))
        self._lengths = {ch: sorted(lengths, reverse=True) for ch, lengths in by_first.items()}

    @classmethod
    def read(cls, path: str | Path) -> Lexicon:
        """Read a lexicon file (see the class docstring); errors name the file and line."""
        path = Path(path)
        entities = []
        for number, line in enumerate(read_utf8(path, "the entity lexicon").split("\n"), start=1):
            line = line.rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            entity = line.split("\t", 1)[0].strip()
            if not entity:
                raise DataError("a lexicon line starts with a tab: no entity before the type",
                                path=path, line=number, value=line)
            entities.append(entity)
        return cls(entities, path)

    def find(self, text: str) -> list[tuple[int, int]]:
        """``[start, end)`` character spans of the entities in ``text``, left to right."""
        spans, i, n = [], 0, len(text)
        while i < n:
            for length in self._lengths.get(text[i], ()):
                end = i + length
                if end <= n and text[i:end] in self.entries and self._edges_ok(text, i, end):
                    spans.append((i, end))
                    i = end
                    break
            else:
                i += 1
        return spans

    @staticmethod
    def _edges_ok(text: str, start: int, end: int) -> bool:
        if start > 0 and _is_word_char(text[start]) and _is_word_char(text[start - 1]):
            return False
        return not (end < len(text) and _is_word_char(text[end - 1]) and _is_word_char(text[end]))


def write_lexicon(entities: Iterable[tuple[str, str]], path: str | Path) -> int:
    """Write ``(entity, type)`` pairs as a lexicon file (each entity once, the first type seen,
    in first-seen order); returns the number written. E.g. the entities of a tagging task's
    training split, so that entity masking never sees its test set::

        data = load_task("msra-ner")
        write_lexicon(tagged_entities(data["train"]), "msra-train-entities.txt")
    """
    seen: dict[str, str] = {}
    for entity, kind in entities:
        entity = entity.strip()
        if entity and "\t" not in entity and "\n" not in entity:
            seen.setdefault(entity, kind)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # `--out runs/zh/entities.txt` in a fresh folder
    with atomic_path(path) as tmp:
        tmp.write_text("".join(f"{e}\t{k}\n" for e, k in seen.items()), encoding="utf-8")
    return len(seen)


# ----------------------------------------------------------------------------- spans -> flags


def units_from_spans(starts: np.ndarray, ends: np.ndarray, spans: Sequence[tuple[int, int]],
                     n_chars: int) -> np.ndarray:
    """``(L,)`` bool: True where token ``t`` continues the span token ``t - 1`` is in.

    Token ``t`` (characters ``[starts[t], ends[t])``) continues a span when its first character
    and the last character of token ``t - 1`` lie in the same span; a span edge inside a token
    thus pulls that whole token into the span.

    >>> units_from_spans(np.array([0, 2, 4, 6]), np.array([2, 4, 6, 8]), [(1, 5)], 8).tolist()
    [False, True, True, False]
    """
    cont = np.zeros(len(starts), dtype=bool)
    if len(starts) < 2 or not spans:
        return cont
    owner = np.full(n_chars + 1, -1, dtype=np.int64)  # (n_chars + 1,) span index of each character
    for k, (a, b) in enumerate(spans):
        owner[a:b] = k
    first = owner[np.minimum(starts[1:], n_chars)]
    last = owner[np.clip(ends[:-1] - 1, 0, n_chars)]
    cont[1:] = (first >= 0) & (first == last)
    return cont


def english_phrases(words: Sequence[str]) -> list[tuple[int, int]]:
    """``[first, stop)`` word ranges of the English phrase chunks (see the module docstring).

    >>> english_phrases("the new york stock exchange said on monday that prices rose".split())
    [(1, 5), (9, 11)]
    """
    content = [w.isalnum() and w.lower() not in ENGLISH_STOPWORDS for w in words]
    return _chunk_runs(content)


def _chunk_runs(content: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal runs of True, cut into pieces of at most MAX_PHRASE_WORDS; pieces of 2+ kept."""
    runs, i = [], 0
    while i < len(content):
        if not content[i]:
            i += 1
            continue
        j = i
        while j < len(content) and content[j]:
            j += 1
        for a in range(i, j, MAX_PHRASE_WORDS):
            b = min(a + MAX_PHRASE_WORDS, j)
            if b - a >= 2:
                runs.append((a, b))
        i = j
    return runs


class UnitMarker:
    """Computes the ``units.bin`` flags of sentences; one per worker process (jieba loads once)."""

    def __init__(self, spec: UnitSpec, convert: Callable[[str], str] | None = None) -> None:
        """``convert``: the tokenizer's script conversion (``WordPieceTokenizer.script_converter``),
        applied to each sentence before segmenting and to the lexicon's entries, so that words and
        entities are found in the text the model reads; it keeps every character's position."""
        self.spec = spec
        self.convert = convert
        self.lexicon = Lexicon.read(spec.entity_lexicon) if spec.entity_lexicon else None
        if self.lexicon is not None and convert is not None:  # an entry converted alone may differ in context: keep both
            self.lexicon = Lexicon({*self.lexicon.entries, *map(convert, self.lexicon.entries)}, spec.entity_lexicon)

    @cached_property
    def _jieba(self) -> tuple[Any, dict[str, str]]:
        try:
            import jieba
            import jieba.posseg
        except ImportError:
            raise ConfigError("corpus.segmenter=jieba needs jieba: pip install 'muppets[chinese]'") from None
        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        return jieba, jieba.posseg.dt.word_tag_tab

    def flags(self, text: str, offsets: Sequence[tuple[int, int]], word_ids: Sequence[int | None]) -> np.ndarray:
        """``(L,)`` uint8 unit-start bits of one sentence's ``L`` tokens (offsets into ``text``)."""
        if not offsets:
            return np.zeros(0, dtype=np.uint8)
        if self.convert is not None:
            text = self.convert(text)
        starts = np.array([s for s, _ in offsets], dtype=np.int64)
        ends = np.maximum(np.array([e for _, e in offsets], dtype=np.int64), starts + 1)
        ids = np.array([-1 if w is None else w for w in word_ids], dtype=np.int64)
        word = np.ones(len(ids), dtype=bool)
        word[1:] = ids[1:] != ids[:-1]  # starts a pre-tokenizer word
        words, phrases = self._words_and_phrases(text, starts, ends, ids)
        if words is not None:
            word &= ~units_from_spans(starts, ends, words, len(text))
        phrase = word & ~units_from_spans(starts, ends, phrases, len(text))
        out = word.astype(np.uint8) * UNIT_BITS["whole_word"] | phrase.astype(np.uint8) * UNIT_BITS["phrase"]
        if self.lexicon is not None:
            entity = word & ~units_from_spans(starts, ends, self.lexicon.find(text), len(text))
            out |= entity.astype(np.uint8) * UNIT_BITS["entity"]
        return out

    def _words_and_phrases(self, text: str, starts: np.ndarray, ends: np.ndarray,
                           ids: np.ndarray) -> tuple[list[tuple[int, int]] | None, list[tuple[int, int]]]:
        """The segmenter's word spans (None: the pre-tokenizer's own) and the phrase spans."""
        if self.spec.segmenter == "pretokenizer":
            firsts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))  # (W,) first token of each word
            lasts = np.append(firsts[1:], len(ids)) - 1
            spans = list(zip(starts[firsts].tolist(), ends[lasts].tolist()))
            chunks = english_phrases([text[a:b] for a, b in spans])
            return None, [(spans[a][0], spans[b - 1][1]) for a, b in chunks]
        jieba, tags = self._jieba
        spans, pos = [], 0
        for piece in jieba.lcut(text):
            if piece.strip():
                spans.append((pos, pos + len(piece), piece))
            pos += len(piece)
        content = [tags.get(w, "n" if len(w) > 1 and all(map(_is_cjk, w)) else "x") in PHRASE_TAGS
                   for _, _, w in spans]
        chunks = _chunk_runs(content)
        return [(a, b) for a, b, _ in spans], [(spans[a][0], spans[b - 1][1]) for a, b in chunks]


def tagged_entities(examples: Iterable[Any]) -> Iterable[tuple[str, str]]:
    """``(entity text, type)`` of every BIO entity in tagging examples (``.tokens``, ``.tags``),
    for :func:`write_lexicon`. Tokens are joined without a space between two CJK characters
    (MSRA's one-character tokens give ``北京大学``), with one elsewhere (``New York``)."""
    from muppets.metrics import entity_spans

    for ex in examples:
        for span in entity_spans(ex.tags or []):
            tokens = ex.tokens[span.start:span.end]
            text = tokens[0]
            for prev, tok in zip(tokens, tokens[1:]):
                glue = "" if _is_cjk(prev[-1]) and _is_cjk(tok[0]) else " "
                text += glue + tok
            yield text, span.type


_DOC_TITLE = re.compile(r'<doc [^>]*title="([^"]*)"')
_DISAMBIGUATION = re.compile(r"\s*[(（][^()（）]*[)）]$")


def wiki_titles(paths: Iterable[str | Path]) -> Iterable[tuple[str, str]]:
    """``(title, "TITLE")`` of every WikiExtractor article (``<doc … title="…">``) in ``paths``,
    a disambiguation suffix such as ``(电视剧)`` removed: an entity lexicon taken from the corpus
    itself, for :func:`write_lexicon` (one-character titles are left out)."""
    for path in paths:
        for match in _DOC_TITLE.finditer(read_utf8(path, "WikiExtractor file")):
            title = _DISAMBIGUATION.sub("", html.unescape(match.group(1))).strip()
            if len(title) > 1:
                yield title, "TITLE"
