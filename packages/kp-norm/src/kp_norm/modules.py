"""nn.Module wrappers that load the state dict of torch.nn.RMSNorm / torch.nn.LayerNorm."""
from __future__ import annotations

import numbers
from typing import Optional

import torch
from torch import nn

from .norm import norm

# How the weight meets the normalized x̂:
#   "once":  y = (x̂ * w) in fp32, rounded once to x's dtype (torch's norms, Gemma, OLMo 2)
#   "llama": y = w * x̂.to(x.dtype) in torch (Hugging Face's Llama, Mistral, Qwen: two roundings,
#            and the output dtype is the promotion of w's and x's). Liger calls it casting_mode="llama".
ROUNDINGS = ("once", "llama")


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(s) for s in normalized_shape)


class _Norm(nn.Module):
    _is_rms: bool
    _op: str

    def __init__(self, normalized_shape, eps, elementwise_affine, bias, weight_offset, rounding, backend, device,
                 dtype):  # fmt: skip
        super().__init__()
        if rounding not in ROUNDINGS:
            raise ValueError(f"{type(self).__name__}: rounding must be one of {ROUNDINGS}, got {rounding!r}")
        if rounding == "llama" and weight_offset:
            # Where would 1 + w be rounded? No model does this; refuse rather than guess.
            raise ValueError(f"{type(self).__name__}: rounding='llama' takes no weight_offset (got {weight_offset})")
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight_offset = float(weight_offset)
        self.rounding = rounding
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

    def _check_shape(self, x) -> None:
        shape = getattr(x, "shape", None)  # not a tensor: norm() raises the TypeError
        n = len(self.normalized_shape)
        if shape is not None and (len(shape) < n or tuple(shape[len(shape) - n :]) != self.normalized_shape):
            want = ", ".join(map(str, self.normalized_shape))
            raise ValueError(
                f"{type(self).__name__}: normalized_shape is {list(self.normalized_shape)}, so x must have "
                f"shape [*, {want}]; got x of shape {list(shape)}"
            )

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None, *, residual_dtype=None):
        """Normalize x; with `residual`, normalize x + residual and return (out, x + residual)."""
        self._check_shape(x)
        op = self._op if residual is None else f"fused_add_{self._op}"
        spec = dict(is_rms=self._is_rms, residual_dtype=residual_dtype, backend=self.backend,
                    normalized_ndim=len(self.normalized_shape))  # fmt: skip
        if self.rounding == "once" or self.weight is None:
            y, res_out = norm(op, x, residual, self.weight, self.bias, self.eps, weight_offset=self.weight_offset, **spec)
        else:
            # Llama order: the weightless norm rounds x̂ once to x's dtype; torch then applies the
            # weight (and bias) with its own promotion and rounding, exactly as the HF code does.
            y, res_out = norm(op, x, residual, None, None, self.eps, **spec)
            y = self.weight * y
            if self.bias is not None:
                y = y + self.bias
        return y if residual is None else (y, res_out)

    def extra_repr(self) -> str:
        s = f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        if self.weight_offset:
            s += f", weight_offset={self.weight_offset}"
        if self.rounding != "once":
            s += f", rounding={self.rounding!r}"
        return s + (f", backend={self.backend!r}" if self.backend else "")

    @classmethod
    def _sharing(cls, normalized_shape, eps, weight, bias_param, *, training=True, **kw) -> "_Norm":
        """A module holding the given Parameter objects themselves (no copy, no allocation)."""
        new = cls(normalized_shape, eps, weight is not None, **kw, device="meta")
        new.weight = weight  # a Parameter, or None for a non-affine module
        if "bias" in new._parameters:
            new.bias = bias_param
        return new.train(training)

    @staticmethod
    def _offset(cls_name: str, m: nn.Module, derived: float, asked: Optional[float]) -> float:
        if asked is not None and float(asked) != derived:
            raise ValueError(
                f"{cls_name}.from_torch: {type(m).__qualname__} computes x̂ * (weight + {derived:g}), so its "
                f"kp twin has weight_offset={derived:g}; got weight_offset={asked!r}. from_torch keeps "
                f"m's function; to build another one, construct {cls_name}(..., weight_offset=...) yourself"
            )
        return derived


