"""Gated linear units: y = act(gate) * up, on two tensors or one packed [..., 2 * hidden] tensor.
SwiGLU (act = silu) and GeGLU (act = gelu, exact or tanh), one op family for both.

Built on kp_core.op (docs/adding-an-op.md walks through this file): the levels, two registered
ops with their fakes and autograd, the checks, and the public function.
"""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import registry
from kp_core.dtypes import FLOATING
from kp_core.op import AutogradOp, Levels, as_rows, check_tensor, empty

LEVELS = Levels(
    "kp_fused_mlp",
    {"cuda": "kp_fused_mlp._cuda", "triton": "kp_fused_mlp.triton.glu", "reference": "kp_fused_mlp.reference"},
)
"""Facts a level's `supports` reads: device type and index, dtype."""


def describe_backends() -> list:
    """Lines for `python -m kp_core`: what `auto` picks for bf16 on each device."""
    return LEVELS.describe(torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# The registered ops: what torch.compile traces and opcheck checks. `x` is gate [rows, cols] with
# `up` of its shape, or, with up None, the packed gate_up [rows, 2 * cols] (gate half, then up
# half), read in place. Inputs have a unit column stride (any row stride); outputs are contiguous.
# The backward of a packed call returns one [rows, 2 * cols] gradient (and an empty second output).


def _halves(x, up):
    if up is not None:
        return x, up
    cols = x.shape[-1] // 2
    return x[:, :cols], x[:, cols:]


def grad_outputs(gate, up, packed: bool):
    """(dgate, dup, what the level's glu_bwd returns) for a kernel level to write: two [rows, cols]
    tensors, or the two halves of one packed [rows, 2 * cols] gradient, returned as (dgate_up, None)."""
    rows, cols = gate.shape
    if packed:
        dgate_up = torch.empty((rows, 2 * cols), dtype=gate.dtype, device=gate.device)
        return dgate_up[:, :cols], dgate_up[:, cols:], (dgate_up, None)
    dgate = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    dup = torch.empty((rows, cols), dtype=up.dtype, device=up.device)
    return dgate, dup, (dgate, dup)


def _fwd(x, up, activation, backend):
    return LEVELS.impl(backend, "glu_fwd")(*_halves(x, up), activation)


def _bwd(dy, x, up, activation, backend):
    return LEVELS.impl(backend, "glu_bwd")(dy, *_halves(x, up), activation, up is None)


def _fwd_fake(x, up, activation, backend):
    return x.new_empty(_halves(x, up)[0].shape)


def _bwd_fake(dy, x, up, activation, backend):
    return x.new_empty(x.shape), empty(x) if up is None else up.new_empty(up.shape)


def _setup_context(ctx, inputs, output):
    x, up, activation, backend = inputs
    ctx.save_for_backward(x, up)
    ctx.activation, ctx.backend = activation, backend


def _backward(ctx, run_bwd, dy):
    x, up = ctx.saved_tensors
    twice = torch.is_grad_enabled() and (
        dy.requires_grad or x.requires_grad or (up is not None and up.requires_grad)
    )
    with torch.no_grad():
        dx, dup = run_bwd(as_rows(dy, dy.shape[-1]), x, up, ctx.activation, ctx.backend)
    grads = (dx,) if up is None else (dx, dup)
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(grads, f"kp_fused_mlp.{_NAMES[ctx.activation]}: the {ctx.backend} backend")
    return (grads[0], grads[1] if up is not None else None, None, None)


GLU = AutogradOp(
    "kp_fused_mlp",
    LEVELS,
    fwd_schema="glu_fwd(Tensor x, Tensor? up, str activation, str backend) -> Tensor",
    fwd_fake=_fwd_fake,
    bwd_schema="glu_bwd(Tensor dy, Tensor x, Tensor? up, str activation, str backend) -> (Tensor, Tensor)",
    bwd_fake=_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
    fwd=_fwd,
    bwd=_bwd,
)


# ---------------------------------------------------------------------------------------------
# Checks and the public functions

_NAMES = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu"}
_GELU = {"none": "gelu", "tanh": "gelu_tanh"}  # geglu's `approximate`, as F.gelu's


def _check(op, gate, up):
    """(x, up, hidden): gate and up of one shape, dtype and device, or a packed gate_up (up None)
    with an even last dimension; hidden is the output's last dimension."""
    check_tensor(op, "gate" if up is not None else "gate_up", gate, dtypes=FLOATING)
    if up is None:
        if gate.dim() == 0 or gate.shape[-1] % 2:
            raise ValueError(
                f"{op}: a packed gate_up needs an even last dimension (gate and up halves), "
                f"got shape {tuple(gate.shape)}"
            )
        return gate.shape[-1] // 2
    check_tensor(op, "up", up, like=gate, dtypes=FLOATING, shape=gate.shape, what_shape=" (gate's shape)")
    if up.dtype != gate.dtype:
        raise TypeError(f"{op}: gate is {gate.dtype} but up is {up.dtype}; give them one dtype")
    if gate.dim() == 0:
        raise ValueError(f"{op}: gate and up must have at least one dimension")
    return gate.shape[-1]


def _glu(gate, up, activation, backend):
    hidden = _check(_NAMES[activation], gate, up)
    shape = (*gate.shape[:-1], hidden)
    if gate.numel() == 0:  # nothing to launch; the reference level gives the right shape and grad
        g, u = (gate[..., :hidden], gate[..., hidden:]) if up is None else (gate, up)
        return LEVELS.impl("reference", "glu_fwd")(g, u, activation)
    x = as_rows(gate, gate.shape[-1])  # packed: [rows, 2 * hidden], its halves read in place
    u = None if up is None else as_rows(up, hidden)
    grad = torch.is_grad_enabled() and (gate.requires_grad or (up is not None and up.requires_grad))
    if registry.is_compiling():
        y = GLU.fwd_op(x, u, activation, LEVELS.traced(backend, gate.device, gate.dtype))
    else:
        name = LEVELS.resolve(backend, gate.device, gate.dtype)
        if grad and name != "reference":
            y = GLU.apply(x, u, activation, name)
        else:  # plain PyTorch at the reference level: autograd differentiates it to any order
            y = LEVELS.impl(name, "glu_fwd")(*_halves(x, u), activation)
    return y.view(shape)


def swiglu(gate: torch.Tensor, up: Optional[torch.Tensor] = None, *, backend: Optional[str] = None) -> torch.Tensor:
    """silu(gate) * up, computed in fp32 and rounded once to the input dtype.

    `swiglu(gate, up)` takes two tensors of one shape; `swiglu(gate_up)` (up None) one tensor whose
    last dimension holds the gate half then the up half (a packed gate-up projection's output),
    read in place, and returns [..., hidden]; its gradient is one tensor of gate_up's shape. Any
    shape and layout; inputs are never written. `backend`: "auto" (default), "cuda", "triton" or
    "reference" (see kp_core.use_backend).
    """
    return _glu(gate, up, "silu", backend)


def geglu(
    gate: torch.Tensor,
    up: Optional[torch.Tensor] = None,
    *,
    approximate: str = "none",
    backend: Optional[str] = None,
) -> torch.Tensor:
    """gelu(gate) * up, computed in fp32 and rounded once to the input dtype.

    gelu is torch.nn.functional.gelu's: `approximate="none"` the exact (erf) form, "tanh" the tanh
    approximation. Packed and two-tensor forms, layouts and `backend` as `swiglu`.
    """
    activation = _GELU.get(approximate) if isinstance(approximate, str) else None
    if activation is None:
        raise ValueError(f"geglu: approximate must be 'none' or 'tanh' (as F.gelu's), got {approximate!r}")
    return _glu(gate, up, activation, backend)
