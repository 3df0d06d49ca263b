"""The output layer's cost on this CPU, piece by piece: the numbers behind the choices in
:mod:`muppets.nn.linear_ce` (chunk size, ``amax``) and ``GPTLanguageModel.next_token_logits``
(the ``(H, V)`` decode copy, vocabulary blocks for >= 8 rows), measured in one process.

gpt-mini's shapes: H 256, V 50,257; training 4,096 rows (32 x 128). Medians of repeated calls.

    OMP_NUM_THREADS=1 python benchmarks/output_layer_speed.py --out benchmarks/results/output_layer_speed.json
    python benchmarks/output_layer_speed.py --generate-rows --reps 6 --out benchmarks/results/output_layer_by_rows.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from muppets.generate import GenerationConfig, generate, greedy_argmax
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.nn import decode
from muppets.nn.linear_ce import linear_cross_entropy

H, V, ROWS = 256, 50257, 4096


def median_ms(fn, reps: int, before=None) -> float:
    """Median ms of ``fn()`` after a warm-up call; ``before()`` runs untimed ahead of each call."""
    fn()  # warm-up
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def fused_loss(reps: int) -> dict:
    """Forward + backward of the fused output layer for several chunk sizes."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(ROWS, H, generator=g).requires_grad_()
    w = (0.02 * torch.randn(V, H, generator=g)).requires_grad_()
    y = torch.randint(0, V, (ROWS,), generator=g)

    def step(chunk: int) -> None:
        h.grad = w.grad = None
        linear_cross_entropy(h, w, None, y, chunk_rows=chunk)[0].backward()

    return {f"chunk_{c}_ms": median_ms(lambda c=c: step(c), reps) for c in (256, 1024, 4096)}


def reductions(reps: int) -> dict:
    z = torch.randn(1024, V)
    return {"argmax_ms": median_ms(lambda: z.argmax(-1), reps), "amax_ms": median_ms(lambda: z.amax(-1), reps)}


def decode_products(reps: int) -> dict:
    """One decoding step's output layer: layouts, vocabulary blocks, bf16."""
    w = torch.randn(V, H)
    wt = w.t().contiguous()  # the (H, V) decode copy
    out = {}
    with torch.inference_mode():
        for B in (1, 32):
            x = torch.randn(B, H)
            logits = torch.empty(B, V)

            def blocked(x=x, logits=logits):
                for s in range(0, V, 8192):
                    logits[:, s:s + 8192] = x @ wt[:, s:s + 8192]

            out[f"rows_{B}"] = {"linear_VH_ms": median_ms(lambda x=x: F.linear(x, w), reps),
                                "matmul_HV_ms": median_ms(lambda x=x: x @ wt, reps),
                                "blocked_HV_ms": median_ms(blocked, reps)}
        xb, wtb = torch.randn(1, H).bfloat16(), wt.bfloat16()
        out["rows_1"]["matmul_HV_bf16_ms"] = median_ms(lambda: xb @ wtb, reps)
    return out


def greedy_choice(reps: int) -> dict:
    """The greedy token of 1 and 32 rows of V logits: ``argmax`` against ``greedy_argmax``."""
    out = {}
    for B in (1, 32):
        z = torch.randn(B, V)
        assert torch.equal(greedy_argmax(z), z.argmax(-1))
        out[f"rows_{B}"] = {"argmax_ms": median_ms(lambda: z.argmax(-1), reps),
                            "greedy_argmax_ms": median_ms(lambda: greedy_argmax(z), reps)}
    return out


