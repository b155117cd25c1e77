"""MultiheadAttention: torch's nn.MultiheadAttention loaded as is gives its outputs; GQA heads read
as views of one QKV projection."""
import pytest
import torch
from torch import nn
from kp_core import testing as kt

import kp_attention
from kp_attention import MultiheadAttention


@pytest.mark.parametrize("causal", [False, True])
def test_from_torch_matches_torch(causal, seed):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(48, 4, batch_first=True, dtype=torch.float64)
    x = kt.randn((2, 9, 48), dtype=torch.float64, seed=seed)
    mask = torch.ones(9, 9, dtype=torch.bool).triu(1) if causal else None
    want, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    got = MultiheadAttention.from_torch(mha, causal=causal)(x)
    kt.assert_matches_oracle(got, want, name="mha")


def test_gqa_heads_are_views_of_the_projection(seed):
    torch.manual_seed(seed)
    m = MultiheadAttention(64, 8, 2, bias=False, causal=True, window=(3, 0), dtype=torch.float64)
    x = kt.randn((2, 7, 64), dtype=torch.float64, seed=seed)
    qkv = m.qkv(x).view(2, 7, 12, 8)
    want = kp_attention.flash_attn(qkv[:, :, :8], qkv[:, :, 8:10], qkv[:, :, 10:], causal=True, window=(3, 0))
    kt.assert_matches_oracle(m(x), m.out_proj(want.reshape(2, 7, 64)), name="gqa")
    m(x).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="multiple of num_heads"):
        MultiheadAttention(50, 4)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        MultiheadAttention(48, 4, 3)
    with pytest.raises(ValueError, match="batch_first"):
        MultiheadAttention.from_torch(nn.MultiheadAttention(48, 4))
    with pytest.raises(ValueError, match=r"x must be \[batch, seqlen, 48\]"):
        MultiheadAttention(48, 4)(torch.randn(3, 48))
