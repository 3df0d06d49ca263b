"""Zero-shot prompting: continuation log-probabilities by hand, length-normalised choice, Q/A
and translation prompts cut at the line end, BLEU by hand, and the command on real data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from muppets.cli import main as cli_main
from muppets.interop.hf_gpt import save_hf_gpt
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.tasks.spec import ChoiceExample, SpanExample
from muppets.tokenizers import ByteLevelBPETokenizer
from muppets.transfer import zeroshot

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_finetune import CORPUS  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def lm():
    tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=320, min_frequency=1)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, max_position_embeddings=40, hidden_size=32, num_layers=2,
                    num_heads=4, intermediate_size=64, initializer_range=0.2)
    return GPTLanguageModel(cfg).eval(), tok


def test_continuation_logprobs_by_hand_and_left_cut(lm):
    model, tok = lm
    scores = zeroshot.continuation_logprobs(model, tok, ["the movie was", "good"], [" good", " and the plot"])
    for (ctx, cont), (s, n) in zip([("the movie was", " good"), ("good", " and the plot")], scores):
        c, x = tok.encode(ctx), tok.encode(cont)
        with torch.no_grad():
            logp = model(torch.tensor([c + x])).logits[0].log_softmax(-1)
        ref = sum(float(logp[len(c) + i - 1, t]) for i, t in enumerate(x))
        assert n == len(x) and s == pytest.approx(ref, rel=1e-5)
    long_ctx = "the movie was " * 30  # longer than the 40 positions: cut on the left
    (s, n), = zeroshot.continuation_logprobs(model, tok, [long_ctx], [" good"])
    ids = (tok.encode(long_ctx) + tok.encode(" good"))[-40:]
    assert n == len(tok.encode(" good"))
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits[0].log_softmax(-1)
    ref = sum(float(logp[40 - n - 1 + i, ids[40 - n + i]]) for i in range(n))
    assert s == pytest.approx(ref, rel=1e-5)


def test_choose_uses_the_mean_log_probability(lm):
    model, tok = lm
    ex = ChoiceExample("c", "the movie was", ["good", "really quite dull", "a film"], 0, "toy")
    scores = zeroshot.continuation_logprobs(model, tok, [ex.context] * 3, [" " + e for e in ex.endings])
    best = max(range(3), key=lambda k: scores[k][0] / scores[k][1])
    assert zeroshot.choose(model, tok, [ex]) == [best]


def test_answer_and_translate_stop_at_the_line_end(lm):
    model, tok = lm
    ex = SpanExample("q", "where did john go ?", "john went to paris .", [], "", "toy")
    assert zeroshot.qa_prompt(ex.context, ex.question) == "john went to paris .\nQ: where did john go ?\nA:"
    out = zeroshot.answer(model, tok, [ex, ex], max_new_tokens=6)
    assert len(out) == 2 and out[0] == out[1] and "\n" not in out[0]
    out = zeroshot.translate(model, tok, ["good film"], [("bad", "mauvais")], max_new_tokens=6)
    assert len(out) == 1 and "\n" not in out[0]


def test_bleu_by_hand():
    assert zeroshot.corpus_bleu(["the cat sat on the mat ."], ["the cat sat on the mat ."]) == pytest.approx(1.0)
    # p1..p4 = 4/5, 3/4, 2/3, 1/2; same length: no brevity penalty -> (0.2) ** 0.25
    assert zeroshot.corpus_bleu(["a b c d e"], ["a b c d f"]) == pytest.approx(0.2 ** 0.25)
    # hypothesis shorter than the reference: penalty exp(1 - 6/5)
    import math
    assert zeroshot.corpus_bleu(["a b c d e"], ["a b c d e f"]) == pytest.approx(math.exp(1 - 6 / 5))
    assert zeroshot.corpus_bleu(["x y"], ["a b c d"]) == 0.0


def test_zeroshot_command_on_shared_data(lm, tmp_path, capsys):
    model, tok = lm
    d = save_hf_gpt(model, tmp_path / "m", tok)
    assert cli_main(["zeroshot", "hellaswag", "--model", str(d), "--limit", "4", "--out", str(tmp_path / "h.json")]) == 0
    result = json.loads((tmp_path / "h.json").read_text())
    assert result["items"] == 4 and 0.0 <= result["accuracy"] <= 1.0 and result["chance"] == 0.25
    assert cli_main(["zeroshot", "translate", "--model", str(d), "--limit", "2", "--shots", "1"]) == 0
    assert '"bleu"' in capsys.readouterr().out


def test_zeroshot_squad_command_scores_every_item(lm, tmp_path, capsys):
    """``muppets zeroshot squad`` runs to the end (it crashed in scoring: lists where the
    metric wants {id: answer} mappings) and its EM/F1 are the official scores of the answers."""
    from muppets.metrics import squad_exact_match, squad_f1
    from muppets.tasks import load_task

    model, tok = lm
    d = save_hf_gpt(model, tmp_path / "m", tok)
    out = tmp_path / "s.json"
    assert cli_main(["zeroshot", "squad", "--model", str(d), "--limit", "3", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads(out.read_text())
    assert printed == written
    items = load_task("squad")["dev"][:3]
    preds = zeroshot.answer(model, tok, items)
    golds = [[a.text for a in ex.answers] for ex in items]
    em = sum(squad_exact_match(p, g) for p, g in zip(preds, golds)) / 3
    f1 = sum(squad_f1(p, g) for p, g in zip(preds, golds)) / 3
    assert written["items"] == 3 and written["shots"] == 0
    assert written["exact_match"] == pytest.approx(em) and written["f1"] == pytest.approx(f1)
    # a solved example in the prompt still scores every item
    assert cli_main(["zeroshot", "squad", "--model", str(d), "--limit", "2", "--shots", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 2
