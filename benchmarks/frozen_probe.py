"""Is the sentiment in the frozen features? A logistic-regression probe on the sentence vectors
of every layer of frozen encoders, on SST-2 (dev reported) or ChnSentiCorp (test reported).
Issues 16 and 19: small-budget bert-minis do not beat random initialisation by much once
fine-tuned on these tasks; does their frozen representation carry more sentiment than a random
encoder's, so that fine-tuning loses it, or no more?

Each sentence vector is the mean of its word vectors (``muppets.transfer.embed``, each word the
mean of its pieces) at one layer; the probe is scikit-learn's L2 logistic regression on standardised
vectors. Its strength ``C`` is chosen on a stratified 10% of train (seed 1234, the fine-tuning
selection slice), the probe is refit on all of train with it, and the reported split is only
reported. The probe is convex, so one fit per setting: no seeds. SST-2 is already split into
words (PTB); ChnSentiCorp is split as BERT's pre-tokenizer does (each CJK character a word).
Each text keeps its first ``--max-words`` words (126: the bert-minis were pretrained at 128
positions; no SST-2 sentence is that long).

    OMP_NUM_THREADS=1 python benchmarks/frozen_probe.py --models pretrained=runs/bert-mini-untied \
        random=runs/bert-mini-untied-random minilm=minilm --out benchmarks/results/frozen_probe_sst2.json
    OMP_NUM_THREADS=1 python benchmarks/frozen_probe.py --task chnsenticorp --models ernie=runs/zh/bert-mini-ernie \
        piece=runs/zh/bert-mini-piece random=runs/zh/bert-mini-piece-random --out benchmarks/results/frozen_probe_chnsenticorp.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from muppets.config import write_json_atomic
from muppets.tasks import load_task
from muppets.transfer.embed import embed
from muppets.transfer.embedders import load_embedder

log = logging.getLogger("frozen_probe")
C_GRID = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0)
REPORTED = {"sst2": "dev", "chnsenticorp": "test"}


def words(task: str, text: str, limit: int) -> list[str]:
    if task == "sst2":
        return text.split()[:limit]
    spaced = BertNormalizer(handle_chinese_chars=True, strip_accents=False, lowercase=False).normalize_str(text)
    return [w for w, _ in BertPreTokenizer().pre_tokenize_str(spaced)][:limit]


def sentence_vectors(model: str, sentences: list[list[str]]) -> np.ndarray:
    """(layers, sentences, dim): the mean word vector of each sentence at every layer."""
    embedder = load_embedder(model, "mean", "cpu")
    per_sentence = embed(embedder, sentences, layers=None, batch_size=64)  # each (layers, words, dim)
    return np.stack([v.mean(axis=1) for v in per_sentence], axis=1)


def probe(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray, dev_y: np.ndarray) -> dict:
    """Choose C on a stratified 10% of train, refit on all of train, score train and the reported
    split (``dev`` in the result whichever split it is)."""
    fit_x, sel_x, fit_y, sel_y = train_test_split(train_x, train_y, test_size=0.1, stratify=train_y,
                                                  random_state=1234)
    def fit(x, y, c):
        scaler = StandardScaler().fit(x)
        clf = LogisticRegression(C=c, max_iter=2000).fit(scaler.transform(x), y)
        return lambda z: clf.predict(scaler.transform(z))
    slice_acc = {c: float((fit(fit_x, fit_y, c)(sel_x) == sel_y).mean()) for c in C_GRID}
    best = max(C_GRID, key=lambda c: (slice_acc[c], -c))  # ties: the stronger regularisation
    predict = fit(train_x, train_y, best)
    return {"C": best, "slice": slice_acc[best], "train": float((predict(train_x) == train_y).mean()),
            "dev": float((predict(dev_x) == dev_y).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=list(REPORTED), default="sst2")
    ap.add_argument("--models", nargs="+", required=True, help="NAME=MODEL (a BERT directory, muppets run or minilm)")
    ap.add_argument("--max-words", type=int, default=126)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data = load_task(args.task)
    reported = REPORTED[args.task]
    splits = {s: ([words(args.task, e.text, args.max_words) for e in data.splits[k]], np.array([e.label for e in data.splits[k]]))
              for s, k in (("train", "train"), ("dev", reported))}
    results: dict = {"task": args.task, "reported": reported, "pooling": "mean over words of the mean of their pieces", "max_words": args.max_words, "C_grid": list(C_GRID), "models": {}}
    for item in args.models:
        name, _, model = item.partition("=")
        start = time.perf_counter()
        train = sentence_vectors(model, splits["train"][0])
        dev = sentence_vectors(model, splits["dev"][0])
        layers = [probe(train[k], splits["train"][1], dev[k], splits["dev"][1]) for k in range(train.shape[0])]
        results["models"][name] = {"model": model, "layers": layers, "seconds": round(time.perf_counter() - start, 1)}
        log.info("%s: %s accuracy by layer %s", name, reported, " ".join(f"{r['dev'] * 100:.2f}" for r in layers))
        write_json_atomic(args.out, results)
    print(json.dumps({n: [round(r["dev"] * 100, 2) for r in m["layers"]] for n, m in results["models"].items()}, indent=1))


if __name__ == "__main__":
    main()
