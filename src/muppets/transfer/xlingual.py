"""Zero-shot cross-lingual transfer and cross-lingual sentence retrieval (multilingual BERT, issue 19).

**Zero-shot transfer** (:func:`zero_shot_cv`): fine-tune on English, evaluate on every other
language with the same model. XNLI and PAWS-X are staged as labelled dev files only, parallel
across languages (row ``i`` is the same pair everywhere), so they are cross-validated **by
row**: the English row ids are cut into ``k`` folds (:func:`row_folds`), rows that share an English
sentence always in the same fold (:func:`sentence_groups`: XNLI gives each premise three
hypotheses, one per label, so a premise split across folds would let the model learn two of its
labels and infer the third; PAWS-X pairs reuse sentences too); for fold ``f`` the model
trains on the English rows of the other folds (a stratified slice of them, whole sentence groups,
held out to choose the best model: ``selection=train-slice``), and predicts the fold's rows in
every language: the same row ids held out everywhere, none of them ever trained on
(:func:`cv_splits`). A fold's ``xlingual.json`` records its fine-tuning settings and the model's
weight fingerprint, and is reused only by a run with the same ones (:func:`reusable`). Each row is
predicted exactly once per language; accuracy per language pools the folds. PAWS-X rows whose
translation is ``NS`` are absent in that language (:mod:`muppets.tasks.xlingual`).
:func:`sst2_to_chnsenticorp` trains on SST-2 (English; SST-2 dev chooses the model) and
reports ChnSentiCorp test (Chinese) with labels 0 = negative, 1 = positive in both.

**Retrieval** (:func:`layer_retrieval`): no fine-tuning. Each language's unique XNLI premises
(aligned by row: :func:`unique_premises`) are mean-pooled per layer over their word pieces
(``[CLS]``/``[SEP]`` and padding left out: :func:`sentence_vectors`), centred per language (the
language's mean vector subtracted, Libovický et al. 2019), and every sentence of a language
looks up its nearest English sentence by cosine; retrieval@1 is the share that finds its own
translation. Chance is ``1 / N`` for ``N`` candidates (:func:`chance`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from muppets.config import to_dict, write_json_atomic
from muppets.errors import ConfigError, RunDirError
from muppets.tasks import load_task
from muppets.tasks.spec import TaskData, TaskSpec, TextExample
from muppets.tasks.xlingual import row_groups

__all__ = ["LANGUAGES", "ParallelTask", "load_parallel", "sentence_groups", "row_folds", "cv_splits", "zero_shot_cv",
           "sst2_to_chnsenticorp", "unique_premises", "sentence_vectors", "retrieval_at_1", "layer_retrieval",
           "chance"]

log = logging.getLogger(__name__)

LANGUAGES = ("en", "de", "fr", "es", "zh")  # staged XNLI / PAWS-X dev languages
RESULT_FILE = "xlingual.json"


# ----------------------------------------------------------------------------- parallel tasks


@dataclass
class ParallelTask:
    """A parallel task: the English spec and, per language, its examples by row number."""

    name: str  # xnli | pawsx
    spec: TaskSpec
    rows: dict[str, dict[int, TextExample]]  # language -> row -> example (untranslated rows absent)


def _row(example: TextExample) -> int:
    return int(example.id.rsplit("-", 1)[1])  # ids are "<stem>-<row>"


def load_parallel(name: str, languages: Sequence[str] = LANGUAGES, source: str = "en") -> ParallelTask:
    """``xnli`` or ``pawsx`` in ``languages`` (registered tasks ``<name>-<lang>``), all rows."""
    if source not in languages:
        raise ConfigError(f"the source language {source!r} is not among {list(languages)}")
    rows, spec = {}, None
    for lang in languages:
        data = load_task(f"{name}-{lang}")
        rows[lang] = {_row(ex): ex for split in data.splits.values() for ex in split}
        spec = data.spec if lang == source else spec
    return ParallelTask(name, spec, rows)


def sentence_groups(examples: dict[int, TextExample]) -> dict[int, int]:
    """Row -> group: rows that share a sentence (first or second text), directly or through
    other rows, form one group, numbered by its smallest row (the rule that splits the registered
    tasks: :func:`muppets.tasks.xlingual.row_groups`)."""
    found = row_groups({"source": list(examples.values())})
    return {int(row): int(group) for row, group in found.items()}


def row_folds(rows: Sequence[int], k: int, seed: int = 0, groups: dict[int, int] | None = None) -> list[np.ndarray]:
    """``k`` disjoint, sorted folds of the row ids ``rows`` covering them all (a seeded shuffle);
    with ``groups`` (row -> group) the groups are shuffled and dealt, so a group never spans folds."""
    groups = groups or {row: row for row in rows}
    keys = sorted({groups[row] for row in rows})
    if not 2 <= k <= len(keys):
        raise ConfigError(f"folds: need 2 <= k <= {len(keys)} groups of rows, got k={k}")
    members: dict[int, list[int]] = {}
    for row in sorted(rows):
        members.setdefault(groups[row], []).append(row)
    order = np.random.default_rng([seed, 53]).permutation(np.asarray(keys, dtype=np.int64))
    return [np.sort(np.asarray([row for key in part.tolist() for row in members[key]], dtype=np.int64))
            for part in np.array_split(order, k)]


@dataclass
class Fold:
    """One fold: the English training rows and, per language, the held-out rows' examples."""

    index: int
    held_rows: np.ndarray  # (n,) row ids held out (the same in every language)
    train: list[TextExample]  # source-language examples of the other folds
    held_out: dict[str, list[TextExample]]  # language -> examples of held_rows it has


