"""kp-fused-mlp: gated activations for transformer MLPs (SwiGLU, GeGLU), forward and backward, and
linear layers with the bias and activation fused into the GEMM (linear_act)."""
from .glu import geglu, swiglu
from .linear import ACTIVATIONS, linear_act

__version__ = "0.2.0"

__all__ = ["ACTIVATIONS", "geglu", "linear_act", "swiglu"]
