#!/usr/bin/env bash
# A work queue for the results table: each line of a queue file is "[VAR=value …] backbone task";
# every worker takes the first line (under flock) and runs benchmarks/finetune_table.sh on it
# (with those environment variables, e.g. SEEDS=1), until the files are empty. One worker per core:
#   printf 'random sst2\nSEEDS=1 minilm conll2003\n' > runs/queue-a.txt
#   THREADS=1 nohup bash benchmarks/finetune_queue.sh runs/queue-a.txt > runs/worker-1.log 2>&1 &
# Several files are drained in order (a worker takes from the second when the first is empty).
set -uo pipefail
cd "$(dirname "$0")/.."
pop() {  # print and remove the first line of $1
  local f=$1
  (
    flock 9
    line=$(head -n 1 "$f")
    [ -n "$line" ] && sed -i 1d "$f"
    printf '%s' "$line"
  ) 9>"$f.lock"
}
for file in "$@"; do
  while true; do
    job=$(pop "$file")
    [ -z "$job" ] && break
    read -ra words <<< "$job"
    envs=() args=()
    for w in "${words[@]}"; do
      if [[ $w == *=* ]]; then envs+=("$w"); else args+=("$w"); fi
    done
    echo "$(date -Is) start $job"
    if env "${envs[@]}" bash benchmarks/finetune_table.sh "${args[@]}"; then
      echo "$(date -Is) done $job"
    else
      echo "$(date -Is) FAILED $job"
    fi
  done
done