def _plain(m: nn.Module, torch_cls: type) -> bool:
    """m is torch_cls or a subclass that inherits its forward (same function)."""
    return isinstance(m, torch_cls) and type(m).forward is torch_cls.forward


class RMSNorm(_Norm):
    """Drop-in for torch.nn.RMSNorm (same arguments, same state dict), backed by kp kernels.

    `weight_offset=1.0` computes x̂ * (1 + w) (Gemma). `rounding="llama"` applies the weight after
    rounding x̂ to x's dtype, as Hugging Face's LlamaRMSNorm does (see ROUNDINGS).
    """

    _is_rms, _op = True, "rms_norm"

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True, *,
                 weight_offset: float = 0.0, rounding: str = "once", backend: Optional[str] = None,
                 device=None, dtype=None):  # fmt: skip
        super().__init__(normalized_shape, eps, elementwise_affine, False, weight_offset, rounding, backend, device,
                         dtype)  # fmt: skip

    @classmethod
    def from_torch(cls, m: nn.Module, *, weight_offset: Optional[float] = None, rounding: str = "once",
                   backend: Optional[str] = None) -> "RMSNorm":  # fmt: skip
        """A kp RMSNorm computing m's function: m is a torch.nn.RMSNorm or an RMSNorm class kp_norm
        recognises (Hugging Face's LlamaRMSNorm, GemmaRMSNorm, ...; see kp_norm.hf).

        The new module holds m's Parameter objects (not copies): requires_grad, an optimizer built
        before, and tied weights keep working. It is in m's train/eval mode. The weight offset is
        m's (0 for torch, 1 for Gemma); passing one that contradicts m raises ValueError.
        """
        if _plain(m, nn.RMSNorm):
            shape, eps, weight, offset = m.normalized_shape, m.eps, m.weight, 0.0
        else:
            from .hf import match  # hf imports the functional API; modules stays importable alone

            found = match(m)
            if isinstance(found, str):
                raise TypeError(f"RMSNorm.from_torch: kp_norm cannot stand in for {type(m).__qualname__}: {found}")
            shape, eps, weight, offset = found.normalized_shape, found.eps, found.weight, found.weight_offset
        offset = cls._offset("RMSNorm", m, offset, weight_offset)
        return cls._sharing(shape, eps, weight, None, training=m.training,
                            weight_offset=offset, rounding=rounding, backend=backend)  # fmt: skip


class LayerNorm(_Norm):
    """Drop-in for torch.nn.LayerNorm (same arguments, same state dict), backed by kp kernels."""

    _is_rms, _op = False, "layer_norm"

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 weight_offset: float = 0.0, rounding: str = "once", backend: Optional[str] = None,
                 device=None, dtype=None):  # fmt: skip
        super().__init__(normalized_shape, eps, elementwise_affine, bias, weight_offset, rounding, backend, device,
                         dtype)  # fmt: skip

    @classmethod
    def from_torch(cls, m: nn.LayerNorm, *, weight_offset: Optional[float] = None, rounding: str = "once",
                   backend: Optional[str] = None) -> "LayerNorm":  # fmt: skip
        """A kp LayerNorm computing m's function, holding m's Parameter objects (see RMSNorm.from_torch)."""
        if not _plain(m, nn.LayerNorm):
            raise TypeError(
                f"LayerNorm.from_torch: expected a torch.nn.LayerNorm (or a subclass that keeps its "
                f"forward), got {type(m).__qualname__}"
            )
        offset = cls._offset("LayerNorm", m, 0.0, weight_offset)
        return cls._sharing(m.normalized_shape, m.eps, m.weight, m.bias, training=m.training, bias=m.bias is not None,
                            weight_offset=offset, rounding=rounding, backend=backend)  # fmt: skip
