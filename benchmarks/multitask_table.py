"""Multi-task learning vs single-task fine-tuning, paired by seed (issue 18).

Two suites, each a base config plus variants (overrides), run per seed, and the single-task
runs of the same seeds and settings:

* ``glue`` — ``configs/multitask-glue.yaml`` (MiniLM; RTE, MRPC, STS-B, CoLA, SST-2; each
  task selects on its 10% train slice, dev is reported). Single task: ``runs/ft-<task>-minilm-sel/seed-N``
  (``muppets finetune <task> --model minilm``, the same settings). Variants: ``mtdnn`` (the
  config: alternating, proportional, then per-task fine-tuning: rows ``mtdnn`` and
  ``mtdnn+ft``); sampler ablation of the multi-task stage ``sqrt``, ``uniform``, ``annealed``
  (``proportional`` is ``mtdnn``'s first row); ``joint-equal``, ``joint-uncertainty``,
  ``joint-gradnorm``, ``joint-dwa``; ``soft`` (soft sharing, λ 1e-3), ``soft-1e-4``, ``soft-1e-5``.
* ``conll`` — ``configs/multitask-conll.yaml`` (POS + chunk + NER jointly, dev selects, test is
  reported). Single task: NER alone, ``runs/ft-conll2003-minilm-unsorted/seed-N``. Variants:
  ``uncertainty``, ``gradnorm``, ``dwa``, ``equal``.

Runs that already have ``metrics.json`` are reused (so the table can be rebuilt, and a killed
call continues); ``--parallel 2`` runs two jobs at a time, one thread each. ``--single-recorded
EARLIER.json`` takes the single-task scores of seeds whose runs are gone from an earlier output;
the seeds whose single-task run directory exists are run (or read) and must reproduce them.
``--recorded ROW=EARLIER.json …`` does the same for a variant's row (``sqrt``, ``mtdnn+ft``);
``from_recorded`` in the output lists the entries taken from files.

    OMP_NUM_THREADS=1 python benchmarks/multitask_table.py glue --variants mtdnn --seeds 1 2 3 4 5 --parallel 2
    OMP_NUM_THREADS=1 python benchmarks/multitask_table.py conll --variants uncertainty --seeds 1 2 3 \
        --out benchmarks/results/multitask_conll_uncertainty.json
    OMP_NUM_THREADS=1 python benchmarks/multitask_table.py glue --variants soft soft-1e-4 soft-1e-5 --seeds 1 \
        --choose soft soft-1e-4 soft-1e-5 --out benchmarks/results/multitask_glue_soft.json

``--choose`` names variants that sweep one setting: the one whose runs score best on the selection
split (each task's ``best_selection_score``, averaged over tasks and seeds) is recorded as chosen.

A call never replaces a results file holding rows or seeds it would not write again (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import schedule  # noqa: E402
from paired import paired, summary, with_recorded  # noqa: E402

SUITES: dict[str, dict[str, Any]] = {
    "glue": {
        "config": "configs/multitask-glue.yaml", "run_root": "runs/mtl-glue", "split": "dev",
        "metrics": {"rte": "accuracy", "mrpc": "accuracy", "stsb": "pearson", "cola": "mcc", "sst2": "accuracy"},
        "single": "runs/ft-{task}-minilm-sel",
        "variants": {
            "mtdnn": [],
            "sqrt": ["sampler=temperature", "then_finetune=false"],
            "uniform": ["sampler=uniform", "then_finetune=false"],
            "annealed": ["sampler=annealed", "then_finetune=false"],
            "joint-equal": ["mode=joint", "then_finetune=false"],
            "joint-uncertainty": ["mode=joint", "weighting=uncertainty", "then_finetune=false"],
            "joint-gradnorm": ["mode=joint", "weighting=gradnorm", "then_finetune=false"],
            "joint-dwa": ["mode=joint", "weighting=dwa", "then_finetune=false"],
            "soft": ["sharing=soft", "then_finetune=false"],  # λ 1e-3, the config's default
            # under Adam the pull towards the mean scales as λ/sqrt(v), strongest on rarely drawn
            # tasks; these weaker strengths are the sweep to choose λ from (on the train slices)
            "soft-1e-4": ["sharing=soft", "soft_penalty=1e-4", "then_finetune=false"],
            "soft-1e-5": ["sharing=soft", "soft_penalty=1e-5", "then_finetune=false"],
        },
    },
    "conll": {
        "config": "configs/multitask-conll.yaml", "run_root": "runs/mtl-conll", "split": "test",
        "metrics": {"conll2003": "f1"}, "single": "runs/ft-conll2003-minilm-unsorted",
        "variants": {"uncertainty": [], "gradnorm": ["weighting=gradnorm"], "dwa": ["weighting=dwa"],
                     "equal": ["weighting=fixed"]},
    },
}
log = logging.getLogger("multitask_table")


def _job(job: tuple[str, str, str, int]) -> str:
    """One run in this process (one thread): ``("single", suite, task, seed)`` or
    ``("multi", suite, variant, seed)``; returns its metrics.json path."""
    import torch

    from muppets import multitask
    from muppets.transfer import finetune

    torch.set_num_threads(1)
    kind, suite, name, seed = job
    s = SUITES[suite]
    if kind == "single":
        mt = multitask.load_config(ROOT / s["config"], [])
        run_dir = ROOT / s["single"].format(task=name) / f"seed-{seed}"
        if not (run_dir / "metrics.json").is_file():
            cfg = dataclasses.replace(mt.finetune, task=finetune.TaskSection(name=name), seed=seed,
                                      run_dir=str(run_dir), threads=1, progress=False)
            finetune.run(cfg)
        return str(run_dir / "metrics.json")
    run_dir = ROOT / s["run_root"] / name / f"seed-{seed}"
    if not (run_dir / "metrics.json").is_file():
        cfg = multitask.load_config(ROOT / s["config"], s["variants"][name] + [
            f"run_dir={run_dir}", f"finetune.seed={seed}", "finetune.threads=1", "finetune.progress=false"])
        multitask.run(cfg)
    return str(run_dir / "metrics.json")


def run_jobs(jobs: list[tuple[str, str, str, int]], parallel: int, job_fn: Callable[..., str] = _job) -> None:
    """``job_fn(job)`` for every job: in this process when ``parallel`` is 1, else ``parallel`` forked
    workers. A job is submitted only when a worker is free (``jobs.schedule``), so a failed or
    interrupted run (its ``TrainingInterrupted``) stops the table instead of the next job starting."""
    if parallel <= 1:
        for job in jobs:
            log.info("done: %s", job_fn(job))
        return
    with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("fork")) as pool:
        schedule([(str(job), lambda j=job: pool.submit(job_fn, j).result(), []) for job in jobs], parallel)


def scores(suite: str, variants: list[str], seeds: list[int]) -> dict[str, dict[str, dict[int, float]]]:
    """``{task: {row: {seed: score in points}}}`` from the finished runs."""
    s = SUITES[suite]
    out: dict[str, dict[str, dict[int, float]]] = {t: {} for t in s["metrics"]}
    for task, metric in s["metrics"].items():
        for seed in seeds:
            path = ROOT / s["single"].format(task=task) / f"seed-{seed}" / "metrics.json"
            if path.is_file():
                out[task].setdefault("single", {})[seed] = 100 * json.loads(path.read_text())[s["split"]][metric]
            for variant in variants:
                path = ROOT / s["run_root"] / variant / f"seed-{seed}" / "metrics.json"
                if not path.is_file():
                    continue
                entry = json.loads(path.read_text())["per_task"][task]
                out[task].setdefault(variant, {})[seed] = 100 * entry[s["split"]][metric]
                if "finetuned" in entry:
                    out[task].setdefault(f"{variant}+ft", {})[seed] = 100 * entry["finetuned"][s["split"]][metric]
    return out


def add_recorded_single(found: dict[str, dict[str, dict[int, float]]], path: Path) -> list[str]:
    """Complete each task's ``single`` row with the per-seed scores of an earlier output of this
    script (its runs may be gone). Every seed re-run now must reproduce its recorded score, and at
    least one must have been re-run; returns the tasks whose row has no re-run seed (reported)."""
    earlier = json.loads(path.read_text())["table"]
    rerun_any, unchecked = False, []
    for task, rows in found.items():
        entry = earlier.get(task, {}).get("single")
        if entry is None:
            continue
        rerun = rows.get("single", {})
        checked = set(rerun) & set(entry["seeds"])  # a seed both recorded and run again
        rerun_any |= bool(checked)
        if not checked:
            unchecked.append(task)
        rows["single"] = with_recorded(dict(zip(entry["seeds"], entry["values"])), rerun,
                                       f"--single-recorded {path}, {task}")
    if not rerun_any:
        raise ValueError(f"--single-recorded {path}: no recorded single-task seed was re-run, so nothing "
                         "checks that the recorded scores reproduce with the current code")
    return unchecked


def add_recorded_rows(found: dict[str, dict[str, dict[int, float]]], specs: list[str],
                      rows_known: set[str]) -> tuple[list[str], list[str]]:
    """``ROW=FILE`` each: complete ``ROW`` (one of ``rows_known``: a variant asked for, or its
    ``<variant>+ft``) of every task with the per-seed scores an earlier output of this script
    recorded for it, for seeds whose runs are gone (another machine, a cleaned ``runs/``). A seed
    whose run is here must reproduce its recorded score. Naming the row and the file for each keeps
    a void row of an old file (one recorded before a fix) from slipping in where its run is here.
    Returns the ``task/row/seed`` entries taken from files, and the ``task/row`` rows of which no
    seed was run here, so that nothing checked them against the current code (reported)."""
    taken: list[str] = []
    unchecked: list[str] = []
    for spec in specs:
        row, sep, path = spec.partition("=")
        if not sep or not row or not path:
            raise ValueError(f"--recorded {spec!r}: expected ROW=FILE")
        if row not in rows_known:
            raise ValueError(f"--recorded {spec}: {row!r} is not a row of this table ({', '.join(sorted(rows_known))})")
        earlier = json.loads(Path(path).read_text())["table"]
        for task, rows in found.items():
            entry = earlier.get(task, {}).get(row)
            if entry is None:
                raise ValueError(f"--recorded {spec}: {path} has no row {row!r} for {task}")
            here = rows.get(row, {})
            rows[row] = with_recorded(dict(zip(entry["seeds"], entry["values"])), here, f"--recorded {spec}, {task}")
            taken += [f"{task}/{row}/{seed}" for seed in entry["seeds"] if seed not in here]
            if not set(here) & set(entry["seeds"]):
                unchecked.append(f"{task}/{row}")
    return taken, unchecked


def entries_lost(out: Path, variants: list[str], seeds: list[int]) -> list[str]:
    """``task/row/seed`` entries of an existing output that a call with these variants and seeds
    would not write again (``single`` is every call's row; ``<variant>+ft`` is its variant's)."""
    if not out.is_file():
        return []
    rows = {"single", *variants, *(f"{v}+ft" for v in variants)}
    return [f"{task}/{row}/{seed}" for task, by_row in json.loads(out.read_text())["table"].items()
            for row, entry in by_row.items() for seed in entry["seeds"] if row not in rows or seed not in seeds]


def selection_scores(suite: str, variants: list[str], seeds: list[int]) -> dict[str, dict[int, dict[str, float]]]:
    """``{variant: {seed: {task: best_selection_score in points}}}`` of the finished runs: what each
    task's checkpoint scored on its selection split (GLUE: its 10% train slice), never the reported one."""
    s = SUITES[suite]
    out: dict[str, dict[int, dict[str, float]]] = {}
    for variant in variants:
        for seed in seeds:
            path = ROOT / s["run_root"] / variant / f"seed-{seed}" / "metrics.json"
            if path.is_file():
                per_task = json.loads(path.read_text())["per_task"]
                out.setdefault(variant, {})[seed] = {t: 100 * per_task[t]["best_selection_score"] for t in s["metrics"]}
    return out


