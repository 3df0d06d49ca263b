#!/usr/bin/env bash
# A work queue for the results table: each line of QUEUE_FILE is "backbone task"; every worker
# takes the first line (under flock) and runs benchmarks/finetune_table.sh on it, until the
# files are empty. Start one worker per free core:
#   printf 'random sst2\nminilm conll2003\n' > runs/queue-a.txt
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
    echo "$(date -Is) start $job"
    bash benchmarks/finetune_table.sh $job && echo "$(date -Is) done $job" || echo "$(date -Is) FAILED $job"
  done
done
