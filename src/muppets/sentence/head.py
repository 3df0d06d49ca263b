"""A model directory's sentence head: the modules after its Transformer, read and written.

:func:`read_head` turns ``modules.json`` (+ each module's folder and ``sentence_bert_config.json``)
into a :class:`SentenceHead`, the one thing ``/v1/embeddings``, the ONNX server, in-process
:func:`~muppets.sentence.encode.encode`, the prototype labeling functions and the
sentence-transformers export run. A directory without ``modules.json`` (a muppets pretraining
run, a bare HF BERT or GPT) gets mean pooling, sentence-transformers' default, and no
normalisation, unless the caller says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from muppets.config import final_path
from muppets.errors import CheckpointError, ConfigError
from muppets.sentence.modules import ST_PREFIX, Normalize, Pooling, kind_of, read_json, write_json
from muppets.sentence.pooling import MODES

log = logging.getLogger(__name__)

SETTINGS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


class SentenceHead(nn.Module):
    """Pooling, then every later module in order: ``hidden (B, T, H)``, ``mask (B, T)`` -> ``(B, D)``."""

    def __init__(self, pooling: Pooling, after: Sequence[nn.Module] = (), max_seq_length: int | None = None) -> None:
        super().__init__()
        self.pooling, self.after, self.max_seq_length = pooling, nn.ModuleList(after), max_seq_length

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.pooling(hidden, mask)  # (B, modes * H)
        for module in self.after:
            x = module(x)  # (B, D)
        return x

    @property
    def modules_in_order(self) -> list[nn.Module]:
        return [self.pooling, *self.after]

    @property
    def normalize(self) -> bool:
        return any(isinstance(m, Normalize) for m in self.after)

    def dim(self) -> int:
        """The sentence vector's width."""
        return next((m.out_features for m in reversed(self.modules_in_order) if hasattr(m, "out_features")))

    def check(self, hidden_size: int, source: str | Path) -> None:
        """Each module's input width fits the one before (the Pooling's, the backbone's)."""
        if self.pooling.dim and self.pooling.dim != hidden_size:
            raise CheckpointError(f"{source}: the Pooling module pools {self.pooling.dim}-wide vectors; "
                                  f"the backbone gives {hidden_size}")
        self.pooling.dim, width = hidden_size, self.pooling.out_features
        for m in self.after:
            if hasattr(m, "linear") and m.linear.in_features != width:
                raise CheckpointError(f"{source}: a Dense module takes {m.linear.in_features} inputs; "
                                      f"the module before it gives {width}")
            width = getattr(m, "out_features", width)

    def overridden(self, mode: str = "", normalize: bool | None = None) -> SentenceHead:
        """This head with its pooling replaced by ``mode`` and a final Normalize added or removed."""
        if mode and mode not in MODES:
            raise ConfigError(f"pooling {mode!r} is not one of {', '.join(MODES)}")
        pooling = Pooling([mode], self.pooling.dim) if mode else self.pooling
        after = [m for m in self.after if normalize is None or not isinstance(m, Normalize)]
        after += [Normalize()] if normalize else []
        return SentenceHead(pooling, after, self.max_seq_length)

    def describe(self) -> str:
        return " -> ".join(["Transformer", *(f"{m.kind}{list(m.modes) if m is self.pooling else ''}"
                                             for m in self.modules_in_order)])


def read_head(directory: str | Path, mode: str = "", normalize: bool | None = None) -> SentenceHead:
    """The head ``directory``'s sentence-transformers files declare (mean pooling without them);
    ``mode`` / ``normalize`` override it."""
    directory = Path(directory)
    path = directory / "modules.json"
    entries = read_json(path, [])
    if not isinstance(entries, list):
        raise CheckpointError(f"{path}: expected a list of modules")
    modules = [_read_module(directory, path, i, entry) for i, entry in enumerate(entries)]
    modules = [m for m in modules if m is not None]
    if modules and not isinstance(modules[0], Pooling):
        raise CheckpointError(f"{path}: the module after the Transformer is a {modules[0].kind}; muppets runs "
                              "a Pooling module there")
    pooling = modules[0] if modules else Pooling(["mean"], 0)
    head = SentenceHead(pooling, modules[1:], _max_seq_length(directory, bool(entries)))
    head = head.overridden(mode, normalize)
    log.info("sentence head of %s: %s", directory, head.describe())
    return head


def _read_module(directory: Path, source: Path, index: int, entry: object) -> nn.Module | None:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{source}: module {index} is not an object")
    kind = kind_of(entry.get("type"), source, index)
    folder = directory / str(entry.get("path", ""))
    if kind.read is None:  # the Transformer: the directory's own backbone
        if str(entry.get("path", "")) not in ("", "."):
            raise CheckpointError(f"{source}: module {index} (Transformer) has 'path' {entry.get('path')!r}; "
                                  "muppets reads the Transformer from the directory itself (path \"\")")
        if index:
            raise CheckpointError(f"{source}: the Transformer is module {index}; muppets runs it first")
        return None
    return kind.read(folder)


def _max_seq_length(directory: Path, has_modules: bool) -> int | None:
    """``sentence_bert_config.json``'s ``max_seq_length``; sentence-transformers >= 5 keeps it as
    ``tokenizer_config.json``'s ``model_max_length`` instead."""
    st = read_json(directory / "sentence_bert_config.json", {})
    value = st.get("max_seq_length") if isinstance(st, dict) else None
    if value is None and has_modules:
        tok = read_json(directory / "tokenizer_config.json", {})
        value = tok.get("model_max_length") if isinstance(tok, dict) else None
    return int(value) if isinstance(value, int) and 0 < value < 1_000_000 else None


def write_head(head: SentenceHead, directory: str | Path) -> None:
    """``modules.json``, a folder per module (``1_Pooling``, ``2_Dense`` …) and
    ``sentence_bert_config.json`` in ``directory``, beside its Transformer's files."""
    directory = Path(directory)
    entries = [{"idx": 0, "name": "0", "path": "", "type": ST_PREFIX + "Transformer"}]
    for i, module in enumerate(head.modules_in_order, 1):
        folder = f"{i}_{module.kind}"
        module.save(directory / folder)
        entries.append({"idx": i, "name": str(i), "path": folder, "type": ST_PREFIX + module.kind})
    write_json(directory / "modules.json", entries)
    settings = {"max_seq_length": head.max_seq_length, "do_lower_case": False} if head.max_seq_length else \
        {"do_lower_case": False}
    write_json(directory / "sentence_bert_config.json", settings)


def keep_sentence_files(source: str | Path, dest: str | Path) -> bool:
    """Continued pretraining / fine-tuning from ``source``: write its sentence head into ``dest``
    when ``source`` has one and ``dest``'s backbone is as wide (the head still applies).
    Returns whether it was written."""
    source, dest = Path(source), Path(dest)
    if not (source / "modules.json").is_file():
        return False
    head = read_head(source)
    config = read_json(dest / "config.json", {})
    hidden = config.get("hidden_size", config.get("n_embd"))
    if head.pooling.dim and hidden and int(hidden) != head.pooling.dim:
        log.warning("%s: its %d-wide sentence modules do not fit %s's %s-wide backbone: not kept",
                    source, head.pooling.dim, final_path(dest), hidden)
        return False
    write_head(head, dest)
    log.info("kept the sentence modules of %s in %s: %s", source, final_path(dest), head.describe())
    return True
