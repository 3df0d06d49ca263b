"""Multiple choice: the HellaSwag validation set in llama.cpp's plain-text layout (README §11).

``hellaswag/hellaswag_val_full.txt`` holds 10,042 items of 6 lines each: the context
(``activity_label: ctx``), the gold index (0–3), then the 4 endings. It is a derived text
(WikiHow markers removed, some fields dropped), so scores are not comparable to published
per-split HellaSwag numbers. A short last item, a non-integer or out-of-range gold index and an
empty line inside an item are :class:`~muppets.errors.DataError` s naming file and line.

Only validation exists, so it is split 80/20 into ``train`` / ``dev`` by
:func:`~muppets.tasks.splits.hash_split` on the item number; ids are ``<stem>-<item>``
(0-based, file order) so ``train + dev`` sorted by id is the whole file again (e.g. for
zero-shot scoring).
"""

from __future__ import annotations

from pathlib import Path

from muppets.errors import DataError
from muppets.tasks.source import Line, Problems, iter_lines, short
from muppets.tasks.spec import ChoiceExample, TaskData, TaskSpec
from muppets.tasks.splits import hash_split

__all__ = ["HELLASWAG_ENDINGS", "HELLASWAG_DEV_FRACTION", "read_choice_text", "load_hellaswag"]

HELLASWAG_ENDINGS = 4
HELLASWAG_DEV_FRACTION = 0.2


def _nonempty(line: Line, what: str, path: Path) -> str:
    if line.error is not None:
        raise line.error
    text = line.text.strip()
    if not text:
        raise DataError(f"empty {what}", path=path, line=line.number)
    return text


def _gold(line: Line, n_endings: int, path: Path) -> int:
    raw = _nonempty(line, "gold index", path)
    try:
        gold = int(raw)
    except ValueError:
        raise DataError("gold index is not an integer", path=path, line=line.number,
                        value=short(raw)) from None
    if not 0 <= gold < n_endings:
        raise DataError(f"gold index out of range 0-{n_endings - 1}", path=path,
                        line=line.number, value=raw)
    return gold


def _item(lines: list[Line], n_endings: int, path: Path, index: int) -> ChoiceExample:
    if len(lines) < 2 + n_endings:
        raise DataError(f"truncated item: expected {2 + n_endings} lines (context, gold index, "
                        f"{n_endings} endings), found {len(lines)}", path=path,
                        line=lines[0].number)
    context = _nonempty(lines[0], "context", path)
    gold = _gold(lines[1], n_endings, path)
    endings = [_nonempty(line, "ending", path) for line in lines[2:]]
    return ChoiceExample(f"{path.stem}-{index}", context, endings, gold,
                         f"{path}:{lines[0].number}")


def read_choice_text(path: str | Path, problems: Problems,
                     n_endings: int = HELLASWAG_ENDINGS) -> list[ChoiceExample]:
    """Read items of ``2 + n_endings`` lines: context, gold index, endings (llama.cpp layout)."""
    path = Path(path)
    lines = list(iter_lines(path, problems))
    while lines and not lines[-1].text.strip():  # blank lines after the last item
        lines.pop()
    size = 2 + n_endings
    examples = []
    for index, start in enumerate(range(0, len(lines), size)):
        try:
            examples.append(_item(lines[start: start + size], n_endings, path, index))
        except DataError as err:
            problems.report(err)
    if not examples:
        raise DataError("no items could be read", path=path)
    return examples


def load_hellaswag(root: Path, problems: Problems) -> TaskData:
    """HellaSwag validation (10,042 items, 4 endings), split 80/20 into train / dev."""
    examples = read_choice_text(root / "hellaswag" / "hellaswag_val_full.txt", problems)
    keys = [ex.id.rsplit("-", 1)[1] for ex in examples]
    train, dev = hash_split(examples, keys, HELLASWAG_DEV_FRACTION)
    labels = [str(i) for i in range(HELLASWAG_ENDINGS)]
    spec = TaskSpec("hellaswag", "choice", labels, "accuracy", ("context", "endings"))
    return TaskData(spec, {"train": train, "dev": dev}, notes=(
        f"Only HellaSwag validation is staged (llama.cpp text layout, {len(examples)} items): "
        f"split by hash_split on the item number, {HELLASWAG_DEV_FRACTION:.0%} held out as dev "
        f"({len(dev)}). Not comparable to published HellaSwag scores."))
