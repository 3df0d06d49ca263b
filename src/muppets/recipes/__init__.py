"""Pretraining recipes: ``bert_pretrain`` (MLM + NSP), ``gpt_pretrain`` (causal LM) and
``elmo_pretrain`` (character-input biLM), ``nnlm_pretrain`` (Bengio et al. 2003); word2vec
has its own ``word2vec_train`` (``muppets word2vec train``).

:func:`pick_recipe` chooses one for ``muppets pretrain CONFIG key=value …`` from the
``model.preset`` the file and overrides name (a GPT preset -> ``gpt_pretrain``, an ELMo preset
-> ``elmo_pretrain``, else BERT).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def pick_recipe(config: str | Path | None, overrides: list[str]) -> ModuleType:
    """The recipe module for a config file + overrides (BERT unless the preset is a GPT or ELMo one)."""
    from muppets.config import load_file
    from muppets.models.elmo import ELMO_PRESETS
    from muppets.models.gpt import GPT_PRESETS
    from muppets.models.nnlm import NNLM_PRESETS
    from muppets.recipes import bert_pretrain, elmo_pretrain, gpt_pretrain, nnlm_pretrain

    model = (load_file(config) if config else {}).get("model") or {}
    if not isinstance(model, dict):  # the recipe's typed loader names the file, line and value
        model = {}
    preset, init_from = str(model.get("preset", "")), str(model.get("init_from", ""))
    for item in overrides:
        key, _, value = item.partition("=")
        if key.strip() == "model.preset":
            preset = value.strip()
        if key.strip() == "model.init_from":
            init_from = value.strip()
    if preset in GPT_PRESETS or (not preset and init_from and _is_causal_directory(init_from)):
        return gpt_pretrain
    if preset in NNLM_PRESETS:
        return nnlm_pretrain
    return elmo_pretrain if preset in ELMO_PRESETS else bert_pretrain


def _is_causal_directory(name: str) -> bool:
    """Does ``model.init_from`` name an HF directory of a left-to-right family (GPT / GPT-2),
    which continues with the causal LM objective? (A directory of a model_type no family reads
    raises :class:`~muppets.errors.CheckpointError` naming its config.json.)"""
    from muppets import families
    from muppets.paths import resolve_model_path

    directory = resolve_model_path(name)
    return (directory / "config.json").is_file() and families.of_directory(directory).causal
