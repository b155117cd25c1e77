#!/bin/bash
# Session 37, call 6: kp-attention and kp-norm 90a wheels of 2232632 (DeviceGuard binds the thread's
# context): a fresh process's first backward is kp-attention's Hopper backward; both test suites.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl54/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd /tmp && timeout 60 python $ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s37-fused-backward/attention_first_backward.py > $OUT/attn-first-bwd.txt 2>&1; echo "rc=$?" >> $OUT/attn-first-bwd.txt; tail -5 $OUT/attn-first-bwd.txt
cd $ROOT/packages/kp-attention/tests
timeout -s INT 150 python -m pytest -q -n 16 -p no:cacheprovider > $OUT/pytest-attention.txt 2>&1; echo "rc=$?" >> $OUT/pytest-attention.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-attention.txt | tail -6
cd $ROOT/packages/kp-norm/tests
timeout -s INT 130 python -m pytest -q -n 16 -p no:cacheprovider -x > $OUT/pytest-norm.txt 2>&1; echo "rc=$?" >> $OUT/pytest-norm.txt
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/pytest-norm.txt | tail -6
