"""Sweep the decode kernels' rows and K splits on a GPU: % of copy bandwidth per (shape, tokens,
row, splits).

    python packages/kp-fused-mlp/tools/decode_sweep.py [--tokens 1,16,32] [--splits 0,1,2,3,4,6,8,12,16]
                                                      [--rows table,decode_fma_m1,...] [--gated] [--out f.json]

Splits 0 is the table's choice (csrc/decode_table.h), reported with the splits it picked; row
"table" the table's row by M (the decode kernels run at every M here, whatever linear_act's cut). Shapes:
linear_act's (K, N) of Llama-3-8B and a larger model, or with --gated gated_linear's (H, I).
Median of kp_core.bench's do_bench (L2 flush + stream hold); the copy ceiling (read + write of
1 GiB) is measured in the same run. A development tool: the committed numbers come from
bench/bench_decode.py.
"""
from __future__ import annotations

import argparse
import json

import torch
from kp_core.bench.ceilings import measure
from kp_core.bench.timing import do_bench

from kp_fused_mlp import _cuda

LINEAR = [(4096, 14336), (14336, 4096), (8192, 28672), (28672, 8192)]  # (K, N)
GATED = [(4096, 14336), (8192, 28672)]  # (H, I)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="1,16,32")
    p.add_argument("--splits", default="0,1,2,3,4,6,8,12,16")
    p.add_argument("--rows", default="table", help="decode_configs() names or 'table', comma-separated")
    p.add_argument("--gated", action="store_true")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    copy = measure("cuda", timer=do_bench)["copy"]["value"]  # GB/s
    print(f"copy: {copy:,.0f} GB/s")
    rows = []
    for k, n in GATED if args.gated else LINEAR:
        rows_w = 2 * n if args.gated else n
        w = torch.randn(rows_w, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        for m in map(int, args.tokens.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for name, s in [(r, int(s)) for r in args.rows.split(",") for s in args.splits.split(",")]:
                r = None if name == "table" else name
                if args.gated:
                    fn = lambda: _cuda.gated_linear_fwd(x, w, None, "silu", False, decode_splits=s or None,  # noqa: E731
                                                        decode_row=r)  # fmt: skip
                else:
                    fn = lambda: _cuda.linear_act_fwd(x, w, None, "none", config=_cuda.decode_config(),  # noqa: E731
                                                      decode_splits=s or None, decode_row=r)  # fmt: skip
                plan = _cuda.decode_plan(m, n, k, gated=args.gated, splits=s, row=r)
                ms = do_bench(fn)
                gbps = (rows_w * k + m * (k + n)) * 2 / ms / 1e6
                row = {"k": k, "n": n, "gated": args.gated, "tokens": m, "splits_asked": s, "plan": plan, "us": ms * 1e3,
                       "gbps": gbps, "pct_of_copy": 100 * gbps / copy}  # fmt: skip
                rows.append(row)
                print(f"{'gated ' if args.gated else ''}{m:>3} x {k} -> {n}  {plan['row']:<14} splits {s or 'table'} "
                      f"(ran {plan['splits']}, grid {plan['grid']}, {plan['ctas_per_sm']}/SM): "
                      f"{ms * 1e3:8.1f} us  {gbps:7.0f} GB/s  {row['pct_of_copy']:5.1f}% of copy", flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"copy_gbps": copy, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
