"""Per-language corpus quirks: rejoining wrapped lines into paragraphs, and zhwiki leftovers.

The readers of :mod:`muppets.data.readers` call these on a file's ``(line_number, text)``
lines (line ends already removed); each function returns the paragraphs of one document.
The shared data README (§13, §14) describes the quirks; one function per layout:

``novel-wrapped`` (:func:`wrapped_paragraphs`, the German ELTeC novels)
    Lines are hard-wrapped at <= 85 characters and paragraph ends are **not marked** (no blank
    lines). All lines are joined with a space; a chapter heading on its own line ("Drittes
    Kapitel", "II.", "12") ends the running paragraph: a worded heading is kept as its own
    paragraph, a bare number or Roman numeral is dropped.
``novel-lines`` (:func:`line_paragraphs`, the French CLiGS novels)
    One paragraph per line, most lines ending in a space, a few whitespace-only lines at the
    top; no-break spaces (U+00A0, U+202F) before ``! ; ? :`` and inside ``« »`` become spaces.
``novel-tei`` (:func:`tei_paragraphs`, the Spanish CLiGS novels)
    Line breaks come from TEI markup: inline markup (italics, names) was turned into a line
    break (``…se llamaba\\ndon Lope de Sosa\\n, nombre…``), and paragraphs are mostly separated
    by TAB-only lines, some of which fall inside a paragraph. Plain line breaks are always
    joined (with no space before a line that opens with ``, . ; : ) ! ?``); a whitespace-only
    line ends the paragraph only when the text so far ends a sentence and the next line does
    not continue it (lowercase or punctuation first).

:func:`clean_zhwiki` removes what WikiExtractor left in the Chinese Wikipedia shards: variant
markers ``-{zh-hans:A; zh-hant:B;}-`` (the first variant is kept), HTML-escaped tags and
references (``&lt;ref …&gt;…&lt;/ref&gt;``), unconverted ``[[link|text]]`` links (the text is
kept; unbalanced ``[[``, ``[[Category:…]]`` and broken ``<ref …/`` go) and the empty brackets removed templates leave (``（）``). ``formula_N`` placeholders
and section headings stay, as in the English WikiExtractor reader.

>>> clean_zhwiki("他是-{zh-hans:露脐上衣; zh-hant:露腹短上衣;}-的设计者（）。[[北京市|北京]]人&lt;ref name=\\"a\\"&gt;x&lt;/ref&gt;。")
'他是露脐上衣的设计者。北京人。'
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator

__all__ = ["wrapped_paragraphs", "line_paragraphs", "tei_paragraphs", "clean_zhwiki", "is_heading"]

Lines = Iterable[tuple[int, str]]

# A chapter heading alone on a line: "Drittes Kapitel", "Erstes Buch.", "II.", "12", "Kapitel 3".
_NUMBERED = re.compile(r"^(?:[IVXLCDM]+|\d+)\.?$")
_WORDED = re.compile(r"^(?:\w+(?:tes|stes|te|ste) (?:Kapitel|Buch|Theil|Teil|Abschnitt)|"
                     r"(?:Kapitel|Buch|Theil|Teil) (?:[IVXLCDM]+|\d+))\.?$")
_NBSP = re.compile(r"[\u00a0\u202f\u2007]")
_SPACES = re.compile(r"[ \t]{2,}")
_CONTINUES = re.compile(r"^[,.;:)\]!?»…]")  # a line that continues the previous one without a space
_ENDS_SENTENCE = re.compile(r"[.!?…:»\"”'’)\]—]$")


def is_heading(line: str) -> bool:
    """Whether a stripped line is a chapter heading (numbered or worded), not running text.

    >>> is_heading("Drittes Kapitel"), is_heading("XII."), is_heading("Kapitel 3"), is_heading("Er kam.")
    (True, True, True, False)
    """
    return bool(_NUMBERED.match(line) or _WORDED.match(line))


def wrapped_paragraphs(lines: Lines) -> list[str]:
    """Hard-wrapped text without paragraph marks: joined with spaces, cut at headings."""
    paragraphs: list[str] = []
    running: list[str] = []

    def close() -> None:
        if running:
            paragraphs.append(" ".join(running))
            running.clear()

    for _, line in lines:
        text = _NBSP.sub(" ", line).strip()
        if not text:
            continue
        if is_heading(text):
            close()
            if not _NUMBERED.match(text):
                paragraphs.append(text)
        else:
            running.append(text)
    close()
    return paragraphs


def line_paragraphs(lines: Lines) -> list[str]:
    """One paragraph per non-blank line; no-break spaces mapped to spaces, runs collapsed."""
    out = []
    for _, line in lines:
        text = _SPACES.sub(" ", _NBSP.sub(" ", line)).strip()
        if text:
            out.append(text)
    return out


def tei_paragraphs(lines: Lines) -> list[str]:
    """Markup-broken lines rejoined; whitespace-only lines end a paragraph only at a sentence end."""
    paragraphs: list[str] = []
    running = ""
    gap = False  # a whitespace-only line came since the last text line
    for _, line in lines:
        text = _SPACES.sub(" ", _NBSP.sub(" ", line)).strip()
        if not text:
            gap = True
            continue
        if running and gap and _ENDS_SENTENCE.search(running) and not _continues(text):
            paragraphs.append(running)
            running = ""
        running = _join(running, text)
        gap = False
    if running:
        paragraphs.append(running)
    return paragraphs


def _continues(text: str) -> bool:
    return bool(_CONTINUES.match(text)) or text[0].islower()


def _join(left: str, right: str) -> str:
    if not left:
        return right
    return left + right if _CONTINUES.match(right) else f"{left} {right}"


# ----------------------------------------------------------------------------- zhwiki

_VARIANT = re.compile(r"-\{(.*?)\}-", re.S)
_VARIANT_ITEM = re.compile(r"^\s*[a-zA-Z-]+\s*:\s*(.*?)\s*;?\s*$")
_REF = re.compile(r"<ref\b[^>]*/>|<ref\b[^>]*>.*?</ref>", re.S | re.I)
_TAG = re.compile(r"</?[a-zA-Z][^<>]{0,200}>")
_LINK = re.compile(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]")
_STRAY = re.compile(r"<ref\b[^<>。]*|\[\[(?:Category|分类|分類):[^\]]*\]?\]?|\[\[|\]\]")  # broken leftovers
_EMPTY_BRACKETS = re.compile(r"[（(][\s，,；;、：:]*[）)]")
_PUNCT_RUN = re.compile(r"([，、；])\s*([，、；。])")


def _variant(match: re.Match) -> str:
    inner = match.group(1)
    if "|" in inner and ":" not in inner.split("|", 1)[0]:  # -{H|…}- / -{A|…}- conversion rules
        inner = inner.split("|", 1)[1]
    items = [item for item in inner.split(";") if item.strip()]
    if items and ":" in items[0]:
        found = _VARIANT_ITEM.match(items[0])
        return found.group(1) if found else items[0].split(":", 1)[1].strip()
    return inner.strip()


def clean_zhwiki(text: str) -> str:
    """One zhwiki paragraph without variant markers, escaped tags, links and empty brackets."""
    text = _VARIANT.sub(_variant, text)
    text = html.unescape(text)
    text = _TAG.sub("", _REF.sub("", text))
    text = _STRAY.sub("", _LINK.sub(r"\1", text))
    text = _EMPTY_BRACKETS.sub("", text)
    return _PUNCT_RUN.sub(r"\2", text).strip()


def zhwiki_paragraphs(paragraphs: Iterator[str]) -> list[str]:
    """Cleaned paragraphs (:func:`clean_zhwiki`), the ones left empty dropped."""
    return [p for p in map(clean_zhwiki, paragraphs) if p]
