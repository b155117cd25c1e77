"""What `python -m kp_core` prints for kp-attention: the level `auto` picks, and the backward's."""
from __future__ import annotations


def describe_backends() -> list:
    from . import attention

    lines = [f"flash_attn: {line}" for line in attention.describe_backends()]
    # Each level has its own backward; the CUDA one falls back where a device cannot run its kernels.
    lines.append("flash_attn backward: the forward's level (cuda: the Hopper kernel on sm_90 at head dims "
                 "64 and 128 unless deterministic, the sm80-class ones elsewhere, Triton's where a device "
                 "lacks their shared memory)")
    return lines
