"""kp-norm: RMSNorm and LayerNorm (plain and fused with a residual add), forward and backward."""
from .modules import LayerNorm, RMSNorm, replace_norms
from .norm import fused_add_layer_norm, fused_add_rms_norm, layer_norm, rms_norm

__version__ = "0.2.9"

__all__ = ["LayerNorm", "RMSNorm", "fused_add_layer_norm", "fused_add_rms_norm", "layer_norm", "replace_norms", "rms_norm"]
