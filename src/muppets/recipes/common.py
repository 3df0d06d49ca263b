"""What every recipe shares before training: the config sections common to all, the corpus
texts, the tokenizer and corpus stages (each done once and reused; rank 0 first under
``torchrun``), and the model's seed and device.

A recipe's ``run`` then reads as what is new about it::

    tok, corpus = open_inputs(cfg.run_dir, cfg.corpus, partial(ensure_tokenizer, cfg))
    model = seeded_model(cfg, lambda: build_model(cfg, tok))
    data = TheObjectiveData(corpus, …)
    return train_and_export(cfg, corpus, Pretraining(model, data, evaluate, export, baseline), resume)

(:mod:`muppets.recipes.pretraining` holds the second half.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from muppets.config import load_typed, override_keys, to_dict, write_json_atomic
from muppets.data.prepare import (PART, SPECIALS_AS_TEXT, CorpusTokenizer, prepare_corpus, reads_specials_as_text,
                                  source_difference)
from muppets.data.readers import iter_documents
from muppets.data.shards import TokenCorpus, corpus_meta, tokenizer_fingerprint
from muppets.data.units import UnitSpec
from muppets.errors import ConfigError, MuppetsError, RunDirError
from muppets.interop.model_card import Provenance
from muppets.paths import resolve_data_path, resolve_model_path
from muppets.train import TrainConfig
from muppets.train.distributed import any_rank, dist_info, init_distributed
from muppets.train.device import pick_device
from muppets.train.rundir import changed_settings, check_start, describe, run_lock
from muppets.train.schedule import SCALED_WITH_STEPS, scale_with_steps

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C")  # a recipe config
Tok = TypeVar("Tok")  # a tokenizer
M = TypeVar("M", bound=nn.Module)  # a model with a ``cfg.vocab_size``


# ----------------------------------------------------------------------------- config sections


@dataclass
class CorpusSection:
    inputs: list[str] = field(default_factory=lambda: ["data:english-corpus/books", "data:english-corpus/wiki"])  # files/dirs; data:… = shared data
    format: str = "auto"  # auto | text | gutenberg | wikiextractor | jsonl
    prepared: str = ""  # prepared corpus directory ("" = <run_dir>/corpus)
    workers: int = 0  # tokenizer processes (0 = one per CPU)
    errors: str = "strict"  # strict | skip | replace: what to do with undecodable or empty input
    segmenter: str = ""  # store masking units (words, phrases) when preparing: jieba | pretokenizer ("" = none)
    entity_lexicon: str = ""  # with a segmenter: entity file (one per line) for entity masking ("" = none)
    languages: dict = field(default_factory=dict)  # BERT multilingual: {lang: [inputs]} or {lang: {inputs: [...], format: novel-wrapped}}, one prepared corpus each ({} = one corpus from inputs; muppets.recipes.multilingual)
    language_alpha: float = 0.7  # multilingual: sampling p_l ∝ n_l^alpha of the tokenizer text and of every batch (mBERT 0.7; 1 = proportional, 0 = uniform)
    language_sample: int = 0  # multilingual: units (words, CJK characters one each) in the WordPiece training sample (0 = the corpus size)

    def units(self) -> UnitSpec | None:
        """The masking units to store with the prepared corpus (None: none asked for)."""
        if not self.segmenter:
            if self.entity_lexicon:
                raise ConfigError("corpus.entity_lexicon needs corpus.segmenter (jieba | pretokenizer): "
                                  "entities are widened to whole words")
            return None
        lexicon = str(resolve_data_path(self.entity_lexicon)) if self.entity_lexicon else ""
        return UnitSpec(self.segmenter, lexicon)


@dataclass
class ModelSection:
    preset: str = ""  # a preset of the recipe's model (each recipe names its own and the default)
    overrides: dict = field(default_factory=dict)  # model config fields to change, e.g. {hidden_dropout: 0.0}

    # the model config class whose ``preset(name, **overrides)`` builds the model's settings
    MODEL: ClassVar[Any] = None

    def __post_init__(self) -> None:
        """Check the preset and the overrides now, not once the tokenizer and the corpus are made
        (a loaded checkpoint, ``init_from``, brings its own settings: the preset is not used)."""
        if self.MODEL is None or getattr(self, "init_from", ""):
            return
        try:
            self.MODEL.preset(self.preset, **self.overrides)
        except ConfigError as err:
            glued = [k for k, v in self.overrides.items() if v is None and ":" in str(k)]
            hint = (f" ({glued[0]!r} is one key with no value: YAML needs a space after the colon, "
                    f"{{{str(glued[0]).replace(':', ': ', 1)}}}, and the shell needs the override quoted)"
                    if glued else "")
            key = "preset" if "preset" in str(err) else "overrides"  # relative to the section: from_dict adds "model."
            raise ConfigError(f"{key}: {err}{hint}", key=key) from None


@dataclass
class PretrainedModelSection(ModelSection):
    init_from: str = ""  # continue pretraining from this HF directory or "minilm", with its own tokenizer ("" = random init)

    # the model.overrides a loaded checkpoint takes (the rest would change its architecture)
    LOADED_OVERRIDES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        refused = sorted(set(self.overrides) - set(self.LOADED_OVERRIDES)) if self.init_from else []
        if refused:
            raise ConfigError(f"model.overrides {refused} with model.init_from={self.init_from}: the checkpoint's "
                              f"config.json sets these; a loaded model takes only {list(self.LOADED_OVERRIDES)}")


def load_pretrained(sec: PretrainedModelSection, load: Callable[[Path], M], vocab_size: int) -> M:
    """The model of ``model.init_from`` (``load`` reads the directory); its vocabulary must
    hold the tokenizer's ``vocab_size`` ids."""
    model = load(resolve_model_path(sec.init_from))
    if model.cfg.vocab_size < vocab_size:
        raise ConfigError(f"model.init_from={sec.init_from} has {model.cfg.vocab_size} tokens, "
                          f"the tokenizer {vocab_size}")
    return model


