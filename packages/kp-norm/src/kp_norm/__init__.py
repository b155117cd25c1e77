"""kp-norm: RMSNorm and LayerNorm (plain and fused with a residual add), forward and backward."""
from .modules import LayerNorm, RMSNorm
from .norm import fused_add_layer_norm, fused_add_rms_norm, layer_norm, rms_norm
from .patch import patch_norms, replace_norms

__version__ = "0.3.2"

__all__ = [
    "LayerNorm",
    "RMSNorm",
    "fused_add_layer_norm",
    "fused_add_rms_norm",
    "layer_norm",
    "patch_norms",
    "replace_norms",
    "rms_norm",
]