def choose(selection: dict[str, dict[int, dict[str, float]]], among: list[str], seeds: list[int]) -> dict[str, Any]:
    """Of the variants ``among`` (a setting's sweep, such as soft sharing's λ), the one with the best
    selection score averaged over every task and seed (a GLUE-style macro average; a tie goes to the
    first named). Every candidate needs every seed, so all are judged on the same runs."""
    missing = [f"{v}/seed-{seed}" for v in among for seed in seeds if seed not in selection.get(v, {})]
    if missing:
        raise ValueError(f"cannot choose among {among}: no finished run for {', '.join(missing)}")
    means = {v: sum(sum(selection[v][seed].values()) / len(selection[v][seed]) for seed in seeds) / len(seeds)
             for v in among}
    chosen = max(among, key=lambda v: (means[v], -among.index(v)))
    return {"among": among, "chosen": chosen, "selection_mean": means,
            "selection_per_task": {v: {t: sum(selection[v][seed][t] for seed in seeds) / len(seeds)
                                       for t in selection[v][seeds[0]]} for v in among}}


def table(suite: str, found: dict[str, dict[str, dict[int, float]]]) -> dict[str, Any]:
    """Per task and row: mean ± std, and the paired difference to ``single`` with its 95% t interval."""
    result: dict[str, Any] = {}
    for task, rows in found.items():
        single = rows.get("single", {})
        result[task] = {}
        for row, by_seed in rows.items():
            entry = summary(by_seed)
            diff = paired(by_seed, single) if row != "single" else None
            if diff:
                entry["paired"] = diff
            result[task][row] = entry
    return result


