"""Attention maps: capture them from any muppets transformer, and the analyses of what they show.

Capture is opt-in and leaves the model's outputs as they are: inside
``with capture_attention(model) as cap:`` every :class:`~muppets.nn.attention.SelfAttention`
also computes its probabilities explicitly and hands them over (one ``(B, heads, T, S)`` tensor
per layer and forward call); outside it, the forward never leaves SDPA's fused kernel::

    with capture_attention(backbone) as cap:
        backbone(ids, segments, mask)
    cap.layers[3]                       # (B, heads, T, T) of the 4th block (layer 4), rows = from, cols = to

For one text (or a sentence pair), :func:`load_attention_model` + :meth:`AttentionModel.view`
give an :class:`AttentionView`: tokens, segments and ``probs (L, heads, T, T)``, which the
offline page (:mod:`muppets.analysis.attention_page`) and the plots
(:mod:`muppets.analysis.attention_plots`) draw. The analyses reproduce two observations:

* Clark et al. 2019, "What Does BERT Look At?", §3: many heads put most of their attention on
  ``[CLS]`` (the first token), on ``[SEP]`` or on punctuation — :func:`attention_shares`;
* Vig & Belinkov 2019: the attention from a pronoun to the nouns it may refer to ("The nurse
  said that she …") — :func:`pronoun_attention`.

Layers are numbered as ``muppets probe`` and ``muppets embed`` number them (and as transformers'
``hidden_states``, whose ``attentions[l - 1]`` is layer ``l``): layer ``l`` is the ``l``-th
transformer layer, whose output is their layer ``l``; their layer 0 is the embeddings, which have
no attention, so attention layers run from 1 (:data:`FIRST_LAYER`) to L everywhere (API, command
line, page, plots, JSON), and ``probs[l - 1]`` holds layer ``l``. Heads count from 0.
"""

from __future__ import annotations

import functools
import logging
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from muppets.analysis import FIRST_LAYER  # 1: the first transformer layer (0 is the embeddings)
from muppets.errors import ConfigError
from muppets.nn.attention import SelfAttention

log = logging.getLogger(__name__)



# ----------------------------------------------------------------------------- capture


@dataclass
class AttentionCapture:
    """What :func:`capture_attention` collected: per forward call, one tensor per layer."""

    num_layers: int
    calls: list[list[torch.Tensor]] = field(default_factory=list)  # [call][layer] (B, heads, T, S)

    @property
    def layers(self) -> list[torch.Tensor]:
        """The probabilities of the most recent forward call, one ``(B, heads, T, S)`` per layer."""
        if not self.calls:
            raise ConfigError("capture_attention: the model was not run inside the `with` block")
        return self.calls[-1]

    def _add(self, layer: int, probs: torch.Tensor) -> None:
        if layer == 0 or not self.calls:  # the first block starts a new forward call
            self.calls.append([])
        self.calls[-1].append(probs)


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[AttentionCapture]:
    """Record the attention probabilities of every self-attention layer of ``model`` (in the
    order of ``model.modules()``, which is the order of its blocks) while the block runs."""
    modules = [m for m in model.modules() if isinstance(m, SelfAttention)]
    if not modules:
        raise ConfigError(f"{type(model).__name__} has no attention layers to capture")
    if any(m.record is not None for m in modules):
        raise ConfigError("capture_attention: this model is already being captured")
    capture = AttentionCapture(len(modules))
    for i, module in enumerate(modules):
        module.record = functools.partial(capture._add, i)
    try:
        yield capture
    finally:
        for module in modules:
            del module.record  # back to the class default, None: the fused path


# ----------------------------------------------------------------------------- one input's view


