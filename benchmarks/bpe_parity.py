"""Acceptance figures for the byte-level BPE tokenizer (GPT-2), measured in one run:

1. ids of muppets' ``ByteLevelBPETokenizer`` (real GPT-2 vocab.json + merges.txt) equal those
   of ``transformers.GPT2TokenizerFast`` on ALL shared English texts;
2. ``decode(encode(text)) == text`` on ALL shared texts (English, Chinese, XNLI / PAWS-X in
   five languages);
3. batch-encoding time of both tokenizers on the English texts, and their ratio.

A text is one line of a text / TSV file (without its line end: ``\\n`` or ``\\r\\n``; empty
lines skipped), one field of a CSV record, one string value of a JSON file. Files decode as
UTF-8, else as Windows-1252 (MR sentiment, the MRPC licence page). ``README.md``,
``MANIFEST.tsv`` and ``vocab/`` are metadata, not texts. Run on one core:

    OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \\
        python benchmarks/bpe_parity.py --out benchmarks/results/bpe_parity.json [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import platform
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tokenizers
import transformers

from muppets.paths import data_dir
from muppets.tokenizers import ByteLevelBPETokenizer

ENGLISH = ["english-corpus/books/*.txt", "english-corpus/wiki/*.txt",
           "english-corpus/tinyshakespeare/input.txt", "wikitext-2-raw/*", "glue/*/*",
           "conll2003/*", "squad/*.json", "hellaswag/*", "sentiment/mr/*", "youtube-spam/*.csv",
           "xnli/dev-en.tsv", "paws-x/dev-en.tsv"]
OTHER_LANGUAGES = ["chinese/*/*"] + [f"{task}/dev-{lang}.tsv" for task in ("xnli", "paws-x")
                                     for lang in ("de", "es", "fr", "zh")]
NOT_TEXT = {"README.md", "MANIFEST.tsv"}
BATCH = 4096  # texts per encode call (both tokenizers)


@dataclass
class Tally:
    """Counts of one group of files (English or other languages)."""

    files: int = 0
    texts: int = 0
    chars: int = 0
    tokens: int = 0  # muppets' token count
    mismatched_texts: int = 0  # ids differ from transformers' (English only)
    round_trip_failures: int = 0  # decode(encode(text)) != text
    muppets_seconds: float = 0.0  # batch encoding time (English only)
    transformers_seconds: float = 0.0
    encodings: dict[str, int] = field(default_factory=dict)  # encoding → files
    examples: list[dict[str, Any]] = field(default_factory=list)  # first failures


def list_files(root: Path, patterns: list[str]) -> list[Path]:
    """Sorted files matching ``patterns`` under ``root``, metadata files left out."""
    files = {p for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    return sorted(p for p in files if p.name not in NOT_TEXT)


def read_text(path: Path) -> tuple[str, str]:
    """(text, encoding): UTF-8 if it decodes, else Windows-1252."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return data.decode("cp1252"), "cp1252"


