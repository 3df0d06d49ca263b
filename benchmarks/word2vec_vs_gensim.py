"""word2vec training speed and vector quality: muppets vs gensim, same corpus, same settings, same run.

Corpus: the shared English corpus (``data:english-corpus/books`` + ``wiki``, or the first
``--limit-docs`` documents), read and sentence-split by the muppets pipeline and turned into a
word-id corpus with a ``WordVocab`` that keeps *every* word (``min_count=1``), so that both
sides apply ``min_count`` themselves. gensim gets the very same sentences as lists of words
(``Word2Vec(sentences=...)``, its usual iterable mode, materialised in memory); muppets trains
on the memory-mapped ids.

Hyper-parameters (both): skip-gram (``--cbow`` for CBOW), vector_size 100, window 5, negative
5, min_count 5, sample 1e-3, alpha 0.025 -> min_alpha 0.0001, ``--epochs`` (5), ``--workers``
(2) threads. Speed = effective words (words left after min_count and subsampling, the count
gensim's ``train()`` returns; muppets counts the same) / training wall time. Vocabulary building
is excluded on both sides; muppets' one-off ``torch.compile`` of its update kernel is excluded
from its training time and reported as ``setup_s``. ``--rounds R`` alternates the two R times
and reports the median speed of each. Quality: WordSim-353 and SimLex-999 Spearman and Google
analogy accuracy (restrict_vocab 300k, case-insensitive), computed for both by
``muppets.evaluation.word_vectors`` (``--gensim-eval`` also scores gensim's model with gensim's
own functions, as a cross-check).

    python benchmarks/word2vec_vs_gensim.py --out benchmarks/results/word2vec_vs_gensim.json \\
        --save-vectors runs/word2vec/vectors.bin      # feature_table.py --word2vec runs/word2vec/vectors.bin
    # the batch-layout trace (BENCHMARKS.md, issue 5): muppets alone, other layouts and sizes
    python benchmarks/word2vec_vs_gensim.py --muppets-only --batch-layout consecutive --batch-size 16 \\
        --work-dir /tmp/w2v-work --out /tmp/w2v_consecutive_16.json
    python benchmarks/word2vec_vs_gensim.py --muppets-only --batch-size 1 --updates-per-call 32 \\
        --work-dir /tmp/w2v-work --out /tmp/w2v_one_pair.json
    # smoke run (a minute):
    OMP_NUM_THREADS=1 python benchmarks/word2vec_vs_gensim.py --limit-docs 6 --epochs 1 \\
        --workers 1 --out /tmp/word2vec_smoke.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from muppets.data.prepare import prepare_corpus
from muppets.data.readers import iter_documents
from muppets.data.shards import TokenCorpus, tokenizer_fingerprint
from muppets.evaluation.word_vectors import GOOGLE_ANALOGIES, SIMLEX999, WORDSIM353, evaluate_standard, gensim_test_file
from muppets.models.word2vec import Word2VecConfig, train_word2vec
from muppets.paths import resolve_data_path
from muppets.tokenizers.words import WordVocab
from muppets.vectors import WordVectors

log = logging.getLogger("word2vec_vs_gensim")
INPUTS = ["data:english-corpus/books", "data:english-corpus/wiki"]
TARGETS = {"speed_ratio": 1.0, "quality_gap_points": 2.0}  # the acceptance criteria


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inputs", nargs="+", default=INPUTS, help="corpus files/directories (data:… = shared data)")
    p.add_argument("--limit-docs", type=int, default=0, help="use only the first N documents (0 = all)")
    p.add_argument("--epochs", type=int, default=5)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sg", dest="sg", action="store_true", default=True, help="skip-gram (default)")
    mode.add_argument("--cbow", dest="sg", action="store_false", help="CBOW")
    p.add_argument("--workers", type=int, default=2, help="training threads on both sides")
    p.add_argument("--vector-size", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=Word2VecConfig.batch_size, help="muppets: pairs per update")
    p.add_argument("--batch-layout", default=Word2VecConfig.batch_layout, choices=["lanes", "consecutive"],
                   help="muppets: which examples share a batch (see muppets.objectives.word2vec.lanes)")
    p.add_argument("--updates-per-call", type=int, default=Word2VecConfig.updates_per_call,
                   help="muppets: updates fused into one compiled call (raise it for tiny batches)")
    p.add_argument("--muppets-only", action="store_true",
                   help="train and score muppets only (no gensim, no speed ratio): for sweeps of its settings")
    p.add_argument("--backend", default="auto", choices=["auto", "native", "compiled", "eager"], help="muppets update kernel")
    p.add_argument("--update", default=Word2VecConfig.update, choices=["pair", "window", "window-shared"],
                   help="muppets skip-gram update: batches of pairs, or one per centre window sharing its noise words")
    p.add_argument("--also-update", nargs="*", default=[], choices=["pair", "window", "window-shared"],
                   help="also train muppets with these updates in every round (reported under 'also')")
    p.add_argument("--rounds", type=int, default=1, help="alternate gensim / muppets this many times")
    p.add_argument("--gensim-eval", action="store_true", help="also score gensim's model with gensim's evaluation")
    p.add_argument("--save-vectors", default="", help="also write muppets' vectors here (word2vec binary; last round)")
    p.add_argument("--work-dir", default="", help="keep the prepared corpus here (default: a temporary directory)")
    p.add_argument("--out", default="benchmarks/results/word2vec_vs_gensim.json")
    return p.parse_args()


# ----------------------------------------------------------------------------- corpus


def prepare(args: argparse.Namespace, work: Path) -> tuple[TokenCorpus, WordVocab]:
    """The word-id corpus of the inputs (first ``--limit-docs`` documents), reused when present."""
    inputs = [resolve_data_path(p) for p in args.inputs]
    if args.limit_docs:
        sliced = work / f"first-{args.limit_docs}-docs.jsonl"
        if not sliced.is_file():
            with sliced.open("w", encoding="utf-8") as fh:
                for doc in itertools.islice(iter_documents(inputs), args.limit_docs):
                    fh.write(json.dumps({"text": "\n\n".join(doc.paragraphs)}) + "\n")
        inputs = [sliced]
    vocab_dir, corpus_dir = work / "vocab", work / "corpus"
    if (vocab_dir / "words.txt").is_file():
        vocab = WordVocab.load(vocab_dir)
    else:
        texts = (p for doc in iter_documents(inputs) for p in doc.paragraphs)
        vocab = WordVocab.build(texts, min_count=1)
        vocab.save(vocab_dir)
    meta = corpus_dir / "meta.json"
    fingerprint = tokenizer_fingerprint(vocab.to_json())
    if not meta.is_file() or json.loads(meta.read_text())["tokenizer_sha256"] != fingerprint:
        prepare_corpus(inputs, vocab, corpus_dir, workers=max(1, args.workers), progress=False, overwrite=True)
    return TokenCorpus(corpus_dir), vocab


def sentences(corpus: TokenCorpus, vocab: WordVocab) -> list[list[str]]:
    """Every sentence as a list of words (shared str objects: ~8 bytes per token)."""
    tokens, ends = np.asarray(corpus.tokens), np.asarray(corpus.sentence_ends)
    starts = np.concatenate([[0], ends[:-1]])
    words = vocab.words
    return [[words[i] for i in tokens[s:e].tolist()] for s, e in zip(starts.tolist(), ends.tolist())]


# ----------------------------------------------------------------------------- the two sides


def run_gensim(args: argparse.Namespace, sents: list[list[str]]) -> tuple[dict, WordVectors, object]:
    from gensim.models import Word2Vec

    model = Word2Vec(vector_size=args.vector_size, window=args.window, negative=args.negative, hs=0,
                     min_count=args.min_count, sample=args.sample, sg=int(args.sg), alpha=0.025,
                     min_alpha=0.0001, workers=args.workers, seed=args.seed)
    started = time.perf_counter()
    model.build_vocab(sents)
    setup = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    effective, raw = model.train(sents, total_examples=model.corpus_count, epochs=args.epochs)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    stats = {"effective_words": effective, "raw_words": raw, "train_s": seconds, "setup_s": setup,
             "words_per_s": effective / seconds, "cpu_s": cpu, "words_per_cpu_s": effective / cpu,
             "vocab": len(model.wv)}
    log.info("gensim: %d effective words in %.1f s = %.0f words/s (%.0f per CPU second)", effective, seconds,
             effective / seconds, effective / cpu)
    return stats, WordVectors(model.wv.index_to_key, model.wv.vectors), model


def run_muppets(args: argparse.Namespace, corpus: TokenCorpus, vocab: WordVocab) -> tuple[dict, WordVectors]:
    cfg = Word2VecConfig(sg=args.sg, vector_size=args.vector_size, window=args.window, negative=args.negative,
                         min_count=args.min_count, sample=args.sample, epochs=args.epochs, seed=args.seed,
                         workers=args.workers, batch_size=args.batch_size, batch_layout=args.batch_layout,
                         updates_per_call=args.updates_per_call, backend=args.backend, update=args.update)
    started = time.perf_counter()
    model, result = train_word2vec(corpus, vocab.words, cfg)
    total = time.perf_counter() - started
    stats = {"effective_words": result.effective_words, "raw_words": result.raw_words,
             "train_s": result.seconds, "setup_s": total - result.seconds, "words_per_s": result.words_per_second,
             "cpu_s": result.cpu_s, "words_per_cpu_s": result.effective_words / max(result.cpu_s, 1e-9),
             "build_s": result.build_s, "update_s": result.update_s,
             "vocab": len(model.words), "examples": result.examples, "mean_loss": result.mean_loss,
             "backend": result.backend, "update": cfg.update}
    log.info("muppets (%s): %d effective words in %.1f s = %.0f words/s (%.0f per CPU second; building "
             "examples %.1f s, updates %.1f s)", result.backend, result.effective_words, result.seconds,
             result.words_per_second, stats["words_per_cpu_s"], result.build_s, result.update_s)
    return stats, model.word_vectors()


def gensim_own_scores(model) -> dict[str, float]:
    """gensim's evaluation of its own vectors (cross-check of muppets' evaluation)."""
    ws = model.wv.evaluate_word_pairs(str(gensim_test_file(WORDSIM353)))
    sl = model.wv.evaluate_word_pairs(str(gensim_test_file(SIMLEX999)))
    analogy, _ = model.wv.evaluate_word_analogies(str(gensim_test_file(GOOGLE_ANALOGIES)))
    return {"wordsim353_spearman": float(ws[1].statistic), "simlex999_spearman": float(sl[1].statistic),
            "analogy_accuracy": float(analogy)}


# ----------------------------------------------------------------------------- main


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="w2v-bench-") as tmp:
        work = Path(args.work_dir) if args.work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        corpus, vocab = prepare(args, work)
        sents = [] if args.muppets_only else sentences(corpus, vocab)
        log.info("corpus: %d documents, %d sentences, %d tokens", corpus.num_documents, len(corpus.sentence_ends),
                 corpus.num_tokens)
        report = benchmark(args, corpus, vocab, sents)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    log.info("speed ratio muppets/gensim %s; wrote %s", report.get("speed_ratio", "-"), args.out)


def benchmark(args: argparse.Namespace, corpus: TokenCorpus, vocab: WordVocab, sents: list[list[str]]) -> dict:
    rounds: dict[str, list[dict]] = {"gensim": [], "muppets": []}
    also: dict[str, dict] = {u: {"rounds": []} for u in args.also_update}
    for _ in range(args.rounds):
        if not args.muppets_only:
            g_stats, g_vectors, g_model = run_gensim(args, sents)
            rounds["gensim"].append(g_stats)
        m_stats, m_vectors = run_muppets(args, corpus, vocab)
        rounds["muppets"].append(m_stats)
        for update in args.also_update:  # the same round: the same machine state as gensim's
            stats, vectors = run_muppets(argparse.Namespace(**{**vars(args), "update": update}), corpus, vocab)
            also[update]["rounds"].append(stats)
            also[update]["vectors"] = vectors
    speed = {k: statistics.median(r["words_per_s"] for r in v) for k, v in rounds.items() if v}
    if args.save_vectors:
        log.info("muppets vectors -> %s", m_vectors.save(args.save_vectors, binary=True))
    quality = {"muppets": evaluate_standard(m_vectors)}
    if not args.muppets_only:
        quality["gensim"] = evaluate_standard(g_vectors)
        if args.gensim_eval:
            quality["gensim_by_gensim"] = gensim_own_scores(g_model)
    report = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work_dir", "save_vectors")},
        "corpus": {"documents": corpus.num_documents, "sentences": len(corpus.sentence_ends), "tokens": corpus.num_tokens},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "gensim": __import__("gensim").__version__, "omp_threads": os.environ.get("OMP_NUM_THREADS")},
        "rounds": rounds, "words_per_s": speed, "quality": quality, "targets": TARGETS,
    }
    if not args.muppets_only:
        report["speed_ratio"] = speed["muppets"] / speed["gensim"]
        report["round_ratios"] = [m["words_per_s"] / g["words_per_s"] for g, m in zip(rounds["gensim"], rounds["muppets"])]
        report["quality_gap_points"] = {k: 100 * (quality["muppets"][k] - quality["gensim"][k])
                                        for k in ("wordsim353_spearman", "simlex999_spearman", "analogy_accuracy")}
    for update, run in also.items():  # the other updates, against the same gensim rounds
        run["quality"] = evaluate_standard(run.pop("vectors"))
        run["words_per_s"] = statistics.median(r["words_per_s"] for r in run["rounds"])
        if not args.muppets_only:
            run["speed_ratio"] = run["words_per_s"] / speed["gensim"]
            run["quality_gap_points"] = {k: 100 * (run["quality"][k] - quality["gensim"][k])
                                         for k in ("wordsim353_spearman", "simlex999_spearman", "analogy_accuracy")}
    if also:
        report["also"] = also
    return report


if __name__ == "__main__":
    main()
