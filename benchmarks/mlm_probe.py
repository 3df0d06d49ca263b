"""What a pretrained BERT predicts for [MASK] in a few probe sentences: a quick check of whether
it reads context or only word frequencies. Also prints the standard deviation of the token
embedding matrix (a fresh BERT draws it from N(0, 0.02)).

    python benchmarks/mlm_probe.py runs/bert-mini/final runs/bert-mini-2/final
"""

from __future__ import annotations

import argparse

import torch

from muppets.interop.hf_bert import load_hf_bert
from muppets.tokenizers.wordpiece import WordPieceTokenizer

PROBES = ["the capital of france is [MASK] .", "she opened the [MASK] and walked into the room .",
          "he was born in [MASK] in 1950 ."]


def top_predictions(model, tok: WordPieceTokenizer, text: str, k: int = 6) -> list[str]:
    f = tok.encode_for_model(text)
    position = f["input_ids"].index(tok.mask_id)
    with torch.no_grad():
        logits = model(torch.tensor([f["input_ids"]]), torch.tensor([f["token_type_ids"]])).mlm_logits
    return [tok.id_to_token(i) for i in logits[0, position].topk(k).indices.tolist()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", help="HF BERT directories")
    for model_dir in ap.parse_args().models:
        model, tok = load_hf_bert(model_dir).eval(), WordPieceTokenizer.load(model_dir)
        std = model.backbone.embeddings.tokens.weight.std().item()
        print(f"{model_dir}  token embedding std {std:.4f}")
        for text in PROBES:
            print(f"{model_dir}  {text!r}: {' '.join(top_predictions(model, tok, text))}")


if __name__ == "__main__":
    main()
