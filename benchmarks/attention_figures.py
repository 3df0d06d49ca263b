"""Attention figures of issue 20: where heads look, and the pronoun case; and the page's size.

1. **Attention shares** (Clark et al. 2019, "What Does BERT Look At?", Fig. 2): the average
   attention mass per layer (mean over heads, and per head) on the first token ([CLS] for
   BERT), on [SEP] and on punctuation, for all-MiniLM-L6-v2 over MRPC dev sentence pairs (the
   first ``--n`` pairs: [CLS] A [SEP] B [SEP], as Clark et al. fed BERT) and for our gpt-mini
   over the same pairs' first sentences (no [SEP]; the first token is the sentence's first word).
2. **The pronoun case** (Vig & Belinkov 2019): in sentence frames written here, "she" / "he"
   after "the nurse ... the doctor" (both orders of the two nouns), the attention from the
   pronoun to each noun: per frame the maximum over all heads and the mean over heads and layers.
   A figure of the first frame per model.
3. **The page**: a 128-token input, 6 layers x 12 heads (MiniLM), capture + HTML build time
   and the file's size (median of 5 builds).

Figures and JSON go to ``benchmarks/results/attention_*``.

    python benchmarks/attention_figures.py --n 300
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path


from muppets.analysis.attention import attention_shares, load_attention_model, pronoun_attention
from muppets.analysis.attention_page import page_html
from muppets.analysis.attention_plots import plot_pronoun, plot_shares
from muppets.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
FRAMES = [  # written for this benchmark; {a}/{b} are the two nouns, {p} the pronoun
    "The {a} met the {b} in the hall, and {p} smiled.",
    "The {a} called the {b} because {p} was worried about the results.",
    "After the {a} talked to the {b}, {p} went home early.",
    "The {a} thanked the {b} before {p} left the hospital.",
    "The {a} asked the {b} whether {p} could stay for dinner.",
]


def shares_of(model, texts: list, pairs: bool) -> dict:
    views = [model.view(a, b if pairs else None) for a, b in texts]
    shares = attention_shares(views)
    return {name: {"per_layer": s.mean(1).round(4).tolist(), "per_head": s.round(4).tolist()}
            for name, s in shares.items()}, shares


def pronoun_cases(model) -> list:
    out = []
    for frame in FRAMES:
        for a, b in (("nurse", "doctor"), ("doctor", "nurse")):
            for p in ("she", "he"):
                view = model.view(frame.format(a=a, b=b, p=p))
                summary = pronoun_attention(view, p, ["nurse", "doctor"]).summary()
                out.append({"frame": frame, "order": [a, b], "pronoun": p,
                            **{noun: {"max": s["max"], "mean": s["mean"], "max_at": s["max_at"]}
                               for noun, s in summary.items()}})
    return out


def pronoun_table(cases: list) -> dict:
    table = {}
    for p in ("she", "he"):
        rows = [c for c in cases if c["pronoun"] == p]
        table[p] = {noun: {"max": statistics.mean(c[noun]["max"] for c in rows),
                           "mean": statistics.mean(c[noun]["mean"] for c in rows),
                           "frames_where_higher": sum(c[noun]["max"] > c[other]["max"] for c in rows)}
                    for noun, other in (("nurse", "doctor"), ("doctor", "nurse"))}
        table[p]["n"] = len(rows)
    return table


def page_cost(model, texts: list) -> dict:
    words = " ".join(a for a, _ in texts).split()[:128]
    while len(model.encode(" ".join(words))[0]) > 128:  # cut to 128 pieces, [CLS]/[SEP] included
        words = words[:-1]
    text = " ".join(words)
    seconds, size = [], 0
    for _ in range(5):
        start = time.perf_counter()
        html = page_html(model.view(text), layer=0)
        seconds.append(time.perf_counter() - start)
        size = len(html.encode("utf-8"))
    view = model.view(text)
    return {"tokens": len(view.tokens), "layers": view.num_layers, "heads": view.num_heads,
            "build_s_median": statistics.median(seconds), "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300, help="MRPC dev pairs for the shares")
    parser.add_argument("--gpt-model", default=str(ROOT / "runs/gpt-mini/final"))
    args = parser.parse_args()
    pairs = [(ex.text, ex.text_b) for ex in load_task("mrpc")["dev"][: args.n]]
    result = {"command": "python benchmarks/attention_figures.py " + f"--n {args.n}",
              "machine": platform.processor() or platform.machine(), "n_pairs": len(pairs), "models": {}}
    for name, path, as_pairs in (("minilm", "minilm", True), ("gpt-mini", args.gpt_model, False)):
        model = load_attention_model(path)
        summary, shares = shares_of(model, pairs, as_pairs)
        plot_shares(shares, OUT / f"attention_shares_{name}.png", title=f"{name}: attention share per layer")
        cases = pronoun_cases(model)
        first = model.view(FRAMES[0].format(a="nurse", b="doctor", p="she"))
        plot_pronoun(pronoun_attention(first, "she", ["nurse", "doctor"]), OUT / f"attention_pronoun_{name}.png",
                     title=f"{name}: '{FRAMES[0].format(a='nurse', b='doctor', p='she')}'")
        result["models"][name] = {"path": str(path), "shares": summary, "pronoun": pronoun_table(cases),
                                  "pronoun_cases": cases}
        if name == "minilm":
            result["page"] = page_cost(model, pairs)
        print(name, "first-token share per layer:", summary["first"]["per_layer"])
        print(name, "pronoun:", json.dumps(result["models"][name]["pronoun"]))
    print("page:", result["page"])
    (OUT / "attention_figures.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
