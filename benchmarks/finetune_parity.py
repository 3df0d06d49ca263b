"""Fine-tuning quality, muppets vs a plain transformers loop, paired seeds (issue 15, item 14).

Per task and seed, two sides start from the real all-MiniLM-L6-v2 with the SAME fresh head
(the muppets task model built with ``seed_everything(seed)`` exactly as
:func:`muppets.transfer.finetune.run` builds it, saved as an HF ``BertFor…`` directory and
loaded by transformers; checked equal) and train on the same first N training examples:

- muppets: :func:`muppets.transfer.finetune.run` (length-bucketed batches from
  ``EpochData``, muppets' dropout, ``Trainer``: AdamW eps 1e-6, linear warmup/decay,
  clip 1.0) with ``selection=last``: the last model is kept, nothing selects.
- transformers: ``BertForSequenceClassification`` / ``BertForTokenClassification``, a torch
  ``DataLoader`` shuffling with a generator seeded by the seed, batches padded to their longest
  (``DataCollatorWithPadding`` / ``DataCollatorForTokenClassification``), ``BertTokenizerFast``
  (tags on each word's first piece, -100 elsewhere: run_ner), ``torch.optim.AdamW`` with the
  same groups, betas and eps as muppets' ``build_optimizer`` (no decay on biases / LayerNorm),
  ``get_linear_schedule_with_warmup``, clip 1.0, the config's dropout, the last model kept.

Recipe both sides: lr 5e-5, batch 32, max_seq_len 128, 10% warmup, weight decay 0.01, fp32,
one thread. Both are scored by :func:`muppets.transfer.finetune.score` on predictions of the
same form (SST-2 label strings on dev; CoNLL-2003 tags of each word's first piece on test).
Reported per seed: both scores and their paired difference (muppets - transformers); mean and
sample std of each; a paired t 95% interval of the difference.

Budget (one core; measured on 30-step cells: muppets 0.58 s/step on SST-2 and 0.43 on CoNLL,
transformers 1.34 and 1.17, plus 10-30 s of evaluation per cell): all runs within ~2 hours, so
SST-2 all 6,920 training sentences, 1 epoch (217 steps); CoNLL-2003 the first 8,000 training
sentences, 1 epoch (250 steps) (``--plan``); evaluation sets complete. Each (task, side, seed) writes
``runs/parity/<task>/<side>/seed-<n>/result.json`` and is skipped when that exists, so a killed
job loses at most one cell (the muppets side also resumes from its checkpoint).

    OMP_NUM_THREADS=1 nohup .venv/bin/python benchmarks/finetune_parity.py \\
        --plan sst2=6920:1 conll2003=8000:1 --seeds 1 2 3 4 5 \\
        --out benchmarks/results/finetune_parity.json > runs/parity/parity.log 2>&1 &

Extra muppets arms that locate a gap (summarised against both sides when their cells exist):
``muppets-unbucketed`` (batches cut from the shuffled order, not sorted by length: bucket of
one batch) and ``muppets-tokennorm`` (bucketed, the tagging loss divided by the epoch's mean
labelled tokens per batch, so every token weighs the same whatever its batch):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/finetune_parity.py --plan conll2003=8000:1 \\
        --sides muppets-unbucketed muppets-tokennorm

``--measure`` instead times one small cell per side and task (960 examples, 30 steps).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from muppets.tasks import load_task
from muppets.tasks.spec import TaskData
from muppets.train import seed_everything
from muppets.train.logger import read_log
from muppets.transfer.finetune import FinetuneConfig, TaskSection, mean_std, resolve_model, run, score
from muppets.transfer.features import IGNORE, FeatureOptions, make_features
from muppets.transfer.models import load_tokenizer, new_task_model, save_task_model

RECIPE = dict(lr=5e-5, batch_size=32, max_seq_len=128, warmup_ratio=0.1, weight_decay=0.01,
              clip_grad_norm=1.0, betas=(0.9, 0.999), eps=1e-6)  # eps/betas: muppets' TrainConfig
REPORTED = {"sst2": ("dev", "accuracy"), "conll2003": ("test", "f1")}  # task -> (split, metric key)
SIDES = ("muppets", "transformers")  # the paired comparison
ARMS = ("muppets-unbucketed", "muppets-tokennorm")  # extra muppets arms (diagnosis)
MODEL_KEYS = ("input_ids", "token_type_ids", "attention_mask", "labels")
ROOT = Path("runs/parity")


# ----------------------------------------------------------------------------- shared start


def initial_model(data: TaskData, seed: int, directory: Path) -> Path:
    """The backbone + fresh head muppets' ``run`` starts from with this seed, as an HF directory."""
    src = resolve_model("minilm")
    tok = load_tokenizer(src)
    seed_everything(seed)  # as finetune._setup does before new_task_model
    model = new_task_model(src, data.spec.kind, data.spec.num_labels or None, tok)
    save_task_model(model, directory, tok, data.spec.labels)
    return directory


