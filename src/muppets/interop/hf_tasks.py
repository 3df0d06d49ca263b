"""Fine-tuned task models <-> Hugging Face ``BertFor…`` directories.

A :class:`~muppets.heads.TaskModel` with a :class:`~muppets.models.bert.BertBackbone` is saved
so that ``transformers.AutoModelForSequenceClassification`` (``…TokenClassification``,
``…QuestionAnswering``, ``…MultipleChoice``) loads it with no missing keys and gives the same
logits; the same directories — and any HF BERT directory, pretraining or bare — load back as
task models. A head absent from the directory starts fresh; its pooler starts from the
checkpoint's pretrained pooler when there is one (as in BERT fine-tuning).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from muppets.errors import CheckpointError, ConfigError
from muppets.heads import KINDS, TaskModel, build_head
from muppets.interop.hf_bert import BERT_FORMAT, TASK_HEADS, EncoderFormat, from_hf_state, to_hf_state
from muppets.interop.model_card import Provenance, write_config, write_model_card
from muppets.interop.safetensors_io import read_json_object, read_weights, write_weights
from muppets.models.bert import BertBackbone, BertConfig

log = logging.getLogger(__name__)

__all__ = ["TASK_HEADS", "is_task_architecture", "is_task_config", "save_hf_task_model", "load_hf_task_model",
           "task_labels", "names_entry", "saved_label_names", "task_entries", "task_kind", "architecture_of"]
_KIND_OF_ARCH = {"ForTokenClassification": "tag", "ForQuestionAnswering": "span",
                 "ForMultipleChoice": "choice", "ForSequenceClassification": "classify"}  # architecture suffix -> kind


def is_task_architecture(arch: object) -> bool:
    """Whether an HF ``architectures`` entry names a task model (``…ForSequenceClassification`` …)."""
    return isinstance(arch, str) and arch.endswith(tuple(_KIND_OF_ARCH))


def is_task_config(config: dict) -> bool:
    """Whether a ``config.json`` (as a dict) is a fine-tuned task model's: muppets' ``muppets_task``
    or an HF task architecture."""
    return "muppets_task" in config or any(is_task_architecture(a) for a in config.get("architectures", []))


def save_hf_task_model(model: TaskModel, directory: str | Path, tokenizer=None,
                       labels: list[str] | None = None, fmt: EncoderFormat = BERT_FORMAT,
                       provenance: Provenance | None = None, label_names: list[str] | None = None) -> Path:
    """Write config.json (architecture, labels, ``muppets_task``), model.safetensors, tokenizer
    and a model card (from ``provenance``), in the names of ``fmt``'s family (default BERT's).

    ``labels`` are the values the task's files hold (what evaluation compares), ``label_names``
    what people read for them (default: the labels): ``id2label`` / ``label2id`` hold the names,
    so transformers' pipelines show them, and ``muppets_task`` keeps both."""
    if not isinstance(model.backbone, BertBackbone):
        raise CheckpointError("only BERT-like backbones can be saved as Hugging Face …For<Task> directories")
    directory = Path(directory)
    heads, arch = fmt.tasks[model.kind]
    cfg = model.backbone.cfg
    own = model.state_dict()
    heads = {ours: hf for ours, hf in heads.items() if f"{ours}.weight" in own}  # pool=mean: no pooler
    write_weights(to_hf_state(model, cfg, heads, {}, fmt), directory / "model.safetensors", {"format": "pt"})
    hf = {**fmt.to_config(cfg), "architectures": [arch], **task_entries(model, labels or [], label_names or [])}
    write_config(directory, hf)
    if tokenizer is not None:
        tokenizer.save(directory)
    write_model_card(directory, provenance)
    return directory


