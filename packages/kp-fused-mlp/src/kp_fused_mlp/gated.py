"""gated_linear: h = act(x Wg^T + bg) * (x Wu^T + bu), the first half of a gated MLP (Llama's
down(silu(gate(x)) * up(x))), with the gate and up projections in one packed weight
w_gate_up = [Wg; Wu] ([2I, H], gate rows then up rows) and the gated activation in the GEMM's
epilogue: one pass writes the [M, I] intermediate, never the [M, 2I] projections.

Levels: reference (plain PyTorch, fp32 math rounded once; differentiable to any order), triton
(one kernel computing the gate and up tiles of the same columns, with a backward: an elementwise
kernel and linear_act's tl.dot GEMM), cuda (float16/bfloat16: for inference calls of at most 32
rows the decode kernel of csrc/decode_gemv.cu, the gate and up rows of each output column in one
warp's accumulators, sm80+; otherwise kp's sm90a GEMM against a cached copy of the packed weight
with its gate and up rows interleaved in 8-row blocks, the gated activation in its own epilogue,
I and H multiples of 8, on an H100/H200; its backward is the Triton level's, from the
pre-activations the cuda forward saves in the same layout).

Built on kp_core.op like glu.py: two registered ops (forward, backward) with fakes and autograd.
The forward op returns (h, P): P = [gate_pre | up_pre] [M, 2I] when a gradient is needed (the
backward's input; why saved rather than recomputed: triton/gated.py), else an empty tensor.
"""
from __future__ import annotations

import torch
from kp_core import registry
from kp_core.op import AutogradOp, Levels, as_rows, empty, saveable

from . import reference
from .linear import check_operands, gated_decodes, resolve_level

GATED_ACTIVATIONS = tuple(reference.GATES)  # "silu", "gelu_tanh"


def _cuda_supports(forced, device_type, device_index, *facts):
    return LEVELS.module("cuda").gated_linear_supports(forced, device_type, device_index, *facts)


LEVELS = Levels(
    "kp_fused_mlp.gated_linear",
    {"cuda": "kp_fused_mlp._cuda", "triton": "kp_fused_mlp.triton.gated", "reference": "kp_fused_mlp.reference"},
    supports={"cuda": _cuda_supports},
)
"""Facts a level's `supports` reads: device type and index, dtype, needs grad, I, H, decode (the
cuda level's decode kernels serve it: linear.gated_decodes, at most _cuda.DECODE_GATED_MAX_M rows)."""


def describe_backends() -> list:
    """Lines for `python -m kp_core`: what `auto` picks for a bf16 Llama-3-8B training call and a
    decode (inference, 1-16 tokens) call."""
    return [f"{line} (training)" for line in LEVELS.describe(torch.bfloat16, True, 14336, 4096, False)] + [
        f"{line} (decode)" for line in LEVELS.describe(torch.bfloat16, False, 14336, 4096, True)
    ]


def level(x: torch.Tensor, w_gate_up: torch.Tensor, bias, backend) -> tuple:
    """(level, needs grad, compiling) of a gated_linear call (resolve_level with its facts)."""
    two_i, hidden = w_gate_up.shape
    return resolve_level(LEVELS, backend, (x, w_gate_up, bias), two_i // 2, hidden, gated_decodes(x, hidden))


# ---------------------------------------------------------------------------------------------
# The registered ops: x [M, H] rows (any strides), w [2I, H], bias [2I] or None; M, I, H > 0.


def _fwd_fake(x, w, bias, activation, save_pre, backend):
    m, inter = x.shape[0], w.shape[0] // 2
    return x.new_empty((m, inter)), (x.new_empty((m, 2 * inter)) if save_pre else empty(x))


def _bwd_fake(dh, x, w, pre, activation, need_dx, need_dw, need_db, backend):
    return (
        x.new_empty(x.shape) if need_dx else empty(x),
        w.new_empty(w.shape) if need_dw else empty(x),
        w.new_empty((w.shape[0],)) if need_db else empty(x),
    )


def _setup_context(ctx, inputs, output):
    x, w, bias, activation, save_pre, backend = inputs
    _, pre = output
    ctx.save_for_backward(saveable(x), saveable(w), pre)
    ctx.meta = (activation, save_pre, backend)
    ctx.needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2])
    if pre is not None:
        ctx.mark_non_differentiable(pre)
    ctx.set_materialize_grads(False)


