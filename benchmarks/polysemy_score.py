"""Polysemy score (issue 5): static vs ELMo vs BERT layers on the project's sense-labelled set
(``src/muppets/data/polysemy_senses.tsv``: 8 ambiguous words, 2 senses, 10 sentences each).

For every model and layer: leave-one-out nearest-neighbour sense accuracy (chance: 9/19 = 0.474
for a static vector, whose 20 uses are one point), the separation ratio (mean within-sense
cosine / mean between-sense cosine; 1.0 = no separation) and the gap (within − between), as the
mean over the words; the per-word scores go to the JSON. See :mod:`muppets.analysis.polysemy`.

    python benchmarks/polysemy_score.py                                   # the default models
    python benchmarks/polysemy_score.py --model elmo=runs/elmo-small --model minilm=minilm
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

from muppets.analysis.layer_weights import layer_labels
from muppets.analysis.polysemy import load_sense_set, score_sense_set
from muppets.config import write_json_atomic
from muppets.errors import MuppetsError
from muppets.transfer.embedders import load_embedder

log = logging.getLogger("polysemy_score")

DEFAULT_MODELS = {"word2vec": "runs/word2vec-sg", "nnlm": "runs/nnlm-small", "elmo": "runs/elmo-small",
                  "minilm": "minilm", "bert-mini": "runs/bert-mini-4/final", "gpt-mini": "runs/gpt-mini"}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                    help="a model to score (repeatable; default: word2vec, nnlm, elmo, minilm, bert-mini, gpt-mini)")
    ap.add_argument("--pooling", default="auto", choices=["auto", "first", "mean", "last"],
                    help="sub-word models (auto: the last piece for GPT, the first for BERT)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/polysemy_score.json"))
    return ap.parse_args()


def models_from(args: argparse.Namespace) -> dict[str, str]:
    if not args.model:
        return dict(DEFAULT_MODELS)
    out = {}
    for item in args.model:
        name, sep, path = item.partition("=")
        if not sep:
            sys.exit(f"--model {item!r}: expected NAME=PATH")
        out[name] = path
    return out


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args()
    torch.set_num_threads(args.threads)
    occurrences = load_sense_set()
    results = {}
    rows = ["| model | layer | NN sense acc | separation | gap | distinct points |", "|---|---|---|---|---|---|"]
    for name, path in models_from(args).items():
        try:
            embedder = load_embedder(path, pooling=args.pooling)
        except MuppetsError as err:
            log.warning("%s (%s) skipped: %s", name, path, err)
            continue
        start = time.perf_counter()
        result = score_sense_set(embedder, occurrences)
        result.update(model=path, kind=embedder.kind, seconds=time.perf_counter() - start)
        results[name] = result
        labels = layer_labels(embedder.kind, result["layers"])
        for layer, label in zip(result["layers"], labels):
            m = result["overall"].get(str(layer))
            if m is not None:
                rows.append(f"| {name} | {label} | {m['nn_accuracy']:.3f} | {fmt(m['separation'])} | "
                            f"{m['gap']:.3f} | {m['distinct_points']:.1f} |")
        write_json_atomic(args.out, {"command": " ".join(sys.argv), "sentences": len(occurrences),
                                     "results": results})
    table = "\n".join(rows)
    args.out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
