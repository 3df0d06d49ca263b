"""Multilingual BERT pretraining: one corpus per language, a shared WordPiece vocabulary trained
on a smoothed language sample, and language-balanced batches.

``muppets pretrain configs/bert-mini-multilingual.yaml`` takes this path whenever
``corpus.languages`` is set (:func:`muppets.recipes.bert_pretrain.run` hands over to :func:`run`)::

    corpus:
      language_alpha: 0.7                 # p_l ∝ n_l^0.7 (multilingual BERT)
      languages:
        en: ["data:english-corpus/books", "data:english-corpus/wiki"]    # format auto
        zh: {inputs: ["data:chinese/corpus"], format: zhwiki}
        de: {inputs: ["data:multilingual-corpus/de"], format: novel-wrapped}
        fr: {inputs: ["data:multilingual-corpus/fr"], format: novel-lines}
        es: {inputs: ["data:multilingual-corpus/es"], format: novel-tei}

1. **Tokenizer** (unless ``tokenizer.path`` or ``model.init_from`` gives one): a WordPiece
   vocabulary trained on a :class:`~muppets.data.language_sampling.LanguageSample` of the
   languages' paragraphs (``corpus.language_sample`` units, default the corpus size; at most
   ``tokenizer.max_documents`` documents per language), CJK characters split one by one as
   BERT does; what was sampled per language is written to ``<run_dir>/language_sample.json``.
2. **Corpora**: each language is prepared on its own, into ``<run_dir>/languages/<lang>/corpus``
   (or ``<corpus.prepared>/<lang>``), reused when it exists for this tokenizer.
3. **Batches**: :class:`~muppets.objectives.multilingual.LanguageBalancedData` with
   ``p_l ∝ n_l^α``, ``n_l`` = the training tokens of language ``l``; held-out evaluation reads
   ``data.eval_examples / L`` held-out sequences of each language.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from muppets.config import write_json_atomic
from muppets.data.language_sampling import LanguageSample, smoothed_probabilities
from muppets.data.readers import FORMATS, iter_documents
from muppets.data.shards import TokenCorpus
from muppets.errors import ConfigError
from muppets.objectives.mlm import IGNORE
from muppets.objectives.mlm_nsp import BertPretrainingData
from muppets.objectives.multilingual import LanguageBalancedData, language_seed
from muppets.paths import resolve_data_path
from muppets.recipes.common import CorpusSection, prepare_once, rank_zero_first, seeded_model
from muppets.recipes.pretraining import Pretraining, held_out, train_and_export, unigram_scores

__all__ = ["language_sections", "tokenizer_sample", "open_languages", "balanced_data", "run", "LanguageCorpora"]

log = logging.getLogger(__name__)

SAMPLE_REPORT = "language_sample.json"


def language_sections(sec: CorpusSection) -> dict[str, CorpusSection]:
    """``corpus.languages`` as one corpus section per language (inputs, format; the rest shared)."""
    if not isinstance(sec.languages, dict) or not sec.languages:
        raise ConfigError("corpus.languages: expected a mapping {language: [inputs] or {inputs: [...], format: ...}}")
    out = {}
    for lang, spec in sec.languages.items():
        inputs, fmt = _language_spec(str(lang), spec, sec.format)
        if fmt not in FORMATS:
            raise ConfigError(f"corpus.languages.{lang}.format={fmt!r} is not one of {list(FORMATS)}")
        prepared = str(Path(sec.prepared) / str(lang)) if sec.prepared else ""
        out[str(lang)] = dataclasses.replace(sec, inputs=inputs, format=fmt, prepared=prepared, languages={})
    return out


def _language_spec(lang: str, spec: Any, default_format: str) -> tuple[list[str], str]:
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, list):
        return [str(p) for p in spec], default_format
    if isinstance(spec, dict) and set(spec) <= {"inputs", "format"} and spec.get("inputs"):
        inputs = spec["inputs"]
        return [str(p) for p in ([inputs] if isinstance(inputs, str) else inputs)], str(spec.get("format", default_format))
    raise ConfigError(f"corpus.languages.{lang}: expected a list of inputs or {{inputs: [...], format: ...}}, "
                      f"got {spec!r}")


def _paragraphs(sec: CorpusSection, max_documents: int):
    def read():
        for i, doc in enumerate(iter_documents([resolve_data_path(p) for p in sec.inputs], sec.format,
                                               errors=sec.errors)):
            if max_documents and i >= max_documents:
                return
            yield from doc.paragraphs
    return read


def tokenizer_sample(sec: CorpusSection, max_documents: int = 0, seed: int = 0) -> LanguageSample:
    """The smoothed sample of every language's paragraphs a shared vocabulary is trained on."""
    sources = {lang: _paragraphs(s, max_documents) for lang, s in language_sections(sec).items()}
    return LanguageSample(sources, sec.language_alpha, sec.language_sample, seed)


UNK_CHECK_PARAGRAPHS = 500  # each language's first paragraphs scored for [UNK] after training
UNK_WARNING = 0.01  # a language with more [UNK] pieces than this is worth a warning


def unk_share(tok: Any, texts: Iterable[str]) -> float:
    """The share of ``tok``'s pieces of ``texts`` that are ``[UNK]`` (0 when they have no piece)."""
    pieces = unknown = 0
    for ids in tok.encode_batch(list(texts)):
        pieces += len(ids)
        unknown += sum(i == tok.unk_id for i in ids)
    return unknown / pieces if pieces else 0.0


