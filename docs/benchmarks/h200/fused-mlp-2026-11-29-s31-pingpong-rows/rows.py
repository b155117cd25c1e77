"""Session 31: table rows at 8192 tokens, bf16, against torch.compile / torch.mm, timed three ways:

    python rows.py [llama] [wide] [linear] [bwd] [linear_wide] [--flushed]

llama / wide: the gated GEMM (with and without P) and the GatedMLP forward on each row, hidden
4096 / 14336 and 8192 / 28672; linear: linear_act's saving (training) forward by row, 4096 <->
14336; bwd: dX and dW by row; linear_wide: the saving forward at 8192 <-> 28672.
  paired   rounds in which every implementation runs once, back to back, each call timed by its
           own events (order rotated every round): all see the same heat and clock
  windows  windows of back-to-back calls of one implementation, A B .. B A (sustained load)
  flushed  (--flushed) kp_core's do_bench: an L2-flushing read and a spin before each call, as the
           bench harness times
rows-1-first-look.txt came from a first version (windows only); rows-2 without --flushed;
rows-3 from `bwd linear_wide` (its `plan:` lines used gemm_bwd_plan's old signature)."""
import statistics, sys
import torch
import torch.nn.functional as F
from kp_fused_mlp import _cuda

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/fused-mlp-2026-11-29-s30-down-projection")
from sustained import window  # noqa: E402  (session 30's windows of back-to-back calls)

dev, dt = "cuda", torch.bfloat16
M = 8192


ROWS = ("pingpong_128x128_c2x1", "coop_256x192_c1x2", "coop_128x256_c2x1")  # the training rows


def paired(impls, rounds):
    names = list(impls)
    ev = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for k in order:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); impls[k](); e.record()
            ev[k].append((s, e))
    torch.cuda.synchronize()
    return {k: [s.elapsed_time(e) * 1e3 for s, e in v] for k, v in ev.items()}


FLUSHED = "--flushed" in sys.argv


def flushed(impls, rounds=4):
    from kp_core.bench.timing import do_bench
    names = list(impls)
    t = {k: [] for k in names}
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            t[k].append(do_bench(impls[k], warmup=5, rep=40) * 1e3)
    return t


def compare(title, impls, base, n=40, rounds=3, prounds=40):
    for f in impls.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    names = list(impls)
    p = paired(impls, prounds)
    w = {k: [] for k in impls}
    for _ in range(rounds):
        for k in names + names[::-1]:
            w[k].append(window(impls[k], n))
    f = flushed(impls) if FLUSHED else {k: [1.0] for k in names}
    pb, wb, fb = statistics.median(p[base]), statistics.median(w[base]), statistics.median(f[base])
    print(f"-- {title}")
    for k in names:
        pm, wm = statistics.median(p[k]), statistics.median(w[k])
        q = statistics.quantiles(p[k], n=4)
        print(f"   {k:30s} paired {pm:7.0f} us ({pb / pm:.3f}x) iqr {q[0]:.0f}-{q[2]:.0f}   "
              f"windows {wm:7.0f} us ({wb / wm:.3f}x) [{' '.join(f'{v:.0f}' for v in w[k])}]"
              + (f"   flushed {statistics.median(f[k]):7.0f} us ({fb / statistics.median(f[k]):.3f}x)" if FLUSHED else ""),
              flush=True)


def gated(H, I):
    torch.manual_seed(0)
    x = torch.randn(M, H, device=dev, dtype=dt)
    w = torch.randn(2 * I, H, device=dev, dtype=dt) * H**-0.5
    wg, wu = w[:I].contiguous(), w[I:].contiguous()
    wd = torch.randn(H, I, device=dev, dtype=dt) * I**-0.5

    @torch.compile
    def unfused(x, wg, wu):
        return F.silu(F.linear(x, wg)) * F.linear(x, wu)

    @torch.compile
    def mlp(x, wg, wu, wd):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)

    rows = [(i, r) for i, r in enumerate(_cuda.NATIVE.module.gated_configs()) if r != "pingpong_128x128_c1x2"]
    for save in (False, True):
        impls = {"torch.compile unfused": lambda: unfused(x, wg, wu)}
        for i, r in rows:
            impls[f"kp {r}"] = (lambda i=i: _cuda.gated_linear_fwd(x, w, None, "silu", save, config=i))
        compare(f"gated fwd {M} x {H} -> 2 x {I}" + (" saving P" if save else ""), impls, "torch.compile unfused")
    impls = {"torch.compile MLP": lambda: mlp(x, wg, wu, wd)}
    for i, r in rows:
        impls[f"kp {r} + down"] = (lambda i=i: F.linear(_cuda.gated_linear_fwd(x, w, None, "silu", False, config=i)[0], wd))
    compare(f"GatedMLP fwd {M} x {H} / {I}", impls, "torch.compile MLP", n=20)
    print("   plan:", _cuda.gated_plan(M, I, H), flush=True)


