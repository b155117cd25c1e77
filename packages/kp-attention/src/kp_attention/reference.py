"""The reference level of exact attention: plain PyTorch, written for clarity, differentiable by
autograd to any order. It is the fallback and, run in float64, the oracle every faster level is
checked against.

    out[b, i, h] = sum_j P[i, j] v[b, j, h'],   P = softmax_j(S[i, j]) over the keys row i may see,
    S[i, j] = cap(scale * q[b, i, h] . k[b, j, h']),  h' = h // (heads_q // heads_kv)  (GQA / MQA)

Which keys row i sees: with d = the diagonal's offset (flash_attn: seqlen_k - seqlen_q, so causal is
aligned bottom-right; torch's SDPA: 0, top-left), key j is visible when
    causal:          j <= i + d
    window (l, r):   i + d - l <= j <= i + d + r   (a side of -1 is unbounded)
A row that sees no key gives zeros (never NaN, in the output or the gradients) and lse = -inf.
Math in fp32 for 16-bit and fp32 inputs (float64 for float64), the output rounded once.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch


def visible(seqlen_q: int, seqlen_k: int, *, causal: bool, window: Tuple[int, int], diagonal: int,
            device) -> Optional[torch.Tensor]:  # fmt: skip
    """[seqlen_q, seqlen_k] bool: which keys each query row sees; None when it sees them all."""
    left, right = window
    if not causal and left < 0 and right < 0:
        return None
    i = torch.arange(seqlen_q, device=device).unsqueeze(1) + diagonal
    j = torch.arange(seqlen_k, device=device).unsqueeze(0)
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if causal:
        ok &= j <= i
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal: bool = False,
              window: Tuple[int, int] = (-1, -1), softcap: float = 0.0, diagonal: Optional[int] = None,
              ) -> Tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """q [batch, seqlen_q, heads_q, head_dim], k and v [batch, seqlen_k, heads_kv, head_dim] ->
    (out like q, lse fp32 [batch, heads_q, seqlen_q], natural log). `diagonal` None: bottom-right."""
    batch, seqlen_q, heads_q, _ = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = heads_q // heads_kv
    qf = q.to(compute).transpose(1, 2)  # [batch, heads_q, seqlen_q, head_dim]
    kf = k.to(compute).transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.to(compute).transpose(1, 2).repeat_interleave(group, dim=1)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    d = seqlen_k - seqlen_q if diagonal is None else diagonal
    mask = visible(seqlen_q, seqlen_k, causal=causal, window=window, diagonal=d, device=q.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    # Softmax with the rows that see nothing kept finite: their max is taken as 0 and their sum as
    # 1, so exp() gives exact zeros there and no 0/0 or log(0) enters the graph.
    m = s.amax(dim=-1, keepdim=True) if seqlen_k else s.new_full((*s.shape[:-1], 1), float("-inf"))
    seen = torch.isfinite(m)
    m = torch.where(seen, m, torch.zeros_like(m)).detach()  # any finite shift is exact: no gradient needed
    p = torch.exp(s - m)
    total = p.sum(dim=-1, keepdim=True)
    total = torch.where(seen, total, torch.ones_like(total))
    out = (p @ vf) / total
    lse = torch.where(seen, m + torch.log(total), torch.full_like(m, float("-inf"))).squeeze(-1)
    return out.transpose(1, 2).to(q.dtype), lse.to(torch.float32) if compute != torch.float64 else lse


# The level functions (attention.py's LEVELS): the contract every level implements. Inputs as
# flash_attn takes them (any strides, unit last stride); outputs contiguous; lse [batch, heads_q,
# seqlen_q]; dk, dv summed over the query heads of a GQA group.
def attention_fwd(q, k, v, scale: float, causal: bool, left: int, right: int, softcap: float, diagonal: int):
    out, lse = attention(q, k, v, scale=scale, causal=causal, window=(left, right), softcap=softcap,
                         diagonal=diagonal)  # fmt: skip
    return out.contiguous(), lse.contiguous()


def attention_bwd(do, q, k, v, out, lse, scale: float, causal: bool, left: int, right: int, softcap: float,
                  diagonal: int):  # fmt: skip
    """The backward written out (an op's impl runs below autograd, so it cannot call it), as the
    kernels compute it: P from the saved lse, dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)),
    through softcap's tanh, dQ = scale dS K, dK = scale dS^T Q; dk, dv summed over a GQA group."""
    batch, seqlen_q, heads_q, _ = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = heads_q // heads_kv
    qf, dof, of = (t.to(compute).transpose(1, 2) for t in (q, do, out))  # [batch, heads_q, seqlen_q, d]
    kf = k.to(compute).transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.to(compute).transpose(1, 2).repeat_interleave(group, dim=1)
    s = (qf @ kf.transpose(-1, -2)) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    mask = visible(seqlen_q, seqlen_k, causal=causal, window=(left, right), diagonal=diagonal, device=q.device)
    l_ = lse.to(compute).unsqueeze(-1)
    p = torch.where(torch.isfinite(l_), torch.exp(s - torch.where(torch.isfinite(l_), l_, torch.zeros_like(l_))),
                    torch.zeros_like(s))  # fmt: skip
    if mask is not None:
        p = p.masked_fill(~mask, 0.0)
    dv = p.transpose(-1, -2) @ dof
    dp = dof @ vf.transpose(-1, -2)
    ds = p * (dp - (dof * of).sum(-1, keepdim=True))
    if t is not None:
        ds = ds * (1 - t * t)
    dq = (ds @ kf) * scale
    dk = (ds.transpose(-1, -2) @ qf) * scale

    def kv_grad(g):  # [batch, heads_q, seqlen_k, d] -> [batch, seqlen_k, heads_kv, d], summed over a group
        return g.view(batch, heads_kv, group, seqlen_k, -1).sum(2).transpose(1, 2).to(k.dtype).contiguous()

    return dq.transpose(1, 2).to(q.dtype).contiguous(), kv_grad(dk), kv_grad(dv)


