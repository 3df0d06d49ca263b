"""GPT-mini training and generation speed: muppets vs transformers' GPT2LMHeadModel, same run.

Both sides start from the same weights: muppets builds ``GPTLanguageModel`` (gpt-mini =
L4/H256/A4, vocab 50257, context 1024), writes it with ``save_hf_gpt`` and transformers loads
that directory with ``GPT2LMHeadModel.from_pretrained`` (its default attention, SDPA).

Training: the same random token batches (32 x 128, ``labels = input_ids``), train mode (dropout
0.1) on both, gradient clipping to 1.0 on both, AdamW lr 1e-4, weight decay 0.01. muppets uses
its own optimizer (``build_optimizer``: fused AdamW, no decay on biases/norms); transformers a
plain loop (``torch.optim.AdamW(model.parameters())``, ``loss.backward(); opt.step()``) unless
``--same-optimizer`` gives it muppets' fused AdamW too. Blocks of steps alternate between the
two so both see the same machine load; tokens/s (B x T per step) come from the median step.

Generation: 16-token random prompts, 64 new tokens, greedy, no end-of-text stopping, KV cache,
at batch 1 and batch 32 (32 different prompts): ``muppets.generate.generate`` vs
``GPT2LMHeadModel.generate``, both under ``torch.inference_mode()``. muppets runs twice: as built
(greedy through ``muppets.nn.decode.GreedyScreen``; at batch 1 the compiled step of
``muppets.nn.decode_native`` with its int8 screen) and with greedy from the full float32 logits
(``muppets_logits``: the way sampling without top-k decodes); at batch 1 a third time with the
step from torch operators (``muppets_torch_step``: the path before the compiled step). The new
token ids must be identical; the order rotates between repetitions; new tokens/s from the median
call.
``--sample-top-k K`` times top-k sampling instead (temperature 1, top-p 1, on both sides;
``muppets`` through the screen's top-k candidates, ``muppets_logits`` from the full logits); the
sampled tokens are not compared with transformers', since the two libraries draw differently, but
muppets' own paths draw with the same seed and must agree.

    python benchmarks/gpt_speed.py --out benchmarks/results/gpt_speed.json
    # smoke run (seconds):
    OMP_NUM_THREADS=1 python benchmarks/gpt_speed.py --preset gpt-tiny --batch-size 4 --seq-len 32 \\
        --train-steps 2 --block 1 --gen-reps 1 --no-peak --out /tmp/gpt_speed.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from muppets.generate import GenerationConfig, generate
from muppets.interop.hf_gpt import save_hf_gpt
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode, decode_native
from muppets.train.optim import build_optimizer

from finetune_speed import timed
from pretrain_speed import Runner, matmul_peak

PROMPT_LEN, NEW_TOKENS = 16, 64
TARGETS = {"training": 1.3, "generation_batch_1": 3.0, "generation_batch_32": 1.5}  # issue 54's criteria (issue 4 asked 1.2 at batch 32)


def build_pair(cfg: GPTConfig, workdir: Path, seed: int = 0):
    """Our model and transformers' GPT2LMHeadModel with the same weights (via an HF directory)."""
    import transformers

    torch.manual_seed(seed)
    ours = GPTLanguageModel(cfg)
    path = save_hf_gpt(ours, workdir / f"gpt-{seed}")
    hf = transformers.GPT2LMHeadModel.from_pretrained(path)
    return ours, hf


def model_flops(cfg: GPTConfig, B: int, T: int) -> float:
    """Training matmul FLOPs of one step (3 x forward): projections, FFN, full T x T attention
    scores (the causal half is computed too) and the tied 50257-way head on B x (T-1) rows."""
    H, I, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers, cfg.vocab_size
    per_token = L * (2 * H * 3 * H + 2 * H * H + 2 * 2 * H * I + 2 * 2 * T * H)
    return 3.0 * (B * T * per_token + B * (T - 1) * 2 * H * V)


def muppets_loss(model, ids):
    out = model(ids, labels=ids)
    return out.loss_sums["lm"] / out.counts["lm"]


def hf_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def eval_loss_gap(ours, hf, ids: torch.Tensor) -> float:
    """|loss_muppets - loss_transformers| in eval mode on ``ids``: the two start from the same model."""
    ours.eval(), hf.eval()
    with torch.inference_mode():
        gap = abs(float(muppets_loss(ours, ids)) - float(hf_loss(hf, ids)))
    ours.train(), hf.train()
    return gap


