"""The teacher and the student of a distillation run.

=====================  ========================================================================
``student``            the student
=====================  ========================================================================
``teacher``            the teacher with layers dropped: its embeddings, the kept blocks and its
                       head, copied (Sanh et al. 2019 initialise DistilBERT from every other
                       layer of BERT); ``student_layers`` picks the blocks
a preset (bert-mini …) a BERT of that size (``student_config`` sets any field: layers, width,
                       heads, feed-forward width), freshly initialised, with the teacher's
                       vocabulary, positions, segments and family
``bilstm``             a BiLSTM task model on the teacher's word pieces (Tang et al. 2019),
                       :mod:`muppets.families.bilstm`
a model directory      its encoder and a fresh head; its vocabulary must be the teacher's
=====================  ========================================================================

Student and teacher read the same features (one tokenizer), so soft targets line up token by
token for tagging and spans; a student directory with another vocabulary is refused, as
muppets has no mapping between two tokenizations.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from muppets.errors import CheckpointError, ConfigError
from muppets.heads import TaskModel, build_head
from muppets.nn.block import init_weights

log = logging.getLogger(__name__)


def load_teacher(directory: str | Path) -> TaskModel:
    """The fine-tuned task model at ``directory``, in eval mode with gradients off. A directory
    without a trained task head (a pretrained encoder, or no model at all) is one clear error."""
    from muppets.transfer.models import load_task_model

    path = Path(directory)
    if not (path / "config.json").is_file():
        raise ConfigError(f"teacher {directory!r}: no config.json there; the teacher is a fine-tuned task "
                          "directory (muppets finetune's <run_dir>/best)", key="teacher")
    try:
        model = load_task_model(path)
    except (CheckpointError, KeyError, ValueError) as err:
        raise ConfigError(f"teacher {directory!r} is not a fine-tuned task model ({err}); the teacher is "
                          "muppets finetune's <run_dir>/best, a model with its trained task head",
                          key="teacher") from None
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def kept_layers(total: int, layers: list[int], count: int) -> list[int]:
    """The teacher blocks a ``student=teacher`` keeps (0-based): ``layers`` as given, else
    ``count`` evenly spaced from the first to the last, else every other one (DistilBERT).

    >>> kept_layers(6, [], 0), kept_layers(6, [], 4), kept_layers(6, [], 2), kept_layers(6, [1, 3], 0)
    ([0, 2, 4], [0, 2, 3, 5], [0, 5], [1, 3])
    """
    if layers:
        bad = [i for i in layers if not 0 <= i < total]
        if bad or len(set(layers)) != len(layers) or sorted(layers) != list(layers):
            raise ConfigError(f"student_layers={layers}: give distinct teacher layers in increasing order, each "
                              f"in 0..{total - 1} (the teacher has {total})", key="student_layers")
        return list(layers)
    if count:
        if count > total:
            raise ConfigError(f"student_num_layers={count}: the teacher has only {total} layers",
                              key="student_num_layers")
        if count == 1:
            return [total - 1]
        return [round(j * (total - 1) / (count - 1)) for j in range(count)]
    return list(range(0, total, 2))


def uniform_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's uniform mapping: student layer ``j`` (1-based) learns from teacher layer
    ``round(j · L_t / L_s)``.

    >>> uniform_map(2, 6), uniform_map(4, 6)
    ([3, 6], [2, 3, 4, 6])
    """
    return [round(j * teacher_layers / student_layers) for j in range(1, student_layers + 1)]


def _sentence_settings(teacher: TaskModel) -> tuple[str, str]:
    """The teacher head's ``(pool, pooler activation)`` (``first``/``tanh`` for heads without one)."""
    vector = getattr(teacher.head, "vector", None)
    pooler = getattr(vector, "pooler", None)
    return getattr(vector, "pool", "first"), getattr(pooler, "act_name", "tanh")


def _num_labels(teacher: TaskModel) -> int:
    classifier = getattr(teacher.head, "classifier", None)
    return classifier.out_features if classifier is not None else 0


def drop_layers(teacher: TaskModel, kept: list[int]) -> TaskModel:
    """A copy of ``teacher`` with only the blocks ``kept`` (embeddings and head copied too)."""
    student = copy.deepcopy(teacher)
    backbone = student.backbone
    if not isinstance(getattr(backbone, "layers", None), nn.ModuleList) or not hasattr(backbone.cfg, "num_layers"):
        raise ConfigError("student=teacher drops transformer blocks; this teacher's backbone has none",
                          key="student")
    backbone.layers = nn.ModuleList(backbone.layers[i] for i in kept)
    backbone.cfg = dataclasses.replace(backbone.cfg, num_layers=len(kept))
    for p in student.parameters():
        p.requires_grad_(True)
    return student.train()


