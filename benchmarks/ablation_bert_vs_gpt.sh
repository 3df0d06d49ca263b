#!/usr/bin/env bash
# The BERT paper's ablation at our scale (issue 4): the same compute budget spent on a
# bidirectional MLM+NSP encoder (bert-mini, L4/H256/A4) and on a left-to-right LM of the same
# body size (gpt-mini, L4/H256/A4), each pretrained for MINUTES of wall-clock on the same corpus
# and machine, then fine-tuned on SST-2, CoNLL-2003 and the SQuAD split with the same settings.
# Each model keeps its own tokenizer (WordPiece 30,522 / GPT-2 BPE 50,257): the vocabulary size
# differs, the transformer body does not.
#
#   MINUTES=60 bash benchmarks/ablation_bert_vs_gpt.sh          # ~2 h of pretraining + fine-tuning
#   python benchmarks/finetune_table.py                          # (runs/ft-*-ablation-{bert,gpt})
#
# STEPS_BERT / STEPS_GPT set each schedule's length so that it ends near the budget (measure the
# step time first: `muppets pretrain CONFIG train.steps=20` prints tokens/s).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${MINUTES:-60}
.venv/bin/muppets pretrain configs/bert-mini.yaml run_dir=runs/ablation-bert \
    train.max_minutes="$minutes" train.steps="${STEPS_BERT:-3400}" > runs/ablation-bert.log 2>&1
.venv/bin/muppets pretrain configs/gpt-mini.yaml run_dir=runs/ablation-gpt \
    train.max_minutes="$minutes" train.steps="${STEPS_GPT:-3000}" > runs/ablation-gpt.log 2>&1
for name in bert gpt; do
  for task in sst2 conll2003 squad; do
    seeds=1,2,3
    extra=()
    [ "$task" = squad ] && seeds=1 && extra=(max_seq_len=384 doc_stride=128 epochs=1)
    .venv/bin/muppets finetune "$task" --seeds "$seeds" model="runs/ablation-$name" lr=1e-4 "${extra[@]}" \
        run_dir="runs/ft-$task-ablation-$name" progress=false > "runs/ft-$task-ablation-$name.log" 2>&1
  done
done
