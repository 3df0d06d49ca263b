"""SQuAD-format extractive QA files, and the SQuAD v1.1 task built from its dev set (README §4).

Only ``squad/dev-v1.1.json`` is staged (48 articles, 10,570 questions), so the task is split
**by article**: the first 38 articles are ``train`` and the last 10 are ``dev`` (no context is
shared between the two). Scores on that dev are not comparable to published SQuAD numbers.

Every answer is checked: ``context[start:start + len(text)] == text``; a mismatch is a
:class:`~muppets.errors.DataError` naming the file, the line where the question's id appears
and the question id. :func:`read_squad` reads any SQuAD-format file (e.g. CMRC 2018); questions
marked ``is_impossible`` (SQuAD 2.0) may have no answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from muppets.config import parse_json
from muppets.errors import DataError
from muppets.tasks.source import Problems, iter_lines, short
from muppets.tasks.spec import Answer, SpanExample, TaskData, TaskSpec

__all__ = ["SQUAD_TRAIN_ARTICLES", "check_answers", "read_squad_articles", "read_squad", "load_squad", "span_spec"]

SQUAD_TRAIN_ARTICLES = 38  # of the 48 dev articles; the remaining 10 are our dev split
AnswerFix = Callable[[dict, str], "dict | None"]  # (question, context) -> question to read, or None: drop it


class _LineFinder:
    """Line of the first ``"<id>"`` after the previous hit (ids appear in file order)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def line_of(self, qid: str) -> int | None:
        found = self.text.find(json.dumps(qid), self.pos)
        if found < 0:
            found = self.text.find(json.dumps(qid))
            if found < 0:
                return None
            self.pos, self.line = 0, 1
        self.line += self.text.count("\n", self.pos, found)
        self.pos = found
        return self.line


def _load_json(path: Path, problems: Problems) -> tuple[Any, str]:
    lines = list(iter_lines(path, problems))
    for line in lines:
        if line.error is not None:
            problems.report(line.error)
    text = "\n".join(line.text for line in lines)
    return parse_json(text, path), text


def _list(owner: dict, key: str, what: str, path: Path, line: int | None) -> list:
    """``owner[key]``: a list, or empty when absent or null."""
    items = owner.get(key) or []
    if not isinstance(items, list):
        raise DataError(f"{what}: {key!r} is not a list", path=path, line=line,
                        value=short(items))
    return items


def _answers(qa: dict, context: str, path: Path, line: int | None) -> list[Answer]:
    raw = _list(qa, "answers", f"question {qa['id']}", path, line)
    return check_answers(qa["id"], raw, context, path, line, qa.get("is_impossible", False))


def check_answers(qid: str, raws: list, context: str, path: str | Path, line: int | None,
                  impossible: bool = False) -> list[Answer]:
    """``raws`` (``[{"text", "answer_start"}, …]``) as answers, each found in ``context`` at its
    start; no answer is a DataError unless the question is ``impossible`` (SQuAD 2.0)."""
    answers = []
    for raw in raws:
        text, start = (raw.get("text"), raw.get("answer_start")) if isinstance(raw, dict) \
            else (None, None)
        if not isinstance(text, str) or not text or type(start) is not int or start < 0:
            raise DataError(f"question {qid}: an answer needs a non-empty 'text' and an "
                            "'answer_start' >= 0", path=path, line=line, value=short(raw))
        if context[start: start + len(text)] != text:
            found = context[start: start + len(text)]
            raise DataError(f"question {qid}: answer does not match the context at "
                            f"answer_start={start} (context there: {found!r})",
                            path=path, line=line, value=text)
        answers.append(Answer(text, start))
    if not answers and not impossible:
        raise DataError(f"question {qid} has no answer", path=path, line=line)
    return answers


