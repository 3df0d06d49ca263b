#!/usr/bin/env bash
# Issue 55: distillation runs for the speed/accuracy frontier. One run per (variant, seed), in the
# order given, each with one torch thread; each lands in $ROOT/<task>/<variant>/seed-N (metrics.json,
# best/). Collect with benchmarks/distill_table.py.
#
#   TEACHER=runs/ft-sst2/best TASK=sst2 bash benchmarks/distill_runs.sh "alone:1 soft:1 soft-mr:1 alone:2 …"
#
# Variants (student: the teacher's layers 0 and 5, i.e. student_num_layers=2, unless named):
#   alone        alpha=0: the student fine-tuned on the gold labels alone (no teacher)
#   soft         alpha=0.5, T=2: soft targets + gold on the training text
#   soft-mr      + unlabeled text: $UNLABELED, read with $UNLABELED_ARGS (SST-2: the MR snippets, one a line:
#                UNLABELED_ARGS="unlabeled_format=lines unlabeled_unit=paragraph"; those that overlap dev are dropped)
#   soft-mr-aug  + augment=2 copies of every training example (Tang et al.)
#   soft-mr-int  + hidden_weight=1, attention_weight=1 (TinyBERT-style intermediate losses)
#   l4-alone / l4-soft-mr   the teacher's layers 0, 2, 3 and 5 (student_num_layers=4): alone / as soft-mr
#   l3-alone / l3-soft-mr / l3-soft   three of the teacher's layers (student_num_layers=3): alone / as soft-mr / as soft
#   rand-alone   a 2×384 BERT from random initialisation, gold labels alone
#   rand-soft-mr the same, distilled as soft-mr
#   w256-alone / w256-soft-mr   a 4×256 BERT (random initialisation), gold alone / distilled
# Settings shared by every variant: lr $LR (default 1e-4), 3 epochs, batch 32, the best epoch chosen
# on the teacher's 10% train slice (selection=auto), dev reported (CoNLL: dev chooses, test reported).
set -euo pipefail
cd "$(dirname "$0")/.."
teacher=${TEACHER:?TEACHER=<fine-tuned task dir>}
task=${TASK:?TASK=sst2|conll2003|mrpc}
root=${ROOT:-runs/distill}
lr=${LR:-1e-4}
unlabeled=${UNLABELED:-}
muppets=${MUPPETS:-muppets}
for item in $1; do
  variant=${item%%:*}; seed=${item##*:}
  common=(train.lr=$lr train.threads=${THREADS:-1} train.progress=false train.seed=$seed
          train.run_dir=$root/$task/$variant/seed-$seed)
  two=(--student teacher student_num_layers=2)
  r384=(--student bert-mini 'student_config={num_layers: 2, hidden_size: 384, num_heads: 12, intermediate_size: 1536}')
  r256=(--student bert-mini)
  soft=(alpha=0.5 temperature=2)
  mr=("unlabeled=[$unlabeled]" ${UNLABELED_ARGS:-})
  case "$variant" in
    alone) args=("${two[@]}" alpha=0) ;;
    soft) args=("${two[@]}" "${soft[@]}") ;;
    soft-mr) args=("${two[@]}" "${soft[@]}" "${mr[@]}") ;;
    soft-mr-aug) args=("${two[@]}" "${soft[@]}" "${mr[@]}" augment=2) ;;
    soft-mr-int) args=("${two[@]}" "${soft[@]}" "${mr[@]}" hidden_weight=1 attention_weight=1) ;;
    l4-alone) args=(--student teacher student_num_layers=4 alpha=0) ;;
    l4-soft-mr) args=(--student teacher student_num_layers=4 "${soft[@]}" "${mr[@]}") ;;
    l3-alone) args=(--student teacher student_num_layers=3 alpha=0) ;;
    l3-soft) args=(--student teacher student_num_layers=3 "${soft[@]}") ;;
    l3-soft-mr) args=(--student teacher student_num_layers=3 "${soft[@]}" "${mr[@]}") ;;
    rand-alone) args=("${r384[@]}" alpha=0) ;;
    rand-soft-mr) args=("${r384[@]}" "${soft[@]}" "${mr[@]}") ;;
    w256-alone) args=("${r256[@]}" alpha=0) ;;
    w256-soft-mr) args=("${r256[@]}" "${soft[@]}" "${mr[@]}") ;;
    *) echo "unknown variant $variant" >&2; exit 2 ;;
  esac
  if [ -f "$root/$task/$variant/seed-$seed/metrics.json" ]; then echo "done: $variant seed $seed"; continue; fi
  echo "$(date +%T) start $variant seed $seed"
  "$muppets" distill "$teacher" "${args[@]}" "${common[@]}"
  echo "$(date +%T) end $variant seed $seed"
done