def markdown(result: dict[str, Any]) -> str:
    """One row per task and variant: mean ± std over seeds, and the paired difference to the
    single-task runs of the same seeds (mean ± std, 95% t interval, wins-losses)."""
    lines = [f"| task ({result['split']}) | run | mean ± std | seeds | paired vs single | 95% t interval | wins-losses |",
             "|---|---|---|---|---|---|---|"]
    for task, rows in result["table"].items():
        label = f"{task} {result['metrics'][task]}"
        for row, e in rows.items():
            p = e.get("paired")
            interval = f"{p['t95'][0]:+.2f} … {p['t95'][1]:+.2f}" if p and len(p["seeds"]) > 1 else "—"
            paired = f"**{p['mean']:+.2f}** ± {p['std']:.2f} | {interval} | {p['wins']}-{p['losses']}" if p else "— | — | —"
            seeds = ",".join(str(x) for x in e["seeds"])
            lines.append(f"| {label} | {row} | {e['mean']:.2f} ± {e['std']:.2f} | {seeds} | {paired} |")
    choice = result.get("choice")
    if choice:
        means = ", ".join(f"{v} {m:.2f}" for v, m in choice["selection_mean"].items())
        lines.append(f"\nChosen on the selection split (mean over tasks and seeds): **{choice['chosen']}** ({means}).")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=list(SUITES))
    parser.add_argument("--variants", nargs="+", default=None, help="default: every variant of the suite")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--table-only", action="store_true", help="only read finished runs")
    parser.add_argument("--choose", nargs="+", default=[], metavar="VARIANT",
                        help="variants that are one setting's sweep (e.g. soft soft-1e-4 soft-1e-5): the one with "
                        "the best mean selection score is recorded as chosen; only its reported row is the result")
    parser.add_argument("--out", default="")
    parser.add_argument("--single-recorded", default="", help="an earlier output of this script: its single-task "
                        "scores fill the seeds whose runs are gone (re-run seeds must reproduce them); no "
                        "single-task job is started for them")
    parser.add_argument("--recorded", nargs="+", default=[], metavar="ROW=FILE",
                        help="an earlier output's row (e.g. sqrt=benchmarks/results/multitask_glue_ablation.json): its "
                        "scores fill the seeds whose runs are gone; a seed run here must reproduce its score")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    s = SUITES[args.suite]
    variants = args.variants or list(s["variants"])
    unknown = [v for v in variants if v not in s["variants"]]
    if unknown:
        parser.error(f"unknown variants {unknown}; {args.suite} has {list(s['variants'])}")
    if not set(args.choose) <= set(variants):
        parser.error(f"--choose {args.choose}: every candidate must be among the variants {variants}")
    out = Path(args.out or ROOT / f"benchmarks/results/multitask_{args.suite}.json")
    lost = entries_lost(out, variants, args.seeds)
    if lost:  # before any run: a partial table must not replace a fuller one
        parser.error(f"{out} holds rows this call would drop ({', '.join(lost[:4])}{' …' if len(lost) > 4 else ''}); "
                     "give --out another file, or the variants and seeds it holds")
    recorded = json.loads(Path(args.single_recorded).read_text())["table"] if args.single_recorded else {}

    def has_recorded(task: str, seed: int) -> bool:
        return seed in recorded.get(task, {}).get("single", {}).get("seeds", [])

    def single_dir(task: str, seed: int) -> Path:
        return ROOT / s["single"].format(task=task) / f"seed-{seed}"

    if recorded and not any(has_recorded(t, seed) and single_dir(t, seed).is_dir() for t in s["metrics"] for seed in args.seeds):
        parser.error(f"--single-recorded {args.single_recorded}: no recorded single-task seed has a run directory to "
                     "re-run or read, so nothing would check that the recorded scores reproduce")
    jobs = [("single", args.suite, t, seed) for seed in args.seeds for t in s["metrics"]
            if not has_recorded(t, seed) or single_dir(t, seed).is_dir()]
    jobs += [("multi", args.suite, v, seed) for seed in args.seeds for v in variants]
    start = time.time()
    if not args.table_only:
        run_jobs(jobs, args.parallel)
    found = scores(args.suite, variants, args.seeds)
    unchecked = add_recorded_single(found, Path(args.single_recorded)) if args.single_recorded else []
    taken, rows_unchecked = add_recorded_rows(found, args.recorded, {*variants, *(f"{v}+ft" for v in variants)})
    for task in found:  # only the seeds asked for
        found[task] = {row: {k: v for k, v in by_seed.items() if k in args.seeds}  # single first
                       for row, by_seed in sorted(found[task].items(), key=lambda kv: kv[0] != "single")}
    result = {"suite": args.suite, "split": s["split"], "metrics": s["metrics"], "seeds": args.seeds,
              "variants": {v: s["variants"][v] for v in variants}, "wall_s": time.time() - start,
              "single_recorded": args.single_recorded or None, "single_not_rerun": unchecked,
              "recorded": args.recorded, "from_recorded": [e for e in taken if int(e.rsplit("/", 1)[1]) in args.seeds],
              "recorded_not_rerun": rows_unchecked,
              "table": table(args.suite, found)}
    if args.choose:
        result["choice"] = choose(selection_scores(args.suite, args.choose, args.seeds), args.choose, args.seeds)
        print(f"chosen on the selection split: {result['choice']['chosen']} "
              f"({', '.join(f'{v} {m:.2f}' for v, m in result['choice']['selection_mean'].items())})")
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    for task, rows in result["table"].items():
        print(f"\n{task} ({s['split']} {s['metrics'][task]}):")
        for row, e in rows.items():
            p = e.get("paired")
            extra = (f"  paired {p['mean']:+.2f} ± {p['std']:.2f} (t95 {p['t95'][0]:+.2f}, {p['t95'][1]:+.2f}; "
                     f"{p['wins']}-{p['losses']})") if p else ""
            print(f"  {row:<20} {e['mean']:6.2f} ± {e['std']:.2f} (n={len(e['values'])}){extra}")


if __name__ == "__main__":
    main()