def cv_splits(task: ParallelTask, k: int = 5, seed: int = 0, source: str = "en") -> Iterator[Fold]:
    """The ``k`` folds by row, rows sharing an English sentence together (see the module docstring)."""
    by_row = task.rows[source]
    for index, held in enumerate(row_folds(list(by_row), k, seed, sentence_groups(by_row))):
        held_set = set(held.tolist())
        train = [ex for row, ex in sorted(by_row.items()) if row not in held_set]
        held_out = {lang: [exs[r] for r in held.tolist() if r in exs] for lang, exs in task.rows.items()}
        yield Fold(index, held, train, held_out)


# ----------------------------------------------------------------------------- zero-shot fine-tuning


def _predict_languages(run_dir: Path, spec: TaskSpec, held_out: dict[str, list], cfg) -> dict[str, dict]:
    """Predict every language's held-out examples with ``run_dir/best``: correct / total per language."""
    from muppets.transfer.finetune import predict_and_score
    from muppets.transfer.models import load_task_model, load_tokenizer

    model, tok = load_task_model(run_dir / "best"), load_tokenizer(run_dir / "best")
    out = {}
    for lang, examples in held_out.items():
        preds, metrics = predict_and_score(model, tok, spec, examples, cfg)
        correct = sum(p == ex.label for p, ex in zip(preds, examples))
        labels = {label: sum(ex.label == label for ex in examples) for label in spec.labels}
        out[lang] = {"correct": int(correct), "total": len(examples), "labels": labels, **metrics}
    return out


def model_fingerprint(cfg) -> str:
    """sha256 of the weights ``cfg.model`` names (:func:`~muppets.interop.onnx_export.weights_fingerprint`)."""
    from muppets.interop.onnx_export import weights_fingerprint
    from muppets.transfer.finetune import resolve_model

    return weights_fingerprint(resolve_model(cfg.model))


def reusable(done: Path, found: dict, fold: Fold, settings: dict, fingerprint: str) -> dict:
    """``found`` (the record in ``done``) when it is this fold's result under these fine-tuning
    ``settings`` and model weights; otherwise :class:`ConfigError` (another fold's rows) or
    :class:`RunDirError` (other settings, compared as a finished run's are:
    :func:`~muppets.train.rundir.check_resume`; the model by its weights, not its path)."""
    from muppets.train.rundir import changed_settings, describe, effective_changes

    if found.get("held_rows") != fold.held_rows.tolist():
        raise ConfigError(f"{done} holds the result of another fold (other held-out rows: a different k, fold "
                          "seed, task or grouping); give this run its own directory")
    saved = found.get("settings")
    if not isinstance(saved, dict):
        raise RunDirError(f"{done}: a fold result without the settings it was trained with (written before they "
                          f"were recorded), so it cannot be told apart from another run's: delete {done.parent} "
                          "to compute it again, or choose another directory")
    changed = effective_changes(changed_settings(saved, settings), ("model",))
    if found.get("model_sha256") != fingerprint:
        changed["model weights (sha256)"] = (found.get("model_sha256"), fingerprint)
    if changed:
        raise RunDirError(f"{done}: this fold was fine-tuned with other settings ({describe(changed)}); its result "
                          f"would be reported under these: run with its settings, delete {done.parent} to compute it "
                          "again, or choose another directory")
    return found


