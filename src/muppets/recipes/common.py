"""What every pretraining recipe shares: the corpus section of its config, preparing the corpus
once per tokenizer, and picking the device."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from muppets.data.prepare import CorpusTokenizer, prepare_corpus
from muppets.data.shards import TokenCorpus, tokenizer_fingerprint
from muppets.errors import ConfigError
from muppets.paths import resolve_data_path

log = logging.getLogger(__name__)


@dataclass
class CorpusSection:
    inputs: list[str] = field(default_factory=lambda: ["data:english-corpus/books", "data:english-corpus/wiki"])  # files/dirs; data:… = shared data
    format: str = "auto"  # auto | text | gutenberg | wikiextractor | jsonl
    prepared: str = ""  # prepared corpus directory ("" = <run_dir>/corpus)
    workers: int = 0  # tokenizer processes (0 = one per CPU)
    errors: str = "strict"  # strict | skip | replace: what to do with undecodable or empty input


def prepare_once(sec: CorpusSection, tok: CorpusTokenizer, run_dir: Path) -> TokenCorpus:
    """Open the prepared corpus, preparing it first unless it exists for this tokenizer.

    Only the run's own ``<run_dir>/corpus`` is ever prepared again (for another tokenizer). A
    directory named in ``corpus.prepared`` is reused when this tokenizer prepared it and
    prepared when it does not exist; anything else raises :class:`ConfigError` and leaves it
    as it is.
    """
    own = Path(run_dir) / "corpus"
    out = Path(sec.prepared) if sec.prepared else own
    fingerprint = tokenizer_fingerprint(tok.to_json())
    found = _fingerprint_of(out)
    if found == fingerprint:
        return TokenCorpus(out)
    is_own = out.resolve() == own.resolve()
    if out.exists() and not is_own:
        raise ConfigError(_not_reusable(out, found, fingerprint))
    if found is not None:
        log.warning("%s was prepared with another tokenizer; preparing it again", out)
    prepare_corpus([resolve_data_path(p) for p in sec.inputs], tok, out, fmt=sec.format,
                   workers=sec.workers or None, errors=sec.errors, overwrite=is_own)
    return TokenCorpus(out)


def _fingerprint_of(directory: Path) -> str | None:
    """The tokenizer fingerprint a prepared corpus records (None: no corpus there)."""
    meta = directory / "meta.json"
    return json.loads(meta.read_text(encoding="utf-8")).get("tokenizer_sha256") if meta.is_file() else None


def _not_reusable(out: Path, found: str | None, fingerprint: str) -> str:
    why = ("is not a prepared corpus (no meta.json)" if found is None else
           f"was prepared with another tokenizer (fingerprint {found}; this one's is {fingerprint})")
    return (f"corpus.prepared={out} {why}; it is left as it is: name a new directory, or leave "
            f"corpus.prepared empty to prepare the run's own <run_dir>/corpus")


def pick_device(name: str, local_rank: int) -> torch.device:
    """``auto`` = this rank's GPU when CUDA is available, else the CPU; or a torch device name."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
