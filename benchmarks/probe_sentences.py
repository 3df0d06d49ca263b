"""Sentence and pair probes of ``muppets probe`` against scikit-learn's logistic regression on
the same features, in the same run.

``muppets probe MODEL --tasks sst2,cola,mrpc,rte`` probes one mean vector per text (a pair:
``[u, v, |u − v|, u ⊙ v]``) at every layer (:mod:`muppets.analysis.probe_sentences`), with
``--probe linear`` (an Adam-trained softmax stopped early on the selection split) and with
``--probe logistic`` (L2 logistic regression solved to its optimum by L-BFGS, ``C`` chosen on the
selection split). The reference reads the very same cached vectors (pretrained and random
encoder) and fits scikit-learn's ``LogisticRegression`` per layer on standardised vectors, ``C``
chosen on the same split from the same grid; all report the same split. ``logistic`` is the
same estimator as the reference (both solved tightly, in float64), so the two should agree
but for examples at the decision boundary; ``linear`` shows what early stopping instead of a
tuned penalty costs.

    OMP_NUM_THREADS=1 python benchmarks/probe_sentences.py --model minilm --tasks sst2 cola mrpc rte \
        --out benchmarks/results/probe_sentences_minilm.json
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import matthews_corrcoef
from sklearn.preprocessing import StandardScaler

from muppets.analysis.probe_data import SPLITS
from muppets.analysis.probe_features import ProbeFeatureSource
from muppets.analysis.probe_models import LOGISTIC_C
from muppets.analysis.probe_sentences import load_sentence_corpus, truncating_corpus
from muppets.analysis.probing import ProbeConfig, limit_corpus, run_probing, split_features
from muppets.config import write_json_atomic

log = logging.getLogger("probe_sentences")


def reference(features: dict, labels: dict) -> list[dict]:
    """Per layer: C chosen on the selection split (``dev``), accuracy and MCC on ``test``."""
    rows = []
    for k in range(features["train"].shape[0]):
        scaler = StandardScaler().fit(features["train"][k])
        x = {s: scaler.transform(features[s][k]) for s in SPLITS}
        fitted = {c: LogisticRegression(C=c, max_iter=20000, tol=1e-8).fit(x["train"], labels["train"])
                  for c in LOGISTIC_C}
        dev = {c: float((m.predict(x["dev"]) == labels["dev"]).mean()) for c, m in fitted.items()}
        best = max(LOGISTIC_C, key=lambda c: (dev[c], -c))  # a tie goes to the stronger regularisation
        predicted = fitted[best].predict(x["test"])
        rows.append({"C": best, "dev_accuracy": dev[best], "accuracy": float((predicted == labels["test"]).mean()),
                     "mcc": float(matthews_corrcoef(labels["test"], predicted))})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--tasks", nargs="+", default=["sst2", "cola", "mrpc", "rte"])
    ap.add_argument("--probes", nargs="+", default=["linear", "logistic"], choices=["linear", "logistic", "mlp"])
    ap.add_argument("--cache-dir", default="runs/probe/cache")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    reports, seconds = {}, {}
    for kind in args.probes:
        cfg = ProbeConfig(model=args.model, tasks=",".join(args.tasks), control=False, cache_dir=args.cache_dir,
                          probe=kind, out=f"runs/probe/sentences-{Path(args.model).name}-{kind}")
        start = time.perf_counter()
        reports[kind] = run_probing(cfg, overwrite=True)  # this script's own folders
        seconds[f"muppets_{kind}"] = time.perf_counter() - start  # the first also embeds
    results: dict = {"model": args.model, "tasks": {}, "C_grid": list(LOGISTIC_C), "probes": args.probes}
    start = time.perf_counter()
    for name in args.tasks:
        corpus = limit_corpus(load_sentence_corpus(name, cfg.data_dir or None), cfg)  # as run_probing read it
        first = reports[args.probes[0]]
        out: dict = {"selection": corpus.selection, "majority_accuracy": first["tasks"][name]["majority_accuracy"],
                     "data": first["data"][name]}
        for encoder, seed in (("pretrained", None), ("random_encoder", cfg.seed)):
            source = ProbeFeatureSource(cfg.model, cache_dir=cfg.cache_dir, random_seed=seed, pooling=cfg.pooling,
                                        dtype=cfg.cache_dtype, batch_size=cfg.embed_batch_size)
            fitted = truncating_corpus(corpus, source.embedder())
            tag = f"probe-{corpus.name}" + ("-random" if seed is not None else "")  # the tags run_probing cached
            features = {s: split_features(source, fitted, s, tag).vectors.numpy().astype(np.float64)
                        for s in SPLITS}  # float16 in the cache: too coarse for a variance
            labels = {s: np.array([t[0] for t in fitted.tasks[name].tags[s]]) for s in SPLITS}
            sk = reference(features, labels)
            best_sk = max(range(len(sk)), key=lambda k: (sk[k]["dev_accuracy"], -k))
            row: dict = {"sklearn": [round(r["accuracy"], 4) for r in sk],
                         "sklearn_mcc": [round(r["mcc"], 4) for r in sk], "sklearn_C": [r["C"] for r in sk],
                         "sklearn_best": {"index": best_sk, **sk[best_sk]}}
            for kind, report in reports.items():
                ours = report["tasks"][name][encoder]
                row["layers"] = [r["layer"] for r in ours["layers"]]  # the model's layer number of each row
                row[kind] = {"accuracy": [round(r["accuracy"], 4) for r in ours["layers"]],
                             "mcc": [round(r["mcc"], 4) for r in ours["layers"] if "mcc" in r],
                             "C": [r["C"] for r in ours["layers"] if "C" in r],
                             "best_layer": ours["best_layer"]["layer"], "best_accuracy": ours["best_layer"]["accuracy"],
                             "mix_accuracy": ours.get("mix", {}).get("accuracy"),
                             "max_abs_diff_to_sklearn": max(abs(a["accuracy"] - b["accuracy"])
                                                            for a, b in zip(ours["layers"], sk))}
                log.info("%s %s %s: %s | sklearn %s", name, encoder, kind, row[kind]["accuracy"], row["sklearn"])
            out[encoder] = row
        results["tasks"][name] = out
    seconds["sklearn_reference_from_cache"] = time.perf_counter() - start
    results["seconds"] = seconds
    write_json_atomic(args.out, results)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