# The varlen level functions: packed q [total_q, Hq, D], k and v [total_k, Hkv, D], int32 offsets
# cu_seqlens_*; each sequence with its own bottom-right diagonal (len_k - len_q); lse [Hq, total_q].
def _spans(cu_q, cu_k):
    cq, ck = cu_q.tolist(), cu_k.tolist()
    return [(cq[b], cq[b + 1], ck[b], ck[b + 1]) for b in range(len(cq) - 1)]


def attention_varlen_fwd(q, k, v, cu_q, cu_k, max_q: int, max_k: int, scale: float, causal: bool, left: int,
                         right: int, softcap: float):  # fmt: skip
    out = torch.zeros(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    for q0, q1, k0, k1 in _spans(cu_q, cu_k):
        if q1 > q0:
            o, l_ = attention_fwd(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], scale, causal, left, right, softcap,
                                  (k1 - k0) - (q1 - q0))  # fmt: skip
            out[q0:q1], lse[:, q0:q1] = o[0], l_[0]
    return out, lse


def attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, max_q: int, max_k: int, scale: float, causal: bool,
                         left: int, right: int, softcap: float):  # fmt: skip
    dq, dk, dv = (torch.zeros(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v))
    for q0, q1, k0, k1 in _spans(cu_q, cu_k):
        if q1 > q0 and k1 > k0:
            g = attention_bwd(do[None, q0:q1], q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], out[None, q0:q1],
                              lse[None, :, q0:q1], scale, causal, left, right, softcap, (k1 - k0) - (q1 - q0))  # fmt: skip
            dq[q0:q1], dk[k0:k1], dv[k0:k1] = g[0][0], g[1][0], g[2][0]
    return dq, dk, dv
