"""The offline attention page: one HTML file, scripts and styles inlined, nothing fetched.

bertviz's users asked for exactly this (a standalone export, bertviz #41 and #8; a page that is
not blank without its CDN, #63). The page has

* a **head view**: the tokens twice, lines from each token (left) to the tokens it attends to
  (right) in the chosen layer, one colour per selected head; a sentence pair's A and B tokens
  are coloured apart and a filter keeps A → B, B → A … lines only; hovering a token keeps only
  its lines and lists its top targets;
* a **model view**: every layer × head as a small map (row = from, column = to); clicking one
  opens it in the head view.

The probabilities travel as one base64 string of uint8 values, ``round(p * 255)``
(layer, head, from, to order), decoded in the browser: a 128-token, 6-layer × 12-head page is
about 1.6 MB. Layers are numbered from 1 (:data:`~muppets.analysis.attention.FIRST_LAYER`, as
``muppets probe`` numbers them), heads from 0. The URL hash ``#layer=3&heads=0,5`` selects what the
head view shows::

    view = load_attention_model("minilm").view("The nurse said that she was tired.")
    write_page(view, "attention.html", layer=3, heads=[0])
"""

from __future__ import annotations

import base64
import html
import json
import logging
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from muppets.analysis.attention import FIRST_LAYER, AttentionView
from muppets.errors import ConfigError

log = logging.getLogger(__name__)

TEMPLATE = "attention_page.html"
LARGE_PAGE = 20_000_000  # bytes; a browser still opens it, slowly: say so
# One colour per head (the page's lines and swatches, and the PNGs of attention_plots).
HEAD_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
               "#7b4173", "#3182bd"]
SEGMENT_COLORS = ["#1a3d6d", "#7a3e00"]  # token text of sentence A / B


def quantize(probs: np.ndarray) -> bytes:
    """Probabilities in [0, 1] -> uint8 ``round(p * 255)``, C order, as bytes."""
    return np.rint(np.clip(probs, 0.0, 1.0) * 255.0).astype(np.uint8).tobytes()


def page_data(view: AttentionView, layer: int = FIRST_LAYER, heads: Sequence[int] | None = None, title: str = "") -> dict:
    """Everything the page's script reads (JSON-able), with the probabilities quantised."""
    heads = list(range(view.num_heads)) if heads is None else [int(h) for h in heads]
    for h in heads:
        view.check_head(layer, h)
    return {
        "title": title or f"Attention: {view.model or 'model'}",
        "kind": view.kind,
        "causal": view.causal,
        "pair": view.is_pair,
        "tokens": list(view.tokens),
        "segments": [int(s) for s in view.segments],
        "layers": view.num_layers,
        "heads": view.num_heads,
        "layer": int(layer),  # the layer's number, from firstLayer
        "firstLayer": FIRST_LAYER,
        "selected": heads,
        "colors": HEAD_COLORS,
        "segmentColors": SEGMENT_COLORS,
        "probs": base64.b64encode(quantize(view.probs)).decode("ascii"),
    }


def page_html(view: AttentionView, layer: int = FIRST_LAYER, heads: Sequence[int] | None = None, title: str = "") -> str:
    """The page as one string (see the module docstring)."""
    data = page_data(view, layer, heads, title)
    # "</" would close the <script> element early; "<\/" is the same JSON string.
    blob = json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")
    template = resources.files("muppets.analysis").joinpath(TEMPLATE).read_text(encoding="utf-8")
    if "__MUPPETS_DATA__" not in template:
        raise ConfigError(f"{TEMPLATE}: the page template lost its data placeholder")
    # Data first, then the title, each once: neither can then land inside the other.
    return template.replace("__MUPPETS_DATA__", blob, 1).replace("__TITLE__", html.escape(data["title"]), 1)


def write_page(view: AttentionView, path: str | Path, layer: int = FIRST_LAYER, heads: Sequence[int] | None = None,
               title: str = "") -> Path:
    """Write :func:`page_html` to ``path`` (parent directories created); returns the path."""
    path = Path(path)
    text = page_html(view, layer, heads, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if len(text) > LARGE_PAGE:
        log.warning("%s is %.0f MB (%d tokens, %d layers x %d heads); a shorter input makes a lighter page",
                    path, len(text) / 1e6, len(view.tokens), view.num_layers, view.num_heads)
    return path