@dataclass
class AttentionView:
    """The attention of one input.

    tokens: the ``T`` pieces as shown (BERT's ``##`` kept; GPT's pieces as text, spaces stripped).
    probs: ``(L, heads, T, T)`` float32; ``probs[l - 1, h, i, j]`` = attention from token i to
        token j in layer ``l`` (numbered from :data:`FIRST_LAYER`), head ``h``: :meth:`head`.
    segments: per token 0 (sentence A) or 1 (sentence B).
    starts: per token, whether it begins a word (False for a continuation piece).
    special: per token, whether it is a special token ([CLS], [SEP], <|endoftext|>, …).
    """

    tokens: list[str]
    probs: np.ndarray
    segments: list[int]
    starts: list[bool]
    special: list[bool]
    model: str = ""  # shown in the page title
    kind: str = "bert"  # the model family (muppets.families): bert, roberta, gpt …
    causal: bool = False  # left-to-right attention (GPT), shown as such on the page

    def __post_init__(self) -> None:
        T = len(self.tokens)
        if self.probs.ndim != 4 or self.probs.shape[2:] != (T, T):
            raise ConfigError(f"attention probs of shape {self.probs.shape} do not fit {T} tokens "
                              "(expected (layers, heads, T, T))")
        for name in ("segments", "starts", "special"):
            if len(getattr(self, name)) != T:
                raise ConfigError(f"{name}: {len(getattr(self, name))} values for {T} tokens")

    @property
    def num_layers(self) -> int:
        return self.probs.shape[0]

    @property
    def num_heads(self) -> int:
        return self.probs.shape[1]

    @property
    def is_pair(self) -> bool:
        return any(s == 1 for s in self.segments)

    @property
    def layer_numbers(self) -> list[int]:
        """The layers' numbers, ``FIRST_LAYER .. L``."""
        return list(range(FIRST_LAYER, FIRST_LAYER + self.num_layers))

    def check_head(self, layer: int, head: int) -> None:
        """Raise a ConfigError unless layer ``layer`` (from :data:`FIRST_LAYER`) and head ``head``
        (from 0) exist."""
        if not (FIRST_LAYER <= layer < FIRST_LAYER + self.num_layers and 0 <= head < self.num_heads):
            embeddings = " (layer 0 is the embeddings, which have no attention)" if layer == 0 else ""
            raise ConfigError(f"layer {layer}, head {head}: the model has layers {FIRST_LAYER}.."
                              f"{FIRST_LAYER + self.num_layers - 1} and heads 0..{self.num_heads - 1}{embeddings}")

    def head(self, layer: int, head: int) -> np.ndarray:
        """``(T, T)``: the attention of layer ``layer`` (from :data:`FIRST_LAYER`), head ``head``;
        rows = from, columns = to."""
        self.check_head(layer, head)
        return self.probs[layer - FIRST_LAYER, head]

    def find_word(self, word: str, after: int = -1) -> list[int]:
        """Positions of the pieces of the first whole-word occurrence of ``word`` (any case)
        after position ``after``; ConfigError naming the tokens if there is none."""
        target = word.strip().lower()
        words = _words(self)
        for span in words:
            if span[0] > after and "".join(_bare(self.tokens[i]) for i in span).lower() == target:
                return span
        raise ConfigError(f"word {word!r} is not among the tokens: {' '.join(self.tokens)}")


def _bare(token: str) -> str:
    """A piece without its continuation marker."""
    return token[2:] if token.startswith("##") and len(token) > 2 else token


def _words(view: AttentionView) -> list[list[int]]:
    """Group piece positions into words (a special token is a word of its own)."""
    words: list[list[int]] = []
    for i, start in enumerate(view.starts):
        if start or not words or view.special[i] or view.special[i - 1]:
            words.append([i])
        else:
            words[-1].append(i)
    return words


# ----------------------------------------------------------------------------- models


