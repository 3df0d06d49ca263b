"""Sentence and pair tasks for the probes: which layer of a frozen model holds a text's label.

A sentence task is any registered single-text ``classify`` task of :func:`muppets.tasks.load_task`
(``sst2``, ``cola``, ``mr``, ``youtube-spam``, ``chnsenticorp``); a pair task any ``pair`` task
(``mrpc``, ``rte``, ``qnli``, ``xnli-<lang>``, ``pawsx-<lang>``). Either is read into a
:class:`~muppets.analysis.probe_data.ProbeCorpus` with ``unit="sentence"`` or ``"pair"``: the
corpus's sentences are the (first) texts split into words, ``second`` holds a pair's second
texts, and its one task gives each example one label. The probes then see one vector per text,
the mean of its words' vectors at a layer
(:func:`~muppets.analysis.probe_features.load_sentence_split`; each text of a pair is embedded
alone), a pair as ``[u, v, |u − v|, u ⊙ v]`` of its two texts' vectors (InferSent's and
SentEval's pair features, :func:`~muppets.analysis.probe_features.pair_features`). They are the
word probes (linear or MLP, early stopping and the best layer chosen on the selection split):
an example is a "sentence" of one "word", trained in steps of ``sentence_batch_size``
texts (64: a task of a few thousand texts in steps of 512 would stop at the epoch cap before
its probe fits). Beside accuracy they report the task's own metric when it is another (MCC for
CoLA).

The splits are fine-tuning's (:func:`muppets.transfer.finetune.selection_split` with its default
settings): a task with a labelled dev and a labelled test split trains on train, selects on dev
and reports test (ChnSentiCorp, YouTube spam); otherwise a stratified 10% slice of train, the one
fine-tuning selects on, selects and the labelled test split, or else dev, is reported (SST-2,
CoLA, MR). The probe is never chosen on the split it reports.

Words: the text split on whitespace, every CJK character a word of its own (as BERT's basic
tokenizer does for Chinese). Punctuation stays attached, as feature-based transfer reads a text
(:func:`muppets.transfer.feature_based.sentence_words`), so already tokenised text such as
SST-2's ``n't`` keeps its tokens; a sub-word model splits words into its pieces anyway. A text
longer than the model's positions keeps its longest word prefix that fits
(:func:`truncating_corpus`, counted in the report's ``data``); only a text whose first word alone
does not fit is left out (counted in ``dropped_too_long``).

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

from muppets.analysis.probe_data import ProbeCorpus, WordTask
from muppets.errors import ConfigError, DataError
from muppets.transfer.embed import truncate_to_limit
from muppets.tasks.spec import TaskData
from muppets.transfer.embedders import Embedder

log = logging.getLogger(__name__)

_CJK = BertNormalizer(handle_chinese_chars=True, strip_accents=False, lowercase=False)


def is_sentence_task(name: str) -> bool:
    """Whether ``name`` is a task :func:`muppets.tasks.load_task` knows; whether it is a single-text
    classify task is only known once it is read (:func:`load_sentence_corpus` checks)."""
    from muppets.tasks import list_tasks

    return name in list_tasks()


def split_words(text: str) -> list[str]:
    """``text`` split on whitespace, each CJK character a word (see the module docstring).

    >>> split_words("It's 好电影, really.")
    ["It's", '好', '电', '影', ',', 'really.']
    """
    return _CJK.normalize_str(text).split()


def load_sentence_corpus(name: str, data_dir: str | Path | None = None, data: TaskData | None = None) -> ProbeCorpus:
    """The sentence task ``name`` (or ``data``, a task already in memory) as a one-task corpus,
    split as the module docstring says.

    Raises:
        ConfigError: the task is not a single-text ``classify`` task, or has nothing to report.
        DataError: a text has no words (naming its file and line).
    """
    from muppets.tasks import load_task
    from muppets.transfer.finetune import FinetuneConfig, labelled, selection_split

    data = data if data is not None else load_task(name, data_dir)
    spec = data.spec
    if spec.kind not in ("classify", "pair"):
        raise ConfigError(f"probe task {name!r} is a {spec.kind} task; sentence probes read classify tasks (sst2, "
                          "cola, mr, youtube-spam, chnsenticorp) and pair tasks (mrpc, rte, qnli, xnli-*, pawsx-*)")
    cfg = FinetuneConfig()  # its default selection settings
    train, mode, chosen, dev = selection_split(cfg, data)
    test = labelled(spec.kind, data.splits.get("test", []))
    if mode == "dev":  # a labelled dev and test split
        reported, selection = test, "dev"
    elif mode == "train-slice":
        reported = test or dev
        selection = (f"train-slice ({cfg.selection_fraction:g} of train, seed {cfg.selection_seed}); "
                     f"reported: {'test' if test else 'dev'}")
    else:
        raise ConfigError(f"probe task {name!r}: fine-tuning's selection resolved to {mode!r}")
    if not reported:
        raise ConfigError(f"probe task {name!r} has no labelled dev or test split to report")
    examples = {"train": train, "dev": chosen, "test": reported}
    pair = spec.kind == "pair"

    def words_of(ex, text: str | None) -> list[str]:
        words = split_words(text or "")
        if not words:
            raise DataError(f"probe task {name!r}: {ex.source}: the text {text!r} has no words")
        return words

    sentences = {s: [words_of(ex, ex.text) for ex in rows] for s, rows in examples.items()}
    second = {s: [words_of(ex, ex.text_b) for ex in rows] for s, rows in examples.items()} if pair else None
    tags = {s: [[str(ex.label)] for ex in rows] for s, rows in examples.items()}
    task = WordTask(name, name, list(spec.labels), tags, spans=False, metric=spec.metric)
    corpus = ProbeCorpus(name, sentences, {name: task}, unit="pair" if pair else "sentence", selection=selection,
                         second=second)
    log.info("sentence task %s: %s", name, ", ".join(f"{s} {len(v)}" for s, v in sentences.items()))
    return corpus


def majority_accuracy(task: WordTask) -> float:
    """The reported split's accuracy of always answering train's most frequent label."""
    majority = Counter(tags[0] for tags in task.tags["train"]).most_common(1)[0][0]
    test = task.tags["test"]
    return sum(tags[0] == majority for tags in test) / max(len(test), 1)


def _cut(embedder: Embedder, rows: Sequence[Sequence[str]],
         limit: int) -> tuple[list[list[str]], list[bool], list[bool]]:
    """Each text cut to fit: the texts, whether each now fits, whether each was cut."""
    before = embedder.positions(rows)
    cut, lengths = truncate_to_limit(embedder, rows, before, limit)
    return [list(w) for w in cut], [0 < n <= limit for n in lengths], [n > limit for n in before]


def truncating_corpus(corpus: ProbeCorpus, embedder: Embedder) -> ProbeCorpus:
    """``corpus`` with each text (both texts of a pair: each is embedded alone) cut to its longest
    word prefix within the model's positions (an example with a cut text is counted in
    ``truncated``); an example with a text whose first word alone does not fit is left out
    (counted in ``dropped``). A model without a position limit gets the corpus back as it is."""
    limit = embedder.max_positions
    if limit is None:
        return corpus
    parts = [corpus.sentences] + ([corpus.second] if corpus.second is not None else [])
    texts: list[dict[str, list[list[str]]]] = [{} for _ in parts]
    keep: dict[str, list[int]] = {}
    truncated: dict[str, int] = {}
    for split in corpus.sentences:
        cuts = [_cut(embedder, part[split], limit) for part in parts]
        for target, (rows, _, _) in zip(texts, cuts):
            target[split] = rows
        n = len(corpus.sentences[split])
        keep[split] = [i for i in range(n) if all(fits[i] for _, fits, _ in cuts)]
        truncated[split] = sum(1 for i in keep[split] if any(was[i] for _, _, was in cuts))
    out = ProbeCorpus(corpus.name, texts[0], corpus.tasks, corpus.trees, unit=corpus.unit,
                      selection=corpus.selection, second=texts[1] if len(texts) > 1 else None).subset(keep)
    out.dropped = {s: len(corpus.sentences[s]) - len(keep[s]) for s in corpus.sentences}
    out.truncated = truncated
    for s, n in out.dropped.items():
        if n:
            log.warning("%s %s: %d text(s) whose first word alone exceeds the model's %d positions left out",
                        corpus.name, s, n, limit)
    return out
