#!/bin/bash
# Session 36, call 2: branch gated-pingpong-c2x2's second 90a wheel (whl42): row 4 as a split launch.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl42/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
cd $ROOT/.ab/s40/tests
timeout -s INT 200 python -m pytest -q -x -n 16 -p no:cacheprovider test_gated_mlp.py -k "cuda and not docs" > $OUT/pytest-split.txt 2>&1; echo "rc=$?" >> $OUT/pytest-split.txt
tail -3 $OUT/pytest-split.txt
cd /tmp
timeout 300 python $ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s36-cluster-2x2/ab_gated_rows.py $ROOT/packages/kp-fused-mlp/tools pingpong_128x128_c2x2 --grids --split-checks > $OUT/ab-split.txt 2>&1; echo "rc=$?" >> $OUT/ab-split.txt
grep -v Warning $OUT/ab-split.txt | grep -v _warn_once
M=dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,launch__grid_size
for cc in base none; do
  timeout 45 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control $cc --metrics $M python $ROOT/packages/kp-fused-mlp/tools/gated_ncu.py 4096 14336 pingpong_128x128_c2x1 pingpong_128x128_c2x2 > $OUT/ncu-split-$cc.txt 2>&1; echo "rc=$?" >> $OUT/ncu-split-$cc.txt
  grep -E "sm90_gemm_kernel|dram__|lts__|sm__|gpu__|launch__|rc=" $OUT/ncu-split-$cc.txt | sed 's/void sm90_gemm_kernel.*(Params) \(([0-9, ]*)\).*/== kernel grid \1/' | head -24
done
