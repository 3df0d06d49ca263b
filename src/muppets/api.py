"""The notebook API behind ``import muppets``: :func:`load` a model directory as the right
object, :func:`encode` texts to sentence vectors as sentence-transformers' ``encode`` does.

Both read what the commands read (:func:`~muppets.transfer.embedders.locate_model`: a
directory as given, a muppets run's ``final/``, ``minilm``, a model id in the local Hugging Face
cache), so a notebook and ``muppets serve`` agree on what a directory is.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load(model: str | Path, device: str = "cpu") -> Any:
    """The object a model directory is for:

    =====================================================  ==========================================
    directory                                              returned
    =====================================================  ==========================================
    fine-tuned task model (``muppets finetune``'s best/,   :class:`~muppets.transfer.predict.Predictor`
    an HF ``…ForTokenClassification`` …)
    sentence-transformers layout (``modules.json``)        :class:`~muppets.sentence.encode.SentenceModel`
    pretrained BERT / RoBERTa / DistilBERT / ELECTRA /     the family's model (``.cfg``, ``.backbone``),
    GPT directory, ``minilm``                              in eval mode
    ELMo / NNLM / word2vec run, word-vector file           its :class:`~muppets.transfer.embedders.Embedder`
    ONNX export (``muppets export onnx``) of a task model  :class:`~muppets.interop.onnx_runtime.OnnxPredictor`
                                                           (the Predictor's methods, in onnxruntime)
    ONNX export of an encoder                              :class:`~muppets.interop.onnx_runtime.OnnxSentenceModel`
                                                           (``encode``, as ``SentenceModel``)
    =====================================================  ==========================================

    An export runs on the CPU, as ``muppets serve --backend onnx`` runs it (``device`` is for
    torch models). Errors name the path (:class:`~muppets.errors.ConfigError` for an unknown kind).
    """
    from muppets import families
    from muppets.interop.hf_tasks import is_task_config
    from muppets.transfer.embedders import load_embedder, locate_model

    export = _export_dir(model)
    if export is not None:
        from muppets.interop.onnx_runtime import load_export

        return load_export(export)
    kind, path = locate_model(model)
    if not families.is_family(kind):
        return load_embedder(model, device=device)
    if is_task_config(config_dict(path)):
        from muppets.transfer.predict import Predictor

        return Predictor(path, device=device)
    if (path / "modules.json").is_file():
        return sentence_model(str(path))
    return families.get(kind).load(path).to(device).eval()


def _export_dir(model: str | Path) -> Path | None:
    """``model`` when it names an ONNX export directory itself (not a model beside its ``onnx/``)."""
    from muppets.interop.onnx_export import is_export
    from muppets.paths import resolve_data_path

    if str(model) == "minilm":
        return None
    path = resolve_data_path(model)
    return path if is_export(path) else None


def config_dict(directory: Path) -> dict:
    """``directory/config.json`` as a dict; {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@functools.lru_cache(maxsize=2)
def sentence_model(model: str, pooling: str = "", normalize: bool | None = None) -> Any:
    """A :class:`~muppets.sentence.encode.SentenceModel`, kept for the next call (two at most)."""
    from muppets.sentence.encode import SentenceModel

    export = _export_dir(model)
    if export is not None:  # an encoder's ONNX export: the same vectors from onnxruntime
        from muppets.interop.onnx_runtime import OnnxSentenceModel

        return OnnxSentenceModel(export, pooling, normalize)
    return SentenceModel(model, pooling, normalize)


def encode(texts: str | Sequence[str], model: str | Path = "minilm", batch_size: int = 32,
           normalize_embeddings: bool | None = None, pooling: str = "") -> Any:
    """Sentence vectors, as ``SentenceTransformer(model).encode(texts)`` gives them: a float32
    ``(N, D)`` array for a list of texts, a ``(D,)`` vector for one text.

    ``model``: any model directory (its ``modules.json`` pooling and normalisation, else the
    family's) or ``minilm``; ``normalize_embeddings`` / ``pooling`` override the directory's.
    The model is loaded once and kept for the next call.
    """
    one = isinstance(texts, str)
    vectors = sentence_model(str(model), pooling, normalize_embeddings).encode([texts] if one else list(texts),
                                                                              batch_size)
    return vectors[0] if one else vectors
