"""Does the batch layout change what an update costs? The compiled skip-gram kernel on the same
chunks cut into ``lanes`` and into ``consecutive`` batches, one process, one thread, in shuffled
paired rounds (the two layouts share every round's machine load).

The chunks come from the shared English corpus prepared by ``word2vec_vs_gensim.py --work-dir``;
the vectors are first trained on a few chunks so that the scores are not all zero.

    python benchmarks/word2vec_layout_cost.py --work-dir /tmp/w2v-work \\
        --out benchmarks/results/word2vec_layout_cost.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from muppets.data.shards import TokenCorpus
from muppets.models.word2vec import Word2VecConfig, Word2VecModel, _ChunkTrainer, build_examples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-dir", required=True, help="a word2vec_vs_gensim.py --work-dir (holds corpus/)")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    corpus = TokenCorpus(Path(args.work_dir) / "corpus")
    trainers = {}
    for layout in ("lanes", "consecutive"):
        cfg = Word2VecConfig(workers=1, batch_layout=layout)
        examples = build_examples(corpus, cfg)
        model = Word2VecModel(cfg, [str(i) for i in range(len(examples.vocab))], examples.vocab.counts)
        trainers[layout] = _ChunkTrainer(cfg, examples, model.input_vectors, model.output_vectors)
        trainers[layout].setup()
    warm = trainers["lanes"]
    for k in range(3):  # vectors with some training in them, shared by both layouts below
        warm.run(0, k)
    start_in, start_out = warm.w_in.clone(), warm.w_out.clone()
    times: dict[str, list[float]] = {k: [] for k in trainers}
    for r in range(args.rounds):
        for k in range(10, 10 + args.chunks):
            order = list(trainers)
            random.Random(r * 1000 + k).shuffle(order)
            for layout in order:
                t = trainers[layout]
                t.w_in.copy_(start_in)
                t.w_out.copy_(start_out)
                begin = time.perf_counter()
                stats = t.run(0, k)
                times[layout].append(time.perf_counter() - begin - stats["build_s"])
    paired = list(zip(times["lanes"], times["consecutive"]))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "chunks": args.chunks, "rounds": args.rounds,
              "update_s_per_chunk": {k: statistics.median(v) for k, v in times.items()},
              "lanes_faster_in": sum(a < b for a, b in paired), "pairs": len(paired)}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
