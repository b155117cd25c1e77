#!/bin/bash
# Session 36, call 4: main's default multi-arch cp312 wheels after kp/built_archs.h (host code): load, dispatch, GPU tests.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl41/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd /tmp
python -m kp_core > $OUT/env.txt 2>&1; cat $OUT/env.txt
python - >> $OUT/env.txt 2>&1 <<'PY'
import kp_norm._C as n, kp_fused_mlp._C as f, kp_attention._C as a
for m in (n, f, a):
    print(m.__name__, m.compiled_arch_names(), m.compiled_archs(), m.ptx_archs())
print("attention fwd kernel d128:", a.fwd_kernel(0, 128), "d96:", a.fwd_kernel(0, 96))
from kp_fused_mlp import _cuda
print("fused gemm device problem:", repr(_cuda.NATIVE.module.gemm_device_problem(0)))
for m in (n, f, a):
    print(m.__name__, "check_device(0):", repr(m.check_device(0)))
PY
tail -6 $OUT/env.txt
t() { local name=$1 lim=$2; shift 2; timeout -s INT $lim python -m pytest -q -n 16 -p no:cacheprovider "$@" > $OUT/pytest-$name.txt 2>&1; echo "rc=$?" >> $OUT/pytest-$name.txt; echo "== $name"; grep -E "passed|failed|^FAILED|^ERROR" $OUT/pytest-$name.txt | tail -6; }
t attention 150 $ROOT/packages/kp-attention/tests/test_cuda_attention_hopper.py $ROOT/packages/kp-attention/tests/test_cuda_attention_hopper_bwd.py $ROOT/packages/kp-attention/tests/test_cuda_attention.py $ROOT/packages/kp-attention/tests/test_cuda_attention_bwd.py
t norm 110 $ROOT/packages/kp-norm/tests
t fused 230 $ROOT/packages/kp-fused-mlp/tests/test_linear_act.py $ROOT/packages/kp-fused-mlp/tests/test_gated_mlp.py $ROOT/packages/kp-fused-mlp/tests/test_decode_mlp.py
