"""What pretraining bought: a pretraining run's model and a random initialisation of it,
fine-tuned alike on one task and scored beside the task's majority class.

A pretraining config's ``transfer`` section (``transfer.task``: a registered task) runs
:func:`run` once ``<run_dir>/final`` is written (``configs/quickstart.yaml``, the README's main
job, does)::

    <run_dir>/transfer/<task>/pretrained/   muppets finetune from final/ (log, best/, metrics.json)
    <run_dir>/transfer/<task>/random/       the same, from a random initialisation of final/
    <run_dir>/transfer/<task>/transfer_curves.png   both runs' loss and dev curves, majority class dashed
    <run_dir>/transfer/<task>/transfer.json what the summary prints (also in <run_dir>/summary.json)

The two runs differ in the initial weights of the encoder only: the same architecture and
tokenizer (``init=random`` draws every weight afresh from the model's own initialiser), the same
training examples, steps, learning rate and seed. Neither chooses a checkpoint (``selection=last``:
the model after the last step is scored), so the reported split (test where the task has a
labelled one, else dev) chose nothing; dev is scored at every evaluation for the curves only
(``watch_dev``). The majority class is the most frequent label (tag) of the same training
examples, predicted for every example (word) of the reported split and scored with the task's
metric: entity F1 is 0 for a tagger that predicts ``O`` throughout.

The transfer's outputs are reused when the same command runs again with the same settings and
the same final/ (``transfer.json`` records both); otherwise its directory is replaced.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muppets.config import to_dict, write_json_atomic
from muppets.errors import ConfigError
from muppets.tasks.spec import TaskData, TaskSpec
from muppets.transfer.finetune import FinetuneConfig, TaskSection, gold_of, labelled, score

log = logging.getLogger(__name__)

INITS = ("pretrained", "random")
KINDS = ("classify", "pair", "tag")  # the task kinds a majority class scores
RESULT_FILE = "transfer.json"
PLOT_FILE = "transfer_curves.png"
# FinetuneConfig fields the transfer sets itself (the rest are transfer.finetune's)
OWNED = ("task", "model", "init", "run_dir", "selection", "watch_dev")


@dataclass
class TransferSection:
    task: str = ""  # after pretraining, fine-tune final/ and a random initialisation of it alike on this registered task (classify, pair or tag) and print both beside its majority class ("" = no transfer)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)  # the fine-tuning settings of both runs (muppets finetune's keys: epochs, lr, max_train_examples, eval_every, seed …); task, model, init, run_dir, selection and watch_dev are the transfer's own

    def __post_init__(self) -> None:
        default = FinetuneConfig()
        for name in OWNED:
            if getattr(self.finetune, name) != getattr(default, name):
                raise ConfigError(f"finetune.{name}={getattr(self.finetune, name)!r}: the transfer sets {name} itself "
                                  f"({_owned_reason(name)}); leave it out", key=f"finetune.{name}")


def _owned_reason(name: str) -> str:
    return {"task": "transfer.task names it", "model": "final/ of this run",
            "init": "one run from the pretrained weights, one from a random initialisation",
            "run_dir": "<run_dir>/transfer/<task>/<init>",
            "selection": "last: nothing is chosen on a split, so the reported one stays unseen",
            "watch_dev": "dev is scored at every evaluation for the curves"}[name]


def finetune_config(sec: TransferSection, final: Path, out: Path, init: str, device: str) -> FinetuneConfig:
    """The fine-tuning settings of one of the two runs (``init``: pretrained | random)."""
    return dataclasses.replace(sec.finetune, task=TaskSection(name=sec.task), model=str(final), init=init,
                               run_dir=str(out / init), selection="last", watch_dev=True,
                               device=sec.finetune.device if sec.finetune.device != "auto" else device)


# ----------------------------------------------------------------------------- the baseline


def majority_baseline(spec: TaskSpec, train: Sequence[Any], examples: Sequence[Any]) -> tuple[str, dict[str, float]]:
    """``(label, metrics)`` of predicting the most frequent label of ``train`` (for a tagging task
    the most frequent tag of its words) for every one of ``examples`` (every word), scored with the
    task's metric (:func:`~muppets.transfer.finetune.score`); a tie goes to the label listed first
    in the task's labels."""
    if spec.kind not in KINDS:
        raise ConfigError(f"transfer.task={spec.name} is a {spec.kind} task; the transfer compares against the "
                          f"majority class, which scores {', '.join(KINDS)} tasks", key="transfer.task")
    counts: Counter = Counter()
    for ex in labelled(spec.kind, train):
        gold = gold_of(spec.kind, ex)
        counts.update(gold if spec.kind == "tag" else [gold])
    if not counts:
        raise ConfigError(f"transfer.task={spec.name}: no labelled training examples", key="transfer.task")
    order = {label: i for i, label in enumerate(map(str, spec.labels))}
    label = min(counts, key=lambda k: (-counts[k], order.get(str(k), len(order))))
    preds = [[label] * len(ex.tags) if spec.kind == "tag" else label for ex in examples]
    return str(label), score(spec, examples, preds)


