"""Session 33: is wave quantization visible in the 8192-token GEMMs? Time per call of kp's GEMM
(linear_act, no activation) and torch.mm as M steps by 128 around 8192, sustained windows
(interleaved) and flushed single calls. A staircase in time/M says the tail wave costs."""
import torch
from kp_core.bench.timing import sustained_ms, do_bench
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
SMS = torch.cuda.get_device_properties(0).multi_processor_count
print("sms", SMS)
for n, k in [(4096, 14336), (14336, 4096), (4096, 28672)]:
    w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
    for m in range(7680, 8704 + 1, 128):
        x = torch.randn(m, k, device=dev, dtype=dt)
        fns = {"kp": lambda: _cuda.linear_act_fwd(x, w, None, "none"), "mm": lambda: torch.mm(x, w.t())}
        s = sustained_ms(fns, device=dev, window_ms=150, rounds=2)
        f = {kk: do_bench(fn, device=dev, warmup=10, rep=60) for kk, fn in fns.items()}
        fl = 2 * m * n * k
        row = _cuda.gemm_plan(m, n, k)
        print(f"N={n:5d} K={k:5d} M={m:5d} row={row:22s} | sustained kp {s['kp']*1e3:7.1f} us {fl/s['kp']/1e9:6.1f} TF"
              f" mm {s['mm']*1e3:7.1f} us {fl/s['mm']/1e9:6.1f} TF kp/mm {s['mm']/s['kp']:.3f} | flushed kp {f['kp']*1e3:7.1f}"
              f" {fl/f['kp']/1e9:6.1f} TF mm {f['mm']*1e3:7.1f} {fl/f['mm']/1e9:6.1f} TF kp/mm {f['mm']/f['kp']:.3f}", flush=True)