def write_sample_report(sample: LanguageSample, run_dir: Path, tok: Any = None) -> None:
    """``<run_dir>/language_sample.json``: n_l, p_l, rates and the units taken per language and,
    given the trained ``tok``, each language's ``unk_share`` on its first paragraphs (a vocabulary
    with no room for a script's characters, e.g. too small a ``tokenizer.limit_alphabet`` for
    Chinese, shows here and is warned about)."""
    report = sample.report()
    for lang, share in report["languages"].items():
        if tok is not None:
            share["unk_share"] = unk_share(tok, islice(sample.sources[lang](), UNK_CHECK_PARAGRAPHS))
            if share["unk_share"] > UNK_WARNING:
                log.warning("the trained vocabulary makes %.1f%% of %s's pieces [UNK] (its first %d paragraphs): "
                            "raise tokenizer.limit_alphabet or tokenizer.vocab_size", 100 * share["unk_share"], lang,
                            UNK_CHECK_PARAGRAPHS)
        log.info("tokenizer sample: %s took %s units (%.1f%% of the sample; p=%.3f)", lang,
                 f"{share['sampled_units']:,}", 100 * share["sampled_share"], share["probability"])
    write_json_atomic(Path(run_dir) / SAMPLE_REPORT, report)


def open_languages(cfg: Any, tokenizer) -> tuple[Any, dict[str, TokenCorpus]]:
    """The tokenizer (``tokenizer(run_dir)``) and each language's prepared corpus (rank 0 first)."""
    run_dir = Path(cfg.run_dir)
    sections = language_sections(cfg.corpus)

    def build():
        tok = tokenizer(run_dir)
        return tok, {lang: prepare_once(sec, tok, run_dir / "languages" / lang) for lang, sec in sections.items()}

    return rank_zero_first(build)


def training_tokens(part: BertPretrainingData) -> int:
    """Tokens in the documents a language trains on (``n_l`` of the batch probabilities)."""
    ends = part.corpus.document_token_ends
    starts = np.concatenate([[0], ends[:-1]])
    return int((ends - starts)[part.train_docs].sum())


def balanced_data(cfg: Any, tok: Any, corpora: dict[str, TokenCorpus], special) -> LanguageBalancedData:
    """Per-language BERT data (own seed, ``eval_examples / L`` held-out sequences each) mixed
    with ``p_l ∝ n_l^α`` over their training tokens."""
    n = len(corpora)
    part_cfg = dataclasses.replace(cfg.data, eval_examples=max(1, cfg.data.eval_examples // n))
    parts = {lang: BertPretrainingData(corpus, special, part_cfg, cfg.train.batch_size, 1,
                                       language_seed(cfg.train.seed, i), tok.is_continuation)
             for i, (lang, corpus) in enumerate(corpora.items())}
    sizes = {lang: training_tokens(part) for lang, part in parts.items()}
    probs = smoothed_probabilities(sizes, cfg.corpus.language_alpha)
    for lang in parts:
        log.info("language %s: %s training tokens, p=%.3f (%.1f of %d sequences per batch)", lang,
                 f"{sizes[lang]:,}", probs[lang], probs[lang] * cfg.train.batch_size, cfg.train.batch_size)
    data = LanguageBalancedData(parts, [probs[lang] for lang in parts], cfg.train.batch_size,
                                cfg.train.accumulation, cfg.train.seed)
    data.sizes = sizes
    return data


@dataclasses.dataclass
class LanguageCorpora:
    """What :func:`~muppets.recipes.pretraining.train_and_export` reads of "the corpus"."""

    corpora: dict[str, TokenCorpus]
    directory: str

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.corpora.values())

    @property
    def num_documents(self) -> int:
        return sum(c.num_documents for c in self.corpora.values())


def unigram_baseline(data: LanguageBalancedData, batch_size: int) -> dict[str, float]:
    """The unigram baseline of all languages' training tokens on every language's held-out targets."""
    counts = sum(part.corpus.count_tokens(part.train_docs, minlength=part.corpus.vocab_size) for part in data.parts)
    labels = held_out(data, batch_size, lambda b: b["mlm_labels"][b["mlm_labels"] != IGNORE].numpy())
    perplexity, accuracy = unigram_scores(np.asarray(counts), labels)
    out = {"mlm_accuracy": accuracy, "mlm_perplexity": perplexity}
    if data.cfg.nsp:
        nsp = held_out(data, batch_size, lambda b: b["nsp_labels"].numpy())
        out["nsp_accuracy"] = float(max(nsp.mean(), 1 - nsp.mean()))
    return out


def run(cfg: Any, resume: bool = True) -> dict:
    """Tokenizer -> per-language corpora -> language-balanced MLM(+NSP) -> ``<run_dir>/final``."""
    from muppets.recipes import bert_pretrain as bert

    tok, corpora = open_languages(cfg, lambda run_dir: bert.ensure_tokenizer(cfg, run_dir))
    model = seeded_model(cfg, lambda: bert.build_model(cfg, tok))
    export = bert.exporter(cfg, model, tok)
    data = balanced_data(cfg, tok, corpora, bert.special_ids(tok))
    sample = Path(cfg.run_dir) / SAMPLE_REPORT
    summary = {"languages": {lang: {**d, "training_tokens": data.sizes[lang]} for lang, d in data.describe().items()},
               "language_alpha": cfg.corpus.language_alpha}
    if sample.is_file():
        summary["tokenizer_sample"] = json.loads(sample.read_text(encoding="utf-8"))
    job = Pretraining(model, data, bert.evaluator(data, cfg.eval_batch_size),
                      export=export,
                      baseline=lambda: unigram_baseline(data, cfg.eval_batch_size), summary=summary,
                      frozen=bert.head_warmup(cfg, model))
    corpus = LanguageCorpora(corpora, str(Path(cfg.run_dir) / "languages"))
    return train_and_export(cfg, corpus, job, resume)
