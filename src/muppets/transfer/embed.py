"""Feature extraction: per-word vectors of any backbone's layers, in memory or to a file.

One call for every backbone (:mod:`muppets.transfer.embedders` says what each layer is)::

    from muppets.transfer.embed import embed, embed_file
    vectors = embed("minilm", [["The", "bank", "closed", "."]], layers=[-1], pooling="mean")
    vectors[0].shape                                   # (1, 4, 384): (layers, words, dim)
    embed_file("runs/elmo-small", "sentences.txt", "elmo.safetensors")   # every layer

``muppets embed --model DIR --input FILE --layers all|0,-1 --pooling auto|first|mean|last --out FILE``
does the same from the shell. The input file holds one pre-split sentence per line (words
separated by whitespace); an empty line is an error, as is a layer the model does not have, and
a line longer than the model's positions (or ``--max-positions``) unless ``--truncate`` keeps
its longest word prefix that fits (a first word that alone does not fit is still an error).

Sentences are sorted by length and cut into batches (:func:`~muppets.transfer.batching.
eval_batches`), so padding is small; results come back in the input order.

**Files.** Sentences differ in length, so the words of all sentences are concatenated:
``vectors (K, N, D)`` float32 (``N`` words in all, ``K`` chosen layers) and ``offsets (S + 1,)``
int64, sentence ``s`` being words ``offsets[s] : offsets[s + 1]``. ``.safetensors`` holds both
tensors and the metadata (model, kind, layers, pooling, counts) as strings; ``.npy`` holds
``vectors`` and a ``.json`` file beside it the offsets and metadata (nothing is pickled).
:func:`load_embeddings` reads either back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from muppets.families import is_family
from muppets.config import save_npy_atomic, write_json_atomic
from muppets.errors import ConfigError, DataError
from muppets.interop.safetensors_io import read_file, write_weights
from muppets.paths import resolve_data_path
from muppets.progress import progress_bar
from muppets.transfer.batching import eval_batches
from muppets.transfer.embedders import Embedder, load_embedder

log = logging.getLogger(__name__)

OUTPUT_SUFFIXES = (".npy", ".safetensors")


# ----------------------------------------------------------------------------- layers


def resolve_layers(layers: Sequence[int] | None, num_layers: int, model: str = "the model") -> list[int]:
    """Non-negative layer indices (-1 = the top layer); None = every layer, bottom first.

    >>> resolve_layers([0, -1], 3), resolve_layers(None, 2)
    ([0, 2], [0, 1])
    """
    if layers is None:
        return list(range(num_layers))
    if not layers:
        raise ConfigError("layers: choose at least one layer")
    out = []
    for k in layers:
        if not -num_layers <= int(k) < num_layers:
            raise ConfigError(f"layer {k} does not exist: {model} has {num_layers} layers "
                              f"(0 … {num_layers - 1}, or -1 … -{num_layers} from the top)")
        out.append(int(k) % num_layers)
    return out


def parse_layers(text: str) -> list[int] | None:
    """``"all"`` -> None; ``"0,-1"`` -> ``[0, -1]`` (the CLI's ``--layers``)."""
    if text.strip() == "all":
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--layers: expected 'all' or comma-separated layer numbers, got {text!r}") from None


# ----------------------------------------------------------------------------- in memory


def check_sentences(sentences: Sequence[Sequence[str]], source: str | Path | None = None) -> None:
    """Every sentence a non-empty list of non-empty strings (errors name ``source``, line = index + 1)."""
    for i, words in enumerate(sentences):
        if isinstance(words, str) or not len(words):
            what = "a string, not a list of words" if isinstance(words, str) else "an empty sentence"
            raise DataError(f"sentence {i + 1} is {what}", path=source, line=i + 1 if source else None,
                            value=words if isinstance(words, str) else None)
        bad = next((w for w in words if not isinstance(w, str) or not w.strip()), None)
        if bad is not None:
            raise DataError(f"sentence {i + 1} has an empty or non-string word", path=source,
                            line=i + 1 if source else None, value=bad)


def embed_sentences(embedder: Embedder, sentences: Sequence[Sequence[str]], layers: Sequence[int] | None = None,
                    batch_size: int = 32, source: str | Path | None = None,
                    progress: bool = False, max_positions: int | None = None,
                    truncate: bool = False) -> list[np.ndarray]:
    """Per sentence, ``(K, n_words, dim)`` float32 for the ``K`` chosen ``layers`` (None = all).

    Sentences go through the model in length-sorted batches of ``batch_size`` (each under
    ``torch.inference_mode``). A sentence may take at most the smaller of ``max_positions`` and
    the model's own limit, in model positions (:meth:`Embedder.positions`: pieces and special
    tokens for BERT and GPT, words for static vectors, words + 2 for ELMo; None = the model's
    limit, and a model without one has none). A longer sentence raises
    :class:`~muppets.errors.DataError` naming it (and ``source``'s line), or with ``truncate``
    keeps its longest word prefix that fits: its array then has a row for each kept word only
    (counted in ``embedder.stats["truncated"]`` and logged). A first word that alone does not
    fit is still an error.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be >= 1")
    check_sentences(sentences, source)
    chosen = resolve_layers(layers, embedder.num_layers, f"{embedder.kind} model {embedder.source}")
    limit = position_limit(embedder, max_positions)
    lengths = embedder.positions(sentences)
    if truncate and limit is None:
        log.info("truncate: the %s model %s has no position limit and max_positions is not set: nothing to cut",
                 embedder.kind, embedder.source)
    elif truncate:
        sentences, lengths = truncate_to_limit(embedder, sentences, lengths, limit)
    _check_lengths(embedder, lengths, limit, source, truncate)
    out: list[np.ndarray] = [np.empty(0, np.float32)] * len(sentences)
    batches = eval_batches(lengths, batch_size)
    for index in progress_bar(batches, desc="embed", unit="batch", enabled=progress):
        for i, vectors in zip(index, embedder.embed_batch([sentences[i] for i in index], chosen)):
            out[i] = vectors
    return out


def position_limit(embedder: Embedder, max_positions: int | None) -> int | None:
    """The positions a sentence may take: the smaller of ``max_positions`` and the model's."""
    if max_positions is not None and max_positions < 1:
        raise ConfigError(f"max_positions={max_positions} must be >= 1")
    limits = [n for n in (max_positions, embedder.max_positions) if n is not None]
    return min(limits) if limits else None


def truncate_to_limit(embedder: Embedder, sentences: Sequence[Sequence[str]], lengths: list[int],
              limit: int) -> tuple[list[Sequence[str]], list[int]]:
    """Each sentence over ``limit`` positions cut to its longest word prefix within it (found by
    bisection on the prefix length; at least one word, which the length check then judges)."""
    sentences, lengths, cut = list(sentences), list(lengths), 0
    for i, n in enumerate(lengths):
        if n <= limit:
            continue
        words, low, high = sentences[i], 1, len(sentences[i]) - 1  # the answer lies in [low, high]
        while low < high:
            middle = (low + high + 1) // 2
            if embedder.positions([words[:middle]])[0] <= limit:
                low = middle
            else:
                high = middle - 1
        sentences[i] = words[:low]
        lengths[i] = embedder.positions([sentences[i]])[0]
        cut += lengths[i] <= limit  # a first word too long alone is left to the length check's error
    if cut:
        embedder.stats["truncated"] += cut
        log.warning("%d of %d sentences cut to their longest word prefix within %d positions", cut,
                    len(sentences), limit)
    return sentences, lengths


def _check_lengths(embedder: Embedder, lengths: Sequence[int], limit: int | None,
                   source: str | Path | None, truncated: bool = False) -> None:
    if limit is None:
        return
    whose = (f"the {embedder.kind} model {embedder.source} takes" if limit == embedder.max_positions
             else "max_positions allows")
    hint = ("its first word alone does not fit" if truncated
            else "truncate=True / --truncate keeps the words that fit")
    for i, n in enumerate(lengths):
        if n > limit:
            raise DataError(f"sentence {i + 1} needs {n} positions; {whose} at most {limit} ({hint})",
                            path=source, line=i + 1 if source else None)


def embed(model: str | Path | Embedder, sentences: Sequence[Sequence[str]], layers: Sequence[int] | None = None,
          pooling: str = "auto", batch_size: int = 32, device: str = "cpu", max_positions: int | None = None,
          truncate: bool = False) -> list[np.ndarray]:
    """:func:`embed_sentences` with the model given by name (see :func:`~muppets.transfer.
    embedders.load_embedder`) or as an :class:`Embedder`."""
    embedder = model if isinstance(model, Embedder) else load_embedder(model, pooling, device)
    return embed_sentences(embedder, sentences, layers, batch_size, max_positions=max_positions, truncate=truncate)


# ----------------------------------------------------------------------------- files


def read_sentences(path: str | Path) -> list[list[str]]:
    """One pre-split sentence per line (whitespace-separated words); a blank line is an error."""
    path = resolve_data_path(path)
    if not path.is_file():
        raise DataError("no such input file", path=path)
    sentences = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"not UTF-8 ({err.reason})", path=path, line=number, value=raw[:60]) from err
            words = line.split()
            if not words:
                raise DataError("empty line (one sentence per line, words separated by spaces)",
                                path=path, line=number)
            sentences.append(words)
    if not sentences:
        raise DataError("no sentences in the input file", path=path)
    return sentences


