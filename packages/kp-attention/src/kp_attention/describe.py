"""What `python -m kp_core` prints for kp-attention: the level `auto` picks."""
from __future__ import annotations


def describe_backends() -> list:
    from . import attention

    return [f"flash_attn: {line}" for line in attention.describe_backends()]
