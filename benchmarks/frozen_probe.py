"""Is the sentiment in the frozen features? A logistic-regression probe on the sentence vectors
of every layer of frozen encoders, on SST-2 (dev reported) or ChnSentiCorp (test reported).
Issues 16 and 19: small-budget bert-minis do not beat random initialisation by much once
fine-tuned on these tasks; does their frozen representation carry more sentiment than a random
encoder's, so that fine-tuning loses it, or no more?

Each sentence vector is the mean of its word vectors (``muppets.transfer.embed``, each word the
mean of its pieces) at one layer; the probe is scikit-learn's L2 logistic regression on standardised
vectors. Its strength ``C`` is chosen on the slice of train that fine-tuning selects on
(``muppets.tasks.splits.stratified_split``: 10%, stratified by label, seed 1234), the probe is
refit on all of train with it, and the reported split is only reported; the layer whose probe
scores best on the slice is recorded as ``layer_chosen_on_slice``. The probe is convex, so one
fit per setting: no seeds (the random encoder is one draw). SST-2 is already split into words
(PTB); ChnSentiCorp is split as BERT's pre-tokenizer does (each CJK character a word). Each text
keeps its longest word prefix that fits in ``--max-positions`` (128, [CLS] and [SEP] included:
the bert-minis were pretrained at 128 positions; ``muppets.transfer.embed``'s ``truncate``).

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
from sklearn.preprocessing import StandardScaler
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from muppets.config import write_json_atomic
from muppets.tasks import load_task
from muppets.tasks.splits import stratified_split
from muppets.transfer.embed import embed
from muppets.transfer.embedders import load_embedder
from muppets.transfer.finetune import FinetuneConfig

log = logging.getLogger("frozen_probe")
C_GRID = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0)
REPORTED = {"sst2": "dev", "chnsenticorp": "test"}
SLICE = FinetuneConfig()  # the train slice fine-tuning selects on: selection_fraction, selection_seed
SPLIT_CJK = BertNormalizer(handle_chinese_chars=True, strip_accents=False, lowercase=False)


def words(task: str, text: str) -> list[str]:
    if task == "sst2":
        return text.split()
    return [w for w, _ in BertPreTokenizer().pre_tokenize_str(SPLIT_CJK.normalize_str(text))]


def sentence_vectors(model: str, sentences: list[list[str]], max_positions: int, chunk: int = 512) -> np.ndarray:
    """(layers, sentences, dim): the mean word vector of each sentence at every layer, each
    sentence cut to the words that fit in ``max_positions``, embedded ``chunk`` at a time so
    that only their means are kept."""
    embedder = load_embedder(model, "mean", "cpu")
    means = []
    for start in range(0, len(sentences), chunk):
        per_sentence = embed(embedder, sentences[start:start + chunk], layers=None, batch_size=64,
                             max_positions=max_positions, truncate=True)  # each (layers, kept words, dim)
        means += [v.mean(axis=1) for v in per_sentence]
    if embedder.stats["truncated"]:
        log.info("%s: %d of %d texts cut to %d positions", model, embedder.stats["truncated"], len(sentences),
                 max_positions)
    return np.stack(means, axis=1)


def probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> dict:
    """Choose C on the fine-tuning selection slice of train, refit on all of train, score train
    and the reported split."""
    kept, held = stratified_split([str(y) for y in train_y], SLICE.selection_fraction, SLICE.selection_seed)

    def fit(x, y, c):
        scaler = StandardScaler().fit(x)
        clf = LogisticRegression(C=c, max_iter=2000).fit(scaler.transform(x), y)
        return lambda z: clf.predict(scaler.transform(z))
    slice_acc = {c: float((fit(train_x[kept], train_y[kept], c)(train_x[held]) == train_y[held]).mean())
                 for c in C_GRID}
    best = max(C_GRID, key=lambda c: (slice_acc[c], -c))  # ties: the stronger regularisation
    predict = fit(train_x, train_y, best)
    return {"C": best, "slice": slice_acc[best], "train": float((predict(train_x) == train_y).mean()),
            "reported": float((predict(test_x) == test_y).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=list(REPORTED), default="sst2")
    ap.add_argument("--models", nargs="+", required=True, help="NAME=MODEL (a BERT directory, muppets run or minilm)")
    ap.add_argument("--max-positions", type=int, default=128)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data = load_task(args.task)
    reported = REPORTED[args.task]
    splits = {s: ([words(args.task, e.text) for e in data.splits[k]], np.array([e.label for e in data.splits[k]]))
              for s, k in (("train", "train"), ("dev", reported))}
    results: dict = {"task": args.task, "reported": reported, "pooling": "mean over words of the mean of their pieces", "max_positions": args.max_positions, "C_grid": list(C_GRID), "models": {}}
    for item in args.models:
        name, _, model = item.partition("=")
        start = time.perf_counter()
        train = sentence_vectors(model, splits["train"][0], args.max_positions)
        dev = sentence_vectors(model, splits["dev"][0], args.max_positions)
        layers = [probe(train[k], splits["train"][1], dev[k], splits["dev"][1]) for k in range(train.shape[0])]
        chosen = max(range(len(layers)), key=lambda k: (layers[k]["slice"], -k))  # the layer the slice picks
        results["models"][name] = {"model": model, "layers": layers, "layer_chosen_on_slice": chosen, "seconds": round(time.perf_counter() - start, 1)}
        log.info("%s: %s accuracy by layer %s", name, reported, " ".join(f"{r['reported'] * 100:.2f}" for r in layers))
        write_json_atomic(args.out, results)
    print(json.dumps({n: [round(r["reported"] * 100, 2) for r in m["layers"]] for n, m in results["models"].items()}, indent=1))


if __name__ == "__main__":
    main()
