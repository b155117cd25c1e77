#!/bin/bash
# Session 37, call 3: the fused backward's A/B (the gated-gradient rows alone, the GatedMLP step) and
# the bench harness's 8192-token cases (--quick), whl51 + the tree's Python.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl51/kp_fused_mlp*.whl > /dev/null 2>&1
cp -r packages/kp-fused-mlp/src/kp_fused_mlp/. /tmp/site/kp_fused_mlp/
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd /tmp
R=$ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s37-fused-backward
timeout 330 python $R/ab_fused_backward.py $ROOT/packages/kp-fused-mlp/tools > $OUT/ab-fused-backward.txt 2>&1; echo "rc=$?" >> $OUT/ab-fused-backward.txt
grep -v -i warn $OUT/ab-fused-backward.txt | tail -30
timeout 220 python $ROOT/packages/kp-fused-mlp/bench/bench_gated_mlp.py --quick --no-plot --out $OUT/bench > $OUT/bench.txt 2>&1; echo "rc=$?" >> $OUT/bench.txt
grep -v -i warn $OUT/bench.txt | tail -30