# ----------------------------------------------------------------------------- muppets side


def muppets_cell(task: str, data: TaskData, n: int, epochs: int, seed: int, run_dir: Path) -> dict:
    cfg = FinetuneConfig(task=TaskSection(name=task), model="minilm", run_dir=str(run_dir), seed=seed,
                         epochs=epochs, max_train_examples=n, selection="last", threads=1,
                         precision="fp32", progress=False, log_every=100,
                         **{k: v for k, v in RECIPE.items() if k not in ("betas", "eps")})
    t = time.perf_counter()
    summary = run(cfg, resume=True, data=data)
    split, key = REPORTED[task]
    trained = max((r["elapsed_s"] for r in read_log(run_dir) if "elapsed_s" in r), default=None)
    return {"score": summary[split][key], "steps": summary["steps"],
            "seconds": time.perf_counter() - t, "seconds_train": trained}


def unbucketed_cell(task: str, data: TaskData, n: int, epochs: int, seed: int, run_dir: Path) -> dict:
    """The muppets side with batches cut from the shuffled order unsorted (bucket of one batch)."""
    import functools

    from muppets.transfer import batching

    original = batching.bucketed_batches
    batching.bucketed_batches = functools.partial(original, bucket_batches=1)
    try:
        return muppets_cell(task, data, n, epochs, seed, run_dir)
    finally:
        batching.bucketed_batches = original


def tokennorm_cell(task: str, data: TaskData, n: int, epochs: int, seed: int, run_dir: Path) -> dict:
    """The muppets side, bucketed, with the tagging loss divided by the epoch's MEAN labelled
    tokens per batch instead of this batch's own count: every labelled token weighs the same,
    whatever batch the bucketing puts it in (a candidate fix; classify is unchanged)."""
    from muppets.transfer.batching import EpochData

    original = EpochData.normalizers

    def normalizers(self, batch):
        units = original(self, batch)
        if self.kind == "tag":
            labelled = sum(sum(lab != IGNORE for lab in f.label) for f in self.features)
            units["task"] = labelled / self.steps_per_epoch * batch["labels"].shape[0] / self.batch_size
        return units

    EpochData.normalizers = normalizers
    try:
        return muppets_cell(task, data, n, epochs, seed, run_dir)
    finally:
        EpochData.normalizers = original


# ----------------------------------------------------------------------------- transformers side


def hf_encode(kind: str, examples: list, tok, labels: list[str]) -> list[dict]:
    """Tokenised examples; tags on each word's first piece, -100 elsewhere (run_ner)."""
    if kind == "classify":
        enc = tok([ex.text for ex in examples], truncation=True, max_length=RECIPE["max_seq_len"])
        return [{**{k: enc[k][i] for k in enc.keys()}, "labels": labels.index(ex.label)}
                for i, ex in enumerate(examples)]
    enc = tok([ex.tokens for ex in examples], is_split_into_words=True, truncation=True,
              max_length=RECIPE["max_seq_len"])
    out = []
    for i, ex in enumerate(examples):
        seen, tags, firsts = set(), [], []
        for t, w in enumerate(enc.word_ids(i)):
            first = w is not None and w not in seen
            tags.append(labels.index(ex.tags[w]) if first else -100)
            firsts += [(w, t)] if first else []
            seen.add(w)
        out.append({**{k: enc[k][i] for k in enc.keys()}, "labels": tags, "first_pieces": firsts})
    return out


def model_inputs(collate, keys=MODEL_KEYS):
    """A collate function that passes only the model's inputs (and labels) to ``collate``."""
    return lambda rows: collate([{k: v for k, v in row.items() if k in keys} for row in rows])


