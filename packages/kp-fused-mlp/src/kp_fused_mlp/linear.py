"""linear_act: y = act(x @ weight^T + bias), with the bias and the activation applied in the GEMM's
epilogue (one pass over y instead of three). Activations: none, relu, gelu (erf), gelu_tanh, silu.

Levels: reference (plain PyTorch, fp32 math rounded once; differentiable), cuda (kp's sm90a GEMM:
float16/bfloat16 on an H100/H200, forward and backward), triton (a tiled tl.dot GEMM with the same
epilogue: float32/float16/bfloat16, any shape and strides, forward only; on CPU only when named,
under TRITON_INTERPRET=1).

Built on kp_core.op like gated.py. Two kinds of call:
* no gradient: the registered op `torch.ops.kp_fused_mlp.linear_act` (what torch.compile traces),
  or the level's function directly when eager;
* a gradient (cuda level): an AutogradOp, `linear_act_train` -> (y, Z) and `linear_act_bwd`. The
  forward saves Z = x W^T + b through the GEMM epilogue's aux store where the backward reads it
  (gelu, gelu_tanh, silu; relu's backward reads y, none's nothing); the backward is dP = dY act'(Z)
  (elementwise, with the bias gradient as fp32 column sums) and two GEMMs reading dP, W and x in
  place: dx = dP W, dW = dP^T x. The reference level's public path is plain autograd instead (any
  order, forward mode); its registered ops compute what the cuda level does, in torch.
"""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import registry
from kp_core.dtypes import FLOATING
from kp_core.op import AutogradOp, Levels, as_rows, check_tensor, empty, saveable, triton_supports

from . import reference
from ._cuda import DECODE_GATED_MAX_M, DECODE_MAX_M, decode_serves_linear

ACTIVATIONS = tuple(reference.ACTIVATIONS)  # "none", "relu", "gelu", "gelu_tanh", "silu"


def _cuda_supports(forced, device_type, device_index, *facts):
    return LEVELS.module("cuda").linear_act_supports(forced, device_type, device_index, *facts)


def _triton_supports(forced, device_type, device_index, dtype, grad, n, k, decode=False):
    if grad:
        return ("the triton level of linear_act has no backward yet (inference only); "
                "backend='auto' or 'reference' differentiates it")  # fmt: skip
    return triton_supports(forced, device_type)


LEVELS = Levels(
    "kp_fused_mlp.linear_act",
    {"cuda": "kp_fused_mlp._cuda", "triton": "kp_fused_mlp.triton.linear", "reference": "kp_fused_mlp.reference"},
    supports={"cuda": _cuda_supports, "triton": _triton_supports},
)
"""Facts a level's `supports` reads: device type and index, dtype, needs grad, N, K, decode (the
cuda level's decode kernels serve the call, not the GEMM: linear_decodes)."""


def describe_backends() -> list:
    """Lines for `python -m kp_core`: what `auto` picks for a bf16 4096 x 4096 inference call
    (the GEMM's size class and the decode kernel's)."""
    return [f"{line} (GEMM)" for line in LEVELS.describe(torch.bfloat16, False, 4096, 4096, False)] + [
        f"{line} (decode)" for line in LEVELS.describe(torch.bfloat16, False, 4096, 4096, True)
    ]


def is_decode(x: torch.Tensor, k: int) -> bool:
    """Whether a call of x [..., K] has at most the cuda level's DECODE_MAX_M rows (the `decode`
    fact of gated_linear)."""
    return x.numel() <= k * DECODE_MAX_M


def gated_decodes(x: torch.Tensor, k: int) -> bool:
    """gated_linear's `decode` fact: its cuda level runs x [..., K] on the decode kernels (at most
    _cuda.DECODE_GATED_MAX_M rows), not its gated GEMM."""
    return x.numel() <= k * DECODE_GATED_MAX_M


