"""kp-attention's CUDA level (csrc/fwd*.cu) on a GPU: the forward against the float64 reference for
every head dim and both 16-bit dtypes, over causal (bottom-right, and rows that see no key), sliding
windows, softcap, GQA, sequences that are not multiples of any tile, a single query row, packed
QKV strides, misaligned views, varlen with empty sequences; within 2x torch's own error in the same
dtype. And the dispatch: `auto` takes the CUDA forward where it serves the call, the Triton
backward behind it, and Triton where the CUDA level cannot serve."""
import math

import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable
from kp_core import testing as kt

import kp_attention
from kp_attention import _cuda, reference
from kp_attention.attention import LEVELS

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]
HEAD_DIMS = [64, 96, 128, 192, 256]

# (name, seqlen_q, seqlen_k, heads_q, heads_kv, causal, window, softcap): lengths that are not
# multiples of any tile (block_m 64 / 128, block_n 32 / 64), flash_attn's bottom-right diagonal.
CASES = [
    ("plain", 130, 333, 4, 4, False, (-1, -1), 0.0),
    ("causal_gqa", 333, 333, 8, 2, True, (-1, -1), 0.0),
    ("causal_few_queries", 17, 333, 4, 1, True, (-1, -1), 0.0),
    ("causal_rows_without_keys", 333, 130, 2, 2, True, (-1, -1), 0.0),  # rows 0..202 see nothing
    ("window", 333, 333, 4, 2, False, (37, 5), 0.0),
    ("window_causal", 257, 300, 2, 1, True, (64, 0), 0.0),
    ("softcap_causal", 333, 333, 4, 2, True, (-1, -1), 30.0),
    ("softcap_window", 130, 200, 2, 2, False, (17, 17), 5.0),
    ("one_query", 1, 333, 4, 2, True, (-1, -1), 0.0),
    ("one_key", 17, 1, 2, 1, False, (-1, -1), 0.0),
]


def _qkv(b, sq, sk, hq, hkv, d, dtype, seed, device="cuda"):
    q = kt.randn((b, sq, hq, d), dtype=dtype, device=device, seed=seed)
    k = kt.randn((b, sk, hkv, d), dtype=dtype, device=device, seed=seed + 1)
    v = kt.randn((b, sk, hkv, d), dtype=dtype, device=device, seed=seed + 2)
    return q, k, v


def _torch_out(q, k, v, *, scale, causal, window, softcap, diagonal):
    """torch's own attention in q's dtype: SDPA (its fused kernels) with the case's boolean mask;
    with softcap, which SDPA lacks, eager: scores in q's dtype, softcap and softmax in fp32, P
    rounded to q's dtype. Rows that see no key give NaN there: 0, as kp's contract says."""
    group = q.shape[2] // k.shape[2]
    qt = q.transpose(1, 2)
    kt_, vt = (t.transpose(1, 2).repeat_interleave(group, 1) for t in (k, v))
    mask = reference.visible(q.shape[1], k.shape[1], causal=causal, window=window, diagonal=diagonal, device=q.device)
    if softcap == 0:
        out = F.scaled_dot_product_attention(qt, kt_, vt, attn_mask=mask, scale=scale)
    else:
        s = (qt @ kt_.transpose(-1, -2)).float() * scale
        s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        out = torch.softmax(s, dim=-1).to(q.dtype) @ vt
    return torch.nan_to_num(out.transpose(1, 2), nan=0.0)


def _check_lse(lse, want, name="lse"):
    """Rows that see no key: -inf in both; the others: fp32-close to the float64 lse."""
    assert lse.dtype == torch.float32 and lse.shape == want.shape
    assert not torch.isnan(lse).any(), f"{name}: NaN"
    none = torch.isinf(want)
    assert torch.equal(torch.isinf(lse), none) and (lse[none] < 0).all(), f"{name}: -inf rows differ"
    kt.assert_matches_oracle(lse[~none], want[~none], dtype=torch.float32, bound=1e-4, name=name)


