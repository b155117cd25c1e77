"""The activations of kp-fused-mlp's Triton kernels, in fp32, with torch's formulas
(kp_fused_mlp.reference): linear_act's epilogue and the gated units (swiglu, geglu) share them.
ACT is a constexpr name, so each kernel compiles only the branch it uses.

tanh(u) is written 1 - 2 / (1 + exp(2u)) (exp overflow gives +-1, as tanh): libdevice.tanh has no
interpreter version. Tensors stay left of the constexpr constants: in a helper called from a
kernel, the interpreter turns `constant * tensor` into a constexpr that tl.exp and tl.sigmoid refuse."""
from __future__ import annotations

import triton
import triton.language as tl

# constexpr: the compiler (unlike the interpreter) refuses plain globals inside a kernel.
SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2): gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi): gelu'(x) = Phi(x) + x phi(x)
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # torch's gelu tanh approximation: sqrt(2 / pi)
KAPPA = tl.constexpr(0.044715)


@triton.jit
def apply_activation(x, ACT: tl.constexpr):
    """act(x) for ACT in none, relu, gelu, gelu_tanh, silu."""
    if ACT == "relu":
        x = tl.maximum(x, 0.0)
    elif ACT == "gelu":
        x = 0.5 * x * (1.0 + tl.math.erf(x * SQRT1_2))
    elif ACT == "gelu_tanh":
        t = 1.0 - 2.0 / (1.0 + tl.exp((x + x * x * x * KAPPA) * SQRT_2_OVER_PI * 2.0))
        x = 0.5 * x * (1.0 + t)
    elif ACT == "silu":
        x = x * tl.sigmoid(x)
    return x


@triton.jit
def activation_and_grad(x, ACT: tl.constexpr):
    """(act(x), act'(x)) for the gated activations: silu, gelu, gelu_tanh."""
    if ACT == "silu":
        s = tl.sigmoid(x)
        f = x * s
        df = s * (1.0 + x * (1.0 - s))
    elif ACT == "gelu":
        cdf = 0.5 * (1.0 + tl.math.erf(x * SQRT1_2))
        f = x * cdf
        df = cdf + x * tl.exp(-0.5 * x * x) * INV_SQRT_2PI
    else:  # gelu_tanh
        t = 1.0 - 2.0 / (1.0 + tl.exp((x + x * x * x * KAPPA) * SQRT_2_OVER_PI * 2.0))
        f = 0.5 * x * (1.0 + t)
        df = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + x * x * KAPPA * 3.0)
    return f, df
