"""nn.Module wrappers that load the state dict of torch.nn.RMSNorm / torch.nn.LayerNorm."""
from __future__ import annotations

import numbers
from typing import Optional

import torch
from torch import nn

from .norm import norm


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


class _Norm(nn.Module):
    _is_rms: bool
    _op: str

    def __init__(self, normalized_shape, eps, elementwise_affine, bias, weight_offset, backend, device, dtype):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight_offset = float(weight_offset)
        self.backend = backend
        kw = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, **kw))
            self.bias = nn.Parameter(torch.empty(self.normalized_shape, **kw)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # With a Gemma-style offset the identity transform is weight = 0.
        if self.weight is not None:
            nn.init.constant_(self.weight, 1.0 - self.weight_offset)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None, *, residual_dtype=None):
        """Normalize x; with `residual`, normalize x + residual and return (out, x + residual)."""
        y, res_out = norm(
            self._op if residual is None else f"fused_add_{self._op}",
            x, residual, self.weight, self.bias, self.eps, self._is_rms, self.weight_offset,
            residual_dtype, self.backend, len(self.normalized_shape),
        )  # fmt: skip
        return y if residual is None else (y, res_out)

    def extra_repr(self) -> str:
        s = f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        if self.weight_offset:
            s += f", weight_offset={self.weight_offset}"
        return s + (f", backend={self.backend!r}" if self.backend else "")


class RMSNorm(_Norm):
    """Drop-in for torch.nn.RMSNorm (same arguments, same state dict), backed by kp kernels."""

    _is_rms, _op = True, "rms_norm"

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True, *,
                 weight_offset: float = 0.0, backend: Optional[str] = None, device=None, dtype=None):  # fmt: skip
        super().__init__(normalized_shape, eps, elementwise_affine, False, weight_offset, backend, device, dtype)

    @classmethod
    def from_torch(cls, m: nn.RMSNorm, **kw) -> "RMSNorm":
        ref = m.weight if m.weight is not None else None
        new = cls(m.normalized_shape, m.eps, m.elementwise_affine, device=ref.device if ref is not None else None,
                  dtype=ref.dtype if ref is not None else None, **kw)  # fmt: skip
        new.load_state_dict(m.state_dict())
        return new


class LayerNorm(_Norm):
    """Drop-in for torch.nn.LayerNorm (same arguments, same state dict), backed by kp kernels."""

    _is_rms, _op = False, "layer_norm"

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 weight_offset: float = 0.0, backend: Optional[str] = None, device=None, dtype=None):  # fmt: skip
        super().__init__(normalized_shape, eps, elementwise_affine, bias, weight_offset, backend, device, dtype)

    @classmethod
    def from_torch(cls, m: nn.LayerNorm, **kw) -> "LayerNorm":
        ref = m.weight if m.weight is not None else None
        new = cls(m.normalized_shape, m.eps, m.elementwise_affine, m.bias is not None,
                  device=ref.device if ref is not None else None,
                  dtype=ref.dtype if ref is not None else None, **kw)  # fmt: skip
        new.load_state_dict(m.state_dict())
        return new


def replace_norms(model: nn.Module, **kw) -> nn.Module:
    """Swap every torch.nn.RMSNorm / LayerNorm in `model` for its kp twin, in place; returns model."""
    for name, child in model.named_children():
        if type(child) is nn.RMSNorm:
            setattr(model, name, RMSNorm.from_torch(child, **kw))
        elif type(child) is nn.LayerNorm:
            setattr(model, name, LayerNorm.from_torch(child, **kw))
        else:
            replace_norms(child, **kw)
    return model
