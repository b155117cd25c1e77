"""The reference level: plain PyTorch, computed in fp32 and rounded once to the input dtype.

Autograd differentiates it (to any order, forward mode too); `glu_bwd` is the same derivative
written out, which the registered backward op runs at this level.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


# The activations of the gated units (glu_fwd's `activation`): swiglu's silu, geglu's two gelus.
GLU_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
_SQRT1_2 = 0.7071067811865476  # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi): the normal density's constant
_SQRT_2_OVER_PI = 0.7978845608028654  # torch's tanh approximation: sqrt(2 / pi)
_KAPPA = 0.044715


def activation_and_grad(g: torch.Tensor, activation: str):
    """(act(g), act'(g)) with torch's formulas (F.silu, F.gelu exact and approximate="tanh"):

    silu:      g s,                        s (1 + g (1 - s)),                    s = sigmoid(g)
    gelu:      g P,                        P + g exp(-g^2 / 2) / sqrt(2 pi),     P = (1 + erf(g / sqrt 2)) / 2
    gelu_tanh: g (1 + t) / 2,              (1 + t) / 2 + g (1 - t^2) k (1 + 3 c g^2) / 2,
                                           t = tanh(k (g + c g^3)), k = sqrt(2 / pi), c = 0.044715
    """
    if activation == "silu":
        s = torch.sigmoid(g)
        return g * s, s * (1 + g * (1 - s))
    if activation == "gelu":
        cdf = 0.5 * (1 + torch.erf(g * _SQRT1_2))
        return g * cdf, cdf + g * torch.exp(-0.5 * g * g) * _INV_SQRT_2PI
    if activation == "gelu_tanh":
        t = torch.tanh(_SQRT_2_OVER_PI * (g + _KAPPA * g * g * g))
        dt = (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * _KAPPA * g * g)
        return 0.5 * g * (1 + t), 0.5 * (1 + t) + 0.5 * g * dt
    raise ValueError(f"unknown gated activation {activation!r}; expected one of {GLU_ACTIVATIONS}")


def glu_fwd(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """act(gate) * up: torch's own activation (F.silu, F.gelu) in fp32, one rounding."""
    acc = torch.promote_types(gate.dtype, torch.float32)
    return (ACTIVATIONS[activation](gate.to(acc)) * up.to(acc)).to(gate.dtype)


def glu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu", packed: bool = False):
    """d/dgate [act(g) u] = dy u act'(g),  d/dup = dy act(g).

    (dgate, dup); packed: (dgate_up, None), one [rows, 2 * cols] tensor holding both halves.
    """
    acc = torch.promote_types(gate.dtype, torch.float32)
    d, g, u = dy.to(acc), gate.to(acc), up.to(acc)
    f, df = activation_and_grad(g, activation)
    dgate, dup = d * u * df, d * f
    if packed:
        return torch.cat([dgate, dup], dim=-1).to(gate.dtype), None
    return dgate.to(gate.dtype), dup.to(up.dtype)


# The activations of linear_act, by name (kp::gemm::Act codes follow this order).
ACTIVATIONS = {
    "none": lambda t: t,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
}


def linear_act_fwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias,
    activation: str,
    *,
    acc: torch.dtype = torch.float32,
    out_dtype=None,
) -> torch.Tensor:
    """act(x @ weight^T + bias): x [..., K], weight [N, K], bias [N] or None.

    The matmul, bias and activation in `acc` (fp32 for the backends, fp64 for the oracle), rounded
    once to `out_dtype` (x's dtype): what the cuda level's GEMM epilogue computes from its fp32
    accumulators. torch's own bf16 F.linear then F.gelu rounds twice.
    """
    y = F.linear(x.to(acc), weight.to(acc), None if bias is None else bias.to(acc))
    return ACTIVATIONS[activation](y).to(out_dtype or x.dtype)


# linear_act's training path at this level, as the registered ops run it (the public function
# differentiates linear_act_fwd with autograd instead): what the kernel levels compute, in plain torch.
# The activations whose backward reads Z = x W^T + b; relu's reads y (relu'(z) = [y > 0]), none's nothing.
SAVES_PRE = ("gelu", "gelu_tanh", "silu")


