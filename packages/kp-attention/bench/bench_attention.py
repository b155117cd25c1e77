"""kp-attention benchmarks: exact attention forward and backward at the shapes of issue 19.

    python packages/kp-attention/bench/bench_attention.py [--quick] [--filter SUBSTR] [--out DIR] [--no-plot]

16K tokens a batch (batch x seqlen), heads x head_dim = 2048, head dims 64 and 128, seqlen 1K-16K,
causal and not, and GQA 8:1 at head dim 128; bf16. FLOPs 4 B H S^2 D (halved when causal), the
backward 2.5x the forward; the ceiling is the measured bf16 GEMM rate.

Impls: kp-triton and kp-cuda (forced; kp-cuda's rows are skipped, with the reason, until that
level exists), torch's SDPA with one backend each (flash: FlashAttention-2; cuDNN; efficient),
compiled FlexAttention, and FlashAttention-4 (flash_attn.cute) where it is installed or carried
(../shared/tools/fa4-quack-carry.sh unpacks it into /root/kp-baselines). Every impl gets q, k, v as
[batch, seqlen, heads, head_dim] tensors (SDPA and Flex see their [batch, heads, seqlen, head_dim]
transposed views, as a model hands them over): no implementation is timed on a copy.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from kp_core import bench

kp_attention = bench.require("kp_attention", "bench_attention", "pip install -e packages/kp-core -e packages/kp-attention")
(fa4_func,), _FA4_MISSING = bench.optional("FlashAttention-4", "flash_attn.cute:flash_attn_func",
                                           site_dir="/root/kp-baselines")  # fmt: skip

TOKENS, WIDTH = 16384, 2048  # batch x seqlen, heads x head_dim
SEQLENS = (1024, 2048, 4096, 8192, 16384)
QUICK = [(4096, 128, 1)]
CPU = [(64, 16, 1), (64, 16, 2)]  # the no-GPU smoke run only exercises the code (seqlen, head_dim, gqa)


def shapes(quick: bool, device: str):
    if device == "cpu":
        return CPU
    if quick:
        return QUICK
    return [(s, d, 1) for d in (64, 128) for s in SEQLENS] + [(s, 128, 8) for s in SEQLENS]


def _sdpa(backend_name):
    def run(q, k, v, causal):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=causal, enable_gqa=k.shape[2] != q.shape[2])  # fmt: skip
        return o.transpose(1, 2)
    return run


@functools.cache
def _flex(causal: bool, seqlen: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, seqlen, seqlen, device=device) if causal else None
    return torch.compile(flex_attention, dynamic=False), mask


def _flex_run(q, k, v, causal):
    fn, mask = _flex(causal, q.shape[1], str(q.device))
    o = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask,
           enable_gqa=k.shape[2] != q.shape[2])  # fmt: skip
    return o.transpose(1, 2)


def _fa4(q, k, v, causal):
    if _FA4_MISSING:
        raise RuntimeError(_FA4_MISSING)
    o = fa4_func(q, k, v, causal=causal)
    return o[0] if isinstance(o, tuple) else o


IMPLS = {
    "kp-cuda": lambda q, k, v, c: kp_attention.flash_attn(q, k, v, causal=c, backend="cuda"),
    "kp-triton": lambda q, k, v, c: kp_attention.flash_attn(q, k, v, causal=c, backend="triton"),
    "kp": lambda q, k, v, c: kp_attention.flash_attn(q, k, v, causal=c),  # auto: what a user gets
    "sdpa-flash": _sdpa("FLASH_ATTENTION"),
    "sdpa-cudnn": _sdpa("CUDNN_ATTENTION"),
    "sdpa-efficient": _sdpa("EFFICIENT_ATTENTION"),
    "flex-compiled": _flex_run,
    "fa4": _fa4,
}


def _forward(fn, causal):
    return bench.Impl(run=lambda q, k, v: fn(q, k, v, causal))


def _backward(fn, causal):
    """Time only autograd.grad: the forward graph is built once per input set, untimed."""
    def setup(q, k, v, do):
        return fn(q, k, v, causal), (q, k, v), do
    return bench.Impl(run=lambda o, wrt, do: torch.autograd.grad(o, wrt, do, retain_graph=True), setup=setup)


def cases(quick: bool, device: str):
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    for seqlen, head_dim, gqa in shapes(quick, device):
        batch, heads = max(1, TOKENS // seqlen) if device != "cpu" else 2, WIDTH // head_dim if device != "cpu" else 4
        kv_heads = heads // gqa
        for causal in (False, True):
            flops = 4 * batch * heads * seqlen * seqlen * head_dim // (2 if causal else 1)
            params = {"seqlen": seqlen, "head_dim": head_dim, "heads": f"{heads}:{kv_heads}", "causal": causal}
            label = f"s{seqlen} d{head_dim} h{heads}:{kv_heads}{' causal' if causal else ''}"

            def make(grad=False, seqlen=seqlen, batch=batch, heads=heads, kv_heads=kv_heads, head_dim=head_dim):
                shape_q, shape_kv = (batch, seqlen, heads, head_dim), (batch, seqlen, kv_heads, head_dim)
                q, k, v = (torch.randn(s, device=device, dtype=dtype, requires_grad=grad)
                           for s in (shape_q, shape_kv, shape_kv))  # fmt: skip
                return (q, k, v, torch.randn(shape_q, device=device, dtype=dtype)) if grad else (q, k, v)
            sweep = "seqlen"
            yield bench.Case(op=f"attention_fwd_d{head_dim}{'_gqa' if gqa > 1 else ''}", label=label, params=params,
                             make_inputs=make, flops=flops, ceiling="gemm", sweep=sweep,
                             impls={n: _forward(f, causal) for n, f in IMPLS.items()})  # fmt: skip
            yield bench.Case(op=f"attention_bwd_d{head_dim}{'_gqa' if gqa > 1 else ''}", label=label, params=params,
                             make_inputs=functools.partial(make, True), flops=int(2.5 * flops), ceiling="gemm",
                             sweep=sweep, impls={n: _backward(f, causal) for n, f in IMPLS.items()})  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="attention"))
