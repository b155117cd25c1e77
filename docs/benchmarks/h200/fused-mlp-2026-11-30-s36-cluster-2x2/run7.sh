#!/bin/bash
# Session 36, call 7: the bench harness on GatedMLP at Llama-3-8B / 8192 tokens with the new default row (whl43).
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl43/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd /tmp
timeout 160 python $ROOT/packages/kp-fused-mlp/bench/bench_gated_mlp.py --quick --filter "gated_mlp_fwd 8192x4096->14336" \
  --impls kp-cuda,torch.compile --no-plot --out $OUT/bench > $OUT/bench.txt 2>&1; echo "rc=$?" >> $OUT/bench.txt
grep -v -i warn $OUT/bench.txt | tail -30
