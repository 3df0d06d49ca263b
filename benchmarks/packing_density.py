"""Real (non-padding) tokens in BERT pretraining batches, MLM-only and MLM+NSP (issue 14, item 2).

Builds the batches the trainer would see (``BertPretrainingData.micro_batches``) on a prepared
corpus and counts the attention mask: real tokens per sequence, the share of the padded batch,
and the share of ``max_seq_len``. Prepare the corpus as the quickstart does, e.g.

    muppets tokenizer train --input data:english-corpus/books data:english-corpus/wiki --out /tmp/qs/tok --vocab-size 8192
    muppets data prepare --input data:english-corpus/books data:english-corpus/wiki --tokenizer /tmp/qs/tok --out /tmp/qs/corpus
    python benchmarks/packing_density.py --corpus /tmp/qs/corpus --tokenizer /tmp/qs/tok --out benchmarks/results/packing_density.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from muppets.data.shards import TokenCorpus
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig
from muppets.recipes.bert_pretrain import special_ids
from muppets.tokenizers.wordpiece import WordPieceTokenizer


def density(corpus: TokenCorpus, tok: WordPieceTokenizer, nsp: bool, steps: int, batch: int,
            max_seq_len: int, short_seq_prob: float) -> dict:
    cfg = PretrainDataConfig(max_seq_len=max_seq_len, nsp=nsp, short_seq_prob=short_seq_prob)
    data = BertPretrainingData(corpus, special_ids(tok), cfg, batch, 1, 0, tok.is_continuation)
    real = padded = 0
    start = time.perf_counter()
    for step in range(steps):
        mask = data.micro_batches(step, 0, 1)[0]["attention_mask"]
        real, padded = real + int(mask.sum()), padded + mask.numel()
    sequences = steps * batch
    return {"nsp": nsp, "short_seq_prob": short_seq_prob, "batches": steps, "batch_size": batch,
            "real_per_sequence": real / sequences, "padded_length": padded / sequences,
            "real_share_of_batch": real / padded, "real_share_of_max_seq_len": real / (sequences * max_seq_len),
            "seconds": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True, help="a prepared corpus directory")
    ap.add_argument("--tokenizer", type=Path, required=True, help="the WordPiece tokenizer it was prepared with")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    corpus, tok = TokenCorpus(args.corpus), WordPieceTokenizer.load(args.tokenizer)
    rows = [density(corpus, tok, nsp, args.steps, args.batch_size, args.max_seq_len, ssp)
            for nsp, ssp in ((False, 0.1), (False, 0.0), (True, 0.1))]
    for r in rows:
        print(f"nsp={r['nsp']!s:5} short_seq_prob={r['short_seq_prob']}: {r['real_per_sequence']:.1f} real tokens "
              f"per sequence (padded to {r['padded_length']:.1f}); {100 * r['real_share_of_max_seq_len']:.1f}% "
              f"of {args.max_seq_len} positions")
    if args.out:
        result = {"date": time.strftime("%Y-%m-%d %H:%M"), "corpus": str(args.corpus),
                  "tokens": corpus.num_tokens, "documents": corpus.num_documents, "rows": rows}
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
