#!/usr/bin/env bash
# gated_linear's cuda level on a GPU machine (no network; the kp-core and kp-fused-mlp wheels
# already installed): its tests, compute-sanitizer (memcheck, racecheck) over its kernels, the
# host check of its epilogue (tools/check_gated_epilogue.cu, when nvcc and the CUTLASS headers are
# there), its table rows and the scheduler's swizzle x raster at 8192 tokens against torch.mm, and
# the GatedMLP benchmark. Everything lands in $OUT (default ./.gpu-check-gated).
#
#   packages/kp-fused-mlp/tools/gpu_check_gated.sh [full]
#
# Default: the tests of the cuda level only (`-k "cuda-cuda or test_cuda"`, ~3 min; and the decode
# kernel's gated tests in test_decode.py) and the
# benchmark at 8192 tokens (--quick: both MLP shapes). full: every test of test_gated_mlp.py and
# the whole benchmark (1-8192 tokens).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PKG=$ROOT/packages/kp-fused-mlp
OUT=${OUT:-$ROOT/.gpu-check-gated}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$ROOT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
$PY -m kp_core > "$OUT/env.txt" 2>&1

full=0; [ "${1:-}" = full ] && full=1
echo "== tests: the cuda level of gated_linear$([ $full = 1 ] && echo ', then every level')"
select=(-k "cuda-cuda or test_cuda"); [ $full = 1 ] && select=()
timeout 540 $PY -m pytest -p no:cacheprovider -n 8 -v -rfE "$PKG/tests/test_gated_mlp.py" "${select[@]}" \
  --junitxml="$OUT/test_gated_mlp.xml" > "$OUT/test_gated_mlp.txt" 2>&1
echo "pytest rc=$?"; tail -n 3 "$OUT/test_gated_mlp.txt"
# The decode kernel's gated tests: gated_linear's cuda level is the decode kernel at <= 32 tokens
# without a gradient, the gated GEMM otherwise (test_gated_auto_order checks the split).
timeout 300 $PY -m pytest -p no:cacheprovider -n 8 -v -rfE "$PKG/tests/test_decode.py" -k "gated or auto or empty" \
  --junitxml="$OUT/test_decode_gated.xml" > "$OUT/test_decode_gated.txt" 2>&1
echo "pytest (decode, gated) rc=$?"; tail -n 3 "$OUT/test_decode_gated.txt"

echo "== compute-sanitizer over the gated GEMM (every row, both dtypes, tails)"
for tool in memcheck racecheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 1 \
    $PY "$PKG/tools/sanitize_fused-mlp.py" gated > "$OUT/sanitize-$tool-gated.txt" 2>&1
  echo "$tool rc=$?"; tail -n 3 "$OUT/sanitize-$tool-gated.txt"
done

CUTLASS_INC=$($PY -c "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source', 'include'))" 2>/dev/null)
if command -v nvcc >/dev/null && [ -d "$CUTLASS_INC/cute" ]; then
  echo "== the gated epilogue on the host: register pairing and h, P bit for bit (CuTe, no GPU needed)"
  nvcc -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I "$ROOT/shared_cuda/include" -isystem "$CUTLASS_INC" \
    -I "$PKG/csrc" "$PKG/tools/check_gated_epilogue.cu" -o "$OUT/check_gated_epilogue" \
    && "$OUT/check_gated_epilogue" | tee "$OUT/check_gated_epilogue.txt"
fi

echo "== the gated table's rows at 8192 tokens, and the scheduler's swizzle x raster (bf16, silu, no bias; triton's do_bench, L2 flushed)"
timeout 300 $PY - > "$OUT/gated_rows.txt" 2>&1 <<'PYEOF'
import torch, triton
from kp_fused_mlp import _cuda
rows = _cuda.NATIVE.module.gated_configs()
for hidden, inter in ((4096, 14336), (8192, 28672)):
    x = torch.randn(8192, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * inter, hidden, device="cuda", dtype=torch.bfloat16) * hidden**-0.5
    flops = 2 * 8192 * hidden * 2 * inter
    mm = triton.testing.do_bench(lambda: x @ w.t(), warmup=50, rep=300)
    print(f"{hidden}->{inter}: torch.mm onto [Wg; Wu] (no activation) {mm:.3f} ms, {flops / mm / 1e9:.0f} TFLOP/s")
    for config, row in enumerate(rows):
        knobs = [(0, -1)] if config == 0 else [(s, r) for s in (1, 2, 4, 8) for r in (0, 1, 2)]
        for swizzle, raster in knobs:  # (0, -1): the row as the table has it
            ms = triton.testing.do_bench(lambda: _cuda.gated_linear_fwd(x, w, None, "silu", False, config=config,
                                         swizzle=swizzle, raster=raster), warmup=50, rep=300)  # fmt: skip
            print(f"  {row:24s} swizzle {swizzle} raster {raster:2d}  {ms:.3f} ms  {flops / ms / 1e9:.0f} TFLOP/s  "
                  f"{mm / ms:.3f}x torch.mm" + ("  (auto's row)" if row == _cuda.gated_plan(8192, inter, hidden) else ""))
PYEOF
echo "rows rc=$?"; cat "$OUT/gated_rows.txt"

echo "== benchmark: GatedMLP and gated_linear (kp-cuda, kp-triton, torch, torch.compile)"
args=(--out "$OUT/bench" --no-plot); [ $full = 0 ] && args+=(--quick)
timeout 540 $PY "$PKG/bench/bench_gated_mlp.py" "${args[@]}" > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"; tail -n 3 "$OUT/bench.txt"
