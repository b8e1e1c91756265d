#!/usr/bin/env bash
# Runs run_sentence_classification.py on the compare_long_docs splits of one dataset, one run after the other:
#   bash research/sentence_classification/run.sh DATASET "aose ran" "1 2 3" [frozen|finetuned|frozen-then-finetuned] [flags...]
# frozen-then-finetuned starts from the finished frozen run of the same head and seed (HEAD-frozen-seedK) and trains on
# with the encoder fine-tuned.
# Splits come from research/sentence_classification/make_splits.py (outputs/sentence_splits/DATASET/). A finished run
# (its all_results_summary.json exists) is skipped; a killed one resumes from its last epoch checkpoint. Frozen
# sentence vectors are cached in outputs/sentence_cache, shared by every run. The comparison's peak learning rate,
# 1e-3, unless a flag says otherwise (the script's own default is lower). One torch thread, nice 10. RUN replaces
# the python command (default: python run_scripts/run_sentence_classification.py).
set -u
dataset=$1; heads=$2; seeds=$3; mode=${4:-frozen}; shift 4 || shift $#
splits=outputs/sentence_splits/$dataset
test=(); [ -f "$splits/test.jsonl" ] && test=(--test_file "$splits/test.jsonl")  # subsets for dev choices have none
mkdir -p outputs/sentence_classification/$dataset
freeze=(); [ "$mode" = finetuned ] && freeze=(--no_freeze_encoder)
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD
for seed in $seeds; do
  for head in $heads; do
    out=outputs/sentence_classification/$dataset/$head-$mode-seed$seed
    [ -f "$out/all_results_summary.json" ] && { echo "skip $out (done)"; continue; }
    resume=(); ls -d "$out"/checkpoint-* >/dev/null 2>&1 && resume=(--resume_from_checkpoint last)
    start=()
    if [ "$mode" = frozen-then-finetuned ]; then
      start=(--no_freeze_encoder --model_name_or_path "outputs/sentence_classification/$dataset/$head-frozen-seed$seed")
    fi
    echo "$(date -u +%FT%TZ) start $out ${resume[*]}"
    nice -n 10 ${RUN:-python run_scripts/run_sentence_classification.py} --head "$head" "${freeze[@]}" "${start[@]}" \
      --train_file "$splits/train.jsonl" --validation_file "$splits/dev.jsonl" "${test[@]}" \
      --seed "$seed" --output_dir "$out" --embedding_cache_dir outputs/sentence_cache "${resume[@]}" \
      --learning_rate 1e-3 "$@" \
      > "$out.log" 2>&1 || echo "$(date -u +%FT%TZ) FAILED $out (see $out.log)"
    echo "$(date -u +%FT%TZ) end $out"
  done
done
