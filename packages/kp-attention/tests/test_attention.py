"""kp-attention against float64 oracles: torch's own SDPA (math) in float64 with an explicit mask
for the options it has (causal aligned bottom-right, windows, GQA), the formula for softcap and lse,
per-sequence calls for varlen; low precision within 2x torch's own error. Bad input raises first."""
import math

import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable
from kp_core import testing as kt

import kp_attention
from kp_attention import reference

F64 = torch.float64


def _qkv(b, sq, sk, hq, hkv, d, dtype, seed):
    q = kt.randn((b, sq, hq, d), dtype=dtype, seed=seed)
    k = kt.randn((b, sk, hkv, d), dtype=dtype, seed=seed + 1)
    v = kt.randn((b, sk, hkv, d), dtype=dtype, seed=seed + 2)
    return q, k, v


def _mask(sq, sk, causal, window, diagonal=None):
    d = sk - sq if diagonal is None else diagonal
    m = reference.visible(sq, sk, causal=causal, window=window, diagonal=d, device="cpu")
    return torch.ones(sq, sk, dtype=torch.bool) if m is None else m


def _torch_sdpa(q, k, v, mask, scale=None):
    """torch's SDPA (math) on [batch, seqlen, heads, dim] tensors with a bool mask [sq, sk]; rows
    that see no key come back as zeros here (torch gives NaN there)."""
    qt, kt_, vt = (t.transpose(1, 2) for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kt_, vt = kt_.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
    out = F.scaled_dot_product_attention(qt, kt_, vt, attn_mask=mask, scale=scale).transpose(1, 2)
    return torch.nan_to_num(out, nan=0.0)


SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim
    (2, 5, 5, 4, 4, 16),
    (1, 3, 7, 4, 2, 8),  # seqlen_q < seqlen_k, GQA 2:1
    (2, 7, 3, 6, 1, 24),  # seqlen_q > seqlen_k (rows above the diagonal see nothing when causal), MQA
    (1, 1, 9, 2, 2, 64),  # one query (decode)
    (1, 13, 11, 3, 3, 96),
]
OPTIONS = [(False, (-1, -1)), (True, (-1, -1)), (False, (2, 1)), (True, (3, 0)), (False, (0, 0)), (False, (-1, 2))]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal, window", OPTIONS, ids=lambda o: str(o))
def test_float64_matches_torch_sdpa_with_its_mask(shape, causal, window, seed):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = _qkv(b, sq, sk, hq, hkv, d, F64, seed)
    out, lse = kp_attention.flash_attn(q, k, v, causal=causal, window=window, return_lse=True)
    mask = _mask(sq, sk, causal, window)
    kt.assert_matches_oracle(out, _torch_sdpa(q, k, v, mask), name="out")
    # lse: the natural-log normalizer of each row's visible scores; -inf and zeros where none
    s = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(hq // hkv, 2)) / math.sqrt(d)
    want = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)
    assert lse.shape == (b, hq, sq)
    seen = mask.any(-1)
    torch.testing.assert_close(lse[..., seen], want[..., seen], rtol=1e-12, atol=1e-12)
    assert torch.isneginf(lse[..., ~seen]).all() and (out[:, ~seen] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("causal, window", OPTIONS[:4], ids=lambda o: str(o))
def test_low_precision_within_twice_torchs_error(dtype, causal, window, seed):
    q, k, v = _qkv(2, 9, 12, 4, 2, 32, dtype, seed)
    mask = _mask(9, 12, causal, window)
    out = kp_attention.flash_attn(q, k, v, causal=causal, window=window)
    want = _torch_sdpa(*(t.double() for t in (q, k, v)), mask)
    kt.assert_matches_oracle(out, want, torch_out=_torch_sdpa(q, k, v, mask), name=f"{dtype} out")


def test_gradients_match_float64_autograd(seed):
    for causal, window in OPTIONS:
        q, k, v = (t.requires_grad_(True) for t in _qkv(2, 6, 9, 4, 2, 16, torch.float32, seed))
        q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
        dy = kt.randn((2, 6, 4, 16), seed=seed + 7)
        out = kp_attention.flash_attn(q, k, v, causal=causal, window=window)
        grads = torch.autograd.grad(out, (q, k, v), dy)
        want = torch.autograd.grad(_torch_sdpa(q64, k64, v64, _mask(6, 9, causal, window)), (q64, k64, v64), dy.double())
        # dq vanishes where a row sees one key (window (0, 0)): the error is measured against |dy|
        for name, g, w in zip("qkv", grads, want):
            kt.assert_matches_oracle(g, w, scale=dy.norm().item(), name=f"d{name} {causal} {window}")


def test_rows_that_see_nothing_give_zeros_and_finite_gradients(seed):
    # seqlen_q > seqlen_k with causal: the first rows sit above the bottom-right diagonal
    q, k, v = (t.requires_grad_(True) for t in _qkv(1, 6, 2, 2, 2, 8, torch.float32, seed))
    out, lse = kp_attention.flash_attn(q, k, v, causal=True, return_lse=True)
    assert (out[:, :4] == 0).all() and torch.isneginf(lse[..., :4]).all() and torch.isfinite(lse[..., 4:]).all()
    for g in torch.autograd.grad(out.square().sum(), (q, k, v)):
        assert torch.isfinite(g).all()
    # no key at all
    q, k, v = _qkv(2, 3, 0, 2, 1, 8, torch.float32, seed)
    out, lse = kp_attention.flash_attn(q, k, v, return_lse=True)
    assert out.shape == q.shape and (out == 0).all() and torch.isneginf(lse).all()


def test_softcap_is_tanh_of_the_scaled_scores(seed):
    q, k, v = _qkv(1, 5, 5, 2, 2, 16, F64, seed)
    out = kp_attention.flash_attn(q, k, v, softcap=2.0, softmax_scale=0.7)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * 0.7
    p = torch.softmax(2.0 * torch.tanh(s / 2.0), dim=-1)
    kt.assert_matches_oracle(out, torch.einsum("bhij,bjhd->bihd", p, v), name="softcap")


def test_qkv_slices_of_one_packed_tensor_and_empty_batches(seed):
    qkv = kt.randn((2, 7, 3, 4, 16), dtype=F64, seed=seed)
    q, k, v = qkv.unbind(2)  # strided views, no copies
    assert not q.is_contiguous()
    out = kp_attention.flash_attn(q, k, v, causal=True)
    kt.assert_matches_oracle(out, _torch_sdpa(q, k, v, _mask(7, 7, True, (-1, -1))), name="packed")
    assert torch.equal(qkv, kt.randn((2, 7, 3, 4, 16), dtype=F64, seed=seed))  # inputs untouched
    for shape in [(0, 4, 4, 2, 2, 8), (2, 0, 4, 2, 2, 8)]:
        out, lse = kp_attention.flash_attn(*_qkv(*shape, torch.float32, seed), return_lse=True)
        assert out.shape == (shape[0], shape[1], 2, 8) and lse.shape == (shape[0], 2, shape[1])


@pytest.mark.parametrize("causal, window", OPTIONS, ids=lambda o: str(o))
def test_varlen_is_each_sequence_on_its_own(causal, window, seed):
    lens_q, lens_k = [3, 0, 5, 1], [4, 2, 5, 0]
    cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32)
    ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32)
    q = kt.randn((sum(lens_q), 4, 16), dtype=F64, seed=seed)
    k = kt.randn((sum(lens_k), 2, 16), dtype=F64, seed=seed + 1)
    v = kt.randn((sum(lens_k), 2, 16), dtype=F64, seed=seed + 2)
    out, lse = kp_attention.flash_attn_varlen(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                              window=window, return_lse=True)  # fmt: skip
    assert out.shape == q.shape and lse.shape == (4, sum(lens_q))
    for b in range(4):
        q0, q1, k0, k1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        o, l_ = kp_attention.flash_attn(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal=causal, window=window,
                                        return_lse=True)  # fmt: skip
        assert torch.equal(out[q0:q1], o[0]) and torch.equal(lse[:, q0:q1], l_[0])


