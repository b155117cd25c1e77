"""Sweep the persistent tile scheduler of kp's sm90 GEMM: max_swizzle x raster order, at run time.

    python packages/kp-fused-mlp/tools/gemm_scheduler_sweep.py [--out DIR] [--reps N] [--ops gemm,dx,dw]
                                                               [--quick]

For each shape (8192^3 and the MLP projections at 8192 tokens: 4096->14336, 14336->4096,
8192->28672, 28672->8192) and each op (gemm: the bare forward GEMM, y = x W^T; dx: dP W; dw:
dP^T x, the training GEMMs), times kp's kernel with every max_swizzle in 1/2/4/8 and raster
along M / along N / heuristic (`_cuda.scheduler_override`: the same kernels, other scheduler
arguments), the table's own setting, and torch.mm on the same operands. Timing: CUDA events
around each call, the L2 flushed before each by a read of 4x its size (a zero fill leaves dirty
lines whose write-back the timed call pays), median of --reps. The settings of one shape and op
are interleaved: each round times every setting once, in an order reversed every other round.
One after the other, each for all its reps, later settings ran on a hotter GPU at a lower clock
(H200, 2026-11-26: the table's own setting read 5-13% apart by its position in the sweep).
Writes gemm_scheduler_sweep.json and .md to --out (default: the current directory); the best
setting of each shape is what csrc/gemm_table.h's rows should carry.

Why: with the L2 flushed, kp's bare GEMM at 4096 -> 14336 ran at 0.94x torch.mm (1.01x without
the flush), and every table row has max_swizzle = 1 (H200, 2026-11-25).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

SHAPES = [(8192, 8192, 8192), (8192, 4096, 14336), (8192, 14336, 4096), (8192, 8192, 28672), (8192, 28672, 8192)]
SWIZZLES = (1, 2, 4, 8)
RASTERS = ("along_m", "along_n", "heuristic")


def _flush_buffer():
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or 64 << 20
    return torch.empty(4 * l2 // 4, dtype=torch.float32, device="cuda")


def time_one(fn, flush: torch.Tensor) -> float:
    """One call after an L2 flush that leaves the lines clean (a read), in ms."""
    torch.sum(flush)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_interleaved(fns: dict, reps: int, flush: torch.Tensor) -> dict:
    """Median ms of each callable, `reps` rounds that time each once, the order reversed every
    other round (so no callable always runs first, on the coolest GPU)."""
    for fn in fns.values():
        fn()  # warm-up: lazy init, descriptors, the allocator
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(reps):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(time_one(fns[name], flush))
    return {name: statistics.median(t) for name, t in times.items()}


def _ops(m: int, k: int, n: int, _cuda):
    """op -> (kp callable, torch.mm callable, (M, N, K) of the GEMM)."""
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    dp = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    return {
        "gemm": (lambda: _cuda.linear_act_fwd(x, w, None, "none"), lambda: torch.mm(x, w.t()), (m, n, k)),
        "dx": (lambda: _cuda.linear_act_bwd(dp, x, w, None, "none", True, False, False),
               lambda: torch.mm(dp, w), (m, k, n)),
        "dw": (lambda: _cuda.linear_act_bwd(dp, x, w, None, "none", False, True, False),
               lambda: torch.mm(dp.t(), x), (n, k, m)),
    }  # fmt: skip


def sweep(ops: list, reps: int, shapes: list) -> list:
    from kp_fused_mlp import _cuda

    flush = _flush_buffer()
    rows = []
    for m, k, n in shapes:
        impls = _ops(m, k, n, _cuda)
        for op in ops:
            kp_fn, torch_fn, (gm, gn, gk) = impls[op]
            flops = 2 * gm * gn * gk
            row_name = _cuda.gemm_plan(gm, gn, gk) if op == "gemm" else _cuda.gemm_bwd_plan(gm, gn, gk, job=op)
            settings = [("table", 0, "row")] + [(f"{s}/{r}", s, r) for s in SWIZZLES for r in RASTERS]

            def with_setting(swizzle, raster, kp_fn=kp_fn):
                def run():
                    with _cuda.scheduler_override(swizzle, raster):
                        kp_fn()

                return run

            fns = {"torch.mm": torch_fn} | {label: with_setting(s, r) for label, s, r in settings}
            ms_of = time_interleaved(fns, reps, flush)
            base = ms_of["torch.mm"]
            for label, swizzle, raster in settings:
                ms = ms_of[label]
                rows.append({"op": op, "m": gm, "n": gn, "k": gk, "row": row_name, "setting": label,
                             "max_swizzle": swizzle, "raster": raster, "ms": ms, "tflops": flops / ms / 1e9,
                             "torch_mm_ms": base, "vs_torch_mm": base / ms})  # fmt: skip
                print(f"{op} {gm}x{gn}x{gk} {label:>14}: {ms:.3f} ms, {flops / ms / 1e9:.0f} TFLOP/s, "
                      f"{base / ms:.3f}x torch.mm", flush=True)  # fmt: skip
    return rows


def markdown(rows: list) -> str:
    lines = ["# sm90 GEMM scheduler sweep (L2 flushed before each call, median)", "",
             f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", "",
             "| op | M x N x K | row | setting (swizzle/raster) | ms | TFLOP/s | x torch.mm |",
             "| --- | --- | --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['op']} | {r['m']}x{r['n']}x{r['k']} | {r['row']} | {r['setting']} | {r['ms']:.3f} | "
                     f"{r['tflops']:.0f} | {r['vs_torch_mm']:.3f} |")  # fmt: skip
    lines += ["", "Best setting per shape:", "", "| op | M x N x K | best | x torch.mm | table's | x torch.mm |",
              "| --- | --- | --- | ---: | --- | ---: |"]  # fmt: skip
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["op"], r["m"], r["n"], r["k"]), []).append(r)
    for (op, m, n, k), rs in groups.items():
        best = min(rs, key=lambda r: r["ms"])
        table = next(r for r in rs if r["setting"] == "table")
        lines.append(f"| {op} | {m}x{n}x{k} | {best['setting']} | {best['vs_torch_mm']:.3f} | table | "
                     f"{table['vs_torch_mm']:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ops", default="gemm,dx,dw", help="comma list of gemm, dx, dw")
    ap.add_argument("--quick", action="store_true", help="8192^3 and 4096 -> 14336 only")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gemm_scheduler_sweep: needs a CUDA GPU (an H100/H200)", file=sys.stderr)
        return 2
    from kp_fused_mlp import _cuda

    why = _cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, False, 4096, 4096)
    if why:
        print(f"gemm_scheduler_sweep: kp's GEMM cannot run here: {why}", file=sys.stderr)
        return 2
    ops = [o for o in args.ops.split(",") if o]
    bad = set(ops) - {"gemm", "dx", "dw"}
    if bad:
        ap.error(f"unknown ops {sorted(bad)}")
    rows = sweep(ops, args.reps, SHAPES[:2] if args.quick else SHAPES)
    os.makedirs(args.out, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "reps": args.reps, "l2_flushed": True}
    with open(os.path.join(args.out, "gemm_scheduler_sweep.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "gemm_scheduler_sweep.md"), "w") as f:
        f.write(markdown(rows))
    print(f"wrote {args.out}/gemm_scheduler_sweep.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
