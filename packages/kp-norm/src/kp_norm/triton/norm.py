"""Triton kernels of kp-norm: RMSNorm / LayerNorm with an optional fused residual add.

Semantics are those of the native ``_C`` module (``docs/architecture.md``, "kp-norm `_C`"): fp32
math, the residual sum rounded to the residual dtype *before* it is normalized, ``w_eff = w +
weight_offset``, biased LayerNorm variance, one rounding of the output.

Forward:

* fused (``next_power_of_2(N) <= FWD_MAX_BLOCK_N``): each program owns a ``[BLOCK_M, BLOCK_N]``
  tile, several rows at once when rows are short; x is read once.
* looped (longer rows): CHUNK-wide pieces, statistics first (LayerNorm: Chan's chunk combine),
  then a second pass that normalizes and writes; x is read twice.

Backward (every program writes one row of fp32 dw/db partials summed over a fixed set of rows;
``_column_sum_kernel`` reduces them in a fixed order: deterministic, no atomics):

* fused: persistent programs over ``[BLOCK_M, BLOCK_N]`` row tiles, dw/db kept in registers.
* split (long rows): one kernel computes each row's two reductions, then dx is elementwise and a
  second kernel splits the columns too, so its dw/db accumulators stay small.

Launch configs are pure functions of N (backward: and RMS vs LayerNorm), cached, measured on H200
(bf16, 256 MiB inputs); nothing is autotuned at call time. The kernels use no inline asm or
device intrinsics, so they also run under ``TRITON_INTERPRET=1`` on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kp_core.registry import on_device_of

# Longest row (as a power of two) that the forward keeps in registers; longer rows take the
# looped kernel, CHUNK elements at a time.
FWD_MAX_BLOCK_N = 32768
FWD_LOOP_CHUNK = 8192
# The backward holds more live values per element (dy, x, g, and the dw/db accumulators), so it
# switches to the split kernels earlier; RMSNorm (no db) stays fused one size longer.
BWD_MAX_BLOCK_N = {True: 16384, False: 8192}  # keyed by is_rms
# Fused kernels: short rows are batched so each program holds about this many elements.
FWD_TILE_ELEMS = 2048
BWD_TILE_ELEMS = 8192
# Split backward: the row-reduction kernel's chunk, and the [BLOCK_M, BLOCK_N] tiles of the
# column-split dx/dw kernel (about PROGS_PER_SM programs per SM in all).
SPLIT_DOTS_CHUNK = 4096
SPLIT_DOTS_WARPS = 8
SPLIT_BLOCK_M = 4
SPLIT_BLOCK_N = 1024
SPLIT_WARPS = 4
SPLIT_PROGS_PER_SM = 4
# Column sum of the dw/db partials: tile shape of one step.
COLSUM_BLOCK_G = 32
COLSUM_BLOCK_N = 64


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@triton.jit
def _norm_fwd_kernel(
    X, RES, W, B, Y, RES_OUT, MEAN, RSTD,
    M, N, stride_x, stride_res, eps, weight_offset,
    IS_RMS: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    SAVE_STATS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    rows = rows.to(tl.int64)  # 64-bit offsets: M * N may exceed 2**31

    h = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        h += tl.load(RES + rows[:, None] * stride_res + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        # The stored (rounded) sum is what gets normalized, as in unfused torch code.
        h_rounded = h.to(RES_OUT.dtype.element_ty)
        tl.store(RES_OUT + rows[:, None] * N + cols[None, :], h_rounded, mask=mask)
        h = h_rounded.to(tl.float32)

    if IS_RMS:
        rstd = tl.rsqrt(tl.sum(h * h, axis=1) / N + eps)
        y = h * rstd[:, None]
    else:
        mean = tl.sum(h, axis=1) / N
        centered = tl.where(mask, h - mean[:, None], 0.0)  # padding must not enter the variance
        rstd = tl.rsqrt(tl.sum(centered * centered, axis=1) / N + eps)
        y = centered * rstd[:, None]
        if SAVE_STATS:
            tl.store(MEAN + rows, mean, mask=row_mask)
    if SAVE_STATS:
        tl.store(RSTD + rows, rstd, mask=row_mask)

    if HAS_W:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
        y = y * w[None, :]
    if HAS_B:
        y += tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _norm_fwd_looped_kernel(
    X, RES, W, B, Y, RES_OUT, MEAN, RSTD,
    N, stride_x, stride_res, eps, weight_offset,
    IS_RMS: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    SAVE_STATS: tl.constexpr, CHUNK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)

    # Pass 1: statistics (and the residual sum, stored once so pass 2 reads one tensor, not two).
    if IS_RMS:
        sum_sq = tl.zeros([CHUNK], dtype=tl.float32)  # per-lane partials, one reduction at the end
    else:
        # Chan et al.: combine each chunk's (count, mean, M2) into the running one; unlike
        # sum / sum-of-squares it does not cancel catastrophically when |mean| >> std. It runs on
        # h - shift, shift = h[0], so the running mean stays small and rounds finely: the final
        # mean is then rounded once, as precise as the in-register two-pass kernel.
        shift = tl.load(X + row * stride_x).to(tl.float32)
        if HAS_RES:
            shift += tl.load(RES + row * stride_res).to(tl.float32)
            shift = shift.to(RES_OUT.dtype.element_ty).to(tl.float32)
        count = tl.zeros([], dtype=tl.float32)
        shifted_mean = tl.zeros([], dtype=tl.float32)
        m2 = tl.zeros([], dtype=tl.float32)
    for start in range(0, N, CHUNK):
        offs = start + cols
        mask = offs < N
        h = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            h += tl.load(RES + row * stride_res + offs, mask=mask, other=0.0).to(tl.float32)
            h_rounded = h.to(RES_OUT.dtype.element_ty)
            tl.store(RES_OUT + row * N + offs, h_rounded, mask=mask)
            h = h_rounded.to(tl.float32)
        if IS_RMS:
            sum_sq += h * h
        else:
            h = tl.where(mask, h - shift, 0.0)
            chunk_count = tl.minimum(N - start, CHUNK).to(tl.float32)
            chunk_mean = tl.sum(h, axis=0) / chunk_count
            chunk_dev = tl.where(mask, h - chunk_mean, 0.0)
            chunk_m2 = tl.sum(chunk_dev * chunk_dev, axis=0)
            new_count = count + chunk_count
            delta = chunk_mean - shifted_mean
            shifted_mean += delta * (chunk_count / new_count)
            m2 += chunk_m2 + delta * delta * (count * chunk_count / new_count)
            count = new_count
    if IS_RMS:
        rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)
    else:
        rstd = tl.rsqrt(m2 / N + eps)
        if SAVE_STATS:
            tl.store(MEAN + row, shift + shifted_mean)
    if SAVE_STATS:
        tl.store(RSTD + row, rstd)

    if HAS_RES:
        # Pass 2 reads back RES_OUT written above by other threads of this program.
        tl.debug_barrier()
    # Pass 2: normalize and write.
    for start in range(0, N, CHUNK):
        offs = start + cols
        mask = offs < N
        if HAS_RES:
            h = tl.load(RES_OUT + row * N + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            h = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        if IS_RMS:
            y = h * rstd
        else:
            y = ((h - shift) - shifted_mean) * rstd
        if HAS_W:
            y = y * (tl.load(W + offs, mask=mask, other=0.0).to(tl.float32) + weight_offset)
        if HAS_B:
            y += tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * N + offs, y.to(Y.dtype.element_ty), mask=mask)


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
@triton.jit
def _dx_and_weight_grads(g, xhat, dy, rstd, mean_g_xhat, mean_g, rows, cols, mask, N, DRES, stride_dres, DX,
                         dw_acc, db_acc, IS_RMS: tl.constexpr, HAS_DRES: tl.constexpr, HAS_DW: tl.constexpr,
                         HAS_DB: tl.constexpr):
    # The tail both backward kernels share, once a tile's row means are known: dx (+ dres), stored
    # rounded once, and this tile's dw/db added to the program's accumulators.
    if IS_RMS:
        dx = (g - xhat * mean_g_xhat[:, None]) * rstd[:, None]
    else:
        dx = (g - mean_g[:, None] - xhat * mean_g_xhat[:, None]) * rstd[:, None]
    if HAS_DRES:
        dx += tl.load(DRES + rows[:, None] * stride_dres + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    if HAS_DW:
        dw_acc += tl.sum(dy * xhat, axis=0)
    if HAS_DB:
        db_acc += tl.sum(dy, axis=0)
    return dw_acc, db_acc


@triton.jit
def _load_bwd_tile(DY, X, MEAN, RSTD, M, tile, cols, col_mask, stride_dy, stride_x,
                   IS_RMS: tl.constexpr, BLOCK_M: tl.constexpr):
    # Rows tile*BLOCK_M ... of dy and xhat (fp32, 0 outside the tile), with the masks and rstd.
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    mask = row_mask[:, None] & col_mask[None, :]
    rows = rows.to(tl.int64)
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
    if IS_RMS:
        xhat = x * rstd[:, None]
    else:
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    return rows, row_mask, mask, dy, rstd, xhat


@triton.jit
def _store_partials(DW_PART, DB_PART, pid, N, cols, col_mask, dw_acc, db_acc,
                    HAS_DW: tl.constexpr, HAS_DB: tl.constexpr):
    # Partial row `pid` of dw/db: the sums over this program's fixed set of rows.
    if HAS_DW:
        tl.store(DW_PART + pid.to(tl.int64) * N + cols, dw_acc, mask=col_mask)
    if HAS_DB:
        tl.store(DB_PART + pid.to(tl.int64) * N + cols, db_acc, mask=col_mask)


@triton.jit
def _norm_bwd_kernel(
    DY, X, DRES, W, MEAN, RSTD, DX, DW_PART, DB_PART,
    M, N, stride_dy, stride_x, stride_dres, weight_offset,
    IS_RMS: tl.constexpr, HAS_DRES: tl.constexpr, HAS_W: tl.constexpr,
    HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    W_IN_REGS: tl.constexpr,
):
    # Persistent: program p takes tiles p, p + P, p + 2P, ... and keeps its dw/db in registers,
    # so the partial it writes is a sum over a fixed set of rows (deterministic).
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_W and W_IN_REGS:
        w_regs = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
    dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)

    for tile in range(pid, tl.cdiv(M, BLOCK_M), num_progs):
        rows, row_mask, mask, dy, rstd, xhat = _load_bwd_tile(
            DY, X, MEAN, RSTD, M, tile, cols, col_mask, stride_dy, stride_x, IS_RMS, BLOCK_M)
        if HAS_W:
            if W_IN_REGS:
                w = w_regs
            else:  # long rows: registers are short, reload w (an L1/L2 hit) per tile
                w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
            g = dy * w[None, :]
        else:
            g = dy
        mean_g_xhat = tl.sum(g * xhat, axis=1) / N
        mean_g = mean_g_xhat if IS_RMS else tl.sum(g, axis=1) / N  # RMS: unused
        dw_acc, db_acc = _dx_and_weight_grads(
            g, xhat, dy, rstd, mean_g_xhat, mean_g, rows, cols, mask, N, DRES, stride_dres, DX,
            dw_acc, db_acc, IS_RMS, HAS_DRES, HAS_DW, HAS_DB)

    _store_partials(DW_PART, DB_PART, pid, N, cols, col_mask, dw_acc, db_acc, HAS_DW, HAS_DB)


@triton.jit
def _norm_bwd_row_dots_kernel(
    DY, X, W, MEAN, RSTD, DOTS, N, stride_dy, stride_x, weight_offset,
    IS_RMS: tl.constexpr, HAS_W: tl.constexpr, CHUNK: tl.constexpr,
):
    # Long rows, step 1: the two row reductions of dx, mean_j(g * xhat) and mean_j(g), per row.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    rstd = tl.load(RSTD + row)
    if IS_RMS:
        mean = 0.0
    else:
        mean = tl.load(MEAN + row)
    sum_g_xhat = tl.zeros([CHUNK], dtype=tl.float32)
    sum_g = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, N, CHUNK):
        offs = start + cols
        mask = offs < N
        g = tl.load(DY + row * stride_dy + offs, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * (tl.load(W + offs, mask=mask, other=0.0).to(tl.float32) + weight_offset)
        sum_g_xhat += g * tl.where(mask, (x - mean) * rstd, 0.0)
        if not IS_RMS:
            sum_g += g
    tl.store(DOTS + 2 * row, tl.sum(sum_g_xhat, axis=0) / N)
    if not IS_RMS:
        tl.store(DOTS + 2 * row + 1, tl.sum(sum_g, axis=0) / N)


@triton.jit
def _norm_bwd_split_kernel(
    DY, X, DRES, W, MEAN, RSTD, DOTS, DX, DW_PART, DB_PART,
    M, N, stride_dy, stride_x, stride_dres, weight_offset,
    IS_RMS: tl.constexpr, HAS_DRES: tl.constexpr, HAS_W: tl.constexpr,
    HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Long rows, step 2: with the row reductions known, dx is elementwise, so programs split the
    # columns too. Program (c, p) owns column block c of row tiles p, p + P, ...: its dw/db stay
    # in registers and its partial row p is a sum over a fixed set of rows (deterministic).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    pid = tl.program_id(1)
    num_progs = tl.num_programs(1)
    if HAS_W:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32) + weight_offset
    dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for tile in range(pid, tl.cdiv(M, BLOCK_M), num_progs):
        rows, row_mask, mask, dy, rstd, xhat = _load_bwd_tile(
            DY, X, MEAN, RSTD, M, tile, cols, col_mask, stride_dy, stride_x, IS_RMS, BLOCK_M)
        mean_g_xhat = tl.load(DOTS + 2 * rows, mask=row_mask, other=0.0)
        if HAS_W:
            g = dy * w[None, :]
        else:
            g = dy
        if IS_RMS:
            mean_g = mean_g_xhat  # unused
        else:
            mean_g = tl.load(DOTS + 2 * rows + 1, mask=row_mask, other=0.0)
        dw_acc, db_acc = _dx_and_weight_grads(
            g, xhat, dy, rstd, mean_g_xhat, mean_g, rows, cols, mask, N, DRES, stride_dres, DX,
            dw_acc, db_acc, IS_RMS, HAS_DRES, HAS_DW, HAS_DB)
    _store_partials(DW_PART, DB_PART, pid, N, cols, col_mask, dw_acc, db_acc, HAS_DW, HAS_DB)


@triton.jit
def _column_sum_kernel(
    DW_PART, DB_PART, DW, DB, num_parts, N,
    HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Sum [num_parts, N] fp32 partials over rows in a fixed order, cast to the weight dtype.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    dw_acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    for start in range(0, num_parts, BLOCK_G):
        parts = start + tl.arange(0, BLOCK_G)
        mask = (parts < num_parts)[:, None] & col_mask[None, :]
        offs = parts.to(tl.int64)[:, None] * N + cols[None, :]
        if HAS_DW:
            dw_acc += tl.load(DW_PART + offs, mask=mask, other=0.0)
        if HAS_DB:
            db_acc += tl.load(DB_PART + offs, mask=mask, other=0.0)
    if HAS_DW:
        tl.store(DW + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_mask)
    if HAS_DB:
        tl.store(DB + cols, tl.sum(db_acc, axis=0).to(DB.dtype.element_ty), mask=col_mask)


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------
def _fwd_warps(block_m: int, block_n: int) -> int:
    # Measured on H200 (bf16): 4 warps for tiles up to 2048 elements or batched short rows, then
    # about 16-32 fp32 values per thread; more warps lose (lower occupancy per row in flight).
    if block_m > 1 or block_n <= 2048:
        return 4
    return {4096: 8, 8192: 8, 16384: 16}.get(block_n, 32)


_FWD_CONFIGS: dict = {}
_BWD_CONFIGS: dict = {}
_SM_COUNTS: dict = {}


def _fwd_config(N: int):
    """(looped, BLOCK_M or CHUNK, BLOCK_N, num_warps) for rows of N elements."""
    cfg = _FWD_CONFIGS.get(N)
    if cfg is None:
        block_n = triton.next_power_of_2(N)
        if block_n > FWD_MAX_BLOCK_N:
            cfg = (True, FWD_LOOP_CHUNK, FWD_LOOP_CHUNK, 8)
        else:
            block_m = max(1, FWD_TILE_ELEMS // block_n)
            cfg = (False, block_m, block_n, _fwd_warps(block_m, block_n))
        _FWD_CONFIGS[N] = cfg
    return cfg


def _bwd_config(N: int, is_rms: bool):
    """(split, BLOCK_M, BLOCK_N, num_warps, programs per SM, w kept in registers)."""
    key = (N, is_rms)
    cfg = _BWD_CONFIGS.get(key)
    if cfg is None:
        block_n = triton.next_power_of_2(N)
        if block_n > BWD_MAX_BLOCK_N[is_rms]:
            cfg = (True, SPLIT_BLOCK_M, SPLIT_BLOCK_N, SPLIT_WARPS, SPLIT_PROGS_PER_SM, True)
        elif block_n <= 4096:
            # Measured on H200 (bf16): 4 warps, 2 programs per SM; more programs mean more
            # partials to reduce, fewer leave HBM idle.
            cfg = (False, max(1, BWD_TILE_ELEMS // block_n), block_n, 4, 2, True)
        else:
            # One row per tile; at 16384 w is reloaded per row (an L1/L2 hit) to free registers.
            cfg = (False, 1, block_n, 16 if block_n <= 8192 else 8, 1, block_n <= 8192)
        _BWD_CONFIGS[key] = cfg
    return cfg


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # interpreter: a few programs, so the partials path is still exercised
    n = _SM_COUNTS.get(device.index)
    if n is None:
        n = _SM_COUNTS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return n


def _rows(t: torch.Tensor | None):
    """(tensor, row stride) with a contiguous last dimension; copies only if it is not."""
    if t is None:
        return None, 0
    if t.stride(1) != 1 and t.shape[1] > 1:
        t = t.contiguous()
    return t, t.stride(0)


def norm_fwd(x, residual, weight, bias, eps: float, is_rms: bool, weight_offset: float,
             residual_dtype: torch.dtype | None, save_stats: bool):
    """Returns (y, residual_out, mean, rstd); see the module docstring for the semantics.

    x: [M, N] f32/f16/bf16, last dim contiguous, any row stride. residual: [M, N] or None.
    weight, bias: [N] contiguous or None. y, residual_out: contiguous. mean (LayerNorm only) and
    rstd: fp32 [M], or None when not save_stats.
    """
    M, N = x.shape
    device = x.device
    y = torch.empty((M, N), dtype=x.dtype, device=device)
    residual_out = None
    if residual is not None:
        residual_out = torch.empty((M, N), dtype=residual_dtype or residual.dtype, device=device)
    mean = torch.empty((M,), dtype=torch.float32, device=device) if save_stats and not is_rms else None
    rstd = torch.empty((M,), dtype=torch.float32, device=device) if save_stats else None
    if M == 0 or N == 0:
        return y, residual_out, mean, rstd

    x, stride_x = _rows(x)
    residual, stride_res = _rows(residual)
    looped, block, block_n, num_warps = _fwd_config(N)
    flags = dict(IS_RMS=is_rms, HAS_RES=residual is not None, HAS_W=weight is not None,
                 HAS_B=bias is not None, SAVE_STATS=save_stats, num_warps=num_warps)
    with on_device_of(x):
        if looped:
            _norm_fwd_looped_kernel[(M,)](
                x, residual, weight, bias, y, residual_out, mean, rstd,
                N, stride_x, stride_res, eps, weight_offset, CHUNK=block, **flags)
        else:
            _norm_fwd_kernel[(triton.cdiv(M, block),)](
                x, residual, weight, bias, y, residual_out, mean, rstd,
                M, N, stride_x, stride_res, eps, weight_offset,
                BLOCK_M=block, BLOCK_N=block_n, **flags)
    return y, residual_out, mean, rstd


def norm_bwd(dy, x, dres, weight, mean, rstd, is_rms: bool, weight_offset: float,
             need_dw: bool, need_db: bool):
    """Returns (dx, dw, db).

    dy: [M, N]; x: [M, N] the tensor that was normalized; dres: gradient of residual_out or None.
    dx is contiguous of x.dtype (dres added); dw/db are [N] of weight.dtype (activation dtype when
    there is no weight), or None when not needed. Deterministic: fixed per-program row sets,
    fixed-order column sum.
    """
    M, N = x.shape
    device = x.device
    dx = torch.empty((M, N), dtype=x.dtype, device=device)
    grad_dtype = weight.dtype if weight is not None else dy.dtype
    need_dw = need_dw and weight is not None
    if M == 0 or N == 0:
        dw = torch.zeros((N,), dtype=grad_dtype, device=device) if need_dw else None
        db = torch.zeros((N,), dtype=grad_dtype, device=device) if need_db else None
        return dx, dw, db

    dy, stride_dy = _rows(dy)
    x, stride_x = _rows(x)
    dres, stride_dres = _rows(dres)
    split, block_m, block_n, num_warps, progs_per_sm, w_in_regs = _bwd_config(N, is_rms)
    # Programs along the rows: each writes one partial row of dw/db.
    num_col_blocks = triton.cdiv(N, block_n) if split else 1
    num_progs = min(triton.cdiv(M, block_m),
                    max(1, _num_sms(device) * progs_per_sm // num_col_blocks), 65535)
    dw_part = torch.empty((num_progs, N), dtype=torch.float32, device=device) if need_dw else None
    db_part = torch.empty((num_progs, N), dtype=torch.float32, device=device) if need_db else None
    dw = torch.empty((N,), dtype=grad_dtype, device=device) if need_dw else None
    db = torch.empty((N,), dtype=grad_dtype, device=device) if need_db else None

    flags = dict(IS_RMS=is_rms, HAS_DRES=dres is not None, HAS_W=weight is not None,
                 HAS_DW=need_dw, HAS_DB=need_db, BLOCK_M=block_m, BLOCK_N=block_n,
                 num_warps=num_warps)
    with on_device_of(x):
        if split:
            row_dots = torch.empty((M, 2), dtype=torch.float32, device=device)
            _norm_bwd_row_dots_kernel[(M,)](
                dy, x, weight, mean, rstd, row_dots, N, stride_dy, stride_x, weight_offset,
                IS_RMS=is_rms, HAS_W=weight is not None, CHUNK=SPLIT_DOTS_CHUNK,
                num_warps=SPLIT_DOTS_WARPS)
            _norm_bwd_split_kernel[(num_col_blocks, num_progs)](
                dy, x, dres, weight, mean, rstd, row_dots, dx, dw_part, db_part,
                M, N, stride_dy, stride_x, stride_dres, weight_offset, **flags)
        else:
            _norm_bwd_kernel[(num_progs,)](
                dy, x, dres, weight, mean, rstd, dx, dw_part, db_part,
                M, N, stride_dy, stride_x, stride_dres, weight_offset, W_IN_REGS=w_in_regs, **flags)
        if need_dw or need_db:
            _column_sum_kernel[(triton.cdiv(N, COLSUM_BLOCK_N),)](
                dw_part, db_part, dw, db, num_progs, N, HAS_DW=need_dw, HAS_DB=need_db,
                BLOCK_G=COLSUM_BLOCK_G, BLOCK_N=COLSUM_BLOCK_N, num_warps=4)
    return dx, dw, db
