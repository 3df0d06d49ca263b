"""The YouTube Spam Collection (Alberto et al. 2015; data README §8), as used by Snorkel.

Five CSV files (``COMMENT_ID,AUTHOR,DATE,CONTENT,CLASS``; standard quoting; CLASS 1 = spam)
read with :mod:`csv`, so a quoted field may span lines. Splits follow the Snorkel spam
tutorial's layout: ``train`` = files 01–04 (1,586 comments), and file 05 (Shakira, 370) is
split into ``dev`` (120) and ``test`` (250) by :func:`~muppets.tasks.splits.hash_split` on the
comment id (Snorkel samples these with scikit-learn; ours is deterministic without it).

The registry's ``spam`` (:func:`load_spam_tutorial`) is the same data with the Snorkel spam
tutorial's exact split and raw text instead, for weak supervision and comparisons with Snorkel.

Cleaning, for the quirks of this data: HTML tags (``<br />``, ``<a href=…>``) become a space,
entities (``&#39;``, ``&quot;``, ``&lt;``) are unescaped, stray U+FEFF characters are dropped
and whitespace is collapsed. The 3 exactly duplicated comments are kept (the published
counts include them) with ids made unique (``<id>#2``). ``meta`` holds ``author``, ``date``
(empty for 245 Eminem rows; formats differ between files) and ``video`` (the file stem).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np

from muppets.errors import DataError
from muppets.tasks.source import Problems
from muppets.tasks.spec import TaskData, TaskSpec, TextExample
from muppets.tasks.splits import hash_split, legacy_stratified_shuffle_split
from muppets.tasks.table import Columns, LabelRule, read_text_file, unique_ids

__all__ = ["SPAM_NAMES", "SPAM_TEST_SIZE", "clean_comment", "load_youtube_spam", "load_spam_tutorial",
           "load_spam_tutorial_split"]

SPAM_TEST_SIZE = 250  # of the 370 comments of file 05, as in the Snorkel tutorial
SPAM_NAMES = ("ham", "spam")  # CLASS 0 / 1
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_SPACES = re.compile(r"\s+")
_COLUMNS = Columns(text="CONTENT", label="CLASS", id="COMMENT_ID", meta=("AUTHOR", "DATE"))


def clean_comment(text: str) -> str:
    """Drop HTML tags and U+FEFF, unescape entities, collapse whitespace.

    >>> clean_comment("EMINEM&lt;3 <br />the best&#39;s\\ufeff")
    "EMINEM<3 the best's"
    """
    text = html.unescape(_TAG.sub(" ", text)).replace("\ufeff", "")
    return _SPACES.sub(" ", text).strip()


def _read_raw_video(path: Path, problems: Problems) -> list[TextExample]:
    """The rows of one file as read (text not cleaned; only stripped of outer whitespace)."""
    return read_text_file(path, "csv", _COLUMNS, LabelRule("classify", ["0", "1"]), problems)


def _video_files(root: Path) -> list[Path]:
    files = sorted((root / "youtube-spam").glob("Youtube0*.csv"))
    if len(files) != 5:
        raise DataError(f"expected 5 Youtube0*.csv files, found {len(files)}",
                        path=root / "youtube-spam")
    return files


def _read_video(path: Path, problems: Problems) -> list[TextExample]:
    examples = _read_raw_video(path, problems)
    kept = []
    for ex in examples:
        ex.text = clean_comment(ex.text)
        ex.meta = {"author": ex.meta["AUTHOR"], "date": ex.meta["DATE"], "video": path.stem}
        if ex.text:
            kept.append(ex)
        else:
            problems.report(DataError("comment is empty once HTML is removed",
                                      path=path, line=int(ex.source.rsplit(":", 1)[1])))
    if not kept:
        raise DataError("no examples could be read", path=path)
    return kept


def load_youtube_spam(root: Path, problems: Problems) -> TaskData:
    """1,956 comments: train 1,586 (files 01–04), dev 120 and test 250 (file 05)."""
    files = _video_files(root)
    train = unique_ids([ex for f in files[:4] for ex in _read_video(f, problems)])
    last = _read_video(files[4], problems)
    fraction = SPAM_TEST_SIZE / len(last)
    dev, test = hash_split(last, [ex.id for ex in last], fraction)
    spec = TaskSpec("youtube-spam", "classify", ["0", "1"], "accuracy", ("CONTENT",), SPAM_NAMES)
    return TaskData(spec, {"train": train, "dev": dev, "test": test}, notes=(
        f"Snorkel layout: train = {', '.join(f.stem for f in files[:4])}; {files[4].stem} "
        f"split by hash_split on the comment id into dev ({len(dev)}) and test ({len(test)}). "
        "Label 1 = spam. HTML tags/entities cleaned; duplicate comments kept with ids '#2'."))


TUTORIAL_SEED = 123  # every draw of the Snorkel spam tutorial's load_spam_dataset
TUTORIAL_DEV_SIZE = 100


def load_spam_tutorial_split(root: Path, problems: Problems | None = None
                             ) -> dict[str, list[TextExample]]:
    """The exact split of the Snorkel spam tutorial (``snorkel-tutorials`` ``spam/utils.py``,
    ``load_spam_dataset``), for comparisons on the same rows; :func:`load_youtube_spam` (the
    registry's split) is unchanged.

    * Files in sorted order; each file's rows shuffled as pandas'
      ``df.sample(frac=1, random_state=123)`` does (a ``RandomState(123)`` permutation).
    * ``train`` = files 01–04 concatenated in that order (1,586, labels kept here: the
      tutorial hides them, pass over them yourself); ``dev`` = 100 rows of train drawn as
      ``df_train.sample(100, random_state=123)``.
    * File 05 → ``valid`` (120) / ``test`` (250): ``train_test_split(test_size=250,
      stratify=label, random_state=123)``, via
      :func:`~muppets.tasks.splits.legacy_stratified_shuffle_split`.
    * Text is the raw ``CONTENT`` (HTML entities and tags kept, as the tutorial's LFs see it),
      stripped of outer whitespace; ``meta["video"]`` is ``"1"`` … ``"5"``.
    """
    problems = problems or Problems("strict")
    videos = []
    for number, path in enumerate(_video_files(root), start=1):
        rows = _read_raw_video(path, problems)
        for ex in rows:
            ex.meta = {"author": ex.meta["AUTHOR"], "date": ex.meta["DATE"], "video": str(number)}
        order = np.random.RandomState(TUTORIAL_SEED).permutation(len(rows))
        videos.append([rows[i] for i in order])
    train = [ex for rows in videos[:4] for ex in rows]
    dev_rows = np.random.RandomState(TUTORIAL_SEED).permutation(len(train))[:TUTORIAL_DEV_SIZE]
    last = videos[4]
    valid_rows, test_rows = legacy_stratified_shuffle_split(
        [ex.label for ex in last], SPAM_TEST_SIZE, TUTORIAL_SEED)
    return {"train": train, "dev": [train[i] for i in dev_rows],
            "valid": [last[i] for i in valid_rows], "test": [last[i] for i in test_rows]}


def load_spam_tutorial(root: Path, problems: Problems) -> TaskData:
    """The registry's ``spam``: :func:`load_spam_tutorial_split` as a task (label 1 = spam).

    Splits ``train`` 1,586, ``dev`` 100 (drawn *from train*: the labelled comments LFs are
    written and checked against), ``valid`` 120 and ``test`` 250 (video 5). For weak supervision
    the train labels stand hidden (``muppets weak label --task spam`` replaces them) and the
    model trained on the weak labels chooses on ``valid`` (``muppets data task-split spam --split
    valid``). ``muppets finetune spam`` on the gold labels would choose on dev, which it trains
    on: fine-tune on gold with ``youtube-spam``."""
    splits = load_spam_tutorial_split(root, problems)
    spec = TaskSpec("spam", "classify", ["0", "1"], "accuracy", ("CONTENT",), SPAM_NAMES)
    return TaskData(spec, splits, notes=(
        "The Snorkel spam tutorial's split (load_spam_dataset, seed 123): train = videos 1-4 "
        "(1,586), dev = 100 comments of train, video 5 stratified into valid (120) and test (250). "
        "Raw CONTENT (HTML kept). dev is part of train: fine-tune on gold labels with youtube-spam, "
        "or select on valid."))