def linear_decodes(x: torch.Tensor, n: int, k: int) -> bool:
    """linear_act's `decode` fact: the cuda level runs x [..., K] x [N, K]^T on its decode kernels
    (_cuda.decode_serves_linear: by M, N and K), not its GEMM."""
    return x.numel() <= k * DECODE_MAX_M and (k == 0 or decode_serves_linear(x.numel() // k, n, k))


# ---------------------------------------------------------------------------------------------
# The registered ops: [M, K] rows in, [M, N] out; M, N, K > 0. What torch.compile traces and
# opcheck checks. `linear_act` serves calls without gradients; the AutogradOp the others.


def _op_impl(x, weight, bias, activation, backend):
    return LEVELS.impl(backend, "linear_act_fwd")(x, weight, bias, activation)


def _op_fake(x, weight, bias, activation, backend):
    return x.new_empty((x.shape[0], weight.shape[0]))


LINEAR_ACT = registry.define(
    "kp_fused_mlp",
    "linear_act(Tensor x, Tensor weight, Tensor? bias, str activation, str backend) -> Tensor",
    _op_impl,
    _op_fake,
)

# The activations whose backward reads the saved pre-activation Z (reference.SAVES_PRE).
SAVES_PRE = reference.SAVES_PRE


def _train_fake(x, weight, bias, activation, backend):
    m, n = x.shape[0], weight.shape[0]
    return x.new_empty((m, n)), (x.new_empty((m, n)) if activation in SAVES_PRE else empty(x))


def _bwd_fake(dy, x, weight, pre, activation, need_dx, need_dw, need_db, backend):
    m, n = dy.shape
    return (
        dy.new_empty((m, weight.shape[1])) if need_dx else empty(dy),
        dy.new_empty((n, x.shape[1])) if need_dw else empty(dy),
        dy.new_empty((n,)) if need_db else empty(dy),
    )


def _setup_context(ctx, inputs, output):
    x, weight, bias, activation, backend = inputs
    y, pre = output
    ctx.needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2])
    need_dx, need_dw, _ = ctx.needs
    # What the backward reads, only: W for dx, x for dW; Z, or y for relu (relu'(z) = [y > 0]).
    saved_pre = y if activation == "relu" else (pre if activation in SAVES_PRE else None)
    ctx.save_for_backward(saveable(x) if need_dw else None, saveable(weight) if need_dx else None, saved_pre)
    ctx.meta = (activation, backend)
    if pre is not None:
        ctx.mark_non_differentiable(pre)
    ctx.set_materialize_grads(False)


def _backward(ctx, run_bwd, dy, dpre):
    x, weight, pre = ctx.saved_tensors
    activation, backend = ctx.meta
    need_dx, need_dw, need_db = ctx.needs
    if dy is None or not any(ctx.needs):
        return None, None, None, None, None
    twice = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (dy, x, weight))
    with torch.no_grad():
        placeholder = dy.new_empty((0,))
        dx, dw, db = run_bwd(as_rows(dy, dy.shape[-1]), placeholder if x is None else x,
                             placeholder if weight is None else weight, placeholder if pre is None else pre,
                             activation, need_dx, need_dw, need_db, backend)  # fmt: skip
    grads = (dx if need_dx else None, dw if need_dw else None, db if need_db else None)
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(grads, f"kp_fused_mlp.linear_act: the {backend} backend")
    return (*grads, None, None)


LINEAR_ACT_GRAD = AutogradOp(
    "kp_fused_mlp",
    LEVELS,
    fwd_schema="linear_act_train(Tensor x, Tensor weight, Tensor? bias, str activation, str backend) "
    "-> (Tensor, Tensor)",
    fwd_fake=_train_fake,
    bwd_schema="linear_act_bwd(Tensor dy, Tensor x, Tensor weight, Tensor pre, str activation, bool need_dx, "
    "bool need_dw, bool need_db, str backend) -> (Tensor, Tensor, Tensor)",
    bwd_fake=_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
)


# ---------------------------------------------------------------------------------------------
# Checks and the public function


def resolve_level(levels: Levels, backend, tensors: tuple, *facts) -> tuple:
    """(level, needs grad, compiling) of a GEMM op's call: x = tensors[0] gives the device and
    dtype; the facts are (needs grad: any of `tensors` requires it, *facts). Resolved at trace
    time under torch.compile."""
    x = tensors[0]
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    if registry.is_compiling():
        return levels.traced(backend, x.device, x.dtype, grad, *facts), grad, True
    return levels.resolve(backend, x.device, x.dtype, grad, *facts), grad, False


