"""kp-norm: RMSNorm and LayerNorm (plain and fused with a residual add), forward and backward."""
from .modules import LayerNorm, RMSNorm
from .norm import fused_add_layer_norm, fused_add_rms_norm, layer_norm, rms_norm
from .patch import patch_norms, replace_norms
from .plans import cuda_plan, plan_override, plan_override_names

__version__ = "0.3.7"

__all__ = [
    "LayerNorm",
    "RMSNorm",
    "cuda_plan",
    "fused_add_layer_norm",
    "fused_add_rms_norm",
    "layer_norm",
    "patch_norms",
    "plan_override",
    "plan_override_names",
    "replace_norms",
    "rms_norm",
]
