"""Task heads on any backbone's :class:`~muppets.nn.encoded.Encoded` output (BERT paper §4).

One small output layer per task kind, as in Devlin et al. (2019), Fig. 4:

- ``classify`` / ``pair`` / ``regress``: :class:`ClassificationHead` — ``tanh(W h_[CLS] + b)``
  (the pooler), dropout, then a linear layer to C labels (C = 1 for regression).
- ``tag``: :class:`TaggingHead` — dropout, then a linear layer on every token.
- ``span``: :class:`SpanHead` — learned start and end vectors ``S, E``: the start score of token
  i is ``S · h_i``, its end score ``E · h_i`` (one linear layer to 2 outputs).
- ``choice``: :class:`ChoiceHead` — every (context, ending) pair is encoded separately; the
  pooled vector gets one score; a softmax over the choices.

Heads read ``encoded.last`` (or any layer list a caller mixes), so a new backbone gets every
head and a new head works on every backbone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from muppets.nn.block import init_weights
from muppets.nn.dropout import dropout
from muppets.nn.encoded import Encoded
from muppets.nn.pooler import Pooler
from muppets.sentence.pooling import pool_one

KINDS = ("classify", "pair", "regress", "tag", "span", "choice")
POOLS = ("first", "last", "mean", "max")  # sentence vector: BERT [CLS] pooler | GPT last token | token mean | token max


def last_token(encoded: Encoded) -> torch.Tensor:
    """The top-layer state of each row's last real token (right padding): ``(B, H)``.

    A left-to-right model has read the whole input only there: GPT's classifiers read the
    final ``extract`` token (Radford et al. 2018, §3.3).
    """
    last = encoded.mask.long().sum(1).clamp(min=1) - 1  # (B,)
    return encoded.last[torch.arange(last.shape[0], device=last.device), last]  # (B, H)


def mean_tokens(encoded: Encoded) -> torch.Tensor:
    """The top layer averaged over each row's real tokens: ``(B, H)``."""
    mask = encoded.mask.to(encoded.last.dtype)[..., None]  # (B, T, 1)
    return (encoded.last * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class SentenceVector(nn.Module):
    """The vector a sentence-level head reads: ``(B, T, H)`` Encoded -> ``(B, H)``.

    ``first``: BERT's pooler, ``tanh(W h_[CLS] + b)``. ``last``: GPT's final-token state, as is.
    ``mean``: the mean of the top layer over the real tokens (how sentence-transformers models
    such as all-MiniLM-L6-v2 were trained to be read). ``max``: the elementwise maximum of the
    top layer over the real tokens (the BiLSTM of Tang et al. 2019, §3).
    ``orderings > 1``: the input rows come in groups (GPT similarity: both orders of a text
    pair, §3.3) whose vectors are added: ``(B * orderings, H) -> (B, H)``.
    """

    def __init__(self, hidden_size: int, pool: str = "first", orderings: int = 1, pooler_act: str = "tanh") -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, not {pool!r}")
        self.pool, self.orderings = pool, orderings
        self.pooler = Pooler(hidden_size, pooler_act) if pool == "first" else None

    def forward(self, encoded: Encoded) -> torch.Tensor:
        if self.pooler is not None:
            v = self.pooler(encoded.last)  # (B*R, H)
        elif self.pool == "mean":
            v = mean_tokens(encoded)
        elif self.pool == "max":
            v = pool_one(encoded.last, encoded.mask, "max")
        else:
            v = last_token(encoded)
        if self.orderings > 1:
            v = v.view(-1, self.orderings, v.shape[-1]).sum(1)  # (B, H)
        return v


class ClassificationHead(nn.Module):
    """Sentence vector -> dropout -> ``(B, num_labels)`` logits (``num_labels=1``: a regression).

    ``mlp_size > 0``: a ReLU layer of that width between the sentence vector and the output,
    ``relu(W v + b)`` (the MLP of Tang et al. 2019's BiLSTM); 0 (BERT's heads): none.
    """

    def __init__(self, hidden_size: int, num_labels: int, dropout_p: float = 0.1,
                 pool: str = "first", orderings: int = 1, pooler_act: str = "tanh", mlp_size: int = 0) -> None:
        super().__init__()
        self.vector = SentenceVector(hidden_size, pool, orderings, pooler_act)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, mlp_size), nn.ReLU()) if mlp_size > 0 else None
        self.classifier = nn.Linear(mlp_size or hidden_size, num_labels)
        self.dropout_p = dropout_p

    @property
    def pooler(self) -> Pooler | None:
        return self.vector.pooler

    def forward(self, encoded: Encoded) -> torch.Tensor:
        pooled = dropout(self.vector(encoded), self.dropout_p, self.training)  # (B, H)
        if self.mlp is not None:
            pooled = dropout(self.mlp(pooled), self.dropout_p, self.training)  # (B, M)
        return self.classifier(pooled)  # (B, C)


