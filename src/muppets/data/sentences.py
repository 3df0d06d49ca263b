"""A fast rule-based sentence splitter for English prose (plus CJK full stops).

The rule, in one paragraph: a sentence ends at ``.``, ``!``, ``?`` or an ellipsis (``...`` /
``…``), optionally followed by closing quotes or brackets, *when whitespace follows and the
next word does not start with a lowercase letter* — so ``"Stop!" he said.`` stays one
sentence and ``3.14`` never splits (no whitespace). A period does not end a sentence after

* a title that always precedes a name (``Mr.``, ``Mrs.``, ``Dr.``, ``St.``, ``Prof.`` …),
* a single capital letter, i.e. an initial (``J. R. R. Tolkien``),
* a dotted abbreviation (``e.g.``, ``i.e.``, ``U.S.``, ``a.m.``),
* an abbreviation that precedes a number (``No. 5``, ``Fig. 3``, ``Jan. 12``) when a digit follows.

CJK text splits after ``。！？`` (and any closing brackets) with or without whitespace.
The splitter is a heuristic, not a parser: ``etc.`` followed by a capitalised name splits,
and a dotted acronym that really ends a sentence (``... in the U.S. Then``) does not.

>>> split_sentences('Mr. Smith paid $3.14 for it. "Stop!" he said. Then he left...')
['Mr. Smith paid $3.14 for it.', '"Stop!" he said.', 'Then he left...']
"""

from __future__ import annotations

import re

__all__ = ["split_sentences"]

# Terminal punctuation + closing quotes/brackets, followed by whitespace (Latin) or not (CJK).
_LATIN_END = r"(?:[.!?]+|…)[.!?…]*[\"'”’)\]»]*(?=\s)"
_CJK_END = r"[。！？]+[」』”’）)\]]*"
_BOUNDARY = re.compile(f"{_LATIN_END}|{_CJK_END}")
_LAST_WORD = re.compile(r"\S*$")
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")
_OPENERS = "\"'“‘([«"

# Titles that precede a name: a period after them never ends a sentence.
_TITLES = frozenset(
    "Mr Mrs Ms Mssrs Messrs Mme Mlle Dr Prof St Rev Revd Hon Gen Col Maj Capt Cmdr Lt Sgt Cpl "
    "Gov Sen Rep Pres Supt Fr Sra Srta Mt Ft".split()
)
# Abbreviations that precede a number: no split when a digit follows (``No. 5``, ``Jan. 12``).
_BEFORE_NUMBER = frozenset(
    "No no Nos nos Vol vol Vols vols pp p Fig fig Figs figs Art art Ch ch Sec sec Sect Eq eq "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec ca c approx".split()
)


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph into sentences (whitespace-stripped, never empty).

    Args:
        paragraph: one paragraph of text; line breaks inside it are treated as spaces.

    Returns:
        the sentences in order; their concatenation equals ``paragraph`` up to whitespace.
    """
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(paragraph):
        end = match.end()
        if _is_boundary(paragraph, match.start(), end):
            _append(sentences, paragraph[start:end])
            start = end
    _append(sentences, paragraph[start:])
    return sentences


def _append(sentences: list[str], text: str) -> None:
    text = text.strip()
    if text:
        sentences.append(text)


def _is_boundary(text: str, start: int, end: int) -> bool:
    """Decide whether the terminal punctuation ``text[start:end]`` ends a sentence."""
    if text[start] in "。！？":
        return True
    following = _next_char(text, end)
    if following is None or following.islower():
        return False
    if text[start] == "." and text[start:end].count(".") == 1:
        word = _LAST_WORD.search(text, max(0, start - 40), start).group().lstrip(_OPENERS)
        return not _is_abbreviation(word, following)
    return True


def _next_char(text: str, pos: int) -> str | None:
    """The first character after ``pos`` that is neither whitespace nor an opening quote."""
    for char in text[pos:pos + 40]:
        if not char.isspace() and char not in _OPENERS:
            return char
    return None


def _is_abbreviation(word: str, following: str) -> bool:
    """True if ``word`` followed by ``.`` is an abbreviation rather than a sentence end."""
    if word in _TITLES or _DOTTED.match(word):
        return True
    if len(word) == 1 and word.isupper():
        return True  # an initial: "J. R. R. Tolkien"
    return following.isdigit() and word in _BEFORE_NUMBER
