"""CoNLL-style token tagging files, and the CoNLL-2003 English NER task (data README §3).

A file has one token per line with whitespace-separated columns (CoNLL-2003: ``token POS chunk
NER``), a blank line between sentences, and ``-DOCSTART-`` lines between documents. In the
staged copy the first ``-DOCSTART-`` line of each file was moved to the *end* (no trailing
newline), so ``-DOCSTART-`` lines are skipped wherever they appear.

Tags come in as IOB1 (CoNLL-2003's original scheme: ``I-`` everywhere, ``B-`` only between two
touching entities of one type) or BIO, and always go out as BIO via :func:`iob1_to_bio`, which
leaves valid BIO unchanged. Other schemes (``E-``/``S-``…) are rejected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from muppets.errors import ConfigError, DataError
from muppets.tasks.source import Line, Problems, iter_lines, short
from muppets.tasks.spec import TagExample, TaskData, TaskSpec

__all__ = ["CONLL2003_TYPES", "iob1_to_bio", "bio_labels", "check_tag", "read_conll_file", "read_conll",
           "load_conll2003", "load_conll2003_pos", "load_conll2003_chunk"]

CONLL2003_TYPES = ("PER", "LOC", "ORG", "MISC")
DOCSTART = "-DOCSTART-"
_TAG = re.compile(r"^(?:O|[BI]-(\S+))$")


def iob1_to_bio(tags: Sequence[str]) -> list[str]:
    """Convert IOB1 (or BIO) tags to BIO: an ``I-X`` that starts an entity becomes ``B-X``.

    An entity starts where the previous tag is ``O`` or of another type; ``B-X`` stays ``B-X``.

    >>> iob1_to_bio(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    ['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC', 'B-ORG']
    """
    bio, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        bio.append(tag)
        previous = tag
    return bio


def bio_labels(types: Sequence[str]) -> list[str]:
    """The BIO label set: ``O``, then ``B-X``, ``I-X`` for each type, in the order given."""
    return ["O"] + [f"{prefix}-{t}" for t in types for prefix in ("B", "I")]


def check_tag(tag: str, types: Sequence[str] | None, path: str | Path, line: int | None) -> str:
    """``tag`` if it is ``O``, ``B-<type>`` or ``I-<type>`` (of ``types`` when given), else a
    DataError naming ``path:line`` and the tag."""
    match = _TAG.match(tag)
    if match is None:
        raise DataError("unknown tag (expected O, B-<type> or I-<type>)", path=path, line=line, value=tag)
    if types is not None and match.group(1) not in (None, *types):
        raise DataError(f"unknown entity type (expected one of {list(types)})", path=path, line=line, value=tag)
    return tag


@dataclass
class _Sentence:
    """Tokens gathered since the last blank line, and the first problem met (skip mode)."""

    tokens: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    first_line: int = 0
    problem: DataError | None = None


@dataclass
class _Reader:
    """Parses one file; ``width`` is the column count (the first token line's if None)."""

    path: Path
    problems: Problems
    token_col: int
    tag_col: int | None
    types: Sequence[str] | None
    width: int | None = None
    plain: bool = False  # tags are plain labels (part of speech), not BIO spans: taken as they are
    sentences: list[TagExample] = field(default_factory=list)
    current: _Sentence = field(default_factory=_Sentence)

    def feed(self, line: Line) -> None:
        fields = line.text.split()
        if not fields or fields[0] == DOCSTART:
            self.flush()
            return
        if not self.current.tokens and self.current.problem is None:
            self.current.first_line = line.number
        try:
            self._add(line, fields)
        except DataError as err:
            if self.problems.strict:
                raise
            self.current.problem = self.current.problem or err

    def _add(self, line: Line, fields: list[str]) -> None:
        if line.error is not None:
            raise line.error
        if self.width is None:
            asked = [c for c in (self.token_col, self.tag_col) if c is not None]
            if any(not -len(fields) <= c < len(fields) for c in asked):
                raise DataError(f"row has {len(fields)} columns, fewer than the columns asked for "
                                f"(token_col={self.token_col}, tag_col={self.tag_col})",
                                path=self.path, line=line.number, value=short(line.text))
            self.width = len(fields)
        if len(fields) != self.width:
            raise DataError(f"expected {self.width} columns, found {len(fields)}",
                            path=self.path, line=line.number, value=short(line.text))
        self.current.tokens.append(fields[self.token_col])
        if self.tag_col is not None:
            self.current.tags.append(self._check_tag(fields[self.tag_col], line.number))

    def _check_tag(self, tag: str, number: int) -> str:
        return tag if self.plain else check_tag(tag, self.types, self.path, number)

    def flush(self) -> None:
        sentence, self.current = self.current, _Sentence()
        if sentence.problem is not None:
            self.problems.report(sentence.problem)
        elif sentence.tokens:
            tags = None if self.tag_col is None else sentence.tags if self.plain else iob1_to_bio(sentence.tags)
            ident = f"{self.path.stem}-{len(self.sentences) + 1}"
            self.sentences.append(TagExample(ident, sentence.tokens, tags,
                                             f"{self.path}:{sentence.first_line}"))


def read_conll_file(path: str | Path, problems: Problems, *, token_col: int = 0,
                    tag_col: int | None = -1, types: Sequence[str] | None = None,
                    width: int | None = None, plain: bool = False) -> list[TagExample]:
    """Read one CoNLL file into sentences with BIO tags (``tag_col=None``: no tags; ``plain``:
    the column's tags as they are, e.g. part of speech)."""
    reader = _Reader(Path(path), problems, token_col, tag_col, types, width, plain=plain)
    for line in iter_lines(path, problems):
        reader.feed(line)
    reader.flush()
    if not reader.sentences:
        raise DataError("no sentences could be read", path=path)
    return reader.sentences


def _types_seen(splits: Mapping[str, list[TagExample]]) -> list[str]:
    seen = {tag[2:] for exs in splits.values() for ex in exs for tag in ex.tags or () if tag != "O"}
    return sorted(seen)


def read_conll(path: str | Path | Mapping[str, str | Path], errors: str = "strict", *,
               name: str | None = None, token_col: int = 0, tag_col: int | None = -1,
               types: Sequence[str] | None = None) -> TaskData:
    """Read your own tagging task: one file (split ``"train"``) or ``{split: file}``.

    ``types`` fixes the entity types (others are errors); by default the types seen are used.
    The metric is entity-level F1 over BIO spans.
    """
    files = dict(path) if isinstance(path, Mapping) else {"train": path}
    problems = Problems(errors)
    splits = {split: read_conll_file(file, problems, token_col=token_col, tag_col=tag_col,
                                     types=types) for split, file in files.items()}
    found = list(types) if types is not None else _types_seen(splits)
    if not found:
        raise ConfigError("no entity tags found; pass types=[...] (e.g. for unlabelled files)")
    task = name or Path(next(iter(files.values()))).stem
    spec = TaskSpec(task, "tag", bio_labels(found), "entity_f1", ("tokens",))
    problems.summarize(task)
    return TaskData(spec, splits, skipped=problems.skipped)  # type: ignore[arg-type]


_CONLL2003_FILES = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}


def load_conll2003_pos(root: Path, problems: Problems) -> TaskData:
    """CoNLL-2003 English part of speech (column 2, Penn Treebank tags): the same sentences and
    splits as ``conll2003``; metric: accuracy over tokens. The label set is train's tags (a
    tag seen only in dev or test is an error)."""
    splits = {split: read_conll_file(root / "conll2003" / name, problems, tag_col=1, width=4, plain=True)
              for split, name in _CONLL2003_FILES.items()}
    labels = sorted({t for ex in splits["train"] for t in ex.tags})
    _check_known(splits, labels, "conll2003-pos")
    spec = TaskSpec("conll2003-pos", "tag", labels, "token_accuracy", ("tokens",))
    return TaskData(spec, splits, notes="CoNLL-2003 English POS column; dev = eng.testa, "  # type: ignore[arg-type]
                    "test = eng.testb.")


def load_conll2003_chunk(root: Path, problems: Problems) -> TaskData:
    """CoNLL-2003 English chunks (column 3, IOB1 converted to BIO): the same sentences and
    splits as ``conll2003``; metric: chunk F1 (entity-level F1 over the chunk spans)."""
    splits = {split: read_conll_file(root / "conll2003" / name, problems, tag_col=2, width=4)
              for split, name in _CONLL2003_FILES.items()}
    types = sorted({t[2:] for ex in splits["train"] for t in ex.tags if t != "O"})
    _check_known(splits, bio_labels(types), "conll2003-chunk")
    spec = TaskSpec("conll2003-chunk", "tag", bio_labels(types), "entity_f1", ("tokens",))
    return TaskData(spec, splits, notes="CoNLL-2003 English chunk column, IOB1 -> BIO; "  # type: ignore[arg-type]
                    "dev = eng.testa, test = eng.testb.")


def _check_known(splits: Mapping[str, list[TagExample]], labels: Sequence[str], task: str) -> None:
    known = set(labels)
    for split, examples in splits.items():
        for ex in examples:
            unknown = [t for t in ex.tags or () if t not in known]
            if unknown:
                raise DataError(f"{task}: tag not in the training set's tags", path=ex.source,
                                value=unknown[0])


def load_conll2003(root: Path, problems: Problems) -> TaskData:
    """CoNLL-2003 English NER: train 14,041 / dev (testa) 3,250 / test (testb) 3,453 sentences."""
    folder = root / "conll2003"
    files = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}
    splits = {split: read_conll_file(folder / name, problems, types=CONLL2003_TYPES, width=4)
              for split, name in files.items()}
    spec = TaskSpec("conll2003", "tag", bio_labels(CONLL2003_TYPES), "entity_f1", ("tokens",))
    notes = ("CoNLL-2003 English: IOB1 tags converted to BIO; -DOCSTART- lines skipped; "
             "dev = eng.testa, test = eng.testb.")
    return TaskData(spec, splits, notes=notes)  # type: ignore[arg-type]
