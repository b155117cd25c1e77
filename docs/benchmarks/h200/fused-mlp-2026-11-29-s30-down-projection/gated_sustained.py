"""The gated GEMM at 8192 tokens (4096 -> 2 x 14336) under sustained load: windows of back-to-back
calls, implementations alternated A B C .. C B A per round (neither always on a hotter GPU);
then single flushed calls interleaved. kp's gated rows coop_256x192_c1x2 (the table's) and
coop_128x256_c2x1, inference and training (saves P), against torch.compile of the unfused
gate/up projections + silu * mul."""
import statistics
import torch
import torch.nn.functional as F
from kp_core.bench.timing import do_bench
from kp_fused_mlp import _cuda

dev, dt = "cuda", torch.bfloat16
M, H, I = 8192, 4096, 14336
x = torch.randn(M, H, device=dev, dtype=dt)
w = torch.randn(2 * I, H, device=dev, dtype=dt) * H**-0.5
rows = list(_cuda.NATIVE.module.gated_configs())
r256, r128 = rows.index("coop_256x192_c1x2"), rows.index("coop_128x256_c2x1")


@torch.compile
def unfused(x, wg, wu):
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


wg, wu = w[:I].contiguous(), w[I:].contiguous()
impls = {
    "torch.compile unfused": lambda: unfused(x, wg, wu),
    "kp coop_256x192_c1x2": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", False, config=r256),
    "kp coop_128x256_c2x1": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", False, config=r128),
    "kp coop_256x192_c1x2 saves P": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", True, config=r256),
    "kp coop_128x256_c2x1 saves P": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", True, config=r128),
}
for f in impls.values():
    f()
torch.cuda.synchronize()


def window(fn, n=150):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3


times = {k: [] for k in impls}
names = list(impls)
for r in range(3):
    for k in names + names[::-1]:
        times[k].append(window(impls[k]))
single = {k: [] for k in impls}
for r in range(5):
    for k in names:
        single[k].append(do_bench(impls[k], warmup=5, rep=20) * 1e3)
base_b, base_s = statistics.median(times[names[0]]), statistics.median(single[names[0]])
for k in names:
    b, s = statistics.median(times[k]), statistics.median(single[k])
    print(f"{k:32s} sustained {b:7.0f} us ({base_b / b:.3f}x)  windows {' '.join(f'{t:.0f}' for t in times[k])}   "
          f"single {s:7.0f} us ({base_s / s:.3f}x)")