def run_fold(task: ParallelTask, fold: Fold, cfg, root: Path, keep_models: bool = False,
             fingerprint: str | None = None) -> dict:
    """Fine-tune on the fold's English rows (or reuse its finished result, when it was made with
    the same settings and model weights: :func:`reusable`) and predict every language; unless
    ``keep_models``, the fold's ``best/`` and checkpoints are then deleted (the result, with its
    settings and the model's ``fingerprint``, is in ``xlingual.json`` and ``metrics.json``)."""
    from muppets.transfer.finetune import run

    run_dir = root / f"fold-{fold.index}"
    done = run_dir / RESULT_FILE
    fold_cfg = dataclasses.replace(cfg, run_dir=str(run_dir), selection="train-slice")
    settings, fingerprint = to_dict(fold_cfg), fingerprint or model_fingerprint(cfg)
    if done.is_file():
        return reusable(done, json.loads(done.read_text(encoding="utf-8")), fold, settings, fingerprint)
    data = TaskData(task.spec, {"train": fold.train}, notes=f"{task.name} fold {fold.index}: English rows of the other folds")
    summary = run(fold_cfg, data=data)
    result = {"fold": fold.index, "rows": len(fold.held_rows), "held_rows": fold.held_rows.tolist(),
              "settings": settings, "model_sha256": fingerprint, "best_step": summary["best_step"],
              "train_examples": summary["train_examples"], "selection_examples": summary["selection_examples"],
              "languages": _predict_languages(run_dir, task.spec, fold.held_out, fold_cfg)}
    write_json_atomic(done, result)
    if not keep_models:
        for name in ("best", "checkpoints"):
            shutil.rmtree(run_dir / name, ignore_errors=True)
    return result


def zero_shot_cv(task: ParallelTask, cfg, k: int = 5, fold_seed: int = 0, root: str | Path = "",
                 keep_models: bool = False) -> dict:
    """Cross-validated zero-shot transfer from English (``cfg``: a FinetuneConfig; its seed and
    model are used). Returns per language the pooled accuracy over all held-out rows, its row
    count, the majority-class accuracy (chance) and the per-fold accuracies; writes ``<root>/summary.json``.
    A fold finished before is reused only with the same settings and model weights (else
    :class:`~muppets.errors.RunDirError`)."""
    root = Path(root or cfg.run_dir or f"runs/xlingual/{task.name}")
    fingerprint = model_fingerprint(cfg)
    folds = [run_fold(task, fold, cfg, root, keep_models, fingerprint) for fold in cv_splits(task, k, fold_seed)]
    per_lang = {}
    for lang in task.rows:
        correct = sum(f["languages"][lang]["correct"] for f in folds)
        total = sum(f["languages"][lang]["total"] for f in folds)
        labels = {label: sum(f["languages"][lang]["labels"][label] for f in folds) for label in task.spec.labels}
        per_lang[lang] = {"accuracy": correct / total if total else float("nan"), "rows": total,
                          "majority": max(labels.values()) / total if total else float("nan"),
                          "folds": [f["languages"][lang]["correct"] / max(1, f["languages"][lang]["total"]) for f in folds]}
    summary = {"task": task.name, "model": cfg.model, "model_sha256": fingerprint, "init": cfg.init, "seed": cfg.seed,
               "k": k, "fold_seed": fold_seed, "languages": per_lang, "folds": folds}
    write_json_atomic(root / "summary.json", summary)
    return summary


def sst2_to_chnsenticorp(cfg) -> dict:
    """Train on SST-2 train, choose on SST-2 dev, report ChnSentiCorp test (zero-shot into Chinese)."""
    from muppets.transfer.finetune import run

    sst, chn = load_task("sst2"), load_task("chnsenticorp")
    if list(sst.spec.labels) != list(chn.spec.labels):
        raise ConfigError(f"SST-2 labels {sst.spec.labels} differ from ChnSentiCorp's {chn.spec.labels}")
    data = TaskData(sst.spec, {"train": sst["train"], "dev": sst["dev"], "test": chn["test"]},
                    notes="train/dev: SST-2 (English); test: ChnSentiCorp test (Chinese); 1 = positive in both")
    summary = run(dataclasses.replace(cfg, selection="dev"), data=data)
    return {"model": cfg.model, "init": cfg.init, "seed": cfg.seed, "sst2_dev": summary.get("dev", {}),
            "chnsenticorp_test": summary.get("test", {}), "best_step": summary["best_step"]}


