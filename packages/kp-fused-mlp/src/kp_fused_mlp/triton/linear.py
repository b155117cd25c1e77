"""The Triton level of linear_act: not written yet (issue 18 does the CUDA GEMM first).

`kp_fused_mlp.linear` declares this level unable to serve any call, so `backend="triton"` raises
kp_core.BackendUnavailable with that reason and `auto` passes over it; nothing reaches this function.
"""
from __future__ import annotations

MISSING = "linear_act has no Triton kernel yet (the CUDA GEMM came first; issue 18)"


def linear_act_fwd(x, weight, bias, activation):
    raise NotImplementedError(f"kp_fused_mlp: {MISSING}")
