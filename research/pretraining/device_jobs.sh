#!/usr/bin/env bash
# Both prepared GPU jobs in one device command, run from the repository root on the GPU machine: the pretraining
# call (device_call.sh, into $OUT), then the GPU suite (benchmarks/gpu_suite.py, into $OUT/suite) on the same
# machine, with the Transformers wheel the pretraining payload carries. One command instead of two saves a machine
# start or a second transfer of the tree, and the payload alone is carried:
#   bash research/pretraining/device_jobs.sh [device_pretrain flags] -- [gpu_suite flags]
# The suite runs even when the pretraining call fails; the exit status is the first failure's.
set -uo pipefail
PYTHON=${PYTHON:-python3}
OUT=${OUT:-outputs/device_jobs}
pretrain_flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  pretrain_flags+=("$1")
  shift
done
[ $# -gt 0 ] && shift  # the "--"
mkdir -p "$OUT/suite"
OUT="$OUT" PYTHON="$PYTHON" bash research/pretraining/device_call.sh "${pretrain_flags[@]}"
pretrain_status=$?
echo "== pretraining call: exit $pretrain_status"
if [ -d /tmp/site ]; then  # device_call.sh installed the payload's wheels there
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$PYTHON" -m benchmarks.gpu_suite --out "$OUT/suite" "$@" 2>&1 | tee "$OUT/suite/log.txt"
suite_status=$?
echo "== GPU suite: exit $suite_status"
[ "$pretrain_status" -ne 0 ] && exit "$pretrain_status"
exit "$suite_status"
