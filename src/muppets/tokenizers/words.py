"""A word vocabulary: text -> word ids, for word2vec, the NNLM and ELMo's output softmax.

Words are runs of letters/digits (with inner apostrophes and hyphens kept: ``don't``,
``well-known``) or single other symbols, optionally lower-cased. The vocabulary keeps the
words seen at least ``min_count`` times (at most ``max_size``), most frequent first (ties by the
word, so building is deterministic); every other word maps to ``<unk>``. It satisfies the corpus
pipeline's tokenizer protocol (``vocab_size``, ``to_json``, ``encode_batch``), so
:func:`muppets.data.prepare.prepare_corpus` writes word-id shards with sentence and document
boundaries like any other tokenizer.

Usage::

    from muppets.tokenizers.words import WordVocab
    vocab = WordVocab.build(["The cat sat.", "The dog sat!"], min_count=1)
    vocab.split("Don't panic, well-known cat.")   # ["don't", 'panic', ',', 'well-known', 'cat', '.']
    vocab.encode("the cat")                       # [ids]; unseen words -> vocab.unk_id
    vocab.counts[vocab.token_to_id("the")]        # 2
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from muppets.config import from_dict, parse_json, read_utf8, write_json_atomic
from muppets.errors import ConfigError, DataError

VOCAB_FILE = "words.txt"  # one "word<TAB>count" line per id, in id order
CONFIG_FILE = "words.json"
_WORD = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]", re.UNICODE)
_JSON_FORMAT = "muppets.words/1"


@dataclass(frozen=True)
class WordSettings:
    lowercase: bool = True  # lower-case before looking words up
    unk_token: str = "<unk>"  # every word outside the vocabulary
    bos_token: str = "<s>"  # sentence start (ELMo, NNLM)
    eos_token: str = "</s>"  # sentence end (ELMo, NNLM)
    pad_token: str = "<pad>"  # padding

    @property
    def specials(self) -> list[str]:
        return [self.pad_token, self.unk_token, self.bos_token, self.eos_token]


class WordVocab:
    """Words <-> ids with their corpus counts; ids 0..3 are ``<pad> <unk> <s> </s>``."""

    def __init__(self, words: Sequence[str], counts: Sequence[int], settings: WordSettings = WordSettings()) -> None:
        if list(words[:4]) != settings.specials:
            raise ConfigError(f"a word vocabulary starts with {settings.specials}, not {list(words[:4])}")
        if len(set(words)) != len(words):
            dup = next(w for w, c in Counter(words).items() if c > 1)
            raise DataError("word listed twice in the vocabulary", value=dup)
        self.words = list(words)
        self.counts = np.asarray(counts, dtype=np.int64)  # (V,) training-corpus count of each word
        self.settings = settings
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = range(4)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, texts: Iterable[str], min_count: int = 5, max_size: int = 0,
              lowercase: bool = True) -> WordVocab:
        """Count the words of ``texts``; keep those seen ``min_count`` times (the ``max_size``
        most frequent, 0 = no cap; specials included in the cap)."""
        if min_count < 1 or max_size < 0:
            raise ConfigError(f"min_count={min_count} must be >= 1 and max_size={max_size} >= 0")
        settings = WordSettings(lowercase=lowercase)
        counter: Counter = Counter()
        for text in texts:
            counter.update(split_words(text, lowercase))
        kept = sorted((w for w, c in counter.items() if c >= min_count and w not in settings.specials),
                      key=lambda w: (-counter[w], w))
        if max_size:
            kept = kept[: max(0, max_size - 4)]
        unk = sum(counter.values()) - sum(counter[w] for w in kept)  # every word not kept is <unk>
        words = settings.specials + kept
        counts = [0, unk, 0, 0] + [counter[w] for w in kept]
        return cls(words, counts, settings)

    # ------------------------------------------------------------------ encoding
    def split(self, text: str) -> list[str]:
        """The words of ``text`` (lower-cased when the vocabulary is)."""
        return split_words(text, self.settings.lowercase)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(w, self.unk_id) for w in self.split(text)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_words(self, words: Sequence[str]) -> list[int]:
        """Ids of already split words (lower-cased here when the vocabulary is)."""
        low = self.settings.lowercase
        return [self.index.get(w.lower() if low else w, self.unk_id) for w in words]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.words[i] for i in ids)

    def token_to_id(self, word: str) -> int | None:
        return self.index.get(word)

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def __len__(self) -> int:
        return len(self.words)

    # ------------------------------------------------------------------ files
    def save(self, directory: str | Path) -> Path:
        """``words.txt`` (word<TAB>count per id) and ``words.json`` (settings)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{w}\t{c}" for w, c in zip(self.words, self.counts.tolist())]
        tmp = directory / f".{VOCAB_FILE}.tmp"
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(directory / VOCAB_FILE)
        write_json_atomic(directory / CONFIG_FILE, asdict(self.settings))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> WordVocab:
        directory = Path(directory)
        path = directory / VOCAB_FILE
        if not path.is_file():
            raise ConfigError(f"{directory}: no {VOCAB_FILE} (not a word vocabulary directory)")
        words, counts = read_word_counts(path)
        settings = _read_settings(directory / CONFIG_FILE)
        if words[:4] != settings.specials:
            raise DataError(f"a word vocabulary starts with {settings.specials}", path=path,
                            value=words[:4])
        return cls(words, counts, settings)

    def to_json(self) -> str:
        return json.dumps({"format": _JSON_FORMAT, "settings": asdict(self.settings),
                           "words": self.words, "counts": self.counts.tolist()})

    @classmethod
    def from_json(cls, text: str) -> WordVocab:
        data = json.loads(text)
        if data.get("format") != _JSON_FORMAT:
            raise DataError("not a muppets word vocabulary JSON string", value=data.get("format"))
        return cls(data["words"], data["counts"], WordSettings(**data["settings"]))

    def __repr__(self) -> str:
        return f"WordVocab(size={self.vocab_size}, lowercase={self.settings.lowercase})"


def _read_settings(path: Path) -> WordSettings:
    """The settings in ``words.json`` (defaults without the file), checked like a config."""
    if not path.is_file():
        return WordSettings()
    try:
        return from_dict(WordSettings, parse_json(read_utf8(path), path))
    except ConfigError as err:
        raise DataError(str(err), path=path) from err


def read_word_counts(path: Path) -> tuple[list[str], list[int]]:
    """``word<TAB>count`` lines, each word once; an undecodable byte, a malformed line or a
    repeated word raises DataError naming the file and line."""
    words, counts, first = [], [], {}
    for lineno, line in enumerate(read_utf8(path).splitlines(), 1):
        word, tab, count = line.rpartition("\t")
        if not tab or not (count.isascii() and count.isdigit()) or len(count) > 18:
            raise DataError("expected 'word<TAB>count' (a count of at most 18 digits)",
                            path=path, line=lineno, value=line[:60])
        if word in first:
            raise DataError(f"word repeated (first on line {first[word]})", path=path,
                            line=lineno, value=word)
        first[word] = lineno
        words.append(word)
        counts.append(int(count))
    return words, counts


def split_words(text: str, lowercase: bool = True) -> list[str]:
    """Words and single symbols of ``text``.

    >>> split_words("Don't panic, well-known cat.")
    ["don't", 'panic', ',', 'well-known', 'cat', '.']
    """
    return _WORD.findall(text.lower() if lowercase else text)
