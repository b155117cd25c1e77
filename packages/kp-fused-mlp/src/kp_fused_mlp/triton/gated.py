"""The Triton level of gated_linear: h = act(x Wg^T + bg) * (x Wu^T + bu), forward and backward.

Forward: ONE kernel. A program owns a [BLOCK_M, BLOCK_N] tile of h and computes both the gate tile
(rows n of the packed weight) and the up tile (rows I + n) for those columns: two fp32
accumulators, two tl.dot a K step sharing one load of the x tile. The epilogue adds the biases,
applies the gated activation in fp32 and writes only h [M, I], rounded once (and, when a gradient
is needed, the pre-activations: see gated_linear_fwd).

Backward, from dh [M, I] and the saved pre-activations P = [gate_pre | up_pre] [M, 2I]:
  dP = [dh * up * act'(gate_pre) | dh * act(gate_pre)]    one elementwise kernel, fp32 math, rounded once
  dx = dP @ Wgu,  dWgu = dP^T @ x,  dbias = column sums   linear_act's tl.dot GEMM (activation none)
The GEMMs read the transposed operands through strides (triton/linear.py takes any strides).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from kp_core.registry import on_device_of

from .activations import activation_and_grad
from .linear import LaunchConfig, linear_act_fwd, size_class, swizzled_tile


@triton.jit
def _gated_linear_kernel(
    X, W, B, H, P, M, I, K,
    stride_xm, stride_xk, stride_wn, stride_wk,
    HAS_BIAS: tl.constexpr, SAVE_PRE: tl.constexpr, ACT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = swizzled_tile(M, I, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # 64-bit: M * stride may pass 2^31
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # columns of h: gate row rn, up row I + rn
    rk = tl.arange(0, BLOCK_K).to(tl.int64)
    mask_m, mask_n = rm < M, rn < I
    x_ptrs = X + rm[:, None] * stride_xm + rk[None, :] * stride_xk
    wg_ptrs = W + rn[:, None] * stride_wn + rk[None, :] * stride_wk
    wu_ptrs = wg_ptrs + I * stride_wn

    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(tl.cdiv(K, BLOCK_K)):
        mask_k = (kb * BLOCK_K + rk) < K
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # one x tile, two products
        wg = tl.load(wg_ptrs, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        wu = tl.load(wu_ptrs, mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        gate = tl.dot(x, tl.trans(wg), gate, input_precision=PRECISION)
        up = tl.dot(x, tl.trans(wu), up, input_precision=PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        wg_ptrs += BLOCK_K * stride_wk
        wu_ptrs += BLOCK_K * stride_wk

    # Epilogue, in fp32 on the accumulators; h rounded once.
    if HAS_BIAS:
        gate += tl.load(B + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        up += tl.load(B + I + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    act, _ = activation_and_grad(gate, ACT)
    mask = mask_m[:, None] & mask_n[None, :]
    tl.store(H + rm[:, None] * I + rn[None, :], (act * up).to(H.dtype.element_ty), mask=mask)
    if SAVE_PRE:  # P [M, 2I], contiguous: gate_pre | up_pre, in h's dtype
        p_ptrs = P + rm[:, None] * (2 * I) + rn[None, :]
        tl.store(p_ptrs, gate.to(P.dtype.element_ty), mask=mask)
        tl.store(p_ptrs + I, up.to(P.dtype.element_ty), mask=mask)


@triton.jit
def _gated_grad_kernel(DH, P, DP, I, stride_dh, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """One row of dP = [dh * up * act'(gate) | dh * act(gate)] from dh and P = [gate | up]."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < I
    d = tl.load(DH + row * stride_dh + c, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(P + row * 2 * I + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(P + row * 2 * I + I + c, mask=mask, other=0.0).to(tl.float32)
    act, dact = activation_and_grad(g, ACT)
    tl.store(DP + row * 2 * I + c, (d * u * dact).to(DP.dtype.element_ty), mask=mask)
    tl.store(DP + row * 2 * I + I + c, (d * act).to(DP.dtype.element_ty), mask=mask)


# Launch table of the forward kernel, by M's size class (linear_act's classes). BLOCK_N is the
# width of h's tile, so a program computes 2 * BLOCK_N GEMM columns (gate and up): the "large" row
# is the 128 x 256 tile of Triton's best Hopper bf16 GEMMs (two 128 x 128 fp32 accumulators, 128
# registers a thread over 8 warps; 3 stages of 16 + 2 x 16 KB). Chosen, not measured: the sweep
# is on the GPU (gated_linear_fwd takes a LaunchConfig). fp32 halves BLOCK_K, as linear_act does.
CONFIGS = {
    "decode": LaunchConfig(block_m=16, block_n=32, block_k=128, group_m=4, num_warps=4, num_stages=4),
    "large": LaunchConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3),
}
GRAD_BLOCK = 1024  # columns a program of the elementwise backward kernel


def gated_linear_fwd(x: torch.Tensor, w: torch.Tensor, bias, activation: str, save_pre: bool, config=None):
    """x [M, K] (any strides), w [2I, K] (gate rows, then up rows; any strides), bias [2I] or None.
    Returns (h [M, I] contiguous, P [M, 2I] contiguous or None).

    What the backward needs: act(gate_pre) and act'(gate_pre) and up_pre. Saving the
    pre-activations P (save_pre, when a gradient is needed) costs one extra [M, 2I] store in the
    forward's epilogue (~2x the bytes of h, a few % of the GEMM's time at 8192 tokens); recomputing
    them would cost a second gate/up GEMM in the backward (+1/3 of its FLOPs). The memory is what
    the unfused module keeps (gate_proj's and up_proj's outputs), so P is saved; inference
    (save_pre False) writes h alone. P is rounded to x's dtype, as those outputs are.
    """
    (m, k), inter = x.shape, w.shape[0] // 2
    h = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    pre = torch.empty((m, 2 * inter), dtype=x.dtype, device=x.device) if save_pre else None
    if m == 0 or inter == 0:
        return h, pre
    if bias is not None:
        bias = bias.contiguous()  # read at B + n and B + I + n
    cfg = config if isinstance(config, LaunchConfig) else CONFIGS[config or size_class(m)]
    fp32 = x.dtype == torch.float32
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(inter, cfg.block_n),)
    with on_device_of(x):
        _gated_linear_kernel[grid](
            x, w, bias, h, pre, m, inter, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
            HAS_BIAS=bias is not None, SAVE_PRE=save_pre, ACT=activation, PRECISION="ieee" if fp32 else "tf32",
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k // 2 if fp32 else cfg.block_k,
            GROUP_M=cfg.group_m, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    return h, pre


def gated_pre_grad(dh: torch.Tensor, pre: torch.Tensor, activation: str) -> torch.Tensor:
    """dP [M, 2I] (contiguous, P's dtype) from dh [M, I] (unit column stride) and P [M, 2I]."""
    m, inter = dh.shape
    dpre = torch.empty((m, 2 * inter), dtype=pre.dtype, device=pre.device)
    if m and inter:
        with on_device_of(pre):
            grid = (m, triton.cdiv(inter, GRAD_BLOCK))
            _gated_grad_kernel[grid](dh, pre, dpre, inter, dh.stride(0), ACT=activation, BLOCK=GRAD_BLOCK)
    return dpre


def gated_linear_bwd(dh, x, w, pre, activation: str, need_dx: bool, need_dw: bool, need_db: bool):
    """(dx [M, K], dw [2I, K], dbias [2I]), each None unless asked for; dh [M, I], x [M, K],
    w [2I, K], P [M, 2I] as gated_linear_fwd saved it."""
    dpre = gated_pre_grad(dh, pre, activation)
    # dx = dP @ W: linear_act's "weight" [N=K, K'=2I] is W^T, a strided view (no copy).
    dx = linear_act_fwd(dpre, w.t(), None, "none") if need_dx else None
    # dW = dP^T @ x: A = dP^T [2I, M] and "weight" [N=K, K'=M] = x^T, both strided views.
    dw = linear_act_fwd(dpre.t(), x.t(), None, "none") if need_dw else None
    db = dpre.sum(0, dtype=torch.float32).to(pre.dtype) if need_db else None
    return dx, dw, db