def hf_train(model, loader, epochs: int) -> int:
    """The plain loop: AdamW (no decay on biases / LayerNorm), linear warmup + decay, clip."""
    import transformers

    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": RECIPE["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=RECIPE["lr"], betas=RECIPE["betas"], eps=RECIPE["eps"])
    total = epochs * len(loader)
    sched = transformers.get_linear_schedule_with_warmup(opt, round(RECIPE["warmup_ratio"] * total), total)
    model.train()
    for _ in range(epochs):
        for batch in loader:
            model(**batch).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["clip_grad_norm"])
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    return total


@torch.no_grad()
def hf_predict(model, kind: str, examples: list, encoded: list[dict], collate, labels: list[str]) -> list:
    """Label strings (classify) or one tag per word from its first piece ("O" if cut)."""
    model.eval()
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]["input_ids"]))
    preds: list = [None] * len(encoded)
    for k in range(0, len(order), 64):
        idx = order[k:k + 64]
        batch = collate([encoded[i] for i in idx])
        best = model(**batch).logits.argmax(-1)  # (B,) or (B, T)
        for row, i in enumerate(idx):
            if kind == "classify":
                preds[i] = labels[int(best[row])]
            else:
                tags = ["O"] * len(examples[i].tokens)
                for word, t in encoded[i]["first_pieces"]:
                    tags[word] = labels[int(best[row, t])]
                preds[i] = tags
    return preds


def hf_cell(task: str, data: TaskData, n: int, epochs: int, seed: int, run_dir: Path) -> dict:
    import transformers

    t = time.perf_counter()
    kind, labels = data.spec.kind, list(data.spec.labels)
    start = initial_model(data, seed, run_dir / "start")
    cls = {"classify": transformers.BertForSequenceClassification,
           "tag": transformers.BertForTokenClassification}[kind]
    model, info = cls.from_pretrained(start, output_loading_info=True)
    assert not info["missing_keys"], info
    _check_head(model, data, seed)
    tok = transformers.BertTokenizerFast.from_pretrained(resolve_model("minilm"))
    collator = (transformers.DataCollatorWithPadding(tok) if kind == "classify"
                else transformers.DataCollatorForTokenClassification(tok))
    train = hf_encode(kind, data["train"][:n], tok, labels)
    loader = torch.utils.data.DataLoader(train, batch_size=RECIPE["batch_size"], shuffle=True,
                                         collate_fn=model_inputs(collator),
                                         generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)  # dropout
    steps = hf_train(model, loader, epochs)
    trained = time.perf_counter() - t
    split, key = REPORTED[task]
    examples = data[split]
    preds = hf_predict(model, kind, examples, hf_encode(kind, examples, tok, labels),
                       model_inputs(collator, MODEL_KEYS[:3]), labels)
    return {"score": score(data.spec, examples, preds)[key], "steps": steps,
            "seconds": time.perf_counter() - t, "seconds_train": trained}


def _check_head(model, data: TaskData, seed: int) -> None:
    """The transformers classifier holds the muppets head of this seed (the pairing)."""
    src = resolve_model("minilm")
    seed_everything(seed)
    ours = new_task_model(src, data.spec.kind, data.spec.num_labels or None, load_tokenizer(src))
    assert torch.equal(model.classifier.weight, ours.head.classifier.weight)
    assert torch.equal(model.classifier.bias, ours.head.classifier.bias)


# ----------------------------------------------------------------------------- cells, summary