def _run_case(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """The CUDA forward (out, lse) and its float64 oracle, torch's out in the same dtype."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    diagonal = k.shape[1] - q.shape[1]
    out_bytes, lse_bytes = q.numel() * q.element_size(), 4 * q.shape[0] * q.shape[1] * q.shape[2]
    kt.poison_allocator("cuda", [out_bytes, lse_bytes])  # an unwritten element shows up as NaN
    out, lse = kp_attention.flash_attn(q, k, v, causal=causal, window=window, softmax_scale=scale, softcap=softcap,
                                       return_lse=True, backend="cuda")  # fmt: skip
    want, want_lse = reference.attention(q.double(), k.double(), v.double(), scale=scale, causal=causal, window=window,
                                         softcap=softcap, diagonal=diagonal)  # fmt: skip
    theirs = _torch_out(q, k, v, scale=scale, causal=causal, window=window, softcap=softcap, diagonal=diagonal)
    return out, lse, want, want_lse, theirs


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_forward_matches_the_oracle(head_dim, dtype, case, seed):
    _, sq, sk, hq, hkv, causal, window, softcap = case
    q, k, v = _qkv(2, sq, sk, hq, hkv, head_dim, dtype, seed)
    out, lse, want, want_lse, theirs = _run_case(q, k, v, causal=causal, window=window, softcap=softcap)
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    kt.assert_matches_oracle(out, want, torch_out=theirs, name="out")
    _check_lse(lse, want_lse)
    seen = torch.isfinite(want_lse).transpose(1, 2)  # [batch, seqlen_q, heads]
    assert (out[~seen] == 0).all(), "rows that see no key must be 0"


@pytest.mark.parametrize("diagonal", [0, -5, 40])
def test_sdpa_diagonal_and_other_diagonals(diagonal, seed):
    """The registered op takes any diagonal (SDPA passes 0: top-left causal at seqlen_q != seqlen_k)."""
    q, k, v = _qkv(2, 150, 90, 4, 2, 128, torch.bfloat16, seed)
    out, lse = torch.ops.kp_attention.attention_fwd(q, k, v, 0.125, True, -1, -1, 0.0, diagonal, False, "cuda")
    want, want_lse = reference.attention(q.double(), k.double(), v.double(), scale=0.125, causal=True,
                                         diagonal=diagonal)  # fmt: skip
    theirs = _torch_out(q, k, v, scale=0.125, causal=True, window=(-1, -1), softcap=0.0, diagonal=diagonal)
    kt.assert_matches_oracle(out, want, torch_out=theirs, name="out")
    _check_lse(lse, want_lse)


@pytest.mark.parametrize("scale", [-0.2, 0.0, 2.0])
def test_negative_zero_and_large_scales(scale, seed):
    q, k, v = _qkv(1, 77, 150, 2, 2, 64, torch.float16, seed)
    out, lse, want, want_lse, theirs = _run_case(q, k, v, causal=True, scale=scale)
    kt.assert_matches_oracle(out, want, torch_out=theirs, name="out")
    _check_lse(lse, want_lse)


def test_packed_qkv_strides_read_in_place(seed):
    """q, k, v as slices of one projection [batch, seqlen, (hq + 2 hkv) x d] (no copies): the same
    bits as contiguous inputs."""
    b, s, hq, hkv, d = 2, 203, 8, 2, 128
    qkv = kt.randn((b, s, (hq + 2 * hkv) * d), dtype=torch.bfloat16, device="cuda", seed=seed)
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hkv) * d].view(b, s, hkv, d)
    v = qkv[..., (hq + hkv) * d :].view(b, s, hkv, d)
    assert not q.is_contiguous() and _cuda._aligned(q) is q  # read in place
    out = kp_attention.flash_attn(q, k, v, causal=True, backend="cuda")
    dense = kp_attention.flash_attn(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, backend="cuda")
    assert torch.equal(out, dense)
    want, _ = reference.attention(q.double(), k.double(), v.double(), scale=d**-0.5, causal=True)
    kt.assert_matches_oracle(out, want, name="out")


def test_misaligned_views_are_copied(seed):
    """A view that starts 2 bytes into its storage breaks cp.async's 16-byte rule: the level copies it."""
    d = 64
    buf = kt.randn((2, 100, 4, d + 1), dtype=torch.float16, device="cuda", seed=seed)
    q = buf[..., 1:]
    assert q.data_ptr() % 16 and _cuda._aligned(q) is not q
    k, v = (kt.randn((2, 90, 4, d), dtype=torch.float16, device="cuda", seed=seed + i) for i in (1, 2))
    out = kp_attention.flash_attn(q, k, v, backend="cuda")
    assert torch.equal(out, kp_attention.flash_attn(q.contiguous(), k, v, backend="cuda"))


def test_native_checks_raise_before_any_launch(seed):
    q, k, v = _qkv(1, 16, 16, 2, 2, 64, torch.float16, seed)
    out, lse = torch.empty_like(q), torch.empty(1, 2, 16, device="cuda")
    args = dict(k=k.data_ptr(), k_batch=0, k_row=128, k_head=64, v=v.data_ptr(), v_batch=0, v_row=128, v_head=64,
                out=out.data_ptr(), lse=lse.data_ptr(), cu_q=0, cu_k=0, batch=1, seqlen_q=16, seqlen_k=16, total_q=0,
                heads_q=2, heads_kv=2, head_dim=64, scale=0.125, causal=False, left=-1, right=-1, softcap=0.0,
                diagonal=0, dtype=1, device=0, stream=torch.cuda.current_stream().cuda_stream)  # fmt: skip
    mod = _cuda.NATIVE.module
    with pytest.raises(ValueError, match="16-byte aligned"):
        mod.attention_fwd(q=q.data_ptr() + 2, q_batch=0, q_row=128, q_head=64, **args)
    with pytest.raises(ValueError, match="multiples of 8 elements"):
        mod.attention_fwd(q=q.data_ptr(), q_batch=0, q_row=130, q_head=64, **args)
    with pytest.raises(ValueError, match="head_dim 64, 96, 128, 192 and 256"):
        mod.attention_fwd(q=q.data_ptr(), q_batch=0, q_row=128, q_head=64, **{**args, "head_dim": 80})
    with pytest.raises(ValueError, match="float16 and bfloat16"):
        mod.attention_fwd(q=q.data_ptr(), q_batch=0, q_row=128, q_head=64, **{**args, "dtype": 0})


def _packed(lens_q, lens_k, head_dim, seed, hq=4, hkv=2):
    """A varlen batch of these sequence lengths, bf16: (cu_q, cu_k, q, k, v), with the allocator
    poisoned for the out and lse to come."""
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    q = kt.randn((sum(lens_q), hq, head_dim), dtype=torch.bfloat16, device="cuda", seed=seed)
    k = kt.randn((sum(lens_k), hkv, head_dim), dtype=torch.bfloat16, device="cuda", seed=seed + 1)
    v = kt.randn((sum(lens_k), hkv, head_dim), dtype=torch.bfloat16, device="cuda", seed=seed + 2)
    kt.poison_allocator("cuda", [q.numel() * 2, 4 * hq * q.shape[0]])
    return cu_q, cu_k, q, k, v


@pytest.mark.parametrize("causal, window", [(False, (-1, -1)), (True, (-1, -1)), (False, (20, 3))])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_varlen_with_empty_sequences(head_dim, causal, window, seed):
    """Packed sequences of lengths that cross tiles, one with no query row, one with no key (its rows:
    0 and -inf); each sequence with its own bottom-right diagonal."""
    lens_q, lens_k = [5, 0, 130, 1, 333, 9], [7, 3, 130, 40, 200, 0]
    cu_q, cu_k, q, k, v = _packed(lens_q, lens_k, head_dim, seed)
    out, lse = kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                              window=window, return_lse=True, backend="cuda")  # fmt: skip
    scale = head_dim**-0.5
    want, want_lse = reference.attention_varlen_fwd(q.double(), k.double(), v.double(), cu_q, cu_k, max(lens_q),
                                                    max(lens_k), scale, causal, *window, 0.0)  # fmt: skip
    kt.assert_matches_oracle(out, want, dtype=torch.bfloat16, name="out")
    _check_lse(lse, want_lse)
    last = slice(int(cu_q[-2]), int(cu_q[-1]))  # the sequence without keys
    assert (out[last] == 0).all() and torch.isinf(lse[:, last]).all()


