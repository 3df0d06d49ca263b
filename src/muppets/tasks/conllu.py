"""CoNLL-U files (Universal Dependencies): words, tags and basic dependency trees.

A sentence is a block of lines with 10 tab-separated columns ``ID FORM LEMMA UPOS XPOS FEATS
HEAD DEPREL DEPS MISC``, ``#`` comment lines, and a blank line after it. Read as the UD
guidelines say (data README §15 quirks):

* a multiword-token range line (``19-20  don't``) is skipped: its words ``do`` and ``n't``
  follow on their own lines, and they are what the tree is built on;
* an empty node (decimal id ``8.1``) belongs to the enhanced graph only and is skipped;
* ``HEAD`` is the 1-based id of the head word, 0 for the root; ``heads`` below stores it as
  is, so ``heads[i] - 1`` is the head's index in ``words`` (-1 = root).

Every word id must follow the previous one (1, 2, …), every head must name a word of the
sentence, and there must be exactly one root; otherwise :class:`~muppets.errors.DataError`
names the file, line and value (``errors="skip"`` drops the sentence and counts it).

>>> s = parse_conllu_text("# sent_id = x\\n1\\tHi\\thi\\tINTJ\\tUH\\t_\\t0\\troot\\t_\\t_\\n"
...                       "2\\t!\\t!\\tPUNCT\\t.\\t_\\t1\\tpunct\\t_\\t_\\n")
>>> s[0].words, s[0].heads, s[0].deprels, s[0].id
(['Hi', '!'], [0, 1], ['root', 'punct'], 'x')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from muppets.errors import DataError
from muppets.tasks.source import Line, Problems, iter_lines, short

__all__ = ["UDSentence", "read_conllu", "parse_conllu_text", "load_ud", "UD_SPLITS"]

UD_SPLITS = ("train", "dev", "test")  # file name parts: <treebank>-ud-<split>.conllu
_COLUMNS = 10


@dataclass
class UDSentence:
    """One sentence's syntactic words with their annotation (one entry per word)."""

    id: str  # the ``# sent_id`` comment, else "file:line"
    words: list[str]  # FORM
    upos: list[str]  # universal part of speech
    xpos: list[str]  # language-specific tag (PTB for English EWT; "_" when absent)
    heads: list[int]  # 1-based id of each word's head, 0 = root
    deprels: list[str]  # basic relation, with its subtype (``nmod:poss``)
    source: str  # "file:line" of the first word

    def head_indices(self) -> list[int]:
        """0-based head index per word, -1 for the root."""
        return [h - 1 for h in self.heads]


@dataclass
class _Block:
    """Lines gathered since the last blank line."""

    words: list[list[str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    sent_id: str = ""
    first_line: int = 0


def _word_fields(path: Path, line: Line) -> list[str] | None:
    """The 10 cells of a word line, or None for a range line / empty node."""
    cells = line.text.split("\t")
    if len(cells) != _COLUMNS:
        raise DataError(f"expected {_COLUMNS} tab-separated columns, found {len(cells)}", path=path,
                        line=line.number, value=short(line.text))
    word_id = cells[0]
    if "-" in word_id or "." in word_id:
        return None
    return cells


def _sentence(path: Path, block: _Block) -> UDSentence:
    """Check ids, heads and the root of a block; build the sentence."""
    heads = []
    for position, (cells, number) in enumerate(zip(block.words, block.lines), start=1):
        if cells[0] != str(position):
            raise DataError(f"word id should be {position}", path=path, line=number, value=cells[0])
        if not cells[6].isdigit() or int(cells[6]) > len(block.words):
            raise DataError(f"HEAD must be 0..{len(block.words)} (a word of this sentence)", path=path,
                            line=number, value=cells[6])
        if int(cells[6]) == position:
            raise DataError("a word cannot be its own head", path=path, line=number, value=cells[6])
        heads.append(int(cells[6]))
    if heads.count(0) != 1:
        raise DataError(f"a sentence needs exactly one root (HEAD 0), found {heads.count(0)}", path=path,
                        line=block.first_line)
    column = list(zip(*block.words))
    return UDSentence(block.sent_id or f"{path.name}:{block.first_line}", list(column[1]), list(column[3]),
                      list(column[4]), heads, list(column[7]), f"{path}:{block.first_line}")


def _parse(path: Path, lines: Iterable[Line], problems: Problems) -> list[UDSentence]:
    sentences: list[UDSentence] = []
    block, bad = _Block(), None

    def flush() -> None:
        nonlocal block, bad
        if block.words and bad is None:
            try:
                sentences.append(_sentence(path, block))
            except DataError as err:
                problems.report(err)
        elif bad is not None:
            problems.report(bad)
        block, bad = _Block(), None

    for line in lines:
        text = line.text
        if not text.strip():
            flush()
        elif text.startswith("#"):
            if text.startswith("# sent_id") and "=" in text:
                block.sent_id = text.split("=", 1)[1].strip()
        elif bad is None:
            try:
                if line.error is not None:
                    raise line.error
                cells = _word_fields(path, line)
            except DataError as err:
                bad = err
                continue
            if cells is not None:
                block.first_line = block.first_line or line.number
                block.words.append(cells)
                block.lines.append(line.number)
    flush()
    return sentences


def read_conllu(path: str | Path, errors: str = "strict") -> list[UDSentence]:
    """Every sentence of a CoNLL-U file (see the module docstring)."""
    path = Path(path)
    problems = Problems(errors)
    sentences = _parse(path, iter_lines(path, problems), problems)
    problems.summarize(str(path))
    if not sentences:
        raise DataError("no sentences could be read", path=path)
    return sentences


def parse_conllu_text(text: str, name: str = "<text>") -> list[UDSentence]:
    """:func:`read_conllu` of a string (tests, examples)."""
    lines = [Line(i, t) for i, t in enumerate(text.split("\n"), start=1)]
    return _parse(Path(name), lines, Problems("strict"))


def load_ud(directory: str | Path, splits: Sequence[str] = UD_SPLITS,
            errors: str = "strict") -> dict[str, list[UDSentence]]:
    """The splits of a UD treebank folder (``*-ud-<split>.conllu``), e.g. English EWT."""
    directory = Path(directory)
    out = {}
    for split in splits:
        found = sorted(directory.glob(f"*-ud-{split}.conllu"))
        if len(found) != 1:
            raise DataError(f"expected one *-ud-{split}.conllu file, found {len(found)}", path=directory)
        out[split] = read_conllu(found[0], errors)
    return out
