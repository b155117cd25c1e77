"""Session 36 (session 35's branch gated-pingpong-128x192, its wheel): the pingpong 128 x 192 row
(0.78x the c2x1 row's L2 operand bytes a multiply-add, without idle SMs) in the regime session 35
did not measure: spaced calls (L2 flushed, the GPU idle 30 ms before each: where the bench harness's
flushed column sits and GatedMLP's forward line is weakest), beside paired rounds and windows.
Against the table's c2x1 row, the cooperative 256 x 192 row and cuBLAS's two projections +
silu * mul, Llama-3-8B's gated shape and the larger one, 8192 tokens, bf16, without and with P."""
import statistics, sys, time
import torch
import torch.nn.functional as F
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, paired_medians, sustained_windows
dev, dt, M = "cuda", torch.bfloat16, 8192
rows = list(_cuda.NATIVE.module.gated_configs())
ROWS = ("pingpong_128x128_c2x1", "pingpong_128x192_c2x1", "coop_256x192_c1x2")
print(rows, torch.cuda.get_device_name(), torch.__version__, flush=True)


def spaced_medians(fns, rounds=15, idle_s=0.03):
    """Each call after an L2 flush and idle_s of an idle GPU, timed by its own events."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    got = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            torch.cuda.synchronize(); time.sleep(idle_s)
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fns[k](); e.record(); e.synchronize()
            got[k].append(s.elapsed_time(e))
    return {k: statistics.median(v) for k, v in got.items()}


sampler = Sampler(); time.sleep(0.5)
for hidden, inter in ((4096, 14336), (8192, 28672)):
    x = torch.randn(M, hidden, device=dev, dtype=dt)
    w = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
    wg, wu = w[:inter], w[inter:]
    ref = _cuda.gated_linear_fwd(x, w, None, "silu", True, config=rows.index(ROWS[0]))
    for r in ROWS[1:]:
        got = _cuda.gated_linear_fwd(x, w, None, "silu", True, config=rows.index(r))
        print(f"  {r} vs {ROWS[0]}: h bit-identical {torch.equal(ref[0], got[0])}, P {torch.equal(ref[1], got[1])}", flush=True)
    for save in (False, True):
        fns = {"cublas 2 mm + silu*mul": lambda: F.silu(torch.mm(x, wg.t())) * torch.mm(x, wu.t())}
        for r in ROWS:
            fns[r] = (lambda c=rows.index(r): _cuda.gated_linear_fwd(x, w, None, "silu", save, config=c))
        t = paired_medians(fns, rounds=40)
        wn = sustained_windows(fns, sampler, calls=40 if hidden == 4096 else 15, rounds=4)
        sp = spaced_medians(fns)
        base = ROWS[0]
        tw = {k: statistics.median(v[0] for v in wn[k]) for k in fns}
        print(f"== {hidden} -> 2 x {inter}, save P {save} (x: speed over {base})", flush=True)
        for k in fns:
            clk = statistics.mean(v[1] for v in wn[k]); pw = statistics.mean(v[2] for v in wn[k])
            print(f"  {k:24s} paired {t[k]*1e3:7.0f} us x{t[base]/t[k]:.3f} | windows {tw[k]*1e3:7.0f} us "
                  f"x{tw[base]/tw[k]:.3f} {clk:5.0f} MHz {pw:4.0f} W | spaced {sp[k]*1e3:7.0f} us x{sp[base]/sp[k]:.3f}", flush=True)
    del x, w, wg, wu, ref
sampler.stop()
