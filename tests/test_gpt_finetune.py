"""GPT-style fine-tuning (GPT §3.3) on the shared task pipeline: task-token layouts, both
orderings, last-token head, auxiliary LM loss, every task kind trains / saves / predicts, and
the saved backbone stays a GPT-2 directory transformers loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from muppets.heads import last_token
from muppets.interop.hf_gpt import save_hf_gpt
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.tokenizers import ByteLevelBPETokenizer
from muppets.transfer import Predictor
from muppets.transfer.features import FeatureOptions, make_features
from muppets.transfer.finetune import FinetuneConfig, run
from muppets.transfer.gpt_tasks import TASK_TOKENS, GPTTaskTokenizer, build_gpt_task_model
from muppets.transfer.models import default_orderings, family

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_finetune import CORPUS, TASKS, dropout_rates, text_task  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    """A tiny random GPT-2 with a BPE trained on the toy corpus, as an HF directory."""
    tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=320, min_frequency=1)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, max_position_embeddings=96, hidden_size=32, num_layers=2,
                    num_heads=4, intermediate_size=64, eos_token_id=tok.eos_id)
    return save_hf_gpt(GPTLanguageModel(cfg), tmp_path_factory.mktemp("tiny-gpt"), tok)


def cfg_for(model_dir: Path, run_dir: Path, **kw) -> FinetuneConfig:
    base = dict(model=str(model_dir), run_dir=str(run_dir), max_seq_len=48, batch_size=8, epochs=1,
                lr=3e-3, warmup_ratio=0.0, progress=False, log_every=0, eval_batch_size=16, device="cpu")
    return FinetuneConfig(**{**base, **kw})


def test_task_tokens_and_layouts(gpt_dir):
    tok = GPTTaskTokenizer.load(gpt_dir)
    start, delim, extract = (tok.bpe.token_to_id(t) for t in TASK_TOKENS)
    assert (tok.cls_id, tok.sep_id, tok.extract_id) == (start, delim, extract)
    assert tok.vocab_size == ByteLevelBPETokenizer.load(gpt_dir).vocab_size + 3
    one, _ = tok.encode_for_model_batch(["good movie", "a b"], ["bad", "c"], 48)
    assert one["input_ids"][0] == start and one["input_ids"][-1] == extract
    assert one["input_ids"].count(delim) == 1 and set(one["token_type_ids"]) == {0}
    assert tok.decode(one["input_ids"][1:one["input_ids"].index(delim)]) == " good movie"
    cut = tok.encode_for_model_batch(["good " * 40], None, 10)[0]["input_ids"]
    assert len(cut) == 10 and cut[-1] == extract
    data = text_task("pair", n=4)
    both = make_features("pair", data["train"], tok, FeatureOptions(48, orderings=2), ["0", "1"])
    ex = data["train"][0]
    first, second = both[0].input_ids
    assert tok.decode(first[1:first.index(delim)]) == " " + ex.text
    assert tok.decode(second[1:second.index(delim)]) == " " + ex.text_b


def test_orderings_default_and_family(gpt_dir, tmp_path):
    assert family(gpt_dir) == "gpt"
    assert default_orderings("stsb", "regress", gpt_dir) == 2
    assert default_orderings("rte", "pair", gpt_dir) == 1
    assert default_orderings("sst2", "classify", gpt_dir) == 1


def test_last_token_reads_the_extract_position():
    from muppets.nn.encoded import Encoded
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    out = last_token(Encoded([hidden], mask))
    assert torch.equal(out, torch.stack([hidden[0, 2], hidden[1, 3]]))


def test_aux_lm_loss_is_the_models_lm_loss(gpt_dir):
    tok = GPTTaskTokenizer.load(gpt_dir)
    model = build_gpt_task_model(gpt_dir, "classify", 2, tok, lm_coef=0.5).eval()
    feats = make_features("classify", text_task("classify", n=4)["train"], tok, FeatureOptions(48), ["0", "1"])
    from muppets.transfer.batching import collate
    batch = collate(feats, tok.pad_id)
    with torch.no_grad():
        out = model(**batch)
        enc = model.backbone(batch["input_ids"], None, batch["attention_mask"])
        logits = enc.last @ model.backbone.gpt.embeddings.tokens.weight.T  # (B, T, V)
        keep = batch["attention_mask"][:, 1:].bool()
        lm = F.cross_entropy(logits[:, :-1][keep], batch["input_ids"][:, 1:][keep])
        task = F.cross_entropy(out.logits, batch["labels"])
    assert out.loss.item() == pytest.approx(task.item() + 0.5 * lm.item(), rel=1e-5)
    model.lm_coef = 0.0
    with torch.no_grad():
        assert model(**batch).loss.item() == pytest.approx(task.item(), rel=1e-5)


@pytest.mark.parametrize("kind", ["classify", "pair", "regress", "tag", "span", "choice"])
def test_every_kind_trains_saves_and_predicts(kind, gpt_dir, tmp_path):
    data = TASKS[kind]()
    orderings = 2 if kind in ("pair", "regress") else 0
    summary = run(cfg_for(gpt_dir, tmp_path, epochs=2, orderings=orderings), data=data)
    assert summary["steps"] == 2 * summary["steps_per_epoch"] and summary["dev"]
    saved = [json.loads(x)["prediction"] for x in (tmp_path / "predictions.jsonl").read_text().splitlines()
             if json.loads(x)["split"] == "dev"]
    pred = Predictor(tmp_path / "best")
    assert pred.features.orderings == (orderings or 1)
    inputs = {"classify": lambda e: e.text, "pair": lambda e: (e.text, e.text_b),
              "regress": lambda e: (e.text, e.text_b), "tag": lambda e: e.tokens,
              "span": lambda e: (e.question, e.context), "choice": lambda e: (e.context, e.endings)}[kind]
    out = pred.predict([inputs(e) for e in data["dev"]])
    if kind == "span":
        assert [o["answer"] for o in out] == saved
    elif kind == "regress":
        assert np.allclose(out, saved, atol=1e-5)
    else:
        assert out == saved


def test_classify_learns_and_backbone_loads_in_transformers(gpt_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    summary = run(cfg_for(gpt_dir, tmp_path, epochs=8, lr=3e-3), data=text_task("classify", n=48))
    assert summary["dev"]["accuracy"] >= 0.9
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "best").eval()
    assert hf.config.vocab_size == GPTTaskTokenizer.load(gpt_dir).vocab_size
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "best")
    assert hf_tok.convert_tokens_to_ids("<|extract|>") == Predictor(tmp_path / "best").tokenizer.extract_id


@pytest.fixture(scope="module")
def gpt_dir_no_dropout(tmp_path_factory) -> Path:
    """The tiny GPT-2 of ``gpt_dir`` without dropout (so micro-batches see the same network)."""
    tok = ByteLevelBPETokenizer.train(CORPUS, vocab_size=320, min_frequency=1)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, max_position_embeddings=96, hidden_size=32, num_layers=2,
                    num_heads=4, intermediate_size=64, eos_token_id=tok.eos_id, hidden_dropout=0.0,
                    embedding_dropout=0.0, attention_dropout=0.0)
    return save_hf_gpt(GPTLanguageModel(cfg), tmp_path_factory.mktemp("tiny-gpt-nodrop"), tok)


def test_dropout_setting_turns_on_every_dropout_of_a_model_saved_without(gpt_dir_no_dropout):
    tok = GPTTaskTokenizer.load(gpt_dir_no_dropout)

    def rates(**kw) -> set[float]:
        return dropout_rates(build_gpt_task_model(gpt_dir_no_dropout, "classify", 2, tok, **kw))

    assert rates() == {0.0}
    assert rates(dropout=0.1) == {0.1}


def test_lm_term_is_a_token_sum_over_one_ordering(gpt_dir_no_dropout):
    """The auxiliary LM loss is its own term: lm_coef x the SUM of next-token losses over the
    real tokens of the first ordering only (each text once), normalised by their count."""
    from muppets.transfer.batching import EpochData, collate
    from muppets.transfer.finetune import FinetuneModel

    tok = GPTTaskTokenizer.load(gpt_dir_no_dropout)
    model = build_gpt_task_model(gpt_dir_no_dropout, "pair", 2, tok, orderings=2, lm_coef=0.5)
    feats = make_features("pair", text_task("pair", n=4)["train"], tok, FeatureOptions(48, orderings=2), ["0", "1"])
    batch = collate(feats, tok.pad_id)  # (4, 2, T): both orders of each pair
    data = EpochData(feats, "pair", 4, 1, 1, 0, tok.pad_id, lm_orderings=model.lm_orderings)
    first_rows = [f.input_ids[0] for f in feats]
    assert data.normalizers(batch) == {"task": 4.0, "lm": float(sum(len(r) - 1 for r in first_rows))}
    with torch.no_grad():
        sums = FinetuneModel(model)(**batch).loss_sums
        lm_sum = 0.0
        for row in first_rows:
            ids = torch.tensor([row])
            hidden = model.backbone(ids, None, torch.ones_like(ids)).last[0]  # (T, H)
            logits = hidden @ model.backbone.gpt.embeddings.tokens.weight.T  # (T, V)
            lm_sum += float(F.cross_entropy(logits[:-1], ids[0, 1:], reduction="sum"))
    assert sorted(sums) == ["lm", "task"]
    assert sums["lm"].item() == pytest.approx(0.5 * lm_sum, rel=1e-5)
    assert model.lm_orderings == 2 and build_gpt_task_model(gpt_dir_no_dropout, "pair", 2, tok, orderings=2,
                                                          lm_coef=0.0).lm_orderings == 0


def test_accumulation_equals_one_batch_with_the_lm_loss(gpt_dir_no_dropout, tmp_path):
    """GPT fine-tuning with lm_coef > 0 and two orderings: 2 micro-batches per step give the
    update of one batch of the same examples (the LM term is normalised by the global count of
    LM target tokens, not by a per-micro-batch mean times the example count)."""
    from muppets.transfer.models import load_task_model

    data = text_task("regress", n=24, seed=1)
    params = {}
    for accumulation in (1, 2):
        run_dir = tmp_path / f"acc{accumulation}"
        run(cfg_for(gpt_dir_no_dropout, run_dir, batch_size=8, accumulation=accumulation, epochs=1,
                    max_train_examples=24, orderings=2, lm_coef=0.5, lr=1e-3, clip_grad_norm=0.0), data=data)
        params[accumulation] = load_task_model(run_dir / "best").state_dict()
    start = build_gpt_task_model(gpt_dir_no_dropout, "regress", 0, GPTTaskTokenizer.load(gpt_dir_no_dropout)).state_dict()
    moved = max(float((params[1][k] - start[k]).abs().max()) for k in start if ".layers." in k)
    assert moved > 1e-4  # the transformer layers did move
    # Adam turns rounding differences in near-zero gradient entries into parameter differences
    # up to about 1e-5 (they differ by CPU); normalising the LM term per micro-batch instead of
    # by the global token count moves parameters by about 1e-3 here
    worst = max((float((v - params[2][k]).abs().max()), k) for k, v in params[1].items())
    assert worst[0] < 1e-4, worst


def test_lm_targets_doctest():
    import doctest

    from muppets.transfer import batching
    assert doctest.testmod(batching).failed == 0
