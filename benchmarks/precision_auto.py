"""``train.precision=auto`` against fp32 and bf16, over repeated fresh runs (issue 54).

Each run is a fresh process that trains BERT-mini (L4/H256/A4, vocab 30522, ``--batch`` x 128,
MLM + NSP on the shared Wikipedia shards) with the real :class:`muppets.train.Trainer` for
``--steps`` updates in one precision, and prints one JSON line: the median seconds of the steps
after the first (``real_tokens / tokens_per_s`` of ``log.jsonl``), and for ``auto`` what it chose,
why, and how long its probe took. ``auto-probe`` is ``auto`` with the probe forced on, as if the
CPU had native bf16 (on one without, ``auto`` is fp32 without a probe, which is ``fp32``'s code
path); it shows that the measured choice keeps a run at fp32's speed where bf16 is slower.

    # once: tokenise the shards into a corpus under WORK
    python benchmarks/precision_auto.py --work WORK --prepare
    # one repetition: fp32, bf16, auto-probe, each in a fresh process (order rotated by --rep)
    python benchmarks/precision_auto.py --work WORK --rep 0 --steps 8 --batch 32 >> runs.jsonl
    # the distribution over the repetitions
    python benchmarks/precision_auto.py --summary runs.jsonl
    # bf16 / fp32 of a bert-base-size training step (L12/H768, seq 128, batch 8), alternating
    python benchmarks/precision_auto.py --work WORK --bert-base --rounds 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

VARIANTS = ("fp32", "bf16", "auto-probe")


def _data(work: Path, batch_size: int):
    from muppets.data.shards import TokenCorpus
    from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig
    from muppets.recipes.bert_pretrain import special_ids

    return BertPretrainingData(TokenCorpus(work / "corpus"), special_ids(_tokenizer()), PretrainDataConfig(),
                               batch_size=batch_size, accumulation=1, seed=0)


def _tokenizer():
    from muppets.paths import data_dir
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    return WordPieceTokenizer.from_vocab(data_dir() / "vocab/bert-base-uncased/vocab.txt")


def prepare(work: Path) -> None:
    from muppets.data.prepare import prepare_corpus
    from muppets.paths import data_dir

    prepare_corpus([data_dir() / "english-corpus/wiki"], _tokenizer(), work / "corpus", progress=False)


def one_run(work: Path, variant: str, steps: int, batch: int) -> dict:
    """Train ``steps`` updates in ``variant`` in this process; the figures of the run."""
    from muppets.models.bert import BertConfig, BertForPreTraining
    from muppets.train import TrainConfig, Trainer, read_log
    from muppets.train import precision as precision_module

    if variant == "auto-probe":
        precision_module.cpu_has_native_bf16 = lambda: True  # measure, as on a CPU with native bf16
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("bert-mini", vocab_size=30522)).train()
    config = TrainConfig(steps=steps, batch_size=batch, lr=1e-4, log_every=0, report_to=[], progress=False,
                         plot=False, precision="auto" if variant == "auto-probe" else variant, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(model, _data(work, batch), config, Path(tmp) / "run")
        probe_s: list[float] = []
        if trainer._auto is not None:
            probe = trainer._probe_precision

            def timed_probe(*args, **kwargs):
                start = time.perf_counter()
                probe(*args, **kwargs)
                probe_s.append(time.perf_counter() - start)

            trainer._probe_precision = timed_probe
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        records = read_log(Path(tmp) / "run")
    steps_s = [r["real_tokens"] / r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    chosen = [r for r in records if "precision" in r]
    return {"variant": variant, "steps": steps, "step_s": statistics.median(steps_s[1:]), "steps_s": steps_s,
            "train_wall_s": wall, "probe_s": probe_s,
            "chose": [r["precision"] for r in chosen], "bf16_speedup": [r["bf16_speedup"] for r in chosen],
            "reason": [r["precision_reason"] for r in chosen], "threads": torch.get_num_threads()}


def repetition(work: Path, rep: int, steps: int, batch: int) -> None:
    """fp32, bf16 and auto-probe, each in a fresh process, the order rotated by ``rep``."""
    order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
    for variant in order:
        out = subprocess.run([sys.executable, __file__, "--work", str(work), "--one", variant, "--steps", str(steps),
                              "--batch", str(batch)],
                             check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        print(json.dumps({"rep": rep, **result}), flush=True)


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_rep: dict[int, dict[str, dict]] = {}
    for row in rows:
        by_rep.setdefault(row["rep"], {})[row["variant"]] = row
    print("| rep | fp32 step s | bf16 step s | bf16/fp32 speed | auto chose (bf16 speed it measured) | auto step s "
          "| auto/fp32 time | probe s |")
    print("|---|---|---|---|---|---|---|---|")
    ratios, autos, probes = [], [], []
    for rep, runs in sorted(by_rep.items()):
        f, b, a = runs["fp32"], runs["bf16"], runs["auto-probe"]
        ratios.append(f["step_s"] / b["step_s"])
        autos.append(a["step_s"] / f["step_s"])
        probes.append(sum(a["probe_s"]))
        print(f"| {rep} | {f['step_s']:.3f} | {b['step_s']:.3f} | {ratios[-1]:.2f}x | {a['chose'][0]} "
              f"({a['bf16_speedup'][0]:.2f}x) | {a['step_s']:.3f} | {autos[-1]:.3f} | {probes[-1]:.1f} |")

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):.3f}, min {min(values):.3f}, max {max(values):.3f}"

    print(f"\n{len(by_rep)} repetitions; bf16 speed / fp32: {spread(ratios)}; auto step time / fp32: {spread(autos)}; "
          f"probe seconds: {spread(probes)}")
    print("fp32 step s:", spread([r["fp32"]["step_s"] for r in by_rep.values()]),
          "| bf16 step s:", spread([r["bf16"]["step_s"] for r in by_rep.values()]))


def bert_base(work: Path, rounds: int, batch: int) -> None:
    """bf16 autocast vs fp32 on a bert-base-size training step (one model, the same batches)."""
    from muppets.models.bert import BertConfig, BertForPreTraining
    from muppets.train.optim import build_optimizer
    from muppets.train.precision import autocast

    data = _data(work, batch)
    batches = [data.micro_batches(s, 0, 1)[0] for s in range(rounds + 2)]
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("bert-base", vocab_size=30522)).train()
    optimizer, _ = build_optimizer(model, lr=1e-4, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}

    def step(batch: dict, dtype) -> float:
        start = time.perf_counter()
        with autocast(torch.device("cpu"), dtype):
            out = model(**batch)
            loss = sum(out.loss_sums[k] / out.counts[k] for k in out.loss_sums)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step(batches[-1], None)  # warm-up; bf16's on one sequence (emulated bf16 is slow)
    step({k: v[:1] for k, v in batches[-2].items()}, torch.bfloat16)
    for r in range(rounds):
        order = (("fp32", None), ("bf16", torch.bfloat16))
        for name, dtype in (order if r % 2 == 0 else order[::-1]):
            times[name].append(step(batches[r], dtype))
            print(f"{name} step {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
    fp32, bf16 = statistics.median(times["fp32"]), statistics.median(times["bf16"])
    print(json.dumps({"model": f"bert-base L12/H768/A12, vocab 30522, seq 128, batch {batch}, MLM+NSP, AdamW",
                      "threads": torch.get_num_threads(), "fp32_step_s": times["fp32"], "bf16_step_s": times["bf16"],
                      "bf16_speed_vs_fp32": fp32 / bf16}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, help="directory holding the tokenised corpus (--prepare writes it)")
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--rep", type=int, help="run one repetition (fp32, bf16, auto-probe) as JSON lines")
    ap.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="sequences of 128 tokens per step (BERT-mini runs)")
    ap.add_argument("--summary", type=Path, help="print the distribution over the JSON lines of a file")
    ap.add_argument("--bert-base", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="timed steps per precision (--bert-base)")
    ap.add_argument("--base-batch", type=int, default=8, help="sequences per step (--bert-base)")
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
    elif args.prepare:
        prepare(args.work)
    elif args.one:
        print(json.dumps(one_run(args.work, args.one, args.steps, args.batch)))
    elif args.bert_base:
        bert_base(args.work, args.rounds, args.base_batch)
    elif args.rep is not None:
        repetition(args.work, args.rep, args.steps, args.batch)
    else:
        ap.error("say what to run: --prepare, --rep N, --summary FILE or --bert-base")


if __name__ == "__main__":
    main()
