"""Chinese tasks: ChnSentiCorp, MSRA NER and CMRC 2018 (data README §6).

=============  =============================================  ========  ==============  ==========
task           files → splits                                 kind      labels          metric
=============  =============================================  ========  ==============  ==========
chnsenticorp   chnsenticorp/{train,dev,test}.tsv               classify  0, 1=positive   accuracy
msra-ner       msra_ner/dev.tsv → train + dev (held out),      tag       BIO PER/LOC/ORG entity F1
               msra_ner/test.tsv → test
cmrc2018       cmrc2018/dev.json → train/dev/test by article   span      —               cmrc2018
=============  =============================================  ========  ==============  ==========

Chinese is read by character, as BERT does (its basic tokenizer puts spaces around every CJK
ideograph): with the ``bert-base-chinese`` vocabulary (``data:vocab/bert-base-chinese/vocab.txt``,
lower-cased like the published model) every MSRA character is one WordPiece token, so one tag per
character maps one to one onto the model's tokens.

* **ChnSentiCorp**: header ``label\\ttext_a``; reviews of hotels, books and laptops, some in
  Traditional characters; quotes are plain characters.
* **MSRA NER**: header ``text_a\\tlabel``; characters and their BIO tags separated by single
  spaces. The staged ``train.tsv`` is missing, so the staged ``dev.tsv`` (2,318 sentences) is
  the training set: :data:`MSRA_DEV_FRACTION` of it is held out as ``dev`` for model selection
  by :func:`~muppets.tasks.splits.hash_split` on the sentence id (``dev-<line>``), and
  ``test.tsv`` (4,636) is ``test``, never used for selection.
* **CMRC 2018**: only its dev set (848 articles, 3,219 questions) is staged, in SQuAD format; it
  is split **by article** (no context shared between splits) with ``hash_split`` on the article
  id (``DEV_<n>``): :data:`CMRC_HELD_OUT` of the articles are held out, two thirds of them as
  ``test`` and one third as ``dev``. ``answer_start`` is a character offset. 193 answers have
  ``answer_start = -1`` and a text that is not in the context (annotators wrote a paraphrase):
  they are dropped (a question left with none would be dropped and counted in
  :attr:`TaskData.dropped`; every question keeps one). 7 answers start 1–2 characters off and
  are moved to the nearest occurrence of their text, and 13 answers lose spaces at either end
  (no token holds a space). Every answer kept satisfies ``context[start:start+len(text)] == text``,
  and with the ``bert-base-chinese`` vocabulary the tokens that cover it give back exactly its
  characters, but for 3 answers that start inside a number BERT keeps as one token ("4个" read
  in "34个", "30米" in "4530米": annotation slips; the answer's tokens hold 1–2 more digits).
  Scores use CMRC 2018's own metric (:func:`muppets.metrics.cmrc_scores`: character-level F1),
  not SQuAD's whitespace tokens, which would make a Chinese F1 an exact match.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from muppets.errors import DataError
from muppets.tasks.conll import bio_labels
from muppets.tasks.source import Problems, iter_records, short
from muppets.tasks.spec import SENTIMENT_NAMES, SpanExample, TagExample, TaskData, TaskSpec
from muppets.tasks.splits import hash_split
from muppets.tasks.squad import read_squad_articles
from muppets.tasks.table import Columns, LabelRule, read_text_file

__all__ = ["MSRA_TYPES", "MSRA_DEV_FRACTION", "CMRC_HELD_OUT", "load_chnsenticorp", "load_msra_ner",
           "read_msra", "load_cmrc2018", "CmrcAnswers"]

log = logging.getLogger(__name__)

MSRA_TYPES = ("PER", "LOC", "ORG")
MSRA_DEV_FRACTION = 0.1  # share of the staged MSRA dev.tsv (our training data) held out as dev
CMRC_HELD_OUT = 0.3  # share of the CMRC 2018 articles held out: 2/3 of it test, 1/3 dev


def load_chnsenticorp(root: Path, problems: Problems) -> TaskData:
    """ChnSentiCorp: 9,600 train / 1,200 dev / 1,200 test reviews; label 1 = positive."""
    folder = root / "chinese" / "chnsenticorp"
    cols, rule = Columns(text="text_a", label="label"), LabelRule("classify", ["0", "1"])
    splits = {s: read_text_file(folder / f"{s}.tsv", "tsv", cols, rule, problems)
              for s in ("train", "dev", "test")}
    spec = TaskSpec("chnsenticorp", "classify", ["0", "1"], "accuracy", ("text_a",), SENTIMENT_NAMES)
    return TaskData(spec, splits, notes="ChnSentiCorp (UER-py copy): label 1 = positive; "  # type: ignore[arg-type]
                    "official train/dev/test files.")


def read_msra(path: str | Path, problems: Problems) -> list[TagExample]:
    """One MSRA-format file (header ``text_a\\tlabel``): a sentence per row, its characters and
    their BIO tags each separated by one space, as many tags as characters."""
    path = Path(path)
    records = iter_records(path, "tsv", problems)
    header = next(records, None)
    if header is None or [c.strip() for c in header.cells] != ["text_a", "label"]:
        raise DataError("expected the header 'text_a<TAB>label'", path=path, line=1,
                        value=None if header is None else short("\t".join(header.cells)))
    known = set(bio_labels(MSRA_TYPES))
    examples = []
    for record in records:
        try:
            examples.append(_msra_row(record.cells, record.line, record.error, path, known))
        except DataError as err:
            problems.report(err)
    if not examples:
        raise DataError("no sentences could be read", path=path)
    return examples


def _msra_row(cells: list[str], line: int, error: DataError | None, path: Path, known: set[str]) -> TagExample:
    if error is not None:
        raise error
    if len(cells) != 2:
        raise DataError(f"expected 2 columns, found {len(cells)}", path=path, line=line,
                        value=short("\t".join(cells)))
    chars, tags = cells[0].split(" "), cells[1].split(" ")
    if "" in chars:
        raise DataError("an empty character (two spaces in a row, or one at an end)", path=path, line=line,
                        value=short(cells[0]))
    if len(chars) != len(tags):
        raise DataError(f"{len(chars)} characters but {len(tags)} tags", path=path, line=line,
                        value=short(cells[1]))
    unknown = [t for t in tags if t not in known]
    if unknown:
        raise DataError(f"unknown tag (expected one of {sorted(known)})", path=path, line=line, value=unknown[0])
    return TagExample(f"{path.stem}-{line}", chars, tags, f"{path}:{line}")


def load_msra_ner(root: Path, problems: Problems) -> TaskData:
    """MSRA NER: the staged dev.tsv split 90/10 into train / dev; test.tsv is test."""
    folder = root / "chinese" / "msra_ner"
    train_file = read_msra(folder / "dev.tsv", problems)
    train, dev = hash_split(train_file, [ex.id for ex in train_file], MSRA_DEV_FRACTION)
    test = read_msra(folder / "test.tsv", problems)
    spec = TaskSpec("msra-ner", "tag", bio_labels(MSRA_TYPES), "entity_f1", ("text_a",))
    notes = (f"MSRA NER train.tsv is not staged: the staged dev.tsv ({len(train_file)} sentences) is the "
             f"training data, {MSRA_DEV_FRACTION:.0%} of it held out as dev ({len(dev)}) by "
             f"muppets.tasks.splits.hash_split on the sentence id, the rest as train ({len(train)}); "
             f"test = test.tsv ({len(test)}). One token (and tag) per character.")
    return TaskData(spec, {"train": train, "dev": dev, "test": test}, notes=notes)  # type: ignore[arg-type]


@dataclass
class CmrcAnswers:
    """CMRC 2018's answer repairs (see the module docstring), counted as they are made."""

    moved: int = 0  # answers moved to the nearest occurrence of their text
    trimmed: int = 0  # answers whose spaces at either end were cut off
    dropped_answers: int = 0  # answers whose text is not in the context
    dropped_questions: int = 0  # questions left without an answer

    def __call__(self, qa: dict, context: str) -> dict | None:
        kept = []
        for raw in qa.get("answers") or []:
            text, start = (raw.get("text"), raw.get("answer_start")) if isinstance(raw, dict) else (None, None)
            if not isinstance(text, str) or not text or type(start) is not int:
                kept.append(raw)  # malformed: the SQuAD reader reports it with file and line
            elif start >= 0 and context[start:start + len(text)] == text:
                kept.append(raw)
            elif text in context:
                kept.append({**raw, "answer_start": _nearest(context, text, start)})
                self.moved += 1
            else:
                self.dropped_answers += 1
        if not kept:
            self.dropped_questions += 1
            return None
        return {**qa, "answers": [self._trim(raw) for raw in kept]}

    def _trim(self, raw: dict) -> dict:
        """The answer without spaces at either end (no token holds a space, so an answer's
        tokens give back exactly its characters)."""
        text = raw.get("text") if isinstance(raw, dict) else None
        if not isinstance(text, str) or not text.strip() or text == text.strip():
            return raw
        self.trimmed += 1
        lead = len(text) - len(text.lstrip())
        return {**raw, "text": text.strip(), "answer_start": raw["answer_start"] + lead}


