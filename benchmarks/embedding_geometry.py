"""Input-embedding geometry by corpus frequency (issue 16: why pretrained bert-minis lose to
random initialisation on SST-2), and a copy of a model with its rare rows drawn afresh.

With the MLM decoder tied to the input embeddings, every prediction's softmax pushes every
vocabulary row a little; under Adam a row that the corpus rarely shows as a target or an input
gets mostly that push, so rare rows may drift together (Gao et al. 2019, "Representation
Degeneration"). A task whose deciding words are rare in the pretraining corpus (movie-review
sentiment words in books and Wikipedia) then starts from collapsed vectors. This script
measures, per bucket of pretraining-corpus count: the rows' mean norm, their mean pairwise
cosine (0 for random rows), and the share of the task's training tokens that fall in the bucket.

    python benchmarks/embedding_geometry.py --models runs/bert-mini-fast random:runs/bert-mini-fast \
        --task sst2 --out benchmarks/results/embedding_geometry.json
    # the re-initialisation test: rows seen fewer than 100 times redrawn, then fine-tune the copy
    python benchmarks/embedding_geometry.py --models runs/bert-mini-fast --reinit-below 100 \
        --reinit-out runs/bert-mini-fast-rare100

``random:DIR`` is DIR's architecture with freshly drawn weights (the no-pretraining baseline).
``DIR@decoder`` reads the MLM decoder of a model pretrained with ``tie_word_embeddings: false``
instead of its input embeddings: that matrix takes every softmax push a tied model's input
embeddings would take, so one untied run shows both sides (the decoder, and the input rows it
spared).
Counts come from every ``--every``-th file of the corpus (tokenized with the model's own
tokenizer); only the task's ``train`` split is read.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from muppets.interop.hf_bert import load_hf_bert, save_hf_bert
from muppets.nn.block import init_weights
from muppets.paths import resolve_data_path, resolve_model_path
from muppets.tasks.text import example_paragraphs
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.transfer import finetune as ft

log = logging.getLogger("embedding_geometry")
BUCKETS = [(0, 0), (1, 9), (10, 99), (100, 999), (1000, 9999), (10000, None)]


def corpus_counts(tok: WordPieceTokenizer, corpus: Path, every: int) -> np.ndarray:
    """Token counts over every ``every``-th ``*.txt`` file under ``corpus`` (sorted), line by line."""
    counts = np.zeros(tok.vocab_size, np.int64)
    files = sorted(corpus.rglob("*.txt"))[::every]
    if not files:
        raise SystemExit(f"{corpus}: no .txt files")
    for path in files:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").split("\n") if line.strip()]
        for ids in tok.encode_batch(lines):
            counts += np.bincount(ids, minlength=tok.vocab_size)
    return counts


def task_counts(tok: WordPieceTokenizer, task: str) -> np.ndarray:
    data = ft.load_task_data(ft.TaskSection(name=task))
    texts = [p for ex in data.splits["train"] for p in example_paragraphs(ex)]
    counts = np.zeros(tok.vocab_size, np.int64)
    for ids in tok.encode_batch(texts):
        counts += np.bincount(ids, minlength=tok.vocab_size)
    return counts


def geometry(weight: np.ndarray, counts: np.ndarray, task: np.ndarray, sample: int = 800) -> list[dict]:
    """Per count bucket: rows, mean norm, mean pairwise cosine of up to ``sample`` rows, task share."""
    norms = np.linalg.norm(weight, axis=1)
    unit = weight / np.maximum(norms, 1e-12)[:, None]
    out = []
    for lo, hi in BUCKETS:
        rows = np.flatnonzero((counts >= lo) & (counts <= (hi if hi is not None else counts.max())))
        entry = {"count_from": lo, "count_to": hi, "rows": int(len(rows)),
                 "task_token_share": float(task[rows].sum() / max(task.sum(), 1))}
        if len(rows) >= 2:
            pick = rows[np.random.default_rng(0).permutation(len(rows))[:sample]]
            cos = unit[pick] @ unit[pick].T
            k = len(pick)
            off_diagonal = cos.sum() - np.trace(cos)  # a zero row (the pad row) is 0 with itself, not 1
            entry.update(mean_norm=float(norms[rows].mean()), mean_pairwise_cosine=float(off_diagonal / (k * k - k)))
        out.append(entry)
    return out


def load(spec: str):
    """``DIR`` (a pretrained model), ``random:DIR`` (its architecture, fresh weights) or ``DIR@decoder``.
    Returns the model, its tokenizer, its directory and the (V, H) matrix to measure."""
    random = spec.startswith("random:")
    path, _, which = (spec[len("random:"):] if random else spec).partition("@")
    directory = resolve_model_path(path)
    model = load_hf_bert(directory)
    if random:
        torch.manual_seed(0)
        init_weights(model, model.cfg.initializer_range)
    if which not in ("", "decoder"):
        raise SystemExit(f"{spec}: only @decoder may follow a model directory")
    if which == "decoder" and model.mlm.decoder is None:
        raise SystemExit(f"{spec}: the model's decoder is tied to its input embeddings (no matrix of its own)")
    matrix = model.mlm.decoder.weight if which else model.backbone.embeddings.tokens.weight
    return model, WordPieceTokenizer.load(directory), directory, matrix.detach().float().numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", required=True, help="model directories or runs; random:DIR for fresh weights")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--corpus", default="data:english-corpus")
    ap.add_argument("--every", type=int, default=3, help="count every N-th corpus file")
    ap.add_argument("--out", default="")
    ap.add_argument("--reinit-below", type=int, default=0, help="write a copy whose rows seen fewer times are redrawn")
    ap.add_argument("--reinit-out", default="")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    results, cache = [], {}
    for spec in args.models:
        model, tok, directory, weight = load(spec)
        key = (tok.vocab_size, str(directory / "vocab.txt"))
        if key not in cache:
            cache[key] = (corpus_counts(tok, resolve_data_path(args.corpus), args.every), task_counts(tok, args.task))
        counts, task = cache[key]
        results.append({"model": spec, "buckets": geometry(weight, counts, task)})
        for b in results[-1]["buckets"]:
            log.info("%s count %s-%s: %d rows, norm %.3f, pairwise cos %.3f, %s share %.3f", spec, b["count_from"],
                     b["count_to"] if b["count_to"] is not None else "", b["rows"], b.get("mean_norm", float("nan")),
                     b.get("mean_pairwise_cosine", float("nan")), args.task, b["task_token_share"])
        if args.reinit_below:
            if not args.reinit_out or len(args.models) != 1 or "@" in spec:
                raise SystemExit("--reinit-below needs --reinit-out and exactly one --models entry, "
                                 "a model's input embeddings (not DIR@decoder)")
            out = Path(args.reinit_out)
            if out.exists():
                raise SystemExit(f"{out} exists: choose a new directory")
            rows = torch.from_numpy(np.flatnonzero(counts < args.reinit_below))
            special = torch.tensor([tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id])
            rows = rows[~torch.isin(rows, special)]  # the special tokens keep their rows
            torch.manual_seed(0)
            with torch.no_grad():
                table = model.backbone.embeddings.tokens.weight
                table[rows] = torch.randn(len(rows), table.shape[1]) * model.cfg.initializer_range
            save_hf_bert(model, out, tok)
            log.info("%s: %d rows seen fewer than %d times redrawn from N(0, %.3f)", out, len(rows),
                     args.reinit_below, model.cfg.initializer_range)
            results[-1]["reinit"] = {"below": args.reinit_below, "rows": int(len(rows)), "out": str(out)}
    report = {"date": time.strftime("%Y-%m-%d"), "task": args.task, "corpus": args.corpus, "every": args.every,
              "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
