"""Exact attention: flash_attn (batched), flash_attn_varlen (packed sequences of different lengths)
and scaled_dot_product_attention (a drop-in for torch's, where the options overlap).

Built on kp_core.op (docs/adding-an-op.md): the levels, a forward and a backward op registered with
torch.library (fakes and autograd, so torch.compile sees no graph break), the checks (every
argument, before any work, with an error that names it) and the public functions. Levels: cuda
(_cuda.py: native forward and backward kernels for fp16 / bf16 at head dims 64-256; `deterministic`
reaches its backward, which has an atomic and a deterministic dQ), triton (triton/attention.py) and reference (reference.py: plain PyTorch); `auto` takes
cuda where its `supports` serves the call, else triton on a GPU. flash_attn_varlen reads its
offsets on the host to check them (one copy), so under torch.compile it breaks the graph there.
Gradients through the returned lse are served by the reference formula (the kernels' backward
takes d(out) only).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from kp_core import BackendUnavailable, registry, requested_backend
from kp_core.op import AutogradOp, Levels

from . import reference

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # float64: the oracle's
MAX_HEAD_DIM = 256

LEVELS = Levels(
    "kp_attention",
    {"cuda": "kp_attention._cuda", "triton": "kp_attention.triton.attention", "reference": "kp_attention.reference"},
)
"""Facts a level's `supports` reads: device type and index, dtype, head_dim."""


def describe_backends() -> list:
    """Lines for `python -m kp_core`: what `auto` picks for bf16, head_dim 128, on each device."""
    return LEVELS.describe(torch.bfloat16, 128)


# ---------------------------------------------------------------------------------------------
# The registered ops: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] with a unit last stride; out
# contiguous, lse fp32 [B, Hq, Sq]; the backward returns dq, dk, dv (dk, dv summed over a GQA group).
# `diagonal`: key j is on query i's diagonal when j = i + diagonal (flash_attn: Sk - Sq; SDPA: 0).

_OPTS = "float scale, bool causal, int left, int right, float softcap, int diagonal, bool deterministic, str backend"


# `deterministic` reaches only the backward of the levels that have a choice: the CUDA level's
# (atomic or deterministic dQ). The Triton and reference backwards are deterministic always, and no
# forward takes it.
def _level_fwd(function: str):
    def run(*args):  # (q, k, v[, cu_q, cu_k], options..., deterministic, backend)
        return LEVELS.impl(args[-1], function)(*args[:-2])
    return run


def _level_bwd(function: str):
    def run(*args):  # (do, q, k, v, out, lse[, cu_q, cu_k], options..., deterministic, backend)
        impl = LEVELS.impl(args[-1], function)
        return impl(*args[:-2], deterministic=args[-2]) if args[-1] == "cuda" else impl(*args[:-2])
    return run


def _fwd_fake(q, k, v, scale, causal, left, right, softcap, diagonal, deterministic, backend):
    b, sq, hq, d = q.shape
    return q.new_empty((b, sq, hq, d)), q.new_empty((b, hq, sq), dtype=torch.float32)


def _bwd_fake(do, q, k, v, out, lse, scale, causal, left, right, softcap, diagonal, deterministic, backend):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    # Both op pairs: (q, k, v[, cu_q, cu_k], options..., backend); the tensors are saved, the rest kept.
    q, k, v, *rest, backend = inputs
    offsets = [t for t in rest if isinstance(t, torch.Tensor)]  # the varlen pair's cu_seqlens
    ctx.save_for_backward(q, k, v, *output, *offsets)
    ctx.options, ctx.backend = tuple(t for t in rest if not isinstance(t, torch.Tensor)), backend
    ctx.n_inputs = len(inputs)
    # lse's gradient is never read (below): left unmaterialized, autograd launches no fill of zeros
    ctx.set_materialize_grads(False)


def _backward(ctx, run_bwd, dout, _dlse):
    # _dlse: the public functions send calls whose lse needs a gradient to the reference formula.
    q, k, v, *saved = ctx.saved_tensors  # out, lse[, cu_q, cu_k]: the backward op's order
    if dout is None:  # out took no part in the loss
        dout = torch.zeros_like(saved[0])
    twice = torch.is_grad_enabled() and any(t.requires_grad for t in (dout, q, k, v))
    with torch.no_grad():
        grads = run_bwd(dout if dout.stride(-1) == 1 else dout.contiguous(), q, k, v, *saved, *ctx.options,
                        ctx.backend)  # fmt: skip
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(tuple(grads), f"kp_attention: the {ctx.backend} backend")
    return (*grads, *([None] * (ctx.n_inputs - 3)))


