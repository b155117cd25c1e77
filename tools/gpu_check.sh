#!/usr/bin/env bash
# Build, test, sanitize and benchmark every kp package on a GPU machine with no network, using the
# torch, triton, cmake, pybind11 and scikit-build-core already installed there.
#
#   tools/gpu_check.sh [build] [shared] [test] [large] [sanitize] [fuzz] [hf] [bench] [all]     (default: all)
#
# Environment: KP_CUDA_ARCHS (default: this GPU's arch only, for a quick build; "80;90a;90-virtual"
# for the release set), KP_OUT (logs and results; default ./.gpu-check), KP_BENCH_ARGS (passed to
# every bench script, e.g. "--quick"), KP_WHEELS (a folder of extra wheels to install first, e.g.
# liger-kernel for the competitor columns).
# KP_GIT_REV: the revision the reports should name, when this machine's .git is a stale copy.
# No build on the device: put a kp-norm wheel built on the CPU machine (see packages/kp-norm/tools/ab_wheels.sh)
# into KP_WHEELS and leave out `build`; kp-core (pure Python) is then installed from the tree.
# Building kp-fused-mlp there needs the CUTLASS headers of its pinned nvidia-cutlass wheel: put that
# wheel (`pip download --no-deps nvidia-cutlass==4.2.0.0`) into KP_WHEELS too (installed --no-deps).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${KP_OUT:-$ROOT/.gpu-check}
PY=${PYTHON:-python3}
mapfile -t PACKAGES < <(grep -E '^[a-z]' "$ROOT/packages.txt")
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(all)
want() { for s in "${steps[@]}"; do [ "$s" = "$1" ] || [ "$s" = all ] && return 0; done; return 1; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

if [ -z "${KP_CUDA_ARCHS:-}" ]; then
  cc=$($PY -c 'import torch; p = torch.cuda.get_device_capability(); print(f"{p[0]}{p[1]}")')
  [ "$cc" = 90 ] && cc=90a   # wgmma, setmaxnreg (kp-fused-mlp's and kp-attention's SM90A_SOURCES) need the arch-specific target
  export KP_CUDA_ARCHS=$cc
fi

if [ -n "${KP_WHEELS:-}" ] && ls "$KP_WHEELS"/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile "$KP_WHEELS"/*.whl
fi

if ! want build && ! $PY -c "import kp_core" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-build-isolation "$ROOT/packages/kp-core"
fi

if want build; then
  echo "== build (KP_CUDA_ARCHS=$KP_CUDA_ARCHS)"
  start=$(date +%s)
  for p in "${PACKAGES[@]}"; do
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --force-reinstall "$ROOT/packages/$p" \
      2>&1 | tee "$OUT/build-$p.log" | grep -v "Running pip as the 'root'" || true
  done
  echo "build took $(( $(date +%s) - start )) s"
  $PY -m kp_core | tee "$OUT/env.txt"
fi

if want shared; then  # shared_cuda's standalone device tests (nvcc, no torch)
  echo "== shared_cuda device tests"
  nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  "$nvcc" -std=c++17 -O3 -arch=native -I"$ROOT/shared_cuda/include" "$ROOT/shared_cuda/tests/team_reduce_test.cu" -o "$OUT/team_reduce_test" \
    && "$OUT/team_reduce_test" 2>&1 | tee "$OUT/team-reduce.log" | tail -n 25 || echo "team_reduce_test: FAILED (see $OUT/team-reduce.log)"
fi

tests=(); for p in "${PACKAGES[@]}"; do tests+=("$ROOT/packages/$p/tests"); done
if want test; then
  echo "== tests"
  (cd /tmp && $PY -m pytest -q --maxfail=50 -n ${KP_TEST_WORKERS:-8} -p no:cacheprovider "${tests[@]}" 2>&1 | tee "$OUT/test.log" | tail -n 25)
fi
if want large; then
  echo "== large tests (> 2^31 elements)"
  (cd /tmp && $PY -m pytest -q -p no:cacheprovider --run-large -m large "${tests[@]}" 2>&1 | tee "$OUT/test-large.log" | tail -n 15)
fi
if want sanitize; then
  echo "== compute-sanitizer (memcheck, racecheck) on the CUDA kernels"
  export PYTORCH_NO_CUDA_MEMORY_CACHING=1   # one cudaMalloc per tensor: out-of-bounds is visible
  for tool in memcheck racecheck; do
    for p in "${PACKAGES[@]}"; do
      script="$ROOT/packages/$p/tools/sanitize_${p#kp-}.py"
      [ -f "$script" ] || continue
      compute-sanitizer --tool "$tool" --error-exitcode 1 --target-processes all $PY "$script" \
        > "$OUT/sanitize-$tool-$p.log" 2>&1 && echo "$tool $p: clean" || { echo "$tool $p: ERRORS"; tail -n 30 "$OUT/sanitize-$tool-$p.log"; }
    done
  done
  unset PYTORCH_NO_CUDA_MEMORY_CACHING
fi
if want fuzz; then
  # KP_FUZZ_EXAMPLES (default 10000) drawn cases a GPU level, in KP_FUZZ_SHARDS processes a level
  # with their own seeds (hypothesis runs one example at a time; the GPU is far from busy).
  # KP_FUZZ_SEED_BASE: the first shard's seed (a second campaign draws new cases with another base);
  # KP_FUZZ_SECONDS: each shard stops checking after that long and reports what it ran;
  # KP_FUZZ_LEVELS: the levels (default "cuda-cuda triton-cuda reference-cuda").
  n=${KP_FUZZ_EXAMPLES:-10000} shards=${KP_FUZZ_SHARDS:-4} base=${KP_FUZZ_SEED_BASE:-0}
  echo "== fuzz: $n examples a level ($shards shards each, seeds from $base)"
  for lvl in ${KP_FUZZ_LEVELS:-cuda-cuda triton-cuda reference-cuda}; do
    for ((s = base; s < base + shards; s++)); do
      (cd /tmp && KP_FUZZ_EXAMPLES=$(( (n + shards - 1) / shards )) KP_FUZZ_SEED=$s KP_FUZZ_KEEP_GOING=1 KP_FUZZ_SHRINK=0 \
        KP_FUZZ_REPORT="$OUT/fuzz.jsonl" $PY -m pytest -q -rP -p no:cacheprovider -k "fuzz_against and $lvl" \
        "$ROOT/packages/kp-norm/tests/test_fuzz.py" > "$OUT/fuzz-$lvl-$s.log" 2>&1; echo "fuzz $lvl shard $s: rc=$?") &
    done
  done
  wait
  for f in "$OUT"/fuzz-*-*.log; do echo "=== $f"; cat "$f"; done > "$OUT/fuzz.log" && rm -f "$OUT"/fuzz-*-*.log
  $PY - "$OUT/fuzz.jsonl" <<'PY'
import collections, json, sys
tot = collections.Counter(); bad = collections.Counter(); runs = collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line); tot[r["level"]] += r["examples"]; bad[r["level"]] += r["failed"]; runs[r["level"]] += 1
for lvl in sorted(tot):
    print(f"fuzz {lvl}: {tot[lvl]} examples in {runs[lvl]} shards, {bad[lvl]} failed")
PY
fi
if want hf; then
  echo "== Hugging Face models through kp_core.patch (hf_rounding=True)"
  $PY "$ROOT/packages/kp-norm/tools/hf_acceptance.py" 2>&1 | tee "$OUT/hf.log"
fi
if want bench; then
  echo "== benchmarks"
  for script in "$ROOT"/packages/*/bench/bench_*.py; do
    $PY "$script" ${KP_BENCH_ARGS:-} 2>&1 | tee "$OUT/$(basename "$script" .py).log" | tail -n 60
  done
fi
