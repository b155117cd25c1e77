#!/bin/bash
# Session 37, call 5: the final code (whl53: one gated-gradient row, fused where hidden <= 4096):
# backward tests, GatedMLP tests, compute-sanitizer over dgated, the GatedMLP step A/B.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl53/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd $ROOT/packages/kp-fused-mlp/tests
timeout -s INT 100 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp_backward.py > $OUT/pytest-backward.txt 2>&1; echo "rc=$?" >> $OUT/pytest-backward.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-backward.txt | tail -8
timeout -s INT 130 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp.py > $OUT/pytest-gated.txt 2>&1; echo "rc=$?" >> $OUT/pytest-gated.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-gated.txt | tail -8
cd /tmp
T=$ROOT/packages/kp-fused-mlp/tools/sanitize_fused-mlp.py
CS=/usr/local/cuda/bin/compute-sanitizer
( time timeout 60 $CS --tool memcheck --error-exitcode 1 python $T dgated ) > $OUT/sanitize-memcheck-dgated.txt 2>&1; echo "memcheck rc=$?" >> $OUT/sanitize-memcheck-dgated.txt
( time timeout 90 $CS --tool racecheck --error-exitcode 1 python $T dgated ) > $OUT/sanitize-racecheck-dgated.txt 2>&1; echo "racecheck rc=$?" >> $OUT/sanitize-racecheck-dgated.txt
grep -h -E "SUMMARY|rc=" $OUT/sanitize-*.txt
R=$ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s37-fused-backward
timeout 200 python $R/ab_fused_backward.py $ROOT/packages/kp-fused-mlp/tools --steps-only > $OUT/ab-steps.txt 2>&1; echo "rc=$?" >> $OUT/ab-steps.txt
grep -v -i warn $OUT/ab-steps.txt | tail -12
