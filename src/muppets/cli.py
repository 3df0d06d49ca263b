"""The ``muppets`` command: parses arguments, builds configs, calls the library, prints results.

    muppets tokenizer train --input data:english-corpus --out tok/ --vocab-size 30522
    muppets data prepare --input data:english-corpus --tokenizer tok/ --out corpus/
    muppets pretrain configs/bert-mini.yaml train.steps=2000 train.lr=5e-4
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from muppets.errors import MuppetsError


def _tokenizer_train(args: argparse.Namespace) -> int:
    from muppets.data.readers import iter_documents
    from muppets.paths import resolve_data_path
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    inputs = [resolve_data_path(p) for p in args.input]
    texts = (p for doc in iter_documents(inputs, args.format, errors=args.errors) for p in doc.paragraphs)
    tok = WordPieceTokenizer.train(texts, args.vocab_size, lowercase=not args.cased,
                                   min_frequency=args.min_frequency, show_progress=sys.stderr.isatty())
    tok.save(args.out)
    print(f"tokenizer: {tok.vocab_size} tokens -> {args.out}")
    return 0


def _load_tokenizer(path: str):
    from muppets.paths import resolve_data_path
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    p = resolve_data_path(path)
    return WordPieceTokenizer.from_vocab(p) if p.is_file() else WordPieceTokenizer.load(p)


def _data_prepare(args: argparse.Namespace) -> int:
    from muppets.data.prepare import prepare_corpus
    from muppets.paths import resolve_data_path

    s = prepare_corpus([resolve_data_path(p) for p in args.input], _load_tokenizer(args.tokenizer),
                       args.out, fmt=args.format, workers=args.workers, errors=args.errors,
                       overwrite=args.overwrite, progress=sys.stderr.isatty())
    print(f"prepared {s.out_dir}: {s.files} files, {s.documents} documents, {s.sentences} sentences, "
          f"{s.tokens} tokens in {s.seconds:.1f} s ({s.tokens_per_second:,.0f} tokens/s); "
          f"{s.empty_documents} empty documents, {s.skipped_files} skipped files, "
          f"{s.skipped_lines} skipped lines")
    return 0


def _pretrain(args: argparse.Namespace) -> int:
    from muppets.recipes import bert_pretrain

    cfg = bert_pretrain.load_config(args.config, args.overrides)
    summary = bert_pretrain.run(cfg, resume=not args.fresh)
    from muppets.train.distributed import dist_info

    if dist_info().is_main:
        _print_pretrain_summary(summary)
    return 0


def _print_pretrain_summary(summary: dict) -> None:
    ev = summary.get("eval", {})
    print(f"\npretraining {'stopped' if summary['stopped_early'] else 'finished'} at step {summary['step']}")
    base = summary.get("unigram_baseline", {})
    if "mlm_accuracy" in ev:
        print(f"held-out MLM accuracy {ev['mlm_accuracy']:.4f}  perplexity {ev['mlm_perplexity']:.1f}"
              + (f"   (unigram baseline: accuracy {base['mlm_accuracy']:.4f}, perplexity "
                 f"{base['mlm_perplexity']:.1f})" if base else ""))
    if "nsp_accuracy" in ev:
        print(f"held-out NSP accuracy {ev['nsp_accuracy']:.4f}"
              + (f"   (majority class: {base['nsp_accuracy']:.4f})" if "nsp_accuracy" in base else ""))
    print(f"Hugging Face model directory: {summary['final']}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="muppets", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    tok = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="action", required=True)
    t = tok.add_parser("train", help="train a WordPiece vocabulary on a corpus")
    t.add_argument("--input", nargs="+", required=True, help="files/dirs; data:… = shared data dir")
    t.add_argument("--out", required=True, help="directory to write (HF-compatible)")
    t.add_argument("--vocab-size", type=int, default=30522)
    t.add_argument("--min-frequency", type=int, default=2)
    t.add_argument("--cased", action="store_true", help="keep case and accents")
    t.add_argument("--format", default="auto")
    t.add_argument("--errors", default="strict", choices=["strict", "skip", "replace"])
    t.set_defaults(func=_tokenizer_train)

    data = sub.add_parser("data", help="corpus tools").add_subparsers(dest="action", required=True)
    d = data.add_parser("prepare", help="tokenize a raw corpus into memory-mapped shards")
    d.add_argument("--input", nargs="+", required=True)
    d.add_argument("--tokenizer", required=True, help="tokenizer directory or vocab.txt")
    d.add_argument("--out", required=True)
    d.add_argument("--format", default="auto")
    d.add_argument("--workers", type=int, default=None)
    d.add_argument("--errors", default="strict", choices=["strict", "skip", "replace"])
    d.add_argument("--overwrite", action="store_true")
    d.set_defaults(func=_data_prepare)

    p = sub.add_parser("pretrain", help="pretrain BERT (MLM + NSP) from a YAML config")
    p.add_argument("config", nargs="?", help="YAML/JSON config (see configs/)")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.steps=100")
    p.add_argument("--fresh", action="store_true", help="ignore existing checkpoints in run_dir")
    p.set_defaults(func=_pretrain)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pretrain" and args.config and "=" in args.config:
        args.overrides, args.config = [args.config, *args.overrides], None
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return args.func(args)
    except MuppetsError as err:
        print(f"muppets: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
