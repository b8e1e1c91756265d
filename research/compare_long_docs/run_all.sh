#!/usr/bin/env bash
# Start (or resume) the whole comparison in the background: one process per dataset, one torch thread each.
#
#   bash research/compare_long_docs/run_all.sh DATA_DIR [OUTPUT_DIR] [extra flags of python -m research.compare_long_docs]
#
# Run it from the repository root. Safe to run again at any time: finished runs are skipped (runs.jsonl), a run
# that was killed resumes from its last checkpoint, and a dataset whose process is still alive is skipped (its
# process holds OUTPUT_DIR/<dataset>/lock). Logs: OUTPUT_DIR/<dataset>.log (appended). The table:
#   python -m research.compare_long_docs --report_only --output_dir OUTPUT_DIR
set -euo pipefail
data_dir=${1:?usage: run_all.sh DATA_DIR [OUTPUT_DIR] [flags]}
output_dir=${2:-outputs/compare_converge}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$output_dir"
for dataset in hyperpartisan 20newsgroups imdb; do
  HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false nohup python -m research.compare_long_docs --data_dir "$data_dir" \
    --datasets "$dataset" --output_dir "$output_dir" --threads 1 "$@" >> "$output_dir/$dataset.log" 2>&1 &
  echo "$dataset: pid $! (log $output_dir/$dataset.log)"
done
