"""Triton level of kp-norm: the kernels behind ``backend="triton"`` (see ``norm.py``)."""
