"""GPT-2's byte-level BPE tokenizer on top of the Hugging Face ``tokenizers`` library.

The pipeline is GPT-2's (Radford et al. 2019, §2.2, and ``openai/gpt-2``'s ``encoder.py``): no
normalisation; GPT-2's regex cuts the text into pre-tokens (contractions, runs of letters, of
digits or of other symbols, each with its leading space, and runs of whitespace); the UTF-8
bytes of each pre-token become 256 printable stand-in characters (space → ``Ġ``, newline →
``Ċ``); BPE merges then join them in rank order. Because every byte has a symbol, any text
encodes without an unknown token and decodes back to exactly itself. ``<|endoftext|>`` (id
50256 in GPT-2) ends documents. GPT-2 has no padding token, so padding reuses it
(:attr:`ByteLevelBPETokenizer.pad_id`): padded positions are hidden by the attention mask and
the loss.

Ids are identical to ``transformers.GPT2TokenizerFast`` for the same files and options
(``tests/test_bpe.py``; ``benchmarks/bpe_parity.py`` checks every shared English text), and
:meth:`ByteLevelBPETokenizer.save` writes a directory that ``transformers`` loads as it is.
``transformers`` is only a test oracle: nothing here imports it.

Usage::

    import tempfile
    from muppets.tokenizers import ByteLevelBPETokenizer

    gpt2 = ByteLevelBPETokenizer.load("data:vocab/gpt2")    # GPT-2's vocab.json + merges.txt
    print(gpt2.encode("Hello world"), gpt2.eos_id)          # [15496, 995] 50256
    text = "Tabs\\t, CRLF\\r\\n,  two spaces, 北京 🙂"
    assert gpt2.decode(gpt2.encode(text)) == text           # lossless for any text
    [(ids, offsets)] = gpt2.encode_with_offsets(["Hello world"])  # [(0, 5), (5, 11)]

    corpus = ["The quick brown fox jumps.", "Café au lait, 北京."] * 10
    tok = ByteLevelBPETokenizer.train(corpus, vocab_size=300)  # 256 bytes, merges, eos last
    batch = tok.encode_batch(["one", "two words"])          # Rust batch encoder, no specials
    out = tok.save(tempfile.mkdtemp())   # vocab.json, merges.txt, tokenizer.json, 2 configs
    same = ByteLevelBPETokenizer.load(out)
    worker_copy = ByteLevelBPETokenizer.from_json(tok.to_json())  # cheap, for workers
    spaced = ByteLevelBPETokenizer.from_files("data:vocab/gpt2/vocab.json",
                                              "data:vocab/gpt2/merges.txt", add_prefix_space=True)
    print(spaced.encode("Hello world"))                     # [18435, 995]: " Hello world"
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors, trainers
from tokenizers.models import BPE

from muppets.config import final_path, parse_json, read_utf8, write_json_atomic
from muppets.errors import ConfigError, DataError
from muppets.paths import resolve_data_path
# Shared with the WordPiece tokenizer: HF file names and the readers of HF config files.
from muppets.tokenizers.wordpiece import (
    CONFIG_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_FILE,
    _UNSET_MAX_LENGTH,
    _check_ids,
    _read_configs,
    _read_json,
    _token_text,
    plain_text_copy,
)

logger = logging.getLogger(__name__)

VOCAB_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
MERGES_HEADER = "#version: 0.2"  # first line of GPT-2's merges.txt
EOS_TOKEN = "<|endoftext|>"
_JSON_FORMAT = "muppets.bpe/1"  # tag of :meth:`ByteLevelBPETokenizer.to_json` strings
# The 256 stand-ins for bytes, in code-point order: the order of ids 0..255 in GPT-2 and in
# every vocabulary :meth:`ByteLevelBPETokenizer.train` makes ("!" = 0, "Ġ" (space) = 220).
BYTE_SYMBOLS: tuple[str, ...] = tuple(sorted(pre_tokenizers.ByteLevel.alphabet()))

Merge = tuple[str, str]  # (left symbol, right symbol); they join into left + right
Offsets = list[tuple[int, int]]  # (start, end) character span of each token


@dataclass(frozen=True)
class ByteLevelBPESettings:
    """Everything besides the vocabulary and merges that decides how text becomes ids."""

    add_prefix_space: bool = False  # encode "text" as " text" (a sentence inside running text)
    model_max_length: int | None = None  # longest input the paired model accepts (GPT-2: 1024)
    eos_token: str = EOS_TOKEN  # ends each document; GPT-2 also names it bos and unk
    pad_token: str = EOS_TOKEN  # GPT-2 has none: pad with eos, the attention mask hides it

    def special_tokens(self) -> list[str]:
        """The special tokens, eos first, each once."""
        return list(dict.fromkeys([self.eos_token, self.pad_token]))

    def special_tokens_map(self) -> dict[str, str]:
        """The ``special_tokens_map.json`` of a GPT-2 tokenizer."""
        eos = self.eos_token
        return {"bos_token": eos, "eos_token": eos, "unk_token": eos, "pad_token": self.pad_token}

    def to_hf_config(self) -> dict[str, Any]:
        """The ``tokenizer_config.json`` that ``transformers`` reads for a GPT-2 tokenizer.

        ``clean_up_tokenization_spaces`` is off so that transformers' ``decode`` is lossless
        too (with it on, " ," would come back as ",").
        """
        config: dict[str, Any] = {
            "tokenizer_class": "GPT2Tokenizer",
            "add_prefix_space": self.add_prefix_space,
            "add_bos_token": False,
            "errors": "replace",
            "clean_up_tokenization_spaces": False,
            **self.special_tokens_map(),
        }
        if self.model_max_length is not None:
            config["model_max_length"] = self.model_max_length
        return config

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], pre_tokenizer: Any = None) -> ByteLevelBPESettings:
        """Read a ``tokenizer_config.json`` dict; ``add_prefix_space`` falls back to the
        ``pre_tokenizer`` of a tokenizer.json (a dict), then to False."""
        fallback = False
        if isinstance(pre_tokenizer, dict) and pre_tokenizer.get("type") == "ByteLevel":
            fallback = bool(pre_tokenizer.get("add_prefix_space", False))
        max_length = config.get("model_max_length")
        if not isinstance(max_length, int) or max_length >= _UNSET_MAX_LENGTH:
            max_length = None
        eos = _token_text(config.get("eos_token"), EOS_TOKEN)
        return cls(add_prefix_space=bool(config.get("add_prefix_space", fallback)),
                   model_max_length=max_length, eos_token=eos,
                   pad_token=_token_text(config.get("pad_token"), eos))


# ---------------------------------------------------------------------------- reading files
def _read_merges_txt(path: Path) -> tuple[list[Merge], list[int]]:
    """The merges of a ``merges.txt`` in rank order, and the (1-based) line of each.

    Parsed as ``tokenizers``' ``BPE.read_file`` does (and so transformers): lines end at
    ``\\n`` (a trailing ``\\r`` is dropped), lines starting with ``#version`` are skipped, every
    other line is two symbols separated by one space. Blank lines at the end are ignored.
    """
    lines = read_utf8(path, "merges file").split("\n")
    while lines and lines[-1].strip() == "":
        lines.pop()
    merges: list[Merge] = []
    numbers: list[int] = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise DataError("a merge must be two symbols separated by one space",
                            path=path, line=number, value=line)
        merges.append((parts[0], parts[1]))
        numbers.append(number)
    return merges, numbers


def _check_vocab(vocab: dict[str, Any], path: Path | None) -> dict[str, int]:
    """Check the ids of ``vocab`` (:func:`~muppets.tokenizers.wordpiece._check_ids`) and that it
    holds all 256 byte symbols (without them some text could not be encoded: BPE would
    silently drop it)."""
    _check_ids(vocab, path)
    missing = [symbol for symbol in BYTE_SYMBOLS if symbol not in vocab]
    if missing:
        raise DataError(f"vocabulary lacks {len(missing)} of the 256 byte symbols: it is not "
                        "a byte-level BPE vocabulary", path=path, value=missing[0])
    return vocab


def _check_merges(merges: Sequence[Merge], vocab: dict[str, int], path: Path | None,
                  lines: Sequence[int] | None = None) -> None:
    """Every merge must join two vocabulary symbols into a vocabulary token."""
    for rank, (left, right) in enumerate(merges):
        absent = next((s for s in (left, right, left + right) if s not in vocab), None)
        if absent is not None:
            where = "" if lines else f"merge #{rank}: "
            raise DataError(f"{where}merge {left!r} + {right!r} needs {absent!r}, which is not "
                            "in the vocabulary", path=path, line=lines[rank] if lines else None,
                            value=f"{left} {right}")


def _merge_item(item: Any, rank: int, path: Path | None) -> Merge:
    """One merge of a tokenizer.json: ``"a b"`` (tokenizers < 0.20) or ``["a", "b"]``."""
    parts = item.split(" ") if isinstance(item, str) else item
    if (not isinstance(parts, (list, tuple)) or len(parts) != 2
            or not all(isinstance(p, str) and p for p in parts)):
        raise DataError(f"merge #{rank} is not two symbols", path=path, value=item)
    return parts[0], parts[1]


def _added_tokens(data: dict[str, Any], path: Path | None) -> list[Any]:
    """The ``added_tokens`` list of a tokenizer.json dict (empty if absent)."""
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise DataError("added_tokens is not a list", path=path, value=type(added).__name__)
    return added


def _bpe_from_tokenizer_json(data: dict[str, Any], path: Path | None
                             ) -> tuple[dict[str, int], list[Merge]]:
    """The checked vocabulary (added tokens included) and merges of a tokenizer.json dict."""
    model = data.get("model")
    kind = model.get("type") if isinstance(model, dict) else type(model).__name__
    if kind != "BPE":
        raise DataError("tokenizer.json does not hold a BPE model", path=path, value=kind)
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise DataError(f"BPE model has a {key}: not a byte-level BPE", path=path,
                            value=model[key])
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise DataError("BPE model lacks its vocab or merges", path=path)
    vocab = dict(vocab)
    for added in _added_tokens(data, path):
        if isinstance(added, dict) and isinstance(added.get("content"), str):
            vocab.setdefault(added["content"], added.get("id"))
    merges = [_merge_item(item, rank, path) for rank, item in enumerate(merges)]
    return _check_vocab(vocab, path), merges


# ---------------------------------------------------------------------------- assembling
def _build(vocab: dict[str, int], merges: Sequence[Merge], settings: ByteLevelBPESettings,
           source: Path | None) -> Tokenizer:
    """GPT-2's pipeline around a BPE model of ``vocab`` and ``merges`` (both already checked).

    The pieces are what transformers' GPT-2 tokenizer builds: the ByteLevel pre-tokenizer with
    GPT-2's regex (``use_regex``), ByteLevel decoder, and a ByteLevel post-processor that leaves
    offsets untrimmed (a token's span includes its leading space). No dropout, no unknown token.
    """
    missing = [token for token in settings.special_tokens() if token not in vocab]
    if missing:
        raise DataError("vocabulary lacks a special token", path=source, value=missing[0])
    backend = Tokenizer(BPE(vocab=vocab, merges=list(merges), dropout=None, unk_token=None,
                            fuse_unk=False, byte_fallback=False, ignore_merges=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=settings.add_prefix_space, trim_offsets=True, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                for token in settings.special_tokens()])
    return backend


def _backend_from_str(text: str) -> Tokenizer:
    """Parse a :meth:`ByteLevelBPETokenizer.to_json` backend and check it holds a BPE model."""
    try:
        backend = Tokenizer.from_str(text)
    except Exception as err:  # the Rust parser raises a bare Exception
        raise DataError(f"not a valid tokenizer.json: {err}") from err
    if not isinstance(backend.model, BPE):
        raise DataError("tokenizer.json does not hold a BPE model",
                        value=type(backend.model).__name__)
    return backend


class ByteLevelBPETokenizer:
    """GPT-2's byte-level BPE tokenizer: train one, or load GPT-2's files or an HF directory.

    Build it with :meth:`train`, :meth:`from_files`, :meth:`load` or :meth:`from_json`; the
    constructor takes an already assembled ``tokenizers.Tokenizer``.
    """

    def __init__(self, backend: Tokenizer, settings: ByteLevelBPESettings) -> None:
        self._backend = backend
        self._settings = settings
        self._eos_id = backend.token_to_id(settings.eos_token)
        self._pad_id = backend.token_to_id(settings.pad_token)
        assert None not in (self._eos_id, self._pad_id), "backend was not assembled"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int = 50257,
        *,
        min_frequency: int = 2,
        add_prefix_space: bool = False,
        show_progress: bool = False,
        model_max_length: int | None = None,
    ) -> ByteLevelBPETokenizer:
        """Learn a byte-level BPE of at most ``vocab_size`` tokens from ``texts`` (read once).

        The ids follow GPT-2's layout: the 256 byte symbols (0..255, code-point order), then
        one token per merge in the order learned, then ``<|endoftext|>`` last. Merging stops
        at ``vocab_size`` or when no pair occurs ``min_frequency`` times. The same texts, in
        any order, give the same vocabulary and merges in every run (see
        :func:`_train_merges`).
        """
        _check_train_args(texts, vocab_size, min_frequency)
        settings = ByteLevelBPESettings(add_prefix_space=add_prefix_space,
                                        model_max_length=model_max_length)
        specials = settings.special_tokens()
        vocab, merges = _train_merges(texts, settings, vocab_size - len(specials),
                                      min_frequency, show_progress)
        for token in specials:  # GPT-2's layout: <|endoftext|> after the merges
            assert token not in vocab, "the pre-tokenizer cuts special tokens apart"
            vocab[token] = len(vocab)
        logger.info("trained a byte-level BPE of %d tokens (%d merges)", len(vocab), len(merges))
        return cls(_build(vocab, merges, settings, None), settings)

    @classmethod
    def from_files(
        cls,
        vocab_json: str | Path,
        merges_txt: str | Path,
        *,
        add_prefix_space: bool = False,
        model_max_length: int | None = None,
    ) -> ByteLevelBPETokenizer:
        """Load GPT-2-style ``vocab.json`` (token → id) and ``merges.txt`` (one merge a line,
        highest priority first). ``data:`` paths resolve against the shared data directory.

        Raises :class:`DataError` naming the file (and line) if either is missing, unreadable
        or malformed: a merges line that is not two space-separated symbols, a merge whose
        symbols or result are not in the vocabulary, a vocabulary without the 256 byte symbols
        or without ``<|endoftext|>``.
        """
        settings = ByteLevelBPESettings(add_prefix_space=add_prefix_space,
                                        model_max_length=model_max_length)
        return cls._from_files_settings(resolve_data_path(vocab_json),
                                        resolve_data_path(merges_txt), settings)

    @classmethod
    def _from_files_settings(cls, vocab_path: Path, merges_path: Path,
                             settings: ByteLevelBPESettings) -> ByteLevelBPETokenizer:
        vocab = _check_vocab(_read_json(vocab_path), vocab_path)
        merges, lines = _read_merges_txt(merges_path)
        _check_merges(merges, vocab, merges_path, lines)
        return cls(_build(vocab, merges, settings, vocab_path), settings)

    @classmethod
    def load(cls, directory: str | Path) -> ByteLevelBPETokenizer:
        """Read a directory written by :meth:`save` or by transformers for a GPT-2 model.

        Uses ``tokenizer.json`` when present, else ``vocab.json`` + ``merges.txt``; options
        (``add_prefix_space``, special tokens, ``model_max_length``) come from
        ``tokenizer_config.json`` (and ``special_tokens_map.json``) when present. The pipeline
        around the vocabulary is always GPT-2's. ``data:vocab/gpt2`` is GPT-2's own files.
        """
        directory = resolve_data_path(directory)
        if not directory.is_dir():
            raise DataError("tokenizer directory not found", path=directory)
        config = _read_configs(directory)
        json_path = directory / TOKENIZER_FILE
        if json_path.is_file():
            return cls._from_tokenizer_json(_read_json(json_path), config, json_path)
        vocab_path, merges_path = directory / VOCAB_FILE, directory / MERGES_FILE
        if vocab_path.is_file() and merges_path.is_file():
            settings = ByteLevelBPESettings.from_hf_config(config)
            return cls._from_files_settings(vocab_path, merges_path, settings)
        raise DataError(f"neither {TOKENIZER_FILE} nor {VOCAB_FILE} + {MERGES_FILE} found",
                        path=directory)

    @classmethod
    def _from_tokenizer_json(cls, data: dict[str, Any], config: dict[str, Any],
                             source: Path | None) -> ByteLevelBPETokenizer:
        vocab, merges = _bpe_from_tokenizer_json(data, source)
        _check_merges(merges, vocab, source)
        settings = ByteLevelBPESettings.from_hf_config(config, data.get("pre_tokenizer"))
        added = {a.get("content") for a in _added_tokens(data, source) if isinstance(a, dict)}
        others = sorted(added.intersection(vocab).difference(settings.special_tokens()))
        if others:
            logger.warning("%s: added tokens %s are kept as ordinary vocabulary entries",
                           source or "tokenizer.json", others)
        return cls(_build(vocab, merges, settings, source), settings)

    @classmethod
    def from_json(cls, text: str) -> ByteLevelBPETokenizer:
        """Rebuild from :meth:`to_json` (or from a plain HF ``tokenizer.json`` string)."""
        data = parse_json(text)
        if not isinstance(data, dict):
            raise DataError("expected a JSON object", value=type(data).__name__)
        if data.get("format") != _JSON_FORMAT:
            return cls._from_tokenizer_json(data, {}, None)
        try:
            settings = ByteLevelBPESettings(**data["settings"])
            backend_text = data["backend"]
        except (KeyError, TypeError) as err:
            raise DataError(f"malformed {_JSON_FORMAT} string: {err}") from err
        return cls(_backend_from_str(backend_text), settings)

    def to_json(self) -> str:
        """Serialise everything (settings + the Rust tokenizer) to one string for workers."""
        return json.dumps({"format": _JSON_FORMAT,
                           "settings": dataclasses.asdict(self._settings),
                           "backend": self._backend.to_str()})

    def with_prefix_space(self, on: bool = True) -> ByteLevelBPETokenizer:
        """A copy with ``add_prefix_space`` set to ``on`` (same vocabulary and merges): e.g. to
        encode sentences as they appear inside running text, or pre-split words."""
        settings = dataclasses.replace(self._settings, add_prefix_space=on)
        backend = Tokenizer.from_str(self._backend.to_str())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=on, trim_offsets=True,
                                                         use_regex=True)
        return type(self)(backend, settings)

    # ------------------------------------------------------------------ saving
    def save(self, directory: str | Path) -> Path:
        """Write ``vocab.json``, ``merges.txt``, ``tokenizer.json``, ``tokenizer_config.json``
        and ``special_tokens_map.json``: a directory transformers' ``AutoTokenizer`` loads.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        vocab = self._backend.get_vocab(with_added_tokens=True)
        write_json_atomic(directory / VOCAB_FILE, dict(sorted(vocab.items(), key=lambda kv: kv[1])))
        merges = [MERGES_HEADER] + [f"{left} {right}" for left, right in self.merges]
        (directory / MERGES_FILE).write_text("\n".join(merges) + "\n", encoding="utf-8")
        self._backend.save(str(directory / TOKENIZER_FILE))
        write_json_atomic(directory / CONFIG_FILE, self._settings.to_hf_config())
        write_json_atomic(directory / SPECIAL_TOKENS_MAP_FILE, self._settings.special_tokens_map())
        logger.info("saved byte-level BPE tokenizer (%d tokens) to %s", self.vocab_size, final_path(directory))
        return directory

    # ------------------------------------------------------------------ vocabulary
    @property
    def backend(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer`` (no padding, no truncation)."""
        return self._backend

    @property
    def settings(self) -> ByteLevelBPESettings:
        """``add_prefix_space``, ``model_max_length`` and the special-token strings."""
        return self._settings

    @cached_property
    def vocab_size(self) -> int:
        """Number of embedding rows needed: largest id + 1 (GPT-2: 50257)."""
        return max(self._backend.get_vocab(with_added_tokens=True).values()) + 1

    @cached_property
    def merges(self) -> tuple[Merge, ...]:
        """The merges in rank order (highest priority first), as in ``merges.txt``."""
        model = json.loads(self._backend.to_str())["model"]
        return tuple(_merge_item(item, rank, None) for rank, item in enumerate(model["merges"]))

    @property
    def add_prefix_space(self) -> bool:
        """Whether a space is put before a text that does not start with one."""
        return self._settings.add_prefix_space

    @property
    def model_max_length(self) -> int | None:
        """Longest input the paired model accepts, if known (GPT-2: 1024)."""
        return self._settings.model_max_length

    @property
    def eos_id(self) -> int:
        """Id of ``<|endoftext|>`` (GPT-2: 50256), which ends every document."""
        return self._eos_id

    @property
    def pad_id(self) -> int:
        """Id used for padding: ``eos_id`` unless another pad token was configured.

        GPT-2 was trained without padding; batching pads with ``<|endoftext|>`` and passes an
        attention mask (and ignores those positions in the loss), so the id never matters.
        """
        return self._pad_id

    @property
    def special_ids(self) -> dict[str, int]:
        """Role (``eos``, ``pad``) → id."""
        return {"eos": self._eos_id, "pad": self._pad_id}

    def token_to_id(self, token: str) -> int | None:
        """Id of ``token`` (in byte-symbol form: " the" is ``"Ġthe"``), or None."""
        return self._backend.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        """Token with id ``index`` (in byte-symbol form), or None if no token has it."""
        return self._backend.id_to_token(index)

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; no special token is added (a literal ``<|endoftext|>`` in the text
        does become ``eos_id``, as in transformers)."""
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text (as :meth:`encode`), via the parallel Rust batch encoder."""
        encodings = self._backend.encode_batch_fast(list(texts), add_special_tokens=False)
        return [enc.ids for enc in encodings]

    def encode_text_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text with every character read as text, as corpus text is: a literal
        ``<|endoftext|>`` becomes the bytes it is written with, not ``eos_id`` (which
        :meth:`encode_batch` gives, for prompts that mean it), so it ends no document."""
        return [enc.ids for enc in self._text_backend.encode_batch_fast(list(texts), add_special_tokens=False)]

    @cached_property
    def _text_backend(self) -> Tokenizer:
        return plain_text_copy(self._backend)

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], Offsets]]:
        """(ids, (start, end) character span of each token in the original text) per text.

        Spans are those of transformers' ``return_offsets_mapping``: a token that starts with
        a space covers it ("Ġworld" in "Hello world" is (5, 11)); the tokens that split one
        character's bytes (an emoji) all get that character's span; with ``add_prefix_space``
        the added space is in no span, so every span stays inside the original text.
        """
        encodings = self._backend.encode_batch(list(texts), add_special_tokens=False)
        return [(enc.ids, list(enc.offsets)) for enc in encodings]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``: ``decode(encode(text)) == text`` for every text (with
        ``add_prefix_space``, the added leading space comes back too). Ids that end inside a
        character decode to U+FFFD for the incomplete bytes, as in transformers."""
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_batch(self, sequences: Sequence[Sequence[int]],
                     skip_special_tokens: bool = False) -> list[str]:
        """:meth:`decode` of each id sequence, via the Rust batch decoder."""
        return self._backend.decode_batch([list(ids) for ids in sequences],
                                          skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        s = self._settings
        return (f"ByteLevelBPETokenizer(vocab_size={self.vocab_size}, "
                f"add_prefix_space={s.add_prefix_space}, model_max_length={s.model_max_length})")


# ---------------------------------------------------------------------------- training
def _train_merges(texts: Iterable[str], settings: ByteLevelBPESettings, vocab_size: int,
                  min_frequency: int, show_progress: bool) -> tuple[dict[str, int], list[Merge]]:
    """Run the ``tokenizers`` BPE trainer: a vocabulary of the 256 byte symbols, then one
    token per merge, at most ``vocab_size`` in all, and the merges in the order learned.

    Unlike WordPiece's (see ``wordpiece._train_vocab``) the Rust BPE trainer is deterministic
    on its own: it numbers the alphabet in code-point order, adds no ``##`` tokens, and of two
    equally frequent pairs merges the one with the smaller ids first; pair counts do not
    depend on the order of the texts either. ``tests/test_bpe.py`` checks it. The texts are
    read as text, as a prepared corpus is (:meth:`ByteLevelBPETokenizer.encode_text_batch`):
    a literal ``<|endoftext|>`` counts as its characters, which GPT-2's regex cuts into
    ``<|``, ``endoftext`` and ``|>``, so no merge can rebuild the special token.
    """
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
        initial_alphabet=list(BYTE_SYMBOLS), special_tokens=[])
    backend = Tokenizer(BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=settings.add_prefix_space, use_regex=True)
    seen = [0]  # number of non-empty texts
    backend.train_from_iterator(_non_empty(texts, seen), trainer=trainer)
    if seen[0] == 0:
        raise DataError("training texts are empty")
    model = json.loads(backend.to_str())["model"]
    merges = [_merge_item(item, rank, None) for rank, item in enumerate(model["merges"])]
    return dict(model["vocab"]), merges


def _non_empty(texts: Iterable[str], count: list[int]) -> Iterator[str]:
    """The non-empty texts; ``count[0]`` counts them."""
    for text in texts:
        if text:
            count[0] += 1
            yield text


def _check_train_args(texts: Iterable[str], vocab_size: int, min_frequency: int) -> None:
    """Reject arguments the Rust trainer would misread or ignore."""
    if isinstance(texts, (str, bytes)):
        raise ConfigError("texts must be an iterable of strings, not one string")
    if vocab_size < len(BYTE_SYMBOLS) + 1:
        raise ConfigError(f"vocab_size={vocab_size} must be at least {len(BYTE_SYMBOLS) + 1}: "
                          f"the {len(BYTE_SYMBOLS)} byte symbols and {EOS_TOKEN}")
    if min_frequency < 0:
        raise ConfigError(f"min_frequency={min_frequency} must be >= 0")