def _backward(ctx, run_bwd, dh, dpre):
    x, w, pre = ctx.saved_tensors
    activation, save_pre, backend = ctx.meta
    need_dx, need_dw, need_db = ctx.needs
    if dh is None or not any(ctx.needs):
        return None, None, None, None, None, None
    if not save_pre:
        raise RuntimeError(
            "kp_fused_mlp.gated_linear: the forward ran with save_pre=False, so the backward has no "
            "pre-activations; call gated_linear() (it saves them when a gradient is needed)"
        )
    twice = torch.is_grad_enabled() and any(t.requires_grad for t in (dh, x, w))
    with torch.no_grad():
        dx, dw, db = run_bwd(as_rows(dh, dh.shape[-1]), x, w, pre, activation, need_dx, need_dw, need_db, backend)
    grads = (dx if need_dx else None, dw if need_dw else None, db if need_db else None)
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(grads, f"kp_fused_mlp.gated_linear: the {backend} backend")
    return (*grads, None, None, None)


GATED_LINEAR = AutogradOp(
    "kp_fused_mlp",
    LEVELS,
    fwd_schema="gated_linear_fwd(Tensor x, Tensor w, Tensor? bias, str activation, bool save_pre, str backend) "
    "-> (Tensor, Tensor)",
    fwd_fake=_fwd_fake,
    bwd_schema="gated_linear_bwd(Tensor dh, Tensor x, Tensor w, Tensor pre, str activation, bool need_dx, "
    "bool need_dw, bool need_db, str backend) -> (Tensor, Tensor, Tensor)",
    bwd_fake=_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
)


# ---------------------------------------------------------------------------------------------
# Checks and the public function


def check(x, w, activation, bias) -> None:
    check_operands("gated_linear", x, w, bias, weight_name="w_gate_up", in_name="hidden", rows_multiple=2,
                   layout="[2 * intermediate, hidden={k}] (the gate rows, then the up rows)",
                   bias_what="2 * intermediate: the gate's, then the up's")  # fmt: skip
    if activation not in GATED_ACTIVATIONS:
        raise ValueError(
            f"gated_linear: unknown activation {activation!r}; choose one of {', '.join(GATED_ACTIVATIONS)}"
        )


def gated_linear(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    activation: str = "silu",
    bias: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """act(x Wg^T + bg) * (x Wu^T + bu), computed with fp32 accumulation and rounded once to x's dtype.

    x: [..., hidden]; w_gate_up: [2 * intermediate, hidden], the gate projection's rows then the up
    projection's (torch.cat([gate_proj.weight, up_proj.weight])); bias: [2 * intermediate] (the
    same order) or None; one dtype for all (float32, float16, bfloat16). `activation`: "silu"
    (SwiGLU) or "gelu_tanh" (GeGLU with gelu's tanh approximation). Returns [..., intermediate].
    Differentiable at every level (first derivatives; second ones at the reference level).

    The cuda level needs float16/bfloat16, an sm_90 GPU, and intermediate and hidden multiples of 8
    (TMA moves 16-byte rows; a named backend="cuda" says what to pad to). It keeps a private copy
    of w_gate_up with the gate and up rows interleaved (one extra weight-sized allocation per
    weight, freed with it; rebuilt after an in-place update, which its version counter shows: a
    write through `.data` does not, and kp_fused_mlp._cuda.clear_gated_weight_cache() drops the copies).
    `backend`: "auto" (default), "cuda", "triton" or "reference".
    """
    check(x, w_gate_up, activation, bias)
    name, grad, compiling = level(x, w_gate_up, bias, backend)
    two_i, hidden = w_gate_up.shape
    inter = two_i // 2
    if name == "reference" or x.numel() == 0 or inter == 0:  # empty (M, I or H = 0): nothing to launch
        return reference.gated_linear(x, w_gate_up, bias, activation)
    rows = as_rows(x, hidden)
    if compiling:
        h, _ = GATED_LINEAR.fwd_op(rows, w_gate_up, bias, activation, grad, name)
    elif grad:
        h, _ = GATED_LINEAR.apply(rows, w_gate_up, bias, activation, True, name)
    else:
        h, _ = LEVELS.impl(name, "gated_linear_fwd")(rows, w_gate_up, bias, activation, False)
    return h.view(*x.shape[:-1], inter)