# ----------------------------------------------------------------------------- the run


def run(sec: TransferSection, run_dir: Path, device: str = "auto", data: TaskData | None = None,
        out: Path | None = None) -> dict[str, Any]:
    """Fine-tune ``<run_dir>/final`` and a random initialisation of it on ``sec.task``; return
    (and write to ``<out>/transfer.json``) the reported split's figures of both, of the majority
    class, and what they were scored on (module docstring). ``out`` is
    ``<run_dir>/transfer/<task>`` unless given (``benchmarks/main_job_gain.py``: one per seed)."""
    from muppets.train.plots import write_comparison_plot
    from muppets.transfer import finetune

    final = Path(run_dir) / "final"
    out = Path(out) if out is not None else Path(run_dir) / "transfer" / sec.task
    data = data or finetune.load_task_data(TaskSection(name=sec.task))
    cfgs = {init: finetune_config(sec, final, out, init, device) for init in INITS}
    stamp = {"settings": to_dict(cfgs["pretrained"]), "final": model_fingerprint(final)}
    done = _reusable(out, stamp)
    if done is not None:
        log.info("transfer: %s holds this transfer's results (the same settings and final/): reused", out)
        return done
    if out.exists():  # another final/ or other settings: the old runs would be taken for these
        log.warning("transfer: %s holds a transfer of another final/ or with other settings: replaced", out)
        shutil.rmtree(out)
    summaries = {}
    for init in INITS:
        log.info("transfer: fine-tuning %s (%s) on %s", final, "pretrained weights" if init == "pretrained"
                 else "a random initialisation of the same architecture", sec.task)
        summaries[init] = finetune.run(cfgs[init], resume=False, data=data)
    split = "test" if "test" in summaries["pretrained"] else "dev"
    train, _, _, _ = finetune.selection_split(cfgs["pretrained"], data)
    reported = finetune._limit(data.splits[split], sec.finetune.max_eval_examples)
    label, majority = majority_baseline(data.spec, train, reported)
    watched = finetune._limit(data.splits.get("dev", []), sec.finetune.max_eval_examples)  # the curves' examples
    dev_majority = majority_baseline(data.spec, train, watched)[1] if watched else {}
    key = finetune.primary_key(data.spec.metric)
    result = {"task": sec.task, "metric": key, "split": split,
              "scored_on": summaries["pretrained"]["scored_on"][split],
              "train_examples": summaries["pretrained"]["train_examples"], "steps": summaries["pretrained"]["steps"],
              "epochs": sec.finetune.epochs, "seed": sec.finetune.seed,
              "pretrained": summaries["pretrained"][split][key], "random": summaries["random"][split][key],
              "majority": majority[key], "majority_label": data.spec.names[data.spec.labels.index(label)]
              if label in data.spec.labels else label,
              "gain": summaries["pretrained"][split][key] - summaries["random"][split][key],
              "runs": {init: str(out / init) for init in INITS}}
    picture = write_comparison_plot(
        {"pretrained": out / "pretrained", "random init": out / "random"}, out / PLOT_FILE,
        title=f"{sec.task}: from {final.parent.name}/final vs random init",
        baselines={key: (f"majority class ({result['majority_label']})", dev_majority.get(key, math.nan))},
        metrics=[f"dev/{key}"])
    result["curves"] = str(picture) if picture else None
    write_json_atomic(out / RESULT_FILE, {**result, **stamp})
    return result


