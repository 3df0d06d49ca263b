"""Quality of a BERT pretraining run: held-out MLM / NSP accuracy next to a unigram baseline,
and the loss curve as a PNG.

The run itself is ``muppets pretrain configs/bert-mini.yaml`` (about an hour on 2 cores); this
script reads its ``log.jsonl``, re-evaluates ``<run_dir>/final`` on the run's fixed held-out
batches, scores the unigram-frequency baseline on exactly the same masked targets, and writes
``--out`` (JSON) and ``--png``.

    python benchmarks/pretrain_quality.py --run runs/bert-mini \
        --out benchmarks/results/bert_mini_quality.json --png benchmarks/results/bert_mini_loss.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from muppets.config import from_dict  # noqa: E402
from muppets.interop.hf_bert import load_hf_bert  # noqa: E402
from muppets.objectives.mlm_nsp import BertPretrainingData  # noqa: E402
from muppets.recipes.bert_pretrain import (  # noqa: E402
    PretrainConfig, ensure_corpus, ensure_tokenizer, evaluator, special_ids, unigram_baseline,
)
from muppets.train.logger import read_log  # noqa: E402


def load_run(run_dir: Path) -> tuple[PretrainConfig, list[dict]]:
    cfg = from_dict(PretrainConfig, json.loads((run_dir / "config.json").read_text()))
    return cfg, list(read_log(run_dir))


def plot(records: list[dict], png: Path, title: str) -> None:
    steps = np.array([r["step"] for r in records if "loss/mlm" in r])
    mlm = np.array([r["loss/mlm"] for r in records if "loss/mlm" in r])
    nsp = np.array([r["loss/nsp"] for r in records if "loss/nsp" in r])
    evals = [r for r in records if "eval/mlm_loss" in r]
    k = max(1, min(25, len(mlm) // 4))
    smooth = lambda y: np.convolve(y, np.ones(k) / k, mode="valid")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(steps, mlm, alpha=0.25, color="C0")
    ax1.plot(steps[k - 1:], smooth(mlm), color="C0", label="train MLM loss")
    ax1.plot([r["step"] for r in evals], [r["eval/mlm_loss"] for r in evals], "o-", color="C3",
             label="held-out MLM loss")
    ax1.plot(steps[k - 1:], smooth(nsp), color="C2", label="train NSP loss")
    ax1.set_xlabel("step (32 x 128 tokens)"), ax1.set_ylabel("cross entropy (nats)"), ax1.legend()
    ax2.plot([r["step"] for r in evals], [r["eval/mlm_accuracy"] for r in evals], "o-", label="MLM accuracy")
    ax2.plot([r["step"] for r in evals], [r["eval/nsp_accuracy"] for r in evals], "o-", label="NSP accuracy")
    ax2.set_xlabel("step"), ax2.set_ylabel("held-out accuracy"), ax2.legend(), ax2.set_ylim(0, 1)
    fig.suptitle(title)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def _tokens_seen(run_dir: Path) -> int:
    """Non-padding tokens trained on, from the last checkpoint's trainer state."""
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return int(json.loads((run_dir / "checkpoints" / latest / "trainer_state.json").read_text())["tokens_seen"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--png", type=Path, required=True)
    args = ap.parse_args()
    cfg, records = load_run(args.run)
    tok = ensure_tokenizer(cfg, args.run)
    corpus = ensure_corpus(cfg, tok, args.run)
    data = BertPretrainingData(corpus, special_ids(tok), cfg.data, cfg.train.batch_size,
                               cfg.train.accumulation, cfg.train.seed, tok.is_continuation)
    model = load_hf_bert(args.run / "final").eval()
    with torch.no_grad():
        final = evaluator(data, cfg.eval_batch_size)(model)
    baseline = unigram_baseline(data, cfg.eval_batch_size)
    steps = [r for r in records if "loss" in r and "step" in r]
    minutes = max(r.get("elapsed_s", 0.0) for r in steps) / 60
    result = {"run": str(args.run), "steps": steps[-1]["step"], "train_minutes": minutes,
              "tokens_seen": _tokens_seen(args.run),
              "held_out_examples": cfg.data.eval_examples, "model": final, "unigram_baseline": baseline}
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(records, args.png, f"{cfg.model.preset} on {', '.join(cfg.corpus.inputs)}: "
         f"{result['steps']} steps, {minutes:.0f} min on 2 CPU cores")


if __name__ == "__main__":
    main()