ATTENTION = AutogradOp(
    "kp_attention",
    LEVELS,
    fwd_schema=f"attention_fwd(Tensor q, Tensor k, Tensor v, {_OPTS}) -> (Tensor, Tensor)",
    fwd_fake=_fwd_fake,
    bwd_schema=f"attention_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, {_OPTS}) "
               "-> (Tensor, Tensor, Tensor)",  # fmt: skip
    bwd_fake=_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
    fwd=_level_fwd("attention_fwd"),
    bwd=_level_bwd("attention_bwd"),
)


# The varlen ops: packed q [total_q, Hq, D], k and v [total_k, Hkv, D], int32 offsets; lse [Hq, total_q].
_VOPTS = "Tensor cu_q, Tensor cu_k, int max_q, int max_k, float scale, bool causal, int left, int right, " \
         "float softcap, bool deterministic, str backend"  # fmt: skip


def _vfwd_fake(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right, softcap, deterministic, backend):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def _vbwd_fake(do, q, k, v, out, lse, cu_q, cu_k, *rest):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


ATTENTION_VARLEN = AutogradOp(
    "kp_attention",
    LEVELS,
    fwd_schema=f"attention_varlen_fwd(Tensor q, Tensor k, Tensor v, {_VOPTS}) -> (Tensor, Tensor)",
    fwd_fake=_vfwd_fake,
    bwd_schema=f"attention_varlen_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, {_VOPTS}) "
               "-> (Tensor, Tensor, Tensor)",  # fmt: skip
    bwd_fake=_vbwd_fake,
    setup_context=_setup_context,
    backward=_backward,
    fwd=_level_fwd("attention_varlen_fwd"),
    bwd=_level_bwd("attention_varlen_bwd"),
)


def _run(op, q, k, v, scale, causal, window, softcap, diagonal, backend, lse_grad: bool, deterministic: bool = False):
    """(out, lse) of one call at the level the request resolves to."""
    left, right = window
    args = (scale, causal, left, right, softcap, diagonal)
    facts = (q.dtype, q.shape[-1])
    if q.numel() == 0 or k.shape[1] == 0 or lse_grad:
        # Nothing to launch (or rows that see no key at all), or a gradient through lse: the
        # reference formula, differentiable to any order, serves it at every level.
        requested = (backend or "auto") if registry.is_compiling() else requested_backend(backend)
        if lse_grad and requested not in ("auto", "reference"):
            raise BackendUnavailable(f"{op}: a gradient through the returned lse needs backend='reference' "
                                     f"(the {requested} level's backward takes d(out) only)")  # fmt: skip
        if not registry.is_compiling():
            LEVELS.resolve(backend, q.device, *facts)  # a forced level that cannot serve this call still raises
        return reference.attention(q, k, v, scale=scale, causal=causal, window=window, softcap=softcap,
                                   diagonal=diagonal)  # fmt: skip
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if registry.is_compiling():
        return ATTENTION.fwd_op(q, k, v, *args, deterministic, LEVELS.traced(backend, q.device, *facts))
    name = LEVELS.resolve(backend, q.device, *facts)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if name == "reference":  # plain PyTorch: autograd differentiates it to any order
        return reference.attention(q, k, v, scale=scale, causal=causal, window=window, softcap=softcap,
                                   diagonal=diagonal)  # fmt: skip
    if grad:
        return ATTENTION.apply(q, k, v, *args, deterministic, name)
    return LEVELS.impl(name, "attention_fwd")(q, k, v, *args)


def _check_qkv(op: str, q, k, v, rank: int, layout: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise ValueError(f"{op}: {name} must be {rank}-D {layout}, got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{op}: {name} must be float16, bfloat16 or float32, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{op}: q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{op}: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")


def _check_heads(op: str, q, k, v, heads_dim: int) -> None:
    head_dim = q.shape[-1]
    if k.shape[-1] != head_dim or v.shape[-1] != head_dim:
        raise ValueError(f"{op}: q, k and v must share head_dim, got {head_dim}, {k.shape[-1]}, {v.shape[-1]}")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"{op}: head_dim {head_dim} is not supported: at most {MAX_HEAD_DIM} "
                         "(the kernels hold a row of q in registers)")  # fmt: skip
    if k.shape != v.shape:
        raise ValueError(f"{op}: k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    heads_q, heads_kv = q.shape[heads_dim], k.shape[heads_dim]
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"{op}: heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) (GQA / MQA)")


