"""kp-attention's CUDA level: not built yet. Its kernels (an sm80 kernel for every option, a
Hopper forward with wgmma and TMA) are the next steps of issue 19; until then `supports` says so,
so `auto` passes over this level and a forced backend="cuda" raises this sentence."""
from __future__ import annotations

from typing import Optional


def supports(forced: bool, device_type: str, device_index, *facts) -> Optional[str]:
    return "kp-attention's CUDA level is not built yet (its kernels are still to come): use 'triton' or 'reference'"
