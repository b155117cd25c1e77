"""The Triton level of linear_act: y = act(x @ weight^T + bias), forward only.

One tiled matmul (the Triton tutorial's: programs swizzled by GROUP_M, tl.dot into fp32
accumulators, masked M/N/K tails so any shape works, 64-bit offsets), then the bias and the
activation on the fp32 accumulators in the epilogue, rounded once to x's dtype on store.
fp32 inputs use IEEE fp32 products (no TF32), so they match float64 within fp32's bound.

Launch configs are a table keyed by M's size class, not autotuned per shape (see CONFIGS).
Calls that need gradients never reach this module: `kp_fused_mlp.linear` refuses them here.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from kp_core.registry import on_device_of

from .activations import apply_activation


@triton.jit
def swizzled_tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's (row block, column block) on a 1-D grid. Swizzled: GROUP_M row blocks run
    one after another on each column block, so the weight tile they share is read from HBM once
    and from L2 by the rest. (kp_fused_mlp.triton.gated's kernel uses it too.)"""
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(M, BLOCK_M)
    blocks_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(blocks_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


@triton.jit
def _linear_act_kernel(
    X, W, B, Y, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = swizzled_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # 64-bit: M * stride may pass 2^31
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K).to(tl.int64)
    mask_m, mask_n = rm < M, rn < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        k = kb * BLOCK_K + rk
        mask_k = k < K
        x = tl.load(X + rm[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
        w = tl.load(W + rn[:, None] * stride_wn + k[None, :] * stride_wk,
                    mask=mask_n[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
        acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)

    # Epilogue, in fp32 on the accumulators; the reference's formulas.
    if HAS_BIAS:
        acc += tl.load(B + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    acc = apply_activation(acc, ACT)
    tl.store(Y + rm[:, None] * stride_ym + rn[None, :], acc.to(Y.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])  # fmt: skip


class LaunchConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int  # for 16-bit inputs; fp32 halves it, keeping the bytes a pipeline stage holds
    group_m: int
    num_warps: int
    num_stages: int


# Chosen for an H100/H200 (132 SMs, 228 KB shared memory an SM), not measured yet.
CONFIGS = {
    # M <= 64 (decode, small batches): the weight read is the whole cost. A 16-row tile wastes no
    # MMA work on rows that are not there; 32 columns a program give N/32 programs (128 for
    # N = 4096), about one an SM; 128-wide K slices read 256 contiguous bytes of each weight row;
    # 4 stages (12 KB each) keep several HBM reads in flight. GROUP_M 4 covers M = 64 in one group.
    "decode": LaunchConfig(block_m=16, block_n=32, block_k=128, group_m=4, num_warps=4, num_stages=4),
    # M > 64: compute bound. A 128 x 128 tile over 8 warps (two warpgroups, Hopper's wgmma unit)
    # reuses each loaded element 128 times; 3 stages of 32 KB fit shared memory
    # twice over; GROUP_M 8 as in Triton's tutorial.
    "large": LaunchConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3),
}


def size_class(m: int) -> str:
    return "decode" if m <= 64 else "large"


def linear_act_fwd(x: torch.Tensor, weight: torch.Tensor, bias, activation: str, config=None) -> torch.Tensor:
    """x [M, K] (any strides), weight [N, K] (any strides), bias [N] (any stride) or None, one
    dtype. Returns y [M, N], contiguous. `config` forces a CONFIGS row (its name, or a
    LaunchConfig: tests, sweeps)."""
    (m, k), n = x.shape, weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    if bias is not None:
        bias = bias.contiguous()  # the kernel reads bias[n] at B + n (a strided view, bias[::2], would not)
    cfg = config if isinstance(config, LaunchConfig) else CONFIGS[config or size_class(m)]
    fp32 = x.dtype == torch.float32
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    with on_device_of(x):
        _linear_act_kernel[grid](
            x, weight, bias, y, m, n, k,
            x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0),
            HAS_BIAS=bias is not None, ACT=activation, PRECISION="ieee" if fp32 else "tf32",
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k // 2 if fp32 else cfg.block_k,
            GROUP_M=cfg.group_m, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    return y
