"""What the probes read: word-level tasks on shared sentences, and the control tasks.

Three corpora, each embedded once for all of its tasks:

==============  ==========================================  ===================================
corpus          tasks (one label per word)                  splits (train / select / report)
==============  ==========================================  ===================================
``conll2003``   ``pos`` (PTB tags), ``chunk`` and ``ner``   eng.train / eng.testa / eng.testb
                (BIO tags, also scored as spans)
``ewt``         ``upos``, ``deprel`` (the relation to the   en_ewt train / dev / test
                head, subtype dropped: ``nmod:poss`` ->
                ``nmod``), ``structural`` (the tree itself)
``gsd``         ``zh-upos``, ``zh-deprel``,                  zh_gsdsimp dev (4 of every 5
                ``zh-structural``: the same on UD Chinese   sentences) / dev (every 5th) / test
                GSDSimp (words as its segmentation gives)
==============  ==========================================  ===================================

Sentence and pair tasks (one label per text or text pair: any classify or pair task such as
``sst2``, ``cola``, ``chnsenticorp``, ``mrpc``) are one-task corpora of their own, read by
:mod:`~muppets.analysis.probe_sentences`.

GSDSimp's train file is not in the shared data (data README §16), so its probes train on four
fifths of its dev sentences, select on the other fifth (every fifth sentence) and report test.

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

import dataclasses
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
WORD_TASKS = ("pos", "chunk", "ner", "upos", "deprel", "zh-upos", "zh-deprel")
STRUCTURAL = {"structural": "ewt", "zh-structural": "gsd"}  # the tree probe of each UD corpus
TASKS = (*WORD_TASKS, *STRUCTURAL)
ENGLISH_TASKS = ("pos", "chunk", "ner", "upos", "deprel", "structural")  # the default set
CHINESE_TASKS = ("zh-upos", "zh-deprel", "zh-structural")
CORPUS_OF = {"pos": "conll2003", "chunk": "conll2003", "ner": "conll2003",
             "upos": "ewt", "deprel": "ewt", "zh-upos": "gsd", "zh-deprel": "gsd", **STRUCTURAL}
_CONLL_TASKS = {"pos": "conll2003-pos", "chunk": "conll2003-chunk", "ner": "conll2003"}
EWT_DIR = "ud-english-ewt"  # under the shared data folder
GSD_DIR = "ud-chinese-gsdsimp"  # dev and test only
GSD_SELECT_EVERY = 5  # GSDSimp: every 5th dev sentence selects, the other four train the probe


@dataclass
class WordTask:
    """One label per word of a corpus's sentences (a sentence task: one per sentence, see
    :mod:`~muppets.analysis.probe_sentences`)."""

    name: str  # one of WORD_TASKS, or a sentence task's name
    corpus: str  # conll2003 | ewt | gsd, or the sentence task's name
    labels: list[str]  # the output classes (every label seen in any split, train's first)
    tags: dict[str, list[list[str]]]  # split -> per sentence, per word
    spans: bool  # BIO tags: span F1 is reported beside accuracy
    metric: str = "accuracy"  # another muppets.metrics name (e.g. mcc) is reported beside accuracy


@dataclass
class ProbeCorpus:
    """Sentences (split -> list of words) and the tasks annotated on them."""

    name: str
    sentences: dict[str, list[list[str]]]
    tasks: dict[str, WordTask] = field(default_factory=dict)
    trees: dict[str, list[UDSentence]] | None = None  # UD corpora: heads and UPOS for the structural probe
    dropped: dict[str, int] = field(default_factory=dict)  # split -> sentences left out (too long)
    unit: str = "word"  # word: a label per word | sentence: one per text | pair: one per text pair (probe_sentences)
    selection: str = "dev"  # what the probes are chosen on (sentence tasks may hold a train slice out)
    truncated: dict[str, int] = field(default_factory=dict)  # split -> examples cut to fit (sentence and pair tasks)
    second: dict[str, list[list[str]]] | None = None  # pair tasks: each example's second text (words)

    def subset(self, keep: Mapping[str, Sequence[int]]) -> ProbeCorpus:
        """The same corpus with only the sentences ``keep[split]`` (indices, in order)."""
        def pick(rows: Sequence, split: str) -> list:
            return [rows[i] for i in keep[split]] if split in keep else list(rows)

        tasks = {name: dataclasses.replace(t, tags={s: pick(v, s) for s, v in t.tags.items()})
                 for name, t in self.tasks.items()}
        trees = None if self.trees is None else {s: pick(v, s) for s, v in self.trees.items()}
        sentences = {s: pick(v, s) for s, v in self.sentences.items()}
        second = None if self.second is None else {s: pick(v, s) for s, v in self.second.items()}
        return ProbeCorpus(self.name, sentences, tasks, trees, dict(self.dropped), self.unit, self.selection,
                           dict(self.truncated), second)

    def stats(self) -> dict:
        out = {s: {"sentences": len(v), "words": sum(map(len, v)), "dropped_too_long": self.dropped.get(s, 0)}
               for s, v in self.sentences.items()}
        if self.second is not None:
            for s, v in self.second.items():
                out[s]["words"] += sum(map(len, v))
        if self.unit != "word":
            for s in out:
                out[s]["truncated"] = self.truncated.get(s, 0)
        return out


def tree_task(corpus: str) -> str:
    """The structural-probe task of a corpus with trees (``structural`` for EWT and any other)."""
    return next((task for task, name in STRUCTURAL.items() if name == corpus), "structural")


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


def load_ud_trees(corpus: str, data_dir: str | Path | None = None) -> dict[str, list[UDSentence]]:
    """The train / dev / test trees of a UD corpus: ``ewt`` as published; ``gsd`` from its dev
    (four of every five sentences train, every fifth selects) and test files."""
    base = Path(data_dir) if data_dir is not None else shared_data_dir()
    if corpus == "ewt":
        return load_ud(base / EWT_DIR, SPLITS)
    staged = load_ud(base / GSD_DIR, ("dev", "test"))
    dev = staged["dev"]
    return {"train": [t for i, t in enumerate(dev) if i % GSD_SELECT_EVERY != GSD_SELECT_EVERY - 1],
            "dev": [t for i, t in enumerate(dev) if i % GSD_SELECT_EVERY == GSD_SELECT_EVERY - 1],
            "test": staged["test"]}


def load_ud_corpus(corpus: str, names: Sequence[str], data_dir: str | Path | None = None,
                   deprel_subtypes: bool = False) -> ProbeCorpus:
    """A UD corpus (``ewt`` or ``gsd``) with the ``names`` tasks (its UPOS, relation and tree tasks)."""
    trees = load_ud_trees(corpus, data_dir)
    sentences = {s: [t.words for t in trees[s]] for s in SPLITS}
    out = ProbeCorpus(corpus, sentences, trees=trees)
    for name in names:
        kind = name.removeprefix("zh-")
        if kind == "upos":
            tags = {s: [list(t.upos) for t in trees[s]] for s in SPLITS}
        elif kind == "deprel":
            tags = {s: [[r if deprel_subtypes else r.split(":")[0] for r in t.deprels] for t in trees[s]]
                    for s in SPLITS}
        else:
            continue  # the tree task reads ``trees``
        out.tasks[name] = WordTask(name, corpus, _label_set(tags), tags, spans=False)
    return out


def load_corpora(tasks: Sequence[str], data_dir: str | Path | None = None,
                 deprel_subtypes: bool = False) -> dict[str, ProbeCorpus]:
    """The corpora the ``tasks`` need, each with those of its tasks that were asked for."""
    from muppets.analysis.probe_sentences import is_sentence_task, load_sentence_corpus

    unknown = [t for t in tasks if t not in TASKS and not is_sentence_task(t)]
    if unknown or not tasks:
        raise ConfigError(f"probe tasks {list(tasks)}: choose from {', '.join(TASKS)}, or a sentence or pair task "
                          "(a classify or pair task such as sst2, cola, chnsenticorp, mrpc, rte)")
    out = {}
    conll = [t for t in tasks if CORPUS_OF.get(t) == "conll2003"]
    if conll:
        out["conll2003"] = load_conll2003_corpus(conll, data_dir)
    for corpus in ("ewt", "gsd"):
        names = [t for t in tasks if CORPUS_OF.get(t) == corpus]
        if names:
            out[corpus] = load_ud_corpus(corpus, names, data_dir, deprel_subtypes)
    for name in tasks:
        if name not in TASKS:
            out[name] = load_sentence_corpus(name, data_dir)
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
