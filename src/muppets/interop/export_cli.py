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
                             ids_only=args.ids_only, **opset)
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
    return 0