def run_provenance(cfg: Any) -> Provenance:
    """What a pretraining run's ``final/`` model card says it came from: ``model.init_from``
    (none: trained from scratch) and the corpus (``corpus.languages``' inputs, else ``corpus.inputs``)."""
    languages = cfg.corpus.languages or {}
    inputs = [str(p) for spec in languages.values() for p in (spec.get("inputs", []) if isinstance(spec, dict) else spec)]
    return Provenance(base_model=str(getattr(cfg.model, "init_from", "") or ""),
                      datasets=tuple(inputs or (str(p) for p in cfg.corpus.inputs)))


def checkpoint_tokenizer(sec: PretrainedModelSection, configured: str, load: Callable[[Path], Tok],
                         default: str = "") -> Tok | None:
    """With ``model.init_from``, the checkpoint's own tokenizer (None without): continued
    pretraining must feed the ids its embeddings were trained on, so no tokenizer is trained.
    A tokenizer configured explicitly (``configured``, other than the recipe's ``default``)
    must be that same tokenizer."""
    if not sec.init_from:
        return None
    directory = resolve_model_path(sec.init_from)
    try:
        tok = load(directory)
    except (MuppetsError, OSError) as err:
        raise ConfigError(f"model.init_from={sec.init_from}: cannot read the checkpoint's tokenizer in "
                          f"{directory} ({err}); continued pretraining uses the checkpoint's own") from err
    if configured and configured != default and load(resolve_data_path(configured)).to_json() != tok.to_json():
        raise ConfigError(f"tokenizer.path={configured} is not the tokenizer of model.init_from="
                          f"{sec.init_from}: continued pretraining must use the checkpoint's own "
                          "(leave tokenizer.path empty)")
    log.info("continued pretraining from %s with its own tokenizer (%d tokens)", directory, tok.vocab_size)
    return tok


@dataclass
class TokenizerSection:
    path: str = ""  # a tokenizer to use ("" = train one on the corpus into <run_dir>/tokenizer, once)
    vocab_size: int = 30522  # size of a newly trained vocabulary
    min_frequency: int = 2  # pieces seen fewer times are not learned
    max_documents: int = 0  # train on at most this many documents (0 = all)


