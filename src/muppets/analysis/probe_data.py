"""What the probes read: word-level tasks on shared sentences, and the control tasks.

Two corpora, each embedded once for all of its tasks:

==============  ==========================================  ===================================
corpus          tasks (one label per word)                  splits (train / select / report)
==============  ==========================================  ===================================
``conll2003``   ``pos`` (PTB tags), ``chunk`` and ``ner``   eng.train / eng.testa / eng.testb
                (BIO tags, also scored as spans)
``ewt``         ``upos``, ``deprel`` (the relation to the   en_ewt train / dev / test
                head, subtype dropped: ``nmod:poss`` ->
                ``nmod``), ``structural`` (the tree itself)
==============  ==========================================  ===================================

Probes are chosen on dev (early stopping, best layer) and reported on test: never selected on
the split they report (:mod:`muppets.transfer.selection`, mode ``dev``).

A control task (Hewitt & Liang 2019, §2) keeps a task's words and label set but gives every
word TYPE one label drawn at random from the task's empirical label distribution (its train
tokens), the same label at every occurrence in every split. A probe can only reach a high
control accuracy by memorising word types, so ``selectivity = task accuracy − control
accuracy`` says how much of a probe's accuracy the representation, not the probe, supplies.

>>> task = WordTask("t", "c", ["A", "B"], {"train": [["A", "A", "B"]]}, spans=False)
>>> table = control_table(task, {"train": [["x", "y", "x"]]}, seed=0)
>>> sorted(table), set(table.values()) <= {"A", "B"}
(['x', 'y'], True)
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from muppets.errors import ConfigError, DataError
from muppets.paths import data_dir as shared_data_dir
from muppets.tasks.conllu import UDSentence, load_ud

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")  # train the probe / select it (early stopping, best layer) / report
WORD_TASKS = ("pos", "chunk", "ner", "upos", "deprel")
TASKS = (*WORD_TASKS, "structural")
CORPUS_OF = {"pos": "conll2003", "chunk": "conll2003", "ner": "conll2003",
             "upos": "ewt", "deprel": "ewt", "structural": "ewt"}
_CONLL_TASKS = {"pos": "conll2003-pos", "chunk": "conll2003-chunk", "ner": "conll2003"}
EWT_DIR = "ud-english-ewt"  # under the shared data folder


@dataclass
class WordTask:
    """One label per word of a corpus's sentences."""

    name: str  # pos | chunk | ner | upos | deprel
    corpus: str  # conll2003 | ewt
    labels: list[str]  # the output classes (every label seen in any split, train's first)
    tags: dict[str, list[list[str]]]  # split -> per sentence, per word
    spans: bool  # BIO tags: span F1 is reported beside accuracy


@dataclass
class ProbeCorpus:
    """Sentences (split -> list of words) and the tasks annotated on them."""

    name: str
    sentences: dict[str, list[list[str]]]
    tasks: dict[str, WordTask] = field(default_factory=dict)
    trees: dict[str, list[UDSentence]] | None = None  # ewt: heads and UPOS for the structural probe
    dropped: dict[str, int] = field(default_factory=dict)  # split -> sentences left out (too long)

    def subset(self, keep: Mapping[str, Sequence[int]]) -> ProbeCorpus:
        """The same corpus with only the sentences ``keep[split]`` (indices, in order)."""
        def pick(rows: Sequence, split: str) -> list:
            return [rows[i] for i in keep[split]] if split in keep else list(rows)

        tasks = {name: WordTask(t.name, t.corpus, t.labels, {s: pick(v, s) for s, v in t.tags.items()}, t.spans)
                 for name, t in self.tasks.items()}
        trees = None if self.trees is None else {s: pick(v, s) for s, v in self.trees.items()}
        sentences = {s: pick(v, s) for s, v in self.sentences.items()}
        return ProbeCorpus(self.name, sentences, tasks, trees, dict(self.dropped))

    def stats(self) -> dict:
        return {s: {"sentences": len(v), "words": sum(map(len, v)), "dropped_too_long": self.dropped.get(s, 0)}
                for s, v in self.sentences.items()}


def _label_set(tags: Mapping[str, list[list[str]]], first: Sequence[str] = ()) -> list[str]:
    """``first`` (a task's declared labels), then any other label met in train, dev or test."""
    seen = list(first)
    known = set(seen)
    for split in SPLITS:
        for tag in sorted({t for sent in tags.get(split, []) for t in sent} - known):
            seen.append(tag)
            known.add(tag)
    return seen


