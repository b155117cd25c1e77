"""kp-fused-mlp: gated activations for transformer MLPs (SwiGLU), forward and backward."""
from .glu import swiglu

__version__ = "0.1.0"

__all__ = ["swiglu"]