def json_strings(value: Any) -> Iterator[str]:
    """Every string value in a parsed JSON document (keys left out), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


def texts_of(path: Path, text: str) -> list[str]:
    """The texts of one file: JSON string values, CSV fields, or lines (see module doc)."""
    if path.suffix == ".json":
        units = list(json_strings(json.loads(text)))
    elif path.suffix == ".csv":
        units = [f for row in csv.reader(io.StringIO(text, newline="")) for f in row]
    else:
        units = [line.removesuffix("\r") for line in text.split("\n")]
    return [unit for unit in units if unit]


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def check_file(path: Path, texts: list[str], ours: ByteLevelBPETokenizer, hf: Any | None,
               tally: Tally, root: Path) -> None:
    """Encode ``texts`` with both tokenizers (``hf`` None: ours only), compare, decode back."""
    for start in range(0, len(texts), BATCH):
        batch = texts[start:start + BATCH]
        ids, seconds = timed(ours.encode_batch, batch)
        tally.tokens += sum(map(len, ids))
        if hf is not None:
            theirs, hf_seconds = timed(lambda b: hf(b, add_special_tokens=False)["input_ids"], batch)
            tally.muppets_seconds += seconds
            tally.transformers_seconds += hf_seconds
            for i in (i for i, (a, b) in enumerate(zip(ids, theirs)) if a != b):
                tally.mismatched_texts += 1
                note(tally, "ids differ", path, root, start + i, batch[i])
        for i, back in enumerate(ours.decode_batch(ids)):
            if back != batch[i]:
                tally.round_trip_failures += 1
                note(tally, "round trip", path, root, start + i, batch[i])


def note(tally: Tally, kind: str, path: Path, root: Path, index: int, text: str) -> None:
    """Keep the first few failures as examples."""
    if len(tally.examples) < 20:
        tally.examples.append({"kind": kind, "file": str(path.relative_to(root)),
                               "text_index": index, "text": text[:200]})


def run_group(root: Path, patterns: list[str], ours: ByteLevelBPETokenizer, hf: Any | None,
              limit: int | None) -> Tally:
    """Check every file of one group; ``limit`` caps the texts taken per file."""
    tally = Tally()
    for path in list_files(root, patterns):
        text, encoding = read_text(path)
        texts = texts_of(path, text)[:limit]
        tally.files += 1
        tally.texts += len(texts)
        tally.chars += sum(map(len, texts))
        tally.encodings[encoding] = tally.encodings.get(encoding, 0) + 1
        check_file(path, texts, ours, hf, tally, root)
        print(f"  {path.relative_to(root)}: {len(texts):,} texts", flush=True)
    return tally


def gpt2_oracle(directory: Path) -> Any:
    """transformers' GPT2TokenizerFast on GPT-2's files, checked to have really read them
    (transformers 5.x ignores ``vocab_file=``; its ``vocab=`` takes the path)."""
    files = {"vocab": str(directory / "vocab.json"), "merges": str(directory / "merges.txt")}
    hf = transformers.GPT2TokenizerFast(vocab_file=files["vocab"], merges_file=files["merges"])
    if len(hf) != 50257:
        hf = transformers.GPT2TokenizerFast(**files)
    assert len(hf) == 50257 and hf("Hello world")["input_ids"] == [15496, 995], "bad oracle"
    return hf


def summary(english: Tally, other: Tally) -> dict[str, Any]:
    """The headline figures."""
    ratio = english.transformers_seconds / max(english.muppets_seconds, 1e-9)
    return {
        "english_texts": english.texts, "english_tokens": english.tokens,
        "id_mismatches": english.mismatched_texts,
        "round_trip_texts": english.texts + other.texts,
        "round_trip_failures": english.round_trip_failures + other.round_trip_failures,
        "muppets_encode_seconds": round(english.muppets_seconds, 2),
        "transformers_encode_seconds": round(english.transformers_seconds, 2),
        "speed_ratio_transformers_over_muppets": round(ratio, 3),
        "muppets_tokens_per_second": round(english.tokens / max(english.muppets_seconds, 1e-9)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the JSON result here")
    ap.add_argument("--limit", type=int, default=None, help="at most this many texts per file")
    args = ap.parse_args()
    root = data_dir()
    ours = ByteLevelBPETokenizer.load(root / "vocab" / "gpt2")
    hf = gpt2_oracle(root / "vocab" / "gpt2")
    print("English texts (ids vs GPT2TokenizerFast, round trip):")
    english = run_group(root, ENGLISH, ours, hf, args.limit)
    print("Other languages (round trip):")
    other = run_group(root, OTHER_LANGUAGES, ours, None, args.limit)
    result = {"summary": summary(english, other), "english": asdict(english),
              "other_languages": asdict(other), "limit_per_file": args.limit,
              "versions": {"tokenizers": tokenizers.__version__,
                           "transformers": transformers.__version__,
                           "python": platform.python_version()}}
    print(json.dumps(result["summary"], indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
