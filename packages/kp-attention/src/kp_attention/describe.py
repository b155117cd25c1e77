"""What `python -m kp_core` prints for kp-attention: the level `auto` picks."""
from __future__ import annotations


def describe_backends() -> list:
    return ["flash_attn, flash_attn_varlen, scaled_dot_product_attention: reference (this release's only level)"]
