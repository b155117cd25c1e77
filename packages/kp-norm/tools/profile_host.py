"""Host cost per eager call of a kp op, split into its layers (a diagnostic, not a benchmark).

    python packages/kp-norm/tools/profile_host.py [--rows 1] [--hidden 4096] [--backward]

Prints the backend `auto` picks, the wall time per call of: the public function, the level's
wrapper alone, the bare native call, and torch's F.rms_norm; then a cProfile of the public call.
--backward does the same for a LayerNorm backward (with dw, db) through torch.autograd.grad:
kp against F.layer_norm, then kp's layers (the autograd Function's work, _cuda.norm_bwd, the
native calls, the allocations).
"""
import argparse
import cProfile
import pstats
import time

import torch
import torch.nn.functional as F

import kp_norm
from kp_norm import _cuda, norm


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def _table(rows):
    for name, fn in rows:
        print(f"{name:34s} {per_call_us(fn, 500):8.2f} us/call")


def backward(a):
    from kp_core import dtypes

    bf16, eps = torch.bfloat16, 1e-5
    x = torch.randn(a.rows, a.hidden, device="cuda", dtype=bf16, requires_grad=True)
    w = torch.randn(a.hidden, device="cuda", dtype=bf16, requires_grad=True)
    b = torch.randn(a.hidden, device="cuda", dtype=bf16, requires_grad=True)
    dy = torch.randn(a.rows, a.hidden, device="cuda", dtype=bf16)
    y = kp_norm.layer_norm(x, w, b, eps, backend="cuda")
    yt = F.layer_norm(x, (a.hidden,), w, b, eps)
    with torch.no_grad():
        _, _, mean, rstd = _cuda.norm_fwd(x, None, w, b, eps, False, 0.0, bf16, True)
    mod, code = _cuda.NATIVE.module, dtypes.code(bf16)
    _table([
        ("autograd.grad kp layer_norm", lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)),
        ("autograd.grad F.layer_norm", lambda: torch.autograd.grad(yt, (x, w, b), dy, retain_graph=True)),
        ("_cuda.norm_bwd (dx, dw, db)", lambda: _cuda.norm_bwd(dy, x, None, w, mean, rstd, False, 0.0, True, True)),
        ("_C.norm_bwd_partials", lambda: mod.norm_bwd_partials(a.rows, a.hidden, code, code, True, x.device.index)),
        ("torch.empty x4 (dx, partials, dw, db)", lambda: (torch.empty_like(x), torch.empty(2, 8, a.hidden, device="cuda"),
                                                     torch.empty_like(w), torch.empty_like(b))),
    ])
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(500):
        torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--backward", action="store_true", help="a LayerNorm backward through autograd.grad")
    a = p.parse_args()
    if a.backward:
        return backward(a)
    x = torch.randn(a.rows, a.hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(a.hidden, device="cuda", dtype=torch.bfloat16)
    dev = x.device
    print("auto picks:", norm.LEVELS.select("auto", dev.type, dev.index, x.dtype, w.dtype, None))
    y = torch.empty_like(x)
    mod = _cuda.NATIVE.module
    stream = torch.cuda.current_stream().cuda_stream
    xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
    launch = lambda r: mod.norm_fwd(xp, a.hidden, 0, 0, wp, 0, yp, a.hidden, 0, 0, 0, 0,  # noqa: E731
                                    r, a.hidden, 2, 2, 2, 1e-6, 0.0, True, 0, stream)
    run = _cuda.inference_fwd(x.dtype, w.dtype, None, dev.index)
    from kp_core.bench.timing import host_ms_interleaved
    from kp_core.dispatch import requested_backend
    from kp_core.registry import current_stream

    rows = {
        "kp_norm.rms_norm (auto)": lambda: kp_norm.rms_norm(x, w, 1e-6),
        "kp_norm.rms_norm (cuda)": lambda: kp_norm.rms_norm(x, w, 1e-6, backend="cuda"),
        "F.rms_norm": lambda: F.rms_norm(x, (a.hidden,), w, 1e-6),
        "_cuda.norm_fwd (general path)": lambda: _cuda.norm_fwd(x, None, w, None, 1e-6, True, 0.0, None, False),
        "inference_fwd launcher": lambda: run(x, w, None, 1e-6, True, 0.0, a.rows, a.hidden),
        "_C.norm_fwd (bare)": lambda: launch(a.rows),
        "_C.norm_fwd rows=0 (no launch)": lambda: launch(0),
        "torch.empty_like": lambda: torch.empty_like(x),
        "3x data_ptr + current_stream": lambda: (x.data_ptr(), w.data_ptr(), y.data_ptr(), current_stream(0)),
        "requested_backend + is_compiling": lambda: (requested_backend(None), norm.registry.is_compiling()),
        "fast-path key": lambda: (x.dtype, x.device, x.shape[-1], w.dtype, w.device, w.shape),
    }
    with torch.no_grad():
        # Interleaved, best of 15 loops each: the GPU hosts' launch cost is bimodal (kp_core.bench.timing).
        for name, ms in host_ms_interleaved(rows, calls=1000, repeats=15).items():
            print(f"{name:34s} {ms * 1e3:8.2f} us/call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            kp_norm.rms_norm(x, w, 1e-6)
        prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(10)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as tp:
        for _ in range(20):
            kp_norm.rms_norm(x, w, 1e-6)
        torch.cuda.synchronize()
    print(tp.key_averages().table(sort_by="cuda_time_total", row_limit=6))


if __name__ == "__main__":
    main()