@pytest.mark.parametrize("sq, sk", [(5, 5), (3, 8), (8, 3)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_drop_in_matches_torch(sq, sk, is_causal, seed):
    """[batch, heads, seqlen, dim] as torch takes them; is_causal top-left, as torch's."""
    q = kt.randn((2, 4, sq, 16), dtype=F64, seed=seed)
    k = kt.randn((2, 2, sk, 16), dtype=F64, seed=seed + 1)
    v = kt.randn((2, 2, sk, 16), dtype=F64, seed=seed + 2)
    out = kp_attention.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3, enable_gqa=True)
    kt.assert_matches_oracle(out, torch.nan_to_num(want, nan=0.0), name="sdpa")


def test_compiles_without_a_graph_break(seed):
    q, k, v = _qkv(1, 5, 6, 2, 1, 16, torch.float32, seed)
    fn = kt.compiled(lambda q, k, v: kp_attention.flash_attn(q, k, v, causal=True, window=(2, 0), softcap=5.0))
    torch.testing.assert_close(fn(q, k, v), kp_attention.flash_attn(q, k, v, causal=True, window=(2, 0), softcap=5.0))


def test_bad_input_raises_before_any_work(seed):
    q, k, v = _qkv(1, 4, 4, 4, 2, 16, torch.float32, seed)
    fa = kp_attention.flash_attn
    with pytest.raises(ValueError, match="head_dim 288 is not supported: at most 256"):
        fa(*_qkv(1, 2, 2, 2, 2, 288, torch.float32, seed))
    with pytest.raises(ValueError, match=r"heads_q \(4\) must be a multiple of heads_kv \(3\)"):
        fa(q, *_qkv(1, 4, 4, 4, 3, 16, torch.float32, seed)[1:])
    with pytest.raises(TypeError, match="share a dtype"):
        fa(q, k.half(), v)
    with pytest.raises(ValueError, match="one device"):
        fa(q, k.to("meta"), v)
    with pytest.raises(TypeError, match="must be float16, bfloat16 or float32"):
        fa(q.int(), k.int(), v.int())
    with pytest.raises(ValueError, match="must be 4-D"):
        fa(q[0], k, v)
    with pytest.raises(ValueError, match="causal=True sees no key right of the diagonal"):
        fa(q, k, v, causal=True, window=(4, 2))
    with pytest.raises(ValueError, match="window must be"):
        fa(q, k, v, window=(-2, 0))
    with pytest.raises(ValueError, match="softcap"):
        fa(q, k, v, softcap=-1.0)
    with pytest.raises(BackendUnavailable, match="the CUDA kernels need a CUDA device"):  # CPU tensors
        fa(q, k, v, backend="cuda")
    with pytest.raises(BackendUnavailable, match="the CUDA kernels need a CUDA device"):
        kp_attention.flash_attn_varlen(q[0], k[0], v[0], *[torch.tensor([0, 4], dtype=torch.int32)] * 2, 4, 4,
                                       backend="cuda")  # fmt: skip
    sdpa = kp_attention.scaled_dot_product_attention
    qt, kt_, vt = (t.transpose(1, 2) for t in (q, k, v))
    with pytest.raises(ValueError, match="attn_mask is not supported"):
        sdpa(qt, kt_, vt, attn_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p"):
        sdpa(qt, kt_, vt, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        sdpa(qt, kt_, vt)


def test_bad_cu_seqlens_raise(seed):
    q = kt.randn((6, 2, 8), seed=seed)
    kv = kt.randn((6, 2, 8), seed=seed + 1)
    good = torch.tensor([0, 2, 6], dtype=torch.int32)
    va = kp_attention.flash_attn_varlen
    with pytest.raises(ValueError, match="1-D int32"):
        va(q, kv, kv, good.long(), good, 4, 4)
    with pytest.raises(ValueError, match="rise from 0 to 6"):
        va(q, kv, kv, torch.tensor([0, 4, 2, 6], dtype=torch.int32), torch.tensor([0, 2, 4, 6], dtype=torch.int32), 4, 4)
    with pytest.raises(ValueError, match="rise from 0 to 6"):
        va(q, kv, kv, torch.tensor([0, 2, 5], dtype=torch.int32), good, 4, 4)
    with pytest.raises(ValueError, match="below the longest sequence"):
        va(q, kv, kv, good, good, 3, 4)
    with pytest.raises(ValueError, match="one batch"):
        va(q, kv, kv, good, torch.tensor([0, 6], dtype=torch.int32), 4, 6)


def test_readme_example_runs():
    """The package README's example, as written."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


# ---- the registered ops and their autograd (what the kernel levels run through) ------------------

from kp_attention.attention import ATTENTION  # noqa: E402


def test_registered_ops_pass_opcheck(seed):
    q, k, v = (t.requires_grad_(True) for t in _qkv(1, 5, 7, 4, 2, 16, torch.float32, seed))
    args = (0.25, True, 3, 0, 0.0, 2, False, "reference")
    kt.opcheck(ATTENTION.fwd_op, (q, k, v, *args))
    out, lse = ATTENTION.fwd_op(q, k, v, *args)
    do = kt.randn(out.shape, seed=seed + 3)
    kt.opcheck(ATTENTION.bwd_op, (do, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), *args))


def test_eager_autograd_function_matches_autograd_of_the_formula(seed):
    """ATTENTION.apply (the path kernel levels take with gradients) at the reference level."""
    q, k, v = (t.requires_grad_(True) for t in _qkv(2, 6, 4, 4, 1, 8, torch.float32, seed))
    do = kt.randn((2, 6, 4, 8), seed=seed + 5)
    out, lse = ATTENTION.apply(q, k, v, 0.3, True, -1, -1, 1.5, -2, False, "reference")
    got = torch.autograd.grad(out, (q, k, v), do)
    ref_out, ref_lse = reference.attention(q, k, v, scale=0.3, causal=True, softcap=1.5, diagonal=-2)
    want = torch.autograd.grad(ref_out, (q, k, v), do)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_compiled_forward_and_backward(seed):
    q, k, v = (t.requires_grad_(True) for t in _qkv(1, 5, 6, 2, 1, 16, torch.float32, seed))
    fn = kt.compiled(lambda q, k, v: kp_attention.flash_attn(q, k, v, causal=True, window=(2, 0)))
    out = fn(q, k, v)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    want = kp_attention.flash_attn(q, k, v, causal=True, window=(2, 0))
    for g, w in zip(grads, torch.autograd.grad(want.square().sum(), (q, k, v))):
        torch.testing.assert_close(g, w)


# ---- the public functions at the Triton level (the interpreter on CPU) ----------------------------


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("causal, window, softcap", [(True, (-1, -1), 0.0), (False, (3, 1), 2.5)], ids=str)
def test_triton_level_through_the_public_functions(causal, window, softcap, seed):
    """flash_attn(backend="triton") forward and backward (the registered autograd) and the SDPA
    drop-in, against the reference level on the same inputs."""
    pytest.importorskip("triton")
    dt = torch.float32
    q, k, v = (t.to(_device()).requires_grad_(True) for t in _qkv(2, 9, 12, 4, 2, 16, dt, seed))
    do = kt.randn((2, 9, 4, 16), seed=seed + 9).to(_device())
    got = kp_attention.flash_attn(q, k, v, causal=causal, window=window, softcap=softcap, backend="triton")
    want = kp_attention.flash_attn(q, k, v, causal=causal, window=window, softcap=softcap, backend="reference")
    kt.assert_matches_oracle(got, want.detach().double(), name="out")
    for g, w in zip(torch.autograd.grad(got, (q, k, v), do), torch.autograd.grad(want, (q, k, v), do)):
        kt.assert_matches_oracle(g, w.double(), scale=do.norm().item(), name="grad")
    with torch.no_grad():
        out, lse = kp_attention.flash_attn(q, k, v, causal=causal, window=window, softcap=softcap, return_lse=True,
                                           backend="triton")  # fmt: skip
        ref_out, ref_lse = kp_attention.flash_attn(q, k, v, causal=causal, window=window, softcap=softcap,
                                                   return_lse=True, backend="reference")  # fmt: skip
    seen = torch.isfinite(ref_lse)
    assert torch.equal(seen, torch.isfinite(lse))
    torch.testing.assert_close(lse[seen], ref_lse[seen], rtol=1e-5, atol=1e-5)
    with pytest.raises(BackendUnavailable, match="gradient through the returned lse"):
        kp_attention.flash_attn(q, k, v, return_lse=True, backend="triton")
    qt, kt_, vt = (t.detach().transpose(1, 2) for t in (q, k, v))
    sdpa = kp_attention.scaled_dot_product_attention(qt, kt_, vt, is_causal=causal, enable_gqa=True, backend="triton")
    want = F.scaled_dot_product_attention(qt.double(), kt_.double(), vt.double(), is_causal=causal, enable_gqa=True)
    kt.assert_matches_oracle(sdpa, torch.nan_to_num(want, nan=0.0), name="sdpa")


def test_varlen_ops_pass_opcheck_and_match_autograd(seed):
    from kp_attention.attention import ATTENTION_VARLEN

    cq = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    ck = torch.tensor([0, 4, 6, 6], dtype=torch.int32)
    q = kt.randn((8, 4, 8), seed=seed).requires_grad_(True)
    k, v = (kt.randn((6, 2, 8), seed=seed + i).requires_grad_(True) for i in (1, 2))
    args = (cq, ck, 5, 4, 0.35, True, 2, 0, 1.5, False, "reference")
    kt.opcheck(ATTENTION_VARLEN.fwd_op, (q, k, v, *args))
    out, lse = ATTENTION_VARLEN.apply(q, k, v, *args)
    do = kt.randn(out.shape, seed=seed + 3)
    got = torch.autograd.grad(out, (q, k, v), do)
    want_out = kp_attention.flash_attn_varlen(q, k, v, cq, ck, 5, 4, causal=True, window=(2, 0), softmax_scale=0.35,
                                              softcap=1.5)  # fmt: skip
    torch.testing.assert_close(out, want_out)
    for g, w in zip(got, torch.autograd.grad(want_out, (q, k, v), do)):
        torch.testing.assert_close(g, w)
    kt.opcheck(ATTENTION_VARLEN.bwd_op, (do, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), *args))


def test_varlen_at_the_triton_level_through_the_public_function(seed):
    """flash_attn_varlen(backend="triton"): forward and the registered autograd, against the reference."""
    pytest.importorskip("triton")
    dev = _device()
    cq = torch.tensor([0, 5, 5, 12], dtype=torch.int32, device=dev)
    ck = torch.tensor([0, 3, 9, 16], dtype=torch.int32, device=dev)
    q = kt.randn((12, 4, 16), seed=seed).to(dev).requires_grad_(True)
    k, v = (kt.randn((16, 2, 16), seed=seed + i).to(dev).requires_grad_(True) for i in (1, 2))
    do = kt.randn((12, 4, 16), seed=seed + 3).to(dev)
    opts = dict(causal=True, window=(4, 0), softcap=2.0)
    got = kp_attention.flash_attn_varlen(q, k, v, cq, ck, 7, 7, backend="triton", **opts)
    want = kp_attention.flash_attn_varlen(q, k, v, cq, ck, 7, 7, backend="reference", **opts)
    kt.assert_matches_oracle(got, want.detach().double(), name="out")
    for g, w in zip(torch.autograd.grad(got, (q, k, v), do), torch.autograd.grad(want, (q, k, v), do)):
        kt.assert_matches_oracle(g, w.double(), scale=do.norm().item(), name="grad")
