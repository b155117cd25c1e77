#!/bin/bash
# Session 37, call 4: with kp::bind_context (whl52, the tree's code): the backward tests (a thread's
# first CUDA work), the gated GEMM tests, then the A/B (dgated rows; GatedMLP steps, both sizes).
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl52/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd $ROOT/packages/kp-fused-mlp/tests
timeout -s INT 100 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp_backward.py > $OUT/pytest-backward.txt 2>&1; echo "rc=$?" >> $OUT/pytest-backward.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-backward.txt | tail -8
cd /tmp
R=$ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s37-fused-backward
timeout 300 python $R/ab_fused_backward.py $ROOT/packages/kp-fused-mlp/tools > $OUT/ab-fused-backward.txt 2>&1; echo "rc=$?" >> $OUT/ab-fused-backward.txt
grep -v -i warn $OUT/ab-fused-backward.txt | tail -24
cd $ROOT/packages/kp-fused-mlp/tests
timeout -s INT 160 python -m pytest -q -n 16 -p no:cacheprovider test_gated_mlp.py test_linear_act.py -k "cuda" > $OUT/pytest-gated-linear.txt 2>&1; echo "rc=$?" >> $OUT/pytest-gated-linear.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-gated-linear.txt | tail -8
