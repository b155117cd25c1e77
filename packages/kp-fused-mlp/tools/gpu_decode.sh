#!/usr/bin/env bash
# The GPU check of kp-fused-mlp's decode path (csrc/decode_gemv.cu), offline: the package (and
# kp-core) already installed, nothing fetched. Writes everything under $OUT (default ./gpu-decode-out).
#
#   OUT=/tmp/out bash packages/kp-fused-mlp/tools/gpu_decode.sh [tests|sanitize|sweep|rows|bench|all]
#
# tests:    test_decode.py (the decode kernels), test_decode_mlp.py (GatedMLP's fused decode kernel),
#           test_linear_act.py and test_gated_mlp.py (what the decode cut changed), -v -rfE, reports in
#           $OUT/pytest_*.txt
# sanitize: compute-sanitizer memcheck, initcheck (the split partials must all be written before
#           the reduce reads them) and racecheck (the mma rows' double-buffered x chunks in shared
#           memory) over tools/sanitize_fused-mlp.py's decode and decode_mlp sections
# sweep:    tools/decode_sweep.py, K splits 0 (table) and 1-16, linear and gated -> $OUT/sweep_*.json
# rows:     tools/decode_sweep.py --rows: every decode row forced at 1-4, 8, 16, 32 tokens (table
#           splits): fma vs mma at 1-4 tokens, the deeper m16 / m32 rings -> $OUT/rows_*.json
# bench:    bench/bench_decode.py (linear_act and GatedMLP at 1/16/32/64 tokens vs copy, torch,
#           torch.compile, kp's GEMM forced) -> $OUT/bench_decode/
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-$PWD/gpu-decode-out}
mkdir -p "$OUT"
what=${1:-all}
PKG=packages/kp-fused-mlp
status=0
run() { echo "+ $*" >&2; "$@" || status=1; }

if [[ $what == all || $what == tests ]]; then
  run python -m pytest -v -rfE -n 8 "$PKG/tests/test_decode.py" "$PKG/tests/test_decode_mlp.py" \
    > "$OUT/pytest_decode.txt" 2>&1
  run python -m pytest -v -rfE -n 8 "$PKG/tests/test_linear_act.py" "$PKG/tests/test_gated_mlp.py" \
    > "$OUT/pytest_linear_gated.txt" 2>&1
  tail -3 "$OUT"/pytest_*.txt
fi

if [[ $what == all || $what == sanitize ]]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck initcheck racecheck; do
    run "$SAN" --tool $tool --error-exitcode 1 python "$PKG/tools/sanitize_fused-mlp.py" decode decode_mlp \
      > "$OUT/sanitize_$tool.txt" 2>&1
    tail -2 "$OUT/sanitize_$tool.txt"
  done
fi

if [[ $what == all || $what == sweep ]]; then
  run python "$PKG/tools/decode_sweep.py" --out "$OUT/sweep_linear.json" > "$OUT/sweep_linear.txt" 2>&1
  run python "$PKG/tools/decode_sweep.py" --gated --out "$OUT/sweep_gated.json" > "$OUT/sweep_gated.txt" 2>&1
  cat "$OUT"/sweep_*.txt
fi

if [[ $what == all || $what == rows ]]; then
  ROWS=table,decode_fma_m1,decode_fma_m2,decode_tma_m8,decode_tma_m16,decode_tma_m32,decode_m8,decode_m16,decode_m32
  run python "$PKG/tools/decode_sweep.py" --tokens 1,2,3,4,8,16,32 --splits 0 --rows $ROWS \
    --out "$OUT/rows_linear.json" > "$OUT/rows_linear.txt" 2>&1
  run python "$PKG/tools/decode_sweep.py" --gated --tokens 1,2,4,16,32 --splits 0 --rows $ROWS \
    --out "$OUT/rows_gated.json" > "$OUT/rows_gated.txt" 2>&1
  cat "$OUT"/rows_*.txt
fi

if [[ $what == all || $what == bench ]]; then
  run python "$PKG/bench/bench_decode.py" --out "$OUT/bench_decode" > "$OUT/bench_decode.txt" 2>&1
  tail -40 "$OUT/bench_decode.txt"
fi
exit $status
