#!/bin/bash
# Session 36, call 3: the split launch's scheduler sweep (whl42).
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl42/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd /tmp
timeout 400 python $ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s36-cluster-2x2/sweep_split.py $ROOT/packages/kp-fused-mlp/tools > $OUT/sweep-split.txt 2>&1; echo "rc=$?" >> $OUT/sweep-split.txt
cat $OUT/sweep-split.txt
