"""Zero-shot (and few-shot) use of a left-to-right language model by prompting (GPT-2, §3).

No parameter is trained; each task is written as text the model continues or scores:

- **Multiple choice** (:func:`choose`, HellaSwag): each ending is scored by its mean token
  log-probability given the context (length-normalised, so long endings are not penalised for
  their length); the best-scoring ending is the answer.
- **Reading comprehension** (:func:`answer`, SQuAD): ``"{context}\\nQ: {question}\\nA:"``,
  greedy decoding up to the end of the line (GPT-2 §3.5 does this for CoQA); scored with the
  official SQuAD EM/F1 (as fractions, as every score of this module).
- **Summarisation** (:func:`summarize`): ``"{article}\\nTL;DR:"``, top-k sampling with k = 2
  (GPT-2 §3.6), the first three sentences kept.
- **Translation** (:func:`translate`): a few ``"english sentence = french sentence"`` lines as
  context, then ``"{sentence} ="`` (GPT-2 §3.7); scored with corpus BLEU (:func:`corpus_bleu`).

``model`` is a :class:`~muppets.models.gpt.GPTLanguageModel`, ``tok`` its
:class:`~muppets.tokenizers.bpe.ByteLevelBPETokenizer`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from muppets.generate import GenerationConfig, generate_text
from muppets.transfer.batching import eval_batches


# ----------------------------------------------------------------------------- scoring


@torch.no_grad()
def continuation_logprobs(model, tok, contexts: Sequence[str], continuations: Sequence[str],
                          batch_size: int = 16) -> list[tuple[float, int]]:
    """``(sum of log p(continuation tokens | context), number of continuation tokens)`` per pair.

    The continuation is encoded on its own (so a leading space stays with its first token), the
    context before it; when both exceed the model's positions the context is cut from the left.
    """
    limit = model.cfg.max_position_embeddings
    ctx_ids, cont_ids = tok.encode_batch(list(contexts)), tok.encode_batch(list(continuations))
    rows = []
    for c, x in zip(ctx_ids, cont_ids):
        c = c or [model.cfg.eos_token_id]  # an empty context: condition on end-of-text
        x = x[:limit - 1]
        rows.append(((c + x)[-limit:], len(x)))
    out: list[tuple[float, int]] = [(0.0, 0)] * len(rows)
    was_training = model.training
    model.eval()
    try:
        for index in eval_batches([len(r[0]) for r in rows], batch_size):
            for i, value in zip(index, _score_batch(model, [rows[i] for i in index])):
                out[i] = value
    finally:
        model.train(was_training)
    return out


def _score_batch(model, rows: list[tuple[list[int], int]]) -> list[tuple[float, int]]:
    T = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), T), model.cfg.eos_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.bool)
    for k, (row, _) in enumerate(rows):
        ids[k, :len(row)], mask[k, :len(row)] = torch.tensor(row), True
    hidden = model.backbone(ids, mask).last  # (B, T, H)
    out = []
    for k, (row, n) in enumerate(rows):
        if n == 0:
            out.append((0.0, 0))
            continue
        L = len(row)
        logits = F.linear(hidden[k, L - n - 1:L - 1], model.lm_weight)  # (n, V): predict the last n tokens
        logp = logits.float().log_softmax(-1).gather(1, ids[k, L - n:L, None]).sum()
        out.append((float(logp), n))
    return out


def choose(model, tok, examples: Sequence, batch_size: int = 16) -> list[int]:
    """For choice examples (``context``, ``endings``): the ending with the best mean token
    log-probability, each ending read with a leading space after the context."""
    contexts = [ex.context for ex in examples for _ in ex.endings]
    endings = [" " + e.strip() for ex in examples for e in ex.endings]
    scores = continuation_logprobs(model, tok, contexts, endings, batch_size)
    out, k = [], 0
    for ex in examples:
        mine = scores[k:k + len(ex.endings)]
        k += len(ex.endings)
        out.append(int(np.argmax([s / max(n, 1) for s, n in mine])))
    return out


# ----------------------------------------------------------------------------- generation tasks


def qa_prompt(context: str, question: str, shots: Sequence[tuple[str, str, str]] = ()) -> str:
    """``context / Q: question / A:`` (after optional solved examples, a blank line apart)."""
    parts = [f"{c}\nQ: {q}\nA: {a}\n\n" for c, q, a in shots]
    return "".join(parts) + f"{context}\nQ: {question}\nA:"


def answer(model, tok, examples: Sequence, shots: Sequence[tuple[str, str, str]] = (),
           max_new_tokens: int = 24, batch_size: int = 8) -> list[str]:
    """Greedy answers to span examples (``context``, ``question``), cut at the end of the line."""
    prompts = [qa_prompt(ex.context, ex.question, shots) for ex in examples]
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, stop=["\n"])
    out = []
    for i in range(0, len(prompts), batch_size):
        out += [a.strip() for a in generate_text(model, tok, _fit(tok, prompts[i:i + batch_size], model, max_new_tokens), cfg)]
    return out


def summarize(model, tok, articles: Sequence[str], max_new_tokens: int = 100, top_k: int = 2,
              seed: int = 0) -> list[str]:
    """``article + "\\nTL;DR:"``, top-k sampling; the first three sentences of the continuation."""
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, top_k=top_k, seed=seed)
    prompts = _fit(tok, [f"{a}\nTL;DR:" for a in articles], model, max_new_tokens)
    return [" ".join(_sentences(t)[:3]) for t in generate_text(model, tok, prompts, cfg)]


def translate(model, tok, sentences: Sequence[str], shots: Sequence[tuple[str, str]],
              max_new_tokens: int = 64, batch_size: int = 8) -> list[str]:
    """Few-shot translation: ``"src = tgt"`` example lines, then ``"{sentence} ="``; greedy to
    the end of the line."""
    head = "".join(f"{s} = {t}\n" for s, t in shots)
    prompts = [f"{head}{s} =" for s in sentences]
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, stop=["\n"])
    out = []
    for i in range(0, len(prompts), batch_size):
        out += [t.strip() for t in generate_text(model, tok, _fit(tok, prompts[i:i + batch_size], model, max_new_tokens), cfg)]
    return out


def _fit(tok, prompts: list[str], model, max_new_tokens: int) -> list[str]:
    """Prompts cut from the left (whole tokens) so prompt + new tokens fit the model's positions."""
    limit = model.cfg.max_position_embeddings
    room = max(limit // 2, limit - max_new_tokens)  # generation stops at the last position anyway
    out = []
    for p, ids in zip(prompts, tok.encode_batch(prompts)):
        out.append(p if len(ids) <= room else tok.decode(ids[-room:]))
    return out


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


# ----------------------------------------------------------------------------- BLEU


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], max_n: int = 4) -> float:
    """Corpus BLEU-4 (Papineni et al. 2002) on whitespace tokens with punctuation split off,
    one reference per hypothesis, uniform weights and the brevity penalty; a fraction in [0, 1]
    like every metric of muppets (sacreBLEU prints 100 times it)."""
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        h, r = _bleu_tokens(hyp), _bleu_tokens(ref)
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, max_n + 1):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    if min(matches) == 0 or hyp_len == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n
    brevity = min(0.0, 1.0 - ref_len / hyp_len)
    return math.exp(brevity + log_precision)