@dataclass
class AttentionModel:
    """A transformer backbone with its tokenizer, ready to give :class:`AttentionView` s;
    ``kind`` is its family's name (:mod:`muppets.families`)."""

    backbone: nn.Module
    tokenizer: object
    kind: str
    name: str

    @property
    def family(self):
        from muppets import families

        return families.get(self.kind)

    @property
    def max_tokens(self) -> int:
        return self.backbone.cfg.max_positions

    def encode(self, text: str, pair: str | None = None) -> tuple[list[int], list[int]]:
        """Ids and segments: an encoder's own template (BERT ``[CLS] A [SEP] (B [SEP])``,
        RoBERTa ``<s> A </s></s> B </s>``; the segment shown is 1 after the first separator);
        GPT the text (then `` B``)."""
        if not text.strip() or (pair is not None and not pair.strip()):
            raise ConfigError("attention: the text (and the pair, if given) may not be empty")
        tok = self.tokenizer
        if not self.family.causal:
            ids = tok.encode_for_model(text, pair)["input_ids"]
            cut = ids.index(tok.sep_id) + 1 if pair is not None else len(ids)
            a, b = ids[:cut], ids[cut:]
        else:
            a = tok.encode(text)
            space = "" if tok.add_prefix_space else " "
            b = tok.encode(space + pair.strip()) if pair is not None else []
        if len(a) + len(b) > self.max_tokens:
            raise ConfigError(f"the input has {len(a) + len(b)} tokens; the model {self.name} reads at "
                              f"most {self.max_tokens}")
        return a + b, [0] * len(a) + [1] * len(b)

    def view(self, text: str, pair: str | None = None) -> AttentionView:
        """The attention of every layer and head for ``text`` (and ``pair``, its sentence B)."""
        ids, segments = self.encode(text, pair)
        batch = torch.tensor([ids])  # (1, T)
        with torch.inference_mode(), capture_attention(self.backbone) as cap:
            if self.family.token_types:
                self.backbone(batch, torch.tensor([segments]))
            else:
                self.backbone(batch)
        probs = torch.cat(cap.layers).float().numpy()  # (L, heads, T, T)
        tokens, starts, special = self._pieces(ids)
        return AttentionView(tokens, probs, segments, starts, special, self.name, self.kind, self.family.causal)

    def _pieces(self, ids: Sequence[int]) -> tuple[list[str], list[bool], list[bool]]:
        """Shown tokens, word starts and special flags of ``ids``."""
        tok = self.tokenizer
        special_ids = set(tok.special_ids.values())
        special = [i in special_ids for i in ids]
        if hasattr(tok, "is_continuation"):  # WordPiece: a piece that continues a word starts with ##
            tokens = [tok.id_to_token(i) or "?" for i in ids]
            return tokens, [not t.startswith("##") for t in tokens], special
        texts = [tok.decode([i]) for i in ids]
        return [t.strip() or t for t in texts], _gpt_word_starts(texts), special


def _char_class(c: str) -> str:
    return "letter" if c.isalpha() else "digit" if c.isdigit() else "space" if c.isspace() else "other"


def _gpt_word_starts(texts: Sequence[str]) -> list[bool]:
    """Whether each GPT-2 piece begins a word, as its pre-tokenizer cuts text: at a space, or
    where letters, digits and other characters meet (``"bank."`` is two words).

    >>> _gpt_word_starts(["The", " nur", "se", ".", " 20", "26"])
    [True, True, False, True, True, False]
    """
    starts = []
    for k, text in enumerate(texts):
        previous = texts[k - 1] if k else ""
        starts.append(not previous or not text or text[0].isspace()
                      or _char_class(text[0]) != _char_class(previous[-1]))
    return starts


def load_attention_model(name: str | Path) -> AttentionModel:
    """The transformer ``name`` points at (any family of :mod:`muppets.families`): an HF
    directory, ``minilm``, or a muppets run."""
    from muppets import families
    from muppets.transfer.embedders import locate_model

    kind, path = locate_model(name)
    if not families.is_family(kind):
        raise ConfigError(f"model {str(name)!r} is a {kind} model, which has no attention; "
                          f"attention needs a transformer ({', '.join(f.name for f in families.families())})")
    family = families.get(kind)
    backbone, tok = family.load(path).backbone, family.tokenizer(path)
    log.info("attention of the %s model at %s", kind, path)
    return AttentionModel(backbone.eval(), tok, kind, str(name))


