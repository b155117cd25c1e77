"""Session 36: a candidate row of the gated GEMM against the table's pingpong_128x128_c2x1, the
cooperative 256 x 192 row and cuBLAS's two projections + silu * mul, at Llama-3-8B's gated shape and
the larger one, 8192 tokens, bf16, without and with the saved pre-activations P: bit-identity with
c2x1, then paired rounds, windows of back-to-back calls (A B B A, clock and power) and spaced calls
(L2 flushed, the GPU idle 30 ms before each).

    python ab_gated_rows.py <kp-fused-mlp/tools> <row> [--grids] [--split-checks]

--grids: the kernels each row launches (grid, smem, start, duration: torch.profiler). --split-checks:
a matmul reading h right after the row's launch, 30 times, and a CUDA graph replayed on new x (the
split launch's two grids). Calls 1, 2 and 5 ran it with pingpong_128x128_c2x2 --grids (the 2 x 2
row alone, whl40), the same with --split-checks (row 4 as the split launch, whl42) and
pingpong_128x192_c2x1 (session 35's branch wheel). Consolidated from the three scripts as run."""
import json, os, sys, tempfile, time
import torch
import torch.nn.functional as F
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, three_regimes  # noqa: E402  (beside it: the timers as run)

dev, dt, M = "cuda", torch.bfloat16, 8192
CANDIDATE, GRIDS, SPLIT_CHECKS = sys.argv[2], "--grids" in sys.argv, "--split-checks" in sys.argv
rows = list(_cuda.NATIVE.module.gated_configs())
ROWS = ("pingpong_128x128_c2x1", CANDIDATE, "coop_256x192_c1x2")


def gated(x, w, row, save):
    return _cuda.gated_linear_fwd(x, w, None, "silu", save, config=rows.index(row))


def grids(x, w):
    """The kernels of each row's launch: (grid, smem, start, duration)."""
    out = {}
    for r in ROWS:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            gated(x, w, r, False)
            torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "t.json")
        prof.export_chrome_trace(path)
        ev = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
        t0 = min(e["ts"] for e in ev) if ev else 0
        out[r] = [(e["args"].get("grid"), e["args"].get("shared memory"), f"start {e['ts'] - t0:.0f} us",
                   f"dur {e['dur']:.0f} us") for e in ev]
    return out


def split_checks(x, w, inter, h_ref):
    """The next kernel sees both grids' h; a graph of the launch replays on new inputs."""
    v = torch.randn(inter, 256, device=dev, dtype=dt)
    want = h_ref @ v
    bad = sum(not torch.equal(gated(x, w, CANDIDATE, False)[0] @ v, want) for _ in range(30))
    g, xs = torch.cuda.CUDAGraph(), x.clone()
    with torch.cuda.graph(g):
        hg = gated(xs, w, CANDIDATE, False)[0]
    xs.copy_(x.flip(0))
    g.replay()
    same = torch.equal(hg, gated(x.flip(0).contiguous(), w, ROWS[0], False)[0])
    print(f"  split: h @ v right after, 30 calls, mismatches {bad}; graph replay on new x bit-identical {same}", flush=True)


print(rows, torch.cuda.get_device_name(), torch.__version__, flush=True)
sampler = Sampler()
time.sleep(0.5)  # its first samples
for hidden, inter in ((4096, 14336), (8192, 28672)):
    x = torch.randn(M, hidden, device=dev, dtype=dt)
    w = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
    wg, wu = w[:inter], w[inter:]
    if GRIDS:
        print(f"== {hidden} -> 2 x {inter}: kernels (grid, smem, start, duration)", flush=True)
        for r, g in grids(x, w).items():
            print(f"  {r:24s} {g}", flush=True)
    ref = gated(x, w, ROWS[0], True)
    if SPLIT_CHECKS:
        split_checks(x, w, inter, ref[0])
    for r in ROWS[1:]:
        got = gated(x, w, r, True)
        print(f"  {r} vs {ROWS[0]}: h bit-identical {torch.equal(ref[0], got[0])}, P {torch.equal(ref[1], got[1])}", flush=True)
    for save in (False, True):
        fns = {"cublas 2 mm + silu*mul": lambda: F.silu(torch.mm(x, wg.t())) * torch.mm(x, wu.t())}
        for r in ROWS:
            fns[r] = lambda r=r: gated(x, w, r, save)
        print(f"== {hidden} -> 2 x {inter}, save P {save} (x: speed over {ROWS[0]})", flush=True)
        three_regimes(fns, sampler, ROWS[0], paired_rounds=40, calls=40 if hidden == 4096 else 15, window_rounds=4,
                      spaced_rounds=15)
    del x, w, wg, wu, ref
sampler.stop()
