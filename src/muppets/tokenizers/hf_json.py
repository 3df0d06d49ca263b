"""Any Hugging Face ``tokenizer.json`` (byte-level BPE, Unigram / SentencePiece, WordPiece …)
with the model family's special tokens and pair template, behind :class:`WordPieceTokenizer`'s
interface, so task features, embedders, serving and export read RoBERTa / XLM-R directories as
they read BERT's.

The pipeline (normalizer, pre-tokenizer, model, post-processor) is the file's own, as
transformers' fast tokenizers run it: ``<s> A </s>`` and ``<s> A </s></s> B </s>`` for RoBERTa and
XLM-R come from the file's post-processor (``RobertaProcessing`` or ``TemplateProcessing``), never
from code here. Special tokens are read from ``tokenizer_config.json`` /
``special_tokens_map.json`` (``cls_token`` … ``mask_token``), else from the family's defaults.
Padding and truncation stored in the file are switched off: callers get exact id lists.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

from muppets.errors import DataError
from muppets.tokenizers.wordpiece import (CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE, TOKENIZER_FILE, _longest_first,
                                          _read_configs, _token_text, parse_tokenizer_json, plain_text_copy)

log = logging.getLogger(__name__)

ROLES = ("pad", "unk", "cls", "sep", "mask")
ROBERTA_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}
_JSON_FORMAT = "muppets.json-tokenizer/1"  # tag of :meth:`JsonTokenizer.to_json` strings
WORD_START = {"ByteLevel": "\u0120", "Metaspace": "\u2581"}  # the mark a pre-tokenizer puts on a word's first piece


@dataclass
class WordEncoding:
    """The pieces of pre-split words: ``ids`` and, per id, the index of its word."""

    ids: list[int]
    word_ids: list[int]


class JsonTokenizer:
    """A ``tokenizer.json`` with its family's special tokens (see the module docstring)."""

    def __init__(self, backend: Tokenizer, specials: dict[str, str], source: Path | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self._backend, self._specials, self._config = backend, dict(specials), dict(config or {})
        backend.no_padding()
        backend.no_truncation()
        self._special_ids = {role: backend.token_to_id(tok) for role, tok in specials.items()}
        missing = [specials[r] for r, i in self._special_ids.items() if i is None]
        if missing:
            raise DataError(f"the vocabulary lacks the special token {missing[0]!r}", path=source,
                            value=missing[0])
        self._text = plain_text_copy(backend)

    @classmethod
    def load(cls, directory: str | Path, defaults: dict[str, str] = ROBERTA_SPECIALS) -> JsonTokenizer:
        """Read ``directory/tokenizer.json`` and its configs."""
        directory = Path(directory)
        path = directory / TOKENIZER_FILE
        if not path.is_file():
            raise DataError(f"no {TOKENIZER_FILE} (this family reads its tokenizer from one)", path=directory)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(f"cannot read it: {err}", path=path) from err
        backend = parse_tokenizer_json(text, path)
        config = _read_configs(directory)
        specials = {r: _token_text(config.get(f"{r}_token"), defaults[r]) for r in ROLES}
        return cls(backend, specials, path, config)

    def to_json(self) -> str:
        """Everything (special tokens, configs, the Rust tokenizer) as one string: what a prepared
        corpus is fingerprinted by and what worker processes rebuild it from."""
        return json.dumps({"format": _JSON_FORMAT, "specials": self._specials, "config": self._config,
                           "backend": self._backend.to_str()}, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> JsonTokenizer:
        """Rebuild from :meth:`to_json`."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != _JSON_FORMAT:
            raise DataError(f"not a {_JSON_FORMAT} string", value=str(text)[:60])
        return cls(Tokenizer.from_str(data["backend"]), data["specials"], None, data["config"])

    def save(self, directory: str | Path) -> Path:
        """Write ``tokenizer.json`` and the two configs transformers' ``AutoTokenizer`` reads."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._backend.save(str(directory / TOKENIZER_FILE))
        tokens = {f"{r}_token": t for r, t in self._specials.items()}
        config = {**self._config, **tokens}
        config.setdefault("bos_token", self._specials["cls"])
        config.setdefault("eos_token", self._specials["sep"])
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        (directory / SPECIAL_TOKENS_MAP_FILE).write_text(json.dumps(tokens, indent=2, ensure_ascii=False),
                                                         encoding="utf-8")
        return directory

    # ------------------------------------------------------------------ vocabulary
    @property
    def backend(self) -> Tokenizer:
        return self._backend

    @property
    def vocab_size(self) -> int:
        """Ids the model needs rows for: the largest id + 1."""
        return max(self._backend.get_vocab(with_added_tokens=True).values()) + 1

    @property
    def lowercase(self) -> bool:
        return bool(self._config.get("do_lower_case", False))

    @property
    def model_max_length(self) -> int | None:
        n = self._config.get("model_max_length")
        return n if isinstance(n, int) and n < 10**12 else None

    pad_id = property(lambda self: self._special_ids["pad"])
    unk_id = property(lambda self: self._special_ids["unk"])
    cls_id = property(lambda self: self._special_ids["cls"])
    sep_id = property(lambda self: self._special_ids["sep"])
    mask_id = property(lambda self: self._special_ids["mask"])

    @property
    def is_continuation(self) -> np.ndarray:
        """(vocab_size,) read-only bool array: True for a piece that continues a word (whole-word
        masking). WordPiece (and BPE with a continuing prefix): the pieces with that prefix;
        byte-level BPE and SentencePiece: the pieces without the word-start mark (``Ġ`` / ``▁``)
        its pre-tokenizer puts on a word's first piece; special and added tokens never."""
        flags = np.zeros(self.vocab_size, dtype=bool)
        prefix = getattr(self._backend.model, "continuing_subword_prefix", None)
        mark = _word_start_mark(json.loads(self._backend.to_str()).get("pre_tokenizer"))
        for token, index in self._backend.get_vocab(with_added_tokens=False).items():
            flags[index] = token.startswith(prefix) if prefix else bool(mark) and not token.startswith(mark)
        flags.flags.writeable = False
        return flags

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special_ids)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self._backend.id_to_token(index)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ encoding
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._backend.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_text_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Corpus text: a special token's string in it is read as the characters it is."""
        return [e.ids for e in self._text.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encodings(self, texts: Sequence[str]) -> list[Encoding]:
        """Full encodings (ids, offsets, word ids) without special tokens."""
        return self._backend.encode_batch(list(texts), add_special_tokens=False)

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        return [(e.ids, list(e.offsets)) for e in self.encodings(texts)]

    def encode_words(self, sentences: Sequence[Sequence[str]]) -> list[WordEncoding]:
        """Pre-split words read as the model reads ``" ".join(words)`` (a byte-level BPE or
        SentencePiece model marks a word's start by its space); a piece belongs to the word its
        last character is in, a lone space piece to the word it opens."""
        out = []
        for words, enc in zip(sentences, self.encodings([" ".join(ws) for ws in sentences])):
            owner = []  # word of each character of the joined text
            for w, word in enumerate(words):
                owner += [w] * len(word) + [w + 1]  # the joining space opens the next word
            ids, word_ids = [], []
            for token_id, (start, end) in zip(enc.ids, enc.offsets):
                at = end - 1 if end > start else start
                if 0 <= at < len(owner) and owner[at] < len(words):
                    ids.append(token_id)
                    word_ids.append(owner[at])
            out.append(WordEncoding(ids, word_ids))
        return out

    def encode_for_model(self, text: str, text_pair: str | None = None,
                         max_length: int | None = None) -> dict[str, list[int]]:
        pairs = None if text_pair is None else [text_pair]
        return self.encode_for_model_batch([text], pairs, max_length)[0]

    def encode_for_model_batch(self, texts: Sequence[str], text_pairs: Sequence[str] | None = None,
                               max_length: int | None = None) -> list[dict[str, list[int]]]:
        """Model inputs with the file's template (RoBERTa: ``<s> A </s></s> B </s>``, all type 0),
        cut ``longest_first`` to ``max_length`` as transformers' fast tokenizers do."""
        firsts = self.encodings(texts)
        seconds = [None] * len(firsts) if text_pairs is None else self.encodings(text_pairs)
        out = []
        for a, b in zip(firsts, seconds):
            if max_length is not None:
                budget = max_length - self._backend.num_special_tokens_to_add(b is not None)
                if budget < 0:
                    raise DataError(f"max_length={max_length} cannot hold the special tokens")
                ka, kb = _longest_first(a.ids, None if b is None else b.ids, budget)
                a.truncate(len(ka))
                if b is not None:
                    b.truncate(len(kb))
            enc = self._backend.post_process(a, b, add_special_tokens=True)
            out.append({"input_ids": enc.ids, "token_type_ids": enc.type_ids, "attention_mask": [1] * len(enc.ids)})
        return out

    def __repr__(self) -> str:
        return f"JsonTokenizer({type(self._backend.model).__name__}, vocab_size={self.vocab_size})"



def _word_start_mark(pre_tokenizer: dict | None) -> str:
    """The mark (``Ġ`` / ``▁``) a tokenizer.json pre-tokenizer puts on a word's first piece, or ""."""
    if not isinstance(pre_tokenizer, dict):
        return ""
    parts = pre_tokenizer.get("pretokenizers") or [pre_tokenizer]  # a Sequence, or one
    marks = [WORD_START.get(p.get("type", ""), "") for p in parts if isinstance(p, dict)]
    return next((m for m in marks if m), "")