# ----------------------------------------------------------------------------- retrieval


def unique_premises(languages: Sequence[str] = LANGUAGES, source: str = "en") -> dict[str, list[str]]:
    """Each language's XNLI premises at the rows where the English premise first occurs (a premise
    comes with three hypotheses): the lists are aligned, item ``i`` being the same sentence."""
    task = load_parallel("xnli", languages, source)
    seen, rows = set(), []
    for row, ex in sorted(task.rows[source].items()):
        if ex.text not in seen:
            seen.add(ex.text)
            rows.append(row)
    return {lang: [task.rows[lang][r].text for r in rows] for lang in languages}


def sentence_vectors(model, tok, texts: Sequence[str], max_len: int = 128, batch_size: int = 64) -> np.ndarray:
    """``(layers, N, H)`` float32: each text's pieces mean-pooled in every layer (embeddings
    first), ``[CLS]``/``[SEP]`` and padding left out. ``model`` is a BERT backbone, ``tok`` its
    WordPiece tokenizer; a text is cut to ``max_len - 2`` pieces."""
    ids = [row[: max_len - 2] or [tok.unk_id] for row in tok.encode_batch(list(texts))]
    order = np.argsort([len(r) for r in ids], kind="stable")  # batches of similar length
    out: np.ndarray | None = None
    device = next(model.parameters()).device
    model.eval()
    for start in range(0, len(ids), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(ids[i]) for i in chunk) + 2
        batch = torch.full((len(chunk), width), tok.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.bool)  # (B, T) real positions
        pieces = torch.zeros((len(chunk), width), dtype=torch.bool)  # (B, T) the positions pooled
        for b, i in enumerate(chunk):
            row = ids[i]
            batch[b, : len(row) + 2] = torch.tensor([tok.cls_id, *row, tok.sep_id])
            mask[b, : len(row) + 2] = True
            pieces[b, 1: len(row) + 1] = True
        with torch.inference_mode():
            encoded = model(input_ids=batch.to(device), token_type_ids=torch.zeros_like(batch).to(device),
                            attention_mask=mask.to(device))
            weights = pieces.to(device).float().unsqueeze(-1)  # (B, T, 1)
            pooled = torch.stack([(h.float() * weights).sum(1) / weights.sum(1) for h in encoded.layers])  # (K, B, H)
        if out is None:
            out = np.zeros((pooled.shape[0], len(ids), pooled.shape[2]), dtype=np.float32)
        out[:, chunk] = pooled.cpu().numpy()
    assert out is not None, "no texts"
    return out


def retrieval_at_1(queries: np.ndarray, candidates: np.ndarray, centre: bool = True) -> float:
    """Share of queries ``(N, H)`` whose nearest candidate ``(N, H)`` by cosine is the one of the
    same index; with ``centre`` each side's mean vector is subtracted first."""
    if queries.shape != candidates.shape:
        raise ConfigError(f"queries {queries.shape} and candidates {candidates.shape} must be aligned")
    q, c = queries.astype(np.float64), candidates.astype(np.float64)
    if centre:
        q, c = q - q.mean(0), c - c.mean(0)
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    nearest = (q @ c.T).argmax(1)  # (N,)
    return float((nearest == np.arange(len(q))).mean())


def chance(n_candidates: int) -> float:
    """Retrieval@1 of a random ranking: one right candidate among ``n_candidates``."""
    return 1.0 / n_candidates


def layer_retrieval(vectors: dict[str, np.ndarray], target: str = "en", centre: bool = True) -> dict[str, list[float]]:
    """``{language: [retrieval@1 per layer]}`` from every language's ``(layers, N, H)`` vectors to ``target``'s."""
    goal = vectors[target]
    return {lang: [retrieval_at_1(v[k], goal[k], centre) for k in range(len(v))]
            for lang, v in vectors.items() if lang != target}
