"""Throughput and dev score of task models in torch float32 / bf16 / int8 and ONNX float32 / int8.

For each model directory given (a fine-tuned task model, e.g. a MiniLM SST-2 ``best/``;
several: a teacher and its students, measured in one run under the same conditions):

1. build the runtimes: :class:`~muppets.transfer.predict.Predictor` with ``precision`` float32,
   bf16 and int8 (:mod:`muppets.runtime`), and :class:`~muppets.interop.onnx_runtime.OnnxPredictor`
   on two exports written to a temporary directory, float32 and ``quantize="int8"``
   (:func:`muppets.interop.onnx_export.export_onnx`);
2. take the task's split (``--split``, default dev; the task is the one the directory's
   ``muppets_finetune.json`` names, else ``--task``): its first ``--sentences`` inputs are
   turned into features once (tokenizing is not timed), cut into consecutive batches of each
   ``--batch-sizes`` (default 1 and 32) as they come (not sorted by length, as a server sees them);
3. time each runtime's forward passes over all batches (``feature_logits``: padding, forward,
   logits to numpy) after ``--warmup`` untimed batches; ``--repeats`` passes, the runtimes'
   order rotated at every pass so slow drifts of the machine fall on all of them; report the
   median sentences/s over the passes and their spread (min, max), and each runtime's speed
   relative to torch float32 on the same batch size;
4. score every runtime on the split (``--max-eval-examples``, 0 = all) with the task's metric
   (:mod:`muppets.transfer.runtime_scores`), and the change against torch float32.

All runtimes use ``--threads`` intra-op threads (torch and onnxruntime). Results go to
``--out`` (JSON, with the CPU's flags and versions) and a Markdown table is printed. Time on a
quiet machine: on a loaded one the spread says how far to trust the medians.

    python benchmarks/int8_speed.py runs/sst2-minilm/best runs/distill-small/best \\
        --threads 2 --out benchmarks/results/int8_speed.json
    # smoke run (tiny random task model on a few sentences; checks the script, numbers meaningless):
    python benchmarks/int8_speed.py --smoke --out /tmp/int8_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

RUNTIMES = ("torch-float32", "torch-bf16", "torch-int8", "onnx-float32", "onnx-int8")


def build(name: str, model_dir: Path, work: Path, threads: int, batch: int) -> Any:
    """The predictor of runtime ``name`` (an ONNX one exports ``model_dir`` into ``work`` first)."""
    from muppets.transfer import Predictor

    engine, precision = name.split("-")
    if engine == "torch":
        return Predictor(model_dir, batch_size=batch, precision=precision)
    from muppets.interop.onnx_export import export_onnx
    from muppets.interop.onnx_runtime import OnnxPredictor

    export = work / f"{model_dir.name}-{len(list(work.iterdir()))}-{precision}"
    export_onnx(model_dir, export, threads=threads, quantize="int8" if precision == "int8" else "")
    return OnnxPredictor(export, batch_size=batch, threads=threads)


def sentences_per_second(predictor: Any, batches: list[list[Any]]) -> float:
    """One timed pass of ``predictor``'s forward over ``batches`` of features."""
    from muppets.transfer.predict import feature_logits

    n = sum(len(b) for b in batches)
    start = time.perf_counter()
    for features in batches:
        feature_logits(predictor.model, features, len(features), predictor.tokenizer.pad_id)
    return n / (time.perf_counter() - start)