def act_grad(z: torch.Tensor, activation: str) -> torch.Tensor:
    """act'(z) in z's dtype, written out (relu: [z > 0], torch's threshold_backward)."""
    if activation == "none":
        return torch.ones_like(z)
    if activation == "relu":
        return (z > 0).to(z.dtype)
    return activation_and_grad(z, activation)[1]


def linear_act_train(x, weight, bias, activation: str):
    """(y, Z in x's dtype or None): the forward of a call that needs gradients."""
    with torch.autocast(x.device.type, enabled=False):
        z = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
        return ACTIVATIONS[activation](z).to(x.dtype), (z.to(x.dtype) if activation in SAVES_PRE else None)


def linear_act_bwd(dy, x, weight, pre, activation: str, need_dx: bool, need_dw: bool, need_db: bool):
    """dP = dy act'(pre) in fp32 (pre: Z, or y for relu), rounded once for the GEMMs; dx = dP W,
    dw = dP^T x, dbias = column sums of the fp32 dP (as the cuda level)."""
    with torch.autocast(dy.device.type, enabled=False):
        d = dy.float()
        if activation != "none":
            d = d * act_grad(pre.float(), activation)
        dp = d.to(dy.dtype).float()
        dx = (dp @ weight.float()).to(dy.dtype) if need_dx else None
        dw = (dp.t() @ x.float()).to(dy.dtype) if need_dw else None
        db = d.sum(0).to(dy.dtype) if need_db else None
        return dx, dw, db


# gated_linear: h = act(x Wg^T + bg) * (x Wu^T + bu), w = [Wg; Wu] [2I, H], bias = [bg; bu] [2I].
GATES = {"silu": F.silu, "gelu_tanh": ACTIVATIONS["gelu_tanh"]}


def gated_linear(x, w, bias, activation: str, *, acc: torch.dtype = torch.float32, out_dtype=None) -> torch.Tensor:
    """The gate and up projections in `acc` (fp32 for the levels, fp64 for the oracle), the gated
    activation, one rounding to `out_dtype` (x's). Differentiable; autocast is off inside (an fp32
    matmul under autocast would run in 16 bits)."""
    with torch.autocast(x.device.type, enabled=False):
        gate, up = F.linear(x.to(acc), w.to(acc), None if bias is None else bias.to(acc)).chunk(2, dim=-1)
        return (GATES[activation](gate) * up).to(out_dtype or x.dtype)


def gated_linear_fwd(x, w, bias, activation: str, save_pre: bool):
    """The registered forward at this level: (h, P = [gate_pre | up_pre] in x's dtype, or None)."""
    with torch.autocast(x.device.type, enabled=False):
        pre = F.linear(x.float(), w.float(), None if bias is None else bias.float())
        gate, up = pre.chunk(2, dim=-1)
        return (GATES[activation](gate) * up).to(x.dtype), (pre.to(x.dtype) if save_pre else None)


def _gate_grad(g: torch.Tensor, activation: str) -> torch.Tensor:
    """act'(g), written out (the tests check it against autograd)."""
    if activation == "silu":
        s = torch.sigmoid(g)
        return s * (1 + g * (1 - s))
    c = math.sqrt(2 / math.pi)  # gelu_tanh: 0.5 g (1 + tanh(c (g + 0.044715 g^3)))
    t = torch.tanh(c * (g + 0.044715 * g**3))
    return 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * c * (1 + 3 * 0.044715 * g * g)


def gated_linear_bwd(dh, x, w, pre, activation: str, need_dx: bool, need_dw: bool, need_db: bool):
    """dP = [dh up act'(gate) | dh act(gate)] in fp32, rounded once (as the Triton level does);
    dx = dP W, dw = dP^T x, dbias = column sums of dP."""
    with torch.autocast(x.device.type, enabled=False):
        gate, up = pre.float().chunk(2, dim=-1)
        d = dh.float()
        dpre = torch.cat([d * up * _gate_grad(gate, activation), d * GATES[activation](gate)], dim=-1)
        dpre = dpre.to(pre.dtype).float()
        dx = (dpre @ w.float()).to(x.dtype) if need_dx else None
        dw = (dpre.t() @ x.float()).to(w.dtype) if need_dw else None
        db = dpre.sum(0).to(pre.dtype) if need_db else None
        return dx, dw, db