def model_fingerprint(directory: Path) -> str:
    """SHA-256 of a model directory's config.json and weights (what a fine-tuning starts from)."""
    digest = hashlib.sha256()
    for path in sorted([Path(directory) / "config.json", *Path(directory).glob("*.safetensors")]):
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _reusable(out: Path, stamp: dict[str, Any]) -> dict[str, Any] | None:
    """The recorded result in ``out`` when it was made with ``stamp``'s settings and model."""
    try:
        saved = json.loads((out / RESULT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if saved.get("final") != stamp["final"] or saved.get("settings") != json.loads(json.dumps(stamp["settings"])):
        return None
    return {k: v for k, v in saved.items() if k not in stamp}


# ----------------------------------------------------------------------------- what is printed


RESULTS_PAGE = "docs/results/main-job.md"  # the multi-seed measurement of the main job's gain


def report_lines(result: dict[str, Any]) -> list[str]:
    """The transfer's figures as the summary prints them: the reported split and what it was
    scored on, then pretrained, random initialisation, majority class and the difference."""
    scored = result["scored_on"]
    size = (f"{scored['examples']:,}" if scored["examples"] == scored["of"]
            else f"{scored['examples']:,} of {scored['of']:,}")
    metric = f"{result['split']} {result['metric']}"
    rows = [("pretrained (final/, fine-tuned)", f"{result['pretrained']:.4f}"),
            ("random initialisation, fine-tuned alike", f"{result['random']:.4f}"),
            (f"majority class ({result['majority_label']})", f"{result['majority']:.4f}"),
            ("pretrained - random initialisation", f"{result['gain']:+.4f}")]
    width = max(len(name) for name, _ in rows)
    return [f"what pretraining bought on {result['task']}: final/ and a random initialisation of the same architecture "
            f"and tokenizer, each fine-tuned {result['steps']} steps ({result['epochs']} epoch"
            f"{'s' if result['epochs'] != 1 else ''}) on the same {result['train_examples']:,} training examples "
            f"with seed {result['seed']}, then scored on {result['split']} ({size} examples), which chose nothing:",
            f"  {'':{width}}  {metric}",
            *(f"  {name:{width}}  {value:>{len(metric)}}" for name, value in rows),
            f"  (one seed; the same job over several seeds, and longer pretraining: {RESULTS_PAGE})"]


def next_commands(run_dir: str | Path, result: dict[str, Any] | None) -> list[str]:
    """Commands to try next on what the run wrote (each one works as printed)."""
    run = Path(run_dir).as_posix()
    lines = [f"muppets finetune sst2 --model {run}                 # another task, from final/ (docs: tutorials/finetune.md)",
             f"muppets probe --model {run} --tasks pos,ner --random-baseline --max-train-sentences 2000 "
             f"--out {run}/probe   # what each layer holds, vs random weights",
             f"muppets attention --model {run} \"The nurse said that she was tired.\" --out {run}/attention.html"
             "   # its attention, as a page"]
    if result is not None:
        lines.append(f"muppets serve --model {result['runs']['pretrained']}/best --port 8000   "
                     f"# the fine-tuned {result['task']} model over HTTP: POST /predict")
    lines.append("muppets pretrain configs/bert-mini.yaml   # the full BERT-mini recipe: hours, not minutes "
                 "(docs: tutorials/pretrain-bert.md)")
    return lines