def measure(model_dir: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from muppets.transfer.features import make_features
    from muppets.transfer.finetune import TaskSection
    from muppets.transfer.runtime_scores import compare, model_task, score_predictor, task_examples

    task = model_task(model_dir) or (TaskSection(name=args.task) if args.task else None)
    if task is None:
        raise SystemExit(f"{model_dir}: its muppets_finetune.json names no task; pass --task")
    spec, scored, total = task_examples(task, args.split, args.max_eval_examples)
    _, timed, _ = task_examples(task, args.split, 0)
    timed = [timed[i % len(timed)] for i in range(args.sentences)]  # a small split is cycled
    predictors = {name: build(name, model_dir, work, args.threads, max(args.batch_sizes)) for name in args.runtimes}
    features = make_features(spec.kind, timed, predictors[args.runtimes[0]].tokenizer,
                             predictors[args.runtimes[0]].features, spec.labels)
    if len(features) != len(timed):
        raise SystemExit(f"{model_dir}: a {spec.kind} task gives several windows per input; time classify / pair tasks")
    speed: dict[str, dict[str, Any]] = {name: {} for name in args.runtimes}
    with torch.inference_mode():
        for size in args.batch_sizes:
            batches = [features[i: i + size] for i in range(0, len(features) - size + 1, size)]
            passes: dict[str, list[float]] = {name: [] for name in args.runtimes}
            for name in args.runtimes:  # warm-up: first calls build kernels and caches
                sentences_per_second(predictors[name], batches[: args.warmup])
            for r in range(args.repeats):
                order = args.runtimes[r % len(args.runtimes):] + args.runtimes[: r % len(args.runtimes)]
                for name in order:
                    passes[name].append(sentences_per_second(predictors[name], batches))
            for name, values in passes.items():
                speed[name][str(size)] = {"per_s_median": statistics.median(values), "per_s_min": min(values),
                                          "per_s_max": max(values), "per_s": values, "batches": len(batches)}
    reference = "torch-float32" if "torch-float32" in args.runtimes else args.runtimes[0]
    for name in args.runtimes:
        for size, row in speed[name].items():
            row["vs_" + reference] = row["per_s_median"] / speed[reference][size]["per_s_median"]
    scores = {name: score_predictor(p, spec, scored) for name, p in predictors.items()}
    return {"model": str(model_dir), "task": spec.name or str(task.files), "split": args.split,
            "scored_examples": len(scored), "split_size": total, "timed_sentences": len(timed),
            "mean_tokens": statistics.mean(f.length for f in features), "speed": speed,
            "accuracy": compare(scores, reference)}


def smoke_model(work: Path) -> Path:
    """A tiny random classify model whose settings name a small csv task (checks the script only)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _tiny_backbones import CORPUS, tiny_bert

    from muppets.transfer.features import FeatureOptions
    from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model
    from muppets.transfer.predict import SpanOptions, save_settings

    encoder = tiny_bert(work / "tiny-bert")
    texts = [" ".join(line.split()[i: i + 6]) for line in CORPUS[:3] for i in range(0, 30, 6) if line.split()[i: i + 6]]
    for split in ("train", "dev"):
        lines = ["text,label"] + [f"{t},{'pos' if i % 2 else 'neg'}" for i, t in enumerate(texts)]
        (work / f"{split}.csv").write_text("\n".join(lines) + "\n")
    tok = load_tokenizer(encoder)
    torch.manual_seed(0)
    out = work / "tiny-task"
    save_task_model(new_task_model(encoder, "classify", 2, tok), out, tok, ["neg", "pos"])
    files = {"train": str(work / "train.csv"), "dev": str(work / "dev.csv")}
    save_settings(out, FeatureOptions(max_seq_len=32), SpanOptions(), {"task": "", "finetune": {"task": {"files": files}}})
    return out


def machine() -> dict[str, Any]:
    """The CPU model and the flags that decide int8 / bf16 kernels."""
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "quantized_engine": torch.backends.quantized.engine}
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        flags = next((line for line in text.splitlines() if line.startswith("flags")), "").split()
        info["cpu"] = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
        info["flags"] = sorted(f for f in flags if f.startswith(("avx", "amx")) or f in ("fma", "f16c"))
    except OSError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="*", help="fine-tuned task directories (e.g. runs/sst2/best), measured in one run")
    p.add_argument("--task", default="", help="the task when a directory's muppets_finetune.json names none (e.g. sst2)")
    p.add_argument("--split", default="dev", help="split timed and scored (default: dev)")
    p.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=list(RUNTIMES))
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    p.add_argument("--sentences", type=int, default=512, help="sentences timed per batch size and pass")
    p.add_argument("--repeats", type=int, default=5, help="timed passes over the sentences")
    p.add_argument("--warmup", type=int, default=4, help="untimed batches per runtime first")
    p.add_argument("--max-eval-examples", type=int, default=0, help="examples scored (0 = the whole split)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of torch and onnxruntime")
    p.add_argument("--out", help="write the results here (JSON)")
    p.add_argument("--smoke", action="store_true", help="tiny random task model, few sentences: checks the script only")
    args = p.parse_args(argv)
    if not args.models and not args.smoke:
        p.error("give at least one model directory (or --smoke)")
    torch.set_num_threads(args.threads)
    if args.smoke:
        args.sentences, args.repeats, args.warmup = 2 * max(args.batch_sizes), 2, 1
    if args.sentences < max(args.batch_sizes):
        p.error(f"--sentences {args.sentences}: fewer than one batch of {max(args.batch_sizes)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="int8_speed_") as tmp:
        work = Path(tmp)
        models = [smoke_model(work)] if args.smoke else []
        from muppets.paths import resolve_model_path

        models += [resolve_model_path(m) for m in args.models]
        exports = work / "exports"
        exports.mkdir()
        for model_dir in models:
            results.append(measure(Path(model_dir), args, exports))
    result = {"results": results, "threads": args.threads, "smoke": args.smoke, "repeats": args.repeats,
              "machine": machine(), "command": " ".join(sys.argv)}
    print("| model | runtime | " + " | ".join(f"batch {b} sent/s (min-max) | vs float32" for b in args.batch_sizes)
          + " | score | change |")
    print("|---|---|" + "---|---|" * len(args.batch_sizes) + "---|---|")
    for r in results:
        acc = r["accuracy"]
        for name, speed in r["speed"].items():
            cells = []
            for b in args.batch_sizes:
                row = speed[str(b)]
                ratio = next(v for k, v in row.items() if k.startswith("vs_"))
                cells += [f"{row['per_s_median']:.1f} ({row['per_s_min']:.1f}-{row['per_s_max']:.1f})", f"{ratio:.2f}x"]
            metric = next(iter(acc["scores"][name]), "")
            score = acc["scores"][name].get(metric, float("nan"))
            change = acc["change"].get(name, {}).get(metric, 0.0)
            print(f"| {Path(r['model']).name} | {name} | " + " | ".join(cells) + f" | {metric} {score:.4f} | {change:+.4f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
