#!/usr/bin/env bash
# Profile one norm call per level (cuda, triton) with Nsight Compute and print the metrics that
# explain a bandwidth gap: DRAM throughput and bytes, L1/L2 hit rates and L2 traffic from the SMs,
# achieved occupancy, registers, and the top stall reasons.
#
#   packages/kp-norm/tools/ncu_compare.sh [op=rms|layer] [hidden=16384] [direction=fwd|bwd]
#
# Clocks are left as they are (--clock-control none); see the device notes on measuring.
set -euo pipefail
op=${1:-rms}; hidden=${2:-16384}; direction=${3:-fwd}
metrics=dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__inst_executed.sum,gpu__time_duration.sum,l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active
for backend in ${KP_NCU_BACKENDS:-cuda triton}; do
  echo "== $backend $op $direction hidden=$hidden"
  ncu --clock-control none --target-processes all --metrics "$metrics" --kernel-name "regex:$direction" --launch-skip 2 --launch-count 2 \
    python3 - "$backend" "$op" "$hidden" "$direction" <<'PY' 2>&1 | grep -E "^\s+(dram|sm__|launch|smsp|gpu__|l1tex|lts)|==PROF==|Error" || true
import sys, torch, kp_norm
backend, op, hidden, direction = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = (256 << 20) // (hidden * 2)
x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=direction == "bwd")
w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=direction == "bwd")
b = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=direction == "bwd")
fn = (lambda: kp_norm.rms_norm(x, w, backend=backend)) if op == "rms" else (lambda: kp_norm.layer_norm(x, w, b, backend=backend))
for _ in range(6):
    y = fn()
    if direction == "bwd":
        y.backward(torch.ones_like(y))
torch.cuda.synchronize()
PY
done
