"""Hugging Face models on kp-attention, through the attention-function registry transformers
provides (AttentionInterface): `replace_attention(model)` registers kp's function under the name
"kp_attention", with FlashAttention's mask preparation (no mask at all when there is no padding),
and switches the model to it. Modules, weights and state-dict keys are untouched.

What the function maps: is_causal (FlashAttention's bottom-right alignment is what a KV cache
needs: one new query sees every cached key), `sliding_window` (the key window of the last w
positions, the query's own included: window (w - 1, 0)), Gemma 2's logit `softcap`, `scaling`.
A padding mask (a batch of unequal lengths, left- or right-padded) is served as FlashAttention's
integration does it: the real tokens are gathered into packed sequences, run through
flash_attn_varlen, and scattered back, padded query rows getting zeros. What it refuses, with a
clear error: attention dropout in training, output_attentions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import flash_attn, flash_attn_varlen

NAME = "kp_attention"


def attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                      is_causal=None, sliding_window=None, softcap=None, **kwargs):  # fmt: skip
    """transformers' attention-function signature: query [batch, heads, seqlen, head_dim], key and
    value [batch, heads_kv, seqlen_k, head_dim] -> ([batch, seqlen, heads, head_dim], None)."""
    if dropout:
        raise ValueError(f"{NAME}: attention dropout ({dropout}) is not supported; set the config's attention_dropout to 0")
    if kwargs.get("output_attentions"):
        raise ValueError(f"{NAME}: output_attentions=True needs attn_implementation='eager' (no weights are formed)")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    window = (int(sliding_window) - 1, 0 if causal else int(sliding_window) - 1) if sliding_window else (-1, -1)
    options = dict(causal=causal, window=window, softmax_scale=scaling, softcap=float(softcap) if softcap else 0.0)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if attention_mask is None:
        return flash_attn(q, k, v, **options), None
    return _padded(q, k, v, attention_mask, options), None


def _padded(q, k, v, mask, options):
    """Attention over a padded batch: mask [batch, seqlen_k] (True or 1: a real token); the queries
    are the last seqlen_q positions (with a KV cache, the new ones). The real tokens of each row are
    contiguous (left or right padding), so each packed sequence's causal diagonal is bottom-right."""
    if mask.dim() != 2 or mask.shape[0] != q.shape[0] or mask.shape[1] != k.shape[1]:
        raise ValueError(f"{NAME}: expected a 2-D padding mask [batch, {k.shape[1]}], got shape {tuple(mask.shape)}")
    keys = mask.bool()
    queries = keys[:, -q.shape[1]:]
    cu = [F.pad(m.sum(1, dtype=torch.int32).cumsum(0, dtype=torch.int32), (1, 0)) for m in (queries, keys)]
    lens = [int((c[1:] - c[:-1]).max()) if c.numel() > 1 else 0 for c in cu]
    out = flash_attn_varlen(q[queries], k[keys], v[keys], cu[0], cu[1], lens[0], lens[1], **options)
    full = out.new_zeros(q.shape)
    full[queries] = out
    return full


def register() -> None:
    """Register "kp_attention" with transformers (its attention function and its mask preparation)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, flash_attention_mask)


def replace_attention(model: torch.nn.Module) -> torch.nn.Module:
    """Make a Hugging Face model (one that dispatches attention through AttentionInterface: Llama,
    Mistral, Qwen2/3, Gemma 2/3, ...) run kp-attention, in place; returns the model."""
    if not hasattr(model, "set_attn_implementation"):
        raise TypeError(f"replace_attention: {type(model).__name__} is not a transformers model with "
                        "set_attn_implementation (transformers 4.48 or newer)")  # fmt: skip
    register()
    model.set_attn_implementation(NAME)
    if getattr(model.config, "_attn_implementation", None) != NAME:
        raise ValueError(f"replace_attention: {type(model).__name__} kept attn_implementation="
                         f"{model.config._attn_implementation!r}: it does not dispatch through AttentionInterface")  # fmt: skip
    return model
