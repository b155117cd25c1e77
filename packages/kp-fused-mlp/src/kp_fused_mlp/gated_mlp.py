"""gated_mlp: GatedMLP's training call as one op, y = down(act(x Wg^T + bg) * (x Wu^T + bu)), so that
its backward can fuse across the two projections: at the cuda level the down projection's input
gradient dh and the gated activation's backward are one GEMM (dy Wd with dP = [dh up act'(gate) |
dh act(gate)] in its epilogue; kp/gemm/sm90_dgated.h), which never writes dh. Unfused, one GEMM
writes dh [M, I] and an elementwise pass reads it with P [M, 2I] and writes dP: the fused epilogue
moves neither dh's writes nor its reads (Llama-3-8B at 8192 tokens: 0.47 GB a step, and a pass).

The forward is gated_linear's level impl (it saves P) then torch's F.linear; the backward at the
cuda level is _cuda.gated_mlp_bwd, at another level the same steps unfused (dh by torch, then that
level's gated_linear_bwd). GatedMLP calls it for calls that need a gradient where gated_linear runs
at the cuda level, its down projection is a plain nn.Linear and the hidden size is at most 4096
(past it the fused GEMM lost; csrc/gated_table.h, modules.py); the levels are gated_linear's
(gated.LEVELS).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from kp_core import registry
from kp_core.op import AutogradOp, saveable

from . import gated


def _fwd(x, w, bias, wd, bd, activation, backend):
    h, pre = gated.LEVELS.impl(backend, "gated_linear_fwd")(x, w, bias, activation, True)
    return F.linear(h, wd, bd), h, pre


def _bwd(dy, x, w, wd, h, pre, activation, need_dx, need_dw, need_db, need_dwd, need_dbd, backend):
    if backend == "cuda":
        return gated.LEVELS.impl("cuda", "gated_mlp_bwd")(
            dy, x, w, wd, h, pre, activation, need_dx, need_dw, need_db, need_dwd, need_dbd
        )
    dx = dw = db = None
    if need_dx or need_dw or need_db:
        dh = dy @ wd
        dx, dw, db = gated.LEVELS.impl(backend, "gated_linear_bwd")(dh, x, w, pre, activation, need_dx, need_dw, need_db)
    return dx, dw, db, (torch.mm(dy.t(), h) if need_dwd else None), (dy.sum(0) if need_dbd else None)


def _fwd_fake(x, w, bias, wd, bd, activation, backend):
    m, inter = x.shape[0], w.shape[0] // 2
    return x.new_empty((m, wd.shape[0])), x.new_empty((m, inter)), x.new_empty((m, 2 * inter))


def _bwd_fake(dy, x, w, wd, h, pre, activation, need_dx, need_dw, need_db, need_dwd, need_dbd, backend):
    def maybe(need, shape):
        return x.new_empty(shape) if need else x.new_empty((0,))

    return (maybe(need_dx, x.shape), maybe(need_dw, w.shape), maybe(need_db, (w.shape[0],)),
            maybe(need_dwd, wd.shape), maybe(need_dbd, (wd.shape[0],)))  # fmt: skip


def _setup_context(ctx, inputs, output):
    x, w, bias, wd, bd, activation, backend = inputs
    _, h, pre = output
    ctx.save_for_backward(saveable(x), saveable(w), saveable(wd), h, pre)
    ctx.meta = (activation, backend)
    g = ctx.needs_input_grad
    ctx.needs = (g[0], g[1], bias is not None and g[2], g[3], bd is not None and g[4])
    ctx.mark_non_differentiable(h, pre)
    ctx.set_materialize_grads(False)


def _backward(ctx, run_bwd, dy, dh, dpre):
    x, w, wd, h, pre = ctx.saved_tensors
    activation, backend = ctx.meta
    if dy is None or not any(ctx.needs):
        return (None,) * 7
    twice = torch.is_grad_enabled() and any(t.requires_grad for t in (dy, x, w, wd))
    with torch.no_grad():
        grads = run_bwd(dy, x, w, wd, h, pre, activation, *ctx.needs, backend)
    grads = tuple(g if need else None for g, need in zip(grads, ctx.needs))
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(grads, f"kp_fused_mlp.GatedMLP: the {backend} backend")
    return (*grads, None, None)


GATED_MLP = AutogradOp(
    "kp_fused_mlp",
    gated.LEVELS,
    fwd_schema="gated_mlp_fwd(Tensor x, Tensor w, Tensor? bias, Tensor wd, Tensor? bd, str activation, str backend) "
    "-> (Tensor, Tensor, Tensor)",
    fwd_fake=_fwd_fake,
    bwd_schema="gated_mlp_bwd(Tensor dy, Tensor x, Tensor w, Tensor wd, Tensor h, Tensor pre, str activation, "
    "bool need_dx, bool need_dw, bool need_db, bool need_dwd, bool need_dbd, str backend) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    bwd_fake=_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
    fwd=_fwd,
    bwd=_bwd,
)


def gated_mlp(x: torch.Tensor, w: torch.Tensor, bias, wd: torch.Tensor, bd, activation: str, backend: str,
              compiling: bool) -> torch.Tensor:  # fmt: skip
    """y [M, H] of rows x [M, H'] (checked by the caller: gated_linear's checks, then the down
    projection's weight [H, I] and bias [H] of x's dtype and device), under autograd."""
    if compiling:
        return GATED_MLP.fwd_op(x, w, bias, wd, bd, activation, backend)[0]
    return GATED_MLP.apply(x, w, bias, wd, bd, activation, backend)[0]