# ----------------------------------------------------------------------------- analyses


def is_punctuation(token: str) -> bool:
    """A piece made only of punctuation characters (Unicode category P*), markers stripped.

    >>> is_punctuation("."), is_punctuation("##,"), is_punctuation("[SEP]"), is_punctuation("a.")
    (True, True, False, False)
    """
    bare = _bare(token).strip()
    return bool(bare) and all(unicodedata.category(c).startswith("P") for c in bare)


SHARE_TARGETS: dict[str, Callable[[AttentionView], np.ndarray]] = {
    "first": lambda v: np.arange(len(v.tokens)) == 0,
    "sep": lambda v: np.array([s and t in ("[SEP]", "</s>") for t, s in zip(v.tokens, v.special)]),
    "punct": lambda v: np.array([not s and is_punctuation(t) for t, s in zip(v.tokens, v.special)]),
}


def attention_share(views: Sequence[AttentionView], targets: Callable[[AttentionView], np.ndarray]) -> np.ndarray:
    """Mean, over every token of every view, of the attention mass a head puts on the positions
    ``targets(view)`` marks (a ``(T,)`` bool array): ``(L, heads)`` in [0, 1]."""
    if not views:
        raise ConfigError("attention_share: no views")
    total, count = 0.0, 0
    for view in views:
        marked = np.asarray(targets(view), dtype=bool)
        total = total + view.probs[..., marked].sum(-1).sum(-1)  # (L, heads): summed over from-tokens
        count += len(view.tokens)
    return np.asarray(total / count, dtype=np.float64)


def attention_shares(views: Sequence[AttentionView]) -> dict[str, np.ndarray]:
    """Clark et al. 2019, Fig. 2: per layer and head ``(L, heads)``, the average attention on the
    first token (``first``: [CLS] for BERT), on ``[SEP]`` (``sep``) and on punctuation (``punct``)."""
    return {name: attention_share(views, target) for name, target in SHARE_TARGETS.items()}


@dataclass
class PronounAttention:
    """Attention from a pronoun to candidate nouns (Vig & Belinkov 2019, "she" -> "nurse").

    weights: ``(C, L, heads)``: for each candidate, the attention from the pronoun's first piece
    to all the candidate's pieces (summed), in every layer and head (``weights[c, l - 1]`` is
    layer ``l``, numbered from :data:`FIRST_LAYER`).
    """

    pronoun: str
    candidates: list[str]
    weights: np.ndarray

    def summary(self) -> dict[str, dict]:
        """Per candidate: the max and mean over all heads, and where the max is (``[layer, head]``,
        the layer numbered from :data:`FIRST_LAYER`); the per-layer lists start at that layer."""
        out = {}
        for name, w in zip(self.candidates, self.weights):
            layer, head = np.unravel_index(int(w.argmax()), w.shape)
            out[name] = {"max": float(w.max()), "mean": float(w.mean()), "max_at": [int(layer) + FIRST_LAYER, int(head)],
                         "max_per_layer": w.max(1).round(6).tolist(), "mean_per_layer": w.mean(1).round(6).tolist()}
        return out


def pronoun_attention(view: AttentionView, pronoun: str, candidates: Sequence[str]) -> PronounAttention:
    """How much the first occurrence of ``pronoun`` attends to each of ``candidates`` (the first
    occurrence of each word, anywhere in the input: a causal model sees only those before it)."""
    if not candidates:
        raise ConfigError("pronoun_attention: no candidate words")
    source = view.find_word(pronoun)[0]
    weights = [view.probs[:, :, source, view.find_word(c)].sum(-1) for c in candidates]  # each (L, heads)
    return PronounAttention(pronoun, list(candidates), np.stack(weights))
