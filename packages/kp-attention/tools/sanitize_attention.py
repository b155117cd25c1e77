"""Run every kernel path of kp-attention's Triton level once, small, for compute-sanitizer
(tools/gpu_check.sh sanitize): batched and packed, forward and backward, causal / windows /
softcap, GQA, sequences that are not multiples of a block, empty sequences. Each call is checked
against the reference level, so a sanitizer run also fails on wrong results."""
import torch

import kp_attention


def _check(got, want, what):
    err = (got.double() - want.double()).norm() / max(want.double().norm(), 1e-30)
    assert err < 2e-2, (what, float(err))


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
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
    torch.cuda.synchronize()
    print("sanitize_attention: all paths ran")


if __name__ == "__main__":
    main()
