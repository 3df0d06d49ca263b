"""``muppets attention``: the offline page, head PNGs and the attention analyses from the shell.

::

    muppets attention --model minilm "The nurse said that she was tired." --out nurse.html \\
        --png 3:0 nurse-3-0.png --pronoun she --candidates nurse --shares shares.json
    muppets attention --model runs/bert-mini "Is it raining?" --pair "No, it is sunny." --out pair.html
    muppets attention --model runs/gpt-mini --texts sentences.txt --shares gpt-shares.json --shares-plot gpt-shares.png

``--texts FILE`` (one text a line; ``A<TAB>B`` for a pair) averages the shares over many inputs,
as Clark et al. 2019 did over 1000 Wikipedia segments. Layers count from 1, as ``muppets probe``
and ``muppets embed`` count them (their layer 0 is the embeddings, which have no attention: layer
``l`` here is the transformer layer whose output is their layer ``l``); heads count from 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from muppets.cliargs import ModelSlots, add_model_argument, non_negative_int, refuse_existing, settle_model
from muppets.analysis import FIRST_LAYER
from muppets.config import read_utf8
from muppets.errors import ConfigError


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``attention`` subcommand to an argparse subparsers object; returns its parser."""
    p = sub.add_parser("attention", help="attention of a BERT / GPT model: offline HTML page (head and model "
                       "views), head PNGs, attention shares on [CLS]/[SEP]/punctuation, pronoun case")
    add_model_argument(p, "HF BERT or GPT directory, 'minilm', or a muppets run directory",
                       ModelSlots(("text",), takes=1))
    p.add_argument("text", nargs="?", help="the text (sentence A) to look at")
    p.add_argument("--pair", metavar="TEXT_B", help="sentence B of a pair")
    p.add_argument("--out", metavar="PAGE", help="write the self-contained HTML page here")
    p.add_argument("--layer", type=int, default=FIRST_LAYER,
                   help="layer the page's head view opens on (default 1: the first transformer layer; layers count "
                        "from 1 as in probe and embed, whose layer 0 is the embeddings)")
    p.add_argument("--heads", help="heads the page's head view opens with, e.g. 0,3 (default: all)")
    p.add_argument("--png", nargs=2, action="append", metavar=("LAYER:HEAD", "FILE"), default=[],
                   help="write one head as a PNG (repeatable; layers from 1, heads from 0)")
    p.add_argument("--png-kind", choices=["lines", "heatmap"], default="lines", help="how --png draws a head")
    p.add_argument("--texts", metavar="FILE", help="more inputs for --shares: one text a line, A<TAB>B for a pair")
    p.add_argument("--shares", metavar="JSON", help="write the per layer × head attention shares on the first "
                   "token, [SEP] and punctuation (Clark et al. 2019)")
    p.add_argument("--shares-plot", metavar="PNG", help="plot those shares")
    p.add_argument("--pronoun", help="pronoun case: the pronoun (its first occurrence in TEXT)")
    p.add_argument("--candidates", help="pronoun case: comma-separated candidate nouns, e.g. nurse,doctor")
    p.add_argument("--pronoun-json", metavar="JSON", help="write the pronoun case's result")
    p.add_argument("--pronoun-plot", metavar="PNG", help="plot the pronoun case per layer")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: leave the default)")
    p.add_argument("--overwrite", action="store_true", help="replace output files that exist")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Do what ``args`` ask; prints what it wrote. Returns the exit code."""
    from muppets.analysis import attention

    _check_args(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model = attention.load_attention_model(args.model)
    view = model.view(args.text, args.pair) if args.text is not None else None
    if view is not None:
        print(f"{len(view.tokens)} tokens, {view.num_layers} layers x {view.num_heads} heads ({model.kind})")
        _write_view_outputs(args, view)
    if args.shares or args.shares_plot:
        _shares(args, model, view)
    if args.pronoun:
        _pronoun(args, view)
    return 0


def _check_args(args: argparse.Namespace) -> None:
    """Fail before loading the model on arguments that cannot work together."""
    settle_model(args)
    if args.text is None and not args.texts:
        raise ConfigError("attention: give a TEXT (or --texts FILE with --shares)")
    wants_view = args.out or args.png or args.pronoun
    if args.text is None and wants_view:
        raise ConfigError("attention: --out, --png and --pronoun need a TEXT")
    if not (wants_view or args.shares or args.shares_plot):
        raise ConfigError("attention: nothing to write; give --out PAGE, --png LAYER:HEAD FILE, --shares JSON, "
                          "--shares-plot PNG or --pronoun WORD --candidates A,B")
    if bool(args.pronoun) != bool(args.candidates):
        raise ConfigError("attention: --pronoun and --candidates go together")
    if (args.pronoun_json or args.pronoun_plot) and not args.pronoun:
        raise ConfigError("attention: --pronoun-json and --pronoun-plot write the --pronoun case: give --pronoun WORD "
                          "--candidates A,B")
    if not args.out and (args.layer != FIRST_LAYER or args.heads):
        raise ConfigError("attention: --layer and --heads choose what the page opens on: give --out PAGE")
    if not args.png and args.png_kind != "lines":
        raise ConfigError("attention: --png-kind draws --png: give --png LAYER:HEAD FILE")
    if args.texts and not (args.shares or args.shares_plot):
        raise ConfigError("attention: --texts is read for --shares / --shares-plot: give one of them")
    args.png = [(*_layer_head(spec), file) for spec, file in args.png]
    refuse_existing(args.out, *(file for _, _, file in args.png), args.shares, args.shares_plot, args.pronoun_json,
                    args.pronoun_plot, overwrite=args.overwrite)


def _layer_head(spec: str) -> tuple[int, int]:
    """``"3:5"`` -> (3, 5): layer 3 (from 1), head 5 (from 0)."""
    layer, sep, head = spec.partition(":")
    if not sep or not layer.strip().isdigit() or not head.strip().isdigit():
        raise ConfigError(f"--png {spec!r}: expected LAYER:HEAD, the layer from 1 and the head from 0, e.g. 3:5")
    return int(layer), int(head)


def _heads(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(h) for h in text.split(",") if h.strip()]
    except ValueError:
        raise ConfigError(f"--heads {text!r}: expected comma-separated head numbers, e.g. 0,3") from None


def _write_view_outputs(args: argparse.Namespace, view) -> None:
    from muppets.analysis.attention_page import write_page
    from muppets.analysis.attention_plots import save_head_png

    for layer, head, _ in args.png:
        view.check_head(layer, head)
    if args.out:
        path = write_page(view, args.out, layer=args.layer, heads=_heads(args.heads))
        print(f"page: {path} ({path.stat().st_size / 1e6:.2f} MB)")
    for layer, head, file in args.png:
        print(f"layer {layer}, head {head}: {save_head_png(view, layer, head, file, args.png_kind)}")


def read_texts(path: str | Path) -> list[tuple[str, str | None]]:
    """(text, pair or None) per non-empty line of ``path``; ``A<TAB>B`` is a pair."""
    path = Path(path)
    lines = read_utf8(path, "--texts file").splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        parts = line.split("\t")
        if len(parts) > 2:
            raise ConfigError(f"{path}:{number}: {len(parts)} tab-separated fields; expected TEXT or A<TAB>B")
        if line.strip():
            out.append((parts[0], parts[1] if len(parts) == 2 else None))
    if not out:
        raise ConfigError(f"--texts {path}: no text in it")
    return out


def _shares(args: argparse.Namespace, model, view) -> None:
    from muppets.analysis.attention import attention_shares
    from muppets.analysis.attention_plots import plot_shares
    from muppets.config import write_json_atomic

    views = [] if view is None else [view]
    if args.texts:
        views += [model.view(text, pair) for text, pair in read_texts(args.texts)]
    shares = attention_shares(views)
    print(f"attention shares over {len(views)} input(s), mean over heads per layer:")
    layers = list(range(FIRST_LAYER, FIRST_LAYER + len(next(iter(shares.values())))))
    print("  layer  " + " ".join(f"{layer:>5}" for layer in layers))
    for name, values in shares.items():
        print(f"  {name:<6} " + " ".join(f"{v:.3f}" for v in values.mean(1)))
    if args.shares:
        write_json_atomic(Path(args.shares), {"model": str(args.model), "inputs": len(views), "layers": layers,
                                              **{k: v.round(6).tolist() for k, v in shares.items()}})
        print(f"shares: {args.shares}")
    if args.shares_plot:
        print(f"shares plot: {plot_shares(shares, args.shares_plot, title=str(args.model))}")


def _pronoun(args: argparse.Namespace, view) -> None:
    from muppets.analysis.attention import pronoun_attention
    from muppets.analysis.attention_plots import plot_pronoun
    from muppets.config import write_json_atomic

    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()]
    result = pronoun_attention(view, args.pronoun, candidates)
    summary = result.summary()
    for name, s in summary.items():
        print(f"{args.pronoun} -> {name}: max {s['max']:.3f} (layer {s['max_at'][0]}, head {s['max_at'][1]}), "
              f"mean {s['mean']:.3f}")
    if args.pronoun_json:
        write_json_atomic(Path(args.pronoun_json), {"model": str(args.model), "text": args.text,
                                                    "pronoun": args.pronoun, "candidates": summary})
        print(f"pronoun case: {args.pronoun_json}")
    if args.pronoun_plot:
        print(f"pronoun plot: {plot_pronoun(result, args.pronoun_plot, title=args.text)}")
