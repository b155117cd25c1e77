"""Host time per eager call of kp-norm's public functions at small batches, beside torch's own.

    python packages/kp-norm/tools/host_time.py [--rows 1,4,16,64] [--hidden 4096] [--calls 2000] [--out f.json]

Small batches are launch- and host-bound: what a call costs is the Python and autograd work before
the kernel runs. Each figure is the median of 5 blocks of --calls back-to-back calls (wall clock,
synchronized at both ends), the impls interleaved block by block, so drift does not favour one.
Public API only, so that two kp-norm versions compare (tools/ab_wheels.sh).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import kp_norm


def _block_us(fn, calls):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def _impls(rows, hidden):
    bf16 = torch.bfloat16
    x = torch.randn(rows, hidden, device="cuda", dtype=bf16)
    w = torch.randn(hidden, device="cuda", dtype=bf16)
    xg = x.clone().requires_grad_(True)
    wg, bg = (torch.randn(hidden, device="cuda", dtype=bf16, requires_grad=True) for _ in range(2))
    dy = torch.randn(rows, hidden, device="cuda", dtype=bf16)
    y_kp = kp_norm.layer_norm(xg, wg, bg, 1e-5)
    y_t = F.layer_norm(xg, (hidden,), wg, bg, 1e-5)
    return {
        "rms_norm fwd kp": lambda: kp_norm.rms_norm(x, w, 1e-6),
        "rms_norm fwd torch": lambda: F.rms_norm(x, (hidden,), w, 1e-6),
        "layer_norm fwd+grad kp": lambda: kp_norm.layer_norm(xg, wg, bg, 1e-5),
        "layer_norm bwd kp": lambda: torch.autograd.grad(y_kp, (xg, wg, bg), dy, retain_graph=True),
        "layer_norm bwd torch": lambda: torch.autograd.grad(y_t, (xg, wg, bg), dy, retain_graph=True),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1,4,16,64")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--out")
    a = p.parse_args()
    result = {"kp_norm": kp_norm.__version__, "gpu": torch.cuda.get_device_name(), "rows": {}}
    for rows in map(int, a.rows.split(",")):
        impls = _impls(rows, a.hidden)
        for fn in impls.values():  # warm up: first-call caches, allocator
            for _ in range(100):
                fn()
        blocks = {name: [] for name in impls}
        for _ in range(5):
            for name, fn in impls.items():
                blocks[name].append(_block_us(fn, a.calls))
        med = {name: statistics.median(v) for name, v in blocks.items()}
        result["rows"][rows] = med
        print(f"rows={rows:3d} " + "  ".join(f"{k}: {v:6.1f}" for k, v in med.items()), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
