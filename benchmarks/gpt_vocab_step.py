"""What the vocabulary costs a small GPT: gpt-mini training steps with GPT-2's 50,257 tokens vs a
byte-level BPE of 8,192 (``muppets tokenizer train --kind bpe``), same run, same machine.

For a model this small (L4/H256) the output layer and its softmax over the vocabulary are most
of a step, so ``configs/gpt-mini.yaml`` recommends a small BPE trained on a small corpus. Both
sizes train on the same random token batches (``B x T``, ``labels = input_ids``), AdamW through
``build_optimizer`` with clipping, in train mode; blocks of steps alternate between the two
models so both see the same machine load; the figure is the median step. transformers'
``GPT2LMHeadModel`` of the same sizes is timed the same way, as the yardstick: the ratio of
the two vocabularies should be of the same order there.

    OMP_NUM_THREADS=1 python benchmarks/gpt_vocab_step.py --threads 1 --out benchmarks/results/gpt_vocab_step.json
    # smoke run (seconds):
    python benchmarks/gpt_vocab_step.py --preset gpt-tiny --batch-size 2 --seq-len 16 --steps 2 --block 1 --out /tmp/v.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.train.optim import build_optimizer

VOCABS = (50257, 8192)


def muppets_step(cfg: GPTConfig):
    torch.manual_seed(0)
    model = GPTLanguageModel(cfg).train()
    opt, _ = build_optimizer(model, lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)

    def step(ids: torch.Tensor) -> None:
        out = model(ids, labels=ids)
        loss = out.loss_sums["lm"] / out.counts["lm"]  # mean next-token loss, as transformers
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def transformers_step(cfg: GPTConfig):
    import transformers

    torch.manual_seed(0)
    hf = transformers.GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.max_position_embeddings,
                                 n_embd=cfg.hidden_size, n_layer=cfg.num_layers, n_head=cfg.num_heads)
    model = transformers.GPT2LMHeadModel(hf).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def step(ids: torch.Tensor) -> None:
        loss = model(ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="gpt-mini")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per model (after one warm-up step)")
    ap.add_argument("--block", type=int, default=2, help="steps per model before switching to the next")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    runners = {}
    for vocab in VOCABS:
        cfg = GPTConfig.preset(args.preset, vocab_size=vocab)
        runners[f"muppets/{vocab}"] = (muppets_step(cfg), vocab)
        runners[f"transformers/{vocab}"] = (transformers_step(cfg), vocab)
    gen = torch.Generator().manual_seed(1)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for name, (step, vocab) in runners.items():  # warm-up
        step(torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=gen))
    while min(len(t) for t in times.values()) < args.steps:
        for name, (step, vocab) in runners.items():
            for _ in range(args.block):
                ids = torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=gen)
                start = time.perf_counter()
                step(ids)
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "date": time.strftime("%Y-%m-%d"), "preset": args.preset, "batch": [args.batch_size, args.seq_len],
        "median_step_s": median,
        "ratio_50257_over_8192": {lib: median[f"{lib}/50257"] / median[f"{lib}/8192"]
                                  for lib in ("muppets", "transformers")},
        "muppets_over_transformers": {v: median[f"muppets/{v}"] / median[f"transformers/{v}"] for v in VOCABS},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
