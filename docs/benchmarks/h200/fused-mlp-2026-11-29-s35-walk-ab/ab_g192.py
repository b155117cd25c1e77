"""Session 35 (branch gated-pingpong-128x192): the gated GEMM's pingpong row with 128 x 192 tiles
(96 h columns a consumer tile) against the table's pingpong 128 x 128 and cuBLAS's two projections
+ silu * mul, at Llama-3-8B's gated shape and the larger one, 8192 tokens, bf16; without and with
the saved pre-activations P. Paired rounds and windows of back-to-back calls (A B B A) with clock
and power."""
import statistics, sys, time
import torch
import torch.nn.functional as F
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, paired_medians, sustained_windows  # the timers as run, moved there after the run
dev, dt, M = "cuda", torch.bfloat16, 8192
rows = list(_cuda.NATIVE.module.gated_configs())
print(rows, flush=True)


sampler = Sampler(); time.sleep(0.5)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for hidden, inter in ((4096, 14336), (8192, 28672)):
    x = torch.randn(M, hidden, device=dev, dtype=dt)
    w = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
    wg, wu = w[:inter], w[inter:]
    for save in (False, True):
        fns = {"cublas 2 mm + silu*mul": lambda: F.silu(torch.mm(x, wg.t())) * torch.mm(x, wu.t())}
        for r in ("pingpong_128x128_c2x1", "pingpong_128x192_c2x1", "coop_256x192_c1x2"):
            c = rows.index(r)
            fns[r] = (lambda c=c: _cuda.gated_linear_fwd(x, w, None, "silu", save, config=c))
        a = _cuda.gated_linear_fwd(x, w, None, "silu", False, config=rows.index("pingpong_128x128_c2x1"))[0]
        b = _cuda.gated_linear_fwd(x, w, None, "silu", False, config=rows.index("pingpong_128x192_c2x1"))[0]
        t = paired_medians(fns, rounds=40); wn = sustained_windows(fns, sampler, calls=30)
        base = "pingpong_128x128_c2x1"
        tw = {k: statistics.median(v[0] for v in wn[k]) for k in fns}
        print(f"== {hidden} -> 2 x {inter}, save P {save}; 128x192 vs 128x128 bit-identical: {torch.equal(a, b)}", flush=True)
        for k in fns:
            clk = statistics.mean(v[1] for v in wn[k]); pw = statistics.mean(v[2] for v in wn[k])
            print(f"  {k:24s} paired {t[k]*1e3:7.0f} us x{t[base]/t[k]:.3f} | windows {tw[k]*1e3:7.0f} us x{tw[base]/tw[k]:.3f} {clk:5.0f} MHz {pw:4.0f} W", flush=True)
    del x, w
sampler.stop()