class TaggingHead(nn.Module):
    """Every token -> dropout -> ``(B, T, num_labels)`` logits."""

    def __init__(self, hidden_size: int, num_labels: int, dropout_p: float = 0.1) -> None:
        super().__init__()
        self.classifier = nn.Linear(hidden_size, num_labels)
        self.dropout_p = dropout_p

    def forward(self, encoded: Encoded) -> torch.Tensor:
        return self.classifier(dropout(encoded.last, self.dropout_p, self.training))  # (B, T, C)


class SpanHead(nn.Module):
    """Start and end scores per token: ``(B, T, 2)`` (``[..., 0]`` start, ``[..., 1]`` end)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.qa_outputs = nn.Linear(hidden_size, 2)  # rows: the start vector S and end vector E

    def forward(self, encoded: Encoded) -> torch.Tensor:
        return self.qa_outputs(encoded.last)  # (B, T, 2)


class ChoiceHead(nn.Module):
    """Sentence vector of each ``(context, choice)`` row -> one score; reshaped to ``(B, C)``
    by :class:`TaskModel` (the backbone sees ``B * C`` rows)."""

    def __init__(self, hidden_size: int, dropout_p: float = 0.1, pool: str = "first", pooler_act: str = "tanh") -> None:
        super().__init__()
        self.vector = SentenceVector(hidden_size, pool, pooler_act=pooler_act)
        self.classifier = nn.Linear(hidden_size, 1)
        self.dropout_p = dropout_p

    @property
    def pooler(self) -> Pooler | None:
        return self.vector.pooler

    def forward(self, encoded: Encoded) -> torch.Tensor:
        pooled = dropout(self.vector(encoded), self.dropout_p, self.training)  # (B*C, H)
        return self.classifier(pooled).squeeze(-1)  # (B*C,)


def build_head(kind: str, hidden_size: int, num_labels: int = 0, dropout_p: float = 0.1,
               init_std: float = 0.02, pool: str = "first", orderings: int = 1,
               pooler_act: str = "tanh", mlp_size: int = 0) -> nn.Module:
    """The head for a task ``kind`` (see :data:`KINDS`), freshly initialised.

    ``pool`` / ``orderings``: how sentence-level heads read the backbone (see :class:`SentenceVector`);
    ``pooler_act``: the activation of the ``first`` pooler (the model family's, :class:`Pooler`);
    ``mlp_size``: a ReLU layer of classify / pair / regress heads (:class:`ClassificationHead`).
    """
    if kind in ("classify", "pair"):
        head: nn.Module = ClassificationHead(hidden_size, num_labels, dropout_p, pool, orderings, pooler_act, mlp_size)
    elif kind == "regress":
        head = ClassificationHead(hidden_size, 1, dropout_p, pool, orderings, pooler_act, mlp_size)
    elif kind == "tag":
        head = TaggingHead(hidden_size, num_labels, dropout_p)
    elif kind == "span":
        head = SpanHead(hidden_size)
    elif kind == "choice":
        head = ChoiceHead(hidden_size, dropout_p, pool, pooler_act)
    else:
        raise ValueError(f"unknown task kind {kind!r}; expected one of {KINDS}")
    init_weights(head, init_std)
    return head


@dataclass
class TaskOutput:
    """logits: ``(B, C)`` classify/pair/choice, ``(B,)`` regress, ``(B, T, C)`` tag,
    ``(B, T, 2)`` span. With labels: ``task_loss``, the mean task loss over the batch's labelled
    units; ``aux_sums``, each auxiliary term (GPT's ``"lm"``) weighted and SUMMED over its own
    units; ``loss``, the task loss plus each auxiliary term's mean over this batch."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None
    task_loss: torch.Tensor | None = None
    aux_sums: dict[str, torch.Tensor] = field(default_factory=dict)


def task_loss(kind: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The standard loss of each kind (ignore index -100 for tags).

    labels: ``(B,)`` class ids (classify/pair/choice), ``(B,)`` floats (regress), ``(B, T)``
    tag ids (tag), ``(B, 2)`` start/end token positions (span: mean of the two CE losses).
    """
    if kind == "regress":
        return F.mse_loss(logits.float(), labels.float())
    if kind == "tag":
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.reshape(-1), ignore_index=-100)
    if kind == "span":
        T = logits.shape[1]
        starts, ends = labels[:, 0].clamp(0, T - 1), labels[:, 1].clamp(0, T - 1)
        return 0.5 * (F.cross_entropy(logits[..., 0].float(), starts) + F.cross_entropy(logits[..., 1].float(), ends))
    return F.cross_entropy(logits.float(), labels)


class TaskModel(nn.Module):
    """A backbone (anything returning ``Encoded``) + one task head."""

    lm_orderings = 0  # an auxiliary LM term reads the first of every N input rows (0 = no such term; GPT)
    fresh_head: list[str] = []  # on loading: why head parameters started fresh, one line each (empty: all were read)
    family = ""  # the muppets.families name that built it ("" = the registry's default); saving writes that family

    def __init__(self, backbone: nn.Module, head: nn.Module, kind: str) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown task kind {kind!r}; expected one of {KINDS}")
        self.backbone, self.head, self.kind = backbone, head, kind

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> TaskOutput:
        """Inputs ``(B, T)``; for ``choice`` ``(B, C, T)`` (each choice a row). See
        :func:`task_loss` for the labels of each kind."""
        encoded, flat_ids = self.encode(input_ids, token_type_ids, attention_mask)
        return self.from_encoded(encoded, flat_ids, input_ids.shape, labels)

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> tuple[Encoded, torch.Tensor]:
        """The backbone's output for the inputs, rows of ``(B, R, T)`` inputs flattened to
        ``(B*R, T)``; returns it with the flattened ids (what :meth:`from_encoded` takes)."""
        if input_ids.dim() == 3:  # choices, or orderings of a pair: (B, R, T) -> (B*R, T)
            T = input_ids.shape[-1]
            input_ids, token_type_ids, attention_mask = (
                None if x is None else x.reshape(-1, T) for x in (input_ids, token_type_ids, attention_mask))
        return self.backbone(input_ids, token_type_ids, attention_mask), input_ids

    def from_encoded(self, encoded: Encoded, input_ids: torch.Tensor, shape: torch.Size,
                     labels: torch.Tensor | None = None) -> TaskOutput:
        """The head's output (and losses) on an encoding from :meth:`encode`; ``shape`` is the
        original input shape. Tasks on the same inputs can share one encoding (multi-task)."""
        logits = self.head(encoded)
        if self.kind == "choice":
            logits = logits.view(shape[0], shape[1])  # (B, C)
        elif self.kind == "regress":
            logits = logits.squeeze(-1)  # (B,)
        if labels is None:
            return TaskOutput(logits=logits)
        task = task_loss(self.kind, logits, labels)
        aux = self.auxiliary_losses(encoded, input_ids)
        loss = task + sum(total / units.clamp(min=1) for total, units in aux.values())
        return TaskOutput(logits, loss, task, {name: total for name, (total, _) in aux.items()})

    def auxiliary_losses(self, encoded: Encoded, input_ids: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Training terms beside the task loss: ``{name: (weighted SUM over its units, number
        of units)}``; none here (GPT adds its auxiliary LM loss, ``"lm"``)."""
        return {}
