"""The Triton level of exact attention, FlashAttention-2 style; the math is kp_attention.reference's.

Forward: one program per (block of query rows, batch x query head) streams the key blocks the rows
may see, keeping the running max and sum of an online softmax in exp2 form, all in fp32, and rounds
the output once. It also writes lse (natural log, fp32) for the backward.

Backward, deterministic (no atomics):
  1. delta[b, h, i] = sum_d do * out and lse2 = lse * log2(e) (0 for -inf)  (fp32, a row block a program)
  2. one program per (key block, batch x kv head) loops over the query heads of its GQA group and
     over the query rows that may see the block, accumulating dk and dv in registers;
  3. one program per (query block, batch x query head) loops over the key blocks for dq.
  (2 and 3 run as one launch where DKDV_BLOCKS's row says fused: _bwd_fused_kernel.)
With p = exp(s - lse) recomputed: dv = p^T do, dp = do v^T, ds = p (dp - delta) (the gradient of
the softcapped score s), and with t = tanh(scale * qk / softcap), s = softcap * t:
    d s / d qk = scale * (1 - t^2)   (scale without softcap),   dq = dqk k,   dk = dqk^T q,
the constant scale applied once to the finished dq and dk.

Which keys row i sees (d = diagonal): causal j <= i + d; left >= 0: j >= i + d - left; right >= 0:
j <= i + d + right. A row that sees none gives out = 0, lse = -inf and no gradient: every exp() is
taken against a finite shift, so no -inf - -inf (NaN) is ever formed.

Masks only where needed: each program splits its loop over key tiles (forward, dq) or query-row
tiles (dk/dv) into a leading and a trailing range of tiles that cross a causal / window / sequence
edge, which evaluate _visible and tl.where, and the middle range of tiles that every row of the
program sees whole, which skip both (_key_tiles, _query_tiles; the loop bodies _fwd_tiles,
_dkdv_tiles and _dq_tiles are compiled once with MASK on and once with it off). Without softcap the
scores are taken in log2 units by one multiply, qk * (scale * log2(e)).

Offsets are 64-bit (batch, head and row indices are widened before they meet a stride). The head
dim is padded to a power of two >= 16 with masked loads and stores; it is a compile-time constant,
so at head dims that are powers of two the mask folds away (a runtime head_dim made every q/k/v
load a scalar 16-bit load, outside cp.async's pipeline: SASS, sm_90).

Packed sequences (attention_varlen_fwd / _bwd) run the same kernels with VARLEN on: a program reads
its sequence's first rows and lengths from cu_seqlens (_sequence), returns at once when its block
lies past the sequence's end (the grid covers max_seqlen), and uses the sequence's own bottom-right
diagonal len_k - len_q; lse and delta are [Hq, total_q].
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from kp_core.registry import on_device_of

class Blocks(NamedTuple):
    """A launch configuration: BLOCK_M query rows and BLOCK_N keys a tile, with Triton's warps and
    software-pipeline stages. fused (DKDV_BLOCKS only): the dq programs (DQ_BLOCKS's tiles) ride in
    the dk/dv launch, one kernel at this row's warps and stages (_bwd_fused_kernel)."""
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    fused: bool = False


# Launch configurations by padded head dim, for the forward and for the backward (dk/dv kernel:
# BLOCK_N keys a program, BLOCK_M query rows a step; dq kernel the other way round).
# Forward, H100 (2026-11-28, tools/tune_attention.py, bf16, 16K tokens, seqlen 4096), TFLOP/s
# non-causal / causal, against compiled FlexAttention's 477 / 355 (d128) and 404 / 348 (d64):
#   d128: 128 x 128, 8 warps, 3 stages 446 / 396; 128 x 64 x 8 x 3 433 / 383; 64 x 64 x 4 x 3 416 / 399
#   d64:  128 x 64, 8 warps, 3 stages 426 / 378; 64 x 64 x 4 x 3 399 / 362
# 4 stages of 128-key tiles at d128 need 272-288 KB of smem (227 KB a block). d16/d32 take d64's row
# and d256 (head dims 192 and 256) its first guess: not measured yet.
# Backward: 64 x 64, 4 warps, 2 stages for both kernels was the best of 18 shared configurations
# (d64 and d128) in a first sweep: 343 TFLOP/s at d128 non-causal against Flex's 400 (x0.86).
FWD_BLOCKS = {
    16: Blocks(128, 64, 8, 3),
    32: Blocks(128, 64, 8, 3),
    64: Blocks(128, 64, 8, 3),
    128: Blocks(128, 128, 8, 3),
    256: Blocks(64, 32),
}
# The backward's two kernels, each its own table: dk/dv (BLOCK_N keys a program, BLOCK_M query rows
# a step) and dq (BLOCK_M query rows a program, BLOCK_N keys a step); the delta kernel takes dq's
# BLOCK_M. H200, 2026-11-28 (.ab/scripts/tri_bwd_sweep.py, bf16 d128, 16K tokens, whole backward,
# x compiled Flex at s1024 / 4096 / 16384, causal the same, GQA 16:2 at 4096), after the loops lost
# their per-tile scale and lse conversion:
#   dk/dv 64 x 64 x 4 x 2, dq 128 x 64 x 8 x 3   x1.03 / 0.97 / 0.97, causal x1.22 / 1.05 / 1.05, GQA x1.07
#   both 64 x 64 x 4 x 2                         x1.02 / 0.96 / 0.95, causal x1.24 / 1.03 / 1.04, GQA x1.05
#   Flex's tiles (dk/dv 64 x 128 x 8 x 3, fused)  x1.04 / 1.00 / 0.97, causal x1.15 / 1.04 / 1.01, GQA x0.91
#   Flex's tiles, two launches                   x0.98 / 0.96 / 0.95, causal x1.10 / 1.00 / 1.00, GQA x1.01
# (FlexAttention's own sm_90 d128 row: torch/_inductor template_heuristics FlexBwDConfig(64, 128,
# 128, 64, 3 stages, 8 warps), one launch.)
DKDV_BLOCKS = {16: Blocks(64, 64), 32: Blocks(64, 64), 64: Blocks(64, 64), 128: Blocks(64, 64), 256: Blocks(32, 32)}
DQ_BLOCKS = {16: Blocks(64, 64), 32: Blocks(64, 64), 64: Blocks(64, 64), 128: Blocks(128, 64, 8, 3), 256: Blocks(32, 32)}

# fp32 inputs: the tiles hold 4-byte elements, twice the smem of the 16-bit rows above (the
# forward's 128 x 128 x 3 stages at d128 asked 384 KB of the 227 a block may have: H200, 2026-11-28).
# Sized to fit, not tuned: fp32 attention is the accuracy path, not the fast one.
FWD_BLOCKS_FP32 = {16: Blocks(64, 64), 32: Blocks(64, 64), 64: Blocks(64, 64), 128: Blocks(64, 64),
                   256: Blocks(32, 32, 4, 1)}  # fmt: skip
DKDV_BLOCKS_FP32 = {16: Blocks(32, 64), 32: Blocks(32, 64), 64: Blocks(32, 64), 128: Blocks(32, 64),
                    256: Blocks(32, 32, 4, 1)}  # fmt: skip
DQ_BLOCKS_FP32 = {16: Blocks(64, 32), 32: Blocks(64, 32), 64: Blocks(64, 32), 128: Blocks(64, 32),
                  256: Blocks(32, 32, 4, 1)}  # fmt: skip
_FP32_TABLES = {id(FWD_BLOCKS): FWD_BLOCKS_FP32, id(DKDV_BLOCKS): DKDV_BLOCKS_FP32, id(DQ_BLOCKS): DQ_BLOCKS_FP32}

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def _tanh(x):
    # tanh without overflow: e = exp(-2|x|) is in (0, 1]; the absolute error near 0 is ~ 1 ulp of 1.
    e = tl.exp2(tl.abs(x) * (-2.0 * LOG2E))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _visible(rows, cols, seqlen_k, diagonal, left, right,
             CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):  # fmt: skip
    """[BLOCK_M, BLOCK_N] bool: key cols[j] exists and row rows[i] may see it."""
    return _visible_2d(rows[:, None] + diagonal, cols[None, :], seqlen_k, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT)


@triton.jit
def _visible_t(rows, cols, seqlen_k, diagonal, left, right,
               CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):  # fmt: skip
    """_visible transposed, [BLOCK_N, BLOCK_M]: for the dk/dv kernel, which works on s^T."""
    return _visible_2d(rows[None, :] + diagonal, cols[:, None], seqlen_k, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT)


@triton.jit
def _visible_2d(i, j, seqlen_k, left, right, CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """i: a row's index plus the diagonal, j: a key's index, broadcast against each other."""
    ok = j < seqlen_k
    if CAUSAL:
        ok = ok & (j <= i)
    if HAS_LEFT:
        ok = ok & (j >= i - left)
    if HAS_RIGHT:
        ok = ok & (j <= i + right)
    return ok


@triton.jit
def _scores(qk, qk_scale, scale, softcap, SOFTCAP: tl.constexpr):
    """(s, t) of the products qk (q . k, either orientation): the (softcapped) scores in log2 units
    (natural ones times log2(e)), and t = tanh(scale qk / softcap) (or 0). qk_scale = scale *
    log2(e): without softcap one multiply."""
    if SOFTCAP:
        t = _tanh(qk * (scale / softcap))
        s = (softcap * t) * LOG2E
    else:
        t = qk * 0.0
        s = qk * qk_scale
    return s, t


@triton.jit
def _dscores(ds, t, SOFTCAP: tl.constexpr):
    """The gradient w.r.t. q . k from ds, the one w.r.t. the (softcapped) score, divided by scale:
    with t = tanh(scale qk / softcap), s = softcap t, d s / d qk = scale (1 - t^2) (scale without
    softcap). The constant scale waits for the end: the kernels multiply the finished dq and dk by
    it once (FlexAttention's order) instead of every tile's ds (sm_90 SASS: 32 FMUL of a 64 x 64
    step, one per element a thread holds)."""
    if SOFTCAP:
        return ds * (1.0 - t * t)
    return ds


@triton.jit
def _sequence(CU_Q, CU_K, b, heads_q, seqlen_q, seqlen_k, diagonal, VARLEN: tl.constexpr):
    """Where batch entry b (int64) lies: (bq, bk, stat0, stat_h, seqlen_q, seqlen_k, diagonal).
    Its q-side rows start at bq * (the q-side batch stride), its k-side rows at bk * (the k-side
    one); its lse / delta rows of head h at stat0 + h * stat_h. Batched: bq = bk = b, lse and delta
    [B, Hq, Sq]. VARLEN: the batch strides passed are the row strides, bq and bk the sequence's
    first q and k rows (cu_seqlens), lse and delta [Hq, total_q] with the seqlen_q argument = total_q;
    the lengths are the sequence's own and the diagonal its bottom-right one."""
    if VARLEN:
        q0 = tl.load(CU_Q + b)
        k0 = tl.load(CU_K + b)
        len_q = tl.load(CU_Q + b + 1) - q0
        len_k = tl.load(CU_K + b + 1) - k0
        bq = q0.to(tl.int64)
        bk = k0.to(tl.int64)
        stat0 = bq
        stat_h = seqlen_q.to(tl.int64)
        diagonal = len_k - len_q
        seqlen_q = len_q
        seqlen_k = len_k
    else:
        bq = b
        bk = b
        stat0 = b * heads_q * seqlen_q
        stat_h = seqlen_q
    return bq, bk, stat0, stat_h, seqlen_q, seqlen_k, diagonal


@triton.jit
def _program(n_blocks):
    """(block, batch x head) of this program in a 1-D grid of n_blocks x (batch x heads) programs,
    blocks fastest (a head's blocks run side by side and share its k, v in L2). One axis because
    a grid's second axis stops at 65535, which batch x heads passes (4096 sequences x 32 heads)."""
    pid = tl.program_id(0)
    return pid % n_blocks, (pid // n_blocks).to(tl.int64)


@triton.jit
def _query_block(CU_Q, CU_K, n_blocks, seqlen_q, seqlen_k, diagonal, heads_q, group, head_dim: tl.constexpr,
                 VARLEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """A query-block program's coordinates: its block, its head and the kv head of its GQA group,
    its rows and head-dim lanes and which of them exist, its sequence (_sequence: bq, bk, the
    offset of its lse / delta rows, seqlen_q, seqlen_k, diagonal); 64-bit offsets."""
    pid_m, bh = _program(n_blocks)
    return _query_block_at(pid_m, bh, CU_Q, CU_K, seqlen_q, seqlen_k, diagonal, heads_q, group, head_dim, VARLEN,
                           BLOCK_M, BLOCK_D)  # fmt: skip


@triton.jit
def _query_block_at(pid_m, bh, CU_Q, CU_K, seqlen_q, seqlen_k, diagonal, heads_q, group, head_dim: tl.constexpr,
                    VARLEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """_query_block of the query block pid_m of batch x head bh (int64)."""
    b = bh // heads_q
    h = bh % heads_q
    bq, bk, stat0, stat_h, seqlen_q, seqlen_k, diagonal = _sequence(CU_Q, CU_K, b, heads_q, seqlen_q, seqlen_k,
                                                                    diagonal, VARLEN)  # fmt: skip
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    return (pid_m, h, h // group, rows, rows.to(tl.int64), dims, rows < seqlen_q, dims < head_dim, bq, bk,
            stat0 + h * stat_h, seqlen_q, seqlen_k, diagonal)  # fmt: skip


@triton.jit
def _align_down(x, BLOCK: tl.constexpr):
    """x >= 0 rounded down to a multiple of BLOCK (negative x gives 0: no integer division of a
    negative number, whose rounding differs between C and Python)."""
    return (tl.maximum(x, 0) // BLOCK) * BLOCK


@triton.jit
def _align_up(x, BLOCK: tl.constexpr):
    return ((tl.maximum(x, 0) + (BLOCK - 1)) // BLOCK) * BLOCK


@triton.jit
def _split(lo, full_lo, full_hi, hi, BLOCK: tl.constexpr):
    """(lo, mid_lo, mid_hi, hi) with lo <= mid_lo <= mid_hi <= hi (mid_lo = mid_hi = hi when hi <= lo):
    the tiles (BLOCK wide, starting at multiples of BLOCK) that [lo, hi) touches, cut into a masked
    leading range [lo, mid_lo), the mask-free middle [mid_lo, mid_hi) and a masked trailing range
    [mid_hi, hi). full_lo: the first index from which tiles are whole; full_hi, a multiple of BLOCK
    or hi itself: where they stop. A range that is not empty starts at a multiple of BLOCK."""
    lo = _align_down(lo, BLOCK)
    mid_lo = tl.minimum(tl.maximum(_align_up(full_lo, BLOCK), lo), hi)
    mid_hi = tl.maximum(tl.minimum(full_hi, hi), mid_lo)
    return lo, mid_lo, mid_hi, hi


@triton.jit
def _key_tiles(pid_m, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr,
               HAS_RIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """(lo, mid_lo, mid_hi, hi): the keys [lo, hi) the query block pid_m may see (lo rounded down
    to a key block), and the key blocks [mid_lo, mid_hi) that every row of it sees whole: all keys
    < seqlen_k, and inside [i + diagonal - left, i + diagonal (+ right)] for each of its rows i.
    Only rows < seqlen_q count: the rest are never stored, and their q (loaded as 0) gives finite
    scores, so no NaN or inf enters (every row of a tile is independent)."""
    first = pid_m * BLOCK_M
    last = tl.minimum(first + BLOCK_M, seqlen_q) - 1
    lo = 0
    hi = seqlen_k
    full_lo = 0  # the last row's first key
    full_hi = seqlen_k  # one past the first row's last key
    if HAS_LEFT:
        lo = tl.maximum(first + diagonal - left, 0)
        full_lo = last + diagonal - left
    if CAUSAL:
        hi = tl.minimum(hi, last + diagonal + 1)
        full_hi = tl.minimum(full_hi, first + diagonal + 1)
    if HAS_RIGHT:
        hi = tl.minimum(hi, last + diagonal + right + 1)
        full_hi = tl.minimum(full_hi, first + diagonal + right + 1)
    return _split(lo, full_lo, _align_down(full_hi, BLOCK_N), hi, BLOCK_N)


@triton.jit
def _query_tiles(pid_n, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr,
                 HAS_RIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """(lo, mid_lo, mid_hi, hi): the query rows [lo, hi) that may see the key block pid_n (lo
    rounded down to a row block), and the row blocks [mid_lo, mid_hi) whose rows all exist (< seqlen_q:
    the mask-free loads take no row mask) and each see every key of the block. A block that runs
    past seqlen_k has none (its padded keys, never stored, are kept out of exp2 that way too). In
    the masked blocks, rows >= seqlen_q need no visibility mask: their q, do, lse and delta are
    loaded as 0, so p = exp2(0 - 0) = 1 and both p do and ds = p (do v - delta) are exactly 0."""
    first = pid_n * BLOCK_N
    last = tl.minimum(first + BLOCK_N, seqlen_k) - 1
    lo = 0
    hi = seqlen_q
    full_lo = 0  # the first row that sees the block's last key
    if CAUSAL:
        lo = tl.maximum(first - diagonal, 0)
        full_lo = last - diagonal
    if HAS_RIGHT:
        lo = tl.maximum(lo, first - diagonal - right)
        full_lo = tl.maximum(full_lo, last - diagonal - right)
    full_hi = seqlen_q  # whole row blocks end at seqlen_q's last one
    if HAS_LEFT:
        hi = tl.minimum(hi, last - diagonal + left + 1)
        # one past the last row that sees the block's first key
        full_hi = tl.minimum(full_hi, first - diagonal + left + 1)
    full_hi = _align_down(full_hi, BLOCK_M)
    full_lo = tl.where(first + BLOCK_N > seqlen_k, hi, full_lo)
    return _split(lo, full_lo, full_hi, hi, BLOCK_M)


@triton.jit
def _key_tile(start, seqlen_k, dim_ok, MASK: tl.constexpr, BLOCK_N: tl.constexpr):
    """A key tile's columns (int32, int64) and the mask of its k/v loads: the key edge only where
    MASK is on (a mask-free tile lies wholly before seqlen_k)."""
    cols = start + tl.arange(0, BLOCK_N)
    if MASK:
        kv_mask = (cols < seqlen_k)[:, None] & dim_ok[None, :]
    else:
        kv_mask = dim_ok[None, :]
    return cols, cols.to(tl.int64), kv_mask


@triton.jit
def _fwd_tiles(acc, m_i, l_i, q, k_base, v_base, rows, dims, dim_ok, tile_lo, tile_hi, seqlen_k, sks, svs,
               qk_scale, scale, softcap, diagonal, left, right, MASK: tl.constexpr, CAUSAL: tl.constexpr,
               HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
               BLOCK_N: tl.constexpr):  # fmt: skip
    """The forward's online softmax over the key blocks [tile_lo, tile_hi): MASK on, the keys each
    row may not see are masked out; off, every row sees every key of every block (none is past
    seqlen_k), so no mask and no guard against a row max of -inf is needed."""
    for start in range(tile_lo, tile_hi, BLOCK_N):
        cols, cols64, kv_mask = _key_tile(start, seqlen_k, dim_ok, MASK, BLOCK_N)
        k = tl.load(k_base + cols64[:, None] * sks + dims[None, :], mask=kv_mask, other=0.0)
        # The scores in log2 units are x * factor; the scaling waits for the exponent, where it is one
        # FFMA with the shift (x * factor - shift), instead of a multiply of its own (SASS, sm_90:
        # 64 FMUL of the 680 instructions of a 128 x 128 tile at d128). factor > 0: the max commutes.
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SOFTCAP:
            x = softcap * _tanh(qk * (scale / softcap))
            factor = LOG2E
        else:
            x = qk
            factor = qk_scale
        if MASK:
            ok = _visible(rows, cols, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT)
            x = tl.where(ok, x, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(x, 1) * factor)
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet: finite
        else:
            m_new = tl.maximum(m_i, tl.max(x, 1) * factor)  # finite: x is
            shift = m_new
        p = tl.exp2(x * factor - shift[:, None])
        alpha = tl.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols64[:, None] * svs + dims[None, :], mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _fwd_kernel(
    Q, K, V, O, LSE, CU_Q, CU_K, n_blocks,
    seqlen_q, seqlen_k, heads_q, group, head_dim: tl.constexpr,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sob, sos, soh,
    scale, softcap, diagonal, left, right,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    VARLEN: tl.constexpr = False,
):  # fmt: skip
    pid_m, h, hk, rows, rows64, dims, row_ok, dim_ok, bq, bk, stat, seqlen_q, seqlen_k, diagonal = _query_block(
        CU_Q, CU_K, n_blocks, seqlen_q, seqlen_k, diagonal, heads_q, group, head_dim, VARLEN, BLOCK_M,
        BLOCK_D)  # fmt: skip
    if VARLEN:
        if pid_m * BLOCK_M >= seqlen_q:  # the grid covers max_seqlen_q: past this sequence's end
            return

    q = tl.load(Q + bq * sqb + h * sqh + rows64[:, None] * sqs + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # fmt: skip
    k_base = K + bk * skb + hk * skh
    v_base = V + bk * svb + hk * svh
    qk_scale = scale * LOG2E

    # The keys the block's rows may see, [lo, hi): masked blocks [lo, mid_lo) and [mid_hi, hi)
    # around the whole ones [mid_lo, mid_hi), taken in order.
    lo, mid_lo, mid_hi, hi = _key_tiles(pid_m, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT,
                                        HAS_RIGHT, BLOCK_M, BLOCK_N)  # fmt: skip

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max, log2 units
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    acc, m_i, l_i = _fwd_tiles(acc, m_i, l_i, q, k_base, v_base, rows, dims, dim_ok, lo, mid_lo, seqlen_k, sks, svs,
                               qk_scale, scale, softcap, diagonal, left, right, True, CAUSAL, HAS_LEFT, HAS_RIGHT,
                               SOFTCAP, DOT_PRECISION, BLOCK_N)  # fmt: skip
    acc, m_i, l_i = _fwd_tiles(acc, m_i, l_i, q, k_base, v_base, rows, dims, dim_ok, mid_lo, mid_hi, seqlen_k, sks,
                               svs, qk_scale, scale, softcap, diagonal, left, right, False, CAUSAL, HAS_LEFT,
                               HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_N)  # fmt: skip
    acc, m_i, l_i = _fwd_tiles(acc, m_i, l_i, q, k_base, v_base, rows, dims, dim_ok, mid_hi, hi, seqlen_k, sks, svs,
                               qk_scale, scale, softcap, diagonal, left, right, True, CAUSAL, HAS_LEFT, HAS_RIGHT,
                               SOFTCAP, DOT_PRECISION, BLOCK_N)  # fmt: skip

    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * LN2, float("-inf"))
    tl.store(O + bq * sob + h * soh + rows64[:, None] * sos + dims[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])  # fmt: skip
    tl.store(LSE + stat + rows64, lse, mask=row_ok)


@triton.jit
def _bwd_delta_kernel(
    O, DO, LSE, STATS, n_blocks, seqlen_q, heads_q, head_dim: tl.constexpr, sob, sos, soh, sdb, sds, sdh,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """A row's (lse2, delta), side by side in STATS (8 bytes a row, one load for both in the other
    kernels): lse2 = _lse2(lse), lse in log2 units with 0 for -inf, taken once a row here instead of
    once a tile in the loops of the dk/dv kernel, and delta = sum_d do * out. sm_90 SASS (Triton
    3.6) of the mask-free 64 x 64 d128 dk/dv step: _lse2 took 48 instructions of 590, and lse and
    delta as two loads 16 cp.async and 16 address IMADs a thread, side by side 1 and 0."""
    pid_m, bh = _program(n_blocks)
    b = bh // heads_q
    h = bh % heads_q
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < seqlen_q
    mask = row_ok[:, None] & (dims < head_dim)[None, :]
    o = tl.load(O + b * sob + h * soh + rows64[:, None] * sos + dims[None, :], mask=mask, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + rows64[:, None] * sds + dims[None, :], mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    stat = bh * seqlen_q + rows64
    tl.store(STATS + 2 * stat, _lse2(tl.load(LSE + stat, mask=row_ok, other=0.0)), mask=row_ok)
    tl.store(STATS + 2 * stat + 1, delta, mask=row_ok)


@triton.jit
def _tile_offsets(idx, stride, dims, WIDE: tl.constexpr):
    """The offsets of a tile's elements from its first row, loop-invariant, [rows, dims]: idx (the
    arange of the tile's rows) times the row stride, plus the head-dim lanes. int32 unless WIDE (a tile spans 2^31 elements or more: _wide). The dq loop adds
    the 64-bit part, the tile's first row times the stride, as one scalar a tile instead of a 64-bit
    multiply a row (sm_90 SASS, Triton 3.6, the mask-free 128 x 64 d128 dq step: 321 -> 294
    instructions). Not in the dk/dv loop: held across it, these offsets cost that kernel (at 255
    registers) spills and serialized wgmma (ptxas C7515)."""
    if WIDE:
        idx = idx.to(tl.int64)
    return idx[:, None] * stride + dims[None, :]


@triton.jit
def _probs_and_dscores(q, k, v, do, lse2, delta, rows, cols, seqlen_k, qk_scale, scale, softcap, diagonal, left,
                       right, MASK: tl.constexpr, CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr,
                       HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr):  # fmt: skip
    """(p, dqk / scale) for a [BLOCK_M, BLOCK_N] tile: the probabilities and the gradient w.r.t.
    q . k without its constant factor scale (the kernels apply it once, to the finished dq / dk).
    lse2: _lse2's; MASK off: every row of the tile sees every key of it (then no row of it has lse -inf)."""
    s, t = _scores(tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION), qk_scale, scale, softcap, SOFTCAP)
    p = tl.exp2(s - lse2[:, None])
    if MASK:
        ok = _visible(rows, cols, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT)
        p = tl.where(ok, p, 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
    return p, _dscores(p * (dp - delta[:, None]), t, SOFTCAP)


@triton.jit
def _lse2(lse):
    # lse = -inf only for rows that see no key: every entry of theirs is masked to p = 0, and the
    # finite stand-in keeps -inf - -inf (NaN) out of the exp.
    return tl.where(lse == float("-inf"), 0.0, lse * LOG2E)


@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_base, do_base, stats_base, cols, dims, dim_ok, tile_lo, tile_hi,
                seqlen_q, seqlen_k, sqs, sds, qk_scale, scale, softcap, diagonal, left, right, MASK: tl.constexpr,
                CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr):  # fmt: skip
    """dk / scale, dv of one key block accumulated over the query rows [tile_lo, tile_hi) of one head.
    The tile is worked on transposed, keys by rows (s^T = k q^T, p^T, dp^T = v do^T): the products
    dv += p^T do and dk += ds^T q then take p^T and ds^T as they come out of registers, and only
    loaded operands (q^T, do) are transposed, which the tensor cores read from shared memory either
    way; the row-major form needed p and ds transposed in registers, a round trip through smem.
    MASK off: every row of every tile exists (_query_tiles), so the loads take no row mask."""
    for start in range(tile_lo, tile_hi, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rows64 = rows.to(tl.int64)
        q_ptrs = q_base + rows64[None, :] * sqs + dims[:, None]
        do_ptrs = do_base + rows64[:, None] * sds + dims[None, :]
        stats_ptrs = stats_base + 2 * rows[:, None] + tl.arange(0, 2)[None, :]  # (lse2, delta) a row
        if MASK:  # rows past seqlen_q load as 0 and add exactly 0 (_query_tiles)
            row_ok = rows < seqlen_q
            q_t = tl.load(q_ptrs, mask=dim_ok[:, None] & row_ok[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
            lse2, delta = tl.split(tl.load(stats_ptrs, mask=row_ok[:, None], other=0.0))
        else:
            q_t = tl.load(q_ptrs, mask=dim_ok[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=dim_ok[None, :], other=0.0)
            lse2, delta = tl.split(tl.load(stats_ptrs))
        s_t, t_t = _scores(tl.dot(k, q_t, input_precision=DOT_PRECISION), qk_scale, scale, softcap, SOFTCAP)
        p_t = tl.exp2(s_t - lse2[None, :])
        if MASK:
            ok = _visible_t(rows, cols, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT)
            p_t = tl.where(ok, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=DOT_PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
        dqk_t = _dscores(p_t * (dp_t - delta[None, :]), t_t, SOFTCAP)
        dk += tl.dot(dqk_t.to(q_t.dtype), tl.trans(q_t), input_precision=DOT_PRECISION)
    return dk, dv


@triton.jit
def _dkdv_program(
    pid_n, bhk, Q, K, V, DO, STATS, DK, DV, CU_Q, CU_K,
    seqlen_q, seqlen_k, heads_kv, group, head_dim: tl.constexpr,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdkb, sdks, sdkh,
    scale, softcap, diagonal, left, right,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    VARLEN: tl.constexpr,
):  # fmt: skip
    """dk, dv of key block pid_n of batch x kv head bhk (int64), summed over its GQA group."""
    b = bhk // heads_kv
    hk = bhk % heads_kv
    heads_q = heads_kv * group
    bq, bk, stat0, stat_h, seqlen_q, seqlen_k, diagonal = _sequence(CU_Q, CU_K, b, heads_q, seqlen_q, seqlen_k,
                                                                    diagonal, VARLEN)  # fmt: skip
    if VARLEN:
        if pid_n * BLOCK_N >= seqlen_k:  # the grid covers max_seqlen_k: past this sequence's end
            return
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols64 = cols.to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < head_dim
    kv_mask = (cols < seqlen_k)[:, None] & dim_ok[None, :]
    k = tl.load(K + bk * skb + hk * skh + cols64[:, None] * sks + dims[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + bk * svb + hk * svh + cols64[:, None] * svs + dims[None, :], mask=kv_mask, other=0.0)
    qk_scale = scale * LOG2E

    # The query rows that may see the block's keys, [lo, hi): masked row blocks [lo, mid_lo) and
    # [mid_hi, hi) around those that see all of them, [mid_lo, mid_hi).
    lo, mid_lo, mid_hi, hi = _query_tiles(pid_n, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT,
                                          HAS_RIGHT, BLOCK_M, BLOCK_N)  # fmt: skip

    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for g in range(0, group):
        h = hk * group + g
        q_base = Q + bq * sqb + h * sqh
        do_base = DO + bq * sdb + h * sdh
        stats_base = STATS + 2 * (stat0 + h * stat_h)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, stats_base, cols, dims, dim_ok, lo, mid_lo, seqlen_q,
                             seqlen_k, sqs, sds, qk_scale, scale, softcap, diagonal, left, right, True, CAUSAL,
                             HAS_LEFT, HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_M)  # fmt: skip
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, stats_base, cols, dims, dim_ok, mid_lo, mid_hi, seqlen_q,
                             seqlen_k, sqs, sds, qk_scale, scale, softcap, diagonal, left, right, False, CAUSAL,
                             HAS_LEFT, HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_M)  # fmt: skip
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, stats_base, cols, dims, dim_ok, mid_hi, hi, seqlen_q,
                             seqlen_k, sqs, sds, qk_scale, scale, softcap, diagonal, left, right, True, CAUSAL,
                             HAS_LEFT, HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_M)  # fmt: skip

    out = bk * sdkb + hk * sdkh + cols64[:, None] * sdks + dims[None, :]
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, DO, STATS, DK, DV, CU_Q, CU_K, n_blocks,
    seqlen_q, seqlen_k, heads_kv, group, head_dim: tl.constexpr,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdkb, sdks, sdkh,
    scale, softcap, diagonal, left, right,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    VARLEN: tl.constexpr = False,
):  # fmt: skip
    pid_n, bhk = _program(n_blocks)
    _dkdv_program(pid_n, bhk, Q, K, V, DO, STATS, DK, DV, CU_Q, CU_K, seqlen_q, seqlen_k, heads_kv, group, head_dim,
                  sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdkb, sdks, sdkh, scale, softcap,
                  diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_M, BLOCK_N,
                  BLOCK_D, VARLEN)  # fmt: skip


@triton.jit
def _dq_tiles(dq, q, do, lse2, delta, k_base, v_base, k_off, v_off, rows, dim_ok, tile_lo, tile_hi, seqlen_k, sks,
              svs, qk_scale, scale, softcap, diagonal, left, right, MASK: tl.constexpr, CAUSAL: tl.constexpr,
              HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
              BLOCK_N: tl.constexpr):  # fmt: skip
    """dq / scale of one query block accumulated over the key blocks [tile_lo, tile_hi)."""
    for start in range(tile_lo, tile_hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        start64 = tl.cast(start, tl.int64)  # (a Python int under the interpreter)
        if MASK:
            kv_mask = (cols < seqlen_k)[:, None] & dim_ok[None, :]
        else:  # a mask-free tile lies wholly before seqlen_k
            kv_mask = dim_ok[None, :]
        k = tl.load(k_base + start64 * sks + k_off, mask=kv_mask, other=0.0)
        v = tl.load(v_base + start64 * svs + v_off, mask=kv_mask, other=0.0)
        p, dqk = _probs_and_dscores(q, k, v, do, lse2, delta, rows, cols, seqlen_k, qk_scale, scale, softcap,
                                    diagonal, left, right, MASK, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                                    DOT_PRECISION)  # fmt: skip
        dq += tl.dot(dqk.to(k.dtype), k, input_precision=DOT_PRECISION)
    return dq


@triton.jit
def _dq_program(
    pid_m, bh, Q, K, V, DO, STATS, DQ, CU_Q, CU_K,
    seqlen_q, seqlen_k, heads_q, group, head_dim: tl.constexpr,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdqb, sdqs, sdqh,
    scale, softcap, diagonal, left, right,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    VARLEN: tl.constexpr, WIDE: tl.constexpr,
):  # fmt: skip
    """dq of query block pid_m of batch x query head bh (int64)."""
    pid_m, h, hk, rows, rows64, dims, row_ok, dim_ok, bq, bk, stat, seqlen_q, seqlen_k, diagonal = _query_block_at(
        pid_m, bh, CU_Q, CU_K, seqlen_q, seqlen_k, diagonal, heads_q, group, head_dim, VARLEN, BLOCK_M,
        BLOCK_D)  # fmt: skip
    if VARLEN:
        if pid_m * BLOCK_M >= seqlen_q:  # the grid covers max_seqlen_q: past this sequence's end
            return
    mask = row_ok[:, None] & dim_ok[None, :]
    q = tl.load(Q + bq * sqb + h * sqh + rows64[:, None] * sqs + dims[None, :], mask=mask, other=0.0)
    do = tl.load(DO + bq * sdb + h * sdh + rows64[:, None] * sds + dims[None, :], mask=mask, other=0.0)
    lse2, delta = tl.split(tl.load(STATS + 2 * (stat + rows64)[:, None] + tl.arange(0, 2)[None, :],
                                   mask=row_ok[:, None], other=0.0))  # fmt: skip
    k_base = K + bk * skb + hk * skh
    v_base = V + bk * svb + hk * svh
    k_off = _tile_offsets(tl.arange(0, BLOCK_N), sks, dims, WIDE)
    v_off = _tile_offsets(tl.arange(0, BLOCK_N), svs, dims, WIDE)
    qk_scale = scale * LOG2E

    lo, mid_lo, mid_hi, hi = _key_tiles(pid_m, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT,
                                        HAS_RIGHT, BLOCK_M, BLOCK_N)  # fmt: skip

    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    dq = _dq_tiles(dq, q, do, lse2, delta, k_base, v_base, k_off, v_off, rows, dim_ok, lo, mid_lo, seqlen_k, sks,
                   svs, qk_scale, scale, softcap, diagonal, left, right, True, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                   DOT_PRECISION, BLOCK_N)  # fmt: skip
    dq = _dq_tiles(dq, q, do, lse2, delta, k_base, v_base, k_off, v_off, rows, dim_ok, mid_lo, mid_hi, seqlen_k,
                   sks, svs, qk_scale, scale, softcap, diagonal, left, right, False, CAUSAL, HAS_LEFT, HAS_RIGHT,
                   SOFTCAP, DOT_PRECISION, BLOCK_N)  # fmt: skip
    dq = _dq_tiles(dq, q, do, lse2, delta, k_base, v_base, k_off, v_off, rows, dim_ok, mid_hi, hi, seqlen_k, sks,
                   svs, qk_scale, scale, softcap, diagonal, left, right, True, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                   DOT_PRECISION, BLOCK_N)  # fmt: skip

    tl.store(DQ + bq * sdqb + h * sdqh + rows64[:, None] * sdqs + dims[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=mask)  # fmt: skip


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, DO, STATS, DQ, CU_Q, CU_K, n_blocks,
    seqlen_q, seqlen_k, heads_q, group, head_dim: tl.constexpr,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdqb, sdqs, sdqh,
    scale, softcap, diagonal, left, right,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    VARLEN: tl.constexpr = False, WIDE: tl.constexpr = False,
):  # fmt: skip
    pid_m, bh = _program(n_blocks)
    _dq_program(pid_m, bh, Q, K, V, DO, STATS, DQ, CU_Q, CU_K, seqlen_q, seqlen_k, heads_q, group, head_dim,
                sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdqb, sdqs, sdqh, scale, softcap,
                diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D,
                VARLEN, WIDE)  # fmt: skip


@triton.jit
def _bwd_fused_kernel(
    Q, K, V, DO, STATS, DQ, DK, DV, CU_Q, CU_K, n_kv_blocks, n_q_blocks,
    seqlen_q, seqlen_k, heads_kv, group, head_dim: tl.constexpr,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdqb, sdqs, sdqh, sdkb, sdks, sdkh,
    scale, softcap, diagonal, left, right,
    CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr,
    BLOCK_N2: tl.constexpr, BLOCK_D: tl.constexpr, VARLEN: tl.constexpr = False, WIDE: tl.constexpr = False,
):  # fmt: skip
    """Both kernels in one launch (Blocks.fused, FlexAttention's backward layout): a batch x kv head
    owns n_kv_blocks + group x n_q_blocks consecutive programs, its dk/dv programs (BLOCK_N1 keys,
    BLOCK_M1 rows a step) first, then the dq programs of its query heads (BLOCK_M2 rows, BLOCK_N2
    keys a step): one tail instead of two, and the dq programs start while the last dk/dv ones run."""
    pid = tl.program_id(0)
    per = n_kv_blocks + group * n_q_blocks
    bhk = (pid // per).to(tl.int64)
    r = pid % per
    if r < n_kv_blocks:
        _dkdv_program(r, bhk, Q, K, V, DO, STATS, DK, DV, CU_Q, CU_K, seqlen_q, seqlen_k, heads_kv, group, head_dim,
                      sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh, sdkb, sdks, sdkh, scale, softcap,
                      diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP, DOT_PRECISION, BLOCK_M1, BLOCK_N1,
                      BLOCK_D, VARLEN)  # fmt: skip
    else:
        r -= n_kv_blocks
        b = bhk // heads_kv
        hk = bhk % heads_kv
        bh = b * (heads_kv * group) + hk * group + r // n_q_blocks
        _dq_program(r % n_q_blocks, bh, Q, K, V, DO, STATS, DQ, CU_Q, CU_K, seqlen_q, seqlen_k,
                    heads_kv * group, group, head_dim, sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sdb, sds, sdh,
                    sdqb, sdqs, sdqh, scale, softcap, diagonal, left, right, CAUSAL, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                    DOT_PRECISION, BLOCK_M2, BLOCK_N2, BLOCK_D, VARLEN, WIDE)  # fmt: skip


def _check(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.stride(-1) != 1 and t.shape[-1] > 1:  # head dim 1: only element 0 is read, at offset 0
            raise ValueError(f"the Triton attention kernels need stride(-1) == 1, got strides {t.stride()}")


def _options(q: torch.Tensor, causal: bool, left: int, right: int, softcap: float) -> dict:
    return dict(
        CAUSAL=bool(causal), HAS_LEFT=left >= 0, HAS_RIGHT=right >= 0, SOFTCAP=softcap > 0,
        # fp32 inputs: full-precision dots (Triton's default for fp32 on a GPU is TF32); 16-bit
        # inputs: the target's default (the precision only applies to fp32 operands).
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else None,
    )  # fmt: skip


def _scalars(scale, softcap, diagonal, left, right) -> tuple:
    # softcap only divides when it is on; 1.0 keeps the unused argument harmless otherwise.
    return float(scale), float(softcap) if softcap > 0 else 1.0, int(diagonal), max(int(left), 0), max(int(right), 0)


def _blocks(q: torch.Tensor, table: dict) -> Blocks:
    """`table`'s row for q's padded head dim (the fp32 twin of the table for 4-byte inputs)."""
    if q.element_size() == 4:
        table = _FP32_TABLES.get(id(table), table)
    return Blocks(*table[_block_d(q.shape[-1])])


def _config(q: torch.Tensor, table: dict, scale, causal, left, right, softcap, diagonal) -> tuple:
    """(options, scalars): the kernels' constexprs and launch options from `table` by head dim, and
    (scale, softcap, diagonal, left, right) as the kernels take them."""
    block_d = _block_d(q.shape[-1])
    blocks = _blocks(q, table)
    options = dict(_options(q, causal, left, right, softcap), BLOCK_M=blocks.block_m, BLOCK_N=blocks.block_n,
                   BLOCK_D=block_d, num_warps=blocks.num_warps, num_stages=blocks.num_stages)  # fmt: skip
    return options, _scalars(scale, softcap, diagonal, left, right)


def attention_fwd(q, k, v, scale: float, causal: bool, left: int, right: int, softcap: float, diagonal: int):
    """q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (Hq a multiple of Hkv: GQA/MQA, k and v read in
    place, never copied or expanded), any strides with stride(-1) == 1, one dtype (fp16, bf16, fp32).
    Returns (out, lse): out [B, Sq, Hq, D] contiguous in q's dtype; lse fp32 [B, Hq, Sq] contiguous,
    natural log. Row i sees key j when: (not causal or j <= i + diagonal) and (left < 0 or
    j >= i + diagonal - left) and (right < 0 or j <= i + diagonal + right). A row that sees no key:
    out = 0 and lse = -inf (never NaN). softcap > 0: s = softcap * tanh(s / softcap) after the scale."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if seqlen_k == 0:  # no key at all: every row sees nothing
        return out.zero_(), lse.fill_(float("-inf"))
    _check(q, k, v)
    options, scalars = _config(q, FWD_BLOCKS, scale, causal, left, right, softcap, diagonal)
    n_blocks = triton.cdiv(seqlen_q, options["BLOCK_M"])
    with on_device_of(q):
        _fwd_kernel[(n_blocks * batch * heads_q,)](
            q, k, v, out, lse, None, None, n_blocks,
            seqlen_q, seqlen_k, heads_q, heads_q // heads_kv, head_dim,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
            *scalars, **options,
        )  # fmt: skip
    return out, lse


def attention_bwd(do, q, k, v, out, lse, scale, causal, left, right, softcap, diagonal):
    """do like out (any strides, stride(-1) == 1). Returns (dq, dk, dv): dq [B, Sq, Hq, D], dk and
    dv [B, Sk, Hkv, D], contiguous, in q's dtype; for GQA dk/dv are summed over the Hq/Hkv query
    heads that share a kv head. Rows that see no key contribute nothing (no NaN anywhere)."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    dq = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    dk = torch.empty((batch, seqlen_k, heads_kv, head_dim), dtype=q.dtype, device=q.device)
    dv = torch.empty_like(dk)
    if batch == 0 or heads_q == 0 or head_dim == 0 or seqlen_q == 0 or seqlen_k == 0:
        # no query row or no key: nothing flows anywhere
        return dq.zero_(), dk.zero_(), dv.zero_()
    _check(do, q, k, v, out)
    strides = (
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), do.stride(0), do.stride(1), do.stride(2),
    )  # fmt: skip
    stats = _bwd_stats(q, batch, heads_q, seqlen_q)
    with on_device_of(q):
        # (lse2, delta) [B, Hq, Sq, 2]
        _bwd_delta(out, do, lse, stats, batch, heads_q, seqlen_q, out.stride(0), out.stride(1), out.stride(2),
                   do.stride(0), do.stride(1), do.stride(2))  # fmt: skip
        _bwd_grads(q, k, v, do, stats, dq, dk, dv, None, None, batch, seqlen_q, seqlen_k, seqlen_q, seqlen_k,
                   strides, (dq.stride(0), dq.stride(1), dq.stride(2)), (dk.stride(0), dk.stride(1), dk.stride(2)),
                   scale, causal, left, right, softcap, diagonal, {})  # fmt: skip
    return dq, dk, dv


def _bwd_stats(q, *shape) -> torch.Tensor:
    """[*shape, 2] fp32: (lse2, delta) a row (lse in log2 units, 0 for -inf), the delta kernel's output."""
    return torch.empty((*shape, 2), dtype=torch.float32, device=q.device)


def _bwd_delta(out, do, lse, stats, batch, heads_q, seqlen_q, *strides) -> None:
    """The delta kernel over [batch, heads_q, seqlen_q] rows (the packed rows of varlen as one batch
    entry): stats[..., 0] = lse2, stats[..., 1] = delta, at lse's (contiguous) index."""
    block_m, block_d = _blocks(out, DQ_BLOCKS).block_m, _block_d(out.shape[-1])  # dq's rows a program
    n_blocks = triton.cdiv(seqlen_q, block_m)
    _bwd_delta_kernel[(n_blocks * batch * heads_q,)](
        out, do, lse.contiguous(), stats, n_blocks, seqlen_q, heads_q, out.shape[-1], *strides,
        BLOCK_M=block_m, BLOCK_D=block_d,
    )  # fmt: skip


def _wide(rows: int, strides) -> bool:
    """Whether the element offsets of a tile of `rows` rows at these row strides may reach 2^31 (then
    the dq loop takes them in int64: _tile_offsets)."""
    return max(strides) * rows + 256 >= 2**31


def _bwd_grads(q, k, v, do, stats, dq, dk, dv, cu_q, cu_k, batch, max_q, max_k, seqlen_q, seqlen_k, strides,
               dq_strides, dk_strides, scale, causal, left, right, softcap, diagonal, varlen: dict) -> None:
    """The dk/dv and dq kernels (or, Blocks.fused in DKDV_BLOCKS's row, the one kernel that runs
    both): max_q / max_k the longest sequences (the grids), seqlen_q / seqlen_k the kernels'
    arguments (varlen: total_q, total_k)."""
    heads_q, heads_kv, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
    group = heads_q // heads_kv if heads_kv else 1
    dkdv, scalars = _config(q, DKDV_BLOCKS, scale, causal, left, right, softcap, diagonal)
    dq_options, _ = _config(q, DQ_BLOCKS, scale, causal, left, right, softcap, diagonal)
    fused = _blocks(q, DKDV_BLOCKS).fused
    _, k_strides, v_strides, _ = (strides[i : i + 3] for i in range(0, 12, 3))  # (batch, row, head) each
    wide = _wide(dq_options["BLOCK_N"], (k_strides[1], v_strides[1]))
    n_kv = triton.cdiv(max_k, dkdv["BLOCK_N"])
    n_q = triton.cdiv(max_q, dq_options["BLOCK_M"])
    if fused:
        options = {k_: v_ for k_, v_ in dkdv.items() if k_ not in ("BLOCK_M", "BLOCK_N")}
        _bwd_fused_kernel[((n_kv + group * n_q) * batch * heads_kv,)](
            q, k, v, do, stats, dq, dk, dv, cu_q, cu_k, n_kv, n_q,
            seqlen_q, seqlen_k, heads_kv, group, head_dim, *strides, *dq_strides, *dk_strides, *scalars,
            **options, BLOCK_M1=dkdv["BLOCK_M"], BLOCK_N1=dkdv["BLOCK_N"], BLOCK_M2=dq_options["BLOCK_M"],
            BLOCK_N2=dq_options["BLOCK_N"], WIDE=wide, **varlen,
        )  # fmt: skip
        return
    _bwd_dkdv_kernel[(n_kv * batch * heads_kv,)](
        q, k, v, do, stats, dk, dv, cu_q, cu_k, n_kv,
        seqlen_q, seqlen_k, heads_kv, group, head_dim, *strides, *dk_strides,
        *scalars, **dkdv, **varlen,
    )  # fmt: skip
    _bwd_dq_kernel[(n_q * batch * heads_q,)](
        q, k, v, do, stats, dq, cu_q, cu_k, n_q,
        seqlen_q, seqlen_k, heads_q, group, head_dim, *strides, *dq_strides,
        *scalars, **dq_options, WIDE=wide, **varlen,
    )  # fmt: skip


# Packed sequences (varlen): the same kernels with VARLEN on. Each program reads its sequence's
# first rows and lengths from cu_seqlens (the grid's blocks cover max_seqlen, a block past its
# sequence's end returns at once); the batch strides passed are the row strides (the kernels'
# batch index is then the sequence's first row); lse and delta are [Hq, total_q].
def _rows(*tensors: torch.Tensor) -> tuple:
    """(batch, row, head) strides of [total, heads, d] tensors for the VARLEN kernels."""
    return tuple(s for t in tensors for s in (t.stride(0), t.stride(0), t.stride(1)))


def attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                         scale: float, causal: bool, left: int, right: int, softcap: float):  # fmt: skip
    """q [total_q, Hq, D], k and v [total_k, Hkv, D] (unit last stride, any row/head strides), one dtype;
    cu_seqlens_q / cu_seqlens_k int32 [batch + 1] on q's device, offsets rising from 0 (already
    checked by the caller; a sequence may be empty), max_seqlen_* >= every length.
    Sequence b is rows cu_q[b]:cu_q[b+1] of q against rows cu_k[b]:cu_k[b+1] of k, v, with the
    batched kernels' semantics and its own bottom-right diagonal: diagonal_b = len_k_b - len_q_b.
    Returns (out [total_q, Hq, D] contiguous in q's dtype, lse fp32 [Hq, total_q] contiguous, natural
    log; rows that see no key, including every row of a sequence with len_k = 0: out 0, lse -inf)."""
    total_q, heads_q, head_dim = q.shape
    total_k, heads_kv = k.shape[0], k.shape[1]
    batch = cu_seqlens_q.numel() - 1
    out = torch.empty((total_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if total_k == 0 or max_seqlen_k == 0:  # no key at all: every row sees nothing
        return out.zero_(), lse.fill_(float("-inf"))
    _check(q, k, v)
    options, scalars = _config(q, FWD_BLOCKS, scale, causal, left, right, softcap, 0)  # diagonal: per sequence
    n_blocks = triton.cdiv(max_seqlen_q, options["BLOCK_M"])
    with on_device_of(q):
        _fwd_kernel[(n_blocks * batch * heads_q,)](
            q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, n_blocks,
            total_q, total_k, heads_q, heads_q // heads_kv, head_dim, *_rows(q, k, v, out),
            *scalars, **options, VARLEN=True,
        )  # fmt: skip
    return out, lse


def attention_varlen_bwd(do, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                         max_seqlen_k: int, scale: float, causal: bool, left: int, right: int,
                         softcap: float):  # fmt: skip
    """Returns (dq [total_q, Hq, D], dk, dv [total_k, Hkv, D]) contiguous in q's dtype; dk, dv summed
    over a GQA group; keys no row sees get 0. Deterministic (no atomics), no NaN anywhere."""
    total_q, heads_q, head_dim = q.shape
    total_k, heads_kv = k.shape[0], k.shape[1]
    batch = cu_seqlens_q.numel() - 1
    dq = torch.empty((total_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    dk = torch.empty((total_k, heads_kv, head_dim), dtype=q.dtype, device=q.device)
    dv = torch.empty_like(dk)
    if min(batch, heads_q, head_dim, total_q, total_k, max_seqlen_q, max_seqlen_k) <= 0:
        # no query row or no key: nothing flows anywhere
        return dq.zero_(), dk.zero_(), dv.zero_()
    _check(do, q, k, v, out)
    stats = _bwd_stats(q, heads_q, total_q)
    with on_device_of(q):
        # delta needs no sequence: the packed rows as one batch entry give [Hq, total_q] directly
        _bwd_delta(out, do, lse, stats, 1, heads_q, total_q, 0, out.stride(0), out.stride(1), 0, do.stride(0),
                   do.stride(1))  # fmt: skip
        _bwd_grads(q, k, v, do, stats, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, max_seqlen_q, max_seqlen_k,
                   total_q, total_k, _rows(q, k, v, do), _rows(dq), _rows(dk), scale, causal, left, right, softcap,
                   0, dict(VARLEN=True))  # diagonal: per sequence  # fmt: skip
    return dq, dk, dv


__all__ = ["attention_fwd", "attention_bwd", "attention_varlen_fwd", "attention_varlen_bwd", "Blocks", "FWD_BLOCKS",
           "DKDV_BLOCKS", "DQ_BLOCKS", "FWD_BLOCKS_FP32", "DKDV_BLOCKS_FP32", "DQ_BLOCKS_FP32"]
