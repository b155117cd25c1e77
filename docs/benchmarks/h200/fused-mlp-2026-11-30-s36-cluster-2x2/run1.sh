#!/bin/bash
# Session 36, call 1: branch gated-pingpong-c2x2's 90a wheel (whl40): the new row's tests, the A/B, ncu.
ROOT=$PWD
pip install --no-index --no-deps --no-compile --target /tmp/site .ab/whl40/kp_fused_mlp*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$ROOT/packages/kp-core/src
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
cd $ROOT/.ab/s40/tests
timeout -s INT 170 python -m pytest -q -x -n 16 -p no:cacheprovider test_gated_mlp.py -k "c2x2 or plan or configs or epilogue" > $OUT/pytest-c2x2.txt 2>&1; echo "rc=$?" >> $OUT/pytest-c2x2.txt
tail -3 $OUT/pytest-c2x2.txt
cd /tmp
timeout 330 python $ROOT/docs/benchmarks/h200/fused-mlp-2026-11-30-s36-cluster-2x2/ab_gated_rows.py $ROOT/packages/kp-fused-mlp/tools pingpong_128x128_c2x2 --grids > $OUT/ab-c2x2.txt 2>&1; echo "rc=$?" >> $OUT/ab-c2x2.txt
cat $OUT/ab-c2x2.txt
M=dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__sass_data_bytes_mem_shared.sum,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum
for cc in base none; do
  timeout 45 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control $cc --metrics $M python $ROOT/packages/kp-fused-mlp/tools/gated_ncu.py 4096 14336 pingpong_128x128_c2x1 pingpong_128x128_c2x2 > $OUT/ncu-$cc.txt 2>&1; echo "rc=$?" >> $OUT/ncu-$cc.txt
  grep -E "Pingpong|dram__|lts__|sm__|gpu__|rc=" $OUT/ncu-$cc.txt | sed 's/void kp::sm90_gemm_kernel.*/== kernel (c2x1, then c2x2)/' | head -20
done