def training_speed(cfg: GPTConfig, workdir: Path, args) -> dict:
    ours_model, hf_model = build_pair(cfg, workdir)
    rounds = math.ceil(args.train_steps / args.block)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, cfg.vocab_size, (args.batch_size, args.seq_len), generator=g)
               for _ in range(rounds * args.block + 2)]
    gap = eval_loss_gap(ours_model, hf_model, batches[0][:4])
    opt_ours, _ = build_optimizer(ours_model, lr=1e-4, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-8)
    if args.same_optimizer:
        opt_hf, _ = build_optimizer(hf_model, lr=1e-4, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-8)
    else:
        opt_hf = torch.optim.AdamW(hf_model.parameters(), lr=1e-4, weight_decay=0.01)
    ours = Runner("muppets", ours_model.train(), opt_ours, muppets_loss)
    hf = Runner("transformers", hf_model.train(), opt_hf, hf_loss)
    for b in batches[-2:]:  # warm-up
        ours.step(b), hf.step(b)
    ours.times.clear(), hf.times.clear()
    for r in range(rounds):
        pair = [ours, hf] if r % 2 == 0 else [hf, ours]
        for runner in pair:
            for i in range(r * args.block, (r + 1) * args.block):
                runner.step(batches[i])
    return training_report(cfg, args, ours, hf, gap)


def training_report(cfg: GPTConfig, args, ours: Runner, hf: Runner, gap: float) -> dict:
    tokens = args.batch_size * args.seq_len
    t_ours, t_hf = statistics.median(ours.times), statistics.median(hf.times)
    result = {
        "batch": [args.batch_size, args.seq_len], "tokens_per_step": tokens,
        "steps_timed_each": len(ours.times), "block": args.block,
        "optimizer_transformers": "muppets fused AdamW" if args.same_optimizer else "torch.optim.AdamW (default)",
        "eval_loss_gap_at_start": gap,
        "step_s_muppets": t_ours, "step_s_transformers": t_hf,
        "tokens_per_s_muppets": tokens / t_ours, "tokens_per_s_transformers": tokens / t_hf,
        "speedup": t_hf / t_ours, "target": TARGETS["training"],
        "model_gflop_per_step": model_flops(cfg, args.batch_size, args.seq_len) / 1e9,
        "first_losses": {"muppets": ours.losses[:3], "transformers": hf.losses[:3]},
    }
    if not args.no_peak:
        peak = matmul_peak()
        result["matmul_peak_gflops"] = peak
        result["mfu_muppets"] = result["model_gflop_per_step"] / t_ours / peak
    return result


def hf_generate(hf, prompts: list[list[int]], pad_id: int, top_k: int = 0) -> list[list[int]]:
    """transformers' KV-cached generate of exactly NEW_TOKENS per prompt (equal lengths): greedy,
    or with ``top_k`` sampling from the top ``top_k`` tokens (temperature 1, top-p 1)."""
    ids = torch.tensor(prompts)
    sample = dict(do_sample=True, top_k=top_k, top_p=1.0, temperature=1.0) if top_k else dict(do_sample=False)
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                      pad_token_id=pad_id, eos_token_id=None, **sample)
    return out[:, ids.shape[1]:].tolist()


def weight_read_seconds(tensors: list[torch.Tensor], reps: int = 20, flush: bool = True) -> float:
    """Median time to read every tensor once (``t.sum()`` each, cache flushed first): the memory
    traffic one decoding step cannot avoid, since every weight is used for each token. Without
    ``flush``, read after read as decoding does, so what the last-level cache keeps between
    steps is read from it."""
    filler = torch.empty(16 * 1024 * 1024)  # 64 MB, larger than the L3 cache
    times = []
    with torch.inference_mode():
        for _ in range(reps):
            if flush:
                filler.add_(1.0)
            times.append(timed(lambda: [_as_float(t).sum() for t in tensors]))
    return statistics.median(times)


