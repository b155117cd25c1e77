#!/usr/bin/env bash
# Interleaved A/B of prebuilt kp-norm wheels on a GPU machine, with no build there.
#
#   packages/kp-norm/tools/ab_wheels.sh WHEELS_DIR ROUNDS CMD
#
# WHEELS_DIR holds one folder per variant, each with one kp_norm wheel (WHEELS_DIR/NAME/*.whl).
# Each round installs every variant in turn (the order reversed every other round, so drift
# in the machine's state does not favour one variant) and runs CMD under bash with KP_AB_NAME
# (the variant) and KP_AB_ROUND set. Typical CMD, quoted so that the variables expand per run:
#
#   'python3 packages/kp-norm/tools/norm_sweep.py --ops layer --dirs fwd --hidden 65536 --out "$OUT/${KP_AB_NAME}_r${KP_AB_ROUND}.json"'
#
# Build the variants on the CPU machine (nvcc compiles there; the GPU machines run Python 3.12),
# about a minute each on 2 cores, and carry WHEELS_DIR to the device:
#
#   KP_CUDA_ARCHS=90a python3.12 -m pip wheel --no-deps --no-build-isolation -w WHEELS_DIR/NAME \
#       packages/kp-norm [-C cmake.define.CMAKE_CUDA_FLAGS=-DSOME_MACRO=1] [-C cmake.define.KP_NORM_TUNING=ON] \
#       [-C build-dir=/tmp/build-NAME]
#
# A variant that only moves compile-time constants keeps the device's 30 minutes for measuring:
# session 9 ran six such comparisons in under 10 minutes of device time. Before trusting a variant,
# run the CUDA tests on it: an A/B sweep does not reach every kernel (session 9's cp.async
# cache-hint variant measured faster and faulted in kernels the sweep never ran).
# KP_AB_DRY=1 prints what would run.
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,4p' "$0" >&2; exit 2; }
dir=$1 rounds=$2 cmd=$3
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)  # the repository
mapfile -t names < <(cd "$dir" && for d in */; do ls "$d"*.whl >/dev/null 2>&1 && echo "${d%/}"; done)
[ ${#names[@]} -ge 1 ] || { echo "ab_wheels: no WHEELS_DIR/NAME/*.whl under $dir" >&2; exit 2; }
run() { if [ -n "${KP_AB_DRY:-}" ]; then echo "+ $*"; else "$@"; fi; }

if [ -z "${KP_AB_DRY:-}" ] && ! $PY -c "import kp_core" 2>/dev/null; then  # pure Python: no build
  $PY -m pip install -q --no-index --no-deps --no-build-isolation "$ROOT/packages/kp-core"
fi
for ((r = 1; r <= rounds; r++)); do
  order=("${names[@]}")
  if ((r % 2 == 0)); then
    order=(); for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[i]}"); done
  fi
  for name in "${order[@]}"; do
    echo "== round $r: $name"
    run $PY -m pip install -q --no-index --no-deps --no-compile --force-reinstall "$dir/$name"/*.whl
    KP_AB_NAME=$name KP_AB_ROUND=$r run bash -c "$cmd"
  done
done