@dataclass
class RunSection:
    """The fields of every pretraining config; a recipe's config adds ``model``, its
    tokenizer or vocabulary section and ``data`` (the objective's), and may change defaults."""

    run_dir: str = "runs/pretrain"  # checkpoints, logs, tokenizer, corpus and final/ go here
    corpus: CorpusSection = field(default_factory=CorpusSection)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval_batch_size: int = 64  # examples per evaluation batch
    device: str = "auto"  # auto (cuda:<local rank> when CUDA is available, else cpu) | cpu | cuda:N


def config_loader(cls: type[C]) -> Callable[[str | Path | None, list[str]], C]:
    """A recipe's ``load_config(path, overrides)``: its config ``cls`` from a YAML/JSON file
    (optional, None = the defaults) and dotted ``key=value`` overrides, type-checked. An override
    of ``train.steps`` takes the warmup and the evaluation cadence along
    (:func:`schedule_with_steps`)."""

    def load_config(path: str | Path | None, overrides: list[str]) -> C:
        cfg = load_typed(cls, path, overrides)
        if isinstance(getattr(cfg, "train", None), TrainConfig) and "train.steps" in override_keys(overrides):
            planned = load_typed(cls, path, [o for o in overrides if override_keys([o]) != {"train.steps"}])
            schedule_with_steps(cfg, planned.train.steps, override_keys(overrides))
        return cfg

    load_config.__doc__ = f"A {cls.__name__} from a YAML/JSON file (optional) + dotted overrides, type-checked."
    return load_config


# ----------------------------------------------------------------------------- tokenizer stage


def corpus_texts(sec: CorpusSection, max_documents: int = 0) -> Iterator[str]:
    """The paragraphs of the corpus inputs, of at most ``max_documents`` documents (0 = all):
    what a tokenizer or word vocabulary is trained on."""
    inputs = [resolve_data_path(p) for p in sec.inputs]
    for i, doc in enumerate(iter_documents(inputs, sec.format, errors=sec.errors)):
        if max_documents and i >= max_documents:
            return
        yield from doc.paragraphs


def schedule_with_steps(cfg: Any, planned_steps: int, explicit: set[str]) -> None:
    """When ``train.steps`` differs from the ``planned_steps`` of the config file (or the
    defaults), scale ``train.warmup_steps`` and ``train.eval_every`` with it, except those set
    in ``explicit`` (the dotted keys of the overrides; ``train`` as a whole counts for all), and
    log what changed: a recipe shortened to 40 steps still reaches its peak learning rate and
    evaluates as often, in proportion (:func:`~muppets.train.schedule.scale_with_steps`)."""
    keep = set(SCALED_WITH_STEPS) if "train" in explicit else {k.split(".", 1)[1] for k in explicit
                                                                  if k.startswith("train.")}
    cfg.train, changed = scale_with_steps(cfg.train, planned_steps, keep)
    if changed:
        log.info("train.steps=%d where the config plans %d: %s scaled with it (set them to keep other values)",
                 cfg.train.steps, planned_steps,
                 " and ".join(f"train.{name} {old} -> {new}" for name, (old, new) in changed.items()))


TOKENIZER_SETTINGS = "build.json"  # <run_dir>/tokenizer/: the tokenizer section it was trained with


def tokenizer_stage(sec: TokenizerSection, run_dir: Path, load: Callable[[Path], T], train: Callable[[], T]) -> T:
    """``load(sec.path)`` when a tokenizer is configured (``data:`` paths resolve); else the one
    an earlier run trained into ``<run_dir>/tokenizer`` with these settings (``sec``, recorded
    beside it as :data:`TOKENIZER_SETTINGS`; other ones raise :class:`RunDirError` naming both);
    else ``train()``'s, saved there with its settings."""
    if sec.path:
        return load(resolve_data_path(sec.path))
    out = Path(run_dir) / "tokenizer"
    settings = {k: v for k, v in to_dict(sec).items() if k != "path"}
    if (out / "tokenizer.json").is_file():
        _check_tokenizer_settings(out, settings)
        return load(out)
    tok = train()
    tok.save(out)
    write_json_atomic(out / TOKENIZER_SETTINGS, settings)
    return tok


