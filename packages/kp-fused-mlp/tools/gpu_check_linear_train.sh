#!/usr/bin/env bash
# linear_act's CUDA backward (training path) on an sm90 GPU: its tests, compute-sanitizer, and its
# benchmarks. Installs nothing: the kp-fused-mlp wheel (KP_CUDA_ARCHS including 90a) and kp-core
# must be installed. Results (full pytest reports, sanitizer logs, JSON/markdown) go to $OUT.
#
#   OUT=/some/dir packages/kp-fused-mlp/tools/gpu_check_linear_train.sh [test] [sanitize] [bench] [sweep]
#
# Default: all four. About 15-20 minutes of an H200 (tests ~5, sanitize ~5, bench ~5, sweep ~3).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PKG=$ROOT/packages/kp-fused-mlp
OUT=${OUT:-$ROOT/.gpu-check-linear-train}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(test sanitize bench sweep)
want() { for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
rc=0

$PY -c "import kp_fused_mlp, kp_fused_mlp._C as C; print('kp_fused_mlp', kp_fused_mlp.__version__, C.compiled_arch_names())" \
  | tee "$OUT/env.txt" || { echo "kp_fused_mlp._C does not import: install the wheel first"; exit 2; }

if want test; then
  echo "== tests: test_linear_act.py (the training path, forward, errors), test_gated_mlp.py (gated_linear's"
  echo "   cuda backward runs the training GEMMs), test_decode.py (grad calls leave the decode kernel)"
  (cd /tmp && $PY -m pytest -v -rfE -p no:cacheprovider -n ${KP_TEST_WORKERS:-8} \
      "$PKG/tests/test_linear_act.py" "$PKG/tests/test_gated_mlp.py" "$PKG/tests/test_decode.py" \
      --junitxml="$OUT/pytest.xml" \
      > "$OUT/pytest.txt" 2>&1) || rc=1
  tail -n 30 "$OUT/pytest.txt"
fi

if want sanitize; then
  echo "== compute-sanitizer on the training path (memcheck, racecheck: the CUTLASS kernels use smem)"
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1  # one cudaMalloc per tensor: out-of-bounds is visible
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 1 $PY "$PKG/tools/sanitize_fused-mlp.py" train \
      > "$OUT/sanitize-$tool.log" 2>&1 && echo "$tool: clean" || { echo "$tool: ERRORS"; tail -n 30 "$OUT/sanitize-$tool.log"; rc=1; }
  done
  compute-sanitizer --tool memcheck --error-exitcode 1 $PY "$PKG/tools/sanitize_fused-mlp.py" gemm glu \
    > "$OUT/sanitize-memcheck-gemm-glu.log" 2>&1 && echo "memcheck gemm+glu: clean" \
    || { echo "memcheck gemm+glu: ERRORS"; tail -n 30 "$OUT/sanitize-memcheck-gemm-glu.log"; rc=1; }
  unset PYTORCH_NO_CUDA_MEMORY_CACHING
fi

if want bench; then
  echo "== bench_linear.py: linear_train_* (fwd+bwd, 8192 tokens) vs torch eager and torch.compile; gemm; linear_act"
  $PY "$PKG/bench/bench_linear.py" ${KP_BENCH_ARGS:---quick} --out "$OUT/bench" --no-plot 2>&1 | tee "$OUT/bench.log" | tail -n 40
  echo "== bench_gated_mlp.py gated_mlp_train (kp-cuda's backward now on the training GEMMs)"
  $PY "$PKG/bench/bench_gated_mlp.py" --quick --filter gated_mlp_train --out "$OUT/bench-gated" --no-plot 2>&1 \
    | tee "$OUT/bench-gated.log" | tail -n 20
fi

if want sweep; then
  echo "== scheduler sweep: max_swizzle 1/2/4/8 x raster, L2 flushed, gemm/dx/dw vs torch.mm"
  $PY "$PKG/tools/gemm_scheduler_sweep.py" --out "$OUT/sweep" ${KP_SWEEP_ARGS:-} 2>&1 | tee "$OUT/sweep.log" | tail -n 30
fi
exit $rc
