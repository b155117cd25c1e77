"""kp-attention on a GPU: what the CPU suite cannot see. CUDA graph capture, inputs on cuda:1 and on
a non-default stream, bf16 against torch's own bf16 SDPA error, deterministic gradients, and the
public functions' default (auto) level on a GPU."""
import pytest
import torch
import torch.nn.functional as F
from kp_core import testing as kt

import kp_attention

pytestmark = pytest.mark.gpu


def _qkv(shape_q, shape_kv, dtype, device, seed, grad=False):
    q = kt.randn(shape_q, dtype=dtype, device=device, seed=seed).requires_grad_(grad)
    k = kt.randn(shape_kv, dtype=dtype, device=device, seed=seed + 1).requires_grad_(grad)
    v = kt.randn(shape_kv, dtype=dtype, device=device, seed=seed + 2).requires_grad_(grad)
    return q, k, v


def _sdpa(q, k, v, causal):
    """torch's SDPA on [batch, seqlen, heads, dim] tensors (math backend in float64 for the oracle)."""
    group = q.shape[2] // k.shape[2]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(group, 1),
                                       v.transpose(1, 2).repeat_interleave(group, 1), is_causal=causal)  # fmt: skip
    return o.transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
def test_auto_level_within_twice_torchs_error(dtype, head_dim, seed):
    """Sequences that are not multiples of any block, GQA 4:2; bottom-right causal equals top-left at
    seqlen_q = seqlen_k, so torch's is_causal is the same mask."""
    q, k, v = _qkv((2, 333, 4, head_dim), (2, 333, 2, head_dim), dtype, "cuda", seed, grad=True)
    do = kt.randn((2, 333, 4, head_dim), dtype=dtype, device="cuda", seed=seed + 3)
    out = kp_attention.flash_attn(q, k, v, causal=True)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want = _sdpa(q64, k64, v64, True)
    torch_out = _sdpa(q, k, v, True)
    kt.assert_matches_oracle(out, want, torch_out=torch_out, name="out")
    got = torch.autograd.grad(out, (q, k, v), do)
    ref = torch.autograd.grad(want, (q64, k64, v64), do.double())
    theirs = torch.autograd.grad(torch_out, (q, k, v), do)
    for name, g, r, t in zip("qkv", got, ref, theirs):
        kt.assert_matches_oracle(g, r, torch_out=t, name=f"d{name}")


def test_deterministic_gradients_are_bit_identical(seed):
    q, k, v = _qkv((2, 700, 8, 128), (2, 700, 2, 128), torch.bfloat16, "cuda", seed, grad=True)
    do = kt.randn((2, 700, 8, 128), dtype=torch.bfloat16, device="cuda", seed=seed + 3)
    runs = [torch.autograd.grad(kp_attention.flash_attn(q, k, v, causal=True, deterministic=True), (q, k, v), do)
            for _ in range(3)]  # fmt: skip
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))


def test_cuda_graph_capture(seed):
    q, k, v = _qkv((1, 256, 4, 64), (1, 256, 4, 64), torch.bfloat16, "cuda", seed)
    out = kt.graph_captured(lambda q, k, v: kp_attention.flash_attn(q, k, v, causal=True), q, k, v)
    torch.testing.assert_close(out, kp_attention.flash_attn(q, k, v, causal=True))


def test_non_default_stream_and_second_device(seed):
    devices = ["cuda:0"] + (["cuda:1"] if torch.cuda.device_count() > 1 else [])
    for dev in devices:
        q, k, v = _qkv((2, 130, 4, 64), (2, 130, 4, 64), torch.float16, dev, seed)
        want = kp_attention.flash_attn(q, k, v, backend="reference")
        stream = torch.cuda.Stream(device=dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            out = kp_attention.flash_attn(q, k, v)
        torch.cuda.current_stream(dev).wait_stream(stream)
        assert out.device == torch.device(dev)
        kt.assert_matches_oracle(out, want.double(), name=dev)


def test_more_than_65535_sequences_times_heads(seed):
    """batch x heads past a CUDA grid's second axis (65535): the kernels' grids are one axis."""
    q, k, v = _qkv((4099, 4, 16, 64), (4099, 4, 8, 64), torch.bfloat16, "cuda", seed, grad=True)
    do = kt.randn(q.shape, dtype=torch.bfloat16, device="cuda", seed=seed + 3)
    out = kp_attention.flash_attn(q, k, v, causal=True)
    got = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want = _sdpa(q64, k64, v64, True)  # seqlen_q = seqlen_k: torch's top-left causal is the same mask
    ref = torch.autograd.grad(want, (q64, k64, v64), do.double())
    kt.assert_matches_oracle(out, want, dtype=torch.bfloat16, name="out")
    for name, g, r in zip("qkv", got, ref):
        kt.assert_matches_oracle(g, r, dtype=torch.bfloat16, name=f"d{name}")


@pytest.mark.large
def test_more_than_2_to_the_31_elements(seed):
    """q of 2^31 + a little elements (64-bit offsets), one head dim, causal."""
    if kt.free_bytes("cuda") < 24 << 30:
        pytest.skip("needs 24 GiB free")
    b, s, h, d = 1, 65600, 256, 128  # 2.15e9 elements of q
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, 256, h, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = kp_attention.flash_attn(q, k, v)
    tail = slice(s - 3, s)
    want = kp_attention.flash_attn(q[:, tail].contiguous(), k, v, backend="reference")
    kt.assert_matches_oracle(out[:, tail], want.double(), name="tail rows")
