"""A copy of a BERT model with some of its parts drawn afresh, to find which part of a pretrained
model helps or hurts a task (issue 16: is the 2-CPU-hour bert-mini's handicap on SST-2 in its
embeddings or in its transformer layers?).

``--parts embeddings`` redraws the embedding block (token, position and segment tables, and its
layer norm), ``encoder`` the transformer layers; the rest keeps the pretrained weights. Weights
are drawn as at initialisation (``muppets.nn.block.init_weights``, the model's
``initializer_range``, seed 0), so a redrawn part is what random initialisation gives it.

    python benchmarks/redraw_parts.py runs/bert-mini-untied --parts embeddings --out runs/bert-mini-untied-new-emb
    python benchmarks/label_budget.py --model runs/bert-mini-untied-new-emb --arms pretrained --tag=-new-emb …
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from muppets.interop.hf_bert import load_hf_bert, save_hf_bert
from muppets.nn.block import init_weights
from muppets.paths import resolve_model_path
from muppets.tokenizers.wordpiece import WordPieceTokenizer

log = logging.getLogger("redraw_parts")


def norms(module: torch.nn.Module) -> dict[str, float]:
    """The Frobenius norm of each weight matrix or table, the layers of a stack pooled
    (``0.ffn.up.weight`` and ``1.ffn.up.weight`` count as one ``ffn.up.weight``)."""
    squares: dict[str, float] = {}
    for name, param in module.named_parameters():
        if param.dim() < 2:
            continue
        key = ".".join(p for p in name.split(".") if not p.isdigit())
        squares[key] = squares.get(key, 0.0) + float(param.detach().float().pow(2).sum())
    return {k: v ** 0.5 for k, v in squares.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a BERT directory or muppets run")
    ap.add_argument("--parts", nargs="+", choices=["embeddings", "encoder"], required=True)
    ap.add_argument("--out", type=Path, required=True, help="a new directory")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: choose a new directory")
    directory = resolve_model_path(args.model)
    model = load_hf_bert(directory)
    torch.manual_seed(0)
    for part in args.parts:
        module = model.backbone.embeddings if part == "embeddings" else model.backbone.layers
        before = norms(module)
        init_weights(module, model.cfg.initializer_range)
        log.info("%s: %s redrawn (%d parameters)", args.out, part, sum(p.numel() for p in module.parameters()))
        after = norms(module)
        for name, norm in before.items():  # how far pretraining moved each weight's scale
            if after[name] > 0:
                log.info("  %-40s norm pretrained / at initialisation %.2f", name, norm / after[name])
    save_hf_bert(model, args.out, WordPieceTokenizer.load(directory))


if __name__ == "__main__":
    main()
