"""Cross-lingual sentence retrieval per layer, no fine-tuning (issue 19: where does alignment emerge?).

The XNLI dev premises, unique per language and aligned by row (a premise comes with three
hypotheses, so 2,490 rows hold fewer distinct premises; the count is printed and saved), are
mean-pooled per layer over their word pieces, centred per language, and every de / fr / es / zh
premise looks up its nearest English premise by cosine. retrieval@1 per layer (layer 0 = the
embeddings) against chance = 1 / number of candidates. Runs on ``minilm`` (English-only) and on
any muppets BERT run or HF BERT directory; ``--random`` re-draws the weights (same architecture
and tokenizer) for the no-pretraining baseline.

    python benchmarks/xlingual_retrieval.py --model runs/bert-mini-multilingual --out benchmarks/results/xlingual_retrieval_multilingual.json
    python benchmarks/xlingual_retrieval.py --model minilm --out benchmarks/results/xlingual_retrieval_minilm.json
    python benchmarks/xlingual_retrieval.py --model runs/bert-mini-multilingual --random --out ...random.json

``--limit N`` keeps the first N premises (a smoke test; not a result).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from muppets.config import write_json_atomic
from muppets.interop.hf_bert import load_hf_bert
from muppets.nn.block import init_weights
from muppets.recipes import multilingual
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.transfer.finetune import resolve_model
from muppets.transfer.xlingual import LANGUAGES, chance, layer_retrieval, sentence_vectors, unique_premises


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="minilm, an HF BERT directory or a muppets pretraining run")
    ap.add_argument("--languages", nargs="+", default=list(LANGUAGES))
    ap.add_argument("--random", action="store_true", help="random weights of the same architecture (baseline)")
    ap.add_argument("--no-centre", action="store_true", help="skip the per-language centring")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="first N premises only (smoke test)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started = time.time()
    directory = resolve_model(args.model)
    model, tok = load_hf_bert(directory).backbone, WordPieceTokenizer.load(directory)
    if args.random:
        torch.manual_seed(0)
        init_weights(model, model.cfg.initializer_range)
    premises = unique_premises(args.languages)
    if args.limit:
        premises = {lang: texts[: args.limit] for lang, texts in premises.items()}
    vectors = {lang: sentence_vectors(model, tok, texts, args.max_seq_len) for lang, texts in premises.items()}
    scores = layer_retrieval(vectors, "en", centre=not args.no_centre)
    n = len(premises["en"])
    out = {"model": args.model, "directory": str(directory), "random_weights": args.random, "centred": not args.no_centre,
           "premises": n, "chance": chance(n), "unk_share": unk_share(tok, premises),
           "retrieval_at_1": scores, "minutes": round((time.time() - started) / 60, 2)}
    write_json_atomic(Path(args.out), out)
    print(f"{n} premises per language, chance {chance(n):.5f}")
    print("layer " + " ".join(f"{k:>6d}" for k in range(len(next(iter(scores.values()))))))
    for lang, values in scores.items():
        print(f"{lang:5s} " + " ".join(f"{v:6.3f}" for v in values))
    print(json.dumps({"out": args.out, "minutes": out["minutes"]}))


def unk_share(tok: WordPieceTokenizer, premises: dict[str, list[str]]) -> dict[str, float]:
    """Share of [UNK] pieces per language: a tokenizer that cannot read a language retrieves at chance."""
    return {lang: multilingual.unk_share(tok, texts) for lang, texts in premises.items()}


if __name__ == "__main__":
    main()
