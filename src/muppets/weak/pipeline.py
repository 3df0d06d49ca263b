"""The steps behind ``muppets weak analyze`` and ``muppets weak label``: find the examples
(a task split or a text file), apply an LF file, write probabilistic labels as JSON lines.

Inputs (``--task``):

* any registered task name — its split, labels as gold: ``spam`` is YouTube spam in the Snorkel
  tutorial's split (``train`` 1,586 / ``dev`` 100 / ``valid`` 120 / ``test`` 250;
  :func:`~muppets.tasks.spam.load_spam_tutorial`), raw text; ``youtube-spam``, ``sst2`` …;
* a path to a UTF-8 text file — one example per non-blank line, no gold.

Output of :func:`write_labels`: one JSON object per example, ``{"id", "text", "probs",
"label", "votes"}`` — ``probs`` as ``{label name: probability}`` (what ``muppets finetune``
reads as soft labels from such a file, with no label list to pass), ``label`` the model's prediction
(most probable, ties broken as the model states; ``null`` where the model abstains: majority vote
on a row whose votes tie, or with ``keep_uncovered`` on a row no LF labels, unless a class balance
is given), ``votes`` how many LFs did not abstain. Rows no LF votes on (``votes`` 0: the label
model's prior alone) are left out unless ``keep_uncovered`` (:func:`rows_to_write`), as
Snorkel's ``filter_unlabeled_dataframe`` does before training.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import dataclasses
from collections.abc import Sequence

import numpy as np

from muppets.data.formats import container_of, text_suffix
from muppets.config import atomic_path
from muppets.errors import ConfigError
from muppets.tasks.spec import TaskData, TaskSpec, TextExample
from muppets.weak.apply import read_texts
from muppets.weak.matrix import covered

TABLE_SUFFIXES = (".csv", ".tsv", ".json", ".jsonl", ".parquet", ".arrow")  # tables: a text file given as --task is one example a line

__all__ = ["WeakInput", "load_weak_input", "rows_to_write", "write_labels", "weak_task_data"]

logger = logging.getLogger(__name__)


@dataclass
class WeakInput:
    """Examples to label, their label names and gold class indices (None without gold)."""

    examples: list[TextExample]
    label_names: list[str]  # class k's label as the task's files (and the labels file) hold it
    gold: np.ndarray | None  # (n,) int64, -1 = unknown
    description: str
    display_names: list[str] = field(default_factory=list)  # what people read for class k (SST-2: negative, positive); [] = label_names

    def __post_init__(self) -> None:
        self.display_names = list(self.display_names or self.label_names)

    @property
    def cardinality(self) -> int:
        return len(self.label_names)


def _gold(examples: list[TextExample], names: list[str]) -> np.ndarray | None:
    if all(ex.label is None for ex in examples):
        return None
    index = {name: k for k, name in enumerate(names)}
    return np.array([index.get(str(ex.label), -1) if ex.label is not None else -1
                     for ex in examples], dtype=np.int64)


def load_weak_input(task: str, split: str = "train", cardinality: int = 2,
                    data_dir: str | Path | None = None) -> WeakInput:
    """The examples named by ``task`` (see the module docstring) and ``split``."""
    path = Path(task)
    if not path.is_file() and (path.suffix or "/" in task):  # a file's name, not a registered task's
        raise ConfigError(f"{task}: no such file (give a text file, one example per line, or a registered task)")
    if path.is_file():
        if text_suffix(path) in TABLE_SUFFIXES or container_of(path) is not None:
            raise ConfigError(f"{path}: a {''.join(path.suffixes[-2:])} file would be read as plain text, one example per line (its "
                              f"header and every column included); give a text file with one example per line, or "
                              f"a registered task")
        names = [str(k) for k in range(cardinality)]
        return WeakInput(read_texts(path), names, None, f"{path} ({cardinality} classes)")
    from muppets.paths import data_dir as default_data_dir
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    from muppets.tasks import load_task
    data = load_task(task, data_dir=root)
    if data.spec.kind not in ("classify", "pair"):
        raise ConfigError(f"task {task!r} is a {data.spec.kind} task; weak labels need "
                          "classify or pair")
    splits, names, shown = data.splits, list(data.spec.labels), data.spec.names
    if split not in splits:
        raise ConfigError(f"task {task!r} has no split {split!r} (has {sorted(splits)})")
    examples = list(splits[split])
    return WeakInput(examples, names, _gold(examples, names), f"{task}/{split}", shown)


def rows_to_write(L: np.ndarray, keep_uncovered: bool = False) -> np.ndarray:
    """``(n,)`` bool: the rows of ``L`` a label file holds — those some LF votes on, or all of
    them with ``keep_uncovered`` (a row without a vote carries the label model's prior alone,
    the same for every such row; training on it teaches the class balance, not the task). The
    count dropped is logged."""
    keep = np.ones(L.shape[0], dtype=bool) if keep_uncovered else covered(L)
    if not keep.any():
        raise ConfigError(f"no LF votes on any of the {L.shape[0]:,} rows: no label to write (--keep-uncovered "
                          "writes the label model's prior for each)")
    dropped = int((~keep).sum())
    if dropped:
        logger.info("dropped %s of %s rows with no LF vote (%.1f%%); keep them with --keep-uncovered",
                    f"{dropped:,}", f"{len(keep):,}", 100 * dropped / len(keep))
    return keep


def write_labels(path: str | Path, weak: WeakInput, probs: np.ndarray, labels: np.ndarray,
                 L: np.ndarray, overwrite: bool = False, keep: np.ndarray | None = None) -> int:
    """Write one JSON line per example (module docstring): ``probs`` (n, K) and ``labels``
    (n,) class indices from the label model, ``L`` the label matrix; only the rows where
    ``keep`` (n,) bool is true (default all; :func:`rows_to_write`); atomically. Returns the
    count written."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise ConfigError(f"{path} exists; choose another path or pass --overwrite")
    votes = (L != -1).sum(axis=1)
    keep = np.ones(len(weak.examples), dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for ex, row, label, n_votes, kept in zip(weak.examples, probs, labels, votes, keep):
            if not kept:
                continue
            fh.write(json.dumps({
                "id": ex.id, "text": ex.text,
                "probs": {name: round(float(p), 6) for name, p in zip(weak.label_names, row)},
                "label": weak.label_names[int(label)] if label >= 0 else None, "votes": int(n_votes)},
                ensure_ascii=False) + "\n")
    return int(keep.sum())


def weak_task_data(name: str, label_names: Sequence[str], train: Sequence[TextExample],
                   probs: np.ndarray, evaluate: dict[str, Sequence[TextExample]] | None = None,
                   keep: np.ndarray | None = None, metric: str = "accuracy") -> TaskData:
    """A classify task to fine-tune on weak labels (``finetune.run(cfg, data=...)``).

    ``train`` gets the label model's ``probs`` (n, K) as :attr:`TextExample.probs` and its most
    probable class as ``label`` — gold labels in ``train`` are replaced, so none reaches
    training; ``keep`` (n,) bool drops rows (e.g. ``covered(L)``: those no LF labels, as
    Snorkel's tutorial does); ``evaluate`` adds gold splits as they are (``{"dev": …, "test": …}``)."""
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape != (len(train), len(label_names)):
        raise ConfigError(f"probs of shape {probs.shape} for {len(train)} examples and "
                          f"{len(label_names)} labels")
    keep = np.ones(len(train), dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    rows = [dataclasses.replace(ex, label=label_names[int(np.argmax(p))],
                                probs=tuple(float(v) for v in p))
            for ex, p, k in zip(train, probs, keep) if k]
    if not rows:
        raise ConfigError("weak_task_data: no training example kept")
    spec = TaskSpec(name, "classify", list(label_names), metric, ("text",))
    return TaskData(spec, {"train": rows, **{k: list(v) for k, v in (evaluate or {}).items()}})


def class_balance(spec: str, task: str, cardinality: int = 2) -> np.ndarray | None:
    """The class balance a label model is given: ``learned`` (None: the model learns it),
    ``uniform``, comma-separated shares (``0.46,0.54``, normalised), or ``from:SPLIT``: the label
    shares of a labelled split of the same task (e.g. the spam tutorial's 100 labelled ``dev``
    comments; never the split you report)."""
    spec = spec.strip()
    if spec in ("", "learned"):
        return None
    if spec == "uniform":
        return np.full(cardinality, 1.0 / cardinality)
    if spec.startswith("from:"):
        labelled = load_weak_input(task, spec[len("from:"):], cardinality)
        gold = labelled.gold[labelled.gold >= 0] if labelled.gold is not None else np.zeros(0, dtype=np.int64)
        if len(gold) == 0:
            raise ConfigError(f"--class-balance {spec}: split {spec[5:]!r} of {task} has no labels")
        counts = np.bincount(gold, minlength=labelled.cardinality).astype(np.float64)
        return np.maximum(counts, 0.5) / np.maximum(counts, 0.5).sum()  # a class never seen keeps a little mass
    try:
        shares = np.array([float(x) for x in spec.split(",")])
    except ValueError:
        raise ConfigError(f"--class-balance {spec!r}: expected learned, uniform, from:SPLIT or "
                          f"{cardinality} comma-separated shares") from None
    if len(shares) != cardinality or not np.isfinite(shares).all() or (shares <= 0).any():
        raise ConfigError(f"--class-balance {spec!r}: need {cardinality} positive finite shares")
    return shares / shares.sum()