@dataclass
class Embeddings:
    """What :func:`load_embeddings` returns: per sentence ``(K, n, D)`` and the metadata."""

    sentences: list[np.ndarray]
    metadata: dict = field(default_factory=dict)


def flatten(vectors: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-sentence ``(K, n_s, D)`` -> ``(K, N, D)`` and ``offsets (S + 1,)`` int64."""
    offsets = np.zeros(len(vectors) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([v.shape[1] for v in vectors])
    return np.concatenate(vectors, axis=1), offsets


def split_rows(matrix: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    """Inverse of :func:`flatten`: views ``matrix[:, offsets[s]:offsets[s + 1]]``."""
    return [matrix[:, offsets[s]: offsets[s + 1]] for s in range(len(offsets) - 1)]


def output_files(out: str | Path) -> list[Path]:
    """The files an embeddings output ``out`` is written as (``.npy`` + ``.json``, or
    ``.safetensors``); any other name is a :class:`ConfigError`."""
    out = Path(out)
    if out.suffix not in OUTPUT_SUFFIXES:
        raise ConfigError(f"--out {out}: the file must end in {' or '.join(OUTPUT_SUFFIXES)}")
    return [out, out.with_suffix(".json")] if out.suffix == ".npy" else [out]


def save_embeddings(path: str | Path, vectors: Sequence[np.ndarray], metadata: dict | None = None,
                    dtype: str = "float32") -> Path:
    """Write per-sentence vectors (as ``dtype``: float32 or float16) to ``.safetensors`` or
    ``.npy`` (+ ``.json``), atomically."""
    path = Path(path)
    output_files(path)
    if dtype not in ("float32", "float16"):
        raise ConfigError(f"dtype {dtype!r}: embeddings are stored as float32 or float16")
    matrix, offsets = flatten(vectors)
    matrix = matrix.astype(dtype, copy=False)
    meta = {**(metadata or {}), "num_sentences": len(vectors), "num_words": int(offsets[-1]),
            "shape": list(matrix.shape)}
    if path.suffix == ".safetensors":
        tensors = {"vectors": torch.from_numpy(matrix), "offsets": torch.from_numpy(offsets)}
        write_weights(tensors, path, metadata={"muppets": json.dumps(meta)})
        return path
    save_npy_atomic(path, matrix)
    write_json_atomic(path.with_suffix(".json"), {**meta, "offsets": offsets.tolist()})
    return path


def load_embeddings(path: str | Path) -> Embeddings:
    """Read a :func:`save_embeddings` file back (``.npy`` needs its ``.json``)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        tensors = read_file(path)
        with safe_open(str(path), framework="pt") as fh:
            meta = json.loads((fh.metadata() or {}).get("muppets", "{}"))
        return Embeddings(split_rows(tensors["vectors"].numpy(), tensors["offsets"].numpy()), meta)
    if path.suffix != ".npy":
        raise ConfigError(f"{path}: embeddings are .safetensors or .npy files")
    side = path.with_suffix(".json")
    if not side.is_file():
        raise DataError(f"no {side.name} beside the .npy file (it holds the sentence offsets)", path=path)
    meta = json.loads(side.read_text(encoding="utf-8"))
    offsets = np.asarray(meta.pop("offsets"), dtype=np.int64)
    return Embeddings(split_rows(np.load(path, allow_pickle=False), offsets), meta)


def embed_file(model: str | Path, input_path: str | Path, out: str | Path, layers: Sequence[int] | None = None,
               pooling: str = "auto", batch_size: int = 32, device: str = "cpu", oov: str = "zero",
               progress: bool = False, max_positions: int | None = None, truncate: bool = False) -> dict:
    """Embed every line of ``input_path`` and write ``out``; returns the metadata written (with
    ``truncate``, the offsets say how many words of each line have vectors)."""
    output_files(out)  # before any work
    if max_positions is not None and max_positions < 1:
        raise ConfigError(f"--max-positions {max_positions}: must be >= 1")
    sentences = read_sentences(input_path)
    embedder = load_embedder(model, pooling, device, oov)
    chosen = resolve_layers(layers, embedder.num_layers, f"{embedder.kind} model {embedder.source}")
    vectors = embed_sentences(embedder, sentences, chosen, batch_size, source=input_path, progress=progress,
                              max_positions=max_positions, truncate=truncate)
    meta = {**embedder.describe(), "model": str(model), "input": str(input_path), "layers": chosen,
            "max_positions": position_limit(embedder, max_positions), "truncate": truncate,
            "pooling": embedder.pooling if is_family(embedder.kind) else None, **dict(embedder.stats)}
    if truncate:
        meta["truncated"] = embedder.stats.get("truncated", 0)
    save_embeddings(out, vectors, meta)
    if embedder.stats.get("oov"):
        log.warning("%d of %d words were out of vocabulary (zero vectors)", embedder.stats["oov"],
                    embedder.stats["words"])
    return {**meta, "out": str(out), "num_sentences": len(vectors), "num_words": sum(v.shape[1] for v in vectors)}
