"""The GPU path, checked: a few steps of every model-running command on CUDA and on the CPU.

For each of pretrain (BERT: MLM + NSP; GPT: causal LM), finetune (MiniLM + a classification
head), generate (GPT, greedy), embed (MiniLM sentence vectors) and serve (``muppets serve``
started as a subprocess on 127.0.0.1, ``/v1/embeddings`` requests over HTTP), this script runs
the same seeded work with muppets and with transformers (sentence-transformers for embed) on
each device, prints tokens/s and the muppets / transformers ratio per device, and checks:

- CUDA fp32 vs CPU fp32, same weights and batches, dropout 0: training losses after k steps
  within 1e-3 relative (TF32 is off); greedy tokens identical for the first 16; sentence vectors
  cosine >= 0.9999. CUDA bf16 (``train.precision=bf16``'s autocast) vs CPU fp32: losses within
  3e-2 relative.
- on every device, muppets vs transformers from the same weights (and the served vector vs
  the offline ``embed`` one): losses within 1e-3 relative
  (fp32), greedy tokens identical, sentence vectors cosine >= 0.9999. This is what ``--cpu-only``
  (the dry run the test suite runs) checks with no GPU.

Batches are random token ids (a generated corpus: the point is the device path, not the
language); MiniLM is the real all-MiniLM-L6-v2 (``--model minilm``). Exit status 1 when a check
fails.

    python benchmarks/gpu_check.py --out benchmarks/results/gpu_check.json       # GPU + CPU
    python benchmarks/gpu_check.py --cpu-only --out /tmp/gpu_check.json          # the dry run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from muppets.generate import GenerationConfig, generate
from muppets.interop.hf_bert import to_hf_state
from muppets.interop.hf_gpt import save_hf_gpt
from muppets.interop.hf_tasks import save_hf_task_model
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.models.gpt import GPTConfig, GPTLanguageModel
from muppets.sentence.encode import SentenceModel
from muppets.tasks.spec import TextExample
from muppets.train.device import to_device
from muppets.train.optim import build_optimizer
from muppets.train.precision import autocast
from muppets.transfer.batching import collate
from muppets.transfer.features import FeatureOptions, make_features
from muppets.transfer.finetune import resolve_model
from muppets.transfer.models import load_tokenizer, new_task_model

FP32_REL, BF16_REL, COSINE, SAME_TOKENS = 1e-3, 3e-2, 0.9999, 16


@dataclass
class Size:
    """The work of one run: full on a GPU, tiny for the dry run."""

    hidden: int
    layers: int
    batch: int
    seq: int
    steps: int
    new_tokens: int
    sentences: int


FULL = Size(hidden=512, layers=4, batch=32, seq=128, steps=20, new_tokens=64, sentences=2048)
DRY = Size(hidden=64, layers=2, batch=4, seq=32, steps=3, new_tokens=16, sentences=32)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


# ----------------------------------------------------------------------------- training steps


def train_steps(model, loss_fn, batches, device, amp) -> tuple[list[float], float]:
    """Plain AdamW steps (muppets' optimizer groups on both sides); losses and seconds of all
    but the first step (warm-up)."""
    model.to(device).train()
    opt, _ = build_optimizer(model, lr=1e-4, weight_decay=0.01, betas=[0.9, 0.999], eps=1e-6)
    losses, seconds = [], 0.0
    for i, batch in enumerate(batches):
        def step(batch=batch):
            with autocast(device, amp):
                loss = loss_fn(model, to_device(batch, device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        loss, took = timed(device, step)
        losses.append(float(loss))
        seconds += took if i else 0.0
    return losses, seconds


def ours_loss(model, batch):
    out = model(**batch)
    return sum(out.loss_sums[k] / out.counts[k] for k in out.loss_sums)


def bert_batches(size: Size, vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    P = max(1, size.seq * 15 // 100)
    out = []
    for _ in range(size.steps):
        ids = torch.randint(5, vocab, (size.batch, size.seq), generator=g)
        mask = torch.ones(size.batch, size.seq, dtype=torch.long)
        mask[: size.batch // 2, size.seq * 3 // 4:] = 0  # some padding, as real batches have
        positions = torch.stack([torch.randperm(size.seq * 3 // 4, generator=g)[:P] for _ in range(size.batch)])
        out.append({"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
                    "mlm_positions": positions, "mlm_labels": ids.gather(1, positions),
                    "nsp_labels": torch.randint(0, 2, (size.batch,), generator=g)})
    return out


def hf_bert_batch(batch: dict) -> dict:
    labels = torch.full_like(batch["input_ids"], -100)
    labels.scatter_(1, batch["mlm_positions"], batch["mlm_labels"])
    return {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
            "attention_mask": batch["attention_mask"], "labels": labels, "next_sentence_label": batch["nsp_labels"]}


def pretrain_bert(size: Size, device, amp, workdir: Path) -> dict:
    import transformers

    cfg = BertConfig(vocab_size=30522, hidden_size=size.hidden, num_layers=size.layers, num_heads=size.hidden // 64,
                     intermediate_size=4 * size.hidden, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    ours = BertForPreTraining(cfg)
    hf = transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    hf.load_state_dict(to_hf_state(ours), strict=False)
    hf.tie_weights()
    batches = bert_batches(size, cfg.vocab_size)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:])
    return pair(ours, ours_loss, batches, hf, lambda m, b: m(**b).loss, [hf_bert_batch(b) for b in batches],
                tokens, device, amp)


def gpt_pair(size: Size, workdir: Path):
    import transformers

    cfg = GPTConfig(vocab_size=50257, hidden_size=size.hidden, num_layers=size.layers, num_heads=size.hidden // 64,
                    max_position_embeddings=1024, embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0)
    torch.manual_seed(0)
    ours = GPTLanguageModel(cfg)
    path = save_hf_gpt(ours, workdir / f"gpt-{size.hidden}")
    return ours, transformers.GPT2LMHeadModel.from_pretrained(path, attn_implementation="sdpa")


def pretrain_gpt(size: Size, device, amp, workdir: Path) -> dict:
    ours, hf = gpt_pair(size, workdir)
    g = torch.Generator().manual_seed(1)
    batches = [{"input_ids": torch.randint(0, 50257, (size.batch, size.seq), generator=g)} for _ in range(size.steps)]
    for b in batches:
        b["labels"] = b["input_ids"]
    tokens = size.batch * size.seq * (size.steps - 1)
    return pair(ours, ours_loss, batches, hf, lambda m, b: m(**b).loss, batches, tokens, device, amp)


def finetune(size: Size, device, amp, workdir: Path) -> dict:
    import transformers

    src = resolve_model("minilm")
    tok = load_tokenizer(src)
    words = "the film was a good bad slow quick story with an odd end and fine acting".split()
    rng = np.random.default_rng(2)
    n = size.batch * size.steps
    examples = [TextExample(str(i), " ".join(rng.choice(words, size.seq // 2)), None, str(i % 2), f"generated:{i}")
                for i in range(n)]
    features = make_features("classify", examples, tok, FeatureOptions(max_seq_len=size.seq), ["0", "1"])
    batches = [collate(features[i: i + size.batch], tok.pad_id) for i in range(0, n, size.batch)]
    torch.manual_seed(0)
    ours = new_task_model(src, "classify", 2, tok, dropout=0.0)
    path = workdir / "minilm-classify"
    save_hf_task_model(ours, path, tok)
    hf = transformers.BertForSequenceClassification.from_pretrained(
        path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[1:])
    return pair(ours, lambda m, b: m(**b).loss, batches, hf, lambda m, b: m(**b).loss, batches, tokens, device, amp)


def pair(ours, ours_fn, batches, hf, hf_fn, hf_batches, tokens, device, amp) -> dict:
    ours_losses, ours_s = train_steps(ours, ours_fn, batches, device, amp)
    hf_losses, hf_s = train_steps(hf, hf_fn, hf_batches, device, amp)
    return {"losses": ours_losses, "transformers_losses": hf_losses, "tokens_per_s": tokens / ours_s,
            "transformers_tokens_per_s": tokens / hf_s}


# ----------------------------------------------------------------------------- inference


def generate_check(size: Size, device, amp, workdir: Path) -> dict:
    ours, hf = gpt_pair(size, workdir)
    ours, hf = ours.to(device).eval(), hf.to(device).eval()
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(0, 50257, (size.batch, 16), generator=g)
    cfg = GenerationConfig(max_new_tokens=size.new_tokens, stop_at_eos=False)
    with torch.inference_mode():
        generate(ours, prompts[:1].tolist(), GenerationConfig(max_new_tokens=2, stop_at_eos=False))  # warm-up
        new, took = timed(device, lambda: generate(ours, prompts.tolist(), cfg))
        hf_out, hf_took = timed(device, lambda: hf.generate(
            prompts.to(device), attention_mask=torch.ones_like(prompts, device=device), do_sample=False,
            max_new_tokens=size.new_tokens, min_new_tokens=size.new_tokens, pad_token_id=0))
    tokens = size.batch * size.new_tokens
    return {"tokens": [row[:SAME_TOKENS] for row in new], "transformers_tokens": hf_out[:, 16:16 + SAME_TOKENS].tolist(),
            "tokens_per_s": tokens / took, "transformers_tokens_per_s": tokens / hf_took}


def sentences(n: int) -> list[str]:
    rng = np.random.default_rng(4)
    words = "a river bank holds money and water while the light of day falls on quiet streets".split()
    return [" ".join(rng.choice(words, int(rng.integers(5, 30)))) for _ in range(n)]


def embed(size: Size, device, amp, workdir: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    texts = sentences(size.sentences)
    ours = SentenceModel("minilm", device=str(device))
    ours.encode(texts[:8])  # warm-up
    vectors, took = timed(device, lambda: ours.encode(texts, batch_size=64))
    st = SentenceTransformer(str(resolve_model("minilm")), device=str(device))
    st.encode(texts[:8])
    theirs, st_took = timed(device, lambda: st.encode(texts, batch_size=64))
    tokens = sum(len(r) for r in ours.token_ids(texts))
    return {"vectors": vectors[:4].tolist(), "transformers_vectors": np.asarray(theirs)[:4].tolist(),
            "tokens_per_s": tokens / took, "transformers_tokens_per_s": tokens / st_took}


def serve(size: Size, device, amp, workdir: Path) -> dict:
    """``muppets serve minilm`` in a subprocess; /v1/embeddings requests of 16 inputs over HTTP."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "muppets.cli", "serve", "minilm", "--port", str(port), "--device", str(device),
           "--backend", "torch", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        texts = sentences(size.sentences)
        chunks = [texts[i: i + 16] for i in range(0, len(texts), 16)]
        post(url + "/v1/embeddings", {"input": chunks[0]})  # warm-up
        start, tokens, first = time.perf_counter(), 0, None
        for chunk in chunks:
            reply = post(url + "/v1/embeddings", {"input": chunk})
            tokens += reply["usage"]["prompt_tokens"]
            first = first or reply["data"][0]["embedding"]
        return {"vector": first, "tokens_per_s": tokens / (time.perf_counter() - start)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"muppets serve exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("muppets serve did not answer /health in time")


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


COMMANDS = {"pretrain_bert": pretrain_bert, "pretrain_gpt": pretrain_gpt, "finetune": finetune,
            "generate": generate_check, "embed": embed, "serve": serve}


# ----------------------------------------------------------------------------- checks


def rel(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))).min())


