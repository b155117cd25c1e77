#!/bin/bash
# Session 36, call 5: session 35's 128 x 192 pingpong wheel (whl38) in spaced calls.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl38/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd /tmp
timeout 300 python $ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s36-cluster-2x2/ab_gated_rows.py $ROOT/packages/kp-fused-mlp/tools pingpong_128x192_c2x1 > $OUT/ab-g192-spaced.txt 2>&1; echo "rc=$?" >> $OUT/ab-g192-spaced.txt
grep -v -i warn $OUT/ab-g192-spaced.txt
