"""Pretraining recipe ablation at fixed CPU time (issue 16): bert-mini on the shared English corpus.

Every variant changes one thing of the current ``configs/bert-mini.yaml`` recipe (MLM+NSP, lr 5e-4
with 9.4% linear warmup then linear decay, batch 32 x 128, dropout 0.1, 15% masking, fp32) and
gets the same CPU budget on one thread. The schedule must end inside the budget, so each variant
is first timed for a few steps (a probe run), and its step count is the budget divided by that
step time (a ``max_minutes`` guard stops it if the machine slows down). Every final model is then
scored on ONE common held-out set: packed 128-token sequences of the held-out documents, 15%
masking, whatever the variant trained on (NSP pairs, 64 tokens, 40% masking), so the accuracies
compare. The 8k-vocabulary variant is scored on its own tokenization of the same documents
(its pieces are shorter, so its accuracy is not comparable one to one).

    python benchmarks/recipe_ablation.py --budget-min 10 base mlm bf16 ...   # listed variants
    python benchmarks/recipe_ablation.py --list

Results accumulate in benchmarks/results/recipe_ablation.json (a finished variant is skipped).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from muppets.interop.hf_bert import load_hf_bert  # noqa: E402
from muppets.objectives.mlm import MaskingConfig  # noqa: E402
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig  # noqa: E402
from muppets.recipes.bert_pretrain import special_ids  # noqa: E402
from muppets.recipes.common import CorpusSection, prepare_once  # noqa: E402
from muppets.recipes.pretraining import held_out_evaluator  # noqa: E402
from muppets.tokenizers.wordpiece import WordPieceTokenizer  # noqa: E402

log = logging.getLogger("recipe_ablation")
BASE_WARMUP = 300 / 3200  # the bert-mini.yaml warmup as a share of its steps


@dataclass
class Phase:
    overrides: list[str] = field(default_factory=list)
    share: float = 1.0  # of the budget
    warmup: float = BASE_WARMUP


@dataclass
class Variant:
    doc: str
    phases: list[Phase]
    vocab: str = "30k"


def one(doc: str, *overrides: str, warmup: float = BASE_WARMUP, vocab: str = "30k") -> Variant:
    return Variant(doc, [Phase(list(overrides), 1.0, warmup)], vocab)


VARIANTS: dict[str, Variant] = {
    "base": one("configs/bert-mini.yaml as it is (MLM+NSP)"),
    "mlm": one("MLM only on fully packed sequences (no NSP)", "data.nsp=false"),
    "bf16": one("bf16 autocast", "train.precision=bf16"),
    "lr1e-3": one("peak lr 1e-3", "train.lr=1e-3"),
    "lr2e-3": one("peak lr 2e-3", "train.lr=2e-3"),
    "warm2": one("warmup 2% of the steps", warmup=0.02),
    "nodrop": one("dropout off", "model.overrides={hidden_dropout: 0.0, attention_dropout: 0.0}"),
    "mask30": one("masking 30%", "data.masking.masked_lm_prob=0.3", "data.masking.max_predictions=40"),
    "mask40": one("masking 40%", "data.masking.masked_lm_prob=0.4", "data.masking.max_predictions=52"),
    "batch128": one("batch 128 (accumulation 4), lr 1e-3", "train.batch_size=128", "train.accumulation=4",
                    "train.lr=1e-3"),
    "seq64": Variant("64 tokens (batch 64) for 75% of the budget, then 128 (batch 32)", [
        Phase(["data.max_seq_len=64", "train.batch_size=64", "data.masking.max_predictions=10"], 0.75),
        Phase([], 0.25, warmup=0.05)]),
    "vocab8k": one("an 8k WordPiece vocabulary", vocab="8k"),
}

# Every change at once that the one-at-a-time runs cannot separate while they all sit on the MLM
# plateau; the leave-one-out runs below measure what each contributes once the plateau is left.
FAST = ["train.precision=bf16", "data.nsp=false", "model.overrides={hidden_dropout: 0.0, attention_dropout: 0.0}"]
VARIANTS.update({
    "fast-lr1e-3": one("bf16, MLM only, no dropout, lr 1e-3, warmup 6%", *FAST, "train.lr=1e-3", warmup=0.06),
    "fast-lr2e-3": one("bf16, MLM only, no dropout, lr 2e-3, warmup 6%", *FAST, "train.lr=2e-3", warmup=0.06),
    "fast-preln-lr2e-3": one("the same as fast-lr2e-3 with pre-LN blocks", *FAST[:2], "train.lr=2e-3",
                             "model.overrides={hidden_dropout: 0.0, attention_dropout: 0.0, norm_first: true}",
                             warmup=0.06),
    "fast-lr1e-3-nsp": one("fast-lr1e-3 with MLM+NSP sentence pairs instead of packed MLM only", FAST[0], FAST[2],
                           "train.lr=1e-3", warmup=0.06),
    "fast-lr1e-3-mask40": one("fast-lr1e-3 with 40% masking", *FAST, "train.lr=1e-3", "data.masking.masked_lm_prob=0.4",
                              "data.masking.max_predictions=52", warmup=0.06),
    "fast-lr1e-3-seq64": Variant("fast-lr1e-3 with 64 tokens (batch 64) for 75% of the budget, then 128 (batch 32)", [
        Phase([*FAST, "train.lr=1e-3", "data.max_seq_len=64", "train.batch_size=64",
               "data.masking.max_predictions=10"], 0.75, warmup=0.06),
        Phase([*FAST, "train.lr=1e-3"], 0.25, warmup=0.05)]),
    "fast-lr1e-3-mask30": one("fast-lr1e-3 with 30% masking", *FAST, "train.lr=1e-3", "data.masking.masked_lm_prob=0.3",
                              "data.masking.max_predictions=40", warmup=0.06),
    "fast-lr1e-3-batch128": one("fast-lr1e-3 with batch 128 (accumulation 4)", *FAST, "train.lr=1e-3",
                                "train.batch_size=128", "train.accumulation=4", warmup=0.06),
    "fast-lr1e-3-vocab8k": one("fast-lr1e-3 with an 8k WordPiece vocabulary", *FAST, "train.lr=1e-3",
                               warmup=0.06, vocab="8k"),
    "fast-lr1e-3-warm2": one("fast-lr1e-3 with warmup 2% of the steps", *FAST, "train.lr=1e-3", warmup=0.02),
})


def muppets(*args: str, log_to: Path) -> None:
    with open(log_to, "w") as out:
        subprocess.run([str(ROOT / ".venv/bin/muppets"), "pretrain", str(ROOT / "configs/bert-mini.yaml"), *args],
                       stdout=out, stderr=subprocess.STDOUT, check=True, cwd=ROOT)


def inputs(root: Path, vocab: str) -> tuple[Path, Path]:
    """(tokenizer dir, prepared corpus) of a vocabulary: 30k = the bert-mini tokenizer trained
    on this corpus by the bert-mini recipe; 8k = trained here once on the same corpus."""
    tok_dir = ROOT / "runs/bert-mini-arch/tokenizer" if vocab == "30k" else root / f"tok-{vocab}"
    if not tok_dir.exists():
        size = {"8k": 8192}[vocab]
        from muppets.recipes.common import corpus_texts
        tok = WordPieceTokenizer.train(corpus_texts(CorpusSection(), 0), size, lowercase=True, model_max_length=128)
        tok.save(tok_dir)
    corpus = root / f"corpus-{vocab}"
    prepare_once(CorpusSection(prepared=str(corpus)), WordPieceTokenizer.load(tok_dir), root)
    return tok_dir, corpus


def seconds_per_step(run: Path) -> float:
    rows = [json.loads(line) for line in open(run / "log.jsonl") if '"elapsed_s"' in line]
    a, b = rows[4], rows[-1]  # skip the first steps (allocation, plan building)
    return (b["elapsed_s"] - a["elapsed_s"]) / (b["step"] - a["step"])


def real_tokens_per_s(run: Path) -> float:
    rows = [json.loads(line) for line in open(run / "log.jsonl") if '"elapsed_s"' in line]
    return sum(r["real_tokens"] for r in rows[1:]) / (rows[-1]["elapsed_s"] - rows[0]["elapsed_s"])


def score(final: Path, tok_dir: Path, corpus: Path, examples: int) -> dict[str, float]:
    """MLM accuracy / loss on the common held-out set (packed 128 tokens, 15% masking)."""
    from muppets.data.shards import TokenCorpus
    tok = WordPieceTokenizer.load(tok_dir)
    cfg = PretrainDataConfig(nsp=False, max_seq_len=128, masking=MaskingConfig(0.15, 20), eval_examples=examples)
    data = BertPretrainingData(TokenCorpus(corpus), special_ids(tok), cfg, 32, 1, 0, tok.is_continuation)
    model = load_hf_bert(final).eval()
    with torch.no_grad():
        m = held_out_evaluator(data, 32, perplexity=("mlm",))(model)
    return {k: float(v) for k, v in m.items() if k.startswith("mlm")}


def run_variant(name: str, v: Variant, root: Path, budget_s: float, eval_examples: int) -> dict:
    tok_dir, corpus = inputs(root, v.vocab)
    common = [f"tokenizer.path={tok_dir}", f"corpus.prepared={corpus}", "train.threads=1", "train.progress=false",
              "train.plot=false", "train.tensorboard=false", "data.eval_examples=256"]
    previous, phases, cpu_s = "", [], 0.0
    for i, ph in enumerate(v.phases):
        run = root / f"{name}-{i}"
        chain = [f"model.init_from={previous}"] if previous else []
        probe = root / f"probe-{name}-{i}"
        if not (probe / "log.jsonl").exists():
            muppets(*common, *ph.overrides, *chain, f"run_dir={probe}", "train.steps=25", "train.eval_every=0",
                    "train.checkpoint_every=0", "train.warmup_steps=5", log_to=root / f"probe-{name}-{i}.log")
        sps = seconds_per_step(probe)
        steps = max(20, int(budget_s * ph.share / sps))
        limit = budget_s * ph.share * 1.3 / 60 + 1  # a guard only: start-up, evaluation and export come on top
        t0 = time.monotonic()
        muppets(*common, *ph.overrides, *chain, f"run_dir={run}", f"train.steps={steps}",
                f"train.warmup_steps={max(1, round(ph.warmup * steps))}", f"train.max_minutes={limit:.2f}",
                f"train.eval_every={steps}", f"train.checkpoint_every={max(1, steps // 4)}", log_to=root / f"{name}-{i}.log")
        wall = time.monotonic() - t0
        last = max(json.loads(line)["step"] for line in open(run / "log.jsonl") if '"elapsed_s"' in line)
        phases.append({"overrides": ph.overrides, "probe_s_per_step": sps, "planned_steps": steps,
                       "steps_done": last, "wall_s": wall, "real_tokens_per_s": real_tokens_per_s(run)})
        cpu_s += wall
        previous = str(run)
    scores = score(Path(previous) / "final", tok_dir, corpus, eval_examples)
    return {"doc": v.doc, "vocab": v.vocab, "budget_cpu_s": budget_s, "cpu_s": cpu_s, "phases": phases, **scores}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--budget-min", type=float, default=10.0, help="CPU minutes per variant (one thread)")
    ap.add_argument("--root", default="runs/abl")
    ap.add_argument("--eval-examples", type=int, default=1024)
    ap.add_argument("--out", default="benchmarks/results/recipe_ablation.json")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.list:
        for k, v in VARIANTS.items():
            print(f"{k:10s} {v.doc}")
        return
    out, root = ROOT / args.out, ROOT / args.root
    root.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for name in args.variants:
        results = json.loads(out.read_text()) if out.exists() else {}
        if name in results.get("variants", {}):
            log.info("%s: done already", name)
            continue
        log.info("%s: %s", name, VARIANTS[name].doc)
        r = run_variant(name, VARIANTS[name], root, args.budget_min * 60, args.eval_examples)
        log.info("%s: held-out MLM accuracy %.4f", name, r["mlm_accuracy"])
        results = json.loads(out.read_text()) if out.exists() else {}  # re-read: another worker may have written
        results.setdefault("machine", open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "))
        results.setdefault("variants", {})[name] = {**r, "date": time.strftime("%Y-%m-%d")}
        tmp = out.with_suffix(f".tmp-{os.getpid()}")  # workers in parallel never share one
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(out)


if __name__ == "__main__":
    main()