def _check_tokenizer_settings(out: Path, settings: dict[str, Any]) -> None:
    """Refuse reusing the tokenizer in ``out`` when it was trained with other ``settings``; one
    trained before they were recorded is reused as it is, with a warning."""
    try:
        saved = json.loads((out / TOKENIZER_SETTINGS).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        log.warning("%s records no settings (trained by an older muppets): reused as it is, whatever tokenizer.* "
                    "now says", out)
        return
    changed = changed_settings({"tokenizer": saved}, {"tokenizer": settings})
    if changed:
        raise RunDirError(f"{out} was trained with other settings than this run's ({describe(changed)}); it is left "
                          "as it is: run with its settings, or delete that directory (and the run's corpus is "
                          "prepared again) to train a new one, or choose another run_dir")


# ----------------------------------------------------------------------------- corpus stage


INPUT_SETTINGS = ("tokenizer.", "vocab.")  # what turns text into ids: a checkpoint resumes only with its own


@contextmanager
def pretraining_run(cfg: RunSection, resume: bool = True) -> Iterator[None]:
    """A pretraining run's hold on ``cfg.run_dir``, from before its tokenizer and corpus stages to
    its last write: rank 0 locks the directory (:func:`~muppets.train.rundir.run_lock`) and
    decides there whether the run may start (:func:`~muppets.train.rundir.check_start`) before
    any stage writes, so that a refusal destroys nothing; its error reaches every rank."""
    run_dir, dist = Path(cfg.run_dir), init_distributed()
    with ExitStack() as held:
        def start() -> None:
            if dist.is_main:
                held.enter_context(run_lock(run_dir))
                check_start(run_dir, to_dict(cfg), cfg.train.steps, resume, INPUT_SETTINGS,
                            getattr(cfg, "AFTER_TRAINING", ()))

        rank_zero_first(start)
        yield


def open_inputs(run_dir: str | Path, corpus: CorpusSection, tokenizer: Callable[[Path], Tok],
                corpus_form: Callable[[Tok], CorpusTokenizer] = lambda tok: tok) -> tuple[Tok, TokenCorpus]:
    """The tokenizer (``tokenizer(run_dir)``) and the corpus prepared with ``corpus_form`` of
    it (:func:`prepare_once`): rank 0 builds them, then the other ranks open what it wrote.
    One corpus only: ``corpus.languages`` is BERT's multilingual recipe, and is refused here."""
    run_dir = Path(run_dir)
    if corpus.languages:
        raise ConfigError("corpus.languages (one corpus per language, language-balanced batches) is "
                          "supported by BERT pretraining only; this recipe reads one corpus from corpus.inputs")

    def build() -> tuple[Tok, TokenCorpus]:
        tok = tokenizer(run_dir)
        return tok, prepare_once(corpus, corpus_form(tok), run_dir)

    return rank_zero_first(build)


def rank_zero_first(build: Callable[[], T]) -> T:
    """``build()`` on rank 0, then on the other ranks (which then find its files and reuse
    them). Rank 0's error is raised there and, as a :class:`MuppetsError`, on the other ranks
    too, instead of leaving them waiting. One process: just ``build()``."""
    dist = init_distributed()
    if dist.world == 1:
        return build()
    result, failed = None, None
    if dist.is_main:
        try:
            result = build()
        except Exception as err:  # re-raised below, after the other ranks heard of it
            failed = err
    if any_rank(failed is not None):  # also the barrier the other ranks wait at
        if failed is not None:
            raise failed
        raise MuppetsError("rank 0 failed to prepare the inputs (its error is in its log)")
    return result if dist.is_main else build()


def prepare_once(sec: CorpusSection, tok: CorpusTokenizer, run_dir: Path) -> TokenCorpus:
    """Open the prepared corpus, preparing it first unless it exists for this tokenizer.

    Only the run's own ``<run_dir>/corpus`` is ever prepared again: for another tokenizer, or
    when it was prepared before special-token strings in the text were encoded as text
    (:func:`~muppets.data.prepare.reads_specials_as_text`). A directory named in
    ``corpus.prepared`` is reused when this tokenizer prepared it (as text) and prepared when
    it does not exist; anything else raises :class:`ConfigError` and leaves it as it is. With
    ``corpus.segmenter`` the corpus must also store those masking units (the same
    :meth:`~muppets.data.units.UnitSpec.describe`); without it, stored units are kept.
    """
    own = Path(run_dir) / "corpus"
    out = Path(sec.prepared) if sec.prepared else own
    fingerprint = tokenizer_fingerprint(tok.to_json())
    units = sec.units()
    meta = corpus_meta(out)
    _check_whole(out, meta)
    _check_sources(out, meta, sec)
    found = meta.get("tokenizer_sha256") if meta is not None else None
    old_text = found == fingerprint and not reads_specials_as_text(meta, tok)
    other_units = units is not None and meta is not None and not units.matches(meta.get("units"))
    if found == fingerprint and not old_text and not other_units:
        return TokenCorpus(out)
    is_own = out.resolve() == own.resolve()
    if out.exists() and not is_own:
        raise ConfigError(_not_reusable(out, found, fingerprint, old_text, other_units))
    if found is not None:
        log.warning("%s was prepared %s; preparing it again", out, _BEFORE_TEXT if old_text else
                    "with another tokenizer" if found != fingerprint else "without these masking units")
    prepare_corpus([resolve_data_path(p) for p in sec.inputs], tok, out, fmt=sec.format,
                   workers=sec.workers or None, errors=sec.errors, overwrite=is_own, units=units,
                   progress=True)  # a bar on a terminal, a line every 30 s in a log file
    return TokenCorpus(out)


def _check_whole(out: Path, meta: dict | None) -> None:
    """A part of a corpus prepared on several machines (``data prepare --part``, meta.json
    ``part``) holds only some of the documents: training on it as the corpus is refused."""
    part = (meta or {}).get(PART)
    if part is not None:
        raise ConfigError(f"{out} is a part of a corpus ({part.get('index')}/{part.get('count')}), not the whole "
                          "corpus; merge the parts first: muppets data merge PART_DIR... --out DIR, then name DIR in "
                          "corpus.prepared")


def _check_sources(out: Path, meta: dict | None, sec: CorpusSection) -> None:
    """A prepared corpus is only ever reused for the inputs it was prepared from, as they were
    then (:func:`~muppets.data.prepare.source_difference`: resolved paths, and each file's size
    and modification time where meta.json records them; a corpus whose meta.json names no
    sources, or a config naming no inputs, is not checked): other inputs raise
    :class:`ConfigError` naming the file that differs, and the directory is left as it is."""
    if not meta or not meta.get("sources") or not sec.inputs:
        return
    differs = source_difference(meta, [resolve_data_path(p) for p in sec.inputs], sec.format)
    if differs:
        raise ConfigError(f"{out} was {differs}; it is left as it is: give the run a new run_dir (or "
                          "corpus.prepared a new directory), or delete it to prepare it again")


_BEFORE_TEXT = (f"before special-token strings in its text were encoded as text (its meta.json has no "
                f"{SPECIALS_AS_TEXT}: a literal [MASK] or <|endoftext|> may be a special id there)")


def _not_reusable(out: Path, found: str | None, fingerprint: str, old_text: bool, other_units: bool = False) -> str:
    why = ("is not a prepared corpus (no meta.json that says so)" if found is None else
           f"was prepared {_BEFORE_TEXT}" if old_text else
           f"was prepared with another tokenizer (fingerprint {found}; this one's is {fingerprint})"
           if found != fingerprint else
           "does not store the masking units of corpus.segmenter / corpus.entity_lexicon (meta.json: units)")
    return (f"corpus.prepared={out} {why}; it is left as it is: name a new directory, or leave "
            f"corpus.prepared empty to prepare the run's own <run_dir>/corpus")


# ----------------------------------------------------------------------------- device


def seeded_model(cfg: RunSection, build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` after seeding torch with ``train.seed`` (the same initial weights on every
    rank and in every run), on this rank's device."""
    torch.manual_seed(cfg.train.seed)
    return build().to(pick_device(cfg.device, dist_info().local_rank))