def _question(qa: Any, context: str, title: str, path: Path,
              finder: _LineFinder, fix: AnswerFix | None = None) -> SpanExample | None:
    if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
        raise DataError(f"article {title!r}: a question needs a string 'id'", path=path,
                        value=short(qa))
    line = finder.line_of(qa["id"])
    if fix is not None and (qa := fix(qa, context)) is None:
        return None
    question = qa.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"question {qa['id']}: empty question", path=path, line=line)
    answers = _answers(qa, context, path, line)
    return SpanExample(qa["id"], question.strip(), context, answers, title, f"{path}:{line}")


def _article(article: Any, path: Path, problems: Problems,
             finder: _LineFinder, fix: AnswerFix | None = None) -> list[SpanExample]:
    if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
        raise DataError("an article needs a 'paragraphs' list", path=path, value=short(article))
    title = str(article.get("title", ""))
    examples = []
    for paragraph in article["paragraphs"]:
        context = paragraph.get("context") if isinstance(paragraph, dict) else None
        if not isinstance(context, str) or not context.strip():
            problems.report(DataError(f"article {title!r}: a paragraph has no context",
                                      path=path, value=short(paragraph)))
            continue
        for qa in _list(paragraph, "qas", f"article {title!r}: a paragraph", path, None):
            try:
                example = _question(qa, context, title, path, finder, fix)
            except DataError as err:
                problems.report(err)
                continue
            if example is not None:
                examples.append(example)
    return examples


def read_squad_articles(path: str | Path, problems: Problems,
                        fix: AnswerFix | None = None) -> list[list[SpanExample]]:
    """Read a SQuAD-format JSON file into one list of questions per article.

    ``fix(question, context)`` (optional) sees each question's raw JSON object before it is
    checked and returns the one to read, or None to leave the question out on purpose (a
    dataset-specific repair, e.g. CMRC 2018's unlocatable answers: :mod:`muppets.tasks.chinese`).
    """
    path = Path(path)
    data, text = _load_json(path, problems)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        records = " (a list of records: write them as JSON Lines, one a line, in a .jsonl file)" \
            if isinstance(data, list) else ""
        raise DataError(f"expected a SQuAD object with a 'data' list of articles{records}", path=path)
    finder = _LineFinder(text)
    articles = []
    for article in data["data"]:
        try:
            articles.append(_article(article, path, problems, finder, fix))
        except DataError as err:
            problems.report(err)
    if not any(articles):
        raise DataError("no questions could be read", path=path)
    return articles


def span_spec(name: str) -> TaskSpec:
    return TaskSpec(name, "span", [], "squad", ("question", "context"))


def read_squad(path: str | Path | Mapping[str, str | Path], errors: str = "strict", *,
               name: str | None = None) -> TaskData:
    """Read your own SQuAD-format QA task: one file (split ``"train"``) or ``{split: file}``."""
    files = dict(path) if isinstance(path, Mapping) else {"train": path}
    problems = Problems(errors)
    splits = {split: [ex for art in read_squad_articles(file, problems) for ex in art]
              for split, file in files.items()}
    task = name or Path(next(iter(files.values()))).stem
    problems.summarize(task)
    return TaskData(span_spec(task), splits, skipped=problems.skipped)  # type: ignore[arg-type]


def load_squad(root: Path, problems: Problems) -> TaskData:
    """SQuAD v1.1 dev split by article: first 38 articles → train, last 10 → dev."""
    articles = read_squad_articles(root / "squad" / "dev-v1.1.json", problems)
    train = [ex for art in articles[:SQUAD_TRAIN_ARTICLES] for ex in art]
    dev = [ex for art in articles[SQUAD_TRAIN_ARTICLES:] for ex in art]
    notes = (f"SQuAD v1.1 train is not staged: dev-v1.1.json ({len(articles)} articles) is "
             f"split by article, the first {SQUAD_TRAIN_ARTICLES} as train ({len(train)} "
             f"questions), the remaining {len(articles) - SQUAD_TRAIN_ARTICLES} as dev "
             f"({len(dev)}). Not comparable to published SQuAD dev scores.")
    splits = {"train": train, "dev": dev}
    return TaskData(span_spec("squad"), splits, notes=notes)  # type: ignore[arg-type]
