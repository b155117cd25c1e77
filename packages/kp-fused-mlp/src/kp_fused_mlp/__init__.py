"""kp-fused-mlp: gated activations for transformer MLPs (SwiGLU), forward and backward, and
linear layers with the bias and activation fused into the GEMM (linear_act)."""
from .glu import swiglu
from .linear import ACTIVATIONS, linear_act

__version__ = "0.1.0"

__all__ = ["ACTIVATIONS", "linear_act", "swiglu"]
