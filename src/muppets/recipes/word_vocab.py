"""The word vocabulary stage shared by the word-level recipes (word2vec, NNLM): count a
:class:`~muppets.tokenizers.words.WordVocab` on the corpus once per setting, reuse it after."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields
from pathlib import Path

from muppets.config import write_json_atomic
from muppets.paths import resolve_data_path
from muppets.recipes.common import CorpusSection, corpus_texts
from muppets.tokenizers.words import WordVocab

__all__ = ["WordVocabSection", "ensure_word_vocab"]

log = logging.getLogger(__name__)


@dataclass
class WordVocabSection:
    path: str = ""  # a saved WordVocab directory ("" = count one on the corpus into <run_dir>/vocab, once)
    min_count: int = 1  # words seen fewer times become <unk>
    max_size: int = 0  # cap on the vocabulary, specials included (0 = no cap)
    lowercase: bool = True  # lower-case every word
    max_documents: int = 0  # count words in at most this many documents (0 = all)


def ensure_word_vocab(sec: WordVocabSection, corpus: CorpusSection, run_dir: Path) -> WordVocab:
    """The configured vocabulary, or one counted on the corpus (reused while its settings hold)."""
    if sec.path:
        return WordVocab.load(resolve_data_path(sec.path))
    out = Path(run_dir) / "vocab"
    settings = {"inputs": corpus.inputs, "format": corpus.format,  # (a subclass's own fields left out)
                **{f.name: getattr(sec, f.name) for f in fields(WordVocabSection)}}
    stamp = out / "build.json"
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")) == settings:
        return WordVocab.load(out)
    log.info("counting words on %s", corpus.inputs)
    vocab = WordVocab.build(corpus_texts(corpus, sec.max_documents), min_count=sec.min_count,
                            max_size=sec.max_size, lowercase=sec.lowercase)
    vocab.save(out)
    write_json_atomic(stamp, settings)
    log.info("word vocabulary: %d words (min_count %d, max_size %d)", len(vocab), sec.min_count, sec.max_size)
    return vocab
