#!/bin/bash
# Session 37, call 2: the fused GatedMLP backward (whl51 + the Python sources of the tree): its tests,
# the gated GEMM's tests (refactored epilogue frame), compute-sanitizer over gated + dgated.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl51/kp_fused_mlp*.whl > /dev/null 2>&1
cp -r packages/kp-fused-mlp/src/kp_fused_mlp/. /tmp/site/kp_fused_mlp/  # Python edited after the wheel's snapshot
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
cd $ROOT/packages/kp-fused-mlp/tests
timeout -s INT 150 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp_backward.py > $OUT/pytest-backward.txt 2>&1; echo "rc=$?" >> $OUT/pytest-backward.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-backward.txt | tail -12
timeout -s INT 170 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp.py -k "cuda or mlp" > $OUT/pytest-gated.txt 2>&1; echo "rc=$?" >> $OUT/pytest-gated.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-gated.txt | tail -8
cd /tmp
T=$ROOT/packages/kp-fused-mlp/tools/sanitize_fused-mlp.py
CS=/usr/local/cuda/bin/compute-sanitizer
( time timeout 110 $CS --tool memcheck --error-exitcode 1 python $T gated dgated ) > $OUT/sanitize-memcheck.txt 2>&1; echo "memcheck rc=$?" >> $OUT/sanitize-memcheck.txt
( time timeout 140 $CS --tool racecheck --error-exitcode 1 python $T gated dgated ) > $OUT/sanitize-racecheck.txt 2>&1; echo "racecheck rc=$?" >> $OUT/sanitize-racecheck.txt
tail -6 $OUT/sanitize-*.txt
