"""CPU time of the logistic probe's solver against scikit-learn's ``LogisticRegression``, fit for
fit on the very same matrix.

``probe_sentences.py`` times whole ``muppets probe`` runs, which also read caches and train the
Adam mix probe; this script isolates the estimator. For every task, every layer of the cached
sentence (or pair) vectors and every ``C`` of :data:`~muppets.analysis.probe_models.LOGISTIC_C`,
it standardises the train split once (float64), then fits :func:`~muppets.analysis.probe_models.
fit_logistic` and scikit-learn's ``lbfgs`` (``tol=1e-8``, as the reference of
``probe_sentences.py``) on it, alternating which goes first. Time is process CPU time, one BLAS
and one torch thread, so other jobs on the machine slow neither side's figure. It also records
both solvers' iteration counts, the largest difference between their predicted probabilities and
the number of training examples whose predicted label differs.
The vectors come from the cache ``probe_sentences.py`` (``muppets probe``) wrote; a missing cache
is embedded first (that time is not counted).

    OMP_NUM_THREADS=1 python benchmarks/logistic_fit_time.py --tasks mrpc rte cola sst2 \
        --out benchmarks/results/logistic_fit_time_minilm.json
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from muppets.analysis.probe_features import ProbeFeatureSource
from muppets.analysis.probe_models import LOGISTIC_C, fit_logistic
from muppets.analysis.probe_sentences import load_sentence_corpus, truncating_corpus
from muppets.analysis.probing import ProbeConfig, limit_corpus, split_features
from muppets.config import write_json_atomic

log = logging.getLogger("logistic_fit_time")


def time_layer(x: np.ndarray, y: np.ndarray, num_labels: int, ours_first: bool) -> dict:
    """Both solvers over the C grid on one standardised ``(N, D)`` float64 matrix."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    out: dict = {"muppets_s": 0.0, "sklearn_s": 0.0, "muppets_iter": [], "sklearn_iter": [], "max_prob_diff": 0.0,
                 "label_disagreements": 0}
    for c in LOGISTIC_C:
        order = ("muppets", "sklearn") if ours_first else ("sklearn", "muppets")
        probs = {}
        for who in order:
            start = time.process_time()
            if who == "muppets":
                probe, fit = fit_logistic(xt, yt, num_labels, c)
                out["muppets_s"] += time.process_time() - start
                out["muppets_iter"].append(fit.iterations)
                with torch.no_grad():
                    probs[who] = torch.softmax(probe(xt.float()), -1).double().numpy()
            else:
                model = LogisticRegression(C=c, max_iter=20000, tol=1e-8).fit(x, y)
                out["sklearn_s"] += time.process_time() - start
                out["sklearn_iter"].append(int(model.n_iter_[0]))
                probs[who] = np.zeros((len(y), num_labels))
                probs[who][:, model.classes_] = model.predict_proba(x)
        out["max_prob_diff"] = max(out["max_prob_diff"], float(np.abs(probs["muppets"] - probs["sklearn"]).max()))
        out["label_disagreements"] += int((probs["muppets"].argmax(1) != probs["sklearn"].argmax(1)).sum())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--tasks", nargs="+", default=["mrpc", "rte", "cola", "sst2"])
    ap.add_argument("--encoders", nargs="+", default=["pretrained"], choices=["pretrained", "random_encoder"])
    ap.add_argument("--cache-dir", default="runs/probe/cache")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    cfg = ProbeConfig(model=args.model, tasks=",".join(args.tasks), control=False, cache_dir=args.cache_dir,
                      probe="logistic")
    results: dict = {"model": args.model, "C_grid": list(LOGISTIC_C), "clock": "process CPU time, 1 thread",
                     "tasks": {}}
    with threadpool_limits(limits=1):
        for name in args.tasks:
            corpus = limit_corpus(load_sentence_corpus(name, cfg.data_dir or None), cfg)  # as run_probing reads it
            for encoder in args.encoders:
                seed = cfg.seed if encoder == "random_encoder" else None
                source = ProbeFeatureSource(cfg.model, cache_dir=cfg.cache_dir, random_seed=seed, pooling=cfg.pooling,
                                            dtype=cfg.cache_dtype, batch_size=cfg.embed_batch_size)
                fitted = truncating_corpus(corpus, source.embedder())
                tag = f"probe-{corpus.name}" + ("-random" if seed is not None else "")
                vectors = split_features(source, fitted, "train", tag).vectors.numpy()  # (K, N, D) float16
                labels = fitted.tasks[name].labels
                y = np.array([labels.index(t[0]) for t in fitted.tasks[name].tags["train"]])
                rows = []
                for k in range(vectors.shape[0]):
                    x = StandardScaler().fit_transform(vectors[k].astype(np.float64))  # as probe_sentences.py
                    rows.append(time_layer(x, y, len(labels), ours_first=k % 2 == 0))
                    log.info("%s %s layer slot %d: %s", name, encoder, k,
                             {key: rows[-1][key] for key in ("muppets_s", "sklearn_s", "muppets_iter", "sklearn_iter")})
                ours, theirs = sum(r["muppets_s"] for r in rows), sum(r["sklearn_s"] for r in rows)
                results["tasks"][f"{name}/{encoder}"] = {
                    "train_examples": int(len(y)), "features": int(vectors.shape[2]), "layers": rows,
                    "muppets_s": round(ours, 2), "sklearn_s": round(theirs, 2), "ratio": round(ours / theirs, 3),
                    "max_prob_diff": max(r["max_prob_diff"] for r in rows),
                    "label_disagreements": sum(r["label_disagreements"] for r in rows)}
                log.info("%s %s: muppets %.1f s, sklearn %.1f s, ratio %.2f", name, encoder, ours, theirs, ours / theirs)
                write_json_atomic(args.out, results)  # what has finished, after every task
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
