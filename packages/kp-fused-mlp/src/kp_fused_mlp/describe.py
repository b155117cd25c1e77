"""What `python -m kp_core` prints for kp-fused-mlp: the level `auto` picks, per op family."""
from __future__ import annotations


def describe_backends() -> list:
    from . import gated, glu, linear

    families = {"swiglu": glu, "linear_act": linear, "gated_linear": gated}
    return [f"{name}: {line}" for name, mod in families.items() for line in mod.describe_backends()]
