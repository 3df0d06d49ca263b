"""What a task is (:class:`TaskSpec`), what its examples look like, and what a reader returns.

Four example shapes cover the six task kinds:

==========  =====================  ==========================================================
kind        example                label
==========  =====================  ==========================================================
classify    :class:`TextExample`   one of ``spec.labels`` (a string)
pair        :class:`TextExample`   one of ``spec.labels``; ``text_b`` holds the second text
regress     :class:`TextExample`   a float (``text_b`` may hold a second text, as in STS-B)
tag         :class:`TagExample`    one tag of ``spec.labels`` per token (BIO scheme)
span        :class:`SpanExample`   character spans in the context (``spec.labels`` is empty)
choice      :class:`ChoiceExample` the index of the right ending (``spec.labels`` = "0", "1"…)
==========  =====================  ==========================================================

Every example carries ``source = "file:line"`` so a prediction can be traced back to its row.
A label is ``None`` when the file has none (unlabelled data to predict on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from muppets.errors import ConfigError

__all__ = ["KINDS", "SENTIMENT_NAMES", "TaskSpec", "TextExample", "TagExample", "Answer", "SpanExample",
           "ChoiceExample", "Example", "TaskData"]

KINDS = ("classify", "regress", "pair", "tag", "span", "choice")
_UNLABELLED_KINDS = ("regress", "span")  # kinds whose spec has no label set
SENTIMENT_NAMES = ("negative", "positive")  # names of the 0/1 labels of SST-2, MR, ChnSentiCorp


@dataclass(frozen=True)
class TaskSpec:
    """What a head and a metric need to know about a task.

    ``metric`` names a function of :mod:`muppets.metrics` ("accuracy", "mcc", "f1",
    "pearson_spearman", "entity_f1", "squad"); ``text_fields`` names the input fields in the
    source files, in order (e.g. ``("question", "sentence")``). ``labels`` are the values the
    files hold; ``label_names`` what people read for them (SST-2's ``0``/``1`` are ``negative`` /
    ``positive``): predictions, served answers and a saved model's ``id2label`` show the names.

    >>> spec = TaskSpec("sst2", "classify", ["0", "1"], "accuracy", ("sentence",),
    ...                 ("negative", "positive"))
    >>> spec.num_labels, spec.names
    (2, ['negative', 'positive'])
    """

    name: str  # registry name, e.g. "sst2" or "xnli-de"
    kind: str  # one of KINDS
    labels: list[str]  # label set, in the order heads index it; empty for regress/span
    metric: str  # metric name reported for this task
    text_fields: tuple[str, ...]  # names of the input text fields in the source files
    label_names: tuple[str, ...] = ()  # a readable name per label, in the same order (() = the labels are their names)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"task {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}")
        if self.kind in _UNLABELLED_KINDS and self.labels:
            raise ConfigError(f"task {self.name!r}: a {self.kind} task has no label set")
        if self.kind not in _UNLABELLED_KINDS and not self.labels:
            raise ConfigError(f"task {self.name!r}: a {self.kind} task needs labels")
        if len(set(self.labels)) != len(self.labels):
            raise ConfigError(f"task {self.name!r}: duplicate labels in {self.labels}")
        if self.label_names and (len(self.label_names) != len(self.labels)
                                 or len(set(self.label_names)) != len(self.label_names)):
            raise ConfigError(f"task {self.name!r}: label names {list(self.label_names)} must name each of "
                              f"the labels {self.labels} once")

    @property
    def names(self) -> list[str]:
        """The readable name of each label (``label_names``, else the labels themselves)."""
        return list(self.label_names or self.labels)

    @property
    def num_labels(self) -> int:
        """Size of the output layer: the label count (1 for regression, 0 for span)."""
        return 1 if self.kind == "regress" else len(self.labels)


@dataclass
class TextExample:
    """A single text or a text pair, for classify / pair / regress tasks."""

    id: str
    text: str
    text_b: str | None
    label: str | float | None
    source: str  # "file:line" of the row
    meta: dict[str, str] = field(default_factory=dict)  # extra columns a reader keeps (e.g. video)
    probs: tuple[float, ...] | None = None  # classify/pair: a probability per label in the spec's order (weak labels)


@dataclass
class TagExample:
    """A tokenised sentence with one tag per token (``tags`` is None when unlabelled)."""

    id: str
    tokens: list[str]
    tags: list[str] | None
    source: str  # "file:line" of the first token


@dataclass(frozen=True)
class Answer:
    """One gold answer: its text and the character offset where it starts in the context."""

    text: str
    start: int


@dataclass
class SpanExample:
    """An extractive QA question; each answer has ``context[start:start + len(text)] == text``."""

    id: str
    question: str
    context: str
    answers: list[Answer]
    title: str
    source: str  # "file:line" where the question's id appears


@dataclass
class ChoiceExample:
    """A context and candidate endings; ``label`` is the index of the right ending."""

    id: str
    context: str
    endings: list[str]
    label: int | None
    source: str  # "file:line" of the context line


Example = Union[TextExample, TagExample, SpanExample, ChoiceExample]


@dataclass
class TaskData:
    """What :func:`muppets.tasks.load_task` returns: the spec, the splits and what was left out.

    ``skipped`` counts bad records passed over with ``errors="skip"``; ``dropped`` counts
    records removed on purpose by a documented rule (e.g. untranslated PAWS-X rows);
    ``notes`` says how derived splits were made.
    """

    spec: TaskSpec
    splits: dict[str, list[Example]]
    skipped: int = 0
    dropped: int = 0
    notes: str = ""

    def __getitem__(self, split: str) -> list[Example]:
        """``data["train"]`` is ``data.splits["train"]``, with a clear error for a missing split."""
        if split not in self.splits:
            raise ConfigError(f"task {self.spec.name!r} has no split {split!r}; "
                              f"it has {sorted(self.splits)}")
        return self.splits[split]

    def sizes(self) -> dict[str, int]:
        """Examples per split, e.g. ``{"train": 6920, "dev": 872}``."""
        return {name: len(examples) for name, examples in self.splits.items()}
