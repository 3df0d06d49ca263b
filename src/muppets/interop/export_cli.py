"""``muppets export onnx --model MODEL --out DIR`` and ``muppets export sentence-transformers --model
MODEL --out DIR``: the argparse entry (:mod:`muppets.cli` adds it).

Imports neither the exporter nor onnxruntime until it runs, so ``muppets --help`` works without
the ``onnx`` extra (``pip install -e ".[onnx]"``).
"""

from __future__ import annotations

import argparse
import sys

from muppets.cliargs import add_model_argument, settle_model
from muppets.errors import MuppetsError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``export`` (sub-action ``onnx``) to the ``muppets`` subcommands; returns its parser."""
    e = sub.add_parser("export", help="export a model to another runtime's format (onnx, sentence-transformers)")
    actions = e.add_subparsers(dest="export_format", required=True)
    o = actions.add_parser("onnx", help="a BERT encoder or a fine-tuned task model -> model.onnx, checked "
                           "against onnxruntime, with its tokenizer and settings beside it")
    add_model_argument(o, "an HF BERT directory, 'minilm', a muppets run, or a fine-tuned task directory (BERT or GPT)")
    o.add_argument("--out", required=True, metavar="DIR",
                   help="a new (or empty) directory for model.onnx and its settings; never overwritten")
    o.add_argument("--opset", type=int, default=None,  # None: the exporter's DEFAULT_OPSET
                   help="ONNX opset, 14 … 20 (default: 17)")
    o.add_argument("--layers", choices=["last", "all"], default="last",
                   help="encoders: output the top layer only, or also every layer (hidden_states)")
    o.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="run onnxruntime on padded inputs of new shapes and compare with torch (default: on)")
    o.add_argument("--tolerance", type=float, default=1e-4, help="largest |onnx - torch| the check accepts")
    o.add_argument("--quantize", choices=["int8"], default=None,
                   help="int8: onnxruntime's dynamic quantization of the graph's linear layers (int8 weights per "
                        "output column, inputs quantized per call); a task model is then scored in float32 (torch) "
                        "and int8 (the graph) on its task's --score-split, and both and the change are printed and "
                        "written to muppets_onnx.json")
    o.add_argument("--score", action=argparse.BooleanOptionalAction, default=True,
                   help="with --quantize: score a task model whose muppets_finetune.json names its task (default: on)")
    o.add_argument("--score-split", default="dev", help="with --quantize: the split scored (default: dev)")
    o.add_argument("--max-eval-examples", type=int, default=0,
                   help="with --quantize: score the first N examples of the split only (0 = all)")
    o.add_argument("--ids-only", action="store_true",
                   help="export a model without tokenizer files: the graph alone, for callers that tokenize "
                        "themselves (muppets serve refuses such an export)")
    o.set_defaults(func=run)
    _add_sentence_transformers(actions)
    return e


def _add_sentence_transformers(actions: argparse._SubParsersAction) -> None:
    from muppets.sentence.names import MODES

    st = actions.add_parser("sentence-transformers", help="any encoder or GPT muppets reads -> a directory "
                            "sentence_transformers.SentenceTransformer(DIR) loads (Transformer, Pooling, Dense, Normalize)")
    add_model_argument(st, "an HF directory of any family, 'minilm', or a muppets run")
    st.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory; never overwritten")
    st.add_argument("--pooling", choices=MODES, default="",
                    help="the Pooling module's mode (default: as the model's modules.json says, else mean)")
    st.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                    help="end with a Normalize module (default: as the model's modules.json says, else no)")
    st.set_defaults(func=run_sentence_transformers)


def run_sentence_transformers(args: argparse.Namespace) -> int:
    """Export; print the directory and its modules; 2 on a user error."""
    try:
        from muppets.sentence import read_head
        from muppets.sentence.encode import export_sentence_transformers

        settle_model(args)
        out = export_sentence_transformers(args.model, args.out, args.pooling, args.normalize)
    except MuppetsError as err:
        print(f"muppets export sentence-transformers: error: {err}", file=sys.stderr)
        return 2
    print(f"exported {args.model} to {out}: {read_head(out).describe()}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Export, print what was written and the check's difference; 2 on a user error."""
    try:
        from muppets.interop.onnx_export import export_onnx

        settle_model(args)
        opset = {} if args.opset is None else {"opset": args.opset}
        report = export_onnx(args.model, args.out, layers=args.layers, check=args.check, tolerance=args.tolerance,
                             ids_only=args.ids_only, quantize=args.quantize or "", **opset)
        scores = score_quantized(report, args.score_split, args.max_eval_examples) if args.quantize and args.score else []
    except MuppetsError as err:
        print(f"muppets export onnx: error: {err}", file=sys.stderr)
        return 2
    what = report.kind + " task model" if report.what == "task" else "encoder"
    print(f"exported the {report.family} {what} at {report.source} to {report.directory}/model.onnx "
          f"(opset {report.opset}; outputs {', '.join(report.outputs)}; {report.seconds:.1f} s)")
    if not report.tokenizer:
        print("no tokenizer (--ids-only): the graph takes token ids; muppets serve refuses this export")
    if report.max_abs_diff is None:
        print("not checked against onnxruntime (--no-check)")
    else:
        print(f"onnxruntime vs torch: max |diff| = {report.max_abs_diff:.3g} (tolerance {report.tolerance:g})")
    if report.precision == "int8":
        from muppets.runtime import INT8_NOTE

        print(INT8_NOTE.replace("precision int8", "int8 graph (onnxruntime)"))
        if report.int8_max_abs_diff is not None:
            print(f"int8 graph vs torch float32: max |diff| = {report.int8_max_abs_diff:.3g}")
        print("\n".join(scores) if scores else "not scored (--no-score, an encoder, or a task model whose "
              "muppets_finetune.json names no task)")
    return 0


def score_quantized(report, split: str, max_examples: int) -> list[str]:  # noqa: ANN001 - an ExportReport
    """A quantized task export's score beside its source's float32 one on the task's ``split``
    (:mod:`muppets.transfer.runtime_scores`), written into the export's manifest as ``accuracy``;
    printable lines ([] when the source names no task: nothing to score)."""
    import logging
    from pathlib import Path

    from muppets.config import write_json_atomic
    from muppets.interop.onnx_export import MANIFEST, read_manifest
    from muppets.interop.onnx_runtime import OnnxPredictor
    from muppets.transfer import Predictor
    from muppets.transfer.runtime_scores import compare, compare_lines, model_task, score_predictor, task_examples

    task = model_task(report.source) if report.what == "task" else None
    if task is None:
        return []
    try:
        spec, examples, total = task_examples(task, split, max_examples)
    except MuppetsError as err:  # the export is written; say why it is not scored
        logging.getLogger(__name__).warning("int8 export not scored: %s", err)
        return [f"not scored: the task's data did not load ({err})"]
    scores = {"float32": score_predictor(Predictor(report.source), spec, examples),
              "int8": score_predictor(OnnxPredictor(report.directory), spec, examples)}
    result = compare(scores) | {"split": split, "examples": len(examples), "of": total, "task": spec.name,
                                "float32_runtime": "torch", "int8_runtime": "onnxruntime"}
    manifest = read_manifest(report.directory)
    write_json_atomic(Path(report.directory) / MANIFEST, manifest | {"accuracy": result})
    report.accuracy = result
    return compare_lines(result, f"{spec.name} {split} ({len(examples)} of {total} examples; float32 = torch, "
                                 "int8 = this graph)")
