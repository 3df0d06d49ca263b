"""Zero-shot cross-lingual transfer at equal budget, end to end (issue 19).

Two bert-minis pretrained with ``configs/bert-mini-multilingual.yaml`` at the same steps, batch,
schedule and thread count:

* ``multilingual`` — the config as it is: English, Chinese, German, French and Spanish, one shared
  WordPiece vocabulary, language-balanced batches (mBERT's α smoothing);
* ``english``      — the same file with ``corpus.languages = {en: ...}``: English only, its own
  vocabulary (what an English model's tokenizer makes of the other languages is part of the result:
  the retrieval JSON records each language's share of ``[UNK]`` pieces);

and, as rows of the tables,

* ``random``       — the multilingual architecture and tokenizer, weights drawn afresh (no pretraining);
* ``minilm``       — all-MiniLM-L6-v2 (real, English-only, 6 × 384), retrieval only: a reference point.

Then, per model and seed, ``xlingual_zero_shot.py`` (fine-tune on English; XNLI and PAWS-X by
cross-validation by row on the parallel dev files, SST-2 → ChnSentiCorp test) and, once per model,
``xlingual_retrieval.py`` (retrieval@1 of the XNLI premises per layer, no fine-tuning). Seeds are
paired across models.

    OMP_NUM_THREADS=1 python benchmarks/xlingual_table.py --parallel 2 [--pretrain-steps N]
    python benchmarks/xlingual_table.py --table-only

Runs live in ``runs/xlingual/``. A finished pretraining (its ``summary.json``, unless a signal
stopped it), a finished job's JSON and a finished fold are reused, and a killed pretraining resumes
from its checkpoint, so the same command continues an interrupted table. ``--smoke`` runs the whole
chain in minutes on tiny settings in ``runs/xlingual-smoke/`` (not a result).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import (Job, pretraining_done, pretraining_rows, run_logged, schedule, step_budget,  # noqa: E402
                  table_arguments, table_paths, write_results)
from paired import paired, summary  # noqa: E402
from tapt_table import pretrain_facts  # noqa: E402

CONFIG = "configs/bert-mini-multilingual.yaml"
ENGLISH = {"en": ["data:english-corpus/books", "data:english-corpus/wiki"]}
PRETRAINED = {"multilingual": [], "english": ["corpus.languages=" + json.dumps(ENGLISH)]}
ZERO_SHOT = ("multilingual", "english", "random")  # fine-tuned rows
RETRIEVAL = ("multilingual", "english", "random", "minilm")
TASKS = ("xnli", "pawsx", "sst2-chnsenticorp")
SMOKE_FILES = {  # --smoke: the two smallest files of each language (a split needs two documents)
    "en": ["data:english-corpus/books/stevenson_essays_in_the_art_of_writing.txt",
           "data:english-corpus/books/darwin_autobiography.txt"],
    "zh": {"inputs": ["data:chinese/corpus/zhwiki_AA_wiki_80.txt"], "format": "zhwiki"},
    "de": {"inputs": ["data:multilingual-corpus/de/KeyserlingEduardvon_Wellen.txt",
                      "data:multilingual-corpus/de/JanitschekMaria_Ninive.txt"], "format": "novel-wrapped"},
    "fr": {"inputs": ["data:multilingual-corpus/fr/Rachilde_MonsieurVenus-rd0734.txt",
                      "data:multilingual-corpus/fr/About_OreilleCassee-rd0730.txt"], "format": "novel-lines"},
    "es": {"inputs": ["data:multilingual-corpus/es/Lanza_NiVida-ne0288.txt",
                      "data:multilingual-corpus/es/Clarin_Cuesta-ne0170.txt"], "format": "novel-tei"}}
log = logging.getLogger("xlingual_table")


def model_dir(row: str, root: Path) -> str:
    """What ``--model`` each row passes to the zero-shot and retrieval scripts."""
    if row == "minilm":
        return "minilm"
    return str(root / f"bert-mini-{'multilingual' if row == 'random' else row}")


def pretrain(name: str, root: Path, extra: list[str]) -> Path:
    run = root / f"bert-mini-{name}"
    if not pretraining_done(run):
        run_logged([str(ROOT / ".venv/bin/muppets"), "pretrain", str(ROOT / CONFIG), f"run_dir={run}",
                    "train.threads=1", "train.progress=false", *PRETRAINED[name], *extra], root / f"bert-mini-{name}.log")
    return run


def zero_shot(row: str, task: str, seed: int, root: Path, extra: list[str]) -> Path:
    """One seed of one task for one row: ``zs/<row>/<task>-seed-N.json`` (kept once written)."""
    out = root / "zs" / row / f"{task}-seed-{seed}.json"
    if not out.is_file():
        init = ["--init", "random"] if row == "random" else []
        run_logged([sys.executable, str(ROOT / "benchmarks/xlingual_zero_shot.py"), "--model", model_dir(row, root),
                    *init, "--tasks", task, "--seeds", str(seed), "--threads", "1",
                    "--out-dir", str(root / "zs" / row), "--out", str(out), *extra],
                   root / "zs" / f"{row}-{task}-{seed}.log")
    return out


def retrieval(row: str, root: Path, extra: list[str]) -> Path:
    out = root / "retrieval" / f"{row}.json"
    if not out.is_file():
        random = ["--random"] if row == "random" else []
        run_logged([sys.executable, str(ROOT / "benchmarks/xlingual_retrieval.py"), "--model", model_dir(row, root),
                    *random, "--threads", "1", "--out", str(out), *extra], root / "retrieval" / f"{row}.log")
    return out


def collect(root: Path, seeds: list[int]) -> dict:
    """``{task: {"chance": {...}, key: {row: {seed: points}}}}`` from the finished zero-shot JSONs."""
    found: dict[str, Any] = {}
    for task in TASKS:
        for row in ZERO_SHOT:
            for seed in seeds:
                path = root / "zs" / row / f"{task}-seed-{seed}.json"
                if not path.is_file():
                    continue
                result = json.loads(path.read_text())["results"][task]
                entry = found.setdefault(task, {"chance": result["majority_class"], "scores": {}})
                for key, value in result["per_seed"][str(seed)].items():
                    if value is not None:
                        entry["scores"].setdefault(key, {}).setdefault(row, {})[seed] = 100 * value
    return found


def table(found: dict) -> dict:
    """Per task and language: each row's mean ± std, and multilingual − english / − random (paired)."""
    out: dict[str, Any] = {}
    for task, entry in found.items():
        out[task] = {"chance": {k: 100 * v for k, v in entry["chance"].items()}, "languages": {}}
        for key, rows in entry["scores"].items():
            cell = {row: summary(by_seed) for row, by_seed in rows.items()}
            for base in ("english", "random"):
                diff = paired(rows.get("multilingual", {}), rows.get(base, {}))
                if diff:
                    cell[f"multilingual_vs_{base}"] = diff
            out[task]["languages"][key] = cell
    return out


