"""One decoding step of gpt-mini at batch 1, piece by piece: the measurements behind
:mod:`muppets.nn.decode` (the greedy screen, weight copies in ``(in, out)`` layout, one intra-op
thread for the body, the float32 output layer split over two cores; and the read-ahead of the
body's weights on the side thread, which was dropped).

Every timing is the median of repeated calls in one process; "cold" means right after a product
with the 51 MB output weight, as in a real step. The ablation runs whole ``generate`` calls
(16-token prompt + 64 new tokens) with one piece removed at a time, every variant once per round
in a shuffled order, so that all share the machine's load; each is compared with the as-built
step call by call (paired). Needs two cores for the two-thread rows.

    python benchmarks/decode_speed.py --out benchmarks/results/decode_speed.json
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from muppets.generate import GenerationConfig, generate
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode

from output_layer_speed import median_ms, report  # (fn, reps, before=None): before() evicts the cache untimed


def with_threads(n: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def output_layer(model: GPTLanguageModel, reps: int) -> dict:
    """h (1, H) times the tied output weight: as stored (V, H), as one (H, V) copy, split in two."""
    plan = model._decode_weights()
    w = model.lm_weight.detach()
    wt = torch.cat(plan.output, 1)  # (H, V)
    h = torch.randn(1, w.shape[1])
    side = decode.side_thread()
    return {"linear_VH_ms": median_ms(lambda: F.linear(h, w), reps),
            "mm_HV_ms": median_ms(lambda: h @ wt, reps),
            "split_two_threads_ms": with_threads(1, lambda: median_ms(lambda: plan.logits(h, side), reps)),
            "side_thread": side is not None}


def body_products(model: GPTLanguageModel, reps: int) -> dict:
    """The 16 one-row products of the body, warm and cold, in both layouts; and a plain read."""
    plan = model._decode_weights()
    layers = plan.layers
    xs = {n: torch.randn(1, n) for n in {layer.in_features for layer in layers}}
    big, h = torch.cat(plan.output, 1), torch.randn(1, model.cfg.hidden_size)  # (H, V): 51 MB
    evict = lambda: h @ big  # noqa: E731  (what a step reads between two passes through the body)
    as_stored = lambda: [F.linear(xs[m.in_features], m.weight, m.bias) for m in layers]  # noqa: E731
    copies = lambda: [torch.addmm(plan.weights[id(m)][1], xs[m.in_features], plan.weights[id(m)][0]) for m in layers]  # noqa: E731

    def one_thread():
        return {"warm_as_stored_ms": median_ms(as_stored, reps), "warm_copies_ms": median_ms(copies, reps),
                "cold_as_stored_ms": median_ms(as_stored, reps, evict), "cold_copies_ms": median_ms(copies, reps, evict),
                "cold_read_pack_ms": median_ms(plan.pack.sum, reps, evict),
                "pack_mb": plan.pack.numel() * 4 / 2**20}

    return with_threads(1, one_thread)


def steps(model: GPTLanguageModel, reps: int) -> dict:
    """The body's step (warm) on one and two intra-op threads, and next_token_logits in a loop."""
    plan = model._decode_weights()
    one = torch.tensor([[5]])
    result = {}
    with torch.inference_mode():
        for n in (1, 2):
            def body():
                cache = model.backbone.new_cache(1, reps + 40)
                model.next_token_logits(torch.arange(100, 116)[None], None, cache)
                with decode.use(plan):
                    return median_ms(lambda: model.backbone(one, None, cache), reps)
            result[f"body_warm_{n}_threads_ms"] = with_threads(n, body)
        cache = model.backbone.new_cache(1, reps + 40)
        model.next_token_logits(torch.arange(100, 116)[None], None, cache)
        result["next_token_logits_ms"] = median_ms(lambda: model.next_token_logits(one, None, cache), reps)
    return result


def step_variant(copies: bool = True, split: bool = True, single: bool = True, prefetch: bool = False,
                 screen: bool = True, screen_single: bool = False):
    """``next_token_argmax`` (what greedy ``generate`` calls) for one-row steps with one piece of
    muppets.nn.decode changed; without the screen, the argmax of the full float32 logits."""
    def maybe(flag: bool, ctx):
        return ctx if flag else contextlib.nullcontext()

    @torch.no_grad()
    def next_token_argmax(self, input_ids, attention_mask, cache):
        plan, side = self._decode_weights(), decode.side_thread()
        with maybe(single, decode.single_threaded()), maybe(copies, decode.use(plan)):
            if prefetch and side is not None:
                side.submit(plan.pack.sum)  # read the body's weights on the other core meanwhile
            hidden = self.backbone(input_ids, attention_mask, cache).last[:, -1]
            if prefetch and side is not None:
                side.wait()
        if screen:
            with maybe(screen_single, decode.single_threaded()):
                return plan.greedy(hidden, side)
        return decode.greedy_argmax(plan.logits(hidden, side if split else None))  # one row: single-threaded inside
    return next_token_argmax


def generation(model: GPTLanguageModel, rounds: int) -> dict:
    """Whole greedy generate calls per variant: median ms per new token, and how often (of
    ``rounds``) the as-built step beat the variant in the same round."""
    prompt = torch.randint(0, model.cfg.vocab_size - 1, (1, 16), generator=torch.Generator().manual_seed(3)).tolist()
    cfg = GenerationConfig(max_new_tokens=64, stop_at_eos=False)
    variants = {"as_built": GPTLanguageModel.next_token_argmax,
                "screen_on_one_thread": step_variant(screen_single=True),
                "with_read_ahead": step_variant(prefetch=True),
                "without_copies": step_variant(copies=False),
                "body_on_all_intra_op_threads": step_variant(single=False),
                "without_screen": step_variant(screen=False),
                "without_screen_or_split_output": step_variant(screen=False, split=False),
                "none_of_it": step_variant(copies=False, split=False, single=False, screen=False)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    original, order = GPTLanguageModel.next_token_argmax, list(variants)
    shuffle = random.Random(0).shuffle
    first = None
    try:
        with torch.inference_mode():
            for r in range(rounds + 1):
                shuffle(order)
                for name in order:
                    GPTLanguageModel.next_token_argmax = variants[name]
                    start = time.perf_counter()
                    out = generate(model, prompt, cfg)
                    if r:  # round 0 warms up
                        times[name].append(time.perf_counter() - start)
                    first = first or out
                    assert out == first and len(out[0]) == 64, f"{name} changed the tokens"
    finally:
        GPTLanguageModel.next_token_argmax = original
    result = {"rounds": rounds}
    for name, t in times.items():
        result[f"{name}_ms_per_token"] = 1e3 * statistics.median(t) / 64
        if name != "as_built":
            result[f"{name}_as_built_faster_in"] = sum(a < b for a, b in zip(times["as_built"], t))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100, help="calls per micro-timing")
    ap.add_argument("--rounds", type=int, default=20, help="generate calls per ablation variant")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPTLanguageModel(GPTConfig.preset("gpt-mini")).eval()
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "threads": torch.get_num_threads(), "torch": torch.__version__}
    with torch.no_grad():
        result["output_layer_1_row"] = output_layer(model, args.reps)
        result["body_products_1_row"] = body_products(model, args.reps)
    result["steps_batch_1"] = steps(model, args.reps)
    result["generation_batch_1"] = generation(model, args.rounds)
    report(result, args.out)


if __name__ == "__main__":
    main()
