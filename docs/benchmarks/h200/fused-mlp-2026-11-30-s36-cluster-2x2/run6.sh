#!/bin/bash
# Session 36, call 6: main + the 128 x 192 row as the default past 4096 tokens (whl43): gated tests, GatedMLP A/B.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl43/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd $ROOT/packages/kp-fused-mlp/tests
timeout -s INT 170 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp.py -k "cuda or mlp" > $OUT/pytest-gated.txt 2>&1; echo "rc=$?" >> $OUT/pytest-gated.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-gated.txt | tail -6
cd /tmp
timeout 260 python $ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s36-cluster-2x2/ab_mlp_rows.py $ROOT/packages/kp-fused-mlp/tools > $OUT/ab-mlp-rows.txt 2>&1; echo "rc=$?" >> $OUT/ab-mlp-rows.txt
grep -v -i warn $OUT/ab-mlp-rows.txt | tail -20