def _nearest(context: str, text: str, start: int) -> int:
    """The occurrence of ``text`` in ``context`` whose start is closest to ``start``."""
    found, best = context.find(text), None
    while found >= 0:
        if best is None or abs(found - start) < abs(best - start):
            best = found
        found = context.find(text, found + 1)
    assert best is not None, "text is in the context"
    return best


def _article_key(article: list[SpanExample]) -> str:
    return article[0].id.split("_QUERY_")[0]  # question ids are "<article id>_QUERY_<k>"


def load_cmrc2018(root: Path, problems: Problems) -> TaskData:
    """CMRC 2018 dev split by article into train / dev / test (see the module docstring)."""
    fix = CmrcAnswers()
    articles = [art for art in read_squad_articles(root / "chinese" / "cmrc2018" / "dev.json", problems, fix) if art]
    train, held = hash_split(articles, [_article_key(a) for a in articles], CMRC_HELD_OUT)
    dev, test = hash_split(held, [_article_key(a) for a in held], 2 / 3)  # the same hash order: smallest 2/3 -> test
    splits = {name: [ex for art in arts for ex in art] for name, arts in
              (("train", train), ("dev", dev), ("test", test))}
    notes = (f"CMRC 2018 train is not staged: dev.json ({len(articles)} articles with answers) is split by "
             f"article with muppets.tasks.splits.hash_split on the article id, {CMRC_HELD_OUT:.0%} held out "
             f"(test {len(test)} articles / {len(splits['test'])} questions, dev {len(dev)} / {len(splits['dev'])}), "
             f"the rest train ({len(train)} / {len(splits['train'])}). Answers: {fix.dropped_answers} dropped "
             f"(answer_start -1, text not in the context), {fix.moved} moved to the nearest occurrence of their "
             f"text, {fix.trimmed} trimmed of spaces at either end, {fix.dropped_questions} questions left without "
             "an answer dropped. Not comparable to "
             "published CMRC 2018 dev scores.")
    spec = TaskSpec("cmrc2018", "span", [], "cmrc2018", ("question", "context"))
    return TaskData(spec, splits, dropped=fix.dropped_questions, notes=notes)  # type: ignore[arg-type]