def _bleu_tokens(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text)


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


# ----------------------------------------------------------------------------- evaluations


def evaluate(task: str, model, tok, limit: int = 0, shots: int = 0, seed: int = 0) -> dict:
    """Score a zero-/few-shot task on shared data: ``hellaswag`` (accuracy on the 10,042
    validation items), ``squad`` (EM/F1 on the dev articles of the SQuAD split),
    ``translate`` (XNLI dev premises, English -> French, corpus BLEU). ``limit`` keeps the first
    N items (0 = all); ``shots`` solved examples are drawn (seeded) from other items."""
    from muppets.metrics import compute
    from muppets.tasks import load_task

    rng = np.random.default_rng(seed)
    if task == "hellaswag":
        data = load_task("hellaswag")
        items = _first(data["train"] + data["dev"], limit)
        preds = choose(model, tok, items)
        return {"task": task, "items": len(items), "accuracy": compute("accuracy", preds, [ex.label for ex in items])["accuracy"],
                "chance": float(np.mean([1.0 / len(ex.endings) for ex in items]))}
    if task == "squad":
        data = load_task("squad")
        items = _first(data["dev"], limit)
        pool = data["train"]
        solved = [(pool[i].context, pool[i].question, pool[i].answers[0].text)
                  for i in rng.choice(len(pool), shots, replace=False)] if shots else []
        preds = answer(model, tok, items, solved)
        scores = compute("squad", {ex.id: p for ex, p in zip(items, preds)},
                         {ex.id: [a.text for a in ex.answers] for ex in items})
        return {"task": task, "items": len(items), "shots": shots, **scores}
    if task == "translate":
        pairs = _xnli_pairs("en", "fr")
        order = rng.permutation(len(pairs))
        solved = [pairs[i] for i in order[:shots]]
        items = _first([pairs[i] for i in order[shots:]], limit)
        hyps = translate(model, tok, [s for s, _ in items], solved)
        return {"task": task, "items": len(items), "shots": shots,
                "bleu": corpus_bleu(hyps, [t for _, t in items])}
    raise ValueError(f"unknown zero-shot task {task!r}; expected hellaswag, squad or translate")


def _first(items: list, limit: int) -> list:
    return items[:limit] if limit else items


def _xnli_pairs(src: str, tgt: str) -> list[tuple[str, str]]:
    """Distinct (source, target) premises of the parallel XNLI dev files."""
    from muppets.tasks import load_task

    a, b = load_task(f"xnli-{src}"), load_task(f"xnli-{tgt}")
    rows_a = [ex for split in ("train", "dev") for ex in a[split]]
    rows_b = {ex.id.rsplit("-", 1)[-1]: ex for split in ("train", "dev") for ex in b[split]}
    seen, out = set(), []
    for ex in rows_a:
        other = rows_b.get(ex.id.rsplit("-", 1)[-1])
        if other is not None and ex.text not in seen:
            seen.add(ex.text)
            out.append((ex.text, other.text))
    return out