def _check_options(op: str, causal, window, softmax_scale, softcap) -> Tuple[Tuple[int, int], float]:
    if not isinstance(causal, bool):
        raise TypeError(f"{op}: causal must be a bool, got {type(causal).__name__}")
    if (not isinstance(window, (tuple, list)) or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window)):  # fmt: skip
        raise ValueError(f"{op}: window must be (left, right), ints >= -1 (-1: unbounded), got {window!r}")
    left, right = int(window[0]), int(window[1])
    if causal and right > 0:
        raise ValueError(f"{op}: causal=True sees no key right of the diagonal, but window={tuple(window)} asks for "
                         f"{right}: pass causal=False with window=({left}, {right}), or window=({left}, 0)")  # fmt: skip
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and math.isfinite(softmax_scale)):
        raise ValueError(f"{op}: softmax_scale must be a finite number or None, got {softmax_scale!r}")
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"{op}: softcap must be a finite number >= 0 (0: off), got {softcap!r}")
    return (left, right), float(softcap)


def flash_attn(q, k, v, causal: bool = False, window=(-1, -1), softmax_scale: Optional[float] = None,
               softcap: float = 0.0, return_lse: bool = False, deterministic: bool = False, *, backend=None):  # fmt: skip
    """Attention of q [batch, seqlen_q, heads_q, head_dim] over k, v [batch, seqlen_k, heads_kv,
    head_dim] (heads_q a multiple of heads_kv: GQA / MQA, no copy of k, v in the kernels).

    causal: each query sees the keys up to its diagonal, aligned bottom-right when seqlen_q !=
    seqlen_k (the last query sees every key). window (left, right): keys within left before and
    right after the diagonal (-1: unbounded); causal is window (left, 0). softmax_scale: default
    1/sqrt(head_dim). softcap > 0: scores pass through softcap * tanh(s / softcap) first.
    Returns out like q, or (out, lse) with lse fp32 [batch, heads_q, seqlen_q], natural log; a row
    that sees no key gives zeros and lse = -inf. deterministic=True: bit-identical gradients run to
    run (the reference level always is).
    """
    op = "flash_attn"
    _check_qkv(op, q, k, v, 4, "[batch, seqlen, heads, head_dim]")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"{op}: q and k must share batch, got {q.shape[0]} and {k.shape[0]}")
    _check_heads(op, q, k, v, 2)
    window, softcap = _check_options(op, causal, window, softmax_scale, softcap)
    if not isinstance(deterministic, bool):
        raise TypeError(f"{op}: deterministic must be a bool, got {type(deterministic).__name__}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    lse_grad = return_lse and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    out, lse = _run(op, q, k, v, scale, causal, window, softcap, k.shape[1] - q.shape[1], backend, lse_grad,
                    deterministic)
    return (out, lse) if return_lse else out


def _check_cu_seqlens(op: str, name: str, cu, total: int, max_seqlen, device) -> torch.Tensor:
    if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 1:
        what = f"{cu.dtype} of shape {tuple(cu.shape)}" if isinstance(cu, torch.Tensor) else type(cu).__name__
        raise ValueError(f"{op}: {name} must be a 1-D int32 tensor [batch + 1], got {what}")
    if cu.device != device:
        raise ValueError(f"{op}: {name} must be on {device} with q, got {cu.device}")
    if not isinstance(max_seqlen, int) or isinstance(max_seqlen, bool) or max_seqlen < 0:
        raise ValueError(f"{op}: max_{name[3:]} must be an int >= 0, got {max_seqlen!r}")
    host = cu.cpu()  # the check reads the offsets (one copy to the host)
    lengths = host[1:] - host[:-1]
    if host[0].item() != 0 or host[-1].item() != total or (lengths < 0).any():
        raise ValueError(f"{op}: {name} must rise from 0 to {total} (the packed length) without decreasing, got "
                         f"{host.tolist()[:8]}{' ...' if host.numel() > 8 else ''}")  # fmt: skip
    if lengths.numel() and lengths.max().item() > max_seqlen:
        raise ValueError(f"{op}: max_{name[3:]}={max_seqlen} is below the longest sequence ({lengths.max().item()})")
    return host


def flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                      causal: bool = False, window=(-1, -1), softmax_scale: Optional[float] = None,
                      softcap: float = 0.0, return_lse: bool = False, deterministic: bool = False, *,
                      backend=None):  # fmt: skip
    """flash_attn over packed sequences: q [total_q, heads_q, head_dim], k, v [total_k, heads_kv,
    head_dim]; sequence b is rows cu_seqlens_q[b]:cu_seqlens_q[b + 1] of q against rows
    cu_seqlens_k[b]:cu_seqlens_k[b + 1] of k and v (int32 offsets from 0, a sequence may be empty).
    Every option as in flash_attn, per sequence (causal aligned bottom-right in each). Returns out
    like q, or (out, lse) with lse fp32 [heads_q, total_q]."""
    op = "flash_attn_varlen"
    _check_qkv(op, q, k, v, 3, "[total, heads, head_dim]")
    _check_heads(op, q, k, v, 1)
    window, softcap = _check_options(op, causal, window, softmax_scale, softcap)
    cq = _check_cu_seqlens(op, "cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, q.device)
    ck = _check_cu_seqlens(op, "cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k, q.device)
    if cq.numel() != ck.numel():
        raise ValueError(f"{op}: cu_seqlens_q and cu_seqlens_k must hold one batch, got {cq.numel() - 1} and "
                         f"{ck.numel() - 1} sequences")  # fmt: skip
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    facts = (q.dtype, q.shape[-1])
    requested = (backend or "auto") if registry.is_compiling() else requested_backend(backend)
    if return_lse and grad and requested not in ("auto", "reference"):
        raise BackendUnavailable(f"{op}: a gradient through the returned lse needs backend='reference' "
                                 f"(the {requested} level's backward takes d(out) only)")  # fmt: skip
    name = LEVELS.resolve(backend, q.device, *facts)
    if name == "reference" or (return_lse and grad) or q.shape[0] == 0 or k.shape[0] == 0:
        out, lse = _varlen_reference(q, k, v, cq, ck, scale, causal, window, softcap)
    else:
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        args = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, *window, softcap)
        if grad:
            out, lse = ATTENTION_VARLEN.apply(q, k, v, *args, deterministic, name)
        else:
            out, lse = LEVELS.impl(name, "attention_varlen_fwd")(q, k, v, *args)
    return (out, lse) if return_lse else out


def _varlen_reference(q, k, v, cq, ck, scale, causal, window, softcap):
    """Each sequence through the reference formula (autograd differentiates it to any order)."""
    outs, lses = [], []
    for b in range(cq.numel() - 1):
        q0, q1, k0, k1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        o, lse = reference.attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], scale=scale, causal=causal,
                                     window=window, softcap=softcap)  # fmt: skip
        outs.append(o[0])
        lses.append(lse[0])
    out = torch.cat(outs) if outs else q.new_empty((0,) + tuple(q.shape[1:]))
    lse = torch.cat(lses, dim=-1) if lses else torch.empty(q.shape[1], 0, device=q.device)
    return out, lse


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False, *, backend=None):  # fmt: skip
    """torch.nn.functional.scaled_dot_product_attention where the options overlap: [batch, heads,
    seqlen, head_dim] tensors with any strides torch gives (no copies); is_causal aligned top-left
    as torch's; enable_gqa for heads_q a multiple of heads_kv. A dense attn_mask or dropout raises
    ValueError naming the option (use flash_attn's causal / window for the masks it serves)."""
    op = "scaled_dot_product_attention"
    if attn_mask is not None:
        raise ValueError(f"{op}: attn_mask is not supported (a dense mask): kp-attention serves causal "
                         "(is_causal=True) and sliding windows (flash_attn's window=) only")  # fmt: skip
    if dropout_p != 0.0:
        raise ValueError(f"{op}: dropout_p={dropout_p!r} is not supported: kp-attention has no dropout")
    _check_qkv(op, query, key, value, 4, "[batch, heads, seqlen, head_dim]")
    if not isinstance(is_causal, bool):
        raise TypeError(f"{op}: is_causal must be a bool, got {type(is_causal).__name__}")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"{op}: query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True")
    if key.shape[0] != query.shape[0]:
        raise ValueError(f"{op}: query and key must share batch, got {query.shape[0]} and {key.shape[0]}")
    _check_heads(op, query, key, value, 1)
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        raise ValueError(f"{op}: scale must be a finite number or None, got {scale!r}")
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    out, _ = _run(op, query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), s, is_causal, (-1, -1), 0.0,
                  0, backend, False)  # fmt: skip
    return out.transpose(1, 2)
