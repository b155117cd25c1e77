"""nn.Module wrappers."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from .attention import flash_attn


class MultiheadAttention(nn.Module):
    """Self-attention with one fused QKV projection: x [batch, seqlen, embed_dim] -> the same shape.

    One GEMM makes q, k and v ([num_heads + 2 num_kv_heads] heads of head_dim = embed_dim /
    num_heads), which are read as views of its output (no copies) by flash_attn, then the output
    projection. num_kv_heads < num_heads: GQA / MQA. causal, window, softcap and softmax_scale as
    flash_attn's. `from_torch` loads a torch.nn.MultiheadAttention (batch_first) as is.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: Optional[int] = None, *, bias: bool = True,
                 causal: bool = False, window: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                 softmax_scale: Optional[float] = None, backend: Optional[str] = None, device=None, dtype=None):  # fmt: skip
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be a multiple of num_heads ({num_heads})")
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise ValueError(f"MultiheadAttention: num_heads ({num_heads}) must be a multiple of num_kv_heads "
                             f"({num_kv_heads})")  # fmt: skip
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.causal, self.window, self.softcap = causal, tuple(window), softcap
        self.softmax_scale, self.backend = softmax_scale, backend
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.qkv = nn.Linear(embed_dim, (num_heads + 2 * num_kv_heads) * self.head_dim, **kw)
        self.out_proj = nn.Linear(num_heads * self.head_dim, embed_dim, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"MultiheadAttention: x must be [batch, seqlen, {self.embed_dim}], got {tuple(x.shape)}")
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
        q, k, v = qkv.split([self.num_heads, self.num_kv_heads, self.num_kv_heads], dim=2)
        o = flash_attn(q, k, v, causal=self.causal, window=self.window, softmax_scale=self.softmax_scale,
                       softcap=self.softcap, backend=self.backend)  # fmt: skip
        return self.out_proj(o.reshape(b, s, self.num_heads * self.head_dim))

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, *, causal: bool = False, **kwargs) -> "MultiheadAttention":
        """This module with `mha`'s weights (copied): in_proj is already [q; k; v] heads in order."""
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"from_torch: expected torch.nn.MultiheadAttention, got {type(mha).__name__}")
        why = ("batch_first=False (pass batch_first=True)" if not mha.batch_first else
               "separate q/k/v dims (kdim/vdim)" if not mha._qkv_same_embed_dim else
               "bias_k/bias_v" if mha.bias_k is not None else "add_zero_attn" if mha.add_zero_attn else
               f"dropout={mha.dropout}" if mha.dropout else None)  # fmt: skip
        if why:
            raise ValueError(f"from_torch: kp's MultiheadAttention has no {why}")
        w = mha.in_proj_weight
        m = cls(mha.embed_dim, mha.num_heads, bias=mha.in_proj_bias is not None, causal=causal, device=w.device,
                dtype=w.dtype, **kwargs)  # fmt: skip
        with torch.no_grad():
            m.qkv.weight.copy_(w)
            m.out_proj.weight.copy_(mha.out_proj.weight)
            if mha.in_proj_bias is not None:
                m.qkv.bias.copy_(mha.in_proj_bias)
                m.out_proj.bias.copy_(mha.out_proj.bias)
        return m
