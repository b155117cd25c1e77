"""Session 36 (branch gated-pingpong-c2x2, second build): row 4 as a split launch (the 2 x 2 cluster
row on the 120 SMs its clusters fill, the c2x1 row on the other 12, side by side) against the
table's c2x1 row, the cooperative 256 x 192 row and cuBLAS's two projections + silu * mul, at
Llama-3-8B's gated shape and the larger one, 8192 tokens, bf16; without and with P. First the
kernels each row launches (grid, start, duration: do the split's two grids overlap?), a race check
(a matmul reading h right after the split launch, 30 times), a graph replay. Then paired rounds,
windows (A B B A, clock and power) and spaced calls (L2 flushed, the GPU idle 30 ms before each)."""
import json, os, statistics, sys, tempfile, time
import torch
import torch.nn.functional as F
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, paired_medians, sustained_windows
dev, dt, M = "cuda", torch.bfloat16, 8192
rows = list(_cuda.NATIVE.module.gated_configs())
ROWS = ("pingpong_128x128_c2x1", "pingpong_128x128_c2x2", "coop_256x192_c1x2")  # row 4: the split
print(rows, torch.cuda.get_device_name(), torch.__version__, flush=True)


def grids(x, w):
    """The launch grid of each row (torch.profiler's trace)."""
    out = {}
    for r in ROWS:
        c = rows.index(r)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            _cuda.gated_linear_fwd(x, w, None, "silu", False, config=c)
            torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "t.json")
        prof.export_chrome_trace(path)
        ev = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
        t0 = min(e["ts"] for e in ev) if ev else 0
        out[r] = [(e["args"].get("grid"), e["args"].get("shared memory"), f"start {e['ts'] - t0:.0f} us",
                   f"dur {e['dur']:.0f} us") for e in ev]
    return out


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


if __name__ == "__main__":
    sampler = Sampler(); time.sleep(0.5)
    for hidden, inter in ((4096, 14336), (8192, 28672)):
        x = torch.randn(M, hidden, device=dev, dtype=dt)
        w = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
        wg, wu = w[:inter], w[inter:]
        print(f"== {hidden} -> 2 x {inter}: grids (grid, block, smem)", flush=True)
        for r, g in grids(x, w).items():
            print(f"  {r:24s} {g}", flush=True)
        ref = _cuda.gated_linear_fwd(x, w, None, "silu", True, config=rows.index(ROWS[0]))
        split = rows.index("pingpong_128x128_c2x2")
        v = torch.randn(inter, 256, device=dev, dtype=dt)
        want = ref[0] @ v
        bad = 0
        for _ in range(30):  # the next kernel must see both grids' h
            h = _cuda.gated_linear_fwd(x, w, None, "silu", False, config=split)[0]
            bad += not torch.equal(h @ v, want)
        g = torch.cuda.CUDAGraph()
        xs = x.clone()
        with torch.cuda.graph(g):
            hg = _cuda.gated_linear_fwd(xs, w, None, "silu", False, config=split)[0]
        xs.copy_(x.flip(0)); g.replay()
        href = _cuda.gated_linear_fwd(x.flip(0).contiguous(), w, None, "silu", False, config=rows.index(ROWS[0]))[0]
        print(f"  split: h @ v right after, 30 calls, mismatches {bad}; graph replay on new x bit-identical "
              f"{torch.equal(hg, href)}", flush=True)
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
        del x, w, wg, wu, ref, v, want, h, hg, href, xs, g
    sampler.stop()
