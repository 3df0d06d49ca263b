"""BERT-mini pretraining speed: muppets vs transformers' BertForPreTraining, same run, same data.

Both models are BERT-mini (L4/H256/A4, vocab 30522 = the real bert-base-uncased WordPiece),
start from the same weights and train on the same real batches (32 x 128, MLM 15% + NSP) built
by muppets from the shared Wikipedia shards, with AdamW and gradient clipping. Timing
alternates blocks of steps between the two so both see the same machine load; the median
step time of each gives tokens/s (non-padding tokens) and their ratio.

MFU = model FLOPs per second / fp32 matmul peak measured here (the best of several large
square matmuls). Model FLOPs count the matmuls muppets performs (forward x 3 for training):
QKV/output/FFN projections and attention per token, the MLM transform and 30522-way decoder at
the masked positions only, NSP/pooler ignored (negligible).

    python benchmarks/pretrain_speed.py --out benchmarks/results/pretrain_speed.json
    # + both models again under bf16 autocast (train.precision=bf16), all four in the same run:
    python benchmarks/pretrain_speed.py --bf16 --out benchmarks/results/pretrain_speed_bf16.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from muppets.data.prepare import prepare_corpus
from muppets.data.shards import TokenCorpus
from muppets.interop.hf_bert import to_hf_state
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.objectives.mlm import IGNORE
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig
from muppets.paths import data_dir
from muppets.recipes.bert_pretrain import special_ids
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.train.optim import build_optimizer
from muppets.train.precision import autocast


def matmul_peak(n_rep: int = 10) -> float:
    """Best fp32 GFLOP/s over a few large square matmuls."""
    best = 0.0
    for n in (1024, 2048, 3072):
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(2):
            a @ b
        t = time.perf_counter()
        for _ in range(n_rep):
            a @ b
        best = max(best, 2 * n**3 * n_rep / (time.perf_counter() - t) / 1e9)
    return best


def model_flops(cfg: BertConfig, batch: dict) -> float:
    """Training matmul FLOPs of one muppets step on ``batch`` (3 x forward)."""
    B, T = batch["input_ids"].shape
    H, I, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.vocab_size
    per_token = L * (2 * H * 3 * H + 2 * H * H + 2 * 2 * H * I + 2 * 2 * T * H)
    masked = int((batch["mlm_labels"] != IGNORE).sum())
    head = masked * (2 * H * H + 2 * H * V)
    return 3.0 * (B * T * per_token + head)


def to_hf_batch(batch: dict) -> dict:
    B, T = batch["input_ids"].shape
    labels = torch.full((B, T), IGNORE, dtype=torch.long)
    keep = batch["mlm_labels"] != IGNORE
    rows = torch.arange(B)[:, None].expand_as(batch["mlm_positions"])
    labels[rows[keep], batch["mlm_positions"][keep]] = batch["mlm_labels"][keep]
    return {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
            "attention_mask": batch["attention_mask"].long(), "labels": labels,
            "next_sentence_label": batch["nsp_labels"]}


def make_batches(n: int, workdir: Path) -> tuple[list[dict], WordPieceTokenizer]:
    tok = WordPieceTokenizer.from_vocab(data_dir() / "vocab/bert-base-uncased/vocab.txt")
    prepare_corpus([data_dir() / "english-corpus/wiki"], tok, workdir / "corpus", progress=False)
    data = BertPretrainingData(TokenCorpus(workdir / "corpus"), special_ids(tok), PretrainDataConfig(),
                               batch_size=32, accumulation=1, seed=0)
    return [data.micro_batches(s, 0, 1)[0] for s in range(n)], tok


class Runner:
    """One model + optimizer; ``step(batch)`` is a plain training step."""

    def __init__(self, name: str, model: torch.nn.Module, optimizer, loss_fn,
                 amp: torch.dtype | None = None) -> None:
        self.name, self.model, self.optimizer, self.loss_fn = name, model, optimizer, loss_fn
        self.amp = amp
        self.times: list[float] = []
        self.losses: list[float] = []

    def step(self, batch: dict) -> None:
        t = time.perf_counter()
        with autocast(torch.device("cpu"), self.amp):
            loss = self.loss_fn(self.model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.times.append(time.perf_counter() - t)
        self.losses.append(loss.item())


def muppets_loss(model, batch):
    out = model(**batch)
    return sum(out.loss_sums[k] / out.counts[k] for k in out.loss_sums)


def hf_loss(model, batch):
    return model(**batch).loss


def build_runners(cfg: BertConfig, amp: torch.dtype | None = None, tag: str = "") -> tuple[Runner, Runner]:
    import transformers

    torch.manual_seed(0)
    ours = BertForPreTraining(cfg).train()
    hf_cfg = transformers.BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                                     num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                                     intermediate_size=cfg.intermediate_size)
    hf = transformers.BertForPreTraining(hf_cfg).train()
    missing, unexpected = hf.load_state_dict(to_hf_state(ours), strict=False)
    assert not unexpected and all("decoder" in k for k in missing), (missing, unexpected)
    hf.tie_weights()
    opt_ours, _ = build_optimizer(ours, lr=1e-4, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    opt_hf, _ = build_optimizer(hf, lr=1e-4, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    return (Runner("muppets" + tag, ours, opt_ours, muppets_loss, amp),
            Runner("transformers" + tag, hf, opt_hf, hf_loss, amp))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=5, help="steps per side per round")
    ap.add_argument("--bf16", action="store_true", help="also time both models under bf16 autocast")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    with tempfile.TemporaryDirectory() as tmp:
        batches, tok = make_batches(args.rounds * args.block + 2, Path(tmp))
    cfg = BertConfig.preset("bert-mini", vocab_size=tok.vocab_size)
    ours, hf = build_runners(cfg)
    runners = [(ours, False), (hf, True)]
    if args.bf16:
        ours16, hf16 = build_runners(cfg, torch.bfloat16, " bf16")
        runners += [(ours16, False), (hf16, True)]
    hf_batches = [to_hf_batch(b) for b in batches]
    for runner, is_hf in runners:  # warm-up
        for b in (hf_batches if is_hf else batches)[-2:]:
            runner.step(b)
        runner.times.clear()
    for r in range(args.rounds):
        idx = range(r * args.block, (r + 1) * args.block)
        order = runners[r % len(runners):] + runners[:r % len(runners)]  # rotate who goes first
        for runner, is_hf in order:
            for i in idx:
                runner.step((hf_batches if is_hf else batches)[i])
    report(cfg, batches, ours, hf, matmul_peak(), args.out, [r for r, _ in runners[2:]])


def report(cfg, batches, ours, hf, peak, out_path, extra: list[Runner] = ()) -> None:
    tokens = statistics.mean(int(b["attention_mask"].sum()) for b in batches)
    flops = statistics.mean(model_flops(cfg, b) for b in batches)
    t_ours, t_hf = statistics.median(ours.times), statistics.median(hf.times)
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}",
        "model": "bert-mini L4/H256/A4, vocab 30522, seq 128, batch 32, MLM+NSP",
        "tokens_per_step": tokens, "step_s_muppets": t_ours, "step_s_transformers": t_hf,
        "tokens_per_s_muppets": tokens / t_ours, "tokens_per_s_transformers": tokens / t_hf,
        "speedup": t_hf / t_ours, "matmul_peak_gflops": peak,
        "model_gflop_per_step": flops / 1e9, "mfu_muppets": flops / t_ours / (peak * 1e9),
        "first_losses": {"muppets": ours.losses[:3], "transformers": hf.losses[:3]},
    }
    for runner in extra:  # bf16 autocast: speed relative to the fp32 runs of the same round
        t = statistics.median(runner.times)
        key = runner.name.replace(" ", "_")
        result[f"tokens_per_s_{key}"] = tokens / t
        result[f"speedup_{key}_vs_muppets_fp32"] = t_ours / t
        result[f"speedup_{key}_vs_transformers_fp32"] = t_hf / t
        result["first_losses"][runner.name] = runner.losses[:3]
    for k, v in result.items():
        print(f"{k:28s} {v:.4g}" if isinstance(v, float) else f"{k:28s} {v}")
    if out_path:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