def preset_student(teacher: TaskModel, preset: str, overrides: dict) -> TaskModel:
    """A fresh BERT of size ``preset`` (+ ``overrides``) with the teacher's vocabulary,
    positions, segments, family and head settings."""
    from muppets.models.bert import BERT_PRESETS, BertBackbone, BertConfig

    tcfg = teacher.backbone.cfg
    if not isinstance(tcfg, BertConfig):
        raise ConfigError(f"student={preset}: a BERT-size student needs an encoder teacher (BERT, RoBERTa, DistilBERT, "
                          "ELECTRA); use student=teacher to drop layers of this one", key="student")
    L, H = BERT_PRESETS[preset]
    size = dict(num_layers=L, hidden_size=H, num_heads=max(1, H // 64), intermediate_size=4 * H)
    fixed = ("vocab_size", "max_position_embeddings", "type_vocab_size", "pad_token_id", "padded_positions", "model_type")
    clash = sorted(set(overrides) & set(fixed))
    if clash:
        raise ConfigError(f"student_config sets {clash}: the student reads the teacher's features, so these are the "
                          "teacher's", key="student_config")
    known = {f.name for f in dataclasses.fields(BertConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"student_config: unknown BERT config fields {unknown}", key="student_config")
    cfg = dataclasses.replace(tcfg, embedding_size=0, **{**size, **overrides})
    pool, act = _sentence_settings(teacher)
    head = build_head(teacher.kind, cfg.hidden_size, _num_labels(teacher), cfg.hidden_dropout, cfg.initializer_range,
                      pool=pool, pooler_act=act)
    student = TaskModel(BertBackbone(cfg), head, teacher.kind)
    init_weights(student, cfg.initializer_range)
    student.family = teacher.family
    return student


def bilstm_student(teacher: TaskModel, tok: Any, overrides: dict) -> TaskModel:
    """Tang et al. (2019)'s BiLSTM on the teacher's word pieces (:mod:`muppets.families.bilstm`)."""
    try:
        from muppets.families.bilstm import new_student
    except ImportError:  # pragma: no cover - the family ships with muppets
        raise ConfigError("student=bilstm: the BiLSTM family is not available in this muppets", key="student") from None
    return new_student(teacher.kind, _num_labels(teacher) or 1, tok.vocab_size, tok.pad_id, **overrides)


def directory_student(teacher: TaskModel, directory: Path, teacher_tok: Any) -> TaskModel:
    """A pretrained encoder directory with a fresh head; refused when its vocabulary is not the teacher's."""
    from muppets.transfer.models import load_tokenizer, new_task_model

    same_vocabulary(teacher_tok, load_tokenizer(directory), directory)
    pool, _ = _sentence_settings(teacher)
    return new_task_model(directory, teacher.kind, _num_labels(teacher) or None, teacher_tok, pool=pool)


def vocabulary(tok: Any) -> dict[str, int]:
    """A tokenizer's ``{piece: id}``."""
    backend = getattr(tok, "backend", None)
    if backend is not None and hasattr(backend, "get_vocab"):
        return dict(backend.get_vocab())
    return dict(getattr(tok, "vocab", {}))


def same_vocabulary(teacher_tok: Any, student_tok: Any, where: str | Path) -> None:
    """A :class:`ConfigError` naming the first difference when two tokenizers' vocabularies differ."""
    a, b = vocabulary(teacher_tok), vocabulary(student_tok)
    if a == b:
        return
    by_id_a, by_id_b = {i: t for t, i in a.items()}, {i: t for t, i in b.items()}
    first = next((i for i in sorted(set(by_id_a) | set(by_id_b)) if by_id_a.get(i) != by_id_b.get(i)), None)
    raise ConfigError(f"student {where}: its vocabulary ({len(b)} pieces) differs from the teacher's ({len(a)}); "
                      f"first difference at id {first}: {by_id_b.get(first)!r} vs the teacher's {by_id_a.get(first)!r}. "
                      "Soft targets are read token by token on the teacher's features and muppets has no mapping "
                      "between two vocabularies: use student=teacher, a preset, bilstm, or a directory with the "
                      "teacher's vocabulary", key="student")


def build_student(cfg: Any, teacher: TaskModel, tok: Any) -> tuple[TaskModel, list[int]]:
    """The student of ``cfg`` (:class:`~muppets.distill.config.DistillConfig`) and its default
    layer map (teacher layer per student layer, 1-based; 0 = embeddings)."""
    from muppets.models.bert import BERT_PRESETS

    name = cfg.student
    teacher_layers = int(getattr(teacher.backbone.cfg, "num_layers", 0))
    if name == "teacher":
        if cfg.student_config:
            raise ConfigError("student_config sets the size of a preset or bilstm student; student=teacher keeps the "
                              "teacher's blocks (choose them with student_layers)", key="student_config")
        kept = kept_layers(teacher_layers, list(cfg.student_layers), cfg.student_num_layers)
        log.info("student: the teacher's layers %s (of %d), embeddings and head copied", kept, teacher_layers)
        return drop_layers(teacher, kept), [i + 1 for i in kept]
    if cfg.student_layers or cfg.student_num_layers:
        raise ConfigError("student_layers / student_num_layers choose teacher blocks for student=teacher; a "
                          f"{name} student's size is student_config", key="student_layers")
    if name in BERT_PRESETS:
        student = preset_student(teacher, name, dict(cfg.student_config))
    elif name == "bilstm":
        student = bilstm_student(teacher, tok, dict(cfg.student_config))
    elif Path(name).is_dir() or name == "minilm":
        from muppets.paths import resolve_model_path

        student = directory_student(teacher, resolve_model_path(name), tok)
    else:
        raise ConfigError(f"student {name!r}: expected teacher, a BERT preset ({', '.join(BERT_PRESETS)}), bilstm, or "
                          "a model directory", key="student")
    layers = int(getattr(student.backbone.cfg, "num_layers", 0))
    log.info("student: %s, %d parameters", name, sum(p.numel() for p in student.parameters()))
    return student.train(), uniform_map(layers, teacher_layers) if layers and teacher_layers else []


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
