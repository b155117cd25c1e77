"""Host cost per eager call of a kp op, split into its layers (a diagnostic, not a benchmark).

    python tools/profile_host.py [--rows 1] [--hidden 4096]

Prints the backend `auto` picks, the wall time per call of: the public function, the level's
wrapper alone, the bare native call, and torch's F.rms_norm; then a cProfile of the public call.
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--hidden", type=int, default=4096)
    a = p.parse_args()
    x = torch.randn(a.rows, a.hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(a.hidden, device="cuda", dtype=torch.bfloat16)
    dev = x.device
    print("auto picks:", norm._backend_for("auto", dev.type, dev.index, x.dtype, w.dtype, None))
    y = torch.empty_like(x)
    mod = _cuda.NATIVE.module
    stream = torch.cuda.current_stream().cuda_stream
    xp, wp, yp = x.data_ptr(), w.data_ptr(), y.data_ptr()
    rows = [
        ("kp_norm.rms_norm (auto)", lambda: kp_norm.rms_norm(x, w, 1e-6)),
        ("kp_norm.rms_norm (cuda)", lambda: kp_norm.rms_norm(x, w, 1e-6, backend="cuda")),
        ("_cuda.norm_fwd", lambda: _cuda.norm_fwd(x, None, w, None, 1e-6, True, 0.0, None, False)),
        ("_C.norm_fwd (bare)", lambda: mod.norm_fwd(xp, a.hidden, 0, 0, wp, 0, yp, a.hidden, 0, 0, 0, 0,
                                                     a.rows, a.hidden, 2, 2, 2, 1e-6, 0.0, True, 0, stream)),
        ("torch.empty_like", lambda: torch.empty_like(x)),
        ("F.rms_norm", lambda: F.rms_norm(x, (a.hidden,), w, 1e-6)),
    ]
    with torch.no_grad():
        for name, fn in rows:
            print(f"{name:28s} {per_call_us(fn):8.2f} us/call")
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
