"""SQuAD EM/F1 without vs with max-context decoding (issue 14 item 5), one fine-tuned model.

A paired comparison: the real all-MiniLM-L6-v2 is fine-tuned once on the registered SQuAD task
with the settings of ``benchmarks/finetune_table.sh`` (384/128 windows, 1 epoch, lr 5e-5, batch
32, bf16 autocast), then its saved ``best/`` runs once over the windows of the reported split
(the dev articles) and the same logits are decoded twice: ``SpanOptions(max_context=False)``
(every window may score a span) and ``max_context=True`` (a span is scored only in the window
where its start token has the most context, BERT's ``_check_is_max_context``). The per-question
F1 difference gets a paired bootstrap 95% interval.

Most SQuAD contexts fit one 384-token window, so at 384/128 max-context can only change the
answers of the few questions with several windows. ``--windows 384/128,128/32`` also decodes the
same model over short, heavily overlapping windows (a stress test of the rule; the model was
trained on 384/128).

    OMP_NUM_THREADS=1 nohup python benchmarks/squad_max_context.py --train \\
        --out benchmarks/results/squad_max_context.json > logs/squad_max_context.log 2>&1 &

``--train`` fine-tunes into ``--run-dir`` first unless its ``best/`` exists (then only decodes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from muppets.metrics import compute, squad_exact_match, squad_f1
from muppets.tasks import load_task
from muppets.transfer.features import make_features
from muppets.transfer.models import load_task_model, load_tokenizer
from muppets.transfer.predict import decode_spans, feature_logits, load_settings

from tables import report  # (result, out): print the JSON, and write it to out

TRAIN = ["finetune", "squad", "--model", "minilm", "max_seq_len=384", "doc_stride=128", "epochs=1",
         "lr=5e-5", "batch_size=32", "precision=bf16", "seed=1", "progress=false"]


def train(run_dir: Path, threads: int) -> dict:
    """``muppets finetune`` as a child process (the exact command is recorded); its CPU time."""
    cmd = [str(Path(sys.executable).with_name("muppets")), *TRAIN, f"threads={threads}", f"run_dir={run_dir}"]
    start, before = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"command": " ".join(cmd), "wall_s": time.time() - start, "cpu_s": cpu}


def paired_f1(a: np.ndarray, b: np.ndarray, reps: int = 10_000, seed: int = 0) -> dict:
    """Mean per-question difference b - a (in F1 points) with a bootstrap 95% interval."""
    d = 100.0 * (b - a)
    rng = np.random.default_rng(seed)
    means = np.array([d[rng.integers(0, len(d), len(d))].mean() for _ in range(reps)])
    return {"mean": float(d.mean()), "ci95": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
            "questions_better": int((d > 0).sum()), "questions_worse": int((d < 0).sum())}


def evaluate(best: Path, split: str, batch_size: int, windows: str) -> dict:
    """Logits once over the split's windows (``windows`` = "max_seq_len/doc_stride"); decode
    with and without max-context; score both."""
    data = load_task("squad")
    examples = data[split]
    feature_opts, span_opts = load_settings(best)
    length, stride = (int(x) for x in windows.split("/"))
    feature_opts = dataclasses.replace(feature_opts, max_seq_len=length, doc_stride=stride)
    model, tok = load_task_model(best), load_tokenizer(best)
    cpu0, wall0 = time.process_time(), time.time()
    features = make_features("span", examples, tok, feature_opts)
    logits = feature_logits(model, features, batch_size, tok.pad_id)
    forward = {"cpu_s": time.process_time() - cpu0, "wall_s": time.time() - wall0}
    golds = {ex.id: [a.text for a in ex.answers] for ex in examples}
    out: dict = {"split": split, "questions": len(examples), "windows": len(features),
                 "examples_with_several_windows": int(sum(n > 1 for n in np.bincount([f.example for f in features]))),
                 "features": dataclasses.asdict(feature_opts), "forward": forward}
    per_question = {}
    for name, flag in (("without_max_context", False), ("with_max_context", True)):
        t0 = time.process_time()
        preds = decode_spans(examples, features, logits, dataclasses.replace(span_opts, max_context=flag))
        answers = {ex.id: p[0] for ex, p in zip(examples, preds)}
        out[name] = {**compute("squad", answers, golds), "decode_cpu_s": time.process_time() - t0}
        per_question[name] = (answers, np.array([squad_f1(answers[q], g) for q, g in golds.items()]),
                              np.array([squad_exact_match(answers[q], g) for q, g in golds.items()]))
    (a_ans, a_f1, a_em), (b_ans, b_f1, b_em) = per_question["without_max_context"], per_question["with_max_context"]
    out["answers_changed"] = sum(a_ans[q] != b_ans[q] for q in golds)
    out["paired_f1_difference"] = paired_f1(a_f1, b_f1)
    out["paired_em_difference"] = paired_f1(a_em, b_em)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", type=Path, default=Path("runs/squad-max-context"))
    p.add_argument("--train", action="store_true", help="fine-tune into --run-dir first unless best/ exists")
    p.add_argument("--split", default="dev")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)  # finetune's eval_batch_size
    p.add_argument("--windows", default="384/128", help="comma-separated max_seq_len/doc_stride settings to decode with")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    best = args.run_dir / "best"
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__, "threads": args.threads,
                    "model": str(best), "command": " ".join(sys.argv)}
    if args.train and not best.is_dir():
        result["training"] = train(args.run_dir, args.threads)
    metrics = args.run_dir / "metrics.json"
    if metrics.is_file():  # what the run itself reported (decoded as the code of its day did)
        result["run_metrics"] = {k: v for k, v in json.loads(metrics.read_text()).items() if k in ("dev", "steps", "best_step")}
    result["by_windows"] = {w: evaluate(best, args.split, args.batch_size, w) for w in args.windows.split(",")}
    report(result, args.out)


if __name__ == "__main__":
    main()