def test_auto_and_the_cuda_forward_and_backward(seed, monkeypatch):
    """On a GPU with the extension loaded: auto resolves 16-bit calls at the kernels' head dims to
    cuda (but on sm_90 at head dims without a Hopper kernel, where the Triton level's forward is
    faster than the sm80-class one, to triton) and the gradient runs
    the CUDA level's backward; fp32 and other head dims go to triton."""
    pytest.importorskip("triton")
    dev = torch.device("cuda", torch.cuda.current_device())
    assert _cuda.NATIVE.loaded, _cuda.NATIVE.error
    passes = torch.cuda.get_device_capability(dev)[0] in _cuda._AUTO_PASSES
    for dtype in DTYPES:
        for d in HEAD_DIMS:
            auto = "triton" if passes and _cuda.fwd_kernel(dev.index, d) != "sm90" else "cuda"
            assert LEVELS.resolve(None, dev, dtype, d) == auto, (dtype, d)
            assert LEVELS.resolve("cuda", dev, dtype, d) == "cuda"
    assert LEVELS.resolve(None, dev, torch.float32, 128) == "triton"
    assert LEVELS.resolve(None, dev, torch.bfloat16, 80) == "triton"
    with pytest.raises(BackendUnavailable, match="float16 and bfloat16"):
        LEVELS.resolve("cuda", dev, torch.float32, 128)

    calls = []
    real_bwd = _cuda.attention_bwd
    monkeypatch.setattr(_cuda, "attention_bwd", lambda *a, **kw: calls.append(1) or real_bwd(*a, **kw))
    fwd_calls = []
    real_fwd = _cuda.attention_fwd
    monkeypatch.setattr(_cuda, "attention_fwd", lambda *a: fwd_calls.append(1) or real_fwd(*a))
    LEVELS._impls.clear()  # the level functions are looked up once: let the spies be found
    try:
        q, k, v = (t.requires_grad_(True) for t in _qkv(2, 333, 333, 4, 2, 128, torch.bfloat16, seed))
        do = kt.randn(q.shape, dtype=torch.bfloat16, device="cuda", seed=seed + 3)
        out = kp_attention.flash_attn(q, k, v, causal=True, backend="cuda")
        grads = torch.autograd.grad(out, (q, k, v), do)
    finally:
        LEVELS._impls.clear()
    assert fwd_calls and calls, "the CUDA forward, then the CUDA backward"
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want, _ = reference.attention(q64, k64, v64, scale=128**-0.5, causal=True)
    kt.assert_matches_oracle(out, want, dtype=torch.bfloat16, name="out")
    ref = torch.autograd.grad(want, (q64, k64, v64), do.double())
    for name, g, r in zip("qkv", grads, ref):
        kt.assert_matches_oracle(g, r, dtype=torch.bfloat16, name=f"d{name}")


def test_tiles_fit_every_sm80_class_gpu():
    """The tile table (csrc/fwd_tiles.h) as the module reports it: every head dim, smem within the
    99 KB a CTA gets on sm_86 / sm_89."""
    tiles = _cuda.fwd_tiles()
    assert sorted(tiles) == HEAD_DIMS
    for d, t in tiles.items():
        assert t["smem_bytes"] == (t["block_m"] + 2 * t["block_n"]) * d * 2 <= 99 * 1024
