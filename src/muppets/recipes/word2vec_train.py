"""word2vec from raw text: word vocabulary -> prepared word corpus -> skip-gram/CBOW -> vectors.

``muppets word2vec train [config.yaml] key=value …`` runs :func:`run`. Stages (each reused when
it already exists for the same settings): a :class:`~muppets.tokenizers.words.WordVocab` that
keeps every word (``vocab.min_count=1``, so that word2vec applies its own ``min_count`` like the
C tool and gensim, and one corpus serves every ``min_count``), the memory-mapped corpus
(``<run_dir>/corpus``), then training with checkpoints and exact resume. Outputs::

    <run_dir>/model/         config.json, words.txt (word<TAB>count), vectors.safetensors (input + output)
    <run_dir>/vectors.bin    the word vectors, word2vec binary format (gensim / the C tool read it)
    <run_dir>/summary.json   counts, speed and the WordSim-353 / SimLex-999 / analogy scores

Why the corpus pipeline rather than ``iter_documents`` + ``split_words`` on the fly: the
examples are then built with vectorised numpy over memory-mapped ids (no Python per word), the
text is tokenised once in parallel for every epoch and run, and chunks of the corpus are
addressable, which makes checkpoints at chunk boundaries and Hogwild worker processes simple.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from muppets.config import to_dict, write_json_atomic
from muppets.errors import ConfigError
from muppets.models.word2vec import Word2VecConfig, train_word2vec
from muppets.recipes.common import CorpusSection, config_loader, open_inputs
from muppets.train.rundir import run_lock
from muppets.recipes.word_vocab import WordVocabSection, ensure_word_vocab

__all__ = ["Word2VecRunConfig", "load_config", "run"]

log = logging.getLogger(__name__)


@dataclass
class Word2VecRunConfig:
    run_dir: str = "runs/word2vec"  # vocab, corpus, checkpoints, model/ and vectors.bin go here
    corpus: CorpusSection = field(default_factory=CorpusSection)
    vocab: WordVocabSection = field(default_factory=WordVocabSection)
    word2vec: Word2VecConfig = field(default_factory=Word2VecConfig)
    evaluate: bool = True  # score the vectors on WordSim-353, SimLex-999 and Google analogies (needs gensim's files)


load_config = config_loader(Word2VecRunConfig)  # what `muppets` calls: load_config, then run


def run(cfg: Word2VecRunConfig, resume: bool = True) -> dict:
    """Vocabulary -> corpus -> training -> vectors and scores; returns the summary."""
    run_dir = Path(cfg.run_dir)
    with run_lock(run_dir):  # one run at a time in run_dir (one process: word2vec trains with threads)
        return _run(cfg, run_dir, resume)


def _run(cfg: Word2VecRunConfig, run_dir: Path, resume: bool) -> dict:
    vocab, corpus = open_inputs(run_dir, cfg.corpus, partial(ensure_word_vocab, cfg.vocab, cfg.corpus))
    write_json_atomic(run_dir / "config.json", to_dict(cfg))
    model, result = train_word2vec(corpus, vocab.words, cfg.word2vec, run_dir=run_dir, resume=resume)
    summary = {"run_dir": str(run_dir), "vectors": str(run_dir / "vectors.bin"), "words": len(model.words),
               "corpus_tokens": corpus.num_tokens, **asdict(result), "words_per_second": result.words_per_second}
    if cfg.evaluate and result.stopped_by in ("", "time"):  # after a signal, exit promptly
        summary["scores"] = _scores(model.word_vectors())
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def _scores(vectors) -> dict[str, float]:
    from muppets.evaluation.word_vectors import evaluate_standard

    try:
        return evaluate_standard(vectors)
    except ConfigError as err:  # the test files ship with gensim, which may be absent
        log.warning("no word-vector evaluation: %s", err)
        return {}
