"""A/B sweep of kp-attention's Triton backward at head dim 128 (bf16) against compiled FlexAttention, on a GPU.

    python packages/kp-attention/tools/sweep_triton_bwd.py --out DIR [--only a,b] [--budget S] [--smoke]

From the repo root; a built kp_attention may be installed (its native module is not needed). The kp_attention / kp_core of THIS working tree are put first on sys.path (a wheel in
/tmp/site would otherwise shadow the edited triton/attention.py). Shapes: 16K tokens a batch (batch x seqlen),
16 query heads, d128: seqlen 1024, 4096, 16384, non-causal and causal, and GQA 16:2 at 4096 non-causal.
Each candidate overrides DKDV_BLOCKS[128] / DQ_BLOCKS[128] (monkeypatched, no env vars) and times the
whole Triton backward (triton.attention.attention_bwd: the delta kernel, then dk/dv and dq, or the fused
kernel) with triton.testing.do_bench (median, L2 flushed between reps). Flex: torch.compile(flex_attention,
dynamic=False), block_mask None (non-causal) or a causal block mask, timed as autograd.grad of its output, as
bench/bench_attention.py does. Each candidate's dq/dk/dv is compared with the current row's (max abs diff,
relative to max |current|); the current row's with Flex's. Triton compiles are warmed first in parallel worker
processes (the on-disk cache), Flex compiles meanwhile in the main process. A candidate starts only while less
than --budget seconds (240) have passed since the start. Prints a table; writes tri_bwd_sweep.json to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SRC = [os.path.join(ROOT, "packages", "kp-attention", "src"), os.path.join(ROOT, "packages", "kp-core", "src")]
sys.path[:0] = SRC

TOKENS, HEADS, D = 16384, 16, 128
DEV, DTYPE = "cuda", "bfloat16"  # --smoke: cpu, float32, tiny shapes, Triton's interpreter (checks the script only)
SHAPES = [  # (label, seqlen, kv heads, causal)
    ("s1024", 1024, 16, False), ("s4096", 4096, 16, False), ("s16384", 16384, 16, False),
    ("s1024c", 1024, 16, True), ("s4096c", 4096, 16, True), ("s16384c", 16384, 16, True),
    ("s4096gqa", 4096, 2, False),
]

# (name, dk/dv row, dq row): Blocks(block_m, block_n, num_warps, num_stages, fused). dk/dv: BLOCK_N keys a
# program, BLOCK_M query rows a step; dq: BLOCK_M rows a program, BLOCK_N keys a step. fused: one launch
# (dq programs ride in the dk/dv grid at the dk/dv row's warps and stages). FlexAttention's sm_90 d128 default
# is FlexBwDConfig(64, 128, 128, 64, 3 stages, 8 warps) in one launch = "flex-fused" below.
CANDIDATES = [
    ("current", (64, 64, 4, 2), (64, 64, 4, 2)),
    ("dq128x64x8x3", (64, 64, 4, 2), (128, 64, 8, 3)),
    ("dq128x64x8x2", (64, 64, 4, 2), (128, 64, 8, 2)),
    ("dq128x128x8x2", (64, 64, 4, 2), (128, 128, 8, 2)),
    ("flex-tiles", (64, 128, 8, 3), (128, 64, 8, 3)),
    ("kv64x128x8x2", (64, 128, 8, 2), (128, 64, 8, 2)),
    ("flex-fused", (64, 128, 8, 3, True), (128, 64, 8, 3)),
    ("fused-2st", (64, 128, 8, 2, True), (128, 64, 8, 2)),
    ("kv32x128x8x3", (32, 128, 8, 3), (128, 64, 8, 3)),
    ("kv64x64x4x3", (64, 64, 4, 3), (128, 64, 8, 3)),
    ("fused-4w", (64, 64, 4, 2, True), (64, 64, 4, 2)),
    ("kv64x128-dq128", (64, 128, 8, 2), (128, 128, 8, 2)),
]


def _flops(batch, seqlen, causal):
    return 2.5 * 4 * batch * HEADS * seqlen * seqlen * D / (2 if causal else 1)


def _set(ta, cand):
    _, kv, dq = cand
    ta.DKDV_BLOCKS[D] = ta.Blocks(*kv)
    ta.DQ_BLOCKS[D] = ta.Blocks(*dq)


def _inputs(torch, batch, seqlen, kv_heads, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    dt = getattr(torch, DTYPE)
    q = torch.randn(batch, seqlen, HEADS, D, device=DEV, dtype=dt, generator=g)
    k = torch.randn(batch, seqlen, kv_heads, D, device=DEV, dtype=dt, generator=g)
    v = torch.randn(batch, seqlen, kv_heads, D, device=DEV, dtype=dt, generator=g)
    do = torch.randn(batch, seqlen, HEADS, D, device=DEV, dtype=dt, generator=g)
    return q, k, v, do


def _warm(index):
    """Worker: compile candidate `index`'s kernels for every shape's specialization (batch 1: batch is no
    kernel argument), into Triton's on-disk cache. out and lse are random: only the compile matters."""
    sys.path[:0] = SRC
    import torch
    from kp_attention.triton import attention as ta

    cand = CANDIDATES[index]
    _set(ta, cand)
    t0 = time.time()
    try:
        for _, seqlen, kv_heads, causal in SHAPES:
            q, k, v, do = _inputs(torch, 1, seqlen, kv_heads)
            lse = torch.randn(1, HEADS, seqlen, device="cuda") + 5.0
            ta.attention_bwd(do, q, k, v, do, lse, D**-0.5, causal, -1, -1, 0.0, 0)
        torch.cuda.synchronize()
        return index, time.time() - t0, None
    except Exception as e:  # noqa: BLE001
        return index, time.time() - t0, f"{type(e).__name__}: {str(e)[:300]}"


