#!/usr/bin/env bash
# The BERT paper's ablation at our scale (issue 4): the same compute budget spent on a
# bidirectional MLM+NSP encoder (bert-mini, L4/H256/A4) and on a left-to-right LM of the same
# body size (gpt-mini, L4/H256/A4): each pretrained from scratch for MINUTES on ONE core (one
# torch thread, bf16 autocast) of the same machine, the two side by side, then fine-tuned on
# SST-2, CoNLL-2003 and the SQuAD split with the same settings (lr 1e-4, batch 32, 3 epochs;
# SQuAD 1 epoch, 384/128 windows). Each model keeps its own tokenizer (WordPiece 30,522 /
# GPT-2 BPE 50,257): the vocabulary differs, the transformer body does not.
#
#   MINUTES=60 bash benchmarks/ablation_bert_vs_gpt.sh        # ~1 h pretraining + ~1.5 h fine-tuning
#   python benchmarks/finetune_table.py                        # rows ablation-bert / ablation-gpt
#
# Fine-tuning: both sides only the task loss (the GPT side with lm_coef=0: no auxiliary LM, as
# BERT has none), PRECISION (default bf16, autocast) for both, PARALLEL runs at a time (default 2,
# one per core; PARALLEL=1 leaves the other core free). SKIP_PRETRAIN=1 only fine-tunes;
# SIDES="bert gpt" and TASKS="sst2 conll2003 squad" pick which fine-tuning runs to make.
#
# GPT_RUN=runs/gpt-mini reuses a gpt-mini already trained that way (configs/gpt-mini.yaml with
# train.threads=1 train.precision=bf16 for MINUTES — BENCHMARKS.md, issue 4) instead of training
# a second one. STEPS_BERT / STEPS_GPT set each schedule's length so it ends near the budget
# (one-thread bf16 on the 2-core EPYC: ~0.75 s per bert-mini step, ~4.4 s per gpt-mini step).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${MINUTES:-60}
common=(train.max_minutes="$minutes" train.threads=1 train.precision=bf16 train.progress=false)
parallel=${PARALLEL:-2}
precision=${PRECISION:-bf16}
bert=""
if [ -z "${SKIP_PRETRAIN:-}" ]; then
  .venv/bin/muppets pretrain configs/bert-mini.yaml run_dir=runs/ablation-bert \
      train.steps="${STEPS_BERT:-4800}" "${common[@]}" > runs/ablation-bert.log 2>&1 &
  bert=$!
fi
gpt_run=${GPT_RUN:-runs/ablation-gpt}
if [ -z "${GPT_RUN:-}" ] && [ -z "${SKIP_PRETRAIN:-}" ]; then
  .venv/bin/muppets pretrain configs/gpt-mini.yaml run_dir="$gpt_run" \
      train.steps="${STEPS_GPT:-820}" train.warmup_steps=100 "${common[@]}" > runs/ablation-gpt.log 2>&1
fi
[ -n "$bert" ] && wait "$bert"
for name in ${SIDES:-bert gpt}; do
  model=runs/ablation-bert
  [ "$name" = gpt ] && model=$gpt_run
  for task in ${TASKS:-sst2 conll2003 squad}; do
    seeds=1,2,3
    extra=(precision="$precision")
    [ "$name" = gpt ] && extra+=(lm_coef=0)
    [ "$task" = squad ] && seeds=1 && extra+=(max_seq_len=384 doc_stride=128 epochs=1)
    .venv/bin/muppets finetune "$task" --seeds "$seeds" model="$model" lr=1e-4 threads=1 "${extra[@]}" \
        run_dir="runs/ft-$task-ablation-$name" progress=false > "runs/ft-$task-ablation-$name.log" 2>&1 &
    if [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; then wait -n || true; fi  # one run per core
  done
done
wait || true