def agreement(name: str, a: dict, b: dict, tol: float, what: str) -> dict:
    """One check between two results of ``name`` (``b`` the reference); ``what`` names them."""
    if "losses" in a:
        value = rel(a["losses"], b["losses"])
        return {"check": what, "metric": "max relative loss difference", "value": value, "limit": tol,
                "ok": value <= tol}
    if "tokens" in a:
        same = a["tokens"] == b["tokens"]
        return {"check": what, "metric": f"greedy tokens identical (first {SAME_TOKENS})", "value": same, "ok": same}
    key = "vectors" if "vectors" in a else "vector"
    value = cosine(a[key], b[key])
    return {"check": what, "metric": "min cosine", "value": value, "limit": COSINE, "ok": value >= COSINE}


def against_transformers(name: str, r: dict) -> dict | None:
    theirs = {k[len("transformers_"):]: v for k, v in r.items() if k.startswith("transformers_") and k != "transformers_tokens_per_s"}
    return agreement(name, r, theirs, FP32_REL, "muppets vs transformers") if theirs else None


def machine() -> dict:
    import transformers

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "threads": torch.get_num_threads(), "gpu": gpu, "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__, "python": platform.python_version()}


def run_device(size: Size, device: torch.device, amp, tag: str, workdir: Path, only: list[str]) -> dict:
    out = {}
    for name in only:
        torch.manual_seed(0)
        start = time.perf_counter()
        out[name] = COMMANDS[name](size, device, amp, workdir)
        out[name]["seconds"] = time.perf_counter() - start
        ratio = out[name]["tokens_per_s"] / out[name].get("transformers_tokens_per_s", float("nan"))
        print(f"{tag:>10} {name:<14} {out[name]['tokens_per_s']:>12.0f} tokens/s"
              + (f"   x{ratio:.2f} transformers" if "transformers_tokens_per_s" in out[name] else ""), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--cpu-only", action="store_true", help="the dry run: CPU half only, tiny sizes")
    p.add_argument("--only", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on both devices, for the 1e-3 checks
    torch.backends.cudnn.allow_tf32 = False
    gpu = None if args.cpu_only else torch.device(args.device)
    if gpu is None or gpu.type != "cuda" or not torch.cuda.is_available():
        print("no CUDA device: CPU half only" if not args.cpu_only else "--cpu-only: CPU half only (dry run)")
        gpu = None
    size = DRY if gpu is None else FULL
    result = {"machine": machine(), "size": size.__dict__, "tolerances": {
        "fp32_relative_loss": FP32_REL, "bf16_relative_loss": BF16_REL, "cosine": COSINE, "same_tokens": SAME_TOKENS}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        runs = {"cpu": run_device(size, torch.device("cpu"), None, "cpu fp32", workdir, args.only)}
        if gpu is not None:
            runs["cuda"] = run_device(size, gpu, None, "cuda fp32", workdir, args.only)
            train = [n for n in args.only if n.startswith("pretrain") or n == "finetune"]
            runs["cuda_bf16"] = run_device(size, gpu, torch.bfloat16, "cuda bf16", workdir, train)
    checks = []
    for device, per in runs.items():
        for name, r in per.items():
            if device != "cuda_bf16" and (check := against_transformers(name, r)):
                checks.append({"command": name, "device": device, **check})
            if name == "serve" and "embed" in per:  # served over HTTP == encoded offline
                offline = {"vector": per["embed"]["vectors"][0]}
                checks.append({"command": name, "device": device,
                               **agreement(name, r, offline, COSINE, "served vs embed")})
            if device != "cpu":
                tol = BF16_REL if device == "cuda_bf16" else FP32_REL
                checks.append({"command": name, "device": device,
                               **agreement(name, r, runs["cpu"][name], tol, f"{device} vs cpu fp32")})
    result.update(runs=runs, checks=checks, ok=all(c["ok"] for c in checks))
    for c in checks:
        print(f"{'ok  ' if c['ok'] else 'FAIL'} {c['command']:<14} {c['device']:<10} {c['check']}: "
              f"{c['metric']} {c['value']}" + (f" (limit {c['limit']})" if "limit" in c else ""))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
