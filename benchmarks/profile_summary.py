"""Where the time goes: torch.profiler summaries of pretraining, fine-tuning and generation.

For each workload it profiles a few steps after a warm-up and prints the top operators by self
CPU time, and the share of the total spent in matrix products (``aten::mm``/``addmm``/``bmm``,
attention kernels and the oneDNN ops behind them) against everything else (element-wise ops,
normalisation, the optimizer, copies, Python and dispatcher overhead that shows up as time
outside any operator).

- ``pretrain-fp32`` / ``pretrain-bf16``: BERT-mini, a 32 × 128 MLM + NSP batch of the shared
  English Wikipedia, forward + backward + AdamW (``benchmarks/pretrain_speed.py``'s step).
- ``finetune``: all-MiniLM-L6-v2 with a classification head, SST-2 batches of 32
  (``benchmarks/finetune_speed.py``'s step).
- ``generate-b1``: gpt-mini (random weights), greedy, batch 1, 16-token prompt, 64 new tokens;
  the compiled step's own share of the wall time is timed around its calls (the profiler sees
  one C call as time outside any operator).

word2vec trains in Hogwild worker processes of its own; its profile is on the static-vectors
results page.

    python benchmarks/profile_summary.py --out benchmarks/results/profile_summary.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
          "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention",
          "aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::_mkldnn_mm",
          "mkldnn::_linear_pointwise", "aten::mkldnn_linear", "aten::_weight_int8pack_mm")
TOP = 8


def _summary(name: str, step, steps: int, warmup: int = 2) -> dict:
    for _ in range(warmup):
        step()
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    wall = time.perf_counter() - started
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP]
    result = {
        "workload": name, "steps": steps, "wall_s_per_step": wall / steps,
        "ops_s_per_step": total / 1e6 / steps, "matmul_share": matmul / total,
        "top": [{"op": e.key, "share": e.self_cpu_time_total / total, "calls_per_step": e.count / steps}
                for e in top],
    }
    print(f"\n[{name}] {wall / steps * 1e3:.1f} ms per step (profiled), operators {total / 1e3 / steps:.1f} ms; "
          f"matrix products {100 * matmul / total:.1f}% of operator time")
    for row in result["top"]:
        print(f"  {100 * row['share']:5.1f}%  {row['op']:48s} {row['calls_per_step']:7.1f} calls/step")
    return result


def pretrain(bf16: bool, workdir: Path) -> dict:
    from pretrain_speed import build_runners, make_batches

    from muppets.models.bert import BertConfig

    batches, tok = make_batches(6, workdir)
    cfg = BertConfig.preset("bert-mini", vocab_size=tok.vocab_size)
    ours, _ = build_runners(cfg, torch.bfloat16 if bf16 else None)
    it = iter(batches * 4)
    return _summary("pretrain-bf16" if bf16 else "pretrain-fp32", lambda: ours.step(next(it)), steps=4)


def finetune(workdir: Path) -> dict:
    from finetune_speed import MuppetsTrainer, minilm_classifier

    from muppets.tasks import load_task

    task = load_task("sst2")
    trainer = MuppetsTrainer(minilm_classifier(workdir), task["train"], 32 * 8)
    counter = iter(range(10**6))
    return _summary("finetune", lambda: trainer.step(next(counter) % 8), steps=4)


def generate_b1() -> dict:
    from muppets.generate import GenerationConfig, generate
    from muppets.models.gpt import GPTConfig, GPTLanguageModel

    torch.manual_seed(0)
    gpt = GPTConfig.preset("gpt-mini")
    model = GPTLanguageModel(gpt).eval()
    prompt = torch.randint(0, gpt.vocab_size - 1, (1, 16)).tolist()
    cfg = GenerationConfig(max_new_tokens=64, stop_at_eos=False)

    def step() -> None:
        with torch.inference_mode():
            generate(model, prompt, cfg)

    # the compiled step (muppets.nn.decode_native) is one C call the profiler cannot see into:
    # its wall time is measured around the call
    from muppets.nn import decode_native

    inner, spent = decode_native.GPTStep.__call__, [0.0, 0]

    def timed_call(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started
            spent[1] += 1

    decode_native.GPTStep.__call__ = timed_call
    try:
        result = _summary("generate-b1 (64 tokens a step)", step, steps=3, warmup=1)
        spent[:] = [0.0, 0]
        started = time.perf_counter()
        for _ in range(3):
            step()
        wall = time.perf_counter() - started
    finally:
        decode_native.GPTStep.__call__ = inner
    result["compiled_step"] = {"calls_per_step": spent[1] / 3, "share_of_wall": spent[0] / wall,
                               "ms_per_call": 1e3 * spent[0] / max(spent[1], 1), "wall_ms_per_token": 1e3 * wall / 3 / 64}
    print(f"  compiled step: {spent[1] / 3:.0f} calls a step, {1e3 * spent[0] / max(spent[1], 1):.3f} ms a call, "
          f"{100 * spent[0] / wall:.1f}% of the wall time (unprofiled run); {1e3 * wall / 3 / 64:.3f} ms a token")
    result["compiled_step"]["ms_per_call_by_mode"] = modes = compiled_step_modes(model)
    print("  compiled step alone, ms a call: " + ", ".join(f"{k} {v:.3f}" for k, v in modes.items()))
    result["compiled_step"]["weight_read_ms"] = reads = part_reads(model)
    print("  reading their weights, ms (flushed / warm): " + ", ".join(
        f"{k} {v['flushed']:.3f} / {v['warm']:.3f} ({v['mib']:.1f} MiB)" for k, v in reads.items()))
    return result


def part_reads(model) -> dict:
    """What reading each part's weights once takes (``gpt_speed.weight_read_seconds``: flushed
    cache, and read after read): the body (every backbone weight but the token embedding, of which
    a step reads one row) and the greedy screen's int8 copy and scales, to set against the step's
    own times by mode."""
    from gpt_speed import weight_read_seconds

    screen = model._decode_weights().exact_input_screen()
    parts = {"body": [p.detach() for n, p in model.backbone.named_parameters() if n != "embeddings.tokens.weight"],
             "screen": [screen.q, screen.scale]}
    return {name: {"mib": sum(t.numel() * t.element_size() for t in ts) / 2**20,
                   "flushed": 1e3 * weight_read_seconds(ts), "warm": 1e3 * weight_read_seconds(ts, flush=False)}
            for name, ts in parts.items()}


def compiled_step_modes(model, tokens: int = 64, rounds: int = 5) -> dict:
    """The compiled step's own time a call (median over ``rounds``, the modes alternating), by what
    it ends in: the hidden state alone (the body), the greedy screen, the top-k screen (k = 50).
    The difference between the first and the others is the screen's share."""
    import statistics

    plan = model._decode_weights()
    step = model._compiled_step(plan)
    step.attach_screen(plan.exact_input_screen)
    modes = {"body_only": {}, "greedy": {"greedy": True}, "top_k_50": {"top_k": 50}}
    times: dict[str, list[float]] = {name: [] for name in modes}
    ids = torch.tensor([[5]])
    with torch.inference_mode():
        for _ in range(rounds):
            for name, kwargs in modes.items():
                cache = model.backbone.new_cache(1, 16 + tokens)
                model.backbone(torch.zeros(1, 16, dtype=torch.long), None, cache)
                started = time.perf_counter()
                for _ in range(tokens):
                    step(ids, cache, torch.get_num_threads(), **kwargs)
                times[name].append((time.perf_counter() - started) / tokens)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None,
                        help="pretrain-fp32 pretrain-bf16 finetune generate-b1 (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    wanted = set(args.only or ["pretrain-fp32", "pretrain-bf16", "finetune", "generate-b1"])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "pretrain-fp32" in wanted:
            results.append(pretrain(False, work / "fp32"))
        if "pretrain-bf16" in wanted:
            results.append(pretrain(True, work / "bf16"))
        if "finetune" in wanted:
            results.append(finetune(work))
        if "generate-b1" in wanted:
            results.append(generate_b1())
    if args.out:
        from gpt_speed import cpu_model

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cpu": cpu_model(), "threads": torch.get_num_threads(),
                                        "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
                                        "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
