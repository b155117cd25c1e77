"""The float64 oracle: relative error and the bounds a kp op must meet."""
from __future__ import annotations

from typing import Optional

import torch

# ||out - ref|| / ||ref|| a single rounding to the dtype costs is about 2^-(mantissa+1) / sqrt(3);
# the bounds leave room for fp32 accumulation order, not for a wrong algorithm.
REL_ERROR_BOUND = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
# Slack added to "2 x torch's own error", so exact-to-rounding results never fail on noise.
TORCH_RATIO_EPS = {torch.float64: 1e-13, torch.float32: 2e-6, torch.float16: 1e-4, torch.bfloat16: 8e-4}


def rel_error(out: torch.Tensor, ref: torch.Tensor, scale: float = 0.0) -> float:
    """||out - ref|| / max(||ref||, scale) in float64. NaN anywhere gives inf.

    `scale` floors the denominator for results that are a cancellation of larger terms (the input
    gradient of a norm over one element is ~0 by construction): pass the norm of those terms.
    """
    if out.shape != ref.shape:
        raise AssertionError(f"shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    if out.numel() == 0:
        return 0.0
    o = out.detach().to(torch.float64).cpu()
    r = ref.detach().to(torch.float64).cpu()
    if not torch.isfinite(o).all():
        return float("inf")
    den = max(torch.linalg.vector_norm(r).item(), scale)
    num = torch.linalg.vector_norm(o - r).item()
    return num / den if den > 0 else num


def assert_matches_oracle(
    out: torch.Tensor,
    ref64: torch.Tensor,
    *,
    dtype: Optional[torch.dtype] = None,
    torch_out: Optional[torch.Tensor] = None,
    bound: Optional[float] = None,
    scale: float = 0.0,
    name: str = "output",
) -> float:
    """Check `out` against the float64 reference `ref64`.

    Passes when the relative error is under the dtype's bound and, if `torch_out` (torch's own op
    run in the same low precision) is given, also within 2x torch's error plus a small slack.
    Returns the error so tests can report it.
    """
    dtype = dtype or out.dtype
    if out.dtype != dtype:
        raise AssertionError(f"{name}: dtype {out.dtype}, expected {dtype}")
    err = rel_error(out, ref64, scale)
    limit = bound if bound is not None else REL_ERROR_BOUND[dtype]
    if not err <= limit:
        raise AssertionError(f"{name}: relative error {err:.3e} > bound {limit:.1e} for {dtype}")
    if torch_out is not None:
        torch_err = rel_error(torch_out, ref64, scale)
        cap = 2 * torch_err + TORCH_RATIO_EPS[dtype]
        if not err <= cap:
            raise AssertionError(
                f"{name}: relative error {err:.3e} > 2 x torch's own {torch_err:.3e} + eps for {dtype}"
            )
    return err
