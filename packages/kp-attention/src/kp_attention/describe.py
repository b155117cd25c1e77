"""What `python -m kp_core` prints for kp-attention: the level `auto` picks, and the backward's."""
from __future__ import annotations


def describe_backends() -> list:
    from . import attention

    lines = [f"flash_attn: {line}" for line in attention.describe_backends()]
    # The CUDA level is a forward: a gradient through it runs the Triton level's backward kernels.
    lines.append("flash_attn backward: the forward's level, but cuda's is the Triton level's (no CUDA backward yet)")
    return lines
