"""kp-fused-mlp: gated activations for transformer MLPs (SwiGLU, GeGLU), forward and backward, linear
layers with the bias and activation fused into the GEMM (linear_act), and the gated MLP block
(gated_linear, GatedMLP, replace_mlps for Hugging Face models)."""
from .gated import GATED_ACTIVATIONS, gated_linear
from .glu import geglu, swiglu
from .linear import ACTIVATIONS, linear_act
from .modules import GatedMLP
from .patch import hf_activation, patch_mlps, replace_mlps

__version__ = "0.2.0"

__all__ = [
    "ACTIVATIONS",
    "GATED_ACTIVATIONS",
    "GatedMLP",
    "gated_linear",
    "geglu",
    "hf_activation",
    "linear_act",
    "patch_mlps",
    "replace_mlps",
    "swiglu",
]
