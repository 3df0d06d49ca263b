"""A toy model + deterministic data for the trainer tests, and a script to train it.

Imported by ``test_trainer.py`` / ``test_checkpoint.py``, and run as a subprocess (also under
``torchrun``) for the resume, signal and DDP tests::

    python tests/_toy_train.py RUN_DIR --steps 6 [--resume PATH|none] [--out result.json] ...

The data is a fixed random tensor sliced by global example index: update ``s`` uses examples
``s*B .. (s+1)*B`` (modulo the pool); rank ``r`` of ``W`` takes the ``r``-th contiguous slice,
split into ``accumulation`` micro-batches, so DDP shards are slices of the one-process batch.
Two loss terms: ``mlm`` (a random ~30 % of positions labelled, so its count differs between
micro-batches) and ``cls`` (one unit per sequence).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ, HIDDEN, POOL = 13, 6, 8, 256


@dataclass
class ToyOutput:
    loss_sums: dict[str, torch.Tensor]


class ToyModel(nn.Module):
    """Embedding -> LayerNorm -> Linear+tanh -> dropout -> tied output + a 2-way classifier."""

    def __init__(self, dropout: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(HIDDEN, VOCAB)
        self.out.weight = self.embed.weight  # tied, like BERT's decoder
        self.cls = nn.Linear(HIDDEN, 2)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor, cls_labels: torch.Tensor,
                poison: torch.Tensor | None = None) -> ToyOutput:
        h = self.drop(torch.tanh(self.proj(self.norm(self.embed(ids)))))  # (B, T, H)
        logits = self.out(h)  # (B, T, V)
        mlm = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        cls = F.cross_entropy(self.cls(h.mean(1)), cls_labels, reduction="sum")
        if poison is not None and bool(poison.any()):
            mlm = mlm * float("nan")
        return ToyOutput({"mlm": mlm, "cls": cls})


class ToyData:
    """Deterministic :class:`muppets.train.StepData` over a fixed pool of examples."""

    def __init__(self, batch_size: int, accumulation: int, *, nan_at: int | None = None,
                 signal_at: int | None = None, sleep: float = 0.0) -> None:
        self.batch_size, self.accumulation = batch_size, accumulation
        self.nan_at, self.signal_at, self.sleep = nan_at, signal_at, sleep
        g = torch.Generator().manual_seed(1234)
        self.ids = torch.randint(0, VOCAB, (POOL, SEQ), generator=g)
        masked = torch.rand(POOL, SEQ, generator=g) < 0.3
        self.labels = torch.where(masked, (self.ids * 3 + 1) % VOCAB, torch.full_like(self.ids, -100))
        self.cls = torch.randint(0, 2, (POOL,), generator=g)

    def micro_batches(self, step: int, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
        if self.signal_at is not None and step == self.signal_at:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while update `step` is computed
        if self.sleep:
            time.sleep(self.sleep)
        per_rank = self.batch_size // world
        start = step * self.batch_size + rank * per_rank
        index = torch.arange(start, start + per_rank) % POOL
        out = []
        for chunk in index.chunk(self.accumulation):
            batch = {"ids": self.ids[chunk], "labels": self.labels[chunk], "cls_labels": self.cls[chunk]}
            if self.nan_at is not None:
                batch["poison"] = torch.full((len(chunk),), step == self.nan_at)
            out.append(batch)
        return out

    def normalizers(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"mlm": float((batch["labels"] != -100).sum()), "cls": float(len(batch["cls_labels"]))}

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["ids"].numel())


def toy_config(**overrides: object):
    """A TrainConfig for the toy runs: tiny, quiet, single-threaded."""
    from muppets.train import TrainConfig

    base = dict(steps=6, batch_size=8, accumulation=2, lr=1e-2, warmup_steps=2, schedule="cosine",
                log_every=0, tensorboard=False, progress=False, threads=1, seed=7)
    base.update(overrides)
    return TrainConfig(**base)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir", type=Path)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--accumulation", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", default="none")
    p.add_argument("--signal-at", type=int, default=None)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from muppets.train import Trainer, shutdown_distributed

    args = _parse(argv)
    config = toy_config(steps=args.steps, batch_size=args.batch, accumulation=args.accumulation,
                        checkpoint_every=args.checkpoint_every)
    data = ToyData(args.batch, args.accumulation, signal_at=args.signal_at, sleep=args.sleep)
    trainer = Trainer(ToyModel(dropout=args.dropout), data, config, args.run_dir)
    resume = {"none": False, "latest": True}.get(args.resume, Path(args.resume))
    result = trainer.train(resume=resume)
    if args.out is not None and trainer.dist.is_main:
        payload = {"step": result.step, "losses": result.losses, "stopped_early": result.stopped_early,
                   "checkpoint": str(result.checkpoint), "world": trainer.dist.world}
        args.out.write_text(json.dumps(payload), encoding="utf-8")
    shutdown_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
