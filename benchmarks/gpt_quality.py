"""Quality of a GPT pretraining run: held-out perplexity next to a unigram baseline, samples,
zero-shot HellaSwag against chance, and the loss curve as a PNG.

The run itself is ``muppets pretrain configs/gpt-mini.yaml`` (60 minutes on 2 cores); this script
reads its ``log.jsonl``, re-evaluates ``<run_dir>/final`` on the run's fixed held-out blocks,
scores the unigram baseline on the same targets, generates from fixed prompts (greedy, and
top-p sampling with a fixed seed), scores zero-shot HellaSwag by length-normalised likelihood,
and writes ``--out`` (JSON) and ``--png``.

    python benchmarks/gpt_quality.py --run runs/gpt-mini --hellaswag 2000 \
        --out benchmarks/results/gpt_mini_quality.json --png benchmarks/results/gpt_mini_loss.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from muppets.config import from_dict  # noqa: E402
from muppets.generate import GenerationConfig, generate_text  # noqa: E402
from muppets.interop.hf_gpt import load_hf_gpt  # noqa: E402
from muppets.objectives.clm import CausalLMData  # noqa: E402
from muppets.recipes.common import prepare_once  # noqa: E402
from muppets.recipes.gpt_pretrain import (GPTPretrainConfig, corpus_tokenizer, ensure_tokenizer,  # noqa: E402
                                          evaluator, unigram_baseline)
from muppets.train.logger import read_log  # noqa: E402
from muppets.transfer import zeroshot  # noqa: E402

PROMPTS = ["The old sailor looked at the sea and", "In 1905, the city council decided",
           "She opened the letter and read"]


def plot(records: list[dict], png: Path, title: str) -> None:
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    held = [(r["step"], r["eval/lm_loss"]) for r in records if "eval/lm_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*zip(*train), lw=0.8, label="training loss (next token)")
    if held:
        ax.plot(*zip(*held), "o-", label="held-out loss")
    ax.set(xlabel="step", ylabel="cross entropy (nats)", title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def samples(model, tok) -> dict:
    greedy = generate_text(model, tok, PROMPTS, GenerationConfig(max_new_tokens=40))
    sampled = generate_text(model, tok, PROMPTS, GenerationConfig(max_new_tokens=40, do_sample=True,
                                                                  top_p=0.9, seed=1))
    return {p: {"greedy": g, "top_p_0.9_seed_1": s} for p, g, s in zip(PROMPTS, greedy, sampled)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", type=Path, default=Path("runs/gpt-mini"))
    ap.add_argument("--hellaswag", type=int, default=2000, help="items scored zero-shot (0 = all 10,042)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gpt_mini_quality.json"))
    ap.add_argument("--png", type=Path, default=Path("benchmarks/results/gpt_mini_loss.png"))
    args = ap.parse_args()
    cfg = from_dict(GPTPretrainConfig, json.loads((args.run / "config.json").read_text()))
    records = list(read_log(args.run))
    tok = ensure_tokenizer(cfg, args.run)
    corpus = prepare_once(cfg.corpus, corpus_tokenizer(tok), args.run)
    data = CausalLMData(corpus, tok.eos_id, cfg.data, cfg.train.batch_size, 1, cfg.train.seed)
    model = load_hf_gpt(args.run / "final").eval()
    with torch.no_grad():
        held = evaluator(data, cfg.eval_batch_size)(model)
    result = {
        "run": str(args.run), "steps": max(r["step"] for r in records if "loss" in r),
        "minutes": max(r.get("elapsed_s", 0) for r in records) / 60,
        "held_out": held, "unigram_baseline": unigram_baseline(data, cfg.eval_batch_size, model.cfg.vocab_size),
        "samples": samples(model, tok),
        "hellaswag_zero_shot": zeroshot.evaluate("hellaswag", model, tok, limit=args.hellaswag),
    }
    plot(records, args.png, f"{args.run.name}: held-out perplexity {held['lm_perplexity']:.0f}")
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()
