"""kp-attention: exact attention for PyTorch (flash_attn, flash_attn_varlen and a drop-in
scaled_dot_product_attention), forward and backward. This release: the reference level."""
from .attention import flash_attn, flash_attn_varlen, scaled_dot_product_attention

__version__ = "0.1.0"

__all__ = ["flash_attn", "flash_attn_varlen", "scaled_dot_product_attention"]
