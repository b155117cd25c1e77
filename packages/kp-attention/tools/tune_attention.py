"""Sweep the Triton level's launch configurations (FWD_BLOCKS, DKDV_BLOCKS, DQ_BLOCKS) on a GPU.

    python packages/kp-attention/tools/tune_attention.py [--head-dims 64,128] [--seqlens 4096]
                                 [--dirs fwd,dkdv,dq] [--quick] [--out f.json]

fwd times the forward; dkdv and dq time the whole backward (torch.autograd.grad) while only that
kernel's table changes, the other kernel keeping its table's configuration.
For each head dim, direction, seqlen and causal flag of bench_attention's shapes (16K tokens a batch,
heads x head_dim = 2048, bf16), every candidate configuration is timed (kp_core.bench.do_bench) and
checked against the first candidate's result, beside compiled FlexAttention and SDPA's flash backend
in the same run. Prints TFLOP/s a row and the best candidate per (dir, head dim); a development tool:
the committed numbers come from bench/.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch
import torch.nn.functional as F
from kp_core import bench

from kp_attention.triton import attention as ta

TOKENS, WIDTH = 16384, 2048


def candidates(direction: str, head_dim: int, quick: bool) -> list:
    if direction == "fwd":
        ms, ns, warps, stages = (64, 128), (32, 64, 128), (4, 8), (2, 3, 4)
    elif direction == "dkdv":  # BLOCK_N keys a program, BLOCK_M query rows a step
        # sm_90 SASS (offline, d128): 64 x 64 x 4 warps spills (181 LDL); 32 x 64 x 8 and 16 x 128 x 8
        # do not (dk and dv accumulate in registers across the whole loop)
        ms, ns, warps, stages = (16, 32, 64, 128), (32, 64, 128), (4, 8), (1, 2, 3)
    else:  # dq: BLOCK_M query rows a program, BLOCK_N keys a step
        ms, ns, warps, stages = (32, 64, 128), (32, 64, 128), (4, 8), (1, 2, 3)
    if quick:  # what a first sweep (H100, 2026-11-28) never picked: 32-wide program tiles, 1 stage
        stages = tuple(st for st in stages if st > 1)
        if direction == "dkdv":
            ns = tuple(n for n in ns if n > 32)
        else:
            ms = tuple(m for m in ms if m > 32)
    if head_dim >= 192:
        ms, ns = tuple(m for m in ms if m <= 64) or (32,), tuple(n for n in ns if n <= 64) or (32,)
    return [ta.Blocks(m, n, w, s) for m, n, w, s in itertools.product(ms, ns, warps, stages)]


TABLES = {"fwd": "FWD_BLOCKS", "dkdv": "DKDV_BLOCKS", "dq": "DQ_BLOCKS"}


def _flex(causal, seqlen):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, seqlen, seqlen, device="cuda") if causal else None
    fn = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask).transpose(1, 2)


def _sdpa_flash(causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=causal).transpose(1, 2)  # fmt: skip
    return run


def _time(direction, fn, q, k, v, do):
    if direction == "fwd":  # dkdv and dq: the whole backward
        return bench.do_bench(lambda: fn(q, k, v), warmup=10, rep=40)
    o = fn(q, k, v)
    return bench.do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), warmup=10, rep=40)


def _kp(causal):
    import kp_attention

    return lambda q, k, v: kp_attention.flash_attn(q, k, v, causal=causal, backend="triton")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--seqlens", default="4096")
    p.add_argument("--dirs", default="fwd,dkdv,dq")
    p.add_argument("--causal", default="no,yes", help="no, yes or both (no,yes)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for direction, d, s, causal in itertools.product(args.dirs.split(","), map(int, args.head_dims.split(",")),
                                                     map(int, args.seqlens.split(",")),
                                                     [c == "yes" for c in args.causal.split(",")]):  # fmt: skip
        batch, heads = max(1, TOKENS // s), WIDTH // d
        grad = direction != "fwd"
        flops = 4 * batch * heads * s * s * d // (2 if causal else 1) * (2.5 if grad else 1)
        q, k, v = (torch.randn(batch, s, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
                   for _ in range(3))  # fmt: skip
        do = torch.randn_like(q)
        table = getattr(ta, TABLES[direction])
        key = ta._block_d(d)
        saved = table[key]
        tag = f"{direction} d{d} s{s}{' causal' if causal else ''}"
        for name, fn in (("flex-compiled", _flex(causal, s)), ("sdpa-flash", _sdpa_flash(causal))):
            ms = _time(direction, fn, q, k, v, do)
            rows.append(dict(dir=direction, d=d, s=s, causal=causal, impl=name, ms=ms, tflops=flops / ms / 1e9))
            print(f"{tag:24} {name:28} {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
        want = None
        try:
            for cand in candidates(direction, d, args.quick):
                table[key] = cand
                try:
                    fn = _kp(causal)
                    got = fn(q, k, v) if not grad else torch.autograd.grad(fn(q, k, v), (q, k, v), do)
                    got = got if isinstance(got, tuple) else (got,)
                    if want is None:
                        want = got
                    err = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want))
                    ms = _time(direction, fn, q, k, v, do)
                except Exception as e:  # out of resources, compile errors: note and go on
                    print(f"{tag:24} {str(tuple(cand)):28} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                rows.append(dict(dir=direction, d=d, s=s, causal=causal, impl="kp-triton", blocks=list(cand), ms=ms,
                                 tflops=flops / ms / 1e9, max_diff_vs_first=err))  # fmt: skip
                print(f"{tag:24} {str(tuple(cand)):28} {flops / ms / 1e9:7.1f} TFLOP/s  diff {err:.3g}", flush=True)
        finally:
            table[key] = saved
    print("\nbest kp-triton configuration per (dir, head dim), mean over seqlens and causal flags, as a share of flex:")
    for (direction, d), group in itertools.groupby(sorted(rows, key=lambda r: (r["dir"], r["d"])),
                                                   key=lambda r: (r["dir"], r["d"])):  # fmt: skip
        group = list(group)
        flex = {(r["s"], r["causal"]): r["tflops"] for r in group if r["impl"] == "flex-compiled"}
        score = {}
        for r in group:
            if r["impl"] == "kp-triton":
                score.setdefault(tuple(r["blocks"]), []).append(r["tflops"] / flex[(r["s"], r["causal"])])
        ranked = sorted(((sum(v) / len(v), b, min(v)) for b, v in score.items() if len(v) == len(flex)), reverse=True)
        for mean, b, worst in ranked[:5]:
            print(f"  {direction} d{d}: {b}  mean x{mean:.3f} of flex, worst x{worst:.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
