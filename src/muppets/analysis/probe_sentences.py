"""Sentence tasks for the probes: which layer of a frozen model holds a sentence's label.

A sentence task is any registered single-text ``classify`` task of :func:`muppets.tasks.load_task`
(``sst2``, ``cola``, ``mr``, ``youtube-spam``, ``chnsenticorp``). It is read into a
:class:`~muppets.analysis.probe_data.ProbeCorpus` with ``unit="sentence"``: the corpus's
sentences are the texts split into words, and its one task gives each sentence one label. The
probes then see one vector per sentence — the mean of its words' vectors at a layer
(:func:`~muppets.analysis.probe_features.load_sentence_split`) — and are the word probes'
(linear or MLP, early stopping and the best layer chosen on the selection split), so a sentence
task is a word task whose sentences have one "word" each.

Splits follow fine-tuning's ``auto`` selection (:mod:`muppets.transfer.selection`): a task with a
labelled dev and test split trains on train, selects on dev and reports test (ChnSentiCorp,
YouTube spam); a task without a labelled test split holds a stratified slice of train out to
select on — the slice fine-tuning selects on (:class:`~muppets.transfer.finetune.FinetuneConfig`'s
``selection_fraction`` and ``selection_seed``) — and reports dev (SST-2, CoLA, MR). The probe is
never chosen on the split it reports.

Words: BERT's pre-tokenizer (whitespace and punctuation) after every CJK character is made a
word of its own, as BERT's basic tokenizer does; the model then splits words into its pieces.
A text longer than the model's positions keeps its longest word prefix that fits
(:func:`truncating_corpus`; counted in the report's ``data``), so no reported example is left
out; one whose first word alone does not fit is left out and counted in ``dropped_too_long``.

There is no control task here: Hewitt & Liang's control tasks give each word TYPE a label, which
has no sentence counterpart. The baselines are the randomly initialised encoder and the
majority class of train (``majority_accuracy`` in the task's header).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from muppets.analysis.probe_data import SPLITS, ProbeCorpus, WordTask
from muppets.errors import ConfigError, DataError
from muppets.transfer.embed import truncate_to_limit
from muppets.transfer.embedders import Embedder

log = logging.getLogger(__name__)

_CJK = BertNormalizer(handle_chinese_chars=True, strip_accents=False, lowercase=False)
_PRE = BertPreTokenizer()


def is_sentence_task(name: str) -> bool:
    """Whether ``name`` is a task :func:`muppets.tasks.load_task` knows (its kind is checked on loading)."""
    from muppets.tasks import list_tasks

    return name in list_tasks()


def split_words(text: str) -> list[str]:
    """``text`` as BERT's basic tokenizer splits it before word pieces (case and accents kept).

    >>> split_words("It's 好电影, really.")
    ['It', "'", 's', '好', '电', '影', ',', 'really', '.']
    """
    return [word for word, _ in _PRE.pre_tokenize_str(_CJK.normalize_str(text))]


def load_sentence_corpus(name: str, data_dir: str | Path | None = None, selection_fraction: float | None = None,
                         selection_seed: int | None = None) -> ProbeCorpus:
    """The sentence task ``name`` as a one-task corpus (splits as the module docstring says).

    ``selection_fraction`` / ``selection_seed`` default to fine-tuning's.

    Raises:
        ConfigError: the task is not a single-text ``classify`` task.
        DataError: a text has no words (naming its file and line).
    """
    from muppets.tasks import load_task
    from muppets.transfer.finetune import FinetuneConfig
    from muppets.transfer.selection import select

    data = load_task(name, data_dir)
    spec = data.spec
    if spec.kind != "classify":
        raise ConfigError(f"probe task {name!r} is a {spec.kind} task; sentence probes read single-text "
                          "classify tasks (sst2, cola, mr, youtube-spam, chnsenticorp)")
    defaults = FinetuneConfig()
    fraction = defaults.selection_fraction if selection_fraction is None else selection_fraction
    seed = defaults.selection_seed if selection_seed is None else selection_seed
    labelled = {s: list(data.splits.get(s, [])) for s in SPLITS}
    labelled = {s: rows for s, rows in labelled.items() if rows and all(ex.label is not None for ex in rows)}
    if "train" not in labelled or not ({"dev", "test"} & set(labelled)):
        raise ConfigError(f"probe task {name!r} needs a labelled train split and a labelled dev or test split, "
                          f"has {sorted(labelled)}")
    if "dev" in labelled and "test" in labelled:
        examples = {"train": labelled["train"], "dev": labelled["dev"], "test": labelled["test"]}
        selection = "dev"
    else:
        train = labelled["train"]
        sel = select("train-slice", "classify", [ex.label for ex in train], 0, fraction, seed)
        reported = "test" if "test" in labelled else "dev"
        examples = {"train": [train[i] for i in sel.train], "dev": [train[i] for i in sel.select],
                    "test": labelled[reported]}
        selection = f"train-slice ({fraction:g} of train, seed {seed}); reported: {reported}"
    sentences: dict[str, list[list[str]]] = {}
    for split, rows in examples.items():
        sentences[split] = []
        for ex in rows:
            if ex.text_b is not None:
                raise ConfigError(f"probe task {name!r}: {ex.source} holds a text pair; sentence probes read one text")
            words = split_words(ex.text)
            if not words:
                raise DataError(f"probe task {name!r}: {ex.source}: the text {ex.text!r} has no words")
            sentences[split].append(words)
    tags = {s: [[str(ex.label)] for ex in rows] for s, rows in examples.items()}
    task = WordTask(name, name, list(spec.labels), tags, spans=False)
    corpus = ProbeCorpus(name, sentences, {name: task}, unit="sentence", selection=selection)
    log.info("sentence task %s: %s", name, ", ".join(f"{s} {len(v)}" for s, v in sentences.items()))
    return corpus


def majority_accuracy(task: WordTask) -> float:
    """The reported split's accuracy of always answering train's most frequent label."""
    majority = Counter(tags[0] for tags in task.tags["train"]).most_common(1)[0][0]
    test = task.tags["test"]
    return sum(tags[0] == majority for tags in test) / max(len(test), 1)


def truncating_corpus(corpus: ProbeCorpus, embedder: Embedder) -> ProbeCorpus:
    """``corpus`` with each text cut to its longest word prefix within the model's positions
    (counted in ``truncated``); a text whose first word alone does not fit is left out (counted
    in ``dropped``). A model without a position limit gets the corpus back as it is."""
    limit = embedder.max_positions
    if limit is None:
        return corpus
    sentences: dict[str, list[Sequence[str]]] = {}
    keep: dict[str, list[int]] = {}
    truncated: dict[str, int] = {}
    for split, rows in corpus.sentences.items():
        before = embedder.positions(rows)
        cut, lengths = truncate_to_limit(embedder, rows, before, limit)
        sentences[split] = cut
        keep[split] = [i for i, n in enumerate(lengths) if 0 < n <= limit]
        truncated[split] = sum(1 for i in keep[split] if before[i] > limit)
    out = ProbeCorpus(corpus.name, {s: [list(w) for w in v] for s, v in sentences.items()}, corpus.tasks,
                      corpus.trees, unit=corpus.unit, selection=corpus.selection).subset(keep)
    out.dropped = {s: len(corpus.sentences[s]) - len(keep[s]) for s in corpus.sentences}
    out.truncated = truncated
    for s, n in out.dropped.items():
        if n:
            log.warning("%s %s: %d text(s) whose first word alone exceeds the model's %d positions left out",
                        corpus.name, s, n, limit)
    return out
