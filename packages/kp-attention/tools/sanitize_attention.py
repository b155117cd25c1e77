"""Run every kernel path of kp-attention's Triton level and CUDA level once, small, for
compute-sanitizer (tools/gpu_check.sh sanitize): batched and packed, forward and backward (Triton),
causal / windows / softcap, GQA, sequences that are not multiples of a block, empty sequences,
rows that see no key; the CUDA forward at every head dim of its table, both dtypes; the CUDA
backward with atomic dQ (the Hopper kernel on sm_90) and deterministic, over more tiles than SMs.
Each call is
checked against the reference level, so a sanitizer run also fails on wrong results.

    python sanitize_attention.py [triton|cuda|cuda-bwd]    (default: triton and cuda; cuda-bwd: its backward only)
"""
import sys

import torch

import kp_attention


def _check(got, want, what):
    err = (got.double() - want.double()).norm() / max(want.double().norm(), 1e-30)
    assert err < 2e-2, (what, float(err))


def main(levels=("triton", "cuda")) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    if "triton" in levels:
        triton_paths(g)
    if "cuda" in levels:
        cuda_forward(g)
    if "cuda" in levels or "cuda-bwd" in levels:
        cuda_backward(g)
    torch.cuda.synchronize()
    print("sanitize_attention: all paths ran:", ", ".join(levels))


def triton_paths(g) -> None:
    """The Triton level's forward and backward, batched and packed."""
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for sq, sk, hq, hkv, d in [(77, 77, 4, 2, 64), (5, 130, 4, 1, 128), (130, 5, 2, 2, 96), (64, 64, 2, 2, 256)]:
            for opts in (dict(causal=True), dict(window=(7, 3)), dict(causal=True, window=(20, 0), softcap=5.0)):
                q = torch.randn(2, sq, hq, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                k = torch.randn(2, sk, hkv, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                v = torch.randn(2, sk, hkv, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                out = kp_attention.flash_attn(q, k, v, backend="triton", **opts)
                _check(out, kp_attention.flash_attn(q, k, v, backend="reference", **opts), (dtype, sq, sk, opts))
                out.float().sum().backward()
        cu_q = torch.tensor([0, 33, 33, 90], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 40, 49, 49], dtype=torch.int32, device="cuda")
        q = torch.randn(90, 4, 64, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        k = torch.randn(49, 2, 64, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        v = torch.randn(49, 2, 64, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        out = kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, 57, 40, causal=True, backend="triton")
        want = kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, 57, 40, causal=True, backend="reference")
        _check(out, want, (dtype, "varlen"))
        out.float().sum().backward()


def cuda_forward(g) -> None:
    """The CUDA level's forward (csrc/fwd*.cu): both kernels (softcap off / on) of every head dim and
    dtype, masked and mask-free key blocks, tails of both lengths, packed sequences with an empty one."""
    cases = [(77, 130, dict(causal=True)), (130, 77, dict(causal=True)), (200, 200, dict(window=(50, 7))),
             (1, 70, dict(softcap=5.0)), (65, 33, dict(causal=True, window=(20, 0), softcap=5.0))]  # fmt: skip
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 96, 128, 192, 256):
            for sq, sk, opts in cases:
                q = torch.randn(2, sq, 4, d, device="cuda", dtype=dtype, generator=g)
                k = torch.randn(2, sk, 2, d, device="cuda", dtype=dtype, generator=g)
                v = torch.randn(2, sk, 2, d, device="cuda", dtype=dtype, generator=g)
                out = kp_attention.flash_attn(q, k, v, backend="cuda", **opts)
                want = kp_attention.flash_attn(q, k, v, backend="reference", **opts)
                _check(out, want, ("cuda", dtype, d, sq, sk, opts))
        cu_q = torch.tensor([0, 33, 33, 90, 99], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 40, 49, 49, 150], dtype=torch.int32, device="cuda")
        q = torch.randn(99, 4, 128, device="cuda", dtype=dtype, generator=g)
        k = torch.randn(150, 2, 128, device="cuda", dtype=dtype, generator=g)
        v = torch.randn(150, 2, 128, device="cuda", dtype=dtype, generator=g)
        out = kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, 57, 101, causal=True, backend="cuda")
        want = kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, 57, 101, causal=True, backend="reference")
        _check(out, want, ("cuda", dtype, "varlen"))


def cuda_backward(g) -> None:
    """The CUDA level's backward: atomic dQ (csrc/hopper_bwd* at head dims 64 / 128 on sm_90, the
    sm80-class kernels elsewhere) and deterministic (sm80-class dq kernel), GQA (with the Hopper
    kernel's group split), masks, softcap, packed sequences; 300 one-step tiles, more than any
    Hopper GPU's SMs."""
    cases = [(2, 77, 130, 4, 1, dict(causal=True)), (2, 200, 200, 4, 2, dict(window=(50, 7))),
             (2, 65, 33, 4, 2, dict(causal=True, window=(20, 0), softcap=5.0)), (1, 64, 128, 300, 300, {})]  # fmt: skip
    dtype = torch.bfloat16
    for d in (64, 128, 96):
        for deterministic in (False, True):
            for b, sq, sk, hq, hkv, opts in cases:
                q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
                do = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g)
                _check_grads(lambda **kw: kp_attention.flash_attn(q, k, v, **opts, **kw), (q, k, v), do, deterministic,
                             ("cuda bwd", d, deterministic, b, sq, sk, hq, opts))  # fmt: skip
    cu_q = torch.tensor([0, 33, 33, 90, 99], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 40, 49, 49, 300], dtype=torch.int32, device="cuda")
    for d in (64, 128):
        q = torch.randn(99, 4, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        k = torch.randn(300, 2, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        v = torch.randn(300, 2, d, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        do = torch.randn(99, 4, d, device="cuda", dtype=dtype, generator=g)
        _check_grads(lambda **kw: kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, 57, 251, causal=True, **kw),
                     (q, k, v), do, False, ("cuda bwd varlen", d))  # fmt: skip


def _check_grads(call, inputs, do, deterministic, what):
    got = torch.autograd.grad(call(backend="cuda", deterministic=deterministic), inputs, do)
    want = torch.autograd.grad(call(backend="reference"), inputs, do)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        _check(a, b, (*what, name))


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or ("triton", "cuda"))
