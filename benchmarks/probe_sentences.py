"""Sentence probes of ``muppets probe`` against scikit-learn's logistic regression on the same
features, in the same run.

``muppets probe MODEL --tasks sst2,cola`` probes one mean vector per text at every layer
(:mod:`muppets.analysis.probe_sentences`): an Adam-trained softmax probe stopped early on the
selection split. The reference reads the very same cached vectors (pretrained and random
encoder) and fits scikit-learn's L2 ``LogisticRegression`` per layer on standardised vectors,
its ``C`` chosen on the same selection split from a grid; both report the same split. Agreement
of the two says the probe is trained well enough that its numbers describe the features, not
the optimiser.

    OMP_NUM_THREADS=1 python benchmarks/probe_sentences.py --model minilm --tasks sst2 cola \
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
from muppets.analysis.probe_features import ProbeFeatureSource, load_sentence_split
from muppets.analysis.probe_sentences import load_sentence_corpus, truncating_corpus
from muppets.analysis.probing import ProbeConfig, limit_corpus, run_probing
from muppets.config import write_json_atomic

log = logging.getLogger("probe_sentences")
C_GRID = (1e-3, 1e-2, 0.1, 1.0, 10.0)


def reference(features: dict, labels: dict) -> list[dict]:
    """Per layer: C chosen on the selection split (``dev``), accuracy and MCC on ``test``."""
    rows = []
    for k in range(features["train"].shape[0]):
        scaler = StandardScaler().fit(features["train"][k])
        x = {s: scaler.transform(features[s][k]) for s in SPLITS}
        fitted = {c: LogisticRegression(C=c, max_iter=3000).fit(x["train"], labels["train"]) for c in C_GRID}
        dev = {c: float((m.predict(x["dev"]) == labels["dev"]).mean()) for c, m in fitted.items()}
        best = max(C_GRID, key=lambda c: (dev[c], -c))  # a tie goes to the stronger regularisation
        predicted = fitted[best].predict(x["test"])
        rows.append({"C": best, "dev_accuracy": dev[best], "accuracy": float((predicted == labels["test"]).mean()),
                     "mcc": float(matthews_corrcoef(labels["test"], predicted))})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--tasks", nargs="+", default=["sst2", "cola"])
    ap.add_argument("--cache-dir", default="runs/probe/cache")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    cfg = ProbeConfig(model=args.model, tasks=",".join(args.tasks), control=False, cache_dir=args.cache_dir,
                      out=f"runs/probe/sentences-{Path(args.model).name}")
    start = time.perf_counter()
    report = run_probing(cfg)
    seconds = {"muppets_probe_with_embedding": time.perf_counter() - start}
    results: dict = {"model": args.model, "tasks": {}, "C_grid": list(C_GRID), "probe_json": str(cfg.out_dir() / "probe.json")}
    start = time.perf_counter()
    for name in args.tasks:
        corpus = limit_corpus(load_sentence_corpus(name, cfg.data_dir or None), cfg)  # as run_probing read it
        out: dict = {"selection": corpus.selection, "majority_accuracy": report["tasks"][name]["majority_accuracy"]}
        for encoder, seed in (("pretrained", None), ("random_encoder", cfg.seed)):
            source = ProbeFeatureSource(cfg.model, cache_dir=cfg.cache_dir, random_seed=seed, pooling=cfg.pooling,
                                        dtype=cfg.cache_dtype, batch_size=cfg.embed_batch_size)
            fitted = truncating_corpus(corpus, source.embedder())
            tag = f"probe-{corpus.name}" + ("-random" if seed is not None else "")  # the tags run_probing cached
            features = {s: load_sentence_split(source, fitted.sentences[s], f"{tag}-{s}").vectors.numpy().astype(np.float64)
                        for s in SPLITS}  # float16 in the cache: too coarse for a variance
            labels = {s: np.array([t[0] for t in fitted.tasks[name].tags[s]]) for s in SPLITS}
            ours = report["tasks"][name][encoder]
            sk = reference(features, labels)
            layers = [r["layer"] for r in ours["layers"]]  # the model's layer number of each row
            best_sk = max(range(len(sk)), key=lambda k: (sk[k]["dev_accuracy"], -k))
            out[encoder] = {
                "layers": layers,
                "muppets": [round(r["accuracy"], 4) for r in ours["layers"]],
                "muppets_mcc": [round(r["mcc"], 4) for r in ours["layers"] if "mcc" in r],
                "sklearn": [round(r["accuracy"], 4) for r in sk],
                "sklearn_mcc": [round(r["mcc"], 4) for r in sk],
                "sklearn_C": [r["C"] for r in sk],
                "muppets_best_layer": ours["best_layer"]["layer"],
                "muppets_best_accuracy": ours["best_layer"]["accuracy"],
                "sklearn_best_layer": layers[best_sk],
                "sklearn_best_accuracy": sk[best_sk]["accuracy"],
                "muppets_best_mcc": ours["best_layer"].get("mcc"),
                "muppets_mix": ours.get("mix", {}).get("accuracy"),
                "max_abs_diff": max(abs(a["accuracy"] - b["accuracy"]) for a, b in zip(ours["layers"], sk)),
            }
            log.info("%s %s: muppets %s | sklearn %s", name, encoder, out[encoder]["muppets"], out[encoder]["sklearn"])
        out["data"] = report["data"][name]
        results["tasks"][name] = out
    seconds["sklearn_reference_from_cache"] = time.perf_counter() - start
    results["seconds"] = seconds
    write_json_atomic(args.out, results)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
