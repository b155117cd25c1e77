"""Gated linear units. SwiGLU: y = silu(gate) * up, on two tensors or one packed [..., 2 * hidden] tensor.

Built on kp_core.op (docs/adding-an-op.md walks through this file): the levels, two registered
ops with their fakes and autograd, the checks, and the public function.
"""
from __future__ import annotations

import torch
from kp_core import registry
from kp_core.dtypes import FLOATING
from kp_core.op import AutogradOp, Levels, as_rows, check_tensor

LEVELS = Levels(
    "kp_fused_mlp",
    {"cuda": "kp_fused_mlp._cuda", "triton": "kp_fused_mlp.triton.glu", "reference": "kp_fused_mlp.reference"},
)
"""Facts a level's `supports` reads: device type and index, dtype."""


def describe_backends() -> list:
    """Lines for `python -m kp_core`: what `auto` picks for bf16 on each device."""
    return LEVELS.describe(torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# The registered ops: what torch.compile traces and opcheck checks. Inputs are [rows, cols] with a
# unit column stride (any row stride); outputs are contiguous.


def _fwd_fake(gate, up, backend):
    return gate.new_empty(gate.shape)


def _bwd_fake(dy, gate, up, backend):
    return gate.new_empty(gate.shape), up.new_empty(up.shape)


def _setup_context(ctx, inputs, output):
    gate, up, backend = inputs
    ctx.save_for_backward(gate, up)
    ctx.backend = backend


def _backward(ctx, run_bwd, dy):
    gate, up = ctx.saved_tensors
    twice = torch.is_grad_enabled() and (dy.requires_grad or gate.requires_grad or up.requires_grad)
    with torch.no_grad():
        grads = run_bwd(as_rows(dy, dy.shape[-1]), gate, up, ctx.backend)
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(grads, f"kp_fused_mlp.swiglu: the {ctx.backend} backend")
    return (*grads, None)


SWIGLU = AutogradOp(
    "kp_fused_mlp",
    LEVELS,
    fwd_schema="swiglu_fwd(Tensor gate, Tensor up, str backend) -> Tensor",
    fwd_fake=_fwd_fake,
    bwd_schema="swiglu_bwd(Tensor dy, Tensor gate, Tensor up, str backend) -> (Tensor, Tensor)",
    bwd_fake=_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
)


# ---------------------------------------------------------------------------------------------
# Checks and the public function


def _split(gate, up):
    """(gate, up) of one shape, dtype and device; from a packed tensor when up is None."""
    check_tensor("swiglu", "gate" if up is not None else "gate_up", gate, dtypes=FLOATING)
    if up is None:
        if gate.dim() == 0 or gate.shape[-1] % 2:
            raise ValueError(
                f"swiglu: a packed gate_up needs an even last dimension (gate and up halves), got shape {tuple(gate.shape)}"
            )
        hidden = gate.shape[-1] // 2
        return gate[..., :hidden], gate[..., hidden:]
    check_tensor("swiglu", "up", up, like=gate, dtypes=FLOATING, shape=gate.shape, what_shape=" (gate's shape)")
    if up.dtype != gate.dtype:
        raise TypeError(f"swiglu: gate is {gate.dtype} but up is {up.dtype}; give them one dtype")
    if gate.dim() == 0:
        raise ValueError("swiglu: gate and up must have at least one dimension")
    return gate, up


def swiglu(gate: torch.Tensor, up: torch.Tensor = None, *, backend: str = None) -> torch.Tensor:
    """silu(gate) * up, computed in fp32 and rounded once to the input dtype.

    `swiglu(gate, up)` takes two tensors of one shape; `swiglu(gate_up)` one tensor whose last
    dimension holds the gate half then the up half (a packed gate-up projection's output) and
    returns [..., hidden]. Any shape and layout; inputs are never written. `backend`: "auto"
    (default), "cuda", "triton" or "reference" (see kp_core.use_backend).
    """
    gate, up = _split(gate, up)
    shape, cols = gate.shape, gate.shape[-1]
    if gate.numel() == 0:  # nothing to launch; the reference level gives the right shape and grad
        return LEVELS.impl("reference", "swiglu_fwd")(gate, up)
    g, u = as_rows(gate, cols), as_rows(up, cols)
    grad = torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad)
    if registry.is_compiling():
        y = SWIGLU.fwd_op(g, u, LEVELS.traced(backend, gate.device, gate.dtype))
    else:
        name = LEVELS.resolve(backend, gate.device, gate.dtype)
        if grad and name != "reference":
            y = SWIGLU.apply(g, u, name)
        else:  # plain PyTorch at the reference level: autograd differentiates it to any order
            y = LEVELS.impl(name, "swiglu_fwd")(g, u)
    return y.view(shape)