def check_operands(op: str, x, weight, bias, *, weight_name: str, in_name: str, layout: str, bias_what: str,
                   rows_multiple: int = 1) -> None:  # fmt: skip
    """A GEMM op's x [..., K], weight [N, K] (N a multiple of rows_multiple) and bias [N] or None:
    tensors of one float dtype and device, or a clear TypeError/ValueError. `layout` describes
    the weight's shape, with {k} for K."""
    check_tensor(op, "x", x, dtypes=FLOATING)
    check_tensor(op, weight_name, weight, like=x, dtypes=FLOATING)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension (..., {in_name})")
    if weight.dim() != 2 or weight.shape[1] != x.shape[-1] or weight.shape[0] % rows_multiple:
        raise ValueError(f"{op}: {weight_name} must be {layout.format(k=x.shape[-1])}, got shape {tuple(weight.shape)}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{op}: x is {x.dtype} but {weight_name} is {weight.dtype}; give them one dtype")
    if bias is not None:
        check_tensor(op, "bias", bias, like=x, dtypes=FLOATING, shape=(weight.shape[0],), what_shape=f" ({bias_what})")
        if bias.dtype != x.dtype:
            raise TypeError(f"{op}: x is {x.dtype} but bias is {bias.dtype}; give them one dtype")


def _check(x, weight, bias, activation) -> None:
    check_operands("linear_act", x, weight, bias, weight_name="weight", in_name="in_features",
                   layout="[out_features, in_features={k}] (nn.Linear's layout)", bias_what="out_features")  # fmt: skip
    if activation not in reference.ACTIVATIONS:
        raise ValueError(f"linear_act: unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")


def level(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], backend) -> tuple:
    """(level, needs grad, compiling) of a linear_act call (resolve_level with its facts)."""
    n, k = weight.shape
    return resolve_level(LEVELS, backend, (x, weight, bias), n, k, linear_decodes(x, n, k))


def linear_act(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: str = "none",
    *,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """act(x @ weight^T + bias), computed in fp32 and rounded once to x's dtype.

    x: [..., in_features]; weight: [out_features, in_features] (nn.Linear's); bias: [out_features]
    or None; one dtype for all (float32, float16, bfloat16). `activation`: "none", "relu", "gelu",
    "gelu_tanh" (gelu with approximate="tanh") or "silu". Returns [..., out_features].

    The cuda level needs float16/bfloat16. Without a gradient, up to 8 rows, 16 where out_features
    <= in_features (`_cuda.decode_serves_linear`), it runs its decode kernels (sm80 or newer,
    in_features a multiple of 8: it streams the weight in 16-byte packets); more rows, and calls
    that need gradients, run kp's GEMM (an sm_90 GPU, in_features and out_features multiples of 8:
    TMA moves 16-byte rows), which differentiates x, weight and bias (first derivatives). A named
    backend="cuda" says what to pad to. The triton level takes any float dtype, shape and strides
    on a GPU, and no gradient.
    `backend`: "auto" (default), "cuda", "triton" or "reference".
    """
    _check(x, weight, bias, activation)
    name, grad, compiling = level(x, weight, bias, backend)
    n, k = weight.shape
    if name == "reference" or x.numel() == 0 or n == 0:  # empty (M, N or K = 0): nothing to launch
        return reference.linear_act_fwd(x, weight, bias, activation)
    rows = as_rows(x, k)
    if compiling:
        if grad:
            y, _ = LINEAR_ACT_GRAD.fwd_op(rows, weight, bias, activation, name)
        else:
            y = LINEAR_ACT(rows, weight, bias, activation, name)
    elif grad:
        y, _ = LINEAR_ACT_GRAD.apply(rows, weight, bias, activation, name)
    else:
        y = LEVELS.impl(name, "linear_act_fwd")(rows, weight, bias, activation)
    return y.view(*x.shape[:-1], n)
