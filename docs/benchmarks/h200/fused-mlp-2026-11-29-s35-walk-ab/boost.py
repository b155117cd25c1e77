"""Session 35: the Llama-3-8B gated projection at 8192 tokens (8192 x 4096 -> 2 x 14336, bf16):
kp's gated GEMM (no P), kp's plain GEMM on the packed weight, cuBLAS on the packed weight and on
the two halves. Mode 'time': single calls after an L2 flush and an idle gap (the clock boosts), and
windows of back-to-back calls (the power limit sets the clock), medians. Mode 'ncu': one call of
each between cudaProfilerStart / Stop, for ncu."""
import statistics, sys, time
import torch
import kp_fused_mlp
dev, dt, M, H, I = "cuda", torch.bfloat16, 8192, 4096, 14336
torch.manual_seed(0)
x = torch.randn(M, H, device=dev, dtype=dt)
w = torch.randn(2 * I, H, device=dev, dtype=dt) / H**0.5
wg, wu = w[:I], w[I:]
ops = {
    "cublas packed mm": lambda: torch.mm(x, w.t()),
    "cublas gate + up": lambda: (torch.mm(x, wg.t()), torch.mm(x, wu.t())),
    "kp gated GEMM": lambda: kp_fused_mlp.gated_linear(x, w, "silu", backend="cuda"),
    "kp plain GEMM packed": lambda: kp_fused_mlp.linear_act(x, w, None, "none", backend="cuda"),
}
for f in ops.values():
    for _ in range(3):
        f()
torch.cuda.synchronize()
if sys.argv[1] == "ncu":
    torch.cuda.cudart().cudaProfilerStart()
    for f in ops.values():
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    sys.exit(0)
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
single = {k: [] for k in ops}
for r in range(15):
    for k, f in ops.items():
        flush.zero_(); torch.cuda.synchronize(); time.sleep(0.03)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); e.synchronize()
        single[k].append(s.elapsed_time(e))
win = {k: [] for k in ops}
names = list(ops)
for r in range(3):
    for k in names + names[::-1]:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(40):
            ops[k]()
        e.record(); e.synchronize()
        win[k].append(s.elapsed_time(e) / 40)
flops = 2 * M * H * 2 * I
for k in ops:
    a, b = statistics.median(single[k]), statistics.median(win[k])
    print(f"{k:22s} flushed single {a*1e3:7.0f} us ({flops/a/1e9:5.0f} TF/s) | back to back {b*1e3:7.0f} us ({flops/b/1e9:5.0f} TF/s) | flushed/sustained speedup {b/a:.3f}")
