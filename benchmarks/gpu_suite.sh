#!/usr/bin/env bash
# The device call of benchmarks/gpu_suite.py (see benchmarks/README.md): unpack the carried Transformers wheel, run
# the suite, keep its log beside results.json in $OUT. Extra arguments go to gpu_suite.py.
set -o pipefail
OUT=${OUT:-bench_results/gpu_suite}
mkdir -p "$OUT" /tmp/site
wheels=(.gpu_speed/wheels/*.whl)
if [ ! -f "${wheels[0]}" ]; then
    echo "no wheel in .gpu_speed/wheels: run 'pip download transformers==5.24.0 --no-deps -d .gpu_speed/wheels' in the calling checkout and carry .gpu_speed" | tee "$OUT/log.txt"
    exit 2
fi
for wheel in "${wheels[@]}"; do python3 -m zipfile -e "$wheel" /tmp/site || exit 2; done
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia_smi.txt" 2>&1
python3 -m benchmarks.gpu_suite --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
