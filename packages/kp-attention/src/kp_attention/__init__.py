"""kp-attention: exact attention for PyTorch (flash_attn, flash_attn_varlen and a drop-in
scaled_dot_product_attention), forward and backward. This release: the reference level."""
from .attention import flash_attn, flash_attn_varlen, scaled_dot_product_attention
from .hf import replace_attention
from .modules import MultiheadAttention

__version__ = "0.1.0"

__all__ = ["MultiheadAttention", "flash_attn", "flash_attn_varlen", "replace_attention", "scaled_dot_product_attention"]
