"""The greedy screen (:class:`muppets.nn.decode.GreedyScreen`): how many rows it leaves to
recompute, whether it ever changes a token, and when it is faster than the full float32 logits.

* ``candidates``: greedy generation from real text prompts (WikiText-2 test lines) with a
  pretrained model (``--model DIR``, e.g. the gpt-mini of ``gpt_quality.py``) and from random
  prompts with a randomly initialised gpt-mini. For every step: the candidate rows the screen
  recomputes, its bound ``E`` against the spread of the step's logits (max - min), and how often
  it declined (full logits instead). The generated ids must equal those of greedy decoding from
  the full float32 logits.
* ``by_rows``: ms per generated token inside ``generate()`` (gpt-mini, 16-token prompts, 32 new
  tokens), screen against full logits, at 1..64 rows and on 1 and 2 threads, in alternating order
  (paired rounds). This is the measurement behind ``muppets.nn.decode.SCREEN_ROWS_PER_THREAD``;
  here the policy is bypassed so that both ways run at every row count.

    python benchmarks/greedy_screen.py --model runs/gpt-mini/final --out benchmarks/results/greedy_screen.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from muppets.generate import GenerationConfig, generate
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode
from muppets.paths import data_dir

from gpt_speed import without_screen
from tables import report


def screen_stats(model, prompts: list[list[int]], new_tokens: int) -> dict:
    """Greedy generation one prompt at a time, recording what the screen saw at every step."""
    seen: list[dict] = []
    argmax = decode.GreedyScreen.argmax

    def recording(self, hidden):
        y, bound = self.scores(hidden)
        picked = argmax(self, hidden)
        high = y.amax(1)
        exact = hidden.float() @ self.weight.t()  # (B, V): for the spread only
        seen.append({"candidates": int((y >= (high - 2 * bound)[:, None]).sum()),
                     "bound_over_spread": float(bound[0] / (exact.amax() - exact.amin())),
                     "declined": picked is None})
        return picked

    cfg = GenerationConfig(max_new_tokens=new_tokens, stop_at_eos=False)
    decode.GreedyScreen.argmax = recording
    try:
        with torch.inference_mode():
            screened = [generate(model, [p], cfg)[0] for p in prompts]
    finally:
        decode.GreedyScreen.argmax = argmax
    with torch.inference_mode(), without_screen():
        full = [generate(model, [p], cfg)[0] for p in prompts]
    counts = sorted(s["candidates"] for s in seen)
    ratios = sorted(s["bound_over_spread"] for s in seen)
    return {"prompts": len(prompts), "steps": len(seen), "identical_to_full_logits": screened == full,
            "rows_identical": sum(a == b for a, b in zip(screened, full)),
            "declined": sum(s["declined"] for s in seen),
            "candidates_median": statistics.median(counts), "candidates_p99": counts[int(0.99 * (len(counts) - 1))],
            "candidates_max": counts[-1], "candidates_mean": statistics.fmean(counts),
            "bound_over_spread_median": statistics.median(ratios), "bound_over_spread_max": ratios[-1]}


def text_prompts(tokenizer, n: int, length: int = 16) -> list[list[int]]:
    """The first ``length`` tokens of the first ``n`` WikiText-2 test lines with that many."""
    out = []
    for line in (data_dir() / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("="):
            ids = tokenizer.encode(line)
            if len(ids) >= length:
                out.append(ids[:length])
        if len(out) == n:
            break
    return out


def by_rows(threads: int, rows: tuple[int, ...], rounds: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPTLanguageModel(GPTConfig.preset("gpt-mini")).eval()
    cfg = GenerationConfig(max_new_tokens=32, stop_at_eos=False)
    policy = decode.SCREEN_ROWS_PER_THREAD
    decode.SCREEN_ROWS_PER_THREAD = 10**9  # the screen at every row count
    result = {}
    try:
        with torch.inference_mode():
            for B in rows:
                prompts = torch.randint(0, 50_000, (B, 16), generator=torch.Generator().manual_seed(B)).tolist()
                times: dict[str, list[float]] = {"screen": [], "full_logits": []}
                outs = {}
                for r in range(rounds + 1):
                    for name in (["screen", "full_logits"] if r % 2 else ["full_logits", "screen"]):
                        start = time.perf_counter()
                        if name == "screen":
                            outs[name] = generate(model, prompts, cfg)
                        else:
                            with without_screen():
                                outs[name] = generate(model, prompts, cfg)
                        if r:  # round 0 warms up
                            times[name].append(time.perf_counter() - start)
                assert outs["screen"] == outs["full_logits"], f"the screen changed a token at {B} rows"
                ms = {k: 1e3 * statistics.median(v) / cfg.max_new_tokens for k, v in times.items()}
                result[f"rows_{B}"] = {"screen_ms_per_step": ms["screen"], "full_logits_ms_per_step": ms["full_logits"],
                                       "ratio": ms["full_logits"] / ms["screen"],
                                       "screen_faster_in": sum(a < b for a, b in zip(times["screen"], times["full_logits"])),
                                       "rounds": rounds}
    finally:
        decode.SCREEN_ROWS_PER_THREAD = policy
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a pretrained GPT directory (save_hf_gpt layout, with its tokenizer)")
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=8, help="paired rounds per row count in by_rows")
    ap.add_argument("--rows", type=lambda s: tuple(int(x) for x in s.split(",")), default=(1, 2, 4, 8, 16, 32, 64))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__, "threads": torch.get_num_threads()}
    torch.manual_seed(0)
    random_model = GPTLanguageModel(GPTConfig.preset("gpt-mini")).eval()
    prompts = torch.randint(0, 50_000, (args.prompts, 16), generator=torch.Generator().manual_seed(1)).tolist()
    result["candidates_random_gpt_mini"] = screen_stats(random_model, prompts, args.new_tokens)
    if args.model:
        from muppets.interop.hf_gpt import load_hf_gpt
        from muppets.tokenizers import ByteLevelBPETokenizer

        model, tok = load_hf_gpt(args.model).eval(), ByteLevelBPETokenizer.load(args.model)
        result[f"candidates_{args.model.name}"] = {"model": str(args.model),
                                                    **screen_stats(model, text_prompts(tok, args.prompts), args.new_tokens)}
    threads = torch.get_num_threads()
    for n in sorted({1, threads}):
        result[f"by_rows_{n}_threads"] = by_rows(n, args.rows, args.rounds)
    torch.set_num_threads(threads)
    report(result, args.out)


if __name__ == "__main__":
    main()