def retrievals(root: Path) -> dict:
    return {row: json.loads(p.read_text()) for row in RETRIEVAL if (p := root / "retrieval" / f"{row}.json").is_file()}


def markdown(result: dict) -> str:
    def ms(e: dict | None) -> str:
        return f"{e['mean']:.1f} ± {e['std']:.1f}" if e else "—"

    def diff(e: dict | None) -> str:
        return f"{e['mean']:+.1f} ± {e['std']:.1f} ({e['wins']}-{e['losses']})" if e else "—"

    lines = ["| task | language (accuracy) | chance | multilingual | english | random | multi − english | multi − random |",
             "|---|---|---|---|---|---|---|---|"]
    for task, entry in result["zero_shot"].items():
        for key, cell in entry["languages"].items():
            chance = entry["chance"].get(key)
            lines.append(f"| {task} | {key} | {f'{chance:.1f}' if chance is not None else '—'} | "
                         + " | ".join(ms(cell.get(r)) for r in ZERO_SHOT)
                         + f" | {diff(cell.get('multilingual_vs_english'))} | {diff(cell.get('multilingual_vs_random'))} |")
    if result["retrieval"]:
        lines += ["", "| retrieval@1 (XNLI premises → English, best layer / last layer) | chance | "
                  + " | ".join(f"{lang} (unk)" for lang in next(iter(result["retrieval"].values()))["retrieval_at_1"]) + " |",
                  "|---|---|" + "---|" * len(next(iter(result["retrieval"].values()))["retrieval_at_1"])]
        for row, r in result["retrieval"].items():
            cells = []
            for lang, by_layer in r["retrieval_at_1"].items():
                best = max(range(len(by_layer)), key=by_layer.__getitem__)
                cells.append(f"{100 * by_layer[best]:.1f} (L{best}) / {100 * by_layer[-1]:.1f} "
                             f"({100 * r['unk_share'][lang]:.0f}%)")
            lines.append(f"| {row} | {100 * r['chance']:.2f} | " + " | ".join(cells) + " |")
    lines += ["", *pretraining_rows(result["pretraining"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--sst2-train-examples", type=int, default=0, help="first N SST-2 training sentences (0 = all)")
    table_arguments(ap, "runs/xlingual")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    root, out = table_paths(args, "runs/xlingual", "benchmarks/results/xlingual_table.json")
    for sub in ("zs", "retrieval"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    budget = step_budget(args.pretrain_steps)
    smoke_pt = ["train.steps=20", "train.warmup_steps=2", "train.eval_every=10", "train.checkpoint_every=10",
                "data.eval_examples=64", "corpus.language_sample=20000", "tokenizer.vocab_size=4000"] if args.smoke else []
    zs_extra = [*(["--smoke"] if args.smoke else []),
                *(["--sst2-train-examples", str(args.sst2_train_examples)] if args.sst2_train_examples else [])]
    start = time.time()
    if not args.table_only:
        def smoke_files(m: str) -> list[str]:  # one small file per language
            if not args.smoke:
                return []
            return ["corpus.languages=" + json.dumps(SMOKE_FILES if m == "multilingual" else {"en": SMOKE_FILES["en"]})]

        jobs: list[Job] = [(f"pretrain {m}", partial(pretrain, m, root, [*budget, *smoke_pt, *smoke_files(m)]), [])
                           for m in PRETRAINED]
        after = {row: [] if row == "minilm" else [f"pretrain {'multilingual' if row == 'random' else row}"]
                 for row in RETRIEVAL}
        jobs += [(f"retrieval {r}", partial(retrieval, r, root, ["--limit", "50"] if args.smoke else []), after[r])
                 for r in RETRIEVAL]
        jobs += [(f"{t} {r} seed {s}", partial(zero_shot, r, t, s, root, zs_extra), after[r])
                 for s in args.seeds for t in args.tasks for r in ZERO_SHOT]  # seed 1 of everything first
        schedule(jobs, args.parallel)
    result = {"config": CONFIG, "pretrain_overrides": budget, "seeds": args.seeds, "smoke": args.smoke,
              "sst2_train_examples": args.sst2_train_examples, "wall_s": time.time() - start,
              "pretraining": {m: pretrain_facts(root / f"bert-mini-{m}") for m in PRETRAINED
                              if pretraining_done(root / f"bert-mini-{m}")},
              "retrieval": retrievals(root), "zero_shot": table(collect(root, args.seeds))}
    write_results(out, result, markdown(result))


if __name__ == "__main__":
    main()
