#!/usr/bin/env bash
# The device call of the pretraining study, run from the repository root on the GPU machine:
#   bash research/pretraining/device_call.sh [extra flags of research.pretraining.device_pretrain]
# Installs the carried wheels (transformers 5.24 and what it checks at import) into /tmp/site, then pretrains RAN
# and the BERT peer from the carried payload, writing weights, run.json and log.txt into $OUT.
set -euo pipefail
PAYLOAD=${PAYLOAD:-.pretrain_payload}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-outputs/device_pretrain}
mkdir -p "$OUT"
if compgen -G "$PAYLOAD/wheels/*.whl" > /dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$PAYLOAD"/wheels/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
exec "$PYTHON" -m research.pretraining.device_pretrain --payload "$PAYLOAD" --out_dir "$OUT" "$@"
