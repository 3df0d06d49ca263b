"""``muppets probe``: what each layer of a frozen backbone knows, measured with small probes.

For a model (BERT / MiniLM, GPT, ELMo, static vectors: anything ``muppets embed`` reads),
:func:`run_probing`

1. reads the corpora of the asked tasks (:mod:`~muppets.analysis.probe_data`: CoNLL-2003 POS,
   chunk and NER; UD English EWT UPOS, relation labels and trees), optionally a seeded sample
   of ``max_train_sentences`` (and ``max_eval_sentences``); sentences longer than the model's
   positions are left out and counted; sentence tasks (one label per text: SST-2, CoLA,
   ChnSentiCorp …, :mod:`~muppets.analysis.probe_sentences`) cut a long text to what fits instead
   and select on a slice of train when they have no labelled test split;
2. embeds every split once, every layer, and caches it
   (:mod:`~muppets.analysis.probe_features`); with ``random_baseline`` also with a randomly
   initialised encoder of the same architecture;
3. per word task: a probe per layer (linear, or an MLP with ``probe=mlp``) and a scalar-mix
   probe over the layers (Tenney et al. 2019a), each stopped early on dev and reported on
   test; the best layer is the one with the best dev accuracy; the mix gives its weights, ``γ``
   and the expected layer ``E[l] = Σ_l l · s_l``; with ``control`` each probe is trained again
   on the task's control task (Hewitt & Liang 2019) and ``selectivity = accuracy − control
   accuracy``; BIO tasks (chunk, NER) also report span F1 of the word-level tags; with
   ``cumulative`` also Tenney et al.'s cumulative scoring: a mix probe over the lowest layers
   ``0..l`` for every ``l``, the test gain ``Δ(l)`` of each added layer and the expected layer
   ``E_Δ[l]`` (on accuracy, and on span F1 for BIO tasks); a sentence task is probed the same
   way on one vector per text (the mean of its words'), a pair task on ``[u, v, |u − v|, u ⊙ v]``
   of its two texts' vectors, with no control task;
4. structural: the structural probe per layer (Hewitt & Manning 2019,
   :mod:`~muppets.analysis.structural_probe`): test UUAS and DSpr.;
5. writes ``probe.json`` and the plots (:mod:`~muppets.analysis.probe_plots`) in ``out``.

Everything is seeded from ``seed``: the same command gives the same numbers on CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from muppets.config import write_json_atomic
from muppets.errors import ConfigError
from muppets.metrics import compute, entity_f1
from muppets.analysis.probe_data import (ENGLISH_TASKS, SPLITS, STRUCTURAL, TASKS, ProbeCorpus, WordTask, control_task,
                                         load_corpora, sample_indices, tree_task)
from muppets.analysis.probe_features import (ProbeFeatureSource, SplitFeatures, Standardizer, fits, load_sentence_split,
                                             load_split, pair_features)
from muppets.analysis.probe_sentences import is_sentence_task, majority_accuracy, truncating_corpus
from muppets.analysis.probe_models import (LOGISTIC_C, PROBE_KINDS, LogisticFit, MixProbe, Stopping,
                                           differential_expected_layer, expected_layer, fit_logistic, make_probe,
                                           train_early_stopping)
from muppets.analysis import structural_probe as sp

log = logging.getLogger(__name__)

ENCODERS = ("pretrained", "random_encoder")


@dataclass
class ProbeConfig:
    model: str = "minilm"  # backbone: HF BERT/GPT dir, minilm, ELMo/NNLM/word2vec run, or a vector file
    tasks: str = ",".join(ENGLISH_TASKS)  # comma-separated: pos, chunk, ner (CoNLL-2003), upos, deprel, structural (EWT); zh-upos, zh-deprel, zh-structural (UD Chinese GSDSimp)
    layers: str = "all"  # layers probed one by one: all, or numbers like 0,2,-1 (the mix uses the same ones)
    random_baseline: bool = True  # also probe a randomly initialised encoder of the same architecture
    control: bool = True  # word tasks: also train on the control task -> selectivity (pretrained model)
    mix: bool = True  # word tasks: a scalar-mix probe over the layers (weights, gamma, expected layer)
    cumulative: bool = False  # word tasks: cumulative scoring (a mix over layers 0..l for every l; Δ(l), E_Δ[l])
    probe: str = "linear"  # linear (softmax, Adam) | mlp (one hidden ReLU layer) | logistic (L2 optimum, C on dev;
    # its mix probe trains as linear, and weight_decay applies to that mix only)
    hidden: int = 256  # mlp: hidden units
    dropout: float = 0.0  # mlp: dropout after the hidden layer
    lr: float = 1e-3  # Adam learning rate (word probes and the structural probe)
    mix_lr: float = 1e-2  # Adam learning rate of the mix logits and gamma (see probe_models.Stopping)
    weight_decay: float = 0.0  # Adam weight decay (L2) of the word probes
    batch_size: int = 512  # word probes: words per step
    sentence_batch_size: int = 64  # sentence tasks: texts per step (a few thousand texts need more, smaller steps)
    max_epochs: int = 20  # word probes: epochs at most
    patience: int = 3  # epochs without a better dev score before stopping
    rank: int = 128  # structural probe: rank k of B (at most the model's width)
    tree_batch_size: int = 20  # structural probe: sentences per step
    tree_epochs: int = 30  # structural probe: epochs at most (lr / 10 at each epoch without progress)
    max_train_sentences: int = 0  # a seeded sample of the train sentences per corpus (0 = all)
    max_eval_sentences: int = 0  # the same for dev and test (0 = all; smoke tests only)
    deprel_subtypes: bool = False  # deprel: keep subtypes (nmod:poss) instead of the universal relation
    pooling: str = "auto"  # sub-word models: auto (last piece for GPT, first for BERT) | first | mean | last
    cache_dir: str = "runs/probe/cache"  # embedded splits, shared by every probing run
    cache_dtype: str = "float16"  # float16 (half the memory) | float32
    embed_batch_size: int = 32  # sentences per backbone forward pass
    data_dir: str = ""  # the shared data folder ("" = the default)
    out: str = ""  # "" = runs/probe/<model name>
    seed: int = 0  # one seed for samples, control tasks, random encoders and probes
    progress: bool = False  # progress bars while embedding

    def __post_init__(self) -> None:
        counts = {"max_train_sentences": 0, "max_eval_sentences": 0, "hidden": 1, "rank": 1, "max_epochs": 1,
                  "batch_size": 1, "sentence_batch_size": 1, "tree_batch_size": 1, "tree_epochs": 1,
                  "embed_batch_size": 1, "patience": 1}  # patience, max_epochs: probe_models.Stopping's rules
        for name, least in counts.items():
            if getattr(self, name) < least:
                raise ConfigError(f"{name}: {getattr(self, name)!r} must be >= {least}", key=name)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout: {self.dropout!r} must be in [0, 1)", key="dropout")
        for name, ok, rule in (("lr", self.lr > 0, "> 0"), ("mix_lr", self.mix_lr >= 0, ">= 0")):  # Stopping's, Adam's
            if not ok:
                raise ConfigError(f"{name}: {getattr(self, name)!r} must be {rule}", key=name)

    def task_list(self) -> list[str]:
        names = [t.strip() for t in self.tasks.split(",") if t.strip()]
        bad = [t for t in names if t not in TASKS and not is_sentence_task(t)]
        if bad or not names:
            raise ConfigError(f"probe tasks {self.tasks!r}: choose from {', '.join(TASKS)}, or a sentence or pair "
                              "task (a classify or pair task such as sst2, cola, chnsenticorp, mrpc, rte)")
        return list(dict.fromkeys(names))

    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs/probe") / Path(str(self.model).rstrip("/")).name


def _seed(*parts: object) -> int:
    """A stable seed from parts (crc32 of their text)."""
    return zlib.crc32("/".join(map(str, parts)).encode("utf-8"))


def choose_layers(spec: str, layers: Sequence[int]) -> list[int]:
    """Positions in ``layers`` (the model's layer numbers) of ``spec``: ``all`` or numbers
    (negative from the top).

    >>> choose_layers("all", [0, 1, 2]), choose_layers("0,-1", [0, 1, 2, 3])
    ([0, 1, 2], [0, 3])
    """
    if spec.strip() in ("", "all"):
        return list(range(len(layers)))
    out = []
    for part in spec.split(","):
        try:
            k = int(part)
        except ValueError:
            raise ConfigError(f"layers={spec!r}: expected 'all' or comma-separated layer numbers") from None
        if not -len(layers) <= k < len(layers):
            raise ConfigError(f"layers={spec!r}: layer {k} is outside the model's {len(layers)} layers")
        out.append(k % len(layers))
    return sorted(set(out))


# ----------------------------------------------------------------------------- word tasks


@dataclass
class WordSplits:
    """A corpus's features per split, their standardiser, and the probe settings."""

    features: Mapping[str, SplitFeatures]
    standardizer: Standardizer
    cfg: ProbeConfig

    def rows(self, split: str, slots: Sequence[int], index: torch.Tensor) -> torch.Tensor:
        return self.standardizer.rows(self.features[split], slots, index)  # (B, K', D)


def _label_ids(task: WordTask, split: str) -> torch.Tensor:
    index = {label: i for i, label in enumerate(task.labels)}
    return torch.tensor([index[t] for sent in task.tags[split] for t in sent], dtype=torch.long)


def _predict(probe: MixProbe, data: WordSplits, split: str, slots: Sequence[int], chunk: int = 8192) -> torch.Tensor:
    n = data.features[split].num_words
    with torch.no_grad():
        return torch.cat([probe(data.rows(split, slots, torch.arange(s, min(s + chunk, n)))).argmax(-1)
                          for s in range(0, n, chunk)])


def _span_f1(task: WordTask, predicted: torch.Tensor, lengths: Sequence[int]) -> float:
    labels = [task.labels[i] for i in predicted.tolist()]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    sentences = [labels[offsets[i]: offsets[i + 1]] for i in range(len(lengths))]
    return float(entity_f1(sentences, task.tags["test"])["f1"])


def fit_word_probe(task: WordTask, data: WordSplits, slots: Sequence[int], seed: int) -> dict:
    """Train one probe on ``slots`` (one layer, or several mixed) with early stopping on dev
    accuracy (``probe=logistic`` on one layer: to its optimum for each ``C`` of
    :data:`~muppets.analysis.probe_models.LOGISTIC_C`, the best on dev kept); its test accuracy
    (and span F1 for BIO tasks; the task's own metric; mix weights for a mix)."""
    cfg = data.cfg
    y = {s: _label_ids(task, s) for s in SPLITS}
    torch.manual_seed(seed)
    dim = data.features["train"].vectors.shape[-1]
    if cfg.probe == "logistic" and len(slots) == 1:
        probe, out = _fit_logistic_probe(task, data, slots, y)
    else:
        probe = make_probe(cfg.probe, len(slots), dim, len(task.labels), cfg.hidden, cfg.dropout)

        def losses(generator: torch.Generator):
            for index in torch.randperm(len(y["train"]), generator=generator).split(cfg.batch_size):
                yield F.cross_entropy(probe(data.rows("train", slots, index)), y["train"][index])

        def dev_accuracy() -> float:
            return float((_predict(probe, data, "dev", slots) == y["dev"]).float().mean())

        stopping = Stopping(cfg.lr, cfg.weight_decay, cfg.max_epochs, cfg.patience, mix_lr=cfg.mix_lr)
        fitted = train_early_stopping(probe, losses, dev_accuracy, stopping, seed)
        out = {"dev_accuracy": fitted.dev_score, "epochs": fitted.epochs, "best_epoch": fitted.best_epoch,
               "estimator": "mlp" if cfg.probe == "mlp" else "linear"}  # a logistic run's mix: linear
    predicted = _predict(probe, data, "test", slots)
    out = {"accuracy": float((predicted == y["test"]).float().mean()), **out}
    if task.metric != "accuracy":  # on label ids: for f1 the positive class is the second label
        scores = compute(task.metric, predicted.tolist(), y["test"].tolist())
        out.update({k: v for k, v in scores.items() if k != "accuracy"})
    if task.spans:
        out["span_f1"] = _span_f1(task, predicted, data.features["test"].lengths)
    if len(slots) > 1:
        layers = [data.features["train"].layers[k] for k in slots]
        weights = probe.mix_weights()
        out.update(weights=weights, gamma=probe.gamma(), mixed_layers=layers,
                   expected_layer=expected_layer(weights, layers))
    return out


def _fit_logistic_probe(task: WordTask, data: WordSplits, slots: Sequence[int], y: Mapping[str, torch.Tensor]
                        ) -> tuple[MixProbe, dict]:
    """One layer's logistic probe for every ``C`` of the grid, fitted on train; the one with
    the best dev accuracy (a tie: the smaller ``C``, the stronger penalty) and what it scored."""
    x = {s: data.rows(s, slots, torch.arange(len(y[s])))[:, 0] for s in ("train", "dev")}  # (N, D) each
    best: tuple[float, float, MixProbe, LogisticFit] | None = None
    for c in LOGISTIC_C:
        fitted, fit = fit_logistic(x["train"], y["train"], len(task.labels), c)
        with torch.no_grad():
            dev = float((fitted(x["dev"]).argmax(-1) == y["dev"]).float().mean())
        if best is None or dev > best[0]:
            probe = MixProbe(1, x["train"].shape[1], len(task.labels))
            probe.probe = fitted
            best = (dev, c, probe, fit)
    assert best is not None
    dev, c, probe, fit = best
    return probe.eval(), {"dev_accuracy": dev, "C": c, "estimator": "logistic", "iterations": fit.iterations,
                          "converged": fit.converged}


def probe_word_task(task: WordTask, control: WordTask | None, data: WordSplits, slots: Sequence[int],
                    tag: str, cumulative: bool = False) -> dict:
    """Per layer (and the mix) of one encoder: test accuracy, and with a ``control`` task the
    control accuracy and selectivity; the best layer by dev accuracy; with ``cumulative`` the
    cumulative scores (:func:`cumulative_scores`)."""
    cfg = data.cfg
    layers = data.features["train"].layers
    per_layer = []
    for k in slots:
        row = {"layer": layers[k], **fit_word_probe(task, data, [k], _seed(cfg.seed, tag, task.name, layers[k]))}
        if control is not None:
            c = fit_word_probe(control, data, [k], _seed(cfg.seed, tag, control.name, layers[k]))
            row.update(control_accuracy=c["accuracy"], selectivity=row["accuracy"] - c["accuracy"])
        per_layer.append(row)
        log.info("%s %s layer %d: test accuracy %.4f%s", tag, task.name, layers[k], row["accuracy"],
                 f", selectivity {row['selectivity']:.4f}" if control is not None else "")
    out = {"layers": per_layer, "best_layer": max(per_layer, key=lambda r: r["dev_accuracy"])}
    if cfg.mix and len(slots) > 1:
        mix = fit_word_probe(task, data, slots, _seed(cfg.seed, tag, task.name, "mix"))
        if control is not None:
            c = fit_word_probe(control, data, slots, _seed(cfg.seed, tag, control.name, "mix"))
            mix.update(control_accuracy=c["accuracy"], selectivity=mix["accuracy"] - c["accuracy"])
        out["mix"] = mix
        log.info("%s %s mix: test accuracy %.4f, expected layer %.2f", tag, task.name, mix["accuracy"],
                 mix["expected_layer"])
        if cumulative:
            out["cumulative"] = cumulative_scores(task, data, slots, per_layer[0], mix, tag)
    return out


def cumulative_scores(task: WordTask, data: WordSplits, slots: Sequence[int], lowest: dict, full: dict,
                      tag: str) -> dict:
    """Tenney et al. (2019a) cumulative scoring: a mix probe over ``slots[:i+1]`` for every ``i``
    (``slots`` are the layers ``0..l``; the lowest layer's own probe and the full mix are
    reused), and the expected layer of the test gains
    (:func:`~muppets.analysis.probe_models.differential_expected_layer`)."""
    cfg = data.cfg
    layers = [data.features["train"].layers[k] for k in slots]
    probes = [lowest]
    for i in range(1, len(slots) - 1):
        seed = _seed(cfg.seed, tag, task.name, "cumulative", layers[i])
        probes.append(fit_word_probe(task, data, slots[:i + 1], seed))
    probes.append(full)
    out = {"accuracy": differential_expected_layer([p["accuracy"] for p in probes], layers)}
    if task.spans:
        out["span_f1"] = differential_expected_layer([p["span_f1"] for p in probes], layers)
    log.info("%s %s cumulative: E_Δ[l] %.2f (accuracy)%s", tag, task.name, out["accuracy"]["expected_layer"],
             f", {out['span_f1']['expected_layer']:.2f} (span F1)" if task.spans else "")
    return out


# ----------------------------------------------------------------------------- structural probe


def _distances(corpus: ProbeCorpus, split: str) -> list[np.ndarray]:
    assert corpus.trees is not None
    return [sp.tree_distances(t.heads) for t in corpus.trees[split]]


def _predicted_distances(probe: sp.StructuralProbe, data: WordSplits, split: str, slot: int,
                         batches: Sequence[sp.TreeBatch]) -> list[np.ndarray]:
    """Per sentence (corpus order) the predicted ``(n, n)`` squared distances."""
    out: list[np.ndarray] = [np.zeros((0, 0))] * len(data.features[split].lengths)
    with torch.no_grad():
        for batch in batches:
            h = data.rows(split, [slot], batch.index.reshape(-1))[:, 0].reshape(*batch.index.shape, -1)  # (B, T, D)
            predicted = probe(h).numpy()
            for b, s in enumerate(batch.ids):
                n = int(batch.lengths[b])
                out[s] = predicted[b, :n, :n]
    return out


def fit_structural_probe(data: WordSplits, slot: int, batches: Mapping[str, list[sp.TreeBatch]], seed: int
                         ) -> tuple[sp.StructuralProbe, float]:
    """Train the structural probe on one layer (early stopping on dev loss); returns it and its dev loss."""
    cfg = data.cfg
    dim = data.features["train"].vectors.shape[-1]
    torch.manual_seed(seed)
    probe = sp.StructuralProbe(dim, min(cfg.rank, dim))

    def loss_of(batch: sp.TreeBatch, split: str) -> torch.Tensor:
        h = data.rows(split, [slot], batch.index.reshape(-1))[:, 0].reshape(*batch.index.shape, -1)  # (B, T, D)
        return sp.structural_loss(probe(h), batch.gold, batch.lengths)

    def losses(generator: torch.Generator):
        for batch in sp.shuffled(batches["train"], generator):
            yield loss_of(batch, "train")

    def dev_score() -> float:  # minus the mean dev loss per sentence
        total = sum(float(loss_of(b, "dev")) * len(b.ids) for b in batches["dev"])
        return -total / sum(len(b.ids) for b in batches["dev"])

    stopping = Stopping(cfg.lr, 0.0, cfg.tree_epochs, cfg.patience, lr_decay=True)
    fitted = train_early_stopping(probe, losses, dev_score, stopping, seed)
    return probe, -fitted.dev_score


def probe_structure(corpus: ProbeCorpus, data: WordSplits, slots: Sequence[int], tag: str) -> dict:
    """Per layer: the structural probe's test UUAS and DSpr. (and its dev loss); the best layer
    by dev loss."""
    cfg = data.cfg
    distances = {s: _distances(corpus, s) for s in SPLITS}
    batches = {s: sp.tree_batches(data.features[s].offsets(), distances[s], cfg.tree_batch_size) for s in SPLITS}
    punct = [[u == sp.PUNCT_UPOS for u in t.upos] for t in corpus.trees["test"]]  # type: ignore[index]
    layers = data.features["train"].layers
    rows = []
    for k in slots:
        probe, dev_loss = fit_structural_probe(data, k, batches, _seed(cfg.seed, tag, "structural", layers[k]))
        predicted = _predicted_distances(probe, data, "test", k, batches["test"])
        counts = [sp.uuas_counts(p, g, m) for p, g, m in zip(predicted, distances["test"], punct)]
        correct, total = sum(c for c, _ in counts), sum(t for _, t in counts)
        rows.append({"layer": layers[k], "uuas": correct / max(total, 1), "dspr": sp.distance_spearman(
            predicted, distances["test"]), "dev_loss": dev_loss, "rank": probe.proj.shape[1]})
        log.info("%s structural layer %d: UUAS %.4f, DSpr %.4f", tag, layers[k], rows[-1]["uuas"], rows[-1]["dspr"])
    return {"layers": rows, "best_layer": min(rows, key=lambda r: r["dev_loss"])}


# ----------------------------------------------------------------------------- the run


def limit_corpus(corpus: ProbeCorpus, cfg: ProbeConfig) -> ProbeCorpus:
    """A seeded sample of ``max_train_sentences`` / ``max_eval_sentences`` per split."""
    keep = {s: sample_indices(len(corpus.sentences[s]),
                              cfg.max_train_sentences if s == "train" else cfg.max_eval_sentences,
                              _seed(cfg.seed, corpus.name, s)) for s in SPLITS}
    return corpus.subset(keep)


def fitting_corpus(corpus: ProbeCorpus, source: ProbeFeatureSource) -> ProbeCorpus:
    """``corpus`` without the sentences longer than the model's positions (counted in ``dropped``)."""
    embedder = source.embedder()
    keep = {s: [i for i, ok in enumerate(fits(embedder, corpus.sentences[s])) if ok] for s in SPLITS}
    out = corpus.subset(keep)
    out.dropped = {s: len(corpus.sentences[s]) - len(keep[s]) for s in SPLITS}
    for s, n in out.dropped.items():
        if n:
            log.warning("%s %s: %d sentence(s) longer than the model's %s positions left out", corpus.name, s, n,
                        embedder.max_positions)
    return out


def split_features(source: ProbeFeatureSource, corpus: ProbeCorpus, split: str, tag: str) -> SplitFeatures:
    """What the probes of ``corpus`` read on ``split``: every word's vectors (word tasks), each
    text's mean vector (sentence tasks) or each pair's :func:`~muppets.analysis.probe_features.
    pair_features` (pair tasks); ``tag`` names the cache files."""
    if corpus.unit == "word":
        return load_split(source, corpus.sentences[split], f"{tag}-{split}")
    first = load_sentence_split(source, corpus.sentences[split], f"{tag}-{split}")
    if corpus.unit == "sentence":
        return first
    assert corpus.second is not None
    return pair_features(first, load_sentence_split(source, corpus.second[split], f"{tag}-{split}-second"))


def _probe_corpus(corpus: ProbeCorpus, source: ProbeFeatureSource, encoder: str, cfg: ProbeConfig,
                  report: dict) -> None:
    """Embed one corpus with one encoder and run every asked task on it into ``report``."""
    tag = f"probe-{corpus.name}" + ("-random" if source.random_seed is not None else "")
    features = {s: split_features(source, corpus, s, tag) for s in SPLITS}
    if corpus.unit != "word":
        cfg = dataclasses.replace(cfg, batch_size=cfg.sentence_batch_size)
    data = WordSplits(features, Standardizer(features["train"]), cfg)
    slots = choose_layers(cfg.layers, features["train"].layers)
    if cfg.cumulative and slots != list(range(len(slots))):
        raise ConfigError(f"cumulative scoring mixes layers 0..l: layers={cfg.layers!r} gives "
                          f"{[features['train'].layers[k] for k in slots]}; use all layers or 0,1,…,l")
    report["layers"] = features["train"].layers
    for name, task in corpus.tasks.items():
        control = None
        if cfg.control and encoder == "pretrained" and corpus.unit == "word":  # none for sentences or pairs
            control = control_task(task, corpus.sentences, _seed(cfg.seed, "control", name))
        report["tasks"][name][encoder] = probe_word_task(task, control, data, slots, f"{encoder}/{corpus.name}",
                                                         cumulative=cfg.cumulative and encoder == "pretrained")
    tree = tree_task(corpus.name)
    if tree in report["tasks"] and corpus.trees is not None:
        report["tasks"][tree][encoder] = probe_structure(corpus, data, slots, f"{encoder}/{corpus.name}")


def _task_headers(tasks: Sequence[str], corpora: Mapping[str, ProbeCorpus]) -> dict:
    out = {}
    for name in tasks:
        if name in STRUCTURAL:
            out[name] = {"corpus": next((c for c in corpora if tree_task(c) == name), STRUCTURAL[name]),
                         "metric": "uuas"}
            continue
        corpus = next(c for c in corpora.values() if name in c.tasks)
        task = corpus.tasks[name]
        out[name] = {"corpus": task.corpus, "metric": "accuracy", "labels": len(task.labels), "spans": task.spans,
                     "unit": corpus.unit, "selection": corpus.selection}
        if task.metric != "accuracy":
            out[name]["task_metric"] = task.metric
    return out


def probe_model(cfg: ProbeConfig, corpora: Mapping[str, ProbeCorpus]) -> dict:
    """The report of probing ``cfg.model`` on ``corpora`` (their tasks, and ``structural`` when
    asked and a corpus has trees): per encoder, per corpus, per task."""
    start = time.time()
    tasks = [t for t in cfg.task_list() if any(t in c.tasks for c in corpora.values())
             or any(c.trees is not None and tree_task(name) == t for name, c in corpora.items())]
    if cfg.probe not in PROBE_KINDS:
        raise ConfigError(f"probe={cfg.probe!r}: expected one of {', '.join(PROBE_KINDS)}")
    if cfg.cumulative and cfg.probe == "logistic":
        raise ConfigError("cumulative scoring compares mix probes with the lowest layer's probe: with probe=logistic "
                          "that layer would be fitted by another estimator than the mixes (use linear)")
    if cfg.cumulative and not cfg.mix:
        raise ConfigError("cumulative scoring is made of mix probes: it needs mix (drop --no-mix)")
    if cfg.cumulative and cfg.layers.strip() not in ("", "all"):  # before any embedding, not after the first corpus
        with contextlib.suppress(ValueError):  # not numbers: choose_layers names the problem
            numbers = sorted({int(part) for part in cfg.layers.split(",")})
            # a negative number counts from the top: known once the model is read, and checked then
            if numbers[0] >= 0 and numbers != list(range(len(numbers))):
                raise ConfigError(f"cumulative scoring mixes layers 0..l: layers={cfg.layers!r}; use all layers "
                                  "or 0,1,…,l")
    report: dict = {"model": cfg.model, "config": dataclasses.asdict(cfg), "encoders": {}, "data": {},
                    "tasks": _task_headers(tasks, corpora)}
    encoders = [("pretrained", None)] + ([("random_encoder", cfg.seed)] if cfg.random_baseline else [])
    for encoder, random_seed in encoders:
        source = ProbeFeatureSource(cfg.model, cache_dir=cfg.cache_dir, random_seed=random_seed, pooling=cfg.pooling,
                                    dtype=cfg.cache_dtype, batch_size=cfg.embed_batch_size, progress=cfg.progress)
        report["encoders"][encoder] = {**source.embedder().describe(), "random_init_seed": random_seed}
        for name, corpus in corpora.items():
            if corpus.unit != "word":
                corpus = truncating_corpus(corpus, source.embedder())
                for task_name, task in corpus.tasks.items():  # on the texts the probes report
                    report["tasks"][task_name]["majority_accuracy"] = majority_accuracy(task)
            else:
                corpus = fitting_corpus(corpus, source)
            report["data"][name] = corpus.stats()
            _probe_corpus(corpus, source, encoder, cfg, report)
    report["seconds"] = time.time() - start
    return report


def run_probing(cfg: ProbeConfig, overwrite: bool = False) -> dict:
    """Probe ``cfg.model`` on the shared data (see the module docstring); writes ``probe.json``
    and the plots in ``cfg.out_dir()`` and returns the report. A ``probe.json`` already there
    is replaced only by a run of the same settings, or with ``overwrite``."""
    if not overwrite:
        check_report_target(cfg)
    corpora = {n: limit_corpus(c, cfg) for n, c in load_corpora(cfg.task_list(), cfg.data_dir or None,
                                                                  cfg.deprel_subtypes).items()}
    report = probe_model(cfg, corpora)
    write_report(report, cfg.out_dir())
    return report


# settings that change where a report goes, how fast it is made or how it is shown, not its figures
_REPORT_NEUTRAL = ("out", "cache_dir", "embed_batch_size", "progress")


def check_report_target(cfg: ProbeConfig) -> None:
    """Raise :class:`ConfigError`, before anything is computed, when ``cfg.out_dir()`` holds a
    ``probe.json`` that is not a report of these settings (another run's, or a user's file)."""
    from muppets.train.rundir import changed_settings, describe

    done = cfg.out_dir() / "probe.json"
    if not done.exists():
        return
    try:
        saved = json.loads(done.read_text(encoding="utf-8")).get("config")
    except (OSError, ValueError, AttributeError):
        saved = None
    if not isinstance(saved, dict):
        raise ConfigError(f"{done} is not a probe report; it is left as it is: choose another --out folder")

    def comparable(settings: dict) -> dict:
        # settings added since the report was written count as their defaults; paths as absolute ones
        out = {**dataclasses.asdict(ProbeConfig()), **settings}
        for key in ("model", "data_dir"):
            if out[key] and Path(out[key]).exists():
                out[key] = str(Path(out[key]).resolve())
        return {k: v for k, v in out.items() if k not in _REPORT_NEUTRAL}

    changed = changed_settings(comparable(saved), comparable(dataclasses.asdict(cfg)))
    if changed:
        raise ConfigError(f"{done} holds the report of a run with other settings ({describe(changed)}); it is left "
                          f"as it is: pass --overwrite to replace it, or --out another folder")


def write_report(report: dict, out: Path) -> Path:
    """``probe.json`` and the plots (:mod:`~muppets.analysis.probe_plots`) in ``out``."""
    from muppets.analysis.probe_plots import plot_report

    out.mkdir(parents=True, exist_ok=True)
    report["plots"] = [str(p) for p in plot_report(report, out)]
    write_json_atomic(out / "probe.json", report)
    return out / "probe.json"