def _kernel_info(ta):
    """(kernel, constexprs, warps, stages, regs, spills) of every compiled backward kernel variant."""
    rows = []
    for fn in (ta._bwd_dkdv_kernel, ta._bwd_dq_kernel, ta._bwd_fused_kernel):
        for caches in getattr(fn, "device_caches", {}).values():
            for ck in caches[0].values():
                try:
                    names = ck.src.fn.arg_names
                    consts = {(names[k[0]] if isinstance(k, tuple) else k): v for k, v in ck.src.constants.items()}
                    keep = {k: v for k, v in consts.items() if k.startswith("BLOCK") or k in ("CAUSAL",)}
                    rows.append(dict(kernel=fn.__name__, consts=str(keep), warps=ck.metadata.num_warps,
                                     stages=ck.metadata.num_stages, regs=getattr(ck, "n_regs", None),
                                     spills=getattr(ck, "n_spills", None), smem=ck.metadata.shared))
                except Exception as e:  # noqa: BLE001
                    rows.append(dict(kernel=fn.__name__, error=str(e)[:200]))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--budget", type=float, default=240.0, help="start no candidate after this many seconds")
    p.add_argument("--workers", type=int, default=len(CANDIDATES), help="compile worker processes")
    p.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    p.add_argument("--smoke", action="store_true", help="no GPU: tiny fp32 shapes under Triton's interpreter")
    args = p.parse_args()
    global TOKENS, HEADS, DEV, DTYPE, SHAPES
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        TOKENS, HEADS, DEV, DTYPE = 256, 4, "cpu", "float32"
        SHAPES = [(lb, s // 64, 2 if kv == 2 else HEADS, c) for lb, s, kv, c in SHAPES]
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    cands = [c for c in CANDIDATES if not args.only or c[0] in args.only.split(",")]
    if cands[0][0] != "current":
        cands.insert(0, CANDIDATES[0])

    # 1. Triton compiles in parallel worker processes (on-disk cache), while this process compiles Flex.
    pool = None if args.smoke else mp.get_context("spawn").Pool(args.workers)
    warm = pool.map_async(_warm, [CANDIDATES.index(c) for c in cands]) if pool else None

    import torch
    import triton
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from kp_attention.triton import attention as ta

    gpu = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (smoke)"
    print(f"kp triton module: {ta.__file__}\ntorch {torch.__version__}, triton {triton.__version__}, {gpu}", flush=True)
    assert ta.__file__.startswith(ROOT), f"imported {ta.__file__}, not this tree's"
    saved = (ta.DKDV_BLOCKS[D], ta.DQ_BLOCKS[D])
    print(f"table rows now: DKDV_BLOCKS[128] = {saved[0]}, DQ_BLOCKS[128] = {saved[1]}", flush=True)
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")  # noqa: E731
    flex = torch.compile(flex_attention, dynamic=False)
    if args.smoke:  # Flex has no CPU backward: the reference formula stands in for it
        from kp_attention import reference

        def flex(q, k, v, block_mask=None, enable_gqa=False):
            o, _ = reference.attention(*(t.transpose(1, 2) for t in (q, k, v)), scale=D**-0.5,
                                       causal=block_mask is not None)
            return o.transpose(1, 2)

        def bench(fn):  # noqa: F811
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
    data, results, flex_ms, flex_grads = {}, [], {}, {}
    for label, seqlen, kv_heads, causal in SHAPES:
        batch = TOKENS // seqlen
        q, k, v, do = _inputs(torch, batch, seqlen, kv_heads)
        out, lse = ta.attention_fwd(q, k, v, D**-0.5, causal, -1, -1, 0.0, 0)
        data[label] = (q, k, v, do, out, lse, batch, seqlen, causal)
        t0 = time.time()
        try:
            mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, seqlen, seqlen, device=DEV) if causal else None
            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            o = flex(*(t.transpose(1, 2) for t in leaves), block_mask=mask, enable_gqa=kv_heads != HEADS).transpose(1, 2)
            grads = torch.autograd.grad(o, leaves, do, retain_graph=True)
            flex_grads[label] = grads
            flex_ms[label] = bench(lambda: torch.autograd.grad(o, leaves, do, retain_graph=True))
            print(f"flex {label:9} {_flops(batch, seqlen, causal) / flex_ms[label] / 1e9:7.1f} TFLOP/s "
                  f"({flex_ms[label]:.3f} ms; compile+time {time.time() - t0:.0f} s)", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"flex {label}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
        results.append(dict(impl="flex-compiled", shape=label, ms=flex_ms.get(label),
                            tflops=_flops(batch, seqlen, causal) / flex_ms[label] / 1e9 if label in flex_ms else None))

    warm_info = {}
    try:
        if warm is None:
            raise RuntimeError("no warm-up workers (--smoke)")
        for index, secs, err in warm.get(timeout=max(30.0, args.budget + 120 - (time.time() - t_start))):
            warm_info[CANDIDATES[index][0]] = (secs, err)
    except Exception as e:  # noqa: BLE001
        print(f"warm-up workers did not all finish: {type(e).__name__}: {e}", flush=True)
    if pool:
        pool.terminate()
    print(f"warm-up done at {time.time() - t_start:.0f} s: " +
          ", ".join(f"{n} {s:.0f}s{' ERR ' + e if e else ''}" for n, (s, e) in warm_info.items()), flush=True)

    # 2. Time every candidate on every shape (the current row first: the others are checked against it).
    want = {}
    try:
        for cand in cands:
            name = cand[0]
            if name != "current" and time.time() - t_start > args.budget:
                print(f"{name}: skipped (past the {args.budget:.0f} s budget)", flush=True)
                results.append(dict(impl=name, skipped=True))
                continue
            _set(ta, cand)
            for label, (q, k, v, do, out, lse, batch, seqlen, causal) in data.items():
                row = dict(impl=name, shape=label, dkdv=list(ta.DKDV_BLOCKS[D]), dq=list(ta.DQ_BLOCKS[D]))
                try:
                    call = lambda: ta.attention_bwd(do, q, k, v, out, lse, D**-0.5, causal, -1, -1, 0.0, 0)  # noqa: E731
                    got = call()
                    if DEV == "cuda":
                        torch.cuda.synchronize()
                    ref = want.setdefault(label, got) if name == "current" else want.get(label)
                    if ref is not None:
                        scale = max(r.float().abs().max().item() for r in ref)
                        diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, ref))
                        row["rel_diff_vs_current"] = diff / scale
                    if name == "current" and label in flex_grads:
                        fscale = max(r.float().abs().max().item() for r in flex_grads[label])
                        row["rel_diff_vs_flex"] = max((a.float() - b.float()).abs().max().item()
                                                      for a, b in zip(got, flex_grads[label])) / fscale
                    finite = all(torch.isfinite(g).all().item() for g in got)
                    row["broken"] = (not finite) or row.get("rel_diff_vs_current", 0.0) > 2e-2 \
                        or row.get("rel_diff_vs_flex", 0.0) > 5e-2
                    row["ms"] = bench(call)
                    row["tflops"] = _flops(batch, seqlen, causal) / row["ms"] / 1e9
                    if label in flex_ms:
                        row["x_flex"] = flex_ms[label] / row["ms"]
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    traceback.print_exc()
                results.append(row)
                print(f"{name:16} {label:9} " + (f"{row['tflops']:7.1f} TFLOP/s x{row.get('x_flex', float('nan')):.3f} flex"
                      f"  diff {row.get('rel_diff_vs_flex' if name == 'current' else 'rel_diff_vs_current', float('nan')):.2e}"
                      f"{' (vs flex)' if name == 'current' else ''}"
                      f"{'  BROKEN' if row.get('broken') else ''}" if "ms" in row else row.get("error", "?")), flush=True)
            # the current row also through autograd (flash_attn backend="triton"), as bench_attention times it
            if name == "current":
                import kp_attention

                for label, (q, k, v, do, out, lse, batch, seqlen, causal) in data.items():
                    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
                    o = kp_attention.flash_attn(*leaves, causal=causal, backend="triton")
                    ms = bench(lambda: torch.autograd.grad(o, leaves, do, retain_graph=True))
                    results.append(dict(impl="current-autograd", shape=label, ms=ms,
                                        tflops=_flops(batch, seqlen, causal) / ms / 1e9,
                                        x_flex=flex_ms[label] / ms if label in flex_ms else None))
    finally:
        ta.DKDV_BLOCKS[D], ta.DQ_BLOCKS[D] = saved

    # 3. Table: TFLOP/s and x Flex per shape, the mean x Flex over the non-causal d128 shapes and over all.
    labels = [s[0] for s in SHAPES]
    print(f"\n{'impl':18}" + "".join(f"{lb:>16}" for lb in labels) + f"{'mean xflex nc':>15}{'mean all':>10}")
    flex_tf = {r["shape"]: r["tflops"] for r in results if r["impl"] == "flex-compiled" and r.get("tflops")}
    print(f"{'flex-compiled':18}" + "".join(f"{flex_tf.get(lb, float('nan')):16.1f}" for lb in labels))
    summary = []
    for name in [c[0] for c in cands] + ["current-autograd"]:
        rows = {r["shape"]: r for r in results if r["impl"] == name and "shape" in r}
        if not rows:
            continue
        cells = ""
        for lb in labels:
            r = rows.get(lb, {})
            cells += f"{r['tflops']:8.1f} x{r.get('x_flex') or float('nan'):.3f}{'!' if r.get('broken') else ' '}" if "tflops" in r else f"{'-':>16}"
        nc = [rows[lb]["x_flex"] for lb in labels if lb in rows and rows[lb].get("x_flex") and not lb.endswith("c")]
        al = [rows[lb]["x_flex"] for lb in labels if lb in rows and rows[lb].get("x_flex")]
        m_nc = sum(nc) / len(nc) if nc else float("nan")
        m_al = sum(al) / len(al) if al else float("nan")
        summary.append(dict(impl=name, mean_x_flex_noncausal=m_nc, mean_x_flex_all=m_al,
                            min_x_flex=min(al) if al else None, broken=any(r.get("broken") for r in rows.values())))
        print(f"{name:18}{cells}{m_nc:15.3f}{m_al:10.3f}")
    print("('!': a result off the current row's by > 2% of its max, or non-finite)")
    best = max((s for s in summary if s["impl"] not in ("current-autograd",) and not s["broken"]
                and not math.isnan(s["mean_x_flex_all"])), key=lambda s: s["mean_x_flex_all"], default=None)
    if best:
        c = next(c for c in cands if c[0] == best["impl"])
        print(f"best by mean x flex over all shapes: {best['impl']}: DKDV_BLOCKS[128] = Blocks{c[1]}, "
              f"DQ_BLOCKS[128] = Blocks{c[2]} (non-causal x{best['mean_x_flex_noncausal']:.3f}, "
              f"all x{best['mean_x_flex_all']:.3f}, worst x{best['min_x_flex']:.3f})")
    info = _kernel_info(ta)
    print("\ncompiled backward kernels (regs / spills as Triton reports them):")
    for r in info:
        print(f"  {r}")
    with open(os.path.join(args.out, "tri_bwd_sweep.json"), "w") as f:
        json.dump(dict(gpu=gpu, torch=torch.__version__, triton=triton.__version__,
                       candidates=[dict(name=n, dkdv=list(kv), dq=list(dq)) for n, kv, dq in cands], results=results,
                       summary=summary, kernels=info, warm=warm_info, seconds=time.time() - t_start), f, indent=1)
    print(f"\nwrote {os.path.join(args.out, 'tri_bwd_sweep.json')} ({time.time() - t_start:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