def task_entries(model: TaskModel, labels: Sequence[str], label_names: Sequence[str]) -> dict:
    """The task keys of a saved task model's ``config.json``, as every family writes them:
    ``muppets_task`` (kind, labels, their names, the sentence heads' pool) and transformers'
    ``id2label`` / ``label2id`` (the names; regression: ``problem_type`` and one ``LABEL_0``)."""
    labels, label_names = list(labels), list(label_names)
    pool = getattr(getattr(model.head, "vector", None), "pool", "first")
    out: dict = {"muppets_task": {"kind": model.kind, "labels": labels, **names_entry(labels, label_names),
                                  "pool": pool}}
    if model.kind in ("classify", "pair", "tag"):
        names = label_names or labels or [f"LABEL_{i}" for i in range(model.head.classifier.out_features)]
        out["id2label"] = {str(i): n for i, n in enumerate(names)}
        out["label2id"] = {n: i for i, n in enumerate(names)}
    if model.kind == "regress":
        out.update(problem_type="regression", id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    return out


def load_hf_task_model(directory: str | Path, kind: str | None = None, num_labels: int | None = None,
                       dropout_p: float | None = None, pool: str | None = None,
                       dropout: float | None = None, fmt: EncoderFormat = BERT_FORMAT) -> TaskModel:
    """A task model from an HF BERT directory: backbone always, head when the file has it.

    Args:
        kind: task kind (see :data:`muppets.heads.KINDS`); read from the directory when saved
            by muppets or by transformers' ``BertFor…`` classes.
        num_labels: size of a fresh classification/tagging head (default: the config's labels).
        dropout_p: head dropout (default: ``dropout``, else the config's hidden dropout).
        dropout: the backbone's hidden and attention dropout (default: the config's), and the
            head's unless ``dropout_p`` is given.
        pool: sentence vector of classify/pair/regress/choice heads (``first`` = BERT's pooler,
            ``mean``; default: as saved, else ``first``). Only ``first`` is what transformers'
            ``BertFor…`` classes compute.
        fmt: the family whose names the directory uses (default BERT's).
    """
    directory = Path(directory)
    data = _read_config(directory)
    kind = kind or task_kind(data, directory)
    cfg = fmt.from_config(data, str(directory / "config.json"))
    if dropout is not None:
        cfg = dataclasses.replace(cfg, hidden_dropout=dropout, attention_dropout=dropout)
    labels = data.get("muppets_task", {}).get("labels") or [data["id2label"][k] for k in sorted(data.get("id2label", {}), key=int)]
    n = num_labels or len(labels) or 2
    pool = pool or data.get("muppets_task", {}).get("pool") or "first"
    head = build_head(kind, cfg.hidden_size, n, cfg.hidden_dropout if dropout_p is None else dropout_p,
                      cfg.initializer_range, pool=pool, pooler_act=fmt.pooler_act)
    model = TaskModel(BertBackbone(cfg), head, kind)
    model.fresh_head = _load_weights(model, cfg, kind, directory, fmt)
    return model


def task_labels(directory: str | Path) -> list[str]:
    """The label names saved with a task model (empty for span/choice/regress)."""
    data = _read_config(Path(directory))
    return list(data.get("muppets_task", {}).get("labels", []))


def names_entry(labels: Sequence[str], label_names: Sequence[str]) -> dict[str, list[str]]:
    """``{"label_names": [...]}`` for a saved ``muppets_task`` when the names are not the labels
    themselves, else ``{}``.

    >>> names_entry(["0", "1"], ["negative", "positive"]), names_entry(["O", "B-PER"], [])
    ({'label_names': ['negative', 'positive']}, {})
    """
    names = [str(n) for n in label_names]
    if not names or names == [str(x) for x in labels]:
        return {}
    if len(names) != len(labels) or len(set(names)) != len(names):
        raise ConfigError(f"label names {names} must name each of the labels {list(labels)} once")
    return {"label_names": names}


def saved_label_names(config: dict, kind: str, n: int) -> tuple[list[str], list[str]]:
    """``(labels, names)`` of a task model from its ``config.json`` (a dict; ``n`` outputs): the
    labels its task's files hold (``muppets_task``; an HF directory: ``id2label``; else
    ``LABEL_i``; none for span / choice / regress) and their readable names (``label_names``;
    a directory saved before names were kept, or without them: the labels themselves)."""
    task = config.get("muppets_task") or {}
    labels = [str(x) for x in task.get("labels") or []]
    if not labels and kind in ("classify", "pair", "tag"):
        id2label = config.get("id2label") or {}
        labels = [str(id2label.get(str(i), f"LABEL_{i}")) for i in range(n)]
    names = task.get("label_names")
    if not isinstance(names, list) or len(names) != len(labels):
        names = labels
    return labels, [str(x) for x in names]


def _read_config(directory: Path) -> dict:
    path = directory / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{directory}: no config.json (is this a Hugging Face model directory?)")
    return read_json_object(path)


def architecture_of(prefix: str, kind: str) -> str:
    """The HF-style ``architectures`` entry of a ``kind`` task model: ``prefix`` + its suffix
    (``MuppetsBiLSTM`` + ``ForSequenceClassification``)."""
    suffixes = {found: suffix for suffix, found in _KIND_OF_ARCH.items()}
    return prefix + suffixes.get(kind, "ForSequenceClassification")  # pair, regress: a sequence classifier


def task_kind(data: dict, directory: Path) -> str:
    """The task kind a ``config.json`` (as a dict) was saved for (:class:`CheckpointError` when
    it is no task model's)."""
    kind = data.get("muppets_task", {}).get("kind")
    if kind in KINDS:
        return kind
    for arch in data.get("architectures", []):
        for suffix, found in _KIND_OF_ARCH.items():
            if isinstance(arch, str) and arch.endswith(suffix):
                return "regress" if data.get("problem_type") == "regression" else found
    raise CheckpointError(f"{directory}: not a task model directory; pass the task kind "
                          f"(one of {', '.join(KINDS)})")


def _load_weights(model: TaskModel, cfg: BertConfig, kind: str, directory: Path, fmt: EncoderFormat) -> list[str]:
    """Load ``directory``'s weights into ``model``; returns why head parameters start fresh, one
    line each (a pretrained encoder has none; another label set has other shapes)."""
    heads, _ = fmt.tasks[kind]
    own = model.state_dict()
    heads = {ours: hf for ours, hf in heads.items() if f"{ours}.weight" in own}  # pool=mean: no pooler
    state, absent = from_hf_state(read_weights(directory), cfg, str(directory), heads, {}, fmt)
    reshaped = []
    for name in [k for k in state if k.startswith("head.")]:
        if state[name].shape != own[name].shape:  # e.g. another label set: keep the fresh head
            reshaped.append(f"{name} has shape {tuple(state[name].shape)}, the head needs {tuple(own[name].shape)}")
            log.info("%s: %s; starting it fresh", directory, reshaped[-1])
            del state[name]
    for name, tensor in state.items():
        if tensor.shape != own[name].shape:
            raise CheckpointError(f"{directory}: {name} has shape {tuple(tensor.shape)}, config implies {tuple(own[name].shape)}")
    missing = [k for k in absent if k.startswith("backbone.")]
    if missing:
        raise CheckpointError(f"{directory}: missing backbone weights {missing[:5]}")
    fresh = sorted(k for k in own if k.startswith("head.") and k not in state)
    if fresh:
        log.info("%s: new head parameters %s", directory, fresh)
    model.load_state_dict(state, strict=False)
    absent_names = [k for k in fresh if not any(r.startswith(k + " ") for r in reshaped)]
    return reshaped + ([f"{', '.join(absent_names)} not in its weights"] if absent_names else [])
