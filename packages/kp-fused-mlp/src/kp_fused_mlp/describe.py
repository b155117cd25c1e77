"""What `python -m kp_core` prints for kp-fused-mlp: the level `auto` picks, per op family."""
from __future__ import annotations


def describe_backends() -> list:
    from . import glu, linear

    return [f"swiglu: {line}" for line in glu.describe_backends()] + [
        f"linear_act: {line}" for line in linear.describe_backends()
    ]