def _as_float(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bytes as float32 where they divide into them (an int8 sum is not vectorised)."""
    if t.dtype != torch.float32 and t.is_contiguous() and (t.shape[-1] * t.element_size()) % 4 == 0:
        return t.view(torch.float32)
    return t


@contextlib.contextmanager
def without_screen():
    """Greedy decoding and top-k sampling from the full float32 logits (``DecodeWeights.logits``),
    as before :class:`muppets.nn.decode.GreedyScreen` and as sampling without top-k decodes (the
    compiled batch-1 step still computes the hidden state, without its screen)."""
    built = decode.DecodeWeights.greedy, getattr(decode.DecodeWeights, "top_k", None)  # None: older code
    step_call = getattr(decode_native, "GPTStep", None) and decode_native.GPTStep.__call__
    decode.DecodeWeights.greedy = lambda self, hidden, *_: decode.greedy_argmax(self.logits(hidden, *_))
    decode.DecodeWeights.top_k = lambda self, hidden, k: (self.logits(hidden), None)
    if step_call:
        decode_native.GPTStep.__call__ = lambda self, ids, cache, threads, **_: step_call(self, ids, cache, threads)
    try:
        yield
    finally:
        decode.DecodeWeights.greedy, decode.DecodeWeights.top_k = built
        if step_call:
            decode_native.GPTStep.__call__ = step_call
        if built[1] is None:
            del decode.DecodeWeights.top_k


@contextlib.contextmanager
def torch_step():
    """Batch-1 decoding from torch operators (``GPTBackbone.decode_step`` and the torch screen), as
    before the compiled step (:mod:`muppets.nn.decode_native`)."""
    before = decode_native.ENABLED
    decode_native.ENABLED = False
    try:
        yield
    finally:
        decode_native.ENABLED = before


def generation_speed(cfg: GPTConfig, workdir: Path, args) -> dict:
    """Batch 1 and 32: muppets (greedy through the screen), muppets_logits (greedy from the full
    float32 logits, the path sampling takes) and transformers, in rotating order."""
    ours, hf = build_pair(cfg, workdir, seed=2)
    ours.eval(), hf.eval()
    hf.generation_config.eos_token_id = None  # never stop early: exactly NEW_TOKENS per row
    g = torch.Generator().manual_seed(3)
    top_k = args.sample_top_k
    gen_cfg = GenerationConfig(max_new_tokens=NEW_TOKENS, stop_at_eos=False,
                               **(dict(do_sample=True, top_k=top_k, seed=0) if top_k else {}))

    def ours_logits(prompts):
        with without_screen():
            return generate(ours, prompts, gen_cfg)

    def ours_torch_step(prompts):
        with torch_step():
            return generate(ours, prompts, gen_cfg)

    result = {}
    for B in args.gen_batch_sizes:
        prompts = torch.randint(0, cfg.vocab_size - 1, (B, PROMPT_LEN), generator=g).tolist()
        run = {"muppets": lambda: generate(ours, prompts, gen_cfg),
               "muppets_logits": lambda: ours_logits(prompts),
               "transformers": lambda: hf_generate(hf, prompts, cfg.eos_token_id, top_k)}
        if B == 1:  # the compiled step serves batch 1 only
            run["muppets_torch_step"] = lambda: ours_torch_step(prompts)
        times: dict[str, list[float]] = {k: [] for k in run}
        with torch.inference_mode():
            outs = {k: fn() for k, fn in run.items()}  # warm-up, and the ids to compare
            for rep in range(args.gen_reps):
                order = list(run)[rep % len(run):] + list(run)[:rep % len(run)]  # each in every place in turn
                for name in order:
                    times[name].append(timed(run[name]))
        result[f"batch_{B}"] = generation_report(B, times, outs, sampled=bool(top_k))
    # the bound: NEW_TOKENS steps that each read every weight (float32), or, with the screen, the
    # body's weights in float32 and the output layer's int8 copy (the embedding reads one row)
    screen = ours._decode_weights().screen or decode.GreedyScreen.build(ours.lm_weight)  # not built by sampling
    body = [p.detach() for n, p in ours.named_parameters() if n != "backbone.embeddings.tokens.weight"]
    floors = {"float32": weight_read_seconds([p.detach() for p in ours.parameters()]),
              "screened": weight_read_seconds(body + [screen.q, screen.scale]),
              "screened_warm": weight_read_seconds(body + [screen.q, screen.scale], flush=False)}
    for B in args.gen_batch_sizes:
        t_hf = result[f"batch_{B}"]["call_s_transformers"]
        for name, floor in floors.items():
            result[f"batch_{B}"].update({f"weight_read_ms_{name}": 1e3 * floor, f"floor_call_s_{name}": NEW_TOKENS * floor,
                                         f"speedup_at_floor_{name}": t_hf / (NEW_TOKENS * floor)})
        result[f"batch_{B}"]["weight_mb_float32"] = sum(p.numel() * p.element_size() for p in ours.parameters()) / 2**20
        result[f"batch_{B}"]["weight_mb_screened"] = (sum(p.numel() * p.element_size() for p in body)
                                                      + screen.q.numel() + 2 * screen.scale.numel()) / 2**20
    return result


def generation_report(B: int, times: dict[str, list[float]], outs: dict[str, list[list[int]]],
                      sampled: bool = False) -> dict:
    """Sampled tokens are not compared with transformers' (the two libraries draw differently):
    only their count; muppets' own paths (same seed) are compared with each other."""
    t_ours, t_hf = statistics.median(times["muppets"]), statistics.median(times["transformers"])
    t_logits = statistics.median(times["muppets_logits"])
    same_rows = sum(a == b for a, b in zip(outs["muppets"], outs["transformers"]))
    full = all(len(r) == NEW_TOKENS for name in outs for r in outs[name])
    extra = {}
    if "muppets_torch_step" in times:  # batch 1: the torch-operator step, same run
        t_torch = statistics.median(times["muppets_torch_step"])
        extra = {"call_s_muppets_torch_step": t_torch, "speedup_torch_step": t_hf / t_torch,
                 "compiled_over_torch_step": t_torch / t_ours,
                 "torch_step_identical": outs["muppets_torch_step"] == outs["muppets"]}
    return {
        "prompts": B, "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS, "reps": len(times["muppets"]),
        "decoding": "top-k sampling" if sampled else "greedy",
        "identical": full if sampled else same_rows == B and full,
        "rows_identical": None if sampled else same_rows,
        "logits_path_identical": outs["muppets_logits"] == outs["muppets"],
        "call_s_muppets": t_ours, "call_s_muppets_logits": t_logits, "call_s_transformers": t_hf,
        "new_tokens_per_s_muppets": B * NEW_TOKENS / t_ours,
        "new_tokens_per_s_transformers": B * NEW_TOKENS / t_hf,
        "speedup": t_hf / t_ours, "speedup_logits_path": t_hf / t_logits,
        "target": TARGETS.get(f"generation_batch_{B}"), **extra,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-steps", type=int, default=30, help="timed training steps per library (rounded up to whole blocks)")
    ap.add_argument("--block", type=int, default=5, help="consecutive steps per library before switching")
    ap.add_argument("--gen-reps", type=int, default=10, help="timed generate calls per library and batch size")
    ap.add_argument("--gen-batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    ap.add_argument("--preset", default="gpt-mini", help="GPT preset (gpt-tiny for smoke runs)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--same-optimizer", action="store_true", help="give transformers muppets' fused AdamW")
    ap.add_argument("--no-peak", action="store_true", help="skip the matmul peak / MFU measurement")
    ap.add_argument("--sample-top-k", type=int, default=0,
                    help="time top-k sampling (this k, temperature 1) instead of greedy; tokens are not compared with transformers'")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--out", type=Path)
    return ap.parse_args()


def main() -> None:
    import transformers

    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cfg = GPTConfig.preset(args.preset)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model": f"{args.preset} L{cfg.num_layers}/H{cfg.hidden_size}/A{cfg.num_heads}, vocab {cfg.vocab_size}",
    }
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_train:
            result["training"] = training_speed(cfg, Path(tmp), args)
        if not args.skip_generate:
            result["generation"] = generation_speed(cfg, Path(tmp), args)
    print_summary(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


def print_summary(result: dict) -> None:
    sections = {"": {k: v for k, v in result.items() if not isinstance(v, dict)},
                "training": result.get("training"), **(result.get("generation") or {})}
    for name, section in sections.items():
        if section:
            print(f"\n[{name}]" if name else "")
            for k, v in section.items():
                print(f"  {k:32s} {v:.4g}" if isinstance(v, float) else f"  {k:32s} {v}")
    for name, target in TARGETS.items():
        section = result.get("training") if name == "training" else (result.get("generation") or {}).get(
            name.removeprefix("generation_"))
        if section:
            ok = "met" if section["speedup"] >= target else "NOT met"
            print(f"{name:24s} {section['speedup']:.2f}x (target >= {target}x): {ok}")


if __name__ == "__main__":
    main()