def load_conll2003_corpus(names: Sequence[str], data_dir: str | Path | None = None) -> ProbeCorpus:
    """CoNLL-2003 English with the ``names`` tasks (pos, chunk, ner): the same sentences each."""
    from muppets.tasks import load_task

    corpus: ProbeCorpus | None = None
    for name in names:
        data = load_task(_CONLL_TASKS[name], data_dir)
        sentences = {s: [ex.tokens for ex in data[s]] for s in SPLITS}
        if corpus is None:
            corpus = ProbeCorpus("conll2003", sentences)
        elif sentences != corpus.sentences:
            raise DataError(f"CoNLL-2003: the {name} task's sentences differ from the other tasks'")
        tags = {s: [list(ex.tags) for ex in data[s]] for s in SPLITS}
        spans = name in ("chunk", "ner")
        corpus.tasks[name] = WordTask(name, "conll2003", _label_set(tags, data.spec.labels), tags, spans)
    assert corpus is not None
    return corpus


def load_ewt_corpus(names: Sequence[str], data_dir: str | Path | None = None,
                    deprel_subtypes: bool = False) -> ProbeCorpus:
    """UD English EWT with the ``names`` tasks (upos, deprel, structural)."""
    root = (Path(data_dir) if data_dir is not None else shared_data_dir()) / EWT_DIR
    trees = load_ud(root, SPLITS)
    sentences = {s: [t.words for t in trees[s]] for s in SPLITS}
    corpus = ProbeCorpus("ewt", sentences, trees=trees)
    for name in names:
        if name == "upos":
            tags = {s: [list(t.upos) for t in trees[s]] for s in SPLITS}
        elif name == "deprel":
            tags = {s: [[r if deprel_subtypes else r.split(":")[0] for r in t.deprels] for t in trees[s]]
                    for s in SPLITS}
        else:
            continue
        corpus.tasks[name] = WordTask(name, "ewt", _label_set(tags), tags, spans=False)
    return corpus


def load_corpora(tasks: Sequence[str], data_dir: str | Path | None = None,
                 deprel_subtypes: bool = False) -> dict[str, ProbeCorpus]:
    """The corpora the ``tasks`` need, each with those of its tasks that were asked for."""
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ConfigError(f"probe tasks {list(tasks)}: choose from {', '.join(TASKS)}")
    out = {}
    conll = [t for t in tasks if CORPUS_OF[t] == "conll2003"]
    ewt = [t for t in tasks if CORPUS_OF[t] == "ewt"]
    if conll:
        out["conll2003"] = load_conll2003_corpus(conll, data_dir)
    if ewt:
        out["ewt"] = load_ewt_corpus(ewt, data_dir, deprel_subtypes)
    return out


def sample_indices(n: int, limit: int, seed: int) -> list[int]:
    """``limit`` of ``range(n)`` drawn without replacement (kept in corpus order); all if
    ``limit`` is 0 or at least ``n``.

    >>> sample_indices(5, 0, 1), len(sample_indices(100, 10, 1)), sample_indices(3, 9, 0)
    ([0, 1, 2, 3, 4], 10, [0, 1, 2])
    """
    if limit <= 0 or limit >= n:
        return list(range(n))
    return sorted(np.random.default_rng(seed).choice(n, size=limit, replace=False).tolist())


def control_table(task: WordTask, sentences: Mapping[str, Sequence[Sequence[str]]], seed: int) -> dict[str, str]:
    """One control label per word type of ``sentences`` (every split), drawn from the label
    distribution of ``task``'s train tokens (Hewitt & Liang 2019). Types are visited in sorted
    order, so a seed gives the same table whatever the order of the sentences."""
    counts = Counter(t for sent in task.tags["train"] for t in sent)
    if not counts:
        raise DataError(f"control task of {task.name}: the train split has no labels")
    labels = sorted(counts)
    p = np.array([counts[label] for label in labels], dtype=np.float64)
    types = sorted({w for split in sentences.values() for sent in split for w in sent})
    drawn = np.random.default_rng(seed).choice(len(labels), size=len(types), p=p / p.sum())
    return {word: labels[i] for word, i in zip(types, drawn)}


def control_task(task: WordTask, sentences: Mapping[str, Sequence[Sequence[str]]], seed: int) -> WordTask:
    """``task``'s control task: the same sentences, labels from :func:`control_table`."""
    table = control_table(task, sentences, seed)
    tags = {s: [[table[w] for w in sent] for sent in sentences[s]] for s in task.tags}
    return WordTask(f"{task.name}-control", task.corpus, task.labels, tags, spans=False)