def cell(task: str, side: str, data: TaskData, n: int, epochs: int, seed: int, root: Path) -> dict:
    """One (task, side, seed) result, computed unless its result.json exists."""
    run_dir = root / task / side / f"seed-{seed}"
    done = run_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    torch.set_num_threads(1)
    fn = {"muppets": muppets_cell, "transformers": hf_cell, "muppets-unbucketed": unbucketed_cell,
          "muppets-tokennorm": tokennorm_cell}[side]
    result = {"task": task, "side": side, "seed": seed, "train_examples": n, "epochs": epochs,
              **fn(task, data, n, epochs, seed, run_dir)}
    run_dir.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result, indent=2) + "\n")
    for bulky in ("checkpoints", "start"):  # only needed to resume / to start the cell
        shutil.rmtree(run_dir / bulky, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return result


def paired(rows: list[dict], side_a: str = "muppets", side_b: str = "transformers") -> dict:
    """Per-seed values, mean ± sample std per side and of the paired difference a - b (points),
    and its paired t 95% interval."""
    from scipy import stats

    a = np.array([r[side_a] for r in rows]) * 100
    b = np.array([r[side_b] for r in rows]) * 100
    d = a - b
    out = {side_a: mean_std(a), side_b: mean_std(b), "difference": mean_std(d)}
    if len(d) > 1:
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        out["difference"].update(ci95=[float(d.mean() - half), float(d.mean() + half)],
                                 p_two_sided=float(stats.ttest_rel(a, b).pvalue))
    return out


def machine() -> dict:
    import transformers

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    return {"cpu": model, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def token_agreement(data: TaskData, n: int) -> float:
    """Share of the first n training examples that muppets' WordPiece and BertTokenizerFast
    turn into the same input ids (classify) or the same word pieces (tag)."""
    import transformers

    src = resolve_model("minilm")
    examples = data["train"][:n]
    ours = make_features(data.spec.kind, examples, load_tokenizer(src), FeatureOptions(RECIPE["max_seq_len"]),
                         data.spec.labels)
    theirs = hf_encode(data.spec.kind, examples, transformers.BertTokenizerFast.from_pretrained(src),
                       list(data.spec.labels))
    if len(ours) != len(theirs):  # a long sentence split into windows by muppets
        return float("nan")
    return float(np.mean([f.input_ids == e["input_ids"] for f, e in zip(ours, theirs)]))


def summarise(plan: dict, seeds: list[int], results: list[dict], data: dict, out: Path | None) -> dict:
    tasks = {}
    for task, (n, epochs) in plan.items():
        by_seed = {s: {r["side"]: r for r in results if r["task"] == task and r["seed"] == s} for s in seeds}
        rows = [{"seed": s, **{side: c[side]["score"] for side in c},
                 "difference": (c["muppets"]["score"] - c["transformers"]["score"]) * 100,
                 "seconds": {side: round(c[side]["seconds"], 1) for side in c}}
                for s, c in by_seed.items() if all(side in c for side in SIDES)]
        split, key = REPORTED[task]
        tasks[task] = {"reported": f"{split} {key} (x100 in the summary)", "train_examples": n, "epochs": epochs,
                       "tokenization_agreement": token_agreement(data[task], n),
                       "per_seed": rows, **(paired(rows) if rows else {})}
        for arm in ARMS:
            extra = [r for r in rows if arm in r]
            if extra:
                tasks[task][f"{arm}_vs_transformers"] = paired(extra, arm)
                tasks[task][f"muppets_vs_{arm}"] = paired(extra, "muppets", arm)
    result = {"date": time.strftime("%Y-%m-%d"), "machine": machine(),
              "model": "all-MiniLM-L6-v2 (L6/H384), fresh head shared per seed",
              "recipe": {**RECIPE, "fp32": True, "threads": 1, "selection": "last",
                         "difference": "muppets - transformers, points"},
              "tasks": tasks}
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", nargs="+", default=["sst2=6920:1", "conll2003=8000:1"],
                    help="task=train_examples:epochs")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--sides", nargs="+", default=list(SIDES),
                    help="muppets | transformers | muppets-unbucketed (no length bucketing) | muppets-tokennorm "
                         "(tag loss over the mean labelled tokens per batch)")
    ap.add_argument("--measure", action="store_true", help="time one 960-example cell per side and task")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    plan = {t: tuple(int(x) for x in v.split(":")) for t, v in (p.split("=") for p in args.plan)}
    data = {task: load_task(task) for task in plan}
    if args.measure:
        for task in plan:
            for side in SIDES:
                cell(task, side, data[task], 960, 1, 0, ROOT / "measure")
        return
    results = []
    for seed in args.seeds:  # seed-major: a partial run has whole pairs on both tasks
        for task, (n, epochs) in plan.items():
            for side in args.sides:
                results.append(cell(task, side, data[task], n, epochs, seed, ROOT))
    results += [json.loads(p.read_text()) for p in sorted(ROOT.glob("*/*/seed-*/result.json"))
                if not any(p.parent == ROOT / r["task"] / r["side"] / f"seed-{r['seed']}" for r in results)]
    print(json.dumps(summarise(plan, args.seeds, results, data, args.out), indent=2))


if __name__ == "__main__":
    main()
