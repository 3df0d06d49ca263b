#!/usr/bin/env bash
# Fine-tuning results table: one backbone, a list of tasks, 3 seeds each (mean ± std in each
# run dir's summary.json); collect with `python benchmarks/finetune_table.py`.
#   bash benchmarks/finetune_table.sh minilm "sst2 mrpc stsb"
#   bash benchmarks/finetune_table.sh runs/bert-mini "sst2 conll2003"
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-minilm}
tasks=${2:-"sst2 mrpc stsb cola rte"}
seeds=${SEEDS:-1,2,3}
tag=$(basename "$model")
for task in $tasks; do
  .venv/bin/muppets finetune "$task" --model "$model" --seeds "$seeds" \
      run_dir="runs/ft-$task-$tag" progress=false > "runs/ft-$task-$tag.log" 2>&1
done