def linear(shapes=((4096, 14336), (14336, 4096)), n_window=40, prounds=40):
    rows = _cuda.NATIVE.module.gemm_configs()
    for k, n in shapes:
        torch.manual_seed(0)
        x = torch.randn(M, k, device=dev, dtype=dt)
        w = torch.randn(n, k, device=dev, dtype=dt) * k**-0.5
        b = torch.randn(n, device=dev, dtype=dt)

        @torch.compile
        def comp(x, w, b):
            z = F.linear(x, w, b)
            return F.silu(z), z

        impls = {"torch.compile (y, z)": lambda: comp(x, w, b)}
        for r in ROWS:
            impls[f"kp train {r}"] = (lambda i=rows.index(r): _cuda.linear_act_train(x, w, b, "silu", config=i))
        impls["kp train default"] = lambda: _cuda.linear_act_train(x, w, b, "silu")
        compare(f"linear_act silu training fwd {M} x {k} -> {n}", impls, "torch.compile (y, z)", n=n_window,
                prounds=prounds)
        print("   plan:", _cuda.gemm_bwd_plan(M, n, k), flush=True)


def bwd():
    mod, rows = _cuda.NATIVE.module, _cuda.NATIVE.module.gemm_configs()
    from kp_core import dtypes
    code = dtypes.code(dt)
    stream = torch.cuda.current_stream().cuda_stream
    # (n = out features of the forward = dP's columns, k = in features)
    for n, k in ((14336, 4096), (4096, 14336), (28672, 4096)):
        torch.manual_seed(0)
        dp = torch.randn(M, n, device=dev, dtype=dt)
        w = torch.randn(n, k, device=dev, dtype=dt)
        x = torch.randn(M, k, device=dev, dtype=dt)
        dx = torch.empty(M, k, device=dev, dtype=dt)
        dw = torch.empty(n, k, device=dev, dtype=dt)
        impls = {"torch.mm dx": lambda: torch.mm(dp, w)}
        for r in ROWS:
            i = rows.index(r)
            impls[f"kp dx {r}"] = (lambda i=i: mod.linear_act_dgrad(dp.data_ptr(), n, w.data_ptr(), k, dx.data_ptr(),
                                                                  M, n, k, code, i, 0, stream))
        compare(f"dX [{M}, {k}] = dP [{M}, {n}] W", impls, "torch.mm dx", n=30, prounds=30)
        print("   plan:", _cuda.gemm_bwd_plan(M, k, n, "dx"), flush=True)
        impls = {"torch.mm dw": lambda: torch.mm(dp.t(), x)}
        for r in ROWS:
            i = rows.index(r)
            impls[f"kp dw {r}"] = (lambda i=i: mod.linear_act_wgrad(dp.data_ptr(), n, x.data_ptr(), k, dw.data_ptr(),
                                                                  M, n, k, code, i, 0, stream))
        compare(f"dW [{n}, {k}] = dP^T X", impls, "torch.mm dw", n=30, prounds=30)
        print("   plan:", _cuda.gemm_bwd_plan(n, k, M, "dw"), flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    for a in sys.argv[1:]:
        if a.startswith("--"):
            continue
        {"llama": lambda: gated(4096, 14336), "wide": lambda: gated(8192, 28672), "linear": linear, "bwd": bwd,
         "linear_wide": lambda: linear(((8192, 28672), (28672, 8192)), 15, 20)}[a]()
