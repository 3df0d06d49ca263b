"""MR, the movie-review sentence polarity data of Pang & Lee (2005) (data README §12).

``sentiment/mr/rt-polarity.{pos,neg}``: one lower-cased, tokenised snippet per line, encoded
in **Windows-1252** (0x85 is "…"), most lines ending in a space (stripped here). Labels follow
SST-2 (``"1"`` = positive, ``"0"`` = negative), so models transfer between the two as is.

There is no official split: 10% of the 10,662 snippets are held out as ``dev`` by
:func:`~muppets.tasks.splits.hash_split` on the id (``pos-<line>`` / ``neg-<line>``).
"""

from __future__ import annotations

from pathlib import Path

from muppets.errors import DataError
from muppets.tasks.source import Problems, iter_lines
from muppets.tasks.spec import SENTIMENT_NAMES, TaskData, TaskSpec, TextExample
from muppets.tasks.splits import hash_split

__all__ = ["MR_ENCODING", "MR_DEV_FRACTION", "load_mr", "read_lines_as_examples"]

MR_ENCODING = "cp1252"
MR_DEV_FRACTION = 0.1


def read_lines_as_examples(path: str | Path, label: str, prefix: str, problems: Problems,
                           encoding: str = "utf-8") -> list[TextExample]:
    """One example per non-blank line, all with ``label``; ids are ``<prefix>-<line>``."""
    path = Path(path)
    examples = []
    for line in iter_lines(path, problems, encoding):
        if line.error is not None:
            problems.report(line.error)
        elif line.text.strip():
            examples.append(TextExample(f"{prefix}-{line.number}", line.text.strip(), None,
                                        label, f"{path}:{line.number}"))
    if not examples:
        raise DataError("no examples could be read", path=path)
    return examples


def load_mr(root: Path, problems: Problems) -> TaskData:
    """MR: 5,331 positive + 5,331 negative snippets, split 90/10 into train / dev."""
    folder = root / "sentiment" / "mr"
    examples = (read_lines_as_examples(folder / "rt-polarity.pos", "1", "pos", problems,
                                       MR_ENCODING)
                + read_lines_as_examples(folder / "rt-polarity.neg", "0", "neg", problems,
                                         MR_ENCODING))
    train, dev = hash_split(examples, [ex.id for ex in examples], MR_DEV_FRACTION)
    spec = TaskSpec("mr", "classify", ["0", "1"], "accuracy", ("sentence",), SENTIMENT_NAMES)
    return TaskData(spec, {"train": train, "dev": dev}, notes=(
        f"MR has no official split: {MR_DEV_FRACTION:.0%} of the {len(examples)} snippets "
        f"are held out as dev ({len(dev)}) by muppets.tasks.splits.hash_split on the id; "
        "the files are decoded as cp1252. Label 1 = positive (as SST-2)."))