def generate_by_rows(reps: int, rows: tuple[int, ...] = (1, 2, 4, 8, 16, 32)) -> dict:
    """ms per generated token inside ``generate()`` (gpt-mini, 16-token prompts, 32 new tokens)
    for each way :meth:`DecodeWeights.logits` can take the output layer (greedy from the full logits:
    the screen is off here), forced for every row
    count, in shuffled rounds. Run with 2 threads. The ways:

    * ``as_built``: the policy of ``muppets.nn.decode.TALL_ROWS``;
    * ``blocks_all_threads``: 8,192 columns of the (H, V/2) halves at a time, every intra-op thread;
    * ``tall``: ``(V, H) @ (H, B)`` on every intra-op thread;
    * ``halves_two_cores``: the halves at once on this thread and the side thread, 2,048 columns at a time.
    """
    torch.manual_seed(0)
    model = GPTLanguageModel(GPTConfig.preset("gpt-mini")).eval()
    cfg = GenerationConfig(max_new_tokens=32, stop_at_eos=False)
    built, tall_rows = decode.DecodeWeights.logits, decode.TALL_ROWS

    def halves_two_cores(self, hidden, side=None, block=2048):
        if hidden.shape[0] == 1 or side is None:
            return built(self, hidden, side)
        out = hidden.new_empty(hidden.shape[0], self.cut + self.output[1].shape[1])
        parts = [(w, out[:, s0:s0 + w.shape[1]]) for w, s0 in zip(self.output, (0, self.cut))]

        def product(w, dest):
            for s in range(0, w.shape[1], block):
                torch.mm(hidden, w[:, s:s + block], out=dest[:, s:s + block])

        with decode.single_threaded():
            side.submit(lambda: product(*parts[1]))
            product(*parts[0])
            side.wait()
        return out

    greedy = decode.DecodeWeights.greedy  # the ways differ in the float32 logits: greedy must use them
    decode.DecodeWeights.greedy = lambda self, hidden, side=None: greedy_argmax(self.logits(hidden, side))
    ways = {"as_built": (built, tall_rows), "blocks_all_threads": (built, 2), "tall": (built, 10**9),
            "halves_two_cores": (halves_two_cores, 10**9)}
    result = {"threads": torch.get_num_threads()}
    try:
        with torch.inference_mode():
            for B in rows:
                prompts = torch.randint(0, 50_000, (B, 16), generator=torch.Generator().manual_seed(B)).tolist()
                times: dict[str, list[float]] = {k: [] for k in ways}
                first = None
                for rnd in range(reps + 1):
                    order = list(ways)
                    random.Random(rnd).shuffle(order)
                    for name in order:
                        decode.DecodeWeights.logits, decode.TALL_ROWS = ways[name]
                        start = time.perf_counter()
                        out = generate(model, prompts, cfg)
                        if rnd:  # round 0 warms up
                            times[name].append(time.perf_counter() - start)
                        first = first or out
                        assert out == first, f"{name} changed the tokens at {B} rows"
                result[f"rows_{B}"] = {f"{k}_ms_per_step": 1e3 * statistics.median(v) / cfg.max_new_tokens
                                       for k, v in times.items()}
    finally:
        decode.DecodeWeights.logits, decode.TALL_ROWS, decode.DecodeWeights.greedy = built, tall_rows, greedy
    return result


def decode_step(reps: int) -> dict:
    """gpt-mini at batch 1: the backbone's step alone and the whole next_token_logits."""
    torch.manual_seed(0)
    model = GPTLanguageModel(GPTConfig.preset("gpt-mini")).eval()
    prompt, one = torch.arange(100, 116)[None], torch.tensor([[5]])
    with torch.inference_mode():
        def run(fn) -> float:
            cache = model.backbone.new_cache(1, 16 + reps + 2)
            model.next_token_logits(prompt, None, cache)
            return median_ms(lambda: fn(cache), reps)

        return {"backbone_step_ms": run(lambda c: model.backbone(one, None, c)),
                "next_token_logits_ms": run(lambda c: model.next_token_logits(one, None, c))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--generate-rows", action="store_true",
                    help="only the output layer's ways by batch rows, inside generate() (run with 2 threads)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.generate_rows:
        result = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
                  "greedy_choice": greedy_choice(args.reps * 20), "generate_by_rows": generate_by_rows(args.reps)}
    else:
        result = {"threads": torch.get_num_threads(), "torch": torch.__version__,
                  "fused_loss_4096_rows": fused_loss(max(3, args.reps // 3)), "reductions_1024_rows": reductions(args.reps),
                  "decode_output_layer": decode_products(args.reps * 2), "decode_step_batch_1": decode_step(args.reps * 4)}
    report(result, args.out)


def report(result: dict, out: Path | None) -> None:
    """Print ``result`` as JSON and, with ``out``, write it there too."""
    print(json.dumps(result, indent=2))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
