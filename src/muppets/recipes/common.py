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
    """Open the prepared corpus, preparing it first unless it exists for this tokenizer."""
    out = Path(sec.prepared) if sec.prepared else run_dir / "corpus"
    fingerprint = tokenizer_fingerprint(tok.to_json())
    if (out / "meta.json").is_file():
        meta = json.loads((out / "meta.json").read_text())
        if meta.get("tokenizer_sha256") == fingerprint:
            return TokenCorpus(out)
        log.warning("%s was prepared with another tokenizer; preparing it again", out)
    prepare_corpus([resolve_data_path(p) for p in sec.inputs], tok, out, fmt=sec.format,
                   workers=sec.workers or None, errors=sec.errors, overwrite=True)
    return TokenCorpus(out)


def pick_device(name: str, local_rank: int) -> torch.device:
    """``auto`` = this rank's GPU when CUDA is available, else the CPU; or a torch device name."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
