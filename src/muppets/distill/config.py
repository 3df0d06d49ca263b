"""The settings of a distillation run (``muppets distill TEACHER --student …``).

The teacher is a fine-tuned task directory (``muppets finetune``'s ``best/``): its task, its
tokenizer and its feature settings (sequence length, windows) are the student's. Everything a
fine-tuning run sets (learning rate, epochs, batch size, seed, selection, run directory …) is a
:class:`~muppets.transfer.finetune.FinetuneConfig`, ``train``: the same settings, the same
meaning (its ``model`` and ``task`` come from the teacher). The distillation adds what the
student is, what it learns from (soft targets, gold labels, intermediate layers) and on which
text::

    teacher: runs/sst2/best
    student: teacher            # the teacher with layers dropped (DistilBERT's initialisation)
    student_layers: [0, 2, 4]
    temperature: 2.0
    alpha: 0.5                  # 0.5 soft targets + 0.5 gold labels
    unlabeled: [data:sentiment/mr/rt-polarity.pos]
    train: {lr: 1.0e-4, epochs: 3}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from muppets.config import load_typed
from muppets.errors import ConfigError
from muppets.transfer.finetune import FinetuneConfig

SOFT_LOSSES = ("kl", "mse")  # Hinton et al. 2015 (T² · KL at temperature T) | Tang et al. 2019 (MSE on logits)


@dataclass
class DistillConfig:
    teacher: str = ""  # a fine-tuned task directory (muppets finetune's best/): its task, tokenizer and feature settings are the student's
    student: str = "teacher"  # teacher (the teacher with layers dropped) | a BERT preset (bert-tiny, bert-mini …) | bilstm (Tang et al. 2019) | a model directory with the teacher's vocabulary
    student_layers: list[int] = field(default_factory=list)  # student=teacher: the teacher layers kept, 0-based ([] = student_num_layers evenly spaced, else every other layer as DistilBERT)
    student_num_layers: int = 0  # student=teacher without student_layers: keep this many layers, evenly spaced from the first to the last (0 = every other)
    student_config: dict = field(default_factory=dict)  # a preset or bilstm: config fields set on it (e.g. {num_layers: 4, hidden_size: 384, num_heads: 6, intermediate_size: 1536}); vocabulary and positions are the teacher's
    temperature: float = 2.0  # T of the softened softmaxes (kl; attention is compared at T = 1)
    soft_loss: str = "kl"  # kl (T² · KL(teacher ‖ student) at temperature T) | mse (squared error of the logits, Tang et al. 2019); regression is always mse
    alpha: float = 0.5  # weight of the soft-target loss; the gold-label loss (labelled examples only) gets 1 - alpha (0 = plain fine-tuning of the student, no teacher)
    hidden_weight: float = 0.0  # weight of the intermediate hidden-state loss (TinyBERT: MSE of the student's states, projected to the teacher's width, against the mapped teacher layers, embeddings included; 0 = off)
    attention_weight: float = 0.0  # weight of the attention loss (KL of the mapped layers' attention distributions, heads averaged when their counts differ; 0 = off)
    layer_map: list[int] = field(default_factory=list)  # teacher layer (1-based; 0 = embeddings) that each student layer 1..L_s learns from ([] = the kept layers for student=teacher, else uniform: round(j·L_t/L_s))
    unlabeled: list[str] = field(default_factory=list)  # extra text the teacher labels: corpus files or directories (any format data prepare reads; one sentence per example), or task:<split> for a split of the teacher's task read without labels
    unlabeled_format: str = "auto"  # the corpus files' format (muppets.data.readers: auto, text, lines — one text a line —, jsonl, csv, columnar …)
    unlabeled_unit: str = "sentence"  # sentence (each paragraph cut into sentences) | paragraph (each paragraph one text: with unlabeled_format=lines, each line)
    max_unlabeled: int = 0  # use at most this many unlabeled texts (0 = all), taken in order
    augment: int = 0  # augmented copies of every training example (Tang et al. 2019, §3.3: words masked, n-grams sampled), labelled by the teacher only (0 = none)
    augment_mask: float = 0.1  # augment: probability that a word becomes [MASK]
    augment_ngram: float = 0.25  # augment (single texts): probability that a copy is a random n-gram (n = 1..5 words) of the masked text
    augment_seed: int = 1  # augment: seeds the perturbations (the same augmented set for every run seed)
    teacher_batch_size: int = 64  # examples per teacher forward pass when labelling the transfer set
    train: FinetuneConfig = field(default_factory=FinetuneConfig)  # lr, epochs, batch size, seed, selection, run_dir … as finetune's (model and task: the teacher's)

    def __post_init__(self) -> None:
        checks = [("temperature", self.temperature > 0), ("soft_loss", self.soft_loss in SOFT_LOSSES),
                  ("alpha", 0.0 <= self.alpha <= 1.0), ("hidden_weight", self.hidden_weight >= 0.0),
                  ("attention_weight", self.attention_weight >= 0.0), ("student_num_layers", self.student_num_layers >= 0),
                  ("max_unlabeled", self.max_unlabeled >= 0), ("unlabeled_unit", self.unlabeled_unit in ("sentence", "paragraph")), ("augment", self.augment >= 0),
                  ("augment_mask", 0.0 <= self.augment_mask < 1.0), ("augment_ngram", 0.0 <= self.augment_ngram <= 1.0),
                  ("teacher_batch_size", self.teacher_batch_size >= 1)]
        for name, ok in checks:
            if not ok:
                hint = " (must be > 0: the softmax of logits / T)" if name == "temperature" else ""
                raise ConfigError(f"{name}: invalid value {getattr(self, name)!r}{hint}", key=name)
        if self.alpha == 0.0 and (self.unlabeled or self.augment):
            raise ConfigError("alpha=0 trains on gold labels only: unlabeled or augmented text has none to learn from "
                              "(set alpha > 0, or drop unlabeled / augment)", key="alpha")

    @property
    def uses_teacher(self) -> bool:
        """Whether any loss term reads the teacher (alpha = 0 without intermediate losses: plain fine-tuning)."""
        return self.alpha > 0 or self.intermediate

    @property
    def intermediate(self) -> bool:
        """Whether the teacher runs beside the student in every step (its hidden states or attention)."""
        return self.hidden_weight > 0 or self.attention_weight > 0


def load_config(path: str | Path | None, overrides: Sequence[str]) -> DistillConfig:
    """YAML/JSON file (optional) + dotted ``key=value`` overrides, type-checked."""
    return load_typed(DistillConfig, path, overrides)
