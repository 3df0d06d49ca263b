"""torch vs onnxruntime forward passes of the same model on the same inputs: is the ONNX backend faster?

For all-MiniLM-L6-v2 (``--model``: its top layer, what ``/v1/embeddings`` pools) and a task
model (``--task-model``, a fine-tuned directory; default: a ``classify`` model built on the same
encoder with a fresh head, whose speed is that of a trained one), in one run:

1. export with :func:`muppets.interop.onnx_export.export_onnx` (checked within 1e-4) to a
   temporary directory;
2. tokenize real SST-2 sentences (built-in ones without the shared data) into batches of each
   ``--batch-sizes`` (default 1 and 32), padded to each batch's longest row as the server does;
3. time torch (``inference_mode``) and onnxruntime on the same batches, alternating which goes
   first at every repeat, ``--threads`` intra-op threads for both; report the median time per
   batch, sentences/s, and the ratio torch / onnx (> 1: onnx is faster), and the max |diff| of
   the outputs on these inputs.

Results go to ``--out`` (JSON) and a Markdown table is printed. On a shared machine the ratio
is the figure to read (both runtimes see the same load); absolute times are not comparable
across runs.

    python benchmarks/onnx_speed.py --threads 2 --out benchmarks/results/onnx_speed.json
    # smoke run (tiny random BERT, seconds; numbers meaningless):
    python benchmarks/onnx_speed.py --smoke --out /tmp/onnx_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from muppets.interop.onnx_export import export_onnx
from muppets.interop.onnx_runtime import OnnxModel
from muppets.serve.engines import pad_right
from serve_load import sst2_sentences  # benchmarks/: the same real sentences as the load test

def batches(directory: Path, texts: list[str], size: int, max_len: int) -> list[dict[str, torch.Tensor]]:
    """``[CLS] text [SEP]`` id rows (cut to ``max_len``), in batches of ``size``, right-padded."""
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    tok = WordPieceTokenizer.load(directory)
    rows = [[tok.cls_id, *ids[: max_len - 2], tok.sep_id] for ids in tok.encode_batch(texts)]
    out = []
    for start in range(0, len(rows) - size + 1, size):
        ids, mask = pad_right(rows[start: start + size], tok.pad_id)
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return out


def time_pair(torch_call, onnx_call, inputs: list[dict], repeats: int, warmup: int) -> dict:
    """Median seconds per batch of each runtime over ``repeats`` passes of ``inputs`` (alternating order)."""
    with torch.inference_mode():
        for batch in inputs[:warmup]:
            torch_call(batch), onnx_call(batch)
        times: dict[str, list[float]] = {"torch": [], "onnx": []}
        for r in range(repeats):
            order = (("torch", torch_call), ("onnx", onnx_call))
            for name, call in order if r % 2 == 0 else order[::-1]:
                for batch in inputs:
                    start = time.perf_counter()
                    call(batch)
                    times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def max_diff(torch_call, onnx_call, inputs: list[dict]) -> float:
    with torch.inference_mode():
        return max(float(np.abs(np.asarray(torch_call(b)) - np.asarray(onnx_call(b))).max()) for b in inputs[:4])


def calls(source: Path, export: Path, what: str, threads: int):
    """``(torch_call, onnx_call)``: batch -> top layer ``(B, T, H)`` or logits, as numpy."""
    onnx_model = OnnxModel(export, threads)
    if what == "encoder":
        from muppets.interop.hf_bert import load_hf_bert

        backbone = load_hf_bert(source).eval().backbone
        return (lambda b: backbone(b["input_ids"], b["token_type_ids"], b["attention_mask"]).layers[-1].numpy(),
                lambda b: onnx_model.run(b["input_ids"], b["attention_mask"], b["token_type_ids"])["last_hidden_state"])
    from muppets.transfer.models import load_task_model

    model = load_task_model(source).eval()
    return (lambda b: model(b["input_ids"], b["token_type_ids"], b["attention_mask"]).logits.numpy(),
            lambda b: onnx_model.run(b["input_ids"], b["attention_mask"], b["token_type_ids"])["logits"])


def task_model(encoder: Path, given: str | None, work: Path) -> tuple[Path, str]:
    """The task directory to time: ``given``, else a fresh ``classify`` head on ``encoder``."""
    if given:
        from muppets.paths import resolve_model_path

        return resolve_model_path(given), given
    from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model

    tok = load_tokenizer(encoder)
    torch.manual_seed(0)
    save_task_model(new_task_model(encoder, "classify", 2, tok), work / "task", tok, ["0", "1"])
    return work / "task", "classify head (untrained) on the same encoder"


def measure(name: str, source: Path, what: str, texts: list[str], args, work: Path) -> list[dict]:
    export = work / f"{what}-onnx"
    report = export_onnx(source, export, threads=args.threads)
    torch_call, onnx_call = calls(source, export, what, args.threads)
    max_len = min(args.max_len, int(json.loads((export / "muppets_onnx.json").read_text())["max_positions"]))
    rows = []
    for size in args.batch_sizes:
        inputs = batches(source, texts, size, max_len)[: max(1, args.batches // size)]
        t = time_pair(torch_call, onnx_call, inputs, args.repeats, args.warmup)
        rows.append({"model": name, "what": what, "batch": size, "batches": len(inputs),
                     "mean_tokens": float(np.mean([int(b["attention_mask"].sum()) / size for b in inputs])),
                     "torch_ms": 1000 * t["torch"], "onnx_ms": 1000 * t["onnx"],
                     "torch_per_s": size / t["torch"], "onnx_per_s": size / t["onnx"],
                     "torch_over_onnx": t["torch"] / t["onnx"],
                     "max_abs_diff": max_diff(torch_call, onnx_call, inputs), "export_check": report.max_abs_diff})
    return rows


def smoke_model(work: Path) -> Path:
    """A tiny random BERT with a WordPiece vocabulary (the smoke run's stand-in for MiniLM)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _tiny_backbones import tiny_bert

    return tiny_bert(work / "tiny-bert")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="minilm", help="the encoder (an HF BERT directory or 'minilm')")
    p.add_argument("--task-model", help="a fine-tuned task directory (default: a fresh classify head on --model)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    p.add_argument("--batches", type=int, default=256, help="sentences per batch size (batches = this / size)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes over the batches")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches first")
    p.add_argument("--max-len", type=int, default=128, help="tokens per sentence at most")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of torch and onnxruntime")
    p.add_argument("--out", help="write the results here (JSON)")
    p.add_argument("--smoke", action="store_true", help="tiny random BERT, few batches: checks the script only")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="onnx_speed_") as tmp:
        work = Path(tmp)
        if args.smoke:
            args.batches, args.repeats, args.warmup = 8, 1, 1
        from muppets.paths import resolve_model_path

        encoder = smoke_model(work) if args.smoke else resolve_model_path(args.model)
        needed = max(args.batches, max(args.batch_sizes))
        texts = sst2_sentences(needed)
        texts = [texts[i % len(texts)] for i in range(needed)]  # the built-in ones are few
        task_dir, task_name = task_model(encoder, args.task_model, work)
        rows = measure("tiny-bert" if args.smoke else args.model, encoder, "encoder", texts, args, work)
        rows += measure(task_name, task_dir, "task", texts, args, work)
    result = {"rows": rows, "threads": args.threads, "smoke": args.smoke, "torch": torch.__version__,
              "onnxruntime": __import__("onnxruntime").__version__, "python": platform.python_version(),
              "command": " ".join(sys.argv)}
    print("| model | batch | mean tokens | torch ms/batch | onnx ms/batch | torch sent/s | onnx sent/s "
          "| torch/onnx | max diff |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} ({r['what']}) | {r['batch']} | {r['mean_tokens']:.1f} | {r['torch_ms']:.2f} | "
              f"{r['onnx_ms']:.2f} | {r['torch_per_s']:.1f} | {r['onnx_per_s']:.1f} | {r['torch_over_onnx']:.2f} | "
              f"{r['max_abs_diff']:.1e} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
